//! The live TUI driven in tmux against real drops: what it shows, its keys, which row is
//! selected and what Enter opens, and a clean exit on `q` and on SIGTERM (terminal restored,
//! probe detached). Needs root and tmux.
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
    // A row of the sample's table (its reason: the location's width at 100 columns depends on
    // the other columns the sample fills, such as WHO).
    t.wait_for("NO_SOCKET");
    // SAFETY: kill(2) with a valid signal to the process we started.
    unsafe { libc::kill(t.pid(), libc::SIGTERM) };
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(
        !s.contains("REPLAY"),
        "the alternate screen was not left:\n{s}"
    );
}

/// The first table row below the column header, and whether it is drawn in reverse video
/// (selected).
fn top_row(styled: &str) -> (String, bool) {
    let plain = |l: &str| {
        let mut out = String::new();
        let mut esc = false;
        for c in l.chars() {
            match c {
                '\x1b' => esc = true,
                'm' if esc => esc = false,
                c if !esc => out.push(c),
                _ => {}
            }
        }
        out
    };
    let mut lines = styled
        .lines()
        .skip_while(|l| !plain(l).starts_with("REASON"));
    let _header = lines
        .next()
        .unwrap_or_else(|| panic!("no table on:\n{styled}"));
    let row = lines
        .next()
        .unwrap_or_else(|| panic!("no row on:\n{styled}"));
    // Reverse video: SGR 7, alone or among other attributes.
    let reversed = row
        .split('\x1b')
        .filter_map(|seq| seq.strip_prefix('[')?.split_once('m'))
        .any(|(params, _)| params.split(';').any(|p| p == "7"));
    (plain(row), reversed)
}

/// A few drops of one key are seen first; then many more of another key take the top row. The
/// selection is on the top row (not on the first key seen), and Enter opens that row.
#[test]
fn the_selection_starts_on_the_top_row_and_enter_opens_it() {
    let _serial = root_test();
    let ns = Netns::new("tui-sel");
    let t = Tmux::start("sel", &format!("--netns {}", ns.name));
    t.wait_for("tp_btf/kfree_skb");
    ns.traffic(&["raw", "253", "3"]);
    t.wait_for("IP_NOPROTO");
    ns.traffic(&["udp", "9", "2000"]);
    t.wait("2,000 NO_SOCKET drops", |s| {
        s.contains("2,000") && s.contains("NO_SOCKET")
    });
    // The rates settle (no more drops): the order is by count then, NO_SOCKET first. Waited
    // for on the screen, which the view redraws on its own schedule.
    let mut styled = String::new();
    dropscope_tests::wait::until("the 2,000 NO_SOCKET drops on the top row", || {
        styled = t.styled_screen();
        let (row, _) = top_row(&styled);
        row.starts_with("NO_SOCKET") && row.contains("2,000")
    });
    let (row, selected) = top_row(&styled);
    assert!(
        row.starts_with("NO_SOCKET") && row.contains("2,000"),
        "the top row is not the 2,000 NO_SOCKET drops: {row}\n{}",
        t.screen()
    );
    assert!(
        selected,
        "the top row is not the selected one:\n{}",
        t.screen()
    );

    t.keys("Enter");
    let s = t.wait_for("exact count");
    assert!(
        s.contains("NO_SOCKET @ __udp4_lib_rcv+") && s.contains("2,000"),
        "Enter opened another row than the selected top row:\n{s}"
    );
    assert!(!s.contains("IP_NOPROTO @"), "{s}");
    t.keys("q");
    t.wait_for("EXIT=0");
}
