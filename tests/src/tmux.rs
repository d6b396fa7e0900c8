//! The TUI driven in tmux, for the integration tests: start dropscope (or a shell) in a detached
//! session, read its screen and terminal mode, send keys, find and watch its process.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use crate::{dropscope_bin, run};

/// `tmux` on the server of `session` alone (a socket of its own, `-L`), its panes run by
/// `/bin/sh`: tmux takes the pane shell from `$SHELL`, which `sudo` sets to the invoking user's
/// login shell (`nologin` for a system user), and a pane whose shell refuses to run takes the
/// whole server down with it. A server of its own per session: killing a shared server's last
/// session makes it exit, and a session started meanwhile met "server exited unexpectedly".
fn tmux(session: &str) -> Command {
    let mut cmd = Command::new("tmux");
    cmd.env("SHELL", "/bin/sh").args(["-L", session]);
    cmd
}

/// A name no other session of this process or another has (the pid and a counter).
fn unique(tag: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("ds-{tag}-{}-{n}", std::process::id())
}

/// A detached 100x30 tmux session running dropscope (or a shell), on a server of its own,
/// killed when dropped.
pub struct Tmux {
    session: String,
}

impl Tmux {
    /// Starts `dropscope <args>` in a detached 100x30 tmux session; when it exits, the pane
    /// prints its exit status and the terminal's mode (`MODE=icanon` when cooked).
    pub fn start(tag: &str, args: &str) -> Self {
        let session = unique(tag);
        let cmd = format!(
            "{} {args}; echo EXIT=$?; stty -a | grep -o -- '-\\?icanon' | sed 's/^/MODE=/'; \
             sleep 600",
            dropscope_bin().display()
        );
        run(tmux(&session).args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "100",
            "-y",
            "30",
            &cmd,
        ]));
        Self { session }
    }

    /// An interactive bash with job control and no line editing, in a detached 100x30 session.
    pub fn shell(tag: &str) -> Self {
        let session = unique(tag);
        run(tmux(&session).args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "100",
            "-y",
            "30",
            // exec: the pane's process is the shell itself, whose children `pid` looks for.
            "exec bash --norc --noprofile --noediting -i",
        ]));
        Self { session }
    }

    pub fn query(&self, format: &str) -> String {
        let out = run(tmux(&self.session).args(["display", "-p", "-t", &self.session, format]));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn screen(&self) -> String {
        let out = run(tmux(&self.session).args(["capture-pane", "-p", "-t", &self.session]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen's lines with their colours and attributes as escape sequences.
    pub fn styled_screen(&self) -> String {
        let out = run(tmux(&self.session).args(["capture-pane", "-p", "-e", "-t", &self.session]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn keys(&self, keys: &str) {
        run(tmux(&self.session).args(["send-keys", "-t", &self.session, keys]));
    }

    /// Waits until `ok` holds for the screen; panics with the screen otherwise.
    pub fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what} never appeared on:\n{s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn wait_for(&self, text: &str) -> String {
        self.wait(text, |s| s.contains(text))
    }

    /// Whether the pane shows the alternate screen.
    pub fn alternate(&self) -> bool {
        self.query("#{alternate_on}") == "1"
    }

    /// Whether the pane's terminal is in raw (non-canonical) mode, read from outside.
    pub fn raw(&self) -> bool {
        let tty = self.query("#{pane_tty}");
        let out = run(Command::new("stty").args(["-a", "-F", &tty]));
        String::from_utf8_lossy(&out.stdout).contains("-icanon")
    }

    pub fn pid(&self) -> i32 {
        let shell = self.query("#{pane_pid}");
        let out = run(Command::new("pgrep").args(["-P", &shell, "dropscope"]));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("dropscope pid")
    }

    /// The process's state letter in /proc (T: stopped, Z: exited, not yet reaped).
    pub fn state(pid: i32) -> Option<char> {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.trim_start().chars().next())
            })
    }

    /// Whether the process is stopped.
    pub fn stopped(pid: i32) -> bool {
        Self::state(pid) == Some('T')
    }

    /// Whether the process has exited but is not reaped yet.
    pub fn zombie(pid: i32) -> bool {
        Self::state(pid) == Some('Z')
    }
}

impl Drop for Tmux {
    /// Kills the session's server and removes its socket (tmux leaves it behind).
    fn drop(&mut self) {
        // Not `query`: a drop must not panic (the server may be gone already).
        let socket = tmux(&self.session)
            .args(["display", "-p", "#{socket_path}"])
            .stderr(std::process::Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let _ = tmux(&self.session)
            .arg("kill-server")
            .stderr(std::process::Stdio::null())
            .status();
        if !socket.is_empty() {
            let _ = std::fs::remove_file(socket);
        }
    }
}
