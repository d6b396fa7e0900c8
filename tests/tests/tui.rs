//! The live TUI driven in tmux against real drops: what it shows, its keys, and a clean exit on
//! `q` and on SIGTERM (terminal restored, probe detached). Needs root and tmux.
mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use dropscope_tests::{Netns, dropscope_bin, root_test, run};

struct Tmux {
    session: String,
}

impl Tmux {
    /// Starts `dropscope <args>` in a detached 100x30 tmux session; when it exits, the pane
    /// prints its exit status and stays open.
    fn start(tag: &str, args: &str) -> Self {
        let session = format!("ds-{tag}-{}", std::process::id());
        let cmd = format!(
            "{} {args}; echo EXIT=$?; sleep 600",
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

    fn screen(&self) -> String {
        let out = run(Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        run(Command::new("tmux").args(["send-keys", "-t", &self.session, keys]));
    }

    /// Waits until the screen contains `text`; panics with the screen otherwise.
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} never appeared on:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn pid(&self) -> i32 {
        let out = run(Command::new("tmux").args([
            "list-panes",
            "-t",
            &self.session,
            "-F",
            "#{pane_pid}",
        ]));
        let shell: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("pane pid");
        let out = run(Command::new("pgrep").args(["-P", &shell.to_string(), "dropscope"]));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("dropscope pid")
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

#[test]
fn the_live_view_shows_exact_counts_and_quits_cleanly() {
    let _serial = root_test();
    let ns = Netns::new("tui");
    let t = Tmux::start("tui", "");
    t.wait_for("tp_btf/kfree_skb");
    ns.traffic(&["udp", "9", "1234"]);
    ns.traffic(&["raw", "253", "56"]);
    t.wait_for("IP_NOPROTO");
    let s = t.wait_for("1,234");
    assert!(s.contains("NO_SOCKET"), "{s}");
    assert!(s.contains("__udp4_lib_rcv+"), "{s}");

    t.keys("?");
    let help = t.wait_for("filter");
    assert!(help.to_lowercase().contains("quit"), "{help}");
    t.keys("Escape");

    t.keys("q");
    let s = t.wait_for("EXIT=0");
    assert!(
        !s.contains("NO_SOCKET"),
        "the alternate screen was not left:\n{s}"
    );
    assert!(
        common::dropscope_programs().is_empty(),
        "programs left attached"
    );
}

#[test]
fn sigterm_restores_the_terminal_and_detaches() {
    let _serial = root_test();
    let t = Tmux::start("term", "");
    t.wait_for("tp_btf/kfree_skb");
    // SAFETY: kill(2) with a valid signal to the process we started.
    unsafe { libc::kill(t.pid(), libc::SIGTERM) };
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(
        !s.contains("tp_btf/kfree_skb"),
        "the alternate screen was not left:\n{s}"
    );
    assert!(
        common::dropscope_programs().is_empty(),
        "programs left attached"
    );
}

#[test]
fn replay_ends_cleanly_on_sigterm() {
    let _serial = root_test();
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample.dsrec");
    let t = Tmux::start("replay", &format!("replay {}", sample.display()));
    t.wait_for("REPLAY");
    t.wait_for("__udp4_lib_rcv+");
    // SAFETY: kill(2) with a valid signal to the process we started.
    unsafe { libc::kill(t.pid(), libc::SIGTERM) };
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(
        !s.contains("REPLAY"),
        "the alternate screen was not left:\n{s}"
    );
}
