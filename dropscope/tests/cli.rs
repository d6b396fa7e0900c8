//! The command line as a user meets it, without root: closed pipes, exit codes, suggestions for
//! unknown names, the options each command offers, and durations in messages.
use std::{
    path::PathBuf,
    process::{Command, Output, Stdio},
};

fn dropscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dropscope"))
}

/// The sample recording in the repository (nine kinds of drops and who dropped them, 20 s).
fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/sample.dsrec")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("running dropscope")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `args` with a standard output whose reader is already gone, so that every write to it
/// fails with EPIPE.
fn into_a_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    dropscope()
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("running dropscope")
}

/// `sh -c "dropscope ARGS | head -1"`: the first line, dropscope's status and its stderr.
fn piped_into_head(args: &str) -> (String, i32, String) {
    let script = format!("\"$DROPSCOPE\" {args} 2>\"$ERR\" | head -1; exit ${{PIPESTATUS[0]}}");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let err = dir.path().join("stderr");
    let out = run(Command::new("bash")
        .args(["-c", &script])
        .env("DROPSCOPE", env!("CARGO_BIN_EXE_dropscope"))
        .env("ERR", &err));
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    (text(&out.stdout), out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn reasons_into_head_ends_quietly_with_status_0() {
    let (first, status, stderr) = piped_into_head("reasons");
    assert_eq!(
        first.split_whitespace().collect::<Vec<_>>(),
        ["VALUE", "NAME", "SUMMARY"]
    );
    assert_eq!(status, 0, "stderr: {stderr}");
    assert_eq!(stderr, "", "nothing on stderr");
}

#[test]
fn a_report_into_head_ends_quietly_with_status_0() {
    let sample = sample();
    let (first, status, stderr) =
        piped_into_head(&format!("report --input '{}'", sample.display()));
    assert!(first.starts_with("REASON"), "{first}");
    assert_eq!(status, 0, "stderr: {stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn writing_into_a_closed_pipe_is_not_an_error() {
    let sample = sample();
    let sample = sample.to_str().expect("a UTF-8 path");
    for args in [
        &["reasons"][..],
        &["reasons", "--format", "json"],
        &["explain", "NO_SOCKET"],
        &["report", "--input", sample],
        &["report", "--input", sample, "--format", "json"],
        &["flamegraph", "--input", sample, "--format", "folded"],
    ] {
        let out = into_a_closed_pipe(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(
            !stderr.contains("error") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_failure_that_is_not_a_closed_pipe_still_fails() {
    // A closed stdout must not hide a real error.
    let out = into_a_closed_pipe(&["report", "--input", "/nonexistent/recording.dsrec"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("dropscope: error:"), "{out:?}");
}

#[test]
fn explain_succeeds_on_a_reason_and_fails_on_an_unknown_name_with_suggestions() {
    let ok = run(dropscope().args(["explain", "skb_drop_reason_no_socket"]));
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(text(&ok.stdout).starts_with("NO_SOCKET: "), "{ok:?}");

    let typo = run(dropscope().args(["explain", "NO_SOCKT"]));
    assert_eq!(typo.status.code(), Some(1), "{typo:?}");
    assert_eq!(typo.stdout, b"", "nothing is explained");
    let err = text(&typo.stderr);
    assert!(err.contains("did you mean NO_SOCKET?"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    let part = run(dropscope().args(["explain", "rcvbuff"]));
    assert_eq!(part.status.code(), Some(1));
    assert!(text(&part.stderr).contains("SOCKET_RCVBUFF"), "{part:?}");

    let unknown = run(dropscope().args(["explain", "UNKNOWN"]));
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    let err = text(&unknown.stderr);
    assert!(
        err.contains("UNKNOWN") && err.contains("dropscope reasons"),
        "{err}"
    );

    // How the TUI and reports name a value without a name: explained, not refused.
    let value = run(dropscope().args(["explain", "UNKNOWN(65539)"]));
    assert_eq!(value.status.code(), Some(0), "{value:?}");
    assert!(text(&value.stdout).contains("subsystem 1"), "{value:?}");
}

/// The long options `dropscope [COMMAND] --help` lists.
fn flags(command: &[&str]) -> Vec<String> {
    let out = run(dropscope().args(command).arg("--help"));
    assert!(out.status.success(), "{command:?} --help: {out:?}");
    text(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.trim_end_matches([',', '.', ')', '`']).to_owned())
        .filter(|w| !w.is_empty())
        .collect()
}

#[test]
fn count_syscalls_is_offered_only_where_a_header_shows_it() {
    for cmd in [&[][..], &["record"]] {
        assert!(
            flags(cmd).iter().any(|f| f == "count-syscalls"),
            "{cmd:?} offers --count-syscalls"
        );
    }
    for cmd in ["report", "flamegraph", "serve"] {
        assert!(
            !flags(&[cmd]).iter().any(|f| f == "count-syscalls"),
            "{cmd} does not offer --count-syscalls"
        );
        let out = run(dropscope().args([cmd, "--count-syscalls"]));
        assert_eq!(out.status.code(), Some(2), "{cmd}: {out:?}");
    }
}

#[test]
fn help_speaks_of_every_grouping() {
    for (cmd, flag) in [("report", "--max-keys"), ("serve", "--max-series")] {
        let help = text(&run(dropscope().args([cmd, "--help"])).stdout);
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("{cmd} --help: {help}"));
        let entry = &help[at..help[at..].find("\n  -").map_or(help.len(), |e| at + e)];
        assert!(!entry.contains("(reason, location)"), "{entry}");
        assert!(entry.contains("--by"), "{entry}");
    }
}

#[test]
fn durations_in_messages_are_written_as_people_write_them() {
    let out = run(dropscope()
        .args(["report", "--input"])
        .arg(sample())
        .args(["--from", "1h"]));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    // No --to was given: the end is the recording's, and the message says so.
    assert!(!err.contains("--to"), "{err}");
    let to = err
        .trim_end()
        .rsplit_once("is after the recording's end, ")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("{err}"));
    // The recording's end, e.g. `11.2s`: one number with one unit, not `11s 209ms 123us`.
    assert!(!to.contains(' '), "{err}");
    let (number, unit) = to.split_at(to.find(|c: char| c.is_ascii_alphabetic()).expect("unit"));
    assert_eq!(unit, "s", "{err}");
    assert!(
        number.parse::<f64>().is_ok() && number.split('.').nth(1).is_none_or(|d| d.len() == 1),
        "{err}"
    );
    assert!(err.contains("--from 1h is after"), "{err}");
    // With a --to, the message names it.
    let out = run(dropscope()
        .args(["report", "--input"])
        .arg(sample())
        .args(["--from", "5s", "--to", "2s"]));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("--from 5s is after --to 2s"), "{err}");
}

#[test]
fn the_flamegraph_says_where_it_wrote() {
    let out = run(dropscope()
        .args(["flamegraph", "--format", "folded", "--input"])
        .arg(sample()));
    assert!(out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("wrote the folded stacks to standard output"),
        "{err}"
    );
    assert!(!err.contains("wrote stdout"), "{err}");
}

/// `--by reason,culprit` on a recording: rows grouped by who dropped them after the culprit is
/// derived, nothing lost; rows that cannot be attributed group under `unknown` (a rule's drops
/// recorded without the kernel's view), rows nobody is named for under `none`; `--culprit`
/// keeps the matching rows; `diff` groups by it as well. The recording is
/// one of format 1 (no kernel view at all) with firewall drops in it.
#[test]
fn a_recording_groups_and_filters_by_culprit() {
    let sample =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/record/testdata/version1.dsrec");
    let sample = sample.to_str().expect("utf-8");
    let json = |args: &[&str]| -> serde_json::Value {
        let out = run(dropscope()
            .args(["report", "--input", sample, "--format", "json"])
            .args(args));
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let plain = json(&["--by", "reason"]);
    let grouped = json(&["--by", "reason,culprit"]);
    assert_eq!(grouped["total"], plain["total"]);
    let rows = grouped["drops"].as_array().expect("drops");
    assert_eq!(rows.len(), plain["drops"].as_array().expect("drops").len());
    let row = |reason: &str| {
        (rows.iter())
            .find(|r| r["reason"] == reason)
            .unwrap_or_else(|| panic!("no {reason}: {grouped:#}"))
    };
    assert_eq!(row("NETFILTER_DROP")["culprit"]["certainty"], "unknown");
    assert!(row("NO_SOCKET").get("culprit").is_none(), "{grouped:#}");
    let table = text(
        &run(dropscope().args(["report", "--input", sample, "--by", "reason,culprit"])).stdout,
    );
    let head = table.lines().next().expect("a header");
    assert!(
        head.contains("WHO") && !head.contains("LOCATION"),
        "{table}"
    );
    let line = |reason: &str| {
        (table.lines())
            .find(|l| l.starts_with(reason))
            .unwrap_or_else(|| panic!("no {reason}: {table}"))
            .to_string()
    };
    assert!(line("NETFILTER_DROP").contains(" unknown "), "{table}");
    assert!(line("NO_SOCKET").contains(" none "), "{table}");
    // Only the rows whose culprit matches, their total theirs.
    let only = json(&["--by", "reason,culprit", "--culprit", "NOT READ"]);
    let kept = only["drops"].as_array().expect("drops");
    assert_eq!(kept.len(), 1, "{only:#}");
    assert_eq!(kept[0]["reason"], "NETFILTER_DROP");
    assert_eq!(only["total"], kept[0]["count"]);
    // `diff` groups by culprit too: the unattributed rows of both runs are one row.
    let diff = run(dropscope().args([
        "diff",
        sample,
        sample,
        "--by",
        "reason,culprit",
        "--format",
        "json",
    ]));
    assert!(diff.status.success(), "{}", text(&diff.stderr));
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).expect("JSON");
    let keys = diff["keys"].as_array().expect("keys");
    let nf: Vec<_> = (keys.iter())
        .filter(|k| k["reason"] == "NETFILTER_DROP")
        .collect();
    assert_eq!(nf.len(), 1, "{diff:#}");
    assert_eq!(nf[0]["culprit"], "unknown", "{diff:#}");
    assert_eq!(nf[0]["base_count"], row("NETFILTER_DROP")["count"]);
}

#[test]
fn replay_takes_budgets_for_a_history_and_refuses_them_for_a_recording() {
    assert!(flags(&["replay"]).contains(&"budget".to_string()));
    let out = run(dropscope()
        .args(["replay", "--budget", "total<5/s"])
        .arg(sample()));
    assert!(!out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("--budget is judged by `v`"), "{err}");
    let out = run(dropscope()
        .args(["replay", "--budget", "total>5/s"])
        .arg(sample()));
    assert!(text(&out.stderr).contains("upper limit"), "{out:?}");
}
