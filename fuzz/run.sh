#!/bin/sh
# Fuzzes the recording decoder for a bounded time: fuzz/run.sh [SECONDS] (default 60).
# Needs a nightly toolchain for -Zsanitizer=address: by default the one the eBPF crate is pinned
# to (dropscope-ebpf/toolchain.txt, installed by the set-up); FUZZ_TOOLCHAIN overrides it. Installs
# cargo-fuzz when missing. Exits non-zero, leaving the input in fuzz/artifacts/decode/, when the
# target panics, runs out of memory or hangs.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
toolchain=${FUZZ_TOOLCHAIN:-$(cat dropscope-ebpf/toolchain.txt)}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
corpus=fuzz/corpus/decode
mkdir -p "$corpus"
# Seeds: the sample recordings, read as is (mode byte 0) and with checksums fixed (1).
for f in assets/*.dsrec; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .dsrec)
    printf '\000' | cat - "$f" >"$corpus/seed-$name-0"
    printf '\001' | cat - "$f" >"$corpus/seed-$name-1"
done
exec cargo +"$toolchain" fuzz run decode "$corpus" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
