#!/bin/sh
# Fuzzes the recording decoder and the history reader for a bounded time: fuzz/run.sh [SECONDS]
# (default 60, shared: two thirds to the decoder, a third to the history's segments).
# Needs a nightly toolchain for -Zsanitizer=address: by default the one the eBPF crate is pinned
# to (dropscope-ebpf/toolchain.txt, installed by the set-up); FUZZ_TOOLCHAIN overrides it. Installs
# cargo-fuzz when missing. Exits non-zero, leaving the input in fuzz/artifacts/TARGET/, when a
# target panics, runs out of memory or hangs.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
toolchain=${FUZZ_TOOLCHAIN:-$(cat dropscope-ebpf/toolchain.txt)}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
mkdir -p fuzz/corpus/decode fuzz/corpus/history
# Seeds: the sample recordings, read as is (mode byte 0) and with checksums fixed (1); for the
# history, each as one segment (its length in two bytes, little-endian, then the mode byte).
for f in assets/*.dsrec; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .dsrec)
    printf '\000' | cat - "$f" >"fuzz/corpus/decode/seed-$name-0"
    printf '\001' | cat - "$f" >"fuzz/corpus/decode/seed-$name-1"
    len=$(($(wc -c <"$f") + 1))
    if [ "$len" -le 65533 ]; then
        lo=$(printf '%03o' $((len % 256)))
        hi=$(printf '%03o' $((len / 256)))
        printf "\\$lo\\$hi\\000" | cat - "$f" >"fuzz/corpus/history/seed-$name"
    fi
done
history=$((secs / 3))
decode=$((secs - history))
fuzz() {
    cargo +"$toolchain" fuzz run "$1" "fuzz/corpus/$1" -- \
        -max_total_time="$2" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
}
fuzz decode "$decode"
if [ "$history" -gt 0 ]; then
    fuzz history "$history"
fi
