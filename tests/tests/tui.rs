//! The live TUI driven in tmux against real drops: what it shows, its keys, and a clean exit on
//! `q` and on SIGTERM (terminal restored, probe detached). Needs root and tmux.
mod common;

use dropscope_tests::{Netns, root_test, tmux::Tmux};

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
