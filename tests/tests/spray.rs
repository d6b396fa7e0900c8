//! A spray of ever-new keys: more than a million drops, each of a new (namespace, port) key,
//! are every one counted (keyed + overflow = total = what was sent), the keys beyond
//! `--max-keys` show as overflow, dropscope's memory does not grow with the keys sprayed, and
//! `serve`, counting beside, exports no more than `--max-series` label sets whose sum is still
//! every drop. Needs root.
use dropscope_tests::{
    Counting, Netns, keyed_overflow_total, root_test,
    serve::{Serve, get},
    wait::until,
};

/// Namespaces sprayed: each sends one datagram to every closed UDP port (65,533 or 65,534 of
/// them: its own source ports left out), so 16 give over 1,048,000 distinct keys of
/// `--by netns,port`.
const SPACES: usize = 16;

/// What dropscope's heap may grow by while a million keys are sprayed at the default
/// `--max-keys`: the key map it reads is bounded, so the growth is that of its own tables for
/// 10,240 keys (docs/benchmark.md gives the whole resident set).
const GROWTH_BOUND_KB: u64 = 16 * 1024;

/// A field of /proc/PID/status, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// The label sets `serve` may export of its own (its labels have no port, so the spray's keys
/// make one label set per namespace: fewer than them are allowed), besides `reason="other"`
/// and `reason="overflow"`.
const MAX_SERIES: usize = 8;

#[test]
fn a_spray_of_a_million_keys_is_counted_exactly_in_bounded_memory() {
    let _serial = root_test();
    let spaces: Vec<Netns> = (0..SPACES)
        .map(|i| Netns::new(&format!("spray{i}")))
        .collect();
    // Only NO_SOCKET is counted, so other drops on the machine cannot blur the total.
    let c = Counting::start(&[
        "report",
        "--format",
        "json",
        "--by",
        "reason,location,netns,port",
        "--reason",
        "NO_SOCKET",
        "--no-stacks",
    ]);
    let serve = Serve::start(&[
        "--by",
        "reason,location,netns,port",
        "--reason",
        "NO_SOCKET",
        "--no-stacks",
        "--max-series",
        &MAX_SERIES.to_string(),
    ]);
    // The heap once counting (a poll has run), before any key exists: `serve`, started after
    // the report and polling on the same schedule, has published its first snapshot by then.
    until("serve's first snapshot", || {
        get(serve.port, "/metrics", "text/plain").0 == 200
    });
    let heap_before = status_kb(c.pid(), "RssAnon");
    // First 640 ports in each namespace (16 x 640 = the 10,240 keys the map holds, so every
    // namespace has keys), then the rest of the ports: overflow.
    let mut sent = 0u64;
    for (first, last) in [("1", "640"), ("641", "65535")] {
        for ns in &spaces {
            let out = ns.traffic(&["udp-spray", first, last]);
            sent += out
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("udp-spray printed {out:?}"));
        }
    }
    assert!(sent > 1_000_000, "only {sent} datagrams sent");
    // Until a poll has read the maps at their fullest: serve's series sum to every drop sent
    // (the report polls on the same schedule).
    let mut series = Vec::new();
    until("serve's series summing to every drop sent", || {
        series = serve.drops();
        series.iter().map(|(_, n)| n).sum::<u64>() >= sent
    });
    let (heap_after, peak) = (status_kb(c.pid(), "RssAnon"), status_kb(c.pid(), "VmHWM"));
    drop(serve);
    let out = c.interrupt();
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    let (keyed, overflow, total) = keyed_overflow_total(&report);
    let keys = report["drops"].as_array().expect("drops").len() as u64;
    eprintln!(
        "sent {sent}; keys {keys}, keyed {keyed} + overflow {overflow} = total {total}; \
         heap {heap_before} kB before, {heap_after} kB after; peak RSS {peak} kB"
    );
    assert_eq!(keyed + overflow, total, "the invariant");
    assert_eq!(
        total, sent,
        "every datagram sent is one NO_SOCKET drop counted"
    );
    // Every key the kernel map holds is one (namespace, port) with exactly one drop, and the map
    // is full: the rest is overflow, shown as such.
    assert_eq!(
        keys,
        u64::from(dropscope_common::DEFAULT_MAX_KEYS),
        "a full key map"
    );
    assert_eq!(keyed, keys, "one drop per key");
    assert_eq!(overflow, sent - keys);
    // serve: at most --max-series label sets of their own, and still every drop.
    let exported: u64 = series.iter().map(|(_, n)| n).sum();
    eprintln!("serve: {} series summing to {exported}", series.len());
    assert!(series.len() <= MAX_SERIES + 2, "{series:#?}");
    assert!(
        series.iter().any(|(l, _)| l.contains("reason=\"other\"")),
        "the label sets beyond --max-series are summed as reason=\"other\": {series:#?}"
    );
    assert_eq!(exported, sent, "serve's series sum to every drop");
    assert!(
        heap_after <= heap_before + GROWTH_BOUND_KB,
        "the heap grew from {heap_before} kB to {heap_after} kB"
    );
}
