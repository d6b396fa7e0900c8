//! Project tasks: set-up of toolchains (idempotent), running dropscope, the test runner and the
//! benchmark. `cargo xtask --help` lists them.
mod bench;
mod dist;
mod setup;
mod systemd;
mod test;
mod vmtest;

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

/// dropscope's project tasks.
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building dropscope needs (eBPF toolchain, bpf-linker, LLVM), skipping what is present.
    Setup,
    /// Set up, build (release) and run dropscope with the given arguments (root is needed live).
    Run {
        /// Arguments for dropscope, e.g. `report --duration 5s`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, then check formatting and lints and run every test (root: real kernel tests).
    Test {
        /// Skip `cargo fmt --check` and clippy.
        #[arg(long)]
        no_lint: bool,
        /// Seconds to fuzz the recording decoder (0: skip).
        #[arg(long, default_value_t = 60)]
        fuzz_seconds: u64,
        /// Skip `cargo xtask vmtest` (booting other kernels).
        #[arg(long)]
        no_vmtest: bool,
    },
    /// Record assets/sample.dsrec again from a real session of about 20 s (root: two
    /// namespaces, a veth pair, an XDP and a tc program, an nft rule, an iptables rule, a chain
    /// policy and a slow reader that drop, all removed at the end).
    Sample,
    /// Benchmark dropscope against nothing attached and peers on real drops (root; a few minutes).
    Bench(bench::BenchArgs),
    /// Build the static release binaries (x86_64 and aarch64) and a .deb of each into
    /// target/dist/.
    Dist {
        /// Also check each .deb as `cargo xtask test` does: lintian reports no errors, the man
        /// page renders, the completions load in bash.
        #[arg(long)]
        check: bool,
        /// Machines to build for (`amd64` and `arm64` are accepted too).
        #[arg(long = "arch", value_enum, value_delimiter = ',', default_values_t = dist::Arch::ALL)]
        arches: Vec<dist::Arch>,
    },
    /// Boot Debian's 6.1 and 6.12 kernels (amd64 and arm64) under qemu and test the dist binary
    /// in each, and on the running kernel, with the tests crate's binaries (built for aarch64
    /// for the arm64 guests) (root); prints a kernel × test binary table.
    Vmtest(vmtest::VmtestArgs),
    /// Install this machine's .deb in a container with systemd as PID 1 (root): the unit
    /// enabled and started, known drops read back from its history (`history`, `report`,
    /// `diff`), then `dpkg -r` and `--purge`; the host's files are not changed.
    Systemd(systemd::SystemdArgs),
    /// The tests crate's binaries vmtest runs inside each guest (internal).
    #[command(hide = true)]
    VmtestTests(vmtest::test_binaries::RunArgs),
    /// The steps of `test` that run beside the root tests (internal).
    #[command(hide = true)]
    TestLane(test::lane::LaneArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::all(false),
        Task::Bench(args) => bench::run(args),
        Task::Sample => sample(),
        Task::Dist { check, arches } => {
            let dists = dist::build(&arches)?;
            if check {
                dist::check::check_all(&dists)?;
            }
            Ok(())
        }
        Task::Vmtest(args) => {
            require_root("vmtest boots kernels and attaches the probe")?;
            vmtest::run(&args)
        }
        Task::Systemd(args) => {
            require_root("the check boots systemd in a container and attaches the probe")?;
            systemd::run(&args)
        }
        Task::VmtestTests(args) => vmtest::test_binaries::run(&args),
        Task::TestLane(args) => test::lane::run(&args),
        Task::Run { args } => {
            setup::all(false)?;
            cargo(&["build", "--release", "--package", "dropscope"])?;
            let bin = target_dir().join("release/dropscope");
            let mut cmd = if setup::is_root() {
                Command::new(&bin)
            } else {
                eprintln!("xtask: dropscope needs root to attach its probe; running it with sudo");
                let mut c = Command::new("sudo");
                c.arg(&bin);
                c
            };
            let status = cmd.args(&args).status().context("running dropscope")?;
            std::process::exit(status.code().unwrap_or(1));
        }
        Task::Test {
            no_lint,
            fuzz_seconds,
            no_vmtest,
        } => test::run(no_lint, fuzz_seconds, no_vmtest),
    }
}

/// Builds dropscope and the tests crate's binaries (as the tests run them), then runs the
/// sample generator (`tests/src/bin/sample.rs`) as root, writing `assets/sample.dsrec`.
fn sample() -> anyhow::Result<()> {
    setup::all(false)?;
    step("building dropscope and the sample generator");
    cargo(&["build", "--package", "dropscope", "--bins"])?;
    cargo(&["build", "--package", "dropscope-tests", "--bins"])?;
    let bin = target_dir().join("debug/sample");
    let out = root().join("assets/sample.dsrec");
    step(
        "recording the sample (about 20 s; holding the tests' lock, so no test's drops are in it)",
    );
    // The generator records every drop of the host: under the lock the root tests take per
    // binary, no test of another run on this machine drops packets meanwhile.
    let mut cmd = Command::new("flock");
    cmd.arg(test::TESTS_LOCK_FILE);
    if !setup::is_root() {
        cmd.args(["sudo", "-E"]);
    }
    cmd.arg(&bin);
    let status = cmd
        .arg(&out)
        .status()
        .context("running the sample generator")?;
    if !status.success() {
        bail!("the sample generator failed ({status})");
    }
    Ok(())
}

fn require_root(why: &str) -> anyhow::Result<()> {
    if !setup::is_root() {
        bail!("{why}: run it as root (e.g. `sudo -E cargo xtask ...`)");
    }
    Ok(())
}

fn step(what: &str) {
    eprintln!("\n==> {what}");
}

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Where cargo puts build output: `CARGO_TARGET_DIR` (relative to the workspace root) if set,
/// else `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root().join(dir),
        _ => root().join("target"),
    }
}

/// xtask's builds are one-shot: incremental caches would double the size of `target/`.
pub const NO_INCREMENTAL: &str = "0";

/// Runs cargo in the workspace root with the project toolchain.
fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let status = cargo_command(args)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Runs cargo as [`cargo`] does and returns its stdout (e.g. `--message-format=json`).
fn cargo_stdout(args: &[&str]) -> anyhow::Result<String> {
    let out = cargo_command(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !out.status.success() {
        bail!("cargo {} failed ({})", args.join(" "), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// cargo in the workspace root with the project toolchain and the environment of xtask's builds.
fn cargo_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args)
        .current_dir(root())
        .env("PATH", setup::path_with_cargo_bin())
        // After the set-up, a missing eBPF toolchain is an error, not a probe-less build.
        .env("DROPSCOPE_REQUIRE_EBPF", "1")
        .env("CARGO_INCREMENTAL", NO_INCREMENTAL)
        .env("DROPSCOPE_EBPF_PRUNE", "1");
    cmd
}
