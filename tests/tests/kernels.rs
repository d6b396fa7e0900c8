//! `--btf FILE`: another kernel's reason table, and every bad file a clear error (never ignored,
//! never read without a limit). The `report` cases need root (they get past the privilege check);
//! none of them attaches a probe.
use std::{
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{dropscope_bin, root_test};

/// Runs dropscope with a time limit (a file read without a limit would hang or exhaust memory).
fn dropscope(args: &[&str]) -> Output {
    let mut child = Command::new(dropscope_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dropscope");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dropscope {args:?} did not finish in 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Asserts a one-line error naming the file and saying what is wrong with it.
fn assert_btf_error(args: &[&str], file: &str, says: &str) {
    let out = dropscope(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?} printed output");
    assert!(
        stderr.contains(file),
        "{args:?}: the file is not named: {stderr}"
    );
    assert!(
        stderr.contains(says),
        "{args:?}: expected `{says}`: {stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
}

/// Bad BTF files, each with the words its error must contain.
fn bad_files(dir: &Path) -> Vec<(String, &'static str)> {
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").expect("write");
    let text = dir.join("text");
    std::fs::write(&text, b"not BTF, just some text that is long enough").expect("write");
    let missing = dir.join("missing");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    vec![
        (s(&missing), "no BTF file at"),
        (s(&empty), "is empty"),
        (s(&text), "is not a BTF file"),
        ("/dev/zero".into(), "is not a BTF file"),
        (s(dir), "cannot read BTF file"),
    ]
}

#[test]
fn reasons_btf_rejects_each_bad_file_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, says) in bad_files(dir.path()) {
        assert_btf_error(&["reasons", "--btf", &file], &file, says);
    }
}

#[test]
fn report_never_ignores_a_bad_btf_file() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, says) in bad_files(dir.path()) {
        for probe in ["auto", "btf", "tracepoint"] {
            assert_btf_error(
                &[
                    "report",
                    "--duration",
                    "1s",
                    "--probe",
                    probe,
                    "--btf",
                    &file,
                ],
                &file,
                says,
            );
        }
    }
}

#[test]
fn reasons_btf_of_this_kernel_matches_the_running_table() {
    let live = dropscope(&["reasons", "--format", "json"]);
    assert!(live.status.success(), "{live:?}");
    let from_file = dropscope(&[
        "reasons",
        "--format",
        "json",
        "--btf",
        "/sys/kernel/btf/vmlinux",
    ]);
    assert!(from_file.status.success(), "{from_file:?}");
    assert_eq!(live.stdout, from_file.stdout);
    let rows: serde_json::Value = serde_json::from_slice(&live.stdout).expect("JSON");
    assert!(rows.as_array().expect("array").len() > 50, "{rows}");
}
