//! Which packets: drops in two namespaces joined by a veth pair are attributed to the right
//! namespace, interface and protocol with exact counts, and each in-kernel filter counts exactly
//! its share. Needs root.
use std::{os::unix::fs::MetadataExt as _, process::Command};

use dropscope_tests::{Counting, Netns, root_test, run, veth_pair};

/// Sum of the counts of rows matching every given field (JSON values compared as given).
fn sum(report: &serde_json::Value, want: &[(&str, serde_json::Value)]) -> u64 {
    report["drops"]
        .as_array()
        .expect("drops array")
        .iter()
        .filter(|d| want.iter().all(|(f, v)| d[*f] == *v))
        .map(|d| d["count"].as_u64().expect("count"))
        .sum()
}

fn inode(ns: &Netns) -> u64 {
    std::fs::metadata(format!("/run/netns/{}", ns.name))
        .expect("namespace file")
        .ino()
}

#[test]
fn drops_are_attributed_to_namespace_interface_and_protocol_and_filtered_in_the_kernel() {
    let _serial = root_test();
    let a = Netns::new("attr-a");
    let b = Netns::new("attr-b");
    // A veth pair: va in A (10.77.0.1), vb in B (10.77.0.2).
    let (_, vb) = veth_pair(&a, &b, "10.77.0");
    let (ia, ib) = (inode(&a), inode(&b));
    let b_path = format!("/run/netns/{}", b.name);

    let grouped = Counting::start(&[
        "report",
        "--format",
        "json",
        "--by",
        "reason,location,netns,device,protocol,port",
    ]);
    let filtered: Vec<(&str, Vec<String>)> = vec![
        ("netns B by name", vec!["--netns".into(), b.name.clone()]),
        (
            "netns A by inode, tcp",
            vec![
                "--netns".into(),
                ia.to_string(),
                "--protocol".into(),
                "tcp".into(),
            ],
        ),
        ("device vb", vec!["--device".into(), vb.clone()]),
        (
            "netns B by path, port 9",
            vec![
                "--netns".into(),
                b_path.clone(),
                "--port".into(),
                "9".into(),
            ],
        ),
        (
            "netns A, reason IP_NOPROTO",
            vec![
                "--netns".into(),
                a.name.clone(),
                "--reason".into(),
                "IP_NOPROTO".into(),
            ],
        ),
        (
            "netns A, all but NO_SOCKET",
            vec![
                "--netns".into(),
                a.name.clone(),
                "--exclude-reason".into(),
                "NO_SOCKET".into(),
            ],
        ),
    ];
    let filters: Vec<(&str, Counting)> = filtered
        .iter()
        .map(|(what, args)| {
            let mut all = vec!["report", "--format", "json"];
            all.extend(args.iter().map(String::as_str));
            (*what, Counting::start(&all))
        })
        .collect();

    // Over the veth: A sends UDP to a closed port of B (dropped in B, on vb).
    a.exec(&[
        dropscope_tests::traffic_bin().to_str().expect("utf-8"),
        "udp-to",
        "10.77.0.2",
        "9",
        "300",
    ]);
    // Over B's loopback: UDP to a closed port.
    b.traffic(&["udp", "9", "200"]);
    // In A: TCP SYNs to a closed port, and raw packets of an unused protocol.
    a.traffic(&["tcp", "1", "50"]);
    a.traffic(&["raw", "253", "40"]);

    let report: serde_json::Value =
        serde_json::from_str(&grouped.interrupt()).expect("JSON report");
    let udp = || serde_json::json!("udp");
    let rows = [
        (ib, "vb", "udp", 9, 300, "NO_SOCKET"),
        (ib, "lo", "udp", 9, 200, "NO_SOCKET"),
        (ia, "lo", "tcp", 1, 50, "NO_SOCKET"),
    ];
    for (ns, dev, proto, port, n, reason) in rows {
        assert_eq!(
            sum(
                &report,
                &[
                    ("netns", ns.into()),
                    ("device", dev.into()),
                    ("protocol", proto.into()),
                    ("port", port.into()),
                    ("reason", reason.into()),
                ]
            ),
            n,
            "{ns} {dev} {proto} {port}: {report:#}"
        );
    }
    assert_eq!(
        sum(
            &report,
            &[
                ("netns", ia.into()),
                ("reason", "IP_NOPROTO".into()),
                ("protocol", "253".into()),
            ]
        ),
        40,
        "{report:#}"
    );
    assert_eq!(sum(&report, &[("netns", ib.into())]), 500, "{report:#}");
    assert_eq!(
        sum(&report, &[("netns", ia.into()), ("protocol", udp())]),
        0
    );
    for d in report["drops"].as_array().expect("drops") {
        if d["netns"] == ia || d["netns"] == ib {
            let name = d["netns_name"].as_str().unwrap_or_default();
            assert!(
                name == a.name || name == b.name,
                "a namespace made with `ip netns add` is named so: {d}"
            );
        }
    }

    let expected = [300 + 200, 50, 300, 500, 40, 40];
    for ((what, c), want) in filters.into_iter().zip(expected) {
        let r: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
        assert_eq!(r["total"].as_u64(), Some(want), "{what}: {r:#}");
        let keyed: u64 = sum(&r, &[]);
        assert_eq!(
            keyed + r["overflow"].as_u64().expect("overflow"),
            want,
            "{what}"
        );
        // Without --by, the protocol is kept (read through the typed header on 6.2+) and the
        // port is not.
        let by_protocol = match what {
            "netns B by name" | "device vb" | "netns B by path, port 9" => {
                sum(&r, &[("protocol", udp())])
            }
            "netns A by inode, tcp" => sum(&r, &[("protocol", "tcp".into())]),
            _ => sum(&r, &[("protocol", "253".into())]),
        };
        assert_eq!(by_protocol, want, "{what}: {r:#}");
        let drops = r["drops"].as_array().expect("drops");
        assert!(
            drops.iter().all(|d| d.get("port").is_none()),
            "{what}: {r:#}"
        );
    }
}

/// A process that renames itself in a namespace named after it (`COMM[PID]`), while new
/// namespaces make dropscope scan (and so name) namespaces again: its drops stay one key. A
/// window of the recording sums to the window's total, and the namespace is one row, with the
/// exact count, whatever names it had.
#[test]
fn a_process_renaming_itself_makes_no_new_keys() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("temp dir");
    let rec = dir.path().join("renames.dsrec");
    let rec_s = rec.to_str().expect("utf-8 path");
    let traffic = dropscope_tests::traffic_bin();
    let traffic = traffic.to_str().expect("utf-8 path");
    let recording = Counting::start(&[
        "record",
        "-o",
        rec_s,
        "--by",
        "reason,location,netns",
        "--reason",
        "NO_SOCKET",
    ]);
    // 20 rounds of: rename, 10 drops, and a short-lived namespace with one drop of its own.
    let script = format!(
        "ip link set lo up; for i in $(seq 1 20); do printf 'ren%s' $i > /proc/$$/comm; \
         {traffic} udp 9 10 || exit 1; \
         ip netns add dsren-$$-$i && ip -n dsren-$$-$i link set lo up && \
         ip netns exec dsren-$$-$i {traffic} udp 9 1; \
         ip netns del dsren-$$-$i; sleep 0.25; done"
    );
    let renamer = run(Command::new("unshare").args(["-n", "sh", "-c", &script]));
    assert!(renamer.status.success());
    // Ended once a frame written down has every drop: 20 rounds of 10 and 1.
    dropscope_tests::wait::wait_recorded(dir.path(), "the 220 drops recorded", |r| {
        r["total"].as_u64().is_some_and(|t| t >= 220)
    });
    recording.interrupt();

    let report = |extra: &[&str]| {
        let mut args = vec!["report", "--input", rec_s, "--format", "json"];
        args.extend_from_slice(extra);
        dropscope_tests::json_output(Command::new(dropscope_tests::dropscope_bin()).args(&args))
    };
    let renamed_rows = |r: &serde_json::Value| -> Vec<u64> {
        (r["drops"].as_array().expect("drops").iter())
            .filter(|d| {
                d["netns_name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("ren"))
            })
            .map(|d| d["count"].as_u64().expect("count"))
            .collect()
    };
    let whole = report(&[]);
    assert_eq!(
        renamed_rows(&whole),
        [200],
        "one row, every drop: {whole:#}"
    );
    for from in ["1", "2", "3"] {
        let window = report(&["--from", from]);
        let (keyed, overflow, total) = dropscope_tests::keyed_overflow_total(&window);
        assert_eq!(keyed + overflow, total, "from {from}s: {window:#}");
        let rows = renamed_rows(&window);
        assert!(rows.len() <= 1, "from {from}s: {window:#}");
        assert!(rows.iter().sum::<u64>() < 200, "from {from}s: {window:#}");
    }
}

/// Through both hooks, the typed one and the classic tracepoint (whose attribution reads the
/// packet with `bpf_probe_read_kernel`): drops filtered in the kernel to one namespace (and by
/// a reason the traffic does not have, a filter that costs none of the counts), grouped by
/// namespace, interface, protocol and port, counted exactly, named after the namespace, with
/// sampled packets to the right ports, and nothing else counted.
#[test]
fn both_hooks_attribute_filter_and_sample_a_namespace_s_drops_alike() {
    let _serial = root_test();
    const UDP: u64 = 500;
    const TCP: u64 = 20;
    for probe in ["btf", "tracepoint"] {
        let ns = Netns::new("attr-hook");
        let c = Counting::start(&[
            "report",
            "--format",
            "json",
            "--no-stacks",
            "--probe",
            probe,
            "--netns",
            &ns.name,
            "--exclude-reason",
            "IP_NOPROTO",
            "--by",
            "reason,location,netns,device,protocol,port",
        ]);
        ns.traffic(&["udp", "9", &UDP.to_string()]);
        ns.traffic(&["tcp", "7", &TCP.to_string()]);
        let report: serde_json::Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
        let drops = report["drops"].as_array().expect("drops array");
        for (proto, port, want) in [("udp", 9, UDP), ("tcp", 7, TCP)] {
            let d = (drops.iter())
                .find(|d| d["reason"] == "NO_SOCKET" && d["protocol"] == proto && d["port"] == port)
                .unwrap_or_else(|| panic!("{probe}: no NO_SOCKET {proto}/{port} row: {report:#}"));
            assert_eq!(
                (&d["count"], &d["device"], &d["netns_name"]),
                (&want.into(), &"lo".into(), &ns.name.as_str().into()),
                "{probe}: {proto}/{port}: {d:#}"
            );
            let samples = d["samples"].as_array().map_or(0, Vec::len);
            assert!(
                (1..=8).contains(&samples)
                    && d["samples"][0]["dport"] == port
                    && d["samples"][0]["dst"] == "127.0.0.1",
                "{probe}: {proto}/{port}: samples {:#}",
                d["samples"]
            );
        }
        // The namespace filter ran in the kernel: nothing else was counted.
        assert_eq!(report["total"], UDP + TCP, "{probe}: {report:#}");
    }
}
