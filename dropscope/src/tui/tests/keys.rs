//! Update transitions: keys, snapshots, pause, filter, sort, selection and replay.
use super::*;

#[test]
fn sort_cycles_and_reorders() {
    let mut s = state((80, 24));
    let order = |s: &State| -> Vec<String> {
        s.rows()
            .iter()
            .map(|r| r.key.location.to_string())
            .collect()
    };
    // The last minute's drops: every count so far, in a session 2 s old.
    assert_eq!(s.sort.label(), "last 1m");
    assert_eq!(order(&s), [UDP.1, NFT.1, TCP.1]);
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "rate");
    assert_eq!(order(&s), [UDP.1, NFT.1, TCP.1]);
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "count");
    assert_eq!(order(&s), [UDP.1, NFT.1, TCP.1]);
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "reason");
    assert_eq!(order(&s)[0], NFT.1);
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "location");
    assert_eq!(order(&s), [UDP.1, NFT.1, TCP.1]);
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "last 1m");
    assert!(screen(&s).contains("sort: last 1m"));
}

#[test]
fn filter_types_applies_and_clears() {
    let mut s = state((80, 24));
    press(&mut s, KeyCode::Char('/'));
    assert!(s.editing);
    for c in "tcp".chars() {
        // While typing, letters are text, not commands (`s` must not sort).
        press(&mut s, KeyCode::Char(c));
    }
    press(&mut s, KeyCode::Char('s'));
    press(&mut s, KeyCode::Backspace);
    assert_eq!(s.filter, "tcp");
    assert_eq!(s.sort, crate::model::table::SortKey::default());
    assert!(screen(&s).contains("/tcp"));
    press(&mut s, KeyCode::Enter);
    assert!(!s.editing);
    assert_eq!(s.rows().len(), 1);
    assert_eq!(selected_name(&s), TCP.1);
    let out = screen(&s);
    assert!(
        out.contains("1 of 3 keys") && out.contains("filter: tcp"),
        "{out}"
    );
    assert!(!out.contains("NETFILTER_DROP"), "{out}");
    // Esc in the table clears it.
    press(&mut s, KeyCode::Esc);
    assert!(s.filter.is_empty());
    assert_eq!(s.rows().len(), 3);
    // Esc while typing clears too.
    press(&mut s, KeyCode::Char('/'));
    press(&mut s, KeyCode::Char('z'));
    assert!(s.rows().is_empty());
    assert!(screen(&s).contains("no drops match the filter"));
    press(&mut s, KeyCode::Esc);
    assert!(!s.editing && s.filter.is_empty());
}

/// A filter on a dimension the counts do not have finds nothing: the table says which one, and
/// the `--by` that counts it (as `report` does), not only that nothing matched.
#[test]
fn a_filter_on_a_dimension_not_counted_says_which_and_how_to_count_it() {
    let words = |s: &State| screen(s).split_whitespace().collect::<Vec<_>>().join(" ");
    let type_filter = |s: &mut State, text: &str| {
        press(s, KeyCode::Char('/'));
        for c in text.chars() {
            press(s, KeyCode::Char(c));
        }
        press(s, KeyCode::Enter);
    };
    // Live, counted by the default `--by`: a port is not counted.
    let mut s = state((80, 24));
    s.by = crate::cli::DEFAULT_BY
        .split(',')
        .map(|d| <crate::model::group::Dim as clap::ValueEnum>::from_str(d, false).expect("dim"))
        .collect();
    type_filter(&mut s, "5555");
    assert!(s.rows().is_empty());
    let out = words(&s);
    assert!(
        out.contains("no drops match /5555: port is not counted")
            && out.contains("`--by reason,location,netns,device,protocol,port,socket`"),
        "{out}"
    );
    // A replay counted by reason and location: a protocol is not counted either.
    let mut s = state((80, 24));
    type_filter(&mut s, "sctp");
    let out = words(&s);
    assert!(
        out.contains("protocol is not counted") && out.contains("`--by reason,location,protocol`"),
        "{out}"
    );
    // A word that names no dimension matches nothing, as before.
    let mut s = state((80, 24));
    type_filter(&mut s, "zz");
    let out = words(&s);
    assert!(
        out.contains("no drops match the filter") && !out.contains("not counted"),
        "{out}"
    );
}

#[test]
fn selection_stays_within_bounds() {
    let mut s = state((80, 24));
    press(&mut s, KeyCode::Up);
    assert_eq!(selected_name(&s), UDP.1);
    press(&mut s, KeyCode::End);
    assert_eq!(selected_name(&s), TCP.1);
    press(&mut s, KeyCode::Char('j'));
    assert_eq!(selected_name(&s), TCP.1);
    press(&mut s, KeyCode::Home);
    assert_eq!(selected_name(&s), UDP.1);
    press(&mut s, KeyCode::PageDown);
    assert_eq!(selected_name(&s), TCP.1);
    press(&mut s, KeyCode::PageUp);
    assert_eq!(selected_name(&s), UDP.1);
}

#[test]
fn live_pause_freezes_the_display_but_keeps_counting() {
    let mut s = state((80, 24));
    assert_eq!(press(&mut s, KeyCode::Char(' ')), None);
    assert!(s.paused());
    feed(
        &mut s,
        snap(3, &[(UDP, 2_000_000), (TCP, 30), (NFT, 505)], 0),
        Instant::now(),
    );
    let out = screen(&s);
    assert!(out.contains("PAUSED"), "{out}");
    assert!(
        out.contains("1,234,000") && !out.contains("2,000,000"),
        "{out}"
    );
    assert_eq!(s.tracker.latest().map(|l| l.total), Some(2_000_535));
    press(&mut s, KeyCode::Char('p'));
    assert!(!s.paused());
    let out = screen(&s);
    assert!(
        out.contains("2,000,000") && !out.contains("PAUSED"),
        "{out}"
    );
}

#[test]
fn history_restarts_when_elapsed_goes_back() {
    let mut s = state((80, 24));
    assert!(s.rows().iter().all(|r| r.rate.is_some()));
    feed(&mut s, snap(1, &[(UDP, 1000)], 0), Instant::now());
    let rows = s.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].rate, None);
    assert!(rows[0].trend.is_empty());
}

#[test]
fn clock_advances_between_live_snapshots_only_while_running() {
    let mut s = State::new(info(), None, (80, 24));
    let t0 = Instant::now();
    feed(&mut s, snap(5, &[(UDP, 1)], 0), t0);
    assert!(s.clock_running());
    update(&mut s, Msg::Tick(t0 + Duration::from_secs(2)));
    assert_eq!(s.elapsed(), Duration::from_secs(7));
    assert!(screen(&s).contains("elapsed 00:07"));
    press(&mut s, KeyCode::Char(' '));
    assert!(!s.clock_running());
    assert_eq!(s.elapsed(), Duration::from_secs(5));
}

#[test]
fn quit_keys() {
    let mut s = state((80, 24));
    assert_eq!(press(&mut s, KeyCode::Char('q')), Some(Effect::Quit));
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(update(&mut s, Msg::Key(ctrl_c)), Some(Effect::Quit));
    // Ctrl-C quits even while typing a filter.
    press(&mut s, KeyCode::Char('/'));
    assert_eq!(update(&mut s, Msg::Key(ctrl_c)), Some(Effect::Quit));
}

#[test]
fn replay_keys_drive_the_timeline() {
    let status = ReplayStatus {
        position: Duration::from_secs(83),
        duration: Duration::from_secs(600),
        speed: 1.0,
        paused: false,
        live: false,
    };
    let mut s = State::new(info(), Some(status), (80, 24));
    feed(&mut s, snap(1, &[(UDP, 1)], 0), Instant::now());
    let out = screen(&s);
    assert!(out.contains("REPLAY") && out.contains("01:23 / 10:00") && out.contains("1x"));
    let cmd = |c| Some(Effect::Replay(c));
    assert_eq!(
        press(&mut s, KeyCode::Char(' ')),
        cmd(ReplayCommand::TogglePause)
    );
    assert!(s.frozen.is_none() && s.paused());
    assert!(screen(&s).contains("PAUSED"));
    assert_eq!(
        press(&mut s, KeyCode::Char('[')),
        cmd(ReplayCommand::SeekBy(-10.0))
    );
    assert_eq!(
        press(&mut s, KeyCode::Right),
        cmd(ReplayCommand::SeekBy(10.0))
    );
    assert_eq!(
        press(&mut s, KeyCode::Char('}')),
        cmd(ReplayCommand::SeekBy(60.0))
    );
    assert_eq!(press(&mut s, KeyCode::Char('0')), cmd(ReplayCommand::Start));
    assert_eq!(press(&mut s, KeyCode::Char('$')), cmd(ReplayCommand::End));
    for expect in [2.0, 4.0, 8.0, 16.0, 16.0] {
        assert_eq!(
            press(&mut s, KeyCode::Char('+')),
            cmd(ReplayCommand::Speed(expect))
        );
    }
    for _ in 0..8 {
        press(&mut s, KeyCode::Char('-'));
    }
    assert_eq!(
        press(&mut s, KeyCode::Char('-')),
        cmd(ReplayCommand::Speed(0.25))
    );
    // Recording a replay is refused with a reason.
    assert_eq!(press(&mut s, KeyCode::Char('r')), None);
    assert!(screen(&s).contains("recording works live only"));
    // The status from the replay task wins.
    update(
        &mut s,
        Msg::Replay(ReplayStatus {
            speed: 4.0,
            ..status
        }),
    );
    assert!(screen(&s).contains("4x"));
}

#[test]
fn timeline_keys_do_nothing_live_and_recording_shows_in_the_header() {
    let mut s = state((80, 24));
    assert_eq!(press(&mut s, KeyCode::Char('[')), None);
    assert_eq!(press(&mut s, KeyCode::Char('+')), None);
    assert_eq!(
        press(&mut s, KeyCode::Char('r')),
        Some(Effect::ToggleRecording)
    );
    update(
        &mut s,
        Msg::Recording(Some(RecordingStatus {
            name: "dropscope-20240101-000000Z.dsrec".into(),
            bytes: 12 * 1024 + 300,
        })),
    );
    let out = screen(&s);
    assert!(out.contains("REC") && out.contains("dropscope-20240101-000000Z.dsrec"));
    assert!(out.contains("12.3 KiB"), "{out}");
}

#[test]
fn flamegraph_requests_follow_the_view() {
    let mut s = state((80, 24));
    let Some(Effect::Flamegraph(all)) = press(&mut s, KeyCode::Char('f')) else {
        panic!("no flamegraph request");
    };
    assert_eq!(all.stacks.len(), 2);
    assert_eq!(all.filter, None);
    assert_eq!(all.window, (Duration::ZERO, Duration::from_secs(2)));
    press(&mut s, KeyCode::Char('/'));
    press(&mut s, KeyCode::Char('t'));
    press(&mut s, KeyCode::Char('c'));
    press(&mut s, KeyCode::Enter);
    let Some(Effect::Flamegraph(filtered)) = press(&mut s, KeyCode::Char('f')) else {
        panic!("no flamegraph request");
    };
    assert_eq!(filtered.stacks.len(), 1);
    assert_eq!(filtered.filter.as_deref(), Some("filter \"tc\""));
    press(&mut s, KeyCode::Esc);
    // The filter's only row was its top row, not a row chosen: the selection is the top again.
    assert_eq!(selected_name(&s), UDP.1);
    press(&mut s, KeyCode::Enter);
    let Some(Effect::Flamegraph(row)) = press(&mut s, KeyCode::Char('f')) else {
        panic!("no flamegraph request");
    };
    assert_eq!(row.stacks.len(), 1);
    // Function names without offsets, as `dropscope flamegraph` draws them.
    assert_eq!(row.stacks[0].key, key(UDP.0, "__udp4_lib_rcv"));
    assert_eq!(
        row.filter.as_deref(),
        Some("NO_SOCKET @ __udp4_lib_rcv+0x9b0")
    );
    update(&mut s, Msg::Status("flamegraph written to /x/y.svg".into()));
    assert!(screen(&s).contains("flamegraph written to /x/y.svg"));
}
