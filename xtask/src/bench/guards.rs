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

/// A detached tmux session, killed on drop.
pub struct TmuxSession {
    name: String,
}

impl TmuxSession {
    /// Starts `command` in a new detached session of the given size.
    pub fn start(name: &str, cols: u16, rows: u16, command: &str) -> anyhow::Result<Self> {
        let (cols, rows) = (cols.to_string(), rows.to_string());
        // tmux runs panes with `$SHELL`, which sudo may have set to a `nologin` shell.
        run_quiet(Command::new("tmux").env("SHELL", "/bin/sh").args([
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
        let out = run_quiet(Command::new("tmux").args([
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
        run_quiet(Command::new("tmux").args(["capture-pane", "-p", "-t", &self.name]))
    }

    /// Types `keys` into the pane.
    pub fn send_keys(&self, keys: &str) -> anyhow::Result<()> {
        run_quiet(Command::new("tmux").args(["send-keys", "-t", &self.name, keys])).map(drop)
    }
}

impl Drop for TmuxSession {
    fn drop(&mut self) {
        let _ = run_quiet(Command::new("tmux").args(["kill-session", "-t", &self.name]));
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
