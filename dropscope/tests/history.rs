//! A history directory from the command line, without root: `history`, `report --input DIR`
//! with wall-clock windows and its gaps, `diff --history`, and the mistakes refused.
use std::{
    path::Path,
    process::{Command, Output, Stdio},
};

use dropscope::{
    history::synthetic::{session, write_session},
    record::synthetic::snapshots,
};

/// 2026-09-21T14:13:20Z.
const T0: u64 = 1_790_000_000_000;

fn dropscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dropscope"))
        .args(args)
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .output()
        .expect("run dropscope")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Two sessions of 60 snapshots at 1/s (segments of 20), the second starting 5 minutes after
/// the first; their totals.
fn history(dir: &Path) -> (u64, u64) {
    let a = snapshots(4, 2, 10, 60);
    let b = snapshots(4, 3, 20, 60);
    let seq = write_session(dir, 1, &session("a", T0), &a, 20).expect("a");
    write_session(dir, seq, &session("a", T0 + 300_000), &b, 20).expect("b");
    (a[59].total, b[59].total)
}

#[test]
fn history_lists_segments_and_the_gap_and_report_counts_across_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = history(tmp.path());
    let d = tmp.path().to_str().expect("utf-8");
    let out = dropscope(&["history", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list = text(&out.stdout);
    assert_eq!(list.matches(".dsrec").count(), 6, "{list}");
    assert!(
        list.contains("2026-09-21 14:14:19  2026-09-21 14:18:20"),
        "{list}"
    );
    assert!(list.contains("gap: not recorded"), "{list}");
    assert!(list.contains("in 2 spans"), "{list}");

    let out = dropscope(&["report", "--format", "json", "--input", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["total"].as_u64(), Some(a + b));
    let err = text(&out.stderr);
    assert!(err.contains("counted in 2 sessions"), "{err}");
    assert!(
        err.contains("gap 2026-09-21 14:14:19 to 2026-09-21 14:18:20"),
        "{err}"
    );

    // Only the second session, by RFC 3339 and by local date and time.
    for (from, to) in [
        ("2026-09-21T14:18:00Z", "2026-09-21T14:25:00Z"),
        ("2026-09-21 14:18", "2026-09-21 14:25"),
    ] {
        let out = dropscope(&[
            "report", "--format", "json", "--input", d, "--from", from, "--to", to,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(json["total"].as_u64(), Some(b), "{from}");
    }
    // Session time means nothing across sessions.
    let out = dropscope(&["report", "--input", d, "--from", "30s"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("wall-clock time"),
        "{}",
        text(&out.stderr)
    );
    // A window with nothing recorded is an error, never zero drops.
    let out = dropscope(&[
        "report",
        "--input",
        d,
        "--from",
        "2026-09-21T14:16:00Z",
        "--to",
        "2026-09-21T14:17:00Z",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("holds no snapshot between"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn diff_history_compares_a_window_with_the_same_one_earlier_and_replay_refuses_a_file_window() {
    let tmp = tempfile::tempdir().expect("tempdir");
    history(tmp.path());
    let d = tmp.path().to_str().expect("utf-8");
    // The last 30 s of the second session against the same 30 s five minutes before (the first).
    let out = dropscope(&[
        "diff",
        "--history",
        d,
        "--last",
        "30s",
        "--vs",
        "5m",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(json["base"]["total"].as_u64() > Some(0), "{json}");
    assert!(
        json["new"]["total"].as_u64() > json["base"]["total"].as_u64(),
        "{json}"
    );
    // A day before nothing was recorded: refused, not compared with zero.
    let out = dropscope(&["diff", "--history", d, "--last", "30s", "--vs", "1d"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not recorded"),
        "{}",
        text(&out.stderr)
    );
    let out = dropscope(&["diff", "--history", d, "--last", "30s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let rec = tmp.path().join("one.dsrec");
    std::fs::write(&rec, b"x").expect("write");
    let r = rec.to_str().expect("utf-8");
    let out = dropscope(&["replay", r, "--since", "5m"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("window of a history directory"),
        "{}",
        text(&out.stderr)
    );
}

/// `report --input DIR` over a window shows the kernel's counters, the programs' verdicts and
/// the ledger of that window, as `report --input FILE` does for a recording, with exact
/// numbers across two sessions.
#[test]
fn report_over_a_history_window_shows_its_kernel_counters_and_ledger() {
    use dropscope::history::synthetic::with_counters;
    let tmp = tempfile::tempdir().expect("tempdir");
    let seq = write_session(
        tmp.path(),
        1,
        &session("k", T0),
        &with_counters(T0, 10, 20),
        6,
    )
    .expect("a");
    let b = with_counters(T0 + 100_000, 20, 20);
    write_session(tmp.path(), seq, &session("k", T0 + 100_000), &b, 6).expect("b");
    let d = tmp.path().to_str().expect("utf-8");
    // From 7.5 s into the first session to 12.5 s into the second.
    let (from, to) = ("2026-09-21T14:13:27.500Z", "2026-09-21T14:15:12.500Z");
    let out = dropscope(&[
        "report", "--format", "json", "--input", d, "--from", from, "--to", to,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["total"].as_u64(), Some(130 + 240), "{json:#}");
    let counter = |name: &str| {
        (json["kernel_counters"].as_array().expect("kernel_counters"))
            .iter()
            .find(|c| c["counter"].as_str() == Some(name))
            .and_then(|c| c["delta"].as_u64())
    };
    // The readings at 5 s and 20 s of the first (200 - 50), from the start to 10 s of the
    // second (200).
    assert_eq!(counter("Udp:NoPorts"), Some(150 + 200), "{json:#}");
    let programs = json["programs"].as_array().expect("programs");
    let verdicts: u64 = programs.iter().filter_map(|p| p["count"].as_u64()).sum();
    assert_eq!(verdicts, 75 + 100, "{json:#}");
    assert!(json["ledger"].is_object(), "{json:#}");
    // Every drop the counter saw, the probe saw too: none unseen.
    assert_eq!(json["unseen_total"].as_u64(), Some(0), "{json:#}");
    // The text report has the same sections.
    let out = dropscope(&["report", "--input", d, "--from", from, "--to", to]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("Udp:NoPorts"), "{report}");
}
