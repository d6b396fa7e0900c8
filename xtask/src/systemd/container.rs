//! A container with the host's own systemd as its PID 1, for `cargo xtask systemd`: new PID,
//! mount, UTS, IPC, network and cgroup namespaces (util-linux `unshare`), the host's root file
//! system under an overlay whose writable layer is a tmpfs (installing a package there changes
//! nothing of the host), `/run` and `/tmp` as tmpfs, a cgroup2 subtree of its own and
//! `container=` set, as systemd expects of a container. Everything goes with it: dropping the
//! guard (on success, failure or Ctrl-C) kills its PID 1, which ends every process of its PID
//! namespace, unmounts what only its mount namespace had, and removes its cgroup; if xtask
//! itself is killed, the kernel kills `unshare` and `unshare` the container.
use std::{
    fs,
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// The script that builds the container's root and execs systemd.
const BOOT: &str = include_str!("boot.sh");

/// The prefix of the cgroups the containers are put in (a stale one is removed at the next
/// start).
const CGROUP_PREFIX: &str = "dropscope-systemd-";

/// How long systemd may take to finish starting up: it took 2 to 7 s here.
const BOOT_LIMIT: Duration = Duration::from_secs(120);

/// A running container; dropping it ends it.
pub struct Container {
    unshare: Child,
    /// systemd's PID, as the host sees it.
    pid: u32,
    cgroup: PathBuf,
    dir: PathBuf,
    console: PathBuf,
}

impl Container {
    /// Boots one, with its files under `dir` (emptied first), and waits until systemd has
    /// finished starting up; returns it with the time that took.
    pub fn boot(dir: &Path) -> anyhow::Result<(Self, Duration)> {
        let started = Instant::now();
        if dir.exists() {
            fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        let state = dir.join("state");
        fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
        let script = dir.join("boot.sh");
        fs::write(&script, BOOT).with_context(|| format!("writing {}", script.display()))?;
        let console = dir.join("console.log");
        let log = fs::File::create(&console)
            .with_context(|| format!("creating {}", console.display()))?;
        let cgroup = new_cgroup()?;
        let procs =
            std::ffi::CString::new(cgroup.join("cgroup.procs").as_os_str().as_encoded_bytes())
                .context("cgroup path")?;
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--pid",
            "--uts",
            "--ipc",
            "--net",
            "--cgroup",
            "--fork",
            "--kill-child=SIGKILL",
            "--propagation",
            "private",
            "--",
            "env",
            "-i",
            "container=dropscope-check",
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
            "sh",
        ])
        .arg(&script)
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: Ctrl-C reaches xtask, which ends the container in order.
        .process_group(0);
        // SAFETY: between fork and exec the child only makes async-signal-safe calls (open,
        // write, close, prctl) on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                // Into the container's cgroup before the cgroup namespace is made, so that it
                // is the namespace's root ("0" is the writing process).
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if !ok {
                    return Err(err);
                }
                // Killed with xtask, whatever kills xtask; `--kill-child` passes it on.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let unshare = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = fs::remove_dir(&cgroup);
                return Err(e).context("starting unshare (util-linux)");
            }
        };
        let mut c = Container {
            pid: 0,
            unshare,
            cgroup,
            dir: dir.to_path_buf(),
            console,
        };
        c.pid = c.wait_for_systemd()?;
        let out = c.run_timeout(&["systemctl", "is-system-running", "--wait"], BOOT_LIMIT)?;
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if state != "running" && state != "degraded" {
            bail!(
                "systemd in the container did not finish starting up: {state}\n{}",
                c.console()
            );
        }
        if state == "degraded" {
            let failed = c.run(&["systemctl", "--failed", "--no-pager", "--plain"])?;
            eprintln!(
                "systemd: the container is up, degraded by units of this machine's own:\n{}",
                String::from_utf8_lossy(&failed.stdout).trim_end()
            );
        }
        Ok((c, started.elapsed()))
    }

    /// The PID of the container's systemd once `unshare`'s child has become it.
    fn wait_for_systemd(&mut self) -> anyhow::Result<u32> {
        let deadline = Instant::now() + BOOT_LIMIT;
        let children = format!(
            "/proc/{}/task/{}/children",
            self.unshare.id(),
            self.unshare.id()
        );
        loop {
            crate::bench::interrupt::check()?;
            if let Some(status) = self.unshare.try_wait()? {
                bail!(
                    "the container ended before systemd started ({status}):\n{}",
                    self.console()
                );
            }
            let child = fs::read_to_string(&children)
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok());
            if let Some(pid) = child {
                let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
                // Its private socket, which systemctl talks to, is made after /run/systemd/system.
                let booted = Path::new(&format!("/proc/{pid}/root/run/systemd/private")).exists();
                if exe.ends_with("systemd") && booted {
                    return Ok(pid);
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "systemd did not start in the container within {} s:\n{}",
                    BOOT_LIMIT.as_secs(),
                    self.console()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A command run in the container (its namespaces and root), as root, with a clean
    /// environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["--target", &self.pid.to_string(), "--all", "--root", "--wd"])
            .arg("--")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .env("SYSTEMD_PAGER", "");
        c
    }

    /// Runs a command in the container; fails with its output unless it succeeds within
    /// `limit`.
    pub fn run_timeout(&self, args: &[&str], limit: Duration) -> anyhow::Result<Output> {
        crate::bench::interrupt::check()?;
        dropscope_tests::run_timeout(&mut self.command(args), limit)
    }

    /// [`Container::run_timeout`] with a minute's bound (none of its commands takes seconds).
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.run_timeout(args, Duration::from_secs(60))
    }

    /// Runs a command in the container and returns its stdout (lossy UTF-8).
    pub fn stdout(&self, args: &[&str]) -> anyhow::Result<String> {
        Ok(String::from_utf8_lossy(&self.run(args)?.stdout).into_owned())
    }

    /// Runs a command and returns its exit status and stdout, whatever the status.
    pub fn status_stdout(&self, args: &[&str]) -> anyhow::Result<(i32, String)> {
        crate::bench::interrupt::check()?;
        let out = self
            .command(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {args:?} in the container"))?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }

    /// Writes `data` to `path` in the container (through a shell's stdin).
    pub fn write(&self, path: &str, data: &[u8]) -> anyhow::Result<()> {
        let mut child = self
            .command(&["sh", "-c", "cat > \"$0\"", path])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("starting nsenter")?;
        let mut stdin = child.stdin.take().context("stdin")?;
        stdin
            .write_all(data)
            .with_context(|| format!("writing {path} in the container"))?;
        drop(stdin);
        let status = child.wait()?;
        if !status.success() {
            bail!("writing {path} in the container failed ({status})");
        }
        Ok(())
    }

    /// What systemd and `unshare` wrote on the console so far.
    pub fn console(&self) -> String {
        fs::read_to_string(&self.console).unwrap_or_default()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGKILL to PID 1 of a PID namespace ends every process in it; `unshare` then exits.
        if self.pid != 0 {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        }
        // `unshare` reaps it and exits; killed too if it has not within a generous bound.
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.unshare.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        if let Err(e) = remove_cgroup(&self.cgroup) {
            eprintln!("systemd: warning: {e:#}");
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The cgroup2 directory of this process (from /proc/self/mountinfo and /proc/self/cgroup).
fn own_cgroup() -> anyhow::Result<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").context("/proc/self/mountinfo")?;
    let mount = mountinfo
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (right.split_whitespace().next()? == "cgroup2")
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .context("no cgroup2 file system is mounted (a container needs one)")?;
    let own = fs::read_to_string("/proc/self/cgroup").context("/proc/self/cgroup")?;
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .context("no cgroup2 line in /proc/self/cgroup")?;
    Ok(mount.join(path.trim_start_matches('/')))
}

/// A new cgroup for a container beside this process's, after removing stale ones of killed
/// runs.
fn new_cgroup() -> anyhow::Result<PathBuf> {
    let parent = own_cgroup()?;
    for e in fs::read_dir(&parent)
        .with_context(|| format!("listing {}", parent.display()))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix(CGROUP_PREFIX)
            && let Ok(pid) = pid.parse::<u32>()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            remove_cgroup(&e.path())?;
        }
    }
    let dir = parent.join(format!("{CGROUP_PREFIX}{}", std::process::id()));
    if dir.exists() {
        remove_cgroup(&dir)?;
    }
    fs::create_dir(&dir).with_context(|| format!("creating the cgroup {}", dir.display()))?;
    Ok(dir)
}

/// Removes a cgroup and those under it, once their processes have ended.
fn remove_cgroup(dir: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut dirs = vec![dir.to_path_buf()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(rd) = fs::read_dir(&dirs[i]) {
                dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
            i += 1;
        }
        // Deepest first.
        let mut last = None;
        for d in dirs.iter().rev() {
            if let Err(e) = fs::remove_dir(d)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                last = Some((d.clone(), e));
            }
        }
        match last {
            None => return Ok(()),
            Some((d, e)) if Instant::now() > deadline => {
                return Err(e).with_context(|| format!("removing the cgroup {}", d.display()));
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
