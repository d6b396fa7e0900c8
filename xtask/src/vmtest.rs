//! `cargo xtask vmtest`: boots Debian's 6.1 and 6.12 kernels under qemu and runs the
//! exact-count suite inside each with the `dist` binary: amd64 kernels with virtme-ng on this
//! machine's root filesystem, arm64 kernels emulated by qemu-system-aarch64 on a small
//! initramfs root (`vmtest_foreign`); the running kernel gets the same suite without a VM.
//! Prints a kernel × check table.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use crate::{dist::Arch, vmtest_foreign, vmtest_guest, vmtest_kernels as kernels};

/// Options of `cargo xtask vmtest`.
#[derive(clap::Args)]
pub struct VmtestArgs {
    /// Kernels to test: `6.1` and `6.12` (Debian's current packages, booted under qemu) and
    /// `host` (the running kernel, no VM; it attaches the probe here).
    #[arg(long = "kernel", value_delimiter = ',', default_values_t = ["6.1".to_string(), "6.12".to_string(), "host".to_string()])]
    pub kernels: Vec<String>,
    /// Machines whose kernels to boot: `amd64` (x86_64) and `arm64` (aarch64, emulated by
    /// qemu-system-aarch64 -M virt -cpu max, with the aarch64 dist binary).
    #[arg(long = "arch", value_enum, value_delimiter = ',', default_values_t = DEFAULT_ARCHES)]
    pub arches: Vec<Arch>,
    /// Virtualization of amd64 guests: `auto` uses KVM if a guest boots with it, else TCG with
    /// one CPU. arm64 guests are always emulated (TCG).
    #[arg(long, value_enum, default_value_t = Accel::Auto)]
    pub accel: Accel,
    /// CPUs of the arm64 guests.
    #[arg(long, default_value_t = 2)]
    pub arm64_cpus: u32,
    /// Seconds of interleaved flood in each arm64 guest, its live reports read from another
    /// CPU; none may show a MISMATCH (0: skip).
    #[arg(long, default_value_t = 60)]
    pub flood_seconds: u64,
}

/// The machines `vmtest` boots kernels of unless told.
pub const DEFAULT_ARCHES: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

impl Default for VmtestArgs {
    fn default() -> Self {
        Self {
            kernels: vec!["6.1".into(), "6.12".into(), "host".into()],
            arches: DEFAULT_ARCHES.to_vec(),
            accel: Accel::Auto,
            arm64_cpus: 2,
            flood_seconds: 60,
        }
    }
}

/// How qemu runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    /// KVM if it boots a guest, else TCG.
    Auto,
    /// Hardware virtualization.
    Kvm,
    /// Emulation with one CPU (slow, works nested).
    Tcg,
}

/// The columns of the table, in order.
const CHECKS: [&str; 14] = [
    "reasons",
    "reasons --btf",
    "report tp_btf",
    "report tracepoint",
    "attribution",
    "stacks",
    vmtest_guest::LEDGER,
    vmtest_guest::PROGRAMS,
    vmtest_guest::AF_XDP,
    vmtest_guest::NETKIT,
    vmtest_guest::SOCKETS,
    "record",
    "replay here",
    vmtest_guest::FLOOD,
];

/// The limit on one guest run (boot plus suite).
const GUEST_LIMIT: Duration = Duration::from_secs(900);

struct Row {
    kernel: String,
    results: Vec<(String, bool, String)>,
    /// Checks not run on this kernel (shown as `-`).
    skipped: Vec<&'static str>,
    seconds: f64,
}

/// Runs the suite on each kernel and prints the table; fails if any check failed.
pub fn run(args: &VmtestArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let host = Arch::ALL
        .into_iter()
        .find(|a| a.is_host())
        .context("vmtest runs on x86_64 or aarch64 machines")?;
    let mut arches = vec![host];
    arches.extend(args.arches.iter().filter(|a| **a != host));
    crate::setup::vmtest_tools(&args.arches)?;
    // The host's own binary checks what the guests leave (BTF files, recordings), whatever
    // machine they were.
    let dists = crate::dist::build(&arches)?;
    let host_bin = dists[0].binary.clone();
    for d in &dists {
        eprintln!(
            "vmtest: testing {} (packaged in {})",
            d.binary.display(),
            d.deb.display()
        );
    }
    crate::step("traffic generator");
    crate::cargo(&["build", "--package", "dropscope-tests", "--bin", "traffic"])?;
    let traffic = crate::target_dir().join("debug/traffic");
    let xtask = std::env::current_exe().context("path of xtask")?;
    let work = crate::target_dir().join("vmtest");
    let mut accel = args.accel;
    let mut rows = Vec::new();
    for arch in &args.arches {
        let dist = dists
            .iter()
            .find(|d| d.arch == *arch)
            .context("no dist binary for a guest")?;
        let foreign = (*arch != host)
            .then(|| vmtest_foreign::tools(*arch))
            .transpose()?;
        for name in &args.kernels {
            if name == "host" && *arch != host {
                continue;
            }
            let t = Instant::now();
            let dir = if *arch == host {
                name.clone()
            } else {
                format!("{name}-{}", arch.deb())
            };
            let out = work.join("out").join(dir);
            if out.exists() {
                fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
            }
            fs::create_dir_all(&out)?;
            let (label, btf, setup_err) = if let Some(tools) = &foreign {
                let kernel = kernels::fetch(name, *arch, &work)?;
                let cpus = args.arm64_cpus;
                crate::step(&format!(
                    "booting {} under qemu-system-{} ({cpus} CPUs, TCG)",
                    kernel.release,
                    arch.name()
                ));
                let err = vmtest_foreign::boot(
                    &vmtest_foreign::Guest {
                        arch: *arch,
                        kernel: &kernel,
                        dropscope: &dist.binary,
                        tools,
                        cpus,
                        flood_seconds: args.flood_seconds,
                    },
                    &work,
                    &out,
                    GUEST_LIMIT,
                )
                .err();
                (
                    format!("{} (TCG, {cpus} CPUs)", kernel.release),
                    kernel.btf,
                    err.map(|e| format!("{e:#}")),
                )
            } else {
                let guest = [
                    xtask.to_str().context("non-UTF-8 path")?,
                    "vmtest-guest",
                    "--dropscope",
                    dist.binary.to_str().context("non-UTF-8 path")?,
                    "--traffic",
                    traffic.to_str().context("non-UTF-8 path")?,
                    "--out",
                    out.to_str().context("non-UTF-8 path")?,
                ];
                if name == "host" {
                    crate::step("suite on the running kernel (no VM)");
                    let status = Command::new(guest[0]).args(&guest[1..]).status();
                    let err = match status {
                        Ok(s) if s.success() => None,
                        Ok(s) => Some(format!("suite exited with {s}")),
                        Err(e) => Some(format!("running the suite: {e}")),
                    };
                    let release = fs::read_to_string("/proc/sys/kernel/osrelease")
                        .map(|s| s.trim().to_string())
                        .unwrap_or_else(|_| "unknown".into());
                    (
                        format!("{release} (host)"),
                        PathBuf::from("/sys/kernel/btf/vmlinux"),
                        err,
                    )
                } else {
                    let kernel = kernels::fetch(name, *arch, &work)?;
                    crate::step(&format!("booting {} under qemu", kernel.release));
                    if accel == Accel::Auto {
                        accel = if kvm_boots(&kernel.vmlinuz, &out) {
                            Accel::Kvm
                        } else {
                            Accel::Tcg
                        };
                        eprintln!("vmtest: using {accel:?}");
                    }
                    let err = boot(&kernel.vmlinuz, accel, &out, &guest.join(" ")).err();
                    let how = match accel {
                        Accel::Kvm => "KVM, 2 CPUs",
                        Accel::Tcg | Accel::Auto => "TCG, 1 CPU",
                    };
                    (
                        format!("{} ({how})", kernel.release),
                        kernel.btf,
                        err.map(|e| format!("{e:#}")),
                    )
                }
            };
            let mut results = read_results(&out);
            results.push(check_btf(&host_bin, &btf, &out));
            results.push(check_replay(&host_bin, &out));
            if let Some(e) = setup_err {
                results.push(("run".into(), false, e));
            }
            let flooded = foreign.is_some() && args.flood_seconds > 0;
            rows.push(Row {
                kernel: label,
                results,
                skipped: [
                    (!flooded).then_some(vmtest_guest::FLOOD),
                    // The arm64 initramfs has busybox's `tc`, which cannot add a tbf (its
                    // programs check attaches an XDP link and a tcx link, no tc filter).
                    foreign.is_some().then_some(vmtest_guest::LEDGER),
                ]
                .into_iter()
                .flatten()
                .collect(),
                seconds: t.elapsed().as_secs_f64(),
            });
        }
    }
    let failed = print_table(&rows);
    eprintln!("vmtest: {:.0} s in all", started.elapsed().as_secs_f64());
    ensure!(failed == 0, "vmtest: {failed} check(s) failed");
    Ok(())
}

/// Whether a guest boots with KVM here (nested KVM can fail in the kernel's decompressor).
fn kvm_boots(vmlinuz: &Path, out: &Path) -> bool {
    if fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return false;
    }
    let flag = out.join("kvm-booted");
    let cmd = format!("touch {}", flag.display());
    // Only the flag counts: a failed or hung boot leaves none.
    let _ = run_vng(
        vmlinuz,
        Accel::Kvm,
        out,
        &cmd,
        Duration::from_secs(60),
        "kvm-probe",
    );
    let ok = flag.exists();
    let _ = fs::remove_file(&flag);
    ok
}

/// Boots the kernel and runs the guest suite.
fn boot(vmlinuz: &Path, accel: Accel, out: &Path, cmd: &str) -> anyhow::Result<()> {
    run_vng(vmlinuz, accel, out, cmd, GUEST_LIMIT, "console")
}

/// Runs `vng` with a time limit, its console saved to `OUT/<log>.log`; kills its whole process
/// group (qemu included) on timeout.
fn run_vng(
    vmlinuz: &Path,
    accel: Accel,
    out: &Path,
    cmd: &str,
    limit: Duration,
    log: &str,
) -> anyhow::Result<()> {
    let log_path = out.join(format!("{log}.log"));
    let log = fs::File::create(&log_path)?;
    let mut vng = Command::new("vng");
    vng.arg("--verbose");
    match accel {
        Accel::Kvm => vng.args(["--cpus", "2"]),
        // Two CPUs under TCG crash 6.12 in text patching; one is reliable.
        Accel::Tcg | Accel::Auto => vng.args(["--disable-kvm", "--cpus", "1"]),
    };
    vng.args(["--memory", "2G", "--run"])
        .arg(vmlinuz)
        .arg(format!("--rwdir={}", out.display()))
        .args(["--exec", cmd])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .env("PATH", crate::setup::path_with_tools());
    run_limited(&mut vng, limit, &log_path)
}

/// Runs a command (its output already directed to `log`) in its own process group with a time
/// limit, killing the whole group (qemu included) on timeout. Its exit status is only reported:
/// the results file decides.
pub fn run_limited(cmd: &mut Command, limit: Duration, log: &Path) -> anyhow::Result<()> {
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            // vng cannot always pass the guest command's status out (its console fallback
            // exits 255 after a clean run), so the results file, not this status, decides.
            if !status.success() {
                eprintln!(
                    "vmtest: {:?} exited with {status} (the results decide); console: {}",
                    cmd.get_program(),
                    log.display()
                );
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) on the process group we created for the command; a valid signal.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            bail!(
                "the guest did not finish in {} s; console: {}",
                limit.as_secs(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The guest's result lines: (check, passed, detail).
fn read_results(out: &Path) -> Vec<(String, bool, String)> {
    let text = fs::read_to_string(out.join("results.txt")).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix(vmtest_guest::MARKER))
        .filter_map(|l| {
            let (check, rest) = l.trim().split_once(": ")?;
            let (status, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((check.to_string(), status == "PASS", detail.to_string()))
        })
        .collect()
}

/// `reasons --btf` on the host must list exactly what `reasons` listed inside that kernel.
fn check_btf(bin: &Path, btf: &Path, out: &Path) -> (String, bool, String) {
    let result = (|| {
        let inside: Value = serde_json::from_slice(
            &fs::read(out.join("reasons.json")).context("no reasons from inside the kernel")?,
        )?;
        let o = Command::new(bin)
            .args(["reasons", "--format", "json", "--btf"])
            .arg(btf)
            .output()?;
        ensure!(
            o.status.success(),
            "reasons --btf failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let here: Value = serde_json::from_slice(&o.stdout)?;
        ensure!(
            here == inside,
            "the BTF file lists other reasons than the running kernel"
        );
        Ok(format!(
            "{} reasons, identical to the kernel's own",
            here.as_array().map_or(0, Vec::len)
        ))
    })();
    outcome("reasons --btf", result)
}

/// The recording made in the guest replays here with the exact counts sent there.
fn check_replay(bin: &Path, out: &Path) -> (String, bool, String) {
    let result = (|| {
        let expected =
            fs::read_to_string(out.join("record-expected.txt")).context("no recording was made")?;
        let counts = expected
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(r, n)| Ok((r.to_string(), n.parse()?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let o = Command::new(bin)
            .args(["report", "--format", "json", "--input"])
            .arg(out.join("drops.dsrec"))
            .output()?;
        ensure!(
            o.status.success(),
            "replaying failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let report: Value = serde_json::from_slice(&o.stdout)?;
        vmtest_guest::Expected { counts }.check(&report)
    })();
    outcome("replay here", result)
}

fn outcome(check: &str, r: anyhow::Result<String>) -> (String, bool, String) {
    match r {
        Ok(d) => (check.to_string(), true, d),
        Err(e) => (check.to_string(), false, format!("{e:#}")),
    }
}

/// Prints the kernel × check table and the details; returns the number of failures.
fn print_table(rows: &[Row]) -> usize {
    let width = rows
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut failed = 0;
    println!("\n| {:width$} | {} | time |", "kernel", CHECKS.join(" | "));
    println!(
        "|{}|{}------|",
        "-".repeat(width + 2),
        CHECKS
            .iter()
            .map(|c| format!("{}|", "-".repeat(c.len() + 2)))
            .collect::<String>()
    );
    for row in rows {
        let cells: Vec<String> = CHECKS
            .iter()
            .map(|c| {
                let cell = match row.results.iter().find(|(n, _, _)| n == c) {
                    Some((_, true, _)) => "pass",
                    Some((_, false, _)) => "FAIL",
                    None if row.skipped.contains(c) => "-",
                    None => "none",
                };
                format!("{cell:^w$}", w = c.len())
            })
            .collect();
        println!(
            "| {:width$} | {} | {:>3.0}s |",
            row.kernel,
            cells.join(" | "),
            row.seconds
        );
    }
    println!();
    for row in rows {
        for c in CHECKS {
            match row.results.iter().find(|(n, _, _)| n == c) {
                Some((_, true, d)) => println!("{} / {c}: pass: {d}", row.kernel),
                Some((_, false, d)) => {
                    failed += 1;
                    println!("{} / {c}: FAIL: {d}", row.kernel);
                }
                None if row.skipped.contains(&c) => {}
                None => {
                    failed += 1;
                    println!(
                        "{} / {c}: FAIL: no result (see the console log)",
                        row.kernel
                    );
                }
            }
        }
        for (n, ok, d) in &row.results {
            if !CHECKS.contains(&n.as_str()) && !ok {
                failed += 1;
                println!("{} / {n}: FAIL: {d}", row.kernel);
            }
        }
    }
    failed
}
