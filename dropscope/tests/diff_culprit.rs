//! `dropscope diff --by ...,culprit` on recordings, without root: each run's culprits derived
//! from its own rulesets as `report` derives them, rows matched across the runs by their
//! culprit's stable label, a row whose culprit differs between them two rows (one gone, one
//! new), never merged; a JSON report (no kernel view) refused as an input.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::Arc,
    time::Duration,
};

use dropscope::{
    culprit::ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict},
    model::{Attribution, DropCount, DropKey, KernelReading, Reason, SessionInfo, Snapshot},
};
use serde_json::Value;

/// Drops per second of one row: (reason, namespace inode, its name, the counted drop rule's
/// handle in `ip filter INPUT` that drops them, or none).
type Rate = (&'static str, u64, &'static str, Option<u64>, u64);

fn key(reason: &str, ns: u64, name: &str) -> DropKey {
    DropKey {
        reason: Reason {
            code: 2,
            name: Arc::from(reason),
        },
        location: Arc::from(if reason == "NETFILTER_DROP" {
            "nft_do_chain+0x3e8"
        } else {
            "__udp4_lib_rcv+0x1c"
        }),
        attr: Attribution {
            netns: Some(ns),
            netns_name: Some(Arc::from(name)),
            device: Some(Arc::from("eth0")),
            ..Default::default()
        },
    }
}

/// A namespace's chain `ip filter INPUT` with one counted drop rule that grew by `grew`.
fn rules(handle: u64, grew: u64) -> RulesWindow {
    let id = ChainId {
        family: 2,
        table: "filter".into(),
        chain: "INPUT".into(),
    };
    RulesWindow {
        generation: 1,
        chains: vec![Chain {
            id: id.clone(),
            hook: Some("input".into()),
            priority: Some(0),
            policy_drop: false,
        }],
        rules: vec![Grown {
            rule: Rule {
                id,
                handle,
                position: 1,
                verdict: Verdict::Drop,
                packets: Some(grew),
                comment: None,
                exprs: "match counter immediate".into(),
            },
            grew: Some(grew),
        }],
        whole: true,
        ..Default::default()
    }
}

/// Writes a recording of 10 one-second snapshots, each with the kernel's view read with it:
/// every row drops at its rate, its rule's counter growing as much.
fn recording(dir: &Path, name: &str, rates: &[Rate]) -> String {
    let snaps: Vec<Snapshot> = (1..=10u64)
        .map(|t| {
            let drops: Vec<DropCount> = (rates.iter())
                .map(|&(reason, ns, name, _, rate)| DropCount {
                    key: key(reason, ns, name),
                    count: rate * t,
                })
                .collect();
            let mut reading = KernelReading {
                unix_ms: 1_750_000_000_000 + 1000 * t,
                attributed: true,
                ..Default::default()
            };
            for &(_, ns, _, handle, rate) in rates {
                if let Some(h) = handle {
                    reading.rules.insert(ns, rules(h, rate * t));
                }
            }
            Snapshot {
                elapsed: Duration::from_secs(t),
                unix_ms: 1_750_000_000_000 + 1000 * t,
                total: drops.iter().map(|d| d.count).sum(),
                drops,
                kernel: Some(Arc::new(reading)),
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
    let path: PathBuf = dir.join(name);
    let bytes = dropscope::record::encode(&info, &snaps).expect("encode");
    std::fs::write(&path, bytes).expect("write recording");
    path.to_str().expect("utf-8 path").to_owned()
}

fn dropscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dropscope"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dropscope")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// BASE: rule handle 4 drops 10/s in `web`; NEW: it still does, and rule handle 7 drops 20/s
/// in `db`; NO_SOCKET (nobody named) 5/s in both.
fn runs(dir: &Path) -> (String, String) {
    let base = recording(
        dir,
        "base.dsrec",
        &[
            ("NETFILTER_DROP", 11, "web", Some(4), 10),
            ("NO_SOCKET", 11, "web", None, 5),
        ],
    );
    let new = recording(
        dir,
        "new.dsrec",
        &[
            ("NETFILTER_DROP", 11, "web", Some(4), 10),
            ("NETFILTER_DROP", 12, "db", Some(7), 20),
            ("NO_SOCKET", 11, "web", None, 5),
        ],
    );
    (base, new)
}

/// The diff's rows as (culprit, base count, new count), sorted.
fn rows(json: &Value) -> Vec<(String, u64, u64)> {
    let mut out: Vec<_> = (json["keys"].as_array().expect("keys").iter())
        .map(|k| {
            (
                k["culprit"].as_str().expect("a culprit").to_owned(),
                k["base_count"].as_u64().expect("base"),
                k["new_count"].as_u64().expect("new"),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn diff_matches_rows_by_culprit_and_never_merges_two_culprits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let json = |by: &str| -> Value {
        let out = dropscope(&["diff", &base, &new, "--by", by, "--format", "json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let h = |n: u64| format!("exact: rule ip filter INPUT handle {n}");
    // By culprit alone: the rule of both runs is one row, the new rule one of its own (none in
    // BASE), though both are NETFILTER_DROP.
    assert_eq!(
        rows(&json("culprit")),
        [
            (h(4), 100, 100),
            (h(7), 0, 200),
            ("none".to_string(), 50, 50)
        ]
    );
    let by_reason = json("reason,culprit");
    assert_eq!(rows(&by_reason).len(), 3, "{by_reason:#}");
    let new_rule = (by_reason["keys"].as_array().expect("keys").iter())
        .find(|k| k["culprit"] == h(7).as_str())
        .expect("handle 7");
    assert_eq!(new_rule["reason"], "NETFILTER_DROP");
    assert_eq!(new_rule["change"], "regression", "{new_rule:#}");
    // The table has a WHO column; a regression names its culprit.
    let out = dropscope(&[
        "diff",
        &base,
        &new,
        "--by",
        "reason,culprit",
        "--fail-on-regression",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.lines().next().is_some_and(|l| l.contains("WHO")),
        "{table}"
    );
    assert!(
        (table.lines()).any(|l| l.starts_with("NETFILTER_DROP") && l.contains("handle 7")),
        "{table}"
    );
    assert!(
        text(&out.stderr).contains(&format!("NETFILTER_DROP by {}", h(7))),
        "{}",
        text(&out.stderr)
    );
    // Compared with itself, nothing changes.
    let same = dropscope(&["diff", &new, &new, "--by", "culprit", "--format", "json"]);
    let same: Value = serde_json::from_slice(&same.stdout).expect("JSON");
    assert!(rows(&same).iter().all(|(_, b, n)| b == n), "{same:#}");
}

#[test]
fn a_json_report_is_refused_as_an_input_grouped_by_culprit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let report = dropscope(&["report", "--input", &base, "--format", "json"]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let json = dir.path().join("base.json");
    std::fs::write(&json, &report.stdout).expect("write");
    let json = json.to_str().expect("utf-8");
    let out = dropscope(&["diff", json, &new, "--by", "reason,culprit"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("a JSON report carries no rulesets"),
        "{}",
        text(&out.stderr)
    );
    // Without the culprit, the same inputs compare.
    let out = dropscope(&["diff", json, &new, "--by", "reason"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
