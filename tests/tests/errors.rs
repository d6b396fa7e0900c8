//! Every failure a user can hit gives a clear message and a non-zero exit, never a backtrace.
//! Needs root (to be able to drop privileges for the first test).
use std::process::{Command, Output, Stdio};

use dropscope_tests::{dropscope_bin, root_test};

fn dropscope(args: &[&str]) -> Output {
    Command::new(dropscope_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dropscope")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_clean_failure(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "should fail: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("stack backtrace"),
        "{err}"
    );
}

#[test]
fn without_root_it_says_what_to_run() {
    let _serial = root_test();
    let o = dropscope_tests::dropscope_as_nobody()
        .args(["report", "--duration", "1s"])
        .stdin(Stdio::null())
        .output()
        .expect("setpriv");
    assert_clean_failure(&o, "needs root");
    assert!(stderr(&o).contains("sudo"), "{}", stderr(&o));
}

#[test]
fn without_btf_the_typed_probe_says_so() {
    let _serial = root_test();
    let o = dropscope(&[
        "report",
        "--duration",
        "1s",
        "--probe",
        "btf",
        "--btf",
        "/nonexistent/vmlinux",
    ]);
    assert_clean_failure(&o, "no kernel BTF at /nonexistent/vmlinux");
    assert!(stderr(&o).contains("--probe tracepoint"), "{}", stderr(&o));
}

#[test]
fn the_live_view_without_a_terminal_suggests_report() {
    let _serial = root_test();
    let o = dropscope(&[]);
    assert_clean_failure(&o, "needs a terminal");
    assert!(stderr(&o).contains("dropscope report"), "{}", stderr(&o));
}

#[test]
fn bad_flag_values_are_rejected_with_usage() {
    let _serial = root_test();
    for args in [
        &["--interval", "1ms"][..],
        &["report", "--duration", "soon"],
        &["report", "--format", "xml"],
        &["--max-keys", "0"],
        &["report", "--from", "10s"],
    ] {
        let o = dropscope(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("error:"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn reasons_lists_the_kernel_table_without_root() {
    let _serial = root_test();
    let o = dropscope_tests::dropscope_as_nobody()
        .args(["reasons", "--format", "json"])
        .output()
        .expect("setpriv");
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let names: Vec<_> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["name"].as_str().unwrap_or_default().to_string())
        .collect();
    for want in ["NOT_DROPPED_YET", "CONSUMED", "NO_SOCKET", "NETFILTER_DROP"] {
        assert!(names.iter().any(|n| n == want), "{want} missing");
    }
}

#[test]
fn a_file_that_is_not_a_recording_is_refused_plainly() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.dsrec");
    std::fs::write(&junk, b"this is not a recording at all").expect("write");
    let o = dropscope(&["report", "--input", junk.to_str().expect("utf-8")]);
    assert_clean_failure(&o, "not a dropscope recording");
    let o = dropscope(&["replay", junk.to_str().expect("utf-8")]);
    assert_clean_failure(&o, "not a dropscope recording");
}

#[test]
fn a_truncated_recording_replays_its_valid_part_with_a_warning() {
    let _serial = root_test();
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample.dsrec");
    let bytes = std::fs::read(&sample).expect("sample recording");
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = dir.path().join("cut.dsrec");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write");
    let o = dropscope(&[
        "report",
        "--format",
        "json",
        "--input",
        cut.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning") && stderr(&o).contains("byte"),
        "{}",
        stderr(&o)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(report["total"].as_u64().expect("total") > 0, "{report}");
}
