//! Project tasks: set-up of toolchains (idempotent), running dropscope, the test runner and the
//! benchmark. `cargo xtask --help` lists them.
mod bench;
mod dist;
mod dist_check;
mod dist_deb;
mod setup;
mod test;
mod vmtest;
mod vmtest_foreign;
mod vmtest_guest;
mod vmtest_initramfs;
mod vmtest_kernels;
mod vmtest_sockets;

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
    /// Boot Debian's 6.1 and 6.12 kernels (amd64 and arm64) under qemu and run the exact-count
    /// suite in each with the dist binary, and on the running kernel (root); prints a kernel ×
    /// check table.
    Vmtest(vmtest::VmtestArgs),
    /// The suite vmtest runs inside each guest (internal).
    #[command(hide = true)]
    VmtestGuest(vmtest_guest::GuestArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::all(false),
        Task::Bench(args) => bench::run(args),
        Task::Dist { check, arches } => {
            let dists = dist::build(&arches)?;
            if check {
                dist_check::check_all(&dists)?;
            }
            Ok(())
        }
        Task::Vmtest(args) => {
            require_root("vmtest boots kernels and attaches the probe")?;
            vmtest::run(&args)
        }
        Task::VmtestGuest(args) => vmtest_guest::run(&args),
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

/// Runs cargo in the workspace root with the project toolchain.
/// xtask's builds are one-shot: incremental caches would double the size of `target/`.
pub const NO_INCREMENTAL: &str = "0";

fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(root())
        .env("PATH", setup::path_with_cargo_bin())
        // After the set-up, a missing eBPF toolchain is an error, not a probe-less build.
        .env("DROPSCOPE_REQUIRE_EBPF", "1")
        .env("CARGO_INCREMENTAL", NO_INCREMENTAL)
        .env("DROPSCOPE_EBPF_PRUNE", "1")
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}
