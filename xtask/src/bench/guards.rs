//! Things the bench creates and must remove on every way out (success, error, Ctrl-C): the
//! tmux session, a debugfs mount, the scratch directory. The network namespace guard is the
//! tests' own (`dropscope_tests::Netns`).
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// Runs a command quietly; fails with its stderr.
pub fn run_quiet(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Network namespaces other than `ours` (other traffic that could add drops to the counts).
pub fn other_namespaces(ours: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ours)
        .collect();
    names.sort();
    names
}

/// `tmux` on the server of session `name` alone (a socket of its own, `-L`), its panes run by
/// `/bin/sh` (sudo may have set `$SHELL` to a `nologin` shell, which takes the server down). A
/// shared server exits with its last session, and a session started meanwhile fails.
fn tmux(name: &str) -> Command {
    let mut cmd = Command::new("tmux");
    cmd.env("SHELL", "/bin/sh").args(["-L", name]);
    cmd
}

/// A detached tmux session on a server of its own, the server killed and its socket removed on
/// drop.
pub struct TmuxSession {
    name: String,
}

impl TmuxSession {
    /// Starts `command` in a new detached session of the given size.
    pub fn start(name: &str, cols: u16, rows: u16, command: &str) -> anyhow::Result<Self> {
        let (cols, rows) = (cols.to_string(), rows.to_string());
        run_quiet(tmux(name).args([
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            &cols,
            "-y",
            &rows,
            command,
        ]))?;
        Ok(Self {
            name: name.to_string(),
        })
    }

    /// The pid of the pane's process.
    pub fn pane_pid(&self) -> anyhow::Result<u32> {
        let out = run_quiet(tmux(&self.name).args([
            "list-panes",
            "-t",
            &self.name,
            "-F",
            "#{pane_pid}",
        ]))?;
        out.trim()
            .parse()
            .with_context(|| format!("tmux pane pid {out:?}"))
    }

    /// The visible screen.
    pub fn screen(&self) -> anyhow::Result<String> {
        run_quiet(tmux(&self.name).args(["capture-pane", "-p", "-t", &self.name]))
    }

    /// Types `keys` into the pane.
    pub fn send_keys(&self, keys: &str) -> anyhow::Result<()> {
        run_quiet(tmux(&self.name).args(["send-keys", "-t", &self.name, keys])).map(drop)
    }
}

impl Drop for TmuxSession {
    fn drop(&mut self) {
        let socket = run_quiet(tmux(&self.name).args(["display", "-p", "#{socket_path}"]))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let _ = run_quiet(tmux(&self.name).arg("kill-server"));
        if !socket.is_empty() {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// debugfs mounted by the bench (bpftrace 0.17 looks for tracepoints under it), unmounted on drop.
pub struct DebugfsMount;

impl DebugfsMount {
    /// Mounts debugfs unless its tracing directory is already there; `None` when nothing was done.
    pub fn ensure() -> anyhow::Result<Option<Self>> {
        if Path::new("/sys/kernel/debug/tracing/events").exists() {
            return Ok(None);
        }
        run_quiet(Command::new("mount").args(["-t", "debugfs", "none", "/sys/kernel/debug"]))
            .context("mounting debugfs for bpftrace")?;
        Ok(Some(Self))
    }
}

impl Drop for DebugfsMount {
    fn drop(&mut self) {
        if let Err(e) = run_quiet(Command::new("umount").arg("/sys/kernel/debug")) {
            eprintln!("bench: could not unmount debugfs: {e:#}");
        }
    }
}

/// A scratch directory, removed with its contents on drop.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates a fresh directory named after `prefix` and this process.
    pub fn create(prefix: &str) -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        if path.exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing stale {}", path.display()))?;
        }
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A session runs on a server of its own: two sessions at once, each killed on drop with
    /// its server, its socket removed and its pane's process gone, the other untouched.
    #[test]
    fn a_sessions_server_is_its_own_and_goes_with_it() {
        let tag = std::process::id();
        let a =
            TmuxSession::start(&format!("ds-guard-a-{tag}"), 80, 24, "echo one; sleep 60").unwrap();
        let b =
            TmuxSession::start(&format!("ds-guard-b-{tag}"), 80, 24, "echo two; sleep 60").unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(a.screen().unwrap().contains("one") && b.screen().unwrap().contains("two")) {
            assert!(Instant::now() < deadline, "no screens: {:?}", a.screen());
            std::thread::sleep(Duration::from_millis(50));
        }
        let socket = run_quiet(tmux(&a.name).args(["display", "-p", "#{socket_path}"]))
            .unwrap()
            .trim()
            .to_string();
        let pid = a.pane_pid().unwrap();
        assert!(std::path::Path::new(&socket).exists(), "{socket}");
        drop(a);
        assert!(!std::path::Path::new(&socket).exists(), "{socket} left");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "pane {pid} still runs");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            b.screen().unwrap().contains("two"),
            "the other session went too"
        );
    }
}
