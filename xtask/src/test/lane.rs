//! The steps of `cargo xtask test` that need no kernel of their own (the dist builds, the
//! tests crate's binaries for the arm64 guests, fuzzing) run as a second lane from the start,
//! beside lint, the builds and the root tests: children `cargo xtask test-lane` at the lowest
//! CPU priority (nice 19), so they take only the CPU the other steps leave (the root tests
//! wait on the kernel far more than they compute).
//! The lane has two parts, one after the other: the dist builds, which the steps after the
//! root tests wait for, then the arm64 guests' binaries and fuzzing, which run on beside those
//! steps until vmtest; each part's output goes to a log printed whole when it ends.
use std::{
    fs,
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        Arc, Mutex, PoisonError,
        mpsc::{self, Receiver},
    },
    thread::JoinHandle,
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::dist::Arch;

/// A part of the lane.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Part {
    /// The static release binaries and their .debs.
    Dist,
    /// The arm64 guests' binaries, then fuzzing.
    Rest,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Dist => "dist",
            Part::Rest => "rest",
        }
    }
}

/// What a part of the lane does (`cargo xtask test-lane`, internal).
#[derive(clap::Args, Clone)]
pub struct LaneArgs {
    /// The part to run.
    #[arg(long, value_enum)]
    pub part: Part,
    /// Seconds to fuzz the recording decoder and the history reader (0: none).
    #[arg(long, default_value_t = 0)]
    pub fuzz_seconds: u64,
    /// Also build what vmtest's foreign guests run (the tests crate's binaries for them).
    #[arg(long)]
    pub vmtest: bool,
}

/// A part's work: the dist binaries and .debs (checked, installed and booted after the root
/// tests); or the arm64 guests' binaries, then fuzzing, whose build is removed once it has run
/// (about 1 GB that a small disk needs for vmtest's kernels).
pub fn run(args: &LaneArgs) -> anyhow::Result<()> {
    if args.part == Part::Dist {
        crate::dist::build(&Arch::ALL)?;
        return Ok(());
    }
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

/// How a part ended: its status (or why it did not run), its log and its time.
struct Ended {
    part: Part,
    outcome: Result<std::process::ExitStatus, String>,
    log: PathBuf,
    seconds: f64,
}

/// The lane while it runs; dropped before [`Lane::finish`] (a step of the other lane
/// failed), it stops the part running (its whole process group) and starts no other.
pub struct Lane {
    ended: Receiver<Ended>,
    /// The process group of the part running, if any; `None` once the lane is stopped.
    running: Arc<Mutex<Option<Option<u32>>>>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the lane; what it installs was installed before (no two package managers at once).
pub fn start(fuzz_seconds: u64, vmtest: bool) -> anyhow::Result<Lane> {
    fs::create_dir_all(crate::target_dir())?;
    let xtask = std::env::current_exe().context("path of xtask")?;
    let (tx, ended) = mpsc::channel();
    let running = Arc::new(Mutex::new(Some(None)));
    let shared = Arc::clone(&running);
    eprintln!(
        "xtask: the dist builds, then{} fuzzing, run beside the other steps at the lowest CPU \
         priority; their logs: {}",
        if vmtest {
            " the arm64 guests' binaries and"
        } else {
            ""
        },
        crate::target_dir().join("test-lane-*.log").display()
    );
    let thread = std::thread::spawn(move || {
        for part in [Part::Dist, Part::Rest] {
            let t = Instant::now();
            let log = crate::target_dir().join(format!("test-lane-{}.log", part.name()));
            let outcome = run_part(&xtask, part, fuzz_seconds, vmtest, &log, &shared);
            let failed = !matches!(outcome, Ok(s) if s.success());
            let seconds = t.elapsed().as_secs_f64();
            let end = Ended {
                part,
                outcome,
                log,
                seconds,
            };
            if tx.send(end).is_err() || failed {
                return;
            }
        }
    });
    Ok(Lane {
        ended,
        running,
        thread: Some(thread),
    })
}

/// Runs one part as a child at nice 19 in its own process group, its output to `log`; does
/// not start it once the lane is stopped.
fn run_part(
    xtask: &std::path::Path,
    part: Part,
    fuzz_seconds: u64,
    vmtest: bool,
    log: &std::path::Path,
    running: &Mutex<Option<Option<u32>>>,
) -> Result<std::process::ExitStatus, String> {
    let file = fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "19"])
        .arg(xtask)
        .args(["test-lane", "--part", part.name()])
        .args(["--fuzz-seconds", &fuzz_seconds.to_string()])
        .args(vmtest.then_some("--vmtest"))
        .current_dir(crate::root())
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = {
        let mut slot = running.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(pid) = slot.as_mut() else {
            return Err("the lane was stopped".into());
        };
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting the lane (nice): {e}"))?;
        *pid = Some(child.id());
        child
    };
    let status = child.wait().map_err(|e| e.to_string());
    if let Some(pid) = running
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        *pid = None;
    }
    status
}

impl Lane {
    /// Waits for the next part of the lane (`part`), prints its log, and fails if it failed.
    pub fn wait_for(&mut self, part: Part) -> anyhow::Result<()> {
        let what = match part {
            Part::Dist => "the second lane's dist builds",
            Part::Rest => "the second lane's rest: the arm64 guests' binaries, fuzzing",
        };
        crate::step(what);
        let Ok(end) = self.ended.recv() else {
            bail!("the second lane ended before {what}");
        };
        let text = fs::read(&end.log).unwrap_or_default();
        eprint!("{}", String::from_utf8_lossy(&text));
        match end.outcome {
            Ok(s) if s.success() && end.part == part => {
                eprintln!("xtask: {what}: done in {:.0} s", end.seconds);
                Ok(())
            }
            Ok(s) => bail!("{what} failed ({s}); its log: {}", end.log.display()),
            Err(e) => bail!("{what}: {e}"),
        }
    }

    /// Waits for the rest of the lane.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.wait_for(Part::Rest)?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Ok(())
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(Some(pid)) = running {
            // SAFETY: kill(2) on the process group the part was started in; a valid signal.
            unsafe { libc::kill(-(pid as i32), libc::SIGTERM) };
            eprintln!("xtask: the second lane was stopped");
        }
        let _ = thread.join();
    }
}
