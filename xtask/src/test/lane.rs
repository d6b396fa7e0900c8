//! The steps of `cargo xtask test` that need no kernel of their own (the dist builds, the
//! tests crate's binaries for the arm64 guests, fuzzing) run as a second lane beside the root
//! tests: a child `cargo xtask test-lane` at the lowest CPU priority (nice 19), so it takes
//! only the CPU the root tests leave (they wait on the kernel far more than they compute),
//! its output in a log printed whole when it ends.
use std::{
    fs,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, ensure};

use crate::dist::Arch;

/// What the lane does (`cargo xtask test-lane`, internal).
#[derive(clap::Args)]
pub struct LaneArgs {
    /// Seconds to fuzz the recording decoder and the history reader (0: none).
    #[arg(long, default_value_t = 0)]
    pub fuzz_seconds: u64,
    /// Also build what vmtest's foreign guests run (the tests crate's binaries for them).
    #[arg(long)]
    pub vmtest: bool,
}

/// The lane's work, in the order the later steps need it: the dist binaries and .debs
/// (checked, installed and booted after the root tests), the arm64 guests' binaries, then
/// fuzzing, whose build is removed once it has run (about 1 GB that a small disk needs for
/// vmtest's kernels).
pub fn run(args: &LaneArgs) -> anyhow::Result<()> {
    crate::dist::build(&Arch::ALL)?;
    if args.vmtest {
        for arch in crate::vmtest::DEFAULT_ARCHES
            .iter()
            .filter(|a| !a.is_host())
        {
            crate::vmtest::foreign::tools(*arch)?;
        }
    }
    if args.fuzz_seconds > 0 {
        crate::step("fuzzing the recording decoder and the history reader");
        crate::setup::fuzz(args.fuzz_seconds)?;
        let fuzz_target = crate::root().join("fuzz/target");
        eprintln!(
            "xtask: removing the fuzzer's build ({})",
            fuzz_target.display()
        );
        fs::remove_dir_all(&fuzz_target)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .with_context(|| format!("removing {}", fuzz_target.display()))?;
    }
    Ok(())
}

/// The lane while it runs; dropped before [`Lane::finish`] (a step of the other lane failed),
/// it stops the lane's whole process group.
pub struct Lane {
    child: Option<Child>,
    log: PathBuf,
    started: Instant,
}

/// Starts the lane; what it installs was installed before (no two package managers at once).
pub fn start(args: &LaneArgs) -> anyhow::Result<Lane> {
    let log = crate::target_dir().join("test-lane.log");
    fs::create_dir_all(crate::target_dir())?;
    let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let xtask = std::env::current_exe().context("path of xtask")?;
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "19"])
        .arg(xtask)
        .args([
            "test-lane",
            "--fuzz-seconds",
            &args.fuzz_seconds.to_string(),
        ])
        .args(args.vmtest.then_some("--vmtest"))
        .current_dir(crate::root())
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd.spawn().context("starting the second lane (nice)")?;
    eprintln!(
        "xtask: the dist builds{}{} run beside the root tests at the lowest CPU priority; their \
         log: {}",
        if args.vmtest {
            ", the arm64 guests' binaries"
        } else {
            ""
        },
        if args.fuzz_seconds > 0 {
            " and fuzzing"
        } else {
            ""
        },
        log.display()
    );
    Ok(Lane {
        child: Some(child),
        log,
        started: Instant::now(),
    })
}

impl Lane {
    /// Waits for the lane, prints its log, and fails if it failed.
    pub fn finish(mut self) -> anyhow::Result<()> {
        let mut child = self
            .child
            .take()
            .context("the lane was waited for already")?;
        crate::step("the second lane: dist builds, the arm64 guests' binaries, fuzzing");
        let status = child.wait().context("waiting for the second lane")?;
        let text = fs::read(&self.log).unwrap_or_default();
        eprint!("{}", String::from_utf8_lossy(&text));
        eprintln!(
            "xtask: the second lane ended after {:.0} s ({status})",
            self.started.elapsed().as_secs_f64()
        );
        ensure!(
            status.success(),
            "the second lane failed ({status}); its log: {}",
            self.log.display()
        );
        Ok(())
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group the lane was started in; a valid signal.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
            let _ = child.wait();
            eprintln!(
                "xtask: the second lane was stopped; its log: {}",
                self.log.display()
            );
        }
    }
}
