//! One model, many views: a recording of drops in two namespaces × two interfaces × two
//! reasons sharing one location reads the same in every view and under every filter and
//! grouping, and a filter or grouping the recording cannot answer is refused. No root needed.
use std::{path::Path, process::Command, sync::Arc, time::Duration};

use dropscope::model::{
    Attribution, DropCount, DropKey, KeySamples, Reason, Sample, SessionInfo, Snapshot, StackCount,
};

const LOCATION: &str = "nft_do_chain+0x3e8";

/// (namespace inode, namespace name, ifindex, device, reason code, reason, count)
const KEYS: [(u64, &str, u32, &str, u32, &str, u64); 8] = [
    (4026532001, "dsA", 1, "lo", 2, "NO_SOCKET", 1000),
    (4026532001, "dsA", 1, "lo", 6, "NETFILTER_DROP", 40),
    (4026532001, "dsA", 5, "va", 2, "NO_SOCKET", 300),
    (4026532001, "dsA", 5, "va", 6, "NETFILTER_DROP", 7),
    (4026532002, "dsB", 1, "lo", 2, "NO_SOCKET", 800),
    (4026532002, "dsB", 1, "lo", 6, "NETFILTER_DROP", 1),
    (4026532002, "dsB", 5, "vb", 2, "NO_SOCKET", 20),
    (4026532002, "dsB", 5, "vb", 6, "NETFILTER_DROP", 1486),
];

fn key(k: &(u64, &str, u32, &str, u32, &str, u64)) -> DropKey {
    DropKey {
        reason: Reason {
            code: k.4,
            name: Arc::from(k.5),
        },
        location: Arc::from(LOCATION),
        attr: Attribution {
            netns: Some(k.0),
            netns_cookie: None,
            netns_name: Some(Arc::from(k.1)),
            ifindex: Some(k.2),
            device: Some(Arc::from(k.3)),
            protocol: Some(Arc::from("udp")),
            port: None,
            socket: None,
            culprit: None,
        },
    }
}

/// A UDP datagram from 10.0.0.1 to 10.0.0.2, destination port `port`.
fn udp(port: u16) -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    p.extend_from_slice(&40000u16.to_be_bytes());
    p.extend_from_slice(&port.to_be_bytes());
    p.extend_from_slice(&[0, 8, 0, 0]);
    p
}

fn recording(dir: &Path) -> std::path::PathBuf {
    let snaps: Vec<Snapshot> = (1..=4u64)
        .map(|i| {
            let drops: Vec<DropCount> = KEYS
                .iter()
                .map(|k| DropCount {
                    key: key(k),
                    count: k.6 * i / 4,
                })
                .collect();
            let stacks = (KEYS.iter().enumerate())
                .map(|(n, k)| StackCount {
                    key: key(k),
                    frames: Arc::from(vec![
                        Arc::from("do_syscall_64"),
                        Arc::from(format!("path_{n}")),
                        Arc::from("nft_do_chain"),
                    ]),
                    weight: k.6 * i / 4,
                    samples: 1,
                })
                .collect();
            let samples = (KEYS.iter().enumerate())
                .map(|(n, k)| KeySamples {
                    key: key(k),
                    packets: vec![Sample {
                        unix_ms: 1_750_000_000_000 + n as u64,
                        len: 28,
                        l3proto: 0x0800,
                        bytes: udp(1000 + n as u16).into(),
                    }],
                })
                .collect();
            let total = drops.iter().map(|d| d.count).sum();
            Snapshot {
                elapsed: Duration::from_secs(i),
                unix_ms: 1_750_000_000_000 + 1000 * i,
                total,
                drops,
                stacks,
                samples,
                ..Default::default()
            }
        })
        .collect();
    let info = SessionInfo {
        host: "test".into(),
        kernel: "6.18".into(),
        started_unix_ms: 1_750_000_000_000,
        probe: "tp_btf/kfree_skb".into(),
    };
    let bytes = dropscope::record::encode(&info, &snaps).expect("encode");
    let path = dir.join("two.dsrec");
    std::fs::write(&path, bytes).expect("write recording");
    path
}

fn dropscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dropscope"))
        .args(args)
        .output()
        .expect("run dropscope")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = dropscope(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The exact count of the keys a predicate picks.
fn expect(pick: impl Fn(&(u64, &str, u32, &str, u32, &str, u64)) -> bool) -> u64 {
    KEYS.iter().filter(|k| pick(k)).map(|k| k.6).sum()
}

fn rows_sum(r: &serde_json::Value) -> u64 {
    (r["drops"].as_array().expect("drops").iter())
        .map(|d| d["count"].as_u64().expect("count"))
        .sum()
}

/// The weights of a folded-stacks output (`frame;frame weight` lines).
fn folded_sum(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(_, w)| w.parse::<u64>().expect("weight"))
        .sum()
}

#[test]
fn every_filter_and_grouping_on_a_recording_reads_as_live() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rec = recording(dir.path());
    let rec = rec.to_str().expect("utf-8 path");
    type Pick = fn(&(u64, &str, u32, &str, u32, &str, u64)) -> bool;
    let cases: [(&[&str], Pick); 7] = [
        (&[], |_| true),
        (&["--netns", "dsB"], |k| k.1 == "dsB"),
        (&["--netns", "4026532001"], |k| k.1 == "dsA"),
        (&["--device", "vb"], |k| k.3 == "vb"),
        (&["--device", "lo"], |k| k.3 == "lo"),
        (&["--reason", "NETFILTER_DROP"], |k| k.5 == "NETFILTER_DROP"),
        (
            &["--exclude-reason", "netfilter_drop", "--netns", "dsA"],
            |k| k.5 == "NO_SOCKET" && k.1 == "dsA",
        ),
    ];
    for (filter, pick) in cases {
        let want = expect(pick);
        let mut args = vec!["report", "--input", rec, "--format", "json"];
        args.extend_from_slice(filter);
        let r = json(&args);
        assert_eq!(rows_sum(&r), want, "{filter:?}: {r:#}");
        assert_eq!(r["total"].as_u64(), Some(want), "{filter:?}");
        // The flamegraph's weights are the same rows' (stacks are filtered with their rows).
        let mut args = vec![
            "flamegraph",
            "--input",
            rec,
            "--format",
            "folded",
            "-o",
            "-",
        ];
        args.extend_from_slice(filter);
        let out = dropscope(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let folded = String::from_utf8_lossy(&out.stdout);
        assert_eq!(folded_sum(&folded), want, "{filter:?}: {folded}");
    }
    // Grouped coarser, every drop is still there, in one row per namespace.
    let by_ns = json(&[
        "report", "--input", rec, "--format", "json", "--by", "netns",
    ]);
    assert_eq!(
        by_ns["drops"].as_array().expect("rows").len(),
        2,
        "{by_ns:#}"
    );
    assert_eq!(rows_sum(&by_ns), expect(|_| true));
    // Grouped by device alone: `lo` of both namespaces is one row.
    let by_dev = json(&[
        "report", "--input", rec, "--format", "json", "--by", "device",
    ]);
    let lo: Vec<_> = (by_dev["drops"].as_array().expect("rows").iter())
        .filter(|d| d["device"] == "lo")
        .collect();
    assert_eq!(lo.len(), 1, "{by_dev:#}");
    assert_eq!(lo[0]["count"].as_u64(), Some(expect(|k| k.3 == "lo")));
    // A window reads the same way.
    let w = json(&[
        "report", "--input", rec, "--format", "json", "--from", "2", "--netns", "dsB",
    ]);
    assert_eq!(
        rows_sum(&w),
        expect(|k| k.1 == "dsB") - expect(|k| k.1 == "dsB") / 2,
        "{w:#}"
    );
}

/// The text report has a column for each dimension it is grouped by: two namespaces' rows of
/// one reason and location never look alike, and piped it fits 100 columns.
#[test]
fn the_text_report_shows_every_dimension_of_its_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rec = recording(dir.path());
    let rec = rec.to_str().expect("utf-8 path");
    let out = dropscope(&["report", "--input", rec]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    for col in ["REASON", "LOCATION", "NETNS", "DEVICE", "PROTO", "COUNT"] {
        assert!(lines[0].contains(col), "no {col} column: {text}");
    }
    let rows = &lines[1..=KEYS.len()];
    let distinct: std::collections::HashSet<String> = rows
        .iter()
        .map(|l| l.split_whitespace().take(5).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(distinct.len(), KEYS.len(), "rows that look alike: {text}");
    assert!(
        rows.iter()
            // The count as the table writes it: with a thousands separator.
            .any(|l| l.contains("dsB") && l.contains("vb") && l.contains("1,486"))
    );
    assert!(lines.iter().all(|l| l.chars().count() <= 100), "{text}");
    // Grouped by namespace alone: one row per namespace, named, and no location column.
    let out = dropscope(&["report", "--input", rec, "--by", "netns"]);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.lines()
            .next()
            .is_some_and(|h| h.contains("NETNS") && !h.contains("LOCATION")),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ds")).count(),
        2,
        "{text}"
    );
}

#[test]
fn what_a_recording_cannot_answer_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rec = recording(dir.path());
    let rec = rec.to_str().expect("utf-8 path");
    for (args, says) in [
        (&["--port", "53"][..], "--port"),
        (&["--by", "reason,port"][..], "--by port"),
        (&["--device", "nosuchdev"][..], "nosuchdev"),
        (&["--netns", "dsC"][..], "dsC"),
        (&["--reason", "NO_SOCKT"][..], "did you mean NO_SOCKET"),
    ] {
        for cmd in [
            vec!["report", "--input", rec],
            vec![
                "flamegraph",
                "--input",
                rec,
                "--format",
                "folded",
                "-o",
                "-",
            ],
        ] {
            let mut all = cmd.clone();
            all.extend_from_slice(args);
            let out = dropscope(&all);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{all:?} was not refused");
            assert!(err.contains(says), "{all:?}: {err}");
            assert!(out.stdout.is_empty(), "{all:?} printed counts anyway");
        }
    }
}
