//! The exact-count suite `cargo xtask vmtest` runs inside the arm64 guests, whose busybox root
//! cannot run the tests crate's binaries (no iproute2, nft or tc for their fixtures; the amd64
//! guests and the host run those, `test_binaries`).
//!
//! It drives a given dropscope binary and the traffic generator in a network namespace, checks
//! exact counts from the JSON, and writes one `VMTEST-RESULT <check> PASS|FAIL <detail>` line per
//! check to stdout and to `OUT/results.txt` (the host reads the file: the guest console mixes in
//! kernel messages). Files for the host's own checks go to `OUT` too.
use std::{
    fs,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context as _, ensure};
use dropscope_tests::{Counting, Netns, run_timeout};
use serde_json::Value;

/// Drops generated for an exact-count check.
pub const UDP: u64 = 500;
/// TCP connection attempts to a closed port.
pub const TCP: u64 = 20;
/// Raw packets of an unused protocol.
pub const RAW: u64 = 200;
/// Datagrams sent to a tiny receive buffer.
pub const RCVBUF: u64 = 300;

/// The name of the flood check (run only when asked for).
pub const FLOOD: &str = "interleaved flood";

/// The name of the programs check.
pub const PROGRAMS: &str = "programs";

/// The name dropscope gives its programs that count another program's verdicts.
const VERDICT_COUNTER: &str = "ds_verdicts";
/// How long the programs check waits for every dropscope to watch a program loaded while they
/// run: 20 times the longest pick-up a watcher allows (a missed load event found by the look
/// every 5 s, plus a poll), for an emulated guest on a busy machine.
const PICK_UP_LIMIT: Duration = Duration::from_secs(120);

/// The name of the AF_XDP check.
pub const AF_XDP: &str = "af_xdp";

/// The name of the netkit check.
pub const NETKIT: &str = "netkit";

/// The name of the sockets check.
pub const SOCKETS: &str = "sockets";

/// What the guest suite needs.
#[derive(clap::Args)]
pub struct GuestArgs {
    /// The dropscope binary to test.
    #[arg(long)]
    pub dropscope: PathBuf,
    /// The traffic generator.
    #[arg(long)]
    pub traffic: PathBuf,
    /// Writable directory for results and files the host checks.
    #[arg(long)]
    pub out: PathBuf,
    /// Also flood for this many seconds with two keys interleaved while live reports are
    /// read (on another CPU where there are two): no report may show a MISMATCH (0: skip).
    #[arg(long, default_value_t = 0)]
    pub flood_seconds: u64,
}

/// Runs every check; fails if any failed.
pub fn run(args: &GuestArgs) -> anyhow::Result<()> {
    fs::create_dir_all(&args.out)?;
    let results = args.out.join("results.txt");
    let _ = fs::remove_file(&results);
    let suite = Suite { args };
    let mut failed = 0;
    let mut checks = vec![
        "reasons",
        "report tp_btf",
        "report tracepoint",
        "attribution",
        "stacks",
        PROGRAMS,
        AF_XDP,
        NETKIT,
        SOCKETS,
        "record",
    ];
    if args.flood_seconds > 0 {
        checks.push(FLOOD);
    }
    for name in checks {
        let result = match name {
            "reasons" => suite.reasons(),
            "report tp_btf" => suite.report("btf"),
            // The classic tracepoint's run also filters a reason out in the kernel.
            "report tracepoint" => suite.report("tracepoint"),
            "attribution" => suite.attribution(),
            "stacks" => suite.stacks(),
            PROGRAMS => suite.programs(),
            AF_XDP => suite.af_xdp(),
            NETKIT => suite.netkit(),
            SOCKETS => super::sockets::check(&args.dropscope, &args.traffic),
            FLOOD => suite.flood(args.flood_seconds),
            _ => suite.record(),
        };
        failed += usize::from(
            (result.as_ref())
                .is_err_and(|e| e.downcast_ref::<super::test_binaries::NotHere>().is_none()),
        );
        super::test_binaries::write_result(&results, name, result)?;
    }
    ensure!(failed == 0, "{failed} check(s) failed");
    Ok(())
}

struct Suite<'a> {
    args: &'a GuestArgs,
}

/// Expected exact counts per reason.
pub struct Expected {
    /// (reason, count) pairs.
    pub counts: Vec<(String, u64)>,
}

impl Expected {
    /// Checks a JSON report against these counts and the invariant keyed + overflow = total.
    pub fn check(&self, report: &Value) -> anyhow::Result<String> {
        let drops = report["drops"].as_array().context("no drops array")?;
        let keyed: u64 = drops.iter().filter_map(|d| d["count"].as_u64()).sum();
        let total = report["total"].as_u64().context("no total")?;
        let overflow = report["overflow"].as_u64().context("no overflow")?;
        ensure!(
            keyed + overflow == total,
            "keyed {keyed} + overflow {overflow} != total {total}"
        );
        let mut seen = Vec::new();
        for (reason, want) in &self.counts {
            let got: u64 = drops
                .iter()
                .filter(|d| d["reason"] == reason.as_str())
                .filter_map(|d| d["count"].as_u64())
                .sum();
            ensure!(
                got == *want,
                "{reason}: counted {got}, sent {want} (report: {report})"
            );
            seen.push(format!("{reason}={got}"));
        }
        Ok(format!("exact: {} (total {total})", seen.join(" ")))
    }
}

impl Suite<'_> {
    fn reasons(&self) -> anyhow::Result<String> {
        let out = run_timeout(
            Command::new(&self.args.dropscope).args(["reasons", "--format", "json"]),
            Duration::from_secs(60),
        )?;
        let rows: Value = serde_json::from_slice(&out.stdout).context("reasons JSON")?;
        let rows = rows.as_array().context("reasons: not an array")?;
        let has = |n: &str| rows.iter().any(|r| r["name"] == n);
        for name in ["NO_SOCKET", "IP_NOPROTO", "SOCKET_RCVBUFF", "NOT_SPECIFIED"] {
            ensure!(has(name), "no {name} among {} reasons", rows.len());
        }
        fs::write(self.args.out.join("reasons.json"), &out.stdout)?;
        let consumed = if has("CONSUMED") { "with" } else { "without" };
        Ok(format!("{} reasons, {consumed} CONSUMED", rows.len()))
    }

    /// Sends the exact-count traffic in a fresh namespace; returns what was sent.
    fn traffic(&self, tag: &str) -> anyhow::Result<Expected> {
        let ns = netns(tag)?;
        ns.try_traffic(
            &self.args.traffic,
            &["udp", "9", &UDP.to_string()],
            TRAFFIC_LIMIT,
        )?;
        ns.try_traffic(
            &self.args.traffic,
            &["tcp", "9", &TCP.to_string()],
            TRAFFIC_LIMIT,
        )?;
        ns.try_traffic(
            &self.args.traffic,
            &["raw", "253", &RAW.to_string()],
            TRAFFIC_LIMIT,
        )?;
        let rcvbuf: u64 = ns
            .try_traffic(
                &self.args.traffic,
                &["rcvbuf", &RCVBUF.to_string()],
                TRAFFIC_LIMIT,
            )?
            .trim()
            .parse()
            .context("rcvbuf output")?;
        ensure!(rcvbuf > 0, "the tiny receive buffer dropped nothing");
        Ok(Expected {
            counts: vec![
                ("NO_SOCKET".into(), UDP + TCP),
                ("IP_NOPROTO".into(), RAW),
                ("SOCKET_RCVBUFF".into(), rcvbuf),
            ],
        })
    }

    /// Through both hooks: drops filtered in the kernel to one namespace (and by reason),
    /// grouped by namespace, interface, protocol and port, counted exactly, named, and with
    /// sampled packets.
    fn attribution(&self) -> anyhow::Result<String> {
        let mut seen = Vec::new();
        for probe in ["btf", "tracepoint"] {
            let ns = netns("attr")?;
            let c = start(
                &self.args.dropscope,
                &[
                    "report",
                    "--format",
                    "json",
                    "--no-stacks",
                    "--probe",
                    probe,
                    "--netns",
                    &ns.name,
                    // A reason this traffic does not have: the reason filter loads with both
                    // hooks and costs none of the counts.
                    "--exclude-reason",
                    "IP_NOPROTO",
                    "--by",
                    "reason,location,netns,device,protocol,port",
                ],
            )?;
            let sent = ns
                .try_traffic(
                    &self.args.traffic,
                    &["udp", "9", &UDP.to_string()],
                    TRAFFIC_LIMIT,
                )
                .and_then(|_| {
                    ns.try_traffic(
                        &self.args.traffic,
                        &["tcp", "7", &TCP.to_string()],
                        TRAFFIC_LIMIT,
                    )
                });
            let out = c.try_interrupt(Duration::from_secs(60))?;
            sent?;
            let report: Value = serde_json::from_str(&out).context("report JSON")?;
            let drops = report["drops"].as_array().context("no drops array")?;
            let row = |proto: &str, port: u64| {
                drops.iter().find(|d| {
                    d["reason"] == "NO_SOCKET" && d["protocol"] == proto && d["port"] == port
                })
            };
            for (proto, port, want) in [("udp", 9, UDP), ("tcp", 7, TCP)] {
                let d = row(proto, port).with_context(|| {
                    format!("{probe}: no NO_SOCKET {proto}/{port} row: {report}")
                })?;
                ensure!(
                    d["count"] == want
                        && d["device"] == "lo"
                        && d["netns_name"] == ns.name.as_str(),
                    "{probe}: {proto}/{port}: want {want} on lo in {}: {d}",
                    ns.name
                );
                let samples = d["samples"].as_array().map_or(0, Vec::len);
                ensure!(
                    (1..=8).contains(&samples)
                        && d["samples"][0]["dport"] == port
                        && d["samples"][0]["dst"] == "127.0.0.1",
                    "{probe}: {proto}/{port}: samples {}",
                    d["samples"]
                );
            }
            // The namespace filter ran in the kernel: nothing else was counted.
            ensure!(
                report["total"] == UDP + TCP,
                "{probe}: total {} with --netns, want {}",
                report["total"],
                UDP + TCP
            );
            seen.push(format!(
                "{probe}: udp/9={UDP} tcp/7={TCP} on lo, named, sampled"
            ));
        }
        Ok(seen.join("; "))
    }

    fn report(&self, probe: &str) -> anyhow::Result<String> {
        let mut args = vec![
            "report",
            "--format",
            "json",
            "--no-stacks",
            "--probe",
            probe,
        ];
        // The classic tracepoint's run leaves one reason out (the reason filter's bitmap in
        // the read-only settings: a load this kernel's verifier must accept).
        let left_out = (probe == "tracepoint").then_some("IP_NOPROTO");
        if let Some(reason) = left_out {
            args.extend(["--exclude-reason", reason]);
        }
        let c = start(&self.args.dropscope, &args)?;
        let expected = self.traffic("report");
        let out = c.try_interrupt(Duration::from_secs(60))?;
        let mut expected = expected?;
        for (reason, count) in &mut expected.counts {
            if Some(reason.as_str()) == left_out {
                *count = 0;
            }
        }
        let report: Value = serde_json::from_str(&out).context("report JSON")?;
        expected.check(&report)
    }

    /// Programs that drop: a generic XDP program (an XDP link: busybox's `ip` and `tc` cannot
    /// attach BPF programs) on a namespace's loopback drops UDP to one port and a tcx link
    /// (6.6+) shoots UDP to another; the ledger counts each program's verdicts exactly, the
    /// shots matched with their kfree_skb drops. On a kernel that lets no tracing program
    /// attach to a BPF program (an empty fentry program is tried beside), each program must be
    /// listed in the ledger's notes with the kernel's refusal instead. The XDP program is
    /// loaded and attached while dropscope runs, its traffic sent once every run watches it.
    fn programs(&self) -> anyhow::Result<String> {
        use dropscope_tests::fixture::{self, Kind, TC_ACT_SHOT, XDP_DROP};
        const DROPPED: u64 = 500;
        let ns = netns("programs")?;
        // A tcx link on lo's egress (6.6+) shoots UDP to another port; older kernels have no
        // tcx (EINVAL): that part is left out, and the result says so.
        const TCX_SHOT: u64 = 200;
        let tcx = fixture::load(Kind::Tc, "ds_fx_tcx", 7003, TC_ACT_SHOT, true)?;
        let tcx_id = fixture::prog_id(&tcx)?;
        let tcx_link = match fixture::attach_tcx(&tcx, &ns.path(), "lo", true) {
            Ok(link) => Some(link),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => return Err(e).context("attaching a tcx link"),
        };
        let inode = fs::metadata(ns.path())
            .context("the namespace's file")?
            .ino();
        let c = start(
            &self.args.dropscope,
            &[
                "report",
                "--format",
                "json",
                "--no-stacks",
                "--by",
                "reason,location,netns,device",
            ],
        )?;
        // Recorded beside: the kernel's counters are read every 10 s, the programs' verdicts
        // every second between readings; a window that ends before the last reading shows them.
        let recording = self.args.out.join("programs.dsr");
        let _ = fs::remove_file(&recording);
        let recording_s = recording.to_str().context("non-UTF-8 path")?;
        let r = start(
            &self.args.dropscope,
            &[
                "record",
                "-o",
                recording_s,
                "--no-stacks",
                "--by",
                "reason,location,netns,device",
            ],
        )?;
        // Judged beside: a budget on a program's verdicts makes `check` count them.
        let budget = start(
            &self.args.dropscope,
            &[
                "check",
                "--format",
                "json",
                "--by",
                "reason,location,netns,device",
                "--budget",
                "XDP_DROP<1/s,total<1000000/s",
            ],
        )?;
        // The XDP program is loaded and attached while they run: each finds it and attaches a
        // verdict counter to it before its traffic. Each finds it at its next poll after the
        // load (half a second) and, should the load's event be missed, at its next look anyway
        // (`probe::verdicts::DISCOVER_ANYWAY`, 5 s): waited for up to PICK_UP_LIMIT, which allows an
        // emulated guest on a busy machine 20 times that bound, so only a program never found
        // exceeds it; how long it took is said.
        let counters = fixture::programs_named(VERDICT_COUNTER).context("listing programs")?;
        let loaded = std::time::Instant::now();
        let drop = fixture::load(Kind::Xdp, "ds_fx_drop", 7001, XDP_DROP, true)?;
        let drop_id = fixture::prog_id(&drop)?;
        let traced = fixture::fentry_allowed(&drop);
        // An XDP link (generic mode), held until the check ends.
        let _xdp_link = fixture::attach_xdp_link(&drop, &ns.path(), "lo").context("an XDP link")?;
        let found = match traced {
            Ok(()) => loop {
                let now = fixture::programs_named(VERDICT_COUNTER).context("listing programs")?;
                if now >= counters + 3 {
                    break format!("{} ms", loaded.elapsed().as_millis());
                }
                ensure!(
                    loaded.elapsed() < PICK_UP_LIMIT,
                    "{} s after the XDP program was loaded, {} of report, record and check \
                     watch it",
                    PICK_UP_LIMIT.as_secs(),
                    now.saturating_sub(counters)
                );
                std::thread::sleep(Duration::from_millis(20));
            },
            Err(_) => {
                std::thread::sleep(Duration::from_secs(1));
                String::new()
            }
        };
        let sent = ns
            .try_traffic(
                &self.args.traffic,
                &["udp-to", "127.0.0.1", "7001", &DROPPED.to_string()],
                TRAFFIC_LIMIT,
            )
            .and_then(|_| {
                ns.try_traffic(
                    &self.args.traffic,
                    &["udp-to", "127.0.0.1", "7003", &TCX_SHOT.to_string()],
                    TRAFFIC_LIMIT,
                )
            });
        std::thread::sleep(Duration::from_millis(4000));
        r.try_interrupt(Duration::from_secs(60))?;
        let out = c.try_interrupt(Duration::from_secs(60))?;
        let (checked, check_out, check_err) =
            budget.try_interrupt_status(Duration::from_secs(60))?;
        sent?;
        let report: Value = serde_json::from_str(&out).context("report JSON")?;
        // The recording judged by `diff` (against itself: only the budget matters here).
        let diffed = dropscope_tests::wait_timeout(
            Command::new(&self.args.dropscope)
                .args(["diff", recording_s, recording_s, "--format", "json"])
                .args(["--budget", "XDP_DROP<1/s"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .context("starting diff")?,
            Duration::from_secs(60),
        )?;
        let recorded = |to: Option<Duration>| -> anyhow::Result<Value> {
            let to = to.map(|t| format!("{}ms", t.as_millis()));
            let mut args = vec!["report", "--format", "json", "--input", recording_s];
            if let Some(t) = &to {
                args.extend(["--to", t]);
            }
            let out = run_timeout(
                Command::new(&self.args.dropscope).args(&args),
                Duration::from_secs(60),
            )?;
            serde_json::from_slice(&out.stdout).context("recorded report JSON")
        };
        // The window ends 1.5 s before the recording (its last reading), 2.5 s after the
        // traffic.
        let whole = recorded(None)?["seconds"]
            .as_f64()
            .context("the recording's length")?;
        let window_end = Duration::from_secs_f64(whole).saturating_sub(Duration::from_millis(1500));
        let recorded = recorded(Some(window_end))?;
        // The programs' verdicts as rows of the report (reason, program, namespace, device).
        let program = |report: &Value, reason: &str, location: &str| {
            report["programs"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| {
                    r["reason"] == reason
                        && r["location"] == location
                        && r["netns"] == inode
                        && r["device"] == "lo"
                })
                .and_then(|r| r["count"].as_u64())
        };
        let xdp_row = format!("prog ds_fx_drop#{drop_id} (xdpgeneric)");
        let row = |counter: &str| {
            report["ledger"]["counters"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["netns"] == inode && r["counter"] == counter)
        };
        let xdp = format!("Xdp:lo:xdpgeneric:ds_fx_drop#{drop_id}:drop");
        match traced {
            Ok(()) => {
                let n = |r: Option<&Value>, f: &str| r.and_then(|r| r[f].as_u64());
                ensure!(
                    n(row(&xdp), "delta") == Some(DROPPED),
                    "{DROPPED} dropped by XDP; the ledger: {}",
                    report["ledger"]
                );
                ensure!(
                    program(&report, "XDP_DROP", &xdp_row) == Some(DROPPED),
                    "{DROPPED} XDP_DROP rows; the report's: {}",
                    report["programs"]
                );
                // The program's first dropped frames are its row's samples: UDP to its port,
                // live and in the recording.
                let frames = |report: &Value| -> Vec<(Option<u64>, Option<String>)> {
                    (report["programs"].as_array().into_iter().flatten())
                        .filter(|r| r["reason"] == "XDP_DROP" && r["location"] == xdp_row)
                        .flat_map(|r| r["samples"].as_array().cloned().unwrap_or_default())
                        .map(|s| (s["dport"].as_u64(), s["protocol"].as_str().map(Into::into)))
                        .collect()
                };
                for (what, r) in [("the report", &report), ("the recording", &recorded)] {
                    let got = frames(r);
                    ensure!(
                        (1..=8).contains(&got.len())
                            && got.iter().all(|f| *f == (Some(7001), Some("udp".into()))),
                        "{what}'s XDP_DROP row samples 1 to 8 UDP frames to 7001: {}",
                        r["programs"]
                    );
                }
                ensure!(
                    program(&recorded, "XDP_DROP", &xdp_row) == Some(DROPPED),
                    "the recording's window to {window_end:?} (before its last reading of the \
                     kernel's counters) shows {DROPPED} XDP_DROP; its rows: {}",
                    recorded["programs"]
                );
                // `check` and `diff` judge the program's verdicts: broken, naming it (by name:
                // runs are compared by what they name, and an id changes with every load).
                let by_name = "prog ds_fx_drop (xdpgeneric)";
                let check: Value = serde_json::from_str(&check_out).context("check JSON")?;
                let key = (check["keys"].as_array().into_iter().flatten())
                    .find(|k| k["reason"] == "XDP_DROP" && k["location"] == by_name);
                ensure!(
                    checked.code() == Some(1)
                        && check["budgets"][0]["ok"] == false
                        && check["budgets"][1]["ok"] == true
                        && key.and_then(|k| k["count"].as_u64()) == Some(DROPPED),
                    "`check --budget XDP_DROP<1/s` ({checked}) breaks the clause with the \
                     program's {DROPPED} drops as a key; it wrote {check}"
                );
                let diff: Value = serde_json::from_slice(&diffed.stdout).context("diff JSON")?;
                ensure!(
                    diffed.status.code() == Some(1)
                        && diff["budgets"][0]["ok"] == false
                        && diff["budgets"][0]["message"]
                            .as_str()
                            .is_some_and(|m| m.contains(by_name)),
                    "`diff --budget XDP_DROP<1/s` of the recording ({}) breaks it naming the \
                     program; it wrote {diff}",
                    diffed.status
                );
                let tcx_row = format!("Tc:lo:tcx-egress:ds_fx_tcx#{tcx_id}:shot");
                let tcx_said = match tcx_link {
                    Some(_) => {
                        ensure!(
                            (n(row(&tcx_row), "delta"), n(row(&tcx_row), "matched"))
                                == (Some(TCX_SHOT), Some(TCX_SHOT)),
                            "{TCX_SHOT} shot by tcx; the ledger: {}",
                            report["ledger"]
                        );
                        format!(", and {TCX_SHOT} by a tcx link")
                    }
                    None => ", no tcx on this kernel (EINVAL)".to_string(),
                };
                Ok(format!(
                    "{DROPPED} XDP_DROP (its program loaded and attached while counting, \
                     watched by all three {found} after its load) counted per program, \
                     rows of the report and of \
                     a recording's window before its last reading, the XDP row's samples UDP \
                     frames to 7001 in both, the shots matched with their kfree_skb \
                     drops{tcx_said}; `check` and `diff` break XDP_DROP<1/s naming the program"
                ))
            }
            Err(e) => {
                let notes = report["ledger"]["notes"].to_string();
                let tcx = tcx_link.as_ref().map(|_| tcx_id);
                ensure!(
                    report["programs"] == Value::Array(Vec::new()),
                    "verdicts not counted, yet rows: {}",
                    report["programs"]
                );
                for id in [drop_id].into_iter().chain(tcx) {
                    ensure!(
                        notes.contains(&format!("program {id} ")) && row(&xdp).is_none(),
                        "this kernel refuses fentry on programs ({e}), but the ledger does not \
                         say so for program {id}: {}",
                        report["ledger"]
                    );
                }
                // A budget on their verdicts cannot be judged: refused (2), never passed.
                let diff_err = String::from_utf8_lossy(&diffed.stderr);
                let refused = "--budget XDP_DROP<1/s cannot be judged: program ";
                ensure!(
                    checked.code() == Some(2)
                        && diffed.status.code() == Some(2)
                        && check_err.contains(refused)
                        && diff_err.contains(refused),
                    "verdicts not counted, yet `check` ({checked}) and `diff` ({}) did not \
                     refuse XDP_DROP<1/s: {check_out} {check_err} {diff_err}",
                    diffed.status,
                );
                Ok(format!(
                    "this kernel refuses tracing programs on BPF programs ({e}): every program \
                     listed with the refusal, and budgets on their verdicts refused"
                ))
            }
        }
    }

    /// An AF_XDP socket on `lo` that never gives the kernel a buffer, fed by a generic XDP
    /// program (an XDP link: no iproute2 needed): every packet redirected to it is dropped,
    /// and where the kernel answers AF_XDP `sock_diag` the ledger counts exactly what the
    /// socket's own statistics say, matched with the failed redirects' frees; where it does
    /// not (6.1 is built without it), the ledger says so.
    fn af_xdp(&self) -> anyhow::Result<String> {
        use dropscope_tests::{
            fixture::{self, Kind},
            xsk,
        };
        const SENT: u64 = 300;
        let ns = netns("afxdp")?;
        let map = fixture::xskmap()?;
        let prog = fixture::load_insns(
            Kind::Xdp,
            "ds_fx_xsk",
            &fixture::redirect_program(7005, map.as_raw_fd()),
            true,
        )?;
        let socket = xsk::Socket::bind(&ns.path(), "lo", 0).context("an AF_XDP socket on lo")?;
        fixture::map_set(&map, 0, socket.fd())?;
        let _link = fixture::attach_xdp_link(&prog, &ns.path(), "lo").context("an XDP link")?;
        let inode = fs::metadata(ns.path())
            .context("the namespace's file")?
            .ino();
        let before = socket.statistics()?;
        let report =
            self.ledger_report(&ns, &["udp-to", "127.0.0.1", "7005", &SENT.to_string()])?;
        let dropped = socket.statistics()?.rx_dropped - before.rx_dropped;
        ensure!(dropped == SENT, "the socket dropped {dropped} of {SENT}");
        let sk = socket.inode()?;
        let counter = format!("Xsk:lo:q0:sk{sk}:rx_dropped");
        let row = ledger_row(&report, inode, &counter);
        match xsk::diag_available() {
            Ok(()) => {
                let n = |f: &str| row.and_then(|r| r[f].as_u64());
                if (n("delta"), n("matched")) != (Some(SENT), Some(SENT)) {
                    // What the kernel's own tool says, beside what dropscope read there.
                    let ss = run_timeout(
                        Command::new("ip")
                            .args(["netns", "exec", &ns.name, "ss", "-a", "--xdp", "-e"]),
                        Duration::from_secs(30),
                    )
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_else(|e| format!("{e:#}"));
                    let read: Vec<&Value> = (report["kernel_counters"].as_array().into_iter())
                        .flatten()
                        .filter(|c| c["netns"] == inode)
                        .collect();
                    anyhow::bail!(
                        "{SENT} dropped by the socket, matched; the ledger: {}; counters read in \
                         its namespace: {read:?}; ss: {ss}",
                        report["ledger"]
                    );
                }
                Ok(format!(
                    "{SENT} packets redirected to an AF_XDP socket without buffers: {counter} \
                     counted them, as its XDP_STATISTICS did, matched with their frees"
                ))
            }
            Err(e) => {
                let notes = report["ledger"]["notes"].to_string();
                ensure!(
                    row.is_none() && notes.contains("AF_XDP sockets' drops not read"),
                    "this kernel answers no AF_XDP sock_diag ({e}), but the ledger does not say \
                     so: {}",
                    report["ledger"]
                );
                Ok(format!(
                    "this kernel answers no AF_XDP sock_diag ({e}): the socket's {SENT} drops \
                     are noted as not read"
                ))
            }
        }
    }

    /// A netkit pair (6.7+; made with rtnetlink) whose primary runs a program that drops UDP
    /// to one port: its verdicts are counted per program on the primary device, a row of the
    /// report, and one drop with the free in `netkit_xmit` in the ledger. A kernel without
    /// netkit says so when the pair is made, and the check says that.
    fn netkit(&self) -> anyhow::Result<String> {
        use dropscope_tests::{
            fixture::{self, Kind, TC_ACT_SHOT},
            netkit,
        };
        const SENT: u64 = 250;
        let (a, b) = (netns("nk-a")?, netns("nk-b")?);
        match netkit::create(&a.path(), "nk0", &b.path(), "nk1") {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return Err(super::test_binaries::NotHere(format!(
                    "no netkit ({e}): 6.7 added it"
                ))
                .into());
            }
            Err(e) => return Err(e).context("making a netkit pair"),
        }
        let in_ns = |ns: &Netns, args: &[&str]| {
            run_timeout(
                Command::new("ip")
                    .args(["netns", "exec", &ns.name])
                    .args(args),
                Duration::from_secs(30),
            )
        };
        for (ns, dev, ip) in [(&a, "nk0", "10.87.0.1/24"), (&b, "nk1", "10.87.0.2/24")] {
            in_ns(ns, &["ip", "addr", "add", ip, "dev", dev])?;
            in_ns(ns, &["ip", "link", "set", dev, "up"])?;
        }
        let prog = fixture::load(Kind::Tc, "ds_fx_nk", 7006, TC_ACT_SHOT, true)?;
        let id = fixture::prog_id(&prog)?;
        let traced = fixture::fentry_allowed(&prog);
        let _link = fixture::attach_netkit(&prog, &a.path(), "nk0", false)
            .context("a netkit link on nk0")?;
        a.try_traffic(
            &self.args.traffic,
            &["udp-to", "10.87.0.2", "7999", "1"],
            TRAFFIC_LIMIT,
        )?;
        let inode = fs::metadata(a.path())
            .context("the namespace's file")?
            .ino();
        let report = self.ledger_report(&a, &["udp-to", "10.87.0.2", "7006", &SENT.to_string()])?;
        let counter = format!("Tc:nk0:netkit-primary:ds_fx_nk#{id}:shot");
        let row = ledger_row(&report, inode, &counter);
        match traced {
            Ok(()) => {
                let n = |f: &str| row.and_then(|r| r[f].as_u64());
                ensure!(
                    (n("delta"), n("matched")) == (Some(SENT), Some(SENT)),
                    "{SENT} dropped by the netkit program, matched; the ledger: {}",
                    report["ledger"]
                );
                let location = format!("prog ds_fx_nk#{id} (netkit-primary)");
                let listed = (report["programs"].as_array().into_iter().flatten()).any(|r| {
                    r["reason"] == "TC_SHOT"
                        && r["location"] == location.as_str()
                        && r["device"] == "nk0"
                        && r["count"] == SENT
                });
                ensure!(
                    listed,
                    "no {location} row of {SENT}: {}",
                    report["programs"]
                );
                Ok(format!(
                    "{SENT} NETKIT_DROP on nk0's primary program counted per program, a row of \
                     the report, matched with their frees"
                ))
            }
            Err(e) => {
                let notes = report["ledger"]["notes"].to_string();
                ensure!(
                    row.is_none() && notes.contains(&format!("program {id} ")),
                    "this kernel refuses fentry on programs ({e}), but the ledger does not say \
                     so for program {id}: {}",
                    report["ledger"]
                );
                Ok(format!(
                    "this kernel refuses tracing programs on BPF programs ({e}): the netkit \
                     program is listed with the refusal"
                ))
            }
        }
    }

    /// The JSON report (by namespace and device, no stacks) of a session during which `ns`
    /// sent `traffic`.
    fn ledger_report(&self, ns: &Netns, traffic: &[&str]) -> anyhow::Result<Value> {
        let c = start(
            &self.args.dropscope,
            &[
                "report",
                "--format",
                "json",
                "--no-stacks",
                "--by",
                "reason,location,netns,device",
            ],
        )?;
        let sent = ns.try_traffic(&self.args.traffic, traffic, TRAFFIC_LIMIT);
        std::thread::sleep(Duration::from_millis(500));
        let out = c.try_interrupt(Duration::from_secs(60))?;
        sent?;
        serde_json::from_str(&out).context("report JSON")
    }

    fn stacks(&self) -> anyhow::Result<String> {
        let folded = self.args.out.join("drops.folded");
        let c = start(
            &self.args.dropscope,
            &[
                "flamegraph",
                "--format",
                "folded",
                "-o",
                folded.to_str().context("non-UTF-8 path")?,
            ],
        )?;
        let sent = (|| {
            let ns = netns("stacks")?;
            ns.try_traffic(&self.args.traffic, &["udp", "9", "2000"], TRAFFIC_LIMIT)?;
            ns.try_traffic(&self.args.traffic, &["raw", "253", "1"], TRAFFIC_LIMIT)
        })();
        c.try_interrupt(Duration::from_secs(60))?;
        sent?;
        let text = fs::read_to_string(&folded).context("folded file")?;
        let stacks: Vec<(Vec<&str>, u64)> = text
            .lines()
            .filter_map(|l| {
                let (stack, w) = l.rsplit_once(' ')?;
                Some((stack.split(';').collect(), w.parse().ok()?))
            })
            .collect();
        let udp: u64 = stacks
            .iter()
            .filter(|(f, _)| {
                f[0] == "NO_SOCKET" && f.iter().any(|x| x.starts_with("__udp4_lib_rcv"))
            })
            .map(|(_, w)| w)
            .sum();
        ensure!(
            (1800..=2200).contains(&udp),
            "NO_SOCKET stacks through __udp4_lib_rcv weigh {udp} for 2000 drops:\n{text}"
        );
        let rare: Vec<_> = stacks
            .iter()
            .filter(|(f, _)| f[0] == "IP_NOPROTO")
            .collect();
        ensure!(
            rare.len() == 1 && rare[0].1 == 1,
            "the single IP_NOPROTO drop has no stack of weight 1: {rare:?}"
        );
        Ok(format!(
            "{} stacks; udp estimate {udp} for 2000; the single rare drop has its stack",
            stacks.len()
        ))
    }

    fn record(&self) -> anyhow::Result<String> {
        let rec = self.args.out.join("drops.dsrec");
        let _ = fs::remove_file(&rec);
        let c = start(
            &self.args.dropscope,
            &["record", "-o", rec.to_str().context("non-UTF-8 path")?],
        )?;
        let expected = self.traffic("record");
        // Let a snapshot with the final counts reach the file before stopping.
        std::thread::sleep(Duration::from_secs(3));
        c.try_interrupt(Duration::from_secs(60))?;
        let expected = expected?;
        let counts: Vec<String> = expected
            .counts
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        fs::write(self.args.out.join("record-expected.txt"), counts.join("\n"))?;
        let size = fs::metadata(&rec).context("recording")?.len();
        Ok(format!("{size} bytes; replayed on the host"))
    }
}

impl Suite<'_> {
    /// Runs of one datagram to a closed port and one raw packet of an unused protocol, two keys
    /// interleaved on one CPU, for `seconds`, while `report --every 1s` reads them (pinned to
    /// another CPU when there are two, so that the reads cross CPUs as the counting protocol's
    /// weakly ordered case needs). Every report must keep keyed + overflow = total: a MISMATCH
    /// (a settled read disagreeing twice at the same totals) shows the kernel's total instead.
    /// The last report counts exactly what was sent.
    fn flood(&self, seconds: u64) -> anyhow::Result<String> {
        let ns = netns("flood")?;
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let secs = seconds.to_string();
        let report = [
            "report",
            "--format",
            "json",
            "--no-stacks",
            "--netns",
            &ns.name,
            "--every",
            "1s",
        ];
        let mix = ["mix", "1", &secs];
        // taskset (busybox's in the arm64 guests) pins each side to its own CPU.
        let (reader_bin, reader_args) = pinned(cpus, &self.args.dropscope, "0", &report)?;
        let (sender_bin, sender_args) = pinned(cpus, &self.args.traffic, "1", &mix)?;
        let reader_args: Vec<&str> = reader_args.iter().map(String::as_str).collect();
        let sender_args: Vec<&str> = sender_args.iter().map(String::as_str).collect();
        let mut c = start(&reader_bin, &reader_args)?;
        c.read_stdout();
        let sent = ns.try_traffic(
            &sender_bin,
            &sender_args,
            Duration::from_secs(seconds) + TRAFFIC_LIMIT,
        );
        // The last reports, after the flood, are settled.
        std::thread::sleep(Duration::from_secs(3));
        let out = c.try_interrupt(Duration::from_secs(60))?;
        let sent = sent?;
        let (udp, raw) = sent
            .lines()
            .find_map(|l| {
                let mut f = l.strip_prefix("total ")?.split_whitespace();
                Some((
                    f.next()?.parse::<u64>().ok()?,
                    f.next()?.parse::<u64>().ok()?,
                ))
            })
            .with_context(|| format!("no total line from the generator: {sent}"))?;
        let reports: Vec<Value> = out
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .context("one JSON report per line")?;
        ensure!(
            reports.len() as u64 >= seconds / 2,
            "{} reports in a {seconds}-s flood",
            reports.len()
        );
        let mut grew = 0;
        let mut last_total = 0;
        for (i, r) in reports.iter().enumerate() {
            let keyed: u64 = r["drops"]
                .as_array()
                .context("no drops array")?
                .iter()
                .filter_map(|d| d["count"].as_u64())
                .sum();
            let (Some(overflow), Some(total)) = (r["overflow"].as_u64(), r["total"].as_u64())
            else {
                anyhow::bail!("report {i} has no overflow or total: {r}");
            };
            ensure!(
                keyed + overflow == total,
                "report {i}: MISMATCH: kernel total {total}, keyed {keyed} + overflow {overflow}"
            );
            ensure!(total >= last_total, "report {i}: the total went back");
            grew += usize::from(total > last_total);
            last_total = total;
        }
        let last = reports.last().context("no report")?;
        // A packet sent is dropped at the closed port (NO_SOCKET), at the unknown protocol
        // (IP_NOPROTO), or before either when a slow guest's loopback backlog is full
        // (CPU_BACKLOG, which also takes the ICMP errors the UDP drops send back): the counts
        // never exceed what was sent, and the invariant held in every report above.
        let of = |reason: &str| -> anyhow::Result<u64> {
            Ok(last["drops"]
                .as_array()
                .context("no drops array")?
                .iter()
                .filter(|d| d["reason"] == reason)
                .filter_map(|d| d["count"].as_u64())
                .sum())
        };
        let (no_socket, noproto, backlog) =
            (of("NO_SOCKET")?, of("IP_NOPROTO")?, of("CPU_BACKLOG")?);
        ensure!(
            no_socket <= udp && noproto <= raw && no_socket + noproto + backlog >= udp.min(raw),
            "counted NO_SOCKET {no_socket} IP_NOPROTO {noproto} CPU_BACKLOG {backlog}, sent \
             {udp} UDP and {raw} raw (report: {last})"
        );
        Ok(format!(
            "{} reports over {seconds} s on {cpus} CPU(s), {grew} growing, none with a MISMATCH; \
             exact: NO_SOCKET={no_socket} IP_NOPROTO={noproto} CPU_BACKLOG={backlog} for \
             {udp} UDP and {raw} raw sent",
            reports.len()
        ))
    }
}

/// `bin args` pinned to `cpu` with taskset when there are two CPUs or more, else as it is.
fn pinned(
    cpus: usize,
    bin: &Path,
    cpu: &str,
    args: &[&str],
) -> anyhow::Result<(PathBuf, Vec<String>)> {
    let args = args.iter().map(|a| a.to_string());
    if cpus < 2 {
        return Ok((bin.to_path_buf(), args.collect()));
    }
    let path = bin.to_str().context("non-UTF-8 path")?;
    let all = ["-c", cpu, path].into_iter().map(str::to_string);
    Ok((PathBuf::from("taskset"), all.chain(args).collect()))
}

/// How long a traffic run may take in an emulated guest.
const TRAFFIC_LIMIT: Duration = Duration::from_secs(120);

/// A network namespace for one check (the tests' guard: loopback up, removed when dropped).
fn netns(tag: &str) -> anyhow::Result<Netns> {
    Netns::create(&format!("vmtest-{tag}-{}", std::process::id()))
}

/// The ledger's row of `counter` in namespace `netns`, if it grew.
fn ledger_row<'a>(report: &'a Value, netns: u64, counter: &str) -> Option<&'a Value> {
    (report["ledger"]["counters"]
        .as_array()
        .into_iter()
        .flatten())
    .find(|r| r["netns"] == netns && r["counter"] == counter)
}

/// Starts dropscope and waits (up to 120 s: emulated guests are slow) for its line saying it
/// is attached.
fn start(bin: &Path, args: &[&str]) -> anyhow::Result<Counting> {
    Counting::try_start(bin, args, Duration::from_secs(120))
}
