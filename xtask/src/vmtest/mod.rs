//! `cargo xtask vmtest`: boots Debian's 6.1 and 6.12 kernels under qemu and tests the `dist`
//! binary inside each with the tests crate's own binaries (`test_binaries`), as the running
//! kernel does: amd64 kernels with virtme-ng on this machine's root filesystem, arm64 kernels
//! emulated by qemu-system-aarch64 on a small initramfs root (`foreign`), the binaries built
//! for aarch64. Prints a kernel × test binary table.
pub mod foreign;
mod initramfs;
mod jobs;
pub mod kernels;
mod table;
pub mod test_binaries;
mod userland;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use self::table::{Row, outcome};
use crate::dist::Arch;

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
    /// Seconds of the interleaved flood in each arm64 guest (the `interleave` column), its
    /// live reports read from another CPU; none may show a MISMATCH (0: leave it out).
    #[arg(long, default_value_t = 60)]
    pub flood_seconds: u64,
    /// The running kernel ran the whole tests crate already (`cargo xtask test`): its row
    /// checks the reasons only and says so.
    #[arg(long, hide = true)]
    pub host_tested: bool,
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
            host_tested: false,
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

/// The limit on one guest run (boot plus suite).
const GUEST_LIMIT: Duration = Duration::from_secs(900);

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
    // The amd64 guests share this machine's root filesystem: they run the tests crate's
    // binaries built here.
    let binaries = if args.arches.contains(&host) {
        crate::step("the tests crate's binaries");
        test_binaries::binaries(None)?
    } else {
        Vec::new()
    };
    let xtask = std::env::current_exe().context("path of xtask")?;
    let work = crate::target_dir().join("vmtest");
    // The runner and the tests crate's binaries of each foreign machine: built by the first
    // of its guests to run (the others wait for them).
    let foreign: Vec<(Arch, OnceLock<Result<foreign::Tools, String>>)> = (args.arches.iter())
        .filter(|a| **a != host)
        .map(|a| (*a, OnceLock::new()))
        .collect();
    let mut accel = args.accel;
    // Downloads first, one at a time; then the guests, side by side.
    let mut jobs = Vec::new();
    for arch in &args.arches {
        let dist = dists
            .iter()
            .find(|d| d.arch == *arch)
            .context("no dist binary for a guest")?;
        if *arch != host {
            kernels::unpacked("busybox-static", *arch, &work, kernels::keep_all)?;
            userland::files(*arch, &work)?;
        }
        for name in &args.kernels {
            if name == "host" && *arch != host {
                continue;
            }
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
            let ctx = Context {
                args,
                dist: &dist.binary,
                host_bin: &host_bin,
                work: &work,
                out,
            };
            let job = if let Some((_, tools)) = foreign.iter().find(|(a, _)| a == arch) {
                let kernel = kernels::fetch(name, *arch, &work)?;
                let label = format!("{} (TCG, {} CPUs)", kernel.release, args.arm64_cpus);
                jobs::Job {
                    label: label.clone(),
                    long: name == "6.12",
                    // Its tests wait on timers and the network more than they compute: a guest
                    // of 2 CPUs kept 1.2 to 1.3 of this machine's CPUs busy (measured).
                    cpus: (args.arm64_cpus as usize).div_ceil(2),
                    run: Box::new(move || foreign_row(&ctx, *arch, name, &kernel, tools, label)),
                }
            } else if name == "host" {
                let cmd = runner_command(&xtask, &ctx, &binaries, name)?;
                jobs::Job {
                    label: "host".into(),
                    long: false,
                    cpus: 1,
                    run: Box::new(move || host_row(&ctx, cmd)),
                }
            } else {
                let kernel = kernels::fetch(name, *arch, &work)?;
                if accel == Accel::Auto {
                    accel = if kvm_boots(&kernel.vmlinuz, &ctx.out) {
                        Accel::Kvm
                    } else {
                        Accel::Tcg
                    };
                    eprintln!("vmtest: using {accel:?}");
                }
                let cmd = runner_command(&xtask, &ctx, &binaries, name)?;
                let how = match accel {
                    Accel::Kvm => "KVM, 2 CPUs",
                    Accel::Tcg | Accel::Auto => "TCG, 1 CPU",
                };
                let label = format!("{} ({how})", kernel.release);
                jobs::Job {
                    label: label.clone(),
                    long: name == "6.12",
                    cpus: if accel == Accel::Kvm { 2 } else { 1 },
                    run: Box::new(move || guest_row(&ctx, name, &kernel, accel, &cmd, label)),
                }
            };
            jobs.push(job);
        }
    }
    // The 6.12 guests run the most columns (stacks, programs, netkit, the flood) and take
    // longest: they start first, the others fill in beside them.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows = jobs::run(jobs, cpus);
    let failed = table::print(&rows);
    eprintln!("vmtest: {:.0} s in all", started.elapsed().as_secs_f64());
    ensure!(failed == 0, "vmtest: {failed} check(s) failed");
    Ok(())
}

/// What every row's job reads: the options, the binaries and where its results go.
struct Context<'a> {
    args: &'a VmtestArgs,
    /// The dist binary of the row's machine.
    dist: &'a Path,
    /// The dist binary of this machine, which checks what the guests leave.
    host_bin: &'a Path,
    /// vmtest's work directory (kernels, initramfs roots).
    work: &'a Path,
    /// The row's output directory.
    out: PathBuf,
}

/// The runner's command line for an amd64 guest or the host: the dist binary, the tests
/// crate's binaries built here, the columns the kernel leaves out.
fn runner_command(
    xtask: &Path,
    ctx: &Context<'_>,
    binaries: &[(String, PathBuf)],
    name: &str,
) -> anyhow::Result<Vec<String>> {
    let path = |p: &Path| p.to_str().map(str::to_string).context("non-UTF-8 path");
    let mut cmd = vec![
        path(xtask)?,
        "vmtest-tests".into(),
        "--dropscope".into(),
        path(ctx.dist)?,
        "--out".into(),
        path(&ctx.out)?,
    ];
    cmd.extend(test_binaries::run_args(
        binaries,
        &host_left_out(ctx.args, name),
    )?);
    Ok(cmd)
}

/// What an amd64 kernel or the host leaves out, and why.
fn host_left_out(args: &VmtestArgs, name: &str) -> Vec<(&'static str, &'static str)> {
    let mut left_out = test_binaries::left_out(name);
    if name == "host" && args.host_tested {
        let ran = "the whole tests crate ran on this kernel earlier in this run";
        let rest: Vec<_> = (test_binaries::COLUMNS.iter())
            .filter(|c| !left_out.iter().any(|(n, _)| *n == c.name))
            .map(|c| (c.name, ran))
            .collect();
        left_out.extend(rest);
    }
    left_out
}

/// A row's results: the runner's, the BTF and replay checks made here, and how the run
/// ended.
fn finish_row(
    ctx: &Context<'_>,
    kernel: String,
    btf: &Path,
    mut left_out: Vec<(&str, &str)>,
    err: Option<String>,
    t: Instant,
) -> Row {
    let mut results = table::read_results(&ctx.out, test_binaries::MARKER);
    results.push(check_btf(ctx.host_bin, btf, &ctx.out));
    replay(ctx.host_bin, &ctx.out, &mut results, &mut left_out);
    results.extend(err.map(|e| ("run".into(), false, e)));
    Row {
        kernel,
        columns: test_binaries::table_columns(),
        results,
        skipped: (left_out.into_iter())
            .map(|(t, why)| (t.to_string(), why.to_string()))
            .collect(),
        seconds: t.elapsed().as_secs_f64(),
    }
}

/// The tests on the running kernel (no VM), under the tests' host-wide lock.
fn host_row(ctx: &Context<'_>, mut cmd: Vec<String>) -> Row {
    let t = Instant::now();
    crate::step("the tests on the running kernel (no VM)");
    cmd.extend(["--lock".into(), crate::test::TESTS_LOCK_FILE.into()]);
    let err = match Command::new(&cmd[0]).args(&cmd[1..]).status() {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("the tests exited with {s}")),
        Err(e) => Some(format!("running the tests: {e}")),
    };
    let release = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let btf = Path::new("/sys/kernel/btf/vmlinux");
    let left_out = host_left_out(ctx.args, "host");
    finish_row(ctx, format!("{release} (host)"), btf, left_out, err, t)
}

/// An amd64 kernel of `series` booted with virtme-ng on this machine's root, the runner
/// inside.
fn guest_row(
    ctx: &Context<'_>,
    series: &str,
    kernel: &kernels::Kernel,
    accel: Accel,
    cmd: &[String],
    label: String,
) -> Row {
    let t = Instant::now();
    crate::step(&format!("booting {} under qemu", kernel.release));
    let err = boot(&kernel.vmlinuz, accel, &ctx.out, &cmd.join(" ")).err();
    let left_out = host_left_out(ctx.args, series);
    let err = err.map(|e| format!("{e:#}"));
    finish_row(ctx, label, &kernel.btf, left_out, err, t)
}

/// An arm64 kernel of `series` emulated by qemu on its own small root, the runner and the
/// tests crate's binaries built for it (by the first of its guests to run).
fn foreign_row(
    ctx: &Context<'_>,
    arch: Arch,
    series: &str,
    kernel: &kernels::Kernel,
    tools: &OnceLock<Result<foreign::Tools, String>>,
    label: String,
) -> Row {
    let t = Instant::now();
    let cpus = ctx.args.arm64_cpus;
    let mut left_out = test_binaries::left_out_emulated(series);
    if ctx.args.flood_seconds == 0 {
        left_out.push(("interleave", "--flood-seconds 0"));
    }
    let tools = tools.get_or_init(|| foreign::tools(arch).map_err(|e| format!("{e:#}")));
    let err = (|| {
        let tools = tools.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut cmd = vec![format!(
            "/bin/xtask vmtest-tests --dropscope /bin/dropscope --out /out --flood-seconds {}",
            ctx.args.flood_seconds
        )];
        cmd.extend(test_binaries::run_args(&tools.binaries, &left_out)?);
        crate::step(&format!(
            "booting {} under qemu-system-{} ({cpus} CPUs, TCG)",
            kernel.release,
            arch.name()
        ));
        let guest = foreign::Guest {
            arch,
            kernel,
            dropscope: ctx.dist,
            tools,
            cpus,
            command: &cmd.join(" "),
        };
        foreign::boot(&guest, ctx.work, &ctx.out, GUEST_LIMIT)
    })()
    .err()
    .map(|e| format!("{e:#}"));
    finish_row(ctx, label, &kernel.btf, left_out, err, t)
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

/// Where the record column ran, its recording replayed here (`check_replay`); else the
/// column left out with its reason.
fn replay(
    bin: &Path,
    out: &Path,
    results: &mut Vec<(String, bool, String)>,
    left_out: &mut Vec<(&str, &str)>,
) {
    if left_out.iter().any(|(n, _)| *n == "record") {
        left_out.push((
            test_binaries::REPLAY,
            "no recording was made on this kernel (its record column is left out)",
        ));
    } else {
        results.push(check_replay(bin, out));
    }
}

/// The recording the record test made (kept in `out`, see `test_binaries::KEEP`) replays here
/// exactly as it replayed where it was made: the same rows, total and overflow (a recording
/// made in an arm64 guest read by the x86_64 binary).
fn check_replay(bin: &Path, out: &Path) -> (String, bool, String) {
    let result = (|| {
        let there: Value = serde_json::from_slice(
            &fs::read(out.join("record.json")).context("no recording was kept")?,
        )
        .context("the replay where it was made")?;
        let o = Command::new(bin)
            .args(["report", "--format", "json", "--input"])
            .arg(out.join("record.dsrec"))
            .output()?;
        ensure!(
            o.status.success(),
            "replaying failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let here: Value = serde_json::from_slice(&o.stdout)?;
        for field in ["drops", "total", "overflow"] {
            ensure!(
                here[field] == there[field],
                "the {field} replayed here differ from where the recording was made: {} here, \
                 {} there",
                here[field],
                there[field]
            );
        }
        Ok(format!(
            "{} rows, total {}, as where it was made",
            here["drops"].as_array().map_or(0, Vec::len),
            here["total"]
        ))
    })();
    outcome(test_binaries::REPLAY, result)
}
