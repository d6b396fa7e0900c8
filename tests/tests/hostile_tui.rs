//! The TUI against hostile recordings and signals, driven in tmux: a stack too deep, the
//! deepest stack allowed, SIGQUIT, SIGTSTP/Ctrl-Z and SIGCONT. Needs root (the live SIGQUIT
//! test attaches the probe) and tmux.
mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use dropscope_tests::{dropscope_bin, hostile, root_test, tmux::Tmux};

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
    // The stack view is open: its heading (drop site first).
    t.wait_for("drop site first");
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
