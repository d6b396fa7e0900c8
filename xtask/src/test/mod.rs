//! `cargo xtask test`: lint, build and test as the invoking user; only the test binaries (and
//! vmtest's guests) run as root.
//!
//! Run from a user shell, cargo builds as the user and runs each test binary through
//! `sudo -E` (cargo's `CARGO_TARGET_<triple>_RUNNER`, as aya's own xtask does), so `target/` and
//! `~/.cargo` stay the user's; anything a root step still left there (a test's output under
//! `target/`) is given back to the user at the end. Run as root (CI), everything runs as root.
//!
//! The root tests mostly wait on the kernel: what needs no kernel of its own (the dist builds,
//! the arm64 guests' binaries, fuzzing) runs in a second lane (`lane`), started after the
//! set-up, beside lint, the builds and the root tests.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::{cargo, root, setup, step};

pub mod lane;

/// Runs the whole suite.
pub fn run(no_lint: bool, fuzz_seconds: u64, no_vmtest: bool) -> anyhow::Result<()> {
    let as_root = setup::is_root();
    if as_root && std::env::var_os("SUDO_USER").is_some() {
        eprintln!(
            "xtask: running under sudo, so what is built now belongs to root; run `cargo xtask \
             test` as yourself instead: it builds as you and uses sudo only to run the tests"
        );
    }
    // Whatever happens below, root-owned leftovers are handed back when run as a user.
    let _sweep = (!as_root).then(|| Sweep::new(&[root(), setup::home().join(".cargo")]));
    warn_if_short_of_disk(&crate::target_dir());
    setup::all(true)?;
    // Everything the second lane installs, installed now: one package manager at a time. It
    // starts at once: its builds take the CPU the steps below leave (set-up checks, the
    // single-threaded ends of builds, the root tests' waits).
    setup::dist_targets(&crate::dist::Arch::ALL)?;
    if !no_vmtest {
        setup::vmtest_tools(&crate::vmtest::DEFAULT_ARCHES)?;
    }
    let mut lane = lane::start(fuzz_seconds, !no_vmtest)?;
    step("Prometheus rules: promtool check and unit tests (assets/prometheus/)");
    promtool_rules()?;
    if !no_lint {
        step("cargo fmt --check");
        cargo(&["fmt", "--all", "--", "--check"])?;
        step("clippy (with the bench-only code)");
        cargo(&[
            "clippy",
            "--workspace",
            "--exclude",
            "dropscope-ebpf",
            "--all-targets",
            "--features",
            "dropscope/bench",
            "--",
            "-D",
            "warnings",
        ])?;
        step("clippy without the live feature");
        cargo(&[
            "clippy",
            "--package",
            "dropscope",
            "--no-default-features",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])?;
        step("clippy for aarch64 (the cross-built dist binary: c_char, libc's musl types)");
        cargo(&[
            "clippy",
            "--target",
            crate::dist::Arch::Aarch64.target(),
            "--workspace",
            "--exclude",
            "dropscope-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])?;
        step("clippy (eBPF crate, BPF target)");
        setup::clippy_ebpf()?;
    }
    step(
        "plain `cargo test`, as a newcomer runs it: no eBPF toolchain (bpf-linker off the PATH), \
         a target directory of its own",
    );
    plain_cargo_test()?;
    step("build (the integration tests run the dropscope binary)");
    cargo(&["build", "--package", "dropscope", "--bins"])?;
    // The unit, widget and CLI tests of the default members ran in the plain `cargo test`;
    // the tests crate holds the root tests.
    let test = [
        "test",
        "--package",
        "dropscope-tests",
        "--",
        "--test-threads=1",
    ];
    // The test binaries run as root through `sudo -E`. As root (CI) too, from an ordinary
    // user, the way they run for a developer: what dropscope does for the invoking user (files
    // handed to SUDO_UID) is what the tests see, and a root-only assumption fails here rather
    // than on a newcomer's machine.
    // Every test binary holds one host-wide lock while it runs: the root tests read and change
    // host-wide state (programs, counters), so two runs on one machine take turns per binary
    // instead of failing each other's exact counts.
    let runner = if as_root {
        setup::test_user()?;
        format!(
            "flock {TESTS_LOCK_FILE} sudo -E -u {} sudo -E",
            setup::TEST_USER
        )
    } else {
        format!("flock {TESTS_LOCK_FILE} sudo -E")
    };
    if as_root {
        step(&format!(
            "root tests (the tests crate, on the real kernel, run from the user {} through sudo \
             -E)",
            setup::TEST_USER
        ));
    } else {
        step(
            "root tests (the tests crate, built as you; its binaries run as root through sudo -E)",
        );
    }
    cargo_with_runner(&test, &runner)?;
    lane.wait_for(lane::Part::Dist)?;
    step(
        "dist: the static binaries and the .debs, checked by lintian, man and bash; the aarch64 \
         binary against this machine's under qemu",
    );
    let dists = crate::dist::build(&crate::dist::Arch::ALL)?;
    crate::dist::check::check_all(&dists)?;
    step("the first five minutes, on the binary of this machine's .deb (tmux)");
    let host = (dists.iter().find(|d| d.arch.is_host())).context("no .deb for this machine")?;
    let bin = crate::dist::check::installed_binary(&host.deb)?;
    let first = [
        "test",
        "--package",
        "dropscope-tests",
        "--test",
        "first_minutes",
        "--",
        "--test-threads=1",
    ];
    cargo_with_runner_env(&first, &runner, &[("DROPSCOPE_BIN", bin.as_os_str())])?;
    step("the .deb under a real systemd (a container with systemd as PID 1): cargo xtask systemd");
    if as_root {
        crate::systemd::run(&crate::systemd::SystemdArgs {
            deb: Some(host.deb.clone()),
        })?;
    } else {
        xtask_as_root(&["systemd".as_ref(), "--deb".as_ref(), host.deb.as_os_str()])?;
    }
    lane.finish()?;
    if !no_vmtest {
        step(
            "vmtest: the suite on Debian's 6.1 and 6.12 kernels (amd64, arm64) and the running one",
        );
        if as_root {
            crate::vmtest::run(&crate::vmtest::VmtestArgs {
                host_tested: true,
                ..Default::default()
            })?;
        } else {
            // Tools and builds as the user first, so that the root run below finds them all.
            setup::vmtest_tools(&crate::vmtest::DEFAULT_ARCHES)?;
            crate::dist::build(&crate::vmtest::DEFAULT_ARCHES)?;
            for arch in crate::vmtest::DEFAULT_ARCHES
                .iter()
                .filter(|a| !a.is_host())
            {
                crate::vmtest::foreign::tools(*arch)?;
            }
            crate::vmtest::test_binaries::binaries(None)?;
            xtask_as_root(&["vmtest".as_ref(), "--host-tested".as_ref()])?;
        }
    }
    Ok(())
}

/// Runs this xtask again as root through sudo, with `args` (a step that needs root, from a run
/// as a user). sudo resets PATH: it is handed over explicitly (vng may be in ~/.local/bin).
fn xtask_as_root(args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
    let xtask = std::env::current_exe().context("path of xtask")?;
    setup::run(
        Command::new("sudo")
            .args(["-E", "env"])
            .arg(format!("PATH={}", setup::path_with_tools()))
            .arg(xtask)
            .args(args)
            .current_dir(root()),
    )
}

/// The lock every test binary holds while it runs: one for all runs on the machine (`flock`,
/// from util-linux; `/run/lock` is writable by every user); vmtest's run on the host takes it
/// too.
pub const TESTS_LOCK_FILE: &str = "/run/lock/dropscope-tests.lock";

/// Runs a plain `cargo test` at the root (the unit, widget and golden-file tests of the default
/// members), as on a machine never set up: with a cargo home of its own that has no `bin/`
/// (rustup puts the cargo home's `bin/` on every build's PATH, and bpf-linker is installed
/// there) but shares the downloaded crates, a PATH without bpf-linker (every other tool of its
/// directory is there, through links), nothing asking for the eBPF program, and a target
/// directory of its own, so the eBPF object is the empty one such a build embeds. A unit test
/// that needs the compiled program fails here, not on a newcomer's machine.
fn plain_cargo_test() -> anyhow::Result<()> {
    let target = crate::target_dir().join("plain");
    let links = target.join("path");
    let home = target.join("cargo-home");
    for dir in [&links, &home] {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", dir.display()));
            }
            _ => {}
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| setup::home().join(".cargo"));
    for shared in ["registry", "git", "config.toml"] {
        let from = cargo_home.join(shared);
        if from.exists() {
            std::os::unix::fs::symlink(&from, home.join(shared))
                .with_context(|| format!("linking {}", from.display()))?;
        }
    }
    let mut dirs = vec![links.clone()];
    for dir in std::env::split_paths(&setup::path_with_cargo_bin()) {
        if !dir.join("bpf-linker").exists() {
            dirs.push(dir);
            continue;
        }
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?;
        for entry in entries.flatten() {
            let link = links.join(entry.file_name());
            if entry.file_name() != "bpf-linker" && !link.exists() {
                std::os::unix::fs::symlink(entry.path(), &link)
                    .with_context(|| format!("linking {}", link.display()))?;
            }
        }
    }
    let path = std::env::join_paths(&dirs).context("joining PATH")?;
    let status = Command::new("cargo")
        .arg("test")
        .current_dir(root())
        .env("PATH", &path)
        .env("CARGO_HOME", &home)
        .env("CARGO_TARGET_DIR", target.join("build"))
        .env("CARGO_INCREMENTAL", crate::NO_INCREMENTAL)
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("DROPSCOPE_REQUIRE_EBPF")
        .env_remove("DROPSCOPE_EBPF_PRUNE")
        .status()
        .context("running cargo test")?;
    if !status.success() {
        bail!("a plain `cargo test` (without the eBPF toolchain) failed ({status})");
    }
    Ok(())
}

/// The most disk space a whole run took in a fresh clone (`target/`, the fuzzer's build and
/// vmtest's kernels at their peak), measured, with a margin; the set-up's toolchains and
/// packages come on top on a fresh machine.
const DISK_NEEDED_GB: f64 = 8.0;

/// Warns at the start, not 25 minutes in, when the file system of `dir` (or of the nearest
/// directory above it that exists) has less room than a whole run takes.
fn warn_if_short_of_disk(dir: &Path) {
    let Some(existing) = dir.ancestors().find(|d| d.exists()) else {
        return;
    };
    let Ok(path) = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: statvfs(3) on a NUL-terminated path into a zeroed struct it fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointers are valid for the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return;
    }
    let free_gb = st.f_bavail as f64 * st.f_frsize as f64 / 1e9;
    if free_gb < DISK_NEEDED_GB {
        eprintln!(
            "xtask: warning: {free_gb:.1} GB free on the file system of {}; a whole run takes \
             about {DISK_NEEDED_GB:.0} GB there (the builds, the fuzzer's, vmtest's kernels), so \
             it may stop for lack of space (`--fuzz-seconds 0` and `--no-vmtest` need less)",
            existing.display()
        );
    }
}

/// Checks the Prometheus rules and runs their unit tests with promtool; a failure fails the run.
fn promtool_rules() -> anyhow::Result<()> {
    for (what, file) in [
        ("check", "assets/prometheus/dropscope-rules.yml"),
        ("test", "assets/prometheus/dropscope-rules.test.yml"),
    ] {
        setup::run(
            Command::new("promtool")
                .args([what, "rules", file])
                .current_dir(root()),
        )?;
    }
    Ok(())
}

/// Runs cargo with every test binary run through `runner` (as root, through sudo).
fn cargo_with_runner(args: &[&str], runner: &str) -> anyhow::Result<()> {
    cargo_with_runner_env(args, runner, &[])
}

/// [`cargo_with_runner`] with more environment variables for the tests.
fn cargo_with_runner_env(
    args: &[&str],
    runner: &str,
    env: &[(&str, &std::ffi::OsStr)],
) -> anyhow::Result<()> {
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host_triple()?.to_uppercase().replace(['-', '.'], "_")
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(root())
        .env("PATH", setup::path_with_cargo_bin())
        .env("DROPSCOPE_REQUIRE_EBPF", "1")
        .env("CARGO_INCREMENTAL", crate::NO_INCREMENTAL)
        .env("DROPSCOPE_EBPF_PRUNE", "1")
        .env(var, runner)
        .envs(env.iter().copied())
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The host's target triple, as rustc names it.
fn host_triple() -> anyhow::Result<String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .current_dir(root())
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .context("no host line in `rustc -vV`")
}

/// Gives files owned by root under some directories back to the invoking user, when dropped.
struct Sweep {
    dirs: Vec<PathBuf>,
    owner: String,
}

impl Sweep {
    fn new(dirs: &[PathBuf]) -> Self {
        let id = |flag: &str| {
            Command::new("id")
                .arg(flag)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        Self {
            dirs: dirs.iter().filter(|d| d.exists()).cloned().collect(),
            owner: format!("{}:{}", id("-u"), id("-g")),
        }
    }

    fn leftovers(&self) -> bool {
        self.dirs.iter().any(|d| root_owned(d, "-quit"))
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        if self.dirs.is_empty() || !self.leftovers() {
            return;
        }
        eprintln!("xtask: giving files that root steps left behind back to you (sudo chown)");
        let ok = Command::new("sudo")
            .arg("find")
            .args(&self.dirs)
            .args([
                "-xdev",
                "-user",
                "0",
                "-exec",
                "chown",
                "-h",
                &self.owner,
                "{}",
                "+",
            ])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "xtask: warning: some files under {} still belong to root",
                self.dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            );
        }
    }
}

/// Whether `find` sees a root-owned file under `dir` (`extra`: e.g. `-quit` after the first).
fn root_owned(dir: &Path, extra: &str) -> bool {
    Command::new("find")
        .arg(dir)
        .args(["-xdev", "-user", "0", "-print", extra])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
}
