//! The TUI against hostile recordings and signals, driven in tmux: a stack too deep, the
//! deepest stack allowed, SIGQUIT, SIGTSTP/Ctrl-Z and SIGCONT. Needs root (the live SIGQUIT
//! test attaches the probe) and tmux.
mod common;

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use dropscope_tests::{dropscope_bin, hostile, root_test, run};

struct Tmux {
    session: String,
}

impl Tmux {
    /// Starts `dropscope <args>` in a detached 100x30 tmux session; when it exits, the pane
    /// prints its exit status and the terminal's mode (`MODE=icanon` when cooked).
    fn start(tag: &str, args: &str) -> Self {
        let session = format!("ds-h{tag}-{}", std::process::id());
        let cmd = format!(
            "{} {args}; echo EXIT=$?; stty -a | grep -o -- '-\\?icanon' | sed 's/^/MODE=/'; \
             sleep 600",
            dropscope_bin().display()
        );
        run(Command::new("tmux").args([
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
    fn shell(tag: &str) -> Self {
        let session = format!("ds-h{tag}-{}", std::process::id());
        run(Command::new("tmux").args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "100",
            "-y",
            "30",
            "bash --norc --noprofile --noediting -i",
        ]));
        Self { session }
    }

    fn query(&self, format: &str) -> String {
        let out = run(Command::new("tmux").args(["display", "-p", "-t", &self.session, format]));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn screen(&self) -> String {
        let out = run(Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        run(Command::new("tmux").args(["send-keys", "-t", &self.session, keys]));
    }

    /// Waits until `ok` holds for the screen; panics with the screen otherwise.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
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

    fn wait_for(&self, text: &str) -> String {
        self.wait(text, |s| s.contains(text))
    }

    /// Whether the pane shows the alternate screen.
    fn alternate(&self) -> bool {
        self.query("#{alternate_on}") == "1"
    }

    /// Whether the pane's terminal is in raw (non-canonical) mode, read from outside.
    fn raw(&self) -> bool {
        let tty = self.query("#{pane_tty}");
        let out = run(Command::new("stty").args(["-a", "-F", &tty]));
        String::from_utf8_lossy(&out.stdout).contains("-icanon")
    }

    fn pid(&self) -> i32 {
        let shell = self.query("#{pane_pid}");
        let out = run(Command::new("pgrep").args(["-P", &shell, "dropscope"]));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("dropscope pid")
    }

    /// The process's state letter in /proc (T: stopped, Z: exited, not yet reaped).
    fn state(pid: i32) -> Option<char> {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.trim_start().chars().next())
            })
    }

    /// Whether the process is stopped.
    fn stopped(pid: i32) -> bool {
        Self::state(pid) == Some('T')
    }

    /// Whether the process has exited but is not reaped yet.
    fn zombie(pid: i32) -> bool {
        Self::state(pid) == Some('Z')
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a valid signal to a process we started.
    unsafe { libc::kill(pid, sig) };
}

fn wait_until(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_stack_too_deep_is_refused_and_the_deepest_allowed_one_opens() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    // 100,000 frames in a 563-byte file once overflowed the stack when opened with Enter.
    let deep = dir.path().join("deep.dsrec");
    hostile::deep_stack(100_000).write(&deep);
    let t = Tmux::start("deep", &format!("replay {}", deep.display()));
    let s = t.wait("the end or the table", |s| {
        s.contains("EXIT=") || s.contains("q quit")
    });
    if !s.contains("EXIT=") {
        t.keys("Enter");
    }
    let s = t.wait_for("MODE=");
    assert!(s.contains("EXIT=1"), "{s}");
    assert!(s.contains("1024 frames in one stack"), "{s}");
    assert!(s.contains("MODE=icanon"), "terminal left raw:\n{s}");
    assert!(!t.alternate());

    let deepest = dir.path().join("deepest.dsrec");
    hostile::deep_stack(1024).write(&deepest);
    let t = Tmux::start("deepest", &format!("replay {}", deepest.display()));
    t.wait_for("q quit");
    t.keys("Enter");
    t.wait_for("outermost caller first");
    t.keys("q");
    let s = t.wait_for("MODE=");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(s.contains("MODE=icanon"), "{s}");
}

#[test]
fn sigtstp_and_ctrl_z_restore_the_terminal_and_fg_brings_the_tui_back() {
    let _serial = root_test();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample.dsrec");
    // An interactive shell with job control (without line editing, so that at its prompt the
    // terminal is in the cooked mode dropscope must leave behind).
    let t = Tmux::shell("tstp");
    t.keys(&format!(
        "{} replay {}; echo EXIT=$?",
        dropscope_bin().display(),
        sample.display()
    ));
    t.keys("Enter");
    t.wait_for("REPLAY");
    let pid = t.pid();
    assert!(t.alternate() && t.raw());
    for stop in ["SIGTSTP", "Ctrl-Z"] {
        if stop == "SIGTSTP" {
            kill(pid, libc::SIGTSTP);
        } else {
            t.keys("C-z");
        }
        wait_until(&format!("{stop} stops dropscope"), || Tmux::stopped(pid));
        t.wait_for("Stopped");
        assert!(!t.alternate(), "{stop}: still on the alternate screen");
        assert!(!t.raw(), "{stop}: terminal left raw while stopped");
        t.keys("clear; fg");
        t.keys("Enter");
        wait_until("fg resumes dropscope", || !Tmux::stopped(pid));
        wait_until("the alternate screen comes back", || t.alternate());
        wait_until("raw mode comes back", || t.raw());
        t.wait_for("REPLAY");
        // Raw mode: a single key acts at once (in cooked mode it would wait for Enter).
        t.keys("?");
        t.wait_for("help: ? or Esc closes");
        t.keys("Escape");
        t.wait(&format!("{stop}: help closed"), |s| {
            !s.contains("Esc closes")
        });
    }
    t.keys("q");
    // (A job stopped once leaves the rest of its command line behind: no EXIT= line.)
    wait_until("dropscope exits", || {
        !Path::new(&format!("/proc/{pid}")).exists() || Tmux::zombie(pid)
    });
    wait_until("the alternate screen is left", || !t.alternate());
    assert!(!t.raw(), "terminal left raw");
}

#[test]
fn sigquit_ends_replay_and_the_live_view_cleanly() {
    let _serial = root_test();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample.dsrec");
    for args in [format!("replay {}", sample.display()), String::new()] {
        let t = Tmux::start("quit", &args);
        t.wait_for("q quit");
        kill(t.pid(), libc::SIGQUIT);
        let s = t.wait_for("MODE=");
        assert!(s.contains("EXIT=0"), "{args}: {s}");
        assert!(s.contains("MODE=icanon"), "{args}: terminal left raw:\n{s}");
        assert!(!t.alternate(), "{args}: alternate screen not left");
        assert!(
            common::dropscope_programs().is_empty(),
            "programs left attached"
        );
    }
}
