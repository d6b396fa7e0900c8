//! The reason guide and the kernel's own drop counters beside the probe's counts, against the
//! real kernel: `nstat` (iproute2) is the independent reference. Needs root.
//!
//! Each test makes drops in one private namespace of its own; drops are grouped by namespace
//! (the default `--by`), so each is compared with its own namespace's counters.
use std::{os::unix::fs::MetadataExt, process::Command, time::Duration};

use dropscope_tests::{
    Counting, Netns, count, dropscope_bin,
    listen::{overflow_accept_queue, overflow_accept_queue_then},
    root_test, run,
};

/// The namespace's inode number, as the report names it.
fn inode(ns: &Netns) -> u64 {
    std::fs::metadata(format!("/run/netns/{}", ns.name))
        .expect("the namespace's file")
        .ino()
}

/// `nstat`'s absolute value of one counter inside the namespace (`UdpNoPorts` style name).
fn nstat(ns: &Netns, name: &str) -> u64 {
    let out = ns.exec(&["nstat", "-saz", name]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(name)).then(|| f.next().and_then(|v| v.parse().ok()))?
        })
        .unwrap_or_else(|| panic!("nstat printed no {name}: {text}"))
}

fn kernel_delta(report: &serde_json::Value, netns: u64, counter: &str) -> u64 {
    report["kernel_counters"]
        .as_array()
        .expect("kernel_counters array")
        .iter()
        .filter(|c| c["netns"] == netns && c["counter"] == counter)
        .map(|c| c["delta"].as_u64().expect("delta"))
        .sum()
}

fn unseen(report: &serde_json::Value, netns: u64, counter: &str) -> u64 {
    report["unseen"]
        .as_array()
        .expect("unseen array")
        .iter()
        .filter(|c| c["netns"] == netns && c["counter"] == counter)
        .map(|c| c["count"].as_u64().expect("count"))
        .sum()
}

/// The probe's count of `reason` that the documented rule attributes to `netns`.
fn attributed(report: &serde_json::Value, reason: &str, netns: u64) -> u64 {
    report["drops"]
        .as_array()
        .expect("drops")
        .iter()
        .filter(|d| d["reason"] == reason && d["netns"] == netns)
        .map(|d| d["count"].as_u64().expect("count"))
        .sum()
}

#[test]
fn udp_to_a_closed_port_matches_udp_noports() {
    let _serial = root_test();
    let ns = Netns::new("noports");
    let ino = inode(&ns);
    let before = nstat(&ns, "UdpNoPorts");
    let c = Counting::start(&["report", "--format", "json"]);
    ns.traffic(&["udp", "9", "1000"]);
    let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    let reference = nstat(&ns, "UdpNoPorts") - before;

    // Only this namespace sends UDP to a closed port in the window, so every NO_SOCKET drop at
    // __udp4_lib_rcv is one of its datagrams, whatever namespace the drop key names.
    let seen = count(&report, "NO_SOCKET", "__udp4_lib_rcv+");
    let delta = kernel_delta(&report, ino, "Udp:NoPorts");
    eprintln!("Udp:NoPorts: nstat {reference}, dropscope {delta}, NO_SOCKET seen {seen}");
    assert_eq!(reference, 1000, "nstat saw the datagrams");
    assert_eq!(delta, reference, "Udp:NoPorts delta vs nstat: {report:#}");
    assert_eq!(
        delta, seen,
        "Udp:NoPorts delta vs NO_SOCKET count: {report:#}"
    );
    let row = report["kernel_counters"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["counter"] == "Udp:NoPorts"))
        .expect("Udp:NoPorts row");
    assert_eq!(row["reasons"][0], "NO_SOCKET", "{row:#}");
    assert_eq!(
        attributed(&report, "NO_SOCKET", ino),
        seen,
        "the drops carry the namespace: {report:#}"
    );
    assert_eq!(
        unseen(&report, ino, "Udp:NoPorts"),
        0,
        "every NoPorts drop was seen: {report:#}"
    );
    assert!(
        report["drops"][0]["hint"]
            .as_str()
            .is_some_and(|h| h.len() > 40),
        "every drop has a hint: {report:#}"
    );
}

#[test]
fn a_full_accept_queue_shows_listen_drops_and_unseen_drops() {
    let _serial = root_test();
    let ns = Netns::new("listen");
    let ino = inode(&ns);
    let before = nstat(&ns, "TcpExtListenDrops");
    let c = Counting::start(&["report", "--format", "json"]);
    overflow_accept_queue(&ns, 0, 50);
    // Let the closes and resets finish before the window ends.
    std::thread::sleep(Duration::from_millis(200));
    let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    let reference = nstat(&ns, "TcpExtListenDrops") - before;

    let delta = kernel_delta(&report, ino, "TcpExt:ListenDrops");
    eprintln!(
        "ListenDrops: nstat {reference}, dropscope {delta}, unseen {}, TCP_LISTEN_OVERFLOW seen {}",
        unseen(&report, ino, "TcpExt:ListenDrops"),
        count(&report, "TCP_LISTEN_OVERFLOW", "")
    );
    assert!(reference > 0, "the accept queue did not overflow");
    assert_eq!(
        delta, reference,
        "TcpExt:ListenDrops delta vs nstat: {report:#}"
    );
    // Refused SYNs are consumed, not dropped: the probe cannot see them.
    let expected = delta - attributed(&report, "TCP_LISTEN_OVERFLOW", ino);
    assert!(expected > 0, "{report:#}");
    assert_eq!(
        unseen(&report, ino, "TcpExt:ListenDrops"),
        expected,
        "{report:#}"
    );
    // Unseen drops never enter the exact counts.
    let keyed: u64 = report["drops"]
        .as_array()
        .expect("drops")
        .iter()
        .map(|d| d["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(
        keyed + report["overflow"].as_u64().expect("overflow"),
        report["total"]
    );
}

/// A full accept queue is a row of its own: reason `TcpExt:ListenDrops`, location `(counter
/// only)`, in the namespace, counting what `nstat` counted less what the probe saw as drops
/// (never both), in the JSON report and the text one, outside the probe's total.
#[test]
fn a_full_accept_queue_is_a_counter_only_row_in_json_and_text() {
    let _serial = root_test();
    let ns = Netns::new("cq");
    let ino = inode(&ns);
    let before = nstat(&ns, "TcpExtListenDrops");
    let json = Counting::start(&["report", "--format", "json"]);
    let text = Counting::start(&["report"]);
    overflow_accept_queue(&ns, 1, 40);
    std::thread::sleep(Duration::from_millis(200));
    let report: serde_json::Value = serde_json::from_str(&json.interrupt()).expect("JSON report");
    let text = text.interrupt();
    let reference = nstat(&ns, "TcpExtListenDrops") - before;
    assert!(reference > 0, "the accept queue did not overflow");
    let seen = attributed(&report, "TCP_LISTEN_OVERFLOW", ino);
    let rows: Vec<&serde_json::Value> = report["counter_only"]
        .as_array()
        .expect("counter_only rows")
        .iter()
        .filter(|r| r["netns"] == ino)
        .collect();
    eprintln!("ListenDrops: nstat {reference}, TCP_LISTEN_OVERFLOW seen {seen}: {rows:#?}");
    // One row: ListenOverflows lies within ListenDrops and is not a row of its own.
    assert_eq!(rows.len(), 1, "{report:#}");
    let row = rows[0];
    assert_eq!(row["reason"], "TcpExt:ListenDrops", "{row:#}");
    assert_eq!(row["location"], "(counter only)", "{row:#}");
    assert_eq!(row["protocol"], "tcp", "{row:#}");
    assert_eq!(row["count"], reference - seen, "{report:#}");
    // The probe's total stays its own.
    let keyed: u64 = (report["drops"].as_array().expect("drops").iter())
        .map(|d| d["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(
        keyed + report["overflow"].as_u64().expect("overflow"),
        report["total"]
    );
    // The text report has the row too, in its own table.
    let line = (text.lines())
        .find(|l| l.contains("TcpExt:ListenDrops") && l.contains("(counter only)"))
        .unwrap_or_else(|| panic!("no counter-only row in {text}"));
    assert!(
        line.split_whitespace()
            .any(|w| w == (reference - seen).to_string()),
        "{line}\n{text}"
    );
}

/// The row names the listener whose accept queue is full, and this process holding it (the
/// listener stays open, its queue full, until both reports have ended).
#[test]
fn a_full_accept_queue_row_names_its_listener_and_process() {
    let _serial = root_test();
    let ns = Netns::new("cl");
    let ino = inode(&ns);
    let json = Counting::start(&["report", "--format", "json"]);
    let text = Counting::start(&["report"]);
    let (port, report, text) = overflow_accept_queue_then(&ns, 1, 40, |port| {
        std::thread::sleep(Duration::from_millis(200));
        let report: serde_json::Value =
            serde_json::from_str(&json.interrupt()).expect("JSON report");
        (port, report, text.interrupt())
    });
    let pid = std::process::id();
    let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
    let comm = comm.trim_end();
    let row = (report["counter_only"]
        .as_array()
        .expect("counter_only rows")
        .iter())
    .find(|r| r["netns"] == ino && r["reason"] == "TcpExt:ListenDrops")
    .unwrap_or_else(|| panic!("no ListenDrops row: {report:#}"));
    let listeners = row["listeners"].as_array().expect("listeners");
    assert_eq!(listeners.len(), 1, "{row:#}");
    let l = &listeners[0];
    assert_eq!(l["addr"], format!("127.0.0.1:{port}"), "{row:#}");
    assert_eq!(
        (&l["port"], &l["pid"]),
        (&port.into(), &pid.into()),
        "{row:#}"
    );
    assert_eq!(l["comm"], comm, "{row:#}");
    assert_eq!(l["backlog"], 1, "{row:#}");
    assert!(l["accept_queue"].as_u64().expect("queue") > 1, "{row:#}");
    let detail = format!("listener 127.0.0.1:{port} {comm}[{pid}] accept queue ");
    assert!(
        l["detail"].as_str().is_some_and(|d| d.starts_with(&detail)),
        "{row:#}"
    );
    // The text report names it under its table.
    let line = (text.lines())
        .find(|l| l.contains("TcpExt:ListenDrops") && l.contains(&detail))
        .unwrap_or_else(|| panic!("no listener line in {text}"));
    assert!(line.contains(&ino.to_string()), "{line}");
}

#[test]
fn every_reason_of_this_kernel_has_a_guide_entry() {
    let out = run(Command::new(dropscope_bin()).args(["reasons", "--format", "json"]));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = rows.as_array().expect("array");
    assert!(rows.len() > 60, "{rows:?}");
    for r in rows {
        let summary = r["summary"].as_str().expect("summary");
        assert_ne!(summary, "not in dropscope's reason guide", "{r}");
    }
    // The whole entry, for a few (each run reads the kernel's BTF).
    let first = rows[0]["name"].as_str().expect("name");
    let last = rows[rows.len() - 1]["name"].as_str().expect("name");
    for name in [first, "NO_SOCKET", "TCP_LISTEN_OVERFLOW", last] {
        let r = rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {rows:?}"));
        let summary = r["summary"].as_str().expect("summary");
        let text = run(Command::new(dropscope_bin()).args(["explain", name]));
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.starts_with(&format!("{name}: {summary}")), "{text}");
        assert!(!text.contains("no entry for"), "{text}");
    }
}

#[test]
fn a_misspelt_reason_filter_is_refused_with_the_closest_names() {
    let _serial = root_test();
    for flag in ["--reason", "--exclude-reason"] {
        let out = Command::new(dropscope_bin())
            .args([
                "report",
                "--duration",
                "1s",
                flag,
                "NO_SOCKET,TCP_LISTEN_OVRFLOW",
            ])
            .output()
            .expect("running dropscope");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(out.stdout.is_empty(), "{flag}: no report");
        assert!(
            err.contains("\"TCP_LISTEN_OVRFLOW\"")
                && err.contains("did you mean TCP_LISTEN_OVERFLOW"),
            "{flag}: {err}"
        );
        assert!(
            !err.contains("counting drops"),
            "refused before counting: {err}"
        );
    }
}
