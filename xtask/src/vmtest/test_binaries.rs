//! The tests crate's own binaries in vmtest's guests (as aya's `integration-test vm` runs its
//! tests in VMs): which tests run in which kernel, chosen by name, found through cargo's JSON
//! messages, and run inside the guest by `cargo xtask vmtest-tests` with the dist binary as
//! `DROPSCOPE_BIN`, one result line per test binary.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

/// The marker that starts every result line.
pub const MARKER: &str = "VMTEST-RESULT";

/// A column of vmtest's table: tests of one binary of the tests crate.
pub struct Column {
    /// The column's name (the test binary's name).
    pub name: &'static str,
    /// The exact names of its tests that the guests run.
    pub tests: &'static [&'static str],
}

/// The tests the guests run: the kernel-sensitive ones of the tests crate: exact counts of
/// UDP, TCP, raw and receive-buffer drops through both hooks, attribution and names, stacks,
/// the ledger's qdisc layer, programs that drop (XDP, tc, tcx, AF_XDP, netkit), recordings
/// (replayed on the host, `REPLAY`), the kernel's reason table, and the flood of two keys
/// read live from another CPU; and who dropped it where kernels differ: which call site of
/// netfilter drops (`nft_do_chain`'s two since 6.7, `nf_hook_slow` before), the attach point
/// of a tc program, and the socket a receive drop reached (`rx_sk`, 6.11+).
pub const COLUMNS: [Column; 11] = [
    Column {
        name: "kernels",
        tests: &["reasons_btf_of_this_kernel_matches_the_running_table"],
    },
    Column {
        name: "counts",
        tests: &[
            "report_counts_exactly_the_drops_generated",
            "the_classic_tracepoint_counts_the_same",
        ],
    },
    Column {
        name: "attribution",
        tests: &[
            "drops_are_attributed_to_namespace_interface_and_protocol_and_filtered_in_the_kernel",
            "both_hooks_attribute_filter_and_sample_a_namespace_s_drops_alike",
        ],
    },
    Column {
        name: "stacks",
        tests: &["folded_stacks_show_the_udp_receive_path_and_agree_with_the_count"],
    },
    Column {
        name: "ledger",
        tests: &["qdisc_drops_equal_tc_and_the_matched_kfree_skb_drops_live_and_recorded"],
    },
    Column {
        name: "programs",
        tests: &[
            "xdp_drop_and_aborted_are_counted_per_program_device_and_namespace",
            "tc_shot_is_one_drop_and_a_program_without_btf_is_listed",
            "a_tcx_program_attached_while_dropscope_runs_is_found_within_a_reading",
            "an_af_xdp_socket_without_buffers_drops_what_it_is_given",
            "a_program_attached_long_after_its_load_is_counted_from_its_load",
        ],
    },
    Column {
        name: "netkit",
        tests: &["a_netkit_program_s_drops_are_counted_per_program_and_matched_with_their_frees"],
    },
    Column {
        name: "record",
        tests: &[RECORD],
    },
    Column {
        name: "culprit",
        tests: &[
            RULES_AND_POLICY,
            "a_policy_alone_is_the_only_candidate_and_says_nothing_counted_it",
            "two_counted_rules_split_the_drops_exactly",
            "an_iptables_rule_is_named_with_its_comment_and_its_counter",
            TC_CULPRIT,
        ],
    },
    Column {
        name: "sockets",
        tests: &[
            "a_udp_socket_that_never_reads_is_named_by_its_process_and_port",
            "sockets_made_in_bulk_take_at_most_their_share_of_the_keys",
        ],
    },
    Column {
        name: "interleave",
        tests: &[FLOOD],
    },
];

/// The record test, whose recording (kept where `DROPSCOPE_TESTS_KEEP` says) the host replays.
const RECORD: &str = "a_recording_replays_the_exact_live_counts_without_root";

/// The flood of two interleaved keys read live from another CPU; as long as
/// `DROPSCOPE_TESTS_FLOOD_SECONDS` says.
const FLOOD: &str = "an_interleaved_flood_read_live_from_another_cpu_keeps_every_report_whole";

/// The culprit test of rules and a chain's policy dropping, told apart by nftables' two call
/// sites of the drop in `nft_do_chain`.
const RULES_AND_POLICY: &str =
    "a_counted_rule_and_an_uncounted_one_are_candidates_and_the_policy_is_exact";

/// The culprit test of a tc program shooting on a veth, through a clsact filter and a tcx link.
const TC_CULPRIT: &str = "a_tc_program_shooting_on_a_veth_is_named_by_its_attach_point";

/// The column of the record test's recording replayed on the host.
pub const REPLAY: &str = "replay here";

/// The table's columns: the kernel's reasons (read in the guest, compared on the host with
/// `reasons --btf` of its BTF file), then a column per test binary, the recording of the
/// `record` column replayed on the host after it.
pub fn table_columns() -> Vec<&'static str> {
    let mut columns = vec!["reasons", "reasons --btf"];
    for c in &COLUMNS {
        columns.push(c.name);
        if c.name == "record" {
            columns.push(REPLAY);
        }
    }
    columns
}

/// What each kernel leaves out, and why (printed under the table). Under emulation a test
/// binary takes 7 to 100 s (6.12, TCG), so the two amd64 guests share the columns: each
/// kernel-sensitive check runs in at least one of them, the exact counts through both hooks in
/// both.
pub fn left_out(series: &str) -> Vec<(&'static str, &'static str)> {
    const TIME: &str = "vmtest's time: run in the other amd64 guest and on the host";
    const RECORDED: &str = "a recording does not depend on the kernel: the arm64 guests \
                            record, and the host replays what they recorded";
    const ONE_CPU: &str = "one CPU under emulation, so no reads across CPUs: the arm64 guests \
                           (2 CPUs) and the host run it";
    match series {
        "6.1" => vec![
            ("stacks", TIME),
            ("programs", TIME),
            ("netkit", "netkit came with 6.7"),
            ("record", RECORDED),
            (TC_CULPRIT, "its tcx link: tcx came with 6.6"),
            ("interleave", ONE_CPU),
        ],
        "6.12" => vec![
            ("attribution", TIME),
            ("ledger", TIME),
            ("record", RECORDED),
            ("interleave", ONE_CPU),
        ],
        "host" => vec![(
            "netkit",
            "a build option (CONFIG_NETKIT) a host may lack (the test is ignored on hosts); \
             the 6.12 guests run it",
        )],
        _ => Vec::new(),
    }
}

/// What each arm64 guest (emulated by qemu-system-aarch64, 2 CPUs) leaves out, and why. A
/// test binary takes 10 to 170 s there, so the two share the columns as the amd64 guests do:
/// each runs the reason table, the exact counts through both hooks and who dropped it (nft's
/// drop sites, the socket a drop reached: both differ between 6.1 and 6.12); 6.1 the
/// attribution by device (it has no `rx_sk`), the ledger and a recording (replayed on the
/// host); 6.12 stacks, programs (tcx, tracing programs on programs), netkit and the flood.
pub fn left_out_emulated(series: &str) -> Vec<(&'static str, &'static str)> {
    const TIME: &str = "vmtest's time: run in the other arm64 guest";
    match series {
        "6.1" => vec![
            ("stacks", TIME),
            ("programs", TIME),
            ("netkit", "netkit came with 6.7"),
            (TC_CULPRIT, "its tcx link: tcx came with 6.6"),
            ("interleave", TIME),
        ],
        "6.12" => vec![
            ("attribution", TIME),
            ("ledger", TIME),
            (
                "record",
                "a recording does not depend on the kernel: the 6.1 arm64 guest records, \
                 and the host replays it",
            ),
        ],
        _ => Vec::new(),
    }
}

/// The tests crate's test binaries of [`COLUMNS`] (name, path), built for `target` (the
/// host's if `None`) as `cargo test --no-run` builds them: only those, so that a target
/// built for the guests alone (aarch64) does not build the other binaries of the crate too.
pub fn binaries(target: Option<&str>) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut args = vec![
        "test",
        "--package",
        "dropscope-tests",
        "--no-run",
        "--message-format=json",
    ];
    for c in &COLUMNS {
        args.extend(["--test", c.name]);
    }
    if let Some(t) = target {
        args.extend(["--target", t]);
    }
    let stdout = crate::cargo_stdout(&args)?;
    let found = executables(&stdout);
    ensure!(
        !found.is_empty(),
        "cargo built no test binary of dropscope-tests"
    );
    Ok(found)
}

/// The test executables in cargo's JSON messages.
fn executables(messages: &str) -> Vec<(String, PathBuf)> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["profile"]["test"] == true)
        .filter_map(|m| {
            let name = m["target"]["name"].as_str()?.to_string();
            Some((name, PathBuf::from(m["executable"].as_str()?)))
        })
        .collect()
}

/// The arguments of `vmtest-tests` that run every column's tests but those left out (a test
/// or a whole column, by name).
pub fn run_args(
    binaries: &[(String, PathBuf)],
    left_out: &[(&str, &str)],
) -> anyhow::Result<Vec<String>> {
    let out = |name: &str| left_out.iter().any(|(n, _)| *n == name);
    let mut args = Vec::new();
    for c in COLUMNS.iter().filter(|c| !out(c.name)) {
        let path = (binaries.iter().find(|(n, _)| n == c.name))
            .map(|(_, p)| p)
            .with_context(|| format!("no test binary {}", c.name))?;
        let path = path.to_str().context("non-UTF-8 path")?;
        args.extend(["--run".into(), format!("{}={path}", c.name)]);
        for t in c.tests.iter().filter(|t| out(t)) {
            args.extend(["--skip".into(), t.to_string()]);
        }
    }
    Ok(args)
}

/// Options of `cargo xtask vmtest-tests` (run inside a guest, or on the host).
#[derive(clap::Args)]
pub struct RunArgs {
    /// The dropscope binary the tests run (`DROPSCOPE_BIN`).
    #[arg(long)]
    pub dropscope: PathBuf,
    /// Writable directory: `results.txt`, each binary's output (`<name>.log`), `reasons.json`.
    #[arg(long)]
    pub out: PathBuf,
    /// A column to run: NAME=PATH (the test binary; its tests are the column's).
    #[arg(long = "run", value_parser = parse_run)]
    pub runs: Vec<(String, PathBuf)>,
    /// A test left out (its exact name).
    #[arg(long = "skip")]
    pub skip: Vec<String>,
    /// Run each test binary holding this lock (`flock`), as `cargo xtask test` does on a host.
    #[arg(long)]
    pub lock: Option<PathBuf>,
    /// Seconds of the interleaved flood (the tests' `DROPSCOPE_TESTS_FLOOD_SECONDS`; unset:
    /// theirs).
    #[arg(long)]
    pub flood_seconds: Option<u64>,
}

fn parse_run(s: &str) -> Result<(String, PathBuf), String> {
    let (name, path) = s.split_once('=').ok_or("want NAME=PATH")?;
    Ok((name.to_string(), PathBuf::from(path)))
}

/// The environment variable naming the directory where the record test keeps its recording
/// (`record.dsrec`) and its replay (`record.json`).
pub const KEEP: &str = "DROPSCOPE_TESTS_KEEP";

/// The longest one test binary may run in an emulated guest.
const BINARY_LIMIT: Duration = Duration::from_secs(600);

/// Runs each column's tests, writing a result line for each (and the kernel's reason table for
/// the host's `reasons --btf` check); fails if any failed.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    fs::create_dir_all(&args.out)?;
    let results = args.out.join("results.txt");
    let _ = fs::remove_file(&results);
    let mut failed = 0;
    let reasons = reasons(&args.dropscope, &args.out);
    failed += usize::from(reasons.is_err());
    write_result(&results, "reasons", reasons)?;
    for (name, path) in &args.runs {
        let column = COLUMNS
            .iter()
            .find(|c| c.name == name)
            .with_context(|| format!("no column {name}"))?;
        let result = run_binary(args, column, path);
        failed += usize::from(result.is_err());
        write_result(&results, name, result)?;
    }
    ensure!(failed == 0, "{failed} check(s) failed");
    Ok(())
}

/// `dropscope reasons` of this kernel, kept for the host to compare with `reasons --btf`.
fn reasons(dropscope: &Path, out: &Path) -> anyhow::Result<String> {
    let o = dropscope_tests::run_timeout(
        Command::new(dropscope).args(["reasons", "--format", "json"]),
        Duration::from_secs(60),
    )?;
    let rows: Value = serde_json::from_slice(&o.stdout).context("reasons JSON")?;
    let n = rows.as_array().context("reasons: not an array")?.len();
    fs::write(out.join("reasons.json"), &o.stdout)?;
    Ok(format!("{n} reasons"))
}

/// Runs one column's tests (exact names, one at a time) and checks that every one passed.
fn run_binary(args: &RunArgs, column: &Column, path: &Path) -> anyhow::Result<String> {
    let mut cmd = match &args.lock {
        Some(lock) => {
            let mut c = Command::new("flock");
            c.arg(lock).arg(path);
            c
        }
        None => Command::new(path),
    };
    let tests: Vec<&str> = (column.tests.iter().copied())
        .filter(|t| !args.skip.iter().any(|s| s == t))
        .collect();
    // Tests ignored on hosts that may lack what they need (netkit) run where it is known.
    cmd.args(["--exact", "--include-ignored", "--test-threads=1"])
        .args(&tests)
        .env("DROPSCOPE_BIN", &args.dropscope)
        // The record test keeps its recording there, for the host to replay.
        .env(KEEP, &args.out)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(secs) = args.flood_seconds {
        cmd.env("DROPSCOPE_TESTS_FLOOD_SECONDS", secs.to_string());
    }
    let started = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", path.display()))?;
    let out = dropscope_tests::wait_timeout(child, BINARY_LIMIT);
    let secs = started.elapsed().as_secs_f64();
    let out = out.with_context(|| format!("{} after {secs:.0} s", column.name))?;
    let log = args.out.join(format!("{}.log", column.name));
    let mut text = out.stdout.clone();
    text.extend_from_slice(&out.stderr);
    fs::write(&log, &text)?;
    let text = String::from_utf8_lossy(&text);
    let passed = passed(&text);
    if !out.status.success() || passed != Some(tests.len()) {
        bail!(
            "{} ({}, {passed:?} of {} passed in {secs:.0} s): {}",
            column.name,
            out.status,
            tests.len(),
            failures(&text)
        );
    }
    Ok(format!(
        "{} passed in {secs:.0} s: {}",
        tests.len(),
        tests.join(", ")
    ))
}

/// The number libtest says passed (`test result: ok. N passed; ...`).
fn passed(output: &str) -> Option<usize> {
    output
        .lines()
        .find_map(|l| l.strip_prefix("test result: "))
        .and_then(|l| l.split("; ").next())
        .and_then(|l| l.split_whitespace().rev().nth(1))
        .and_then(|n| n.parse().ok())
}

/// The panics of failed tests (where and the message's first line), or the output's last lines.
fn failures(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let panics: Vec<&str> = (lines.iter().enumerate())
        .filter(|(_, l)| l.contains("panicked at"))
        .flat_map(|(i, _)| lines[i..].iter().take(2).copied())
        .collect();
    if panics.is_empty() {
        lines[lines.len().saturating_sub(5)..].join(" | ")
    } else {
        panics.join(" | ")
    }
}

/// Appends `VMTEST-RESULT <check>: PASS|FAIL <detail>` to the results file and stdout.
pub fn write_result(results: &Path, check: &str, r: anyhow::Result<String>) -> anyhow::Result<()> {
    let (status, detail) = match r {
        Ok(d) => ("PASS", d),
        Err(e) => ("FAIL", format!("{e:#}")),
    };
    let detail = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = format!("{MARKER} {check}: {status} {detail}");
    println!("{line}");
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(results)?;
    writeln!(f, "{line}")?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_says_where_and_what_panicked() {
        let out = "---- t stdout ----\nthread 't' panicked at tests/a.rs:1:2:\nleft != right\n\
                   stack backtrace:\n";
        assert_eq!(
            failures(out),
            "thread 't' panicked at tests/a.rs:1:2: | left != right"
        );
    }

    #[test]
    fn libtest_summary_gives_the_number_passed() {
        let out = "running 2 tests\ntest a ... ok\n\ntest result: ok. 2 passed; 0 failed; 0 \
                   ignored; 0 measured; 5 filtered out; finished in 1.20s\n";
        assert_eq!(passed(out), Some(2));
        assert_eq!(passed("test result: FAILED. 0 passed; 1 failed;"), Some(0));
        assert_eq!(passed("no summary"), None);
    }

    #[test]
    fn only_test_executables_are_taken_from_cargos_messages() {
        let msgs = [
            r#"{"reason":"compiler-artifact","target":{"name":"counts"},"profile":{"test":true},"executable":"/t/counts-1"}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"traffic"},"profile":{"test":false},"executable":"/t/traffic"}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(
            executables(&msgs),
            vec![("counts".to_string(), PathBuf::from("/t/counts-1"))]
        );
    }

    /// Every name a guest leaves out is a column or one of its tests: a misspelt one would run
    /// what it meant to leave out.
    #[test]
    fn what_a_guest_leaves_out_is_a_column_or_a_test() {
        let known = |n: &str| COLUMNS.iter().any(|c| c.name == n || c.tests.contains(&n));
        for series in ["6.1", "6.12", "host"] {
            for (name, why) in left_out(series)
                .into_iter()
                .chain(left_out_emulated(series))
            {
                assert!(known(name), "{series}: {name} is no column or test");
                assert!(!why.is_empty(), "{series}: {name} has no reason");
            }
        }
        assert!(!known("netkits"));
    }

    #[test]
    fn a_column_or_test_left_out_is_not_run() {
        let bins: Vec<(String, PathBuf)> = COLUMNS
            .iter()
            .map(|c| (c.name.to_string(), PathBuf::from(format!("/t/{}", c.name))))
            .collect();
        let args = run_args(&bins, &[("ledger", "no tc")]).unwrap_or_default();
        assert_eq!(args.len(), 2 * (COLUMNS.len() - 1));
        assert!(!args.iter().any(|a| a.starts_with("ledger=")));
        let tcx = "a_tcx_program_attached_while_dropscope_runs_is_found_within_a_reading";
        let args = run_args(&bins, &[(tcx, "6.6+")]).unwrap_or_default();
        assert_eq!(args.len(), 2 * COLUMNS.len() + 2);
        assert!(args.windows(2).any(|w| w == ["--skip", tcx]));
        assert!(
            run_args(&bins[1..], &[]).is_err(),
            "a missing binary is an error"
        );
    }
}
