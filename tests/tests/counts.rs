//! Exact counts of real drops of several reasons, generated in a namespace of the test's own.
//! Needs root.
mod common;

use dropscope_tests::{Counting, Netns, count, keyed_overflow_total, root_test};

#[test]
fn report_counts_exactly_the_drops_generated() {
    let _serial = root_test();
    let ns = Netns::new("counts");
    // An nftables rule that drops UDP to port 7777 inside the namespace only.
    ns.exec(&["nft", "add table inet dstest"]);
    ns.exec(&[
        "nft",
        "add chain inet dstest input { type filter hook input priority 0 ; }",
    ]);
    ns.exec(&["nft", "add rule inet dstest input udp dport 7777 drop"]);

    let c = Counting::start(&["report", "--format", "json"]);
    ns.traffic(&["udp", "9", "1000"]);
    ns.traffic(&["tcp", "1", "300"]);
    ns.traffic(&["raw", "253", "700"]);
    ns.traffic(&["udp", "7777", "400"]);
    let rcvbuf: u64 = ns
        .traffic(&["rcvbuf", "500"])
        .parse()
        .expect("rcvbuf drops");
    let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");

    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv+"),
        1000,
        "{report:#}"
    );
    assert_eq!(
        count(&report, "NO_SOCKET", "tcp_v4_rcv+"),
        300,
        "{report:#}"
    );
    assert_eq!(count(&report, "IP_NOPROTO", ""), 700, "{report:#}");
    assert_eq!(count(&report, "NETFILTER_DROP", ""), 400, "{report:#}");
    assert!(rcvbuf > 0, "the tiny receive buffer dropped nothing");
    assert_eq!(count(&report, "SOCKET_RCVBUFF", ""), rcvbuf, "{report:#}");

    let (keyed, overflow, total) = keyed_overflow_total(&report);
    assert_eq!(overflow, 0);
    assert_eq!(keyed + overflow, total, "keyed + overflow must equal total");
    assert!(
        common::dropscope_programs().is_empty(),
        "programs left attached"
    );
    let name = ns.name.clone();
    drop(ns);
    assert!(!Netns::exists(&name), "namespace left behind");
}

#[test]
fn a_full_keyed_map_counts_the_rest_as_overflow() {
    let _serial = root_test();
    let ns = Netns::new("overflow");
    // Two keys fit; UDP, TCP and raw drops make three keys (plus any background drops).
    let c = Counting::start(&["report", "--format", "json", "--max-keys", "2"]);
    ns.traffic(&["udp", "9", "100"]);
    ns.traffic(&["tcp", "1", "100"]);
    ns.traffic(&["raw", "253", "100"]);
    let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    let drops = report["drops"].as_array().expect("drops");
    assert!(drops.len() <= 2, "{report:#}");
    let (keyed, overflow, total) = keyed_overflow_total(&report);
    assert!(
        overflow >= 100,
        "the third key's drops must be overflow: {report:#}"
    );
    assert!(total >= 300, "{report:#}");
    assert_eq!(
        keyed + overflow,
        total,
        "keyed + overflow must equal total: {report:#}"
    );
}

#[test]
fn report_with_a_duration_stops_by_itself_and_prints_a_table() {
    let _serial = root_test();
    let ns = Netns::new("table");
    let c = Counting::start(&["report", "--duration", "3s"]);
    ns.traffic(&["udp", "9", "250"]);
    let out = c.wait();
    let line = out
        .lines()
        .find(|l| l.starts_with("NO_SOCKET") && l.contains("__udp4_lib_rcv+"))
        .unwrap_or_else(|| panic!("no NO_SOCKET row in:\n{out}"));
    // REASON LOCATION NETNS DEVICE COUNT SHARE: the row names its namespace.
    let fields: Vec<_> = line.split_whitespace().collect();
    assert_eq!(fields[fields.len() - 2], "250", "{out}");
    assert!(fields.contains(&ns.name.as_str()), "{out}");
    assert!(out.contains("total "), "{out}");
}

#[test]
fn the_classic_tracepoint_counts_the_same() {
    let _serial = root_test();
    let ns = Netns::new("classic");
    let mounts_before = tracefs_mounts();
    // One reason left out: the reason filter's bitmap in the read-only settings, a load this
    // kernel's verifier must accept with the classic tracepoint too.
    let c = Counting::start(&[
        "report",
        "--format",
        "json",
        "--probe",
        "tracepoint",
        "--exclude-reason",
        "IP_NOPROTO",
    ]);
    ns.traffic(&["udp", "9", "321"]);
    ns.traffic(&["tcp", "1", "30"]);
    ns.traffic(&["raw", "253", "40"]);
    let rcvbuf: u64 = ns
        .traffic(&["rcvbuf", "200"])
        .parse()
        .expect("rcvbuf drops");
    let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv+"),
        321,
        "{report:#}"
    );
    assert_eq!(count(&report, "NO_SOCKET", "tcp_v4_rcv+"), 30, "{report:#}");
    assert_eq!(count(&report, "IP_NOPROTO", ""), 0, "{report:#}");
    assert!(rcvbuf > 0, "the tiny receive buffer dropped nothing");
    assert_eq!(count(&report, "SOCKET_RCVBUFF", ""), rcvbuf, "{report:#}");
    let (keyed, overflow, total) = keyed_overflow_total(&report);
    assert_eq!(keyed + overflow, total, "{report:#}");
    // A tracefs that dropscope mounted itself is unmounted again.
    assert_eq!(tracefs_mounts(), mounts_before);
}

fn tracefs_mounts() -> usize {
    std::fs::read_to_string("/proc/self/mounts")
        .expect("mounts")
        .lines()
        .filter(|l| l.contains(" tracefs "))
        .count()
}

/// Runs `dropscope <args>` in a private mount namespace without tracefs and returns how many
/// tracefs mounts that namespace has afterwards.
fn tracefs_mounts_after(args: &str) -> String {
    let script = format!(
        "umount -l /sys/kernel/tracing 2>/dev/null; umount -l /sys/kernel/debug/tracing 2>/dev/null; \
         {bin} {args} >/dev/null 2>&1 || echo FAILED; grep -c ' tracefs ' /proc/self/mounts || true",
        bin = dropscope_tests::dropscope_bin().display()
    );
    let out = dropscope_tests::run(std::process::Command::new("unshare").args([
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_tracefs_mounted_for_the_classic_tracepoint_is_unmounted_again() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = dir.path().join("r.dsrec");
    assert_eq!(
        tracefs_mounts_after("report --probe tracepoint --duration 1s"),
        "0"
    );
    let record = format!(
        "record --probe tracepoint --duration 1s -o {}",
        rec.display()
    );
    assert_eq!(tracefs_mounts_after(&record), "0");
    assert!(rec.exists(), "the recording was not written");
}

#[test]
fn interleaved_keys_on_busy_cpus_are_counted_exactly() {
    let _serial = root_test();
    let ns = Netns::new("interleave");
    let c = Counting::start(&["report", "--format", "json", "--interval", "100ms"]);
    // Two senders at once: each CPU sees runs of one key broken by the other, so the per-CPU
    // pending runs are moved into the keyed map over and over while the collector reads.
    std::thread::scope(|s| {
        s.spawn(|| ns.traffic(&["udp", "9", "60000"]));
        s.spawn(|| ns.traffic(&["raw", "253", "40000"]));
        s.spawn(|| ns.traffic(&["tcp", "1", "2000"]));
    });
    let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv+"),
        60000,
        "{report:#}"
    );
    assert_eq!(count(&report, "IP_NOPROTO", ""), 40000, "{report:#}");
    assert_eq!(
        count(&report, "NO_SOCKET", "tcp_v4_rcv+"),
        2000,
        "{report:#}"
    );
    let (keyed, overflow, total) = keyed_overflow_total(&report);
    assert_eq!(keyed + overflow, total, "{report:#}");
}
