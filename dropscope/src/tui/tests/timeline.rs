//! Replaying a history: the strip of drops/s over its whole range in the header, gaps blank,
//! the replay's position marked.
use super::*;
use crate::{history::timeline::Timeline, model::group::Dim};

#[test]
fn a_history_replay_shows_its_strip_with_the_gap_and_the_position() {
    let mut s = state((100, 20));
    s.replay = Some(ReplayStatus {
        position: Duration::from_secs(25),
        duration: Duration::from_secs(40),
        speed: 1.0,
        ..Default::default()
    });
    // 40 s of history: 10 s dropping at 10/s then 20/s, 10 s not recorded, 20 s without drops.
    let mut buckets = vec![Some(10.0); 5];
    buckets.extend([Some(20.0); 5]);
    buckets.extend([None; 10]);
    buckets.extend([Some(0.0); 20]);
    s.timeline = Some(Timeline {
        from_ms: 0,
        to_ms: 40_000,
        buckets,
        replay_started_ms: 0,
        replay_from_ms: 0,
        ..Default::default()
    });
    let shown = screen(&s);
    let line = shown
        .lines()
        .find(|l| l.starts_with("history "))
        .unwrap_or_else(|| panic!("no strip:\n{shown}"));
    let end = line
        .find(" 1970-01-01")
        .unwrap_or_else(|| panic!("no range: {line}"));
    let strip: Vec<char> = line["history ".len()..end].chars().collect();
    // The cell at the middle of bucket `c` of 40.
    let at = |c: usize| strip[(2 * c + 1) * strip.len() / 80];
    assert_eq!(at(2), '▅', "{line}");
    assert_eq!(at(7), '█', "{line}");
    assert_eq!(at(15), ' ', "the gap is blank, not zero: {line}");
    assert!(
        [at(21), at(35)].iter().all(|&c| c == '_'),
        "no drops is '_': {line}"
    );
    assert!(strip.contains(&'|'), "the position: {line}");
    assert!(line.contains("1970-01-01"), "{line}");
}

#[test]
fn t_jumps_to_a_typed_session_or_wall_clock_time() {
    let mut s = state((100, 20));
    // Live, `t` does nothing.
    assert_eq!(press(&mut s, KeyCode::Char('t')), None);
    assert!(s.goto.is_none());
    s.replay = Some(ReplayStatus {
        position: Duration::from_secs(10),
        duration: Duration::from_secs(100),
        speed: 1.0,
        ..Default::default()
    });
    let mut jump = |typed: &str| {
        assert_eq!(press(&mut s, KeyCode::Char('t')), None);
        for c in typed.chars() {
            assert_eq!(press(&mut s, KeyCode::Char(c)), None);
        }
        assert!(screen(&s).contains(&format!("go to {typed}_")));
        press(&mut s, KeyCode::Enter)
    };
    // The session started at the epoch (see `info`): 00:00:30 UTC is 30 s in.
    assert_eq!(
        jump("1970-01-01T00:00:30Z"),
        Some(Effect::Replay(ReplayCommand::SeekBy(20.0)))
    );
    assert_eq!(
        jump("90s"),
        Some(Effect::Replay(ReplayCommand::SeekBy(80.0)))
    );
    assert_eq!(jump("soon"), None);
    assert!(
        s.status
            .as_deref()
            .is_some_and(|m| m.contains("neither a duration"))
    );
    // Esc gives up; the keys typed meanwhile did nothing else.
    press(&mut s, KeyCode::Char('t'));
    press(&mut s, KeyCode::Char('q'));
    assert_eq!(press(&mut s, KeyCode::Esc), None);
    assert!(s.goto.is_none());
}

/// A history of one session, 3 h of snapshots 10 s apart from `t0`: UDP drops 1/s all along,
/// TCP none until the last hour, then 10/s.
fn generated_history(dir: &std::path::Path, t0: u64) {
    use crate::history::synthetic::{session, write_session};
    let (mut udp, mut tcp) = (0, 0);
    let snaps: Vec<Snapshot> = (1..=1080u64)
        .map(|m| {
            udp += 10;
            if m > 720 {
                tcp += 100;
            }
            let mut s = snap(m * 10, &[(UDP, udp), (TCP, tcp)], 0);
            s.stacks.clear();
            s.unix_ms = t0 + m * 10_000;
            s
        })
        .collect();
    write_session(dir, 1, &session("h", t0), &snaps, 360).expect("history");
}

#[test]
fn v_compares_the_window_shown_with_the_same_window_an_interval_earlier() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t0 = 1_790_000_000_000;
    generated_history(tmp.path(), t0);
    let mut s = state((120, 24));
    // `v` needs a history: in a recording's replay it says so and waits for nothing.
    s.replay = Some(ReplayStatus {
        position: Duration::from_secs(10_800),
        duration: Duration::from_secs(10_800),
        speed: 1.0,
        ..Default::default()
    });
    assert_eq!(press(&mut s, KeyCode::Char('v')), None);
    assert!(s.compare_typed.is_none());
    assert!(s.status.as_deref().is_some_and(|m| m.contains("history")));
    // The replay of the last 10 minutes, at its end.
    s.timeline = Some(Timeline {
        from_ms: t0,
        to_ms: t0 + 10_800_000,
        buckets: vec![Some(1.0); 10],
        replay_started_ms: t0,
        replay_from_ms: t0 + 10_200_000,
        ..Default::default()
    });
    assert!(
        screen(&s).contains("v "),
        "the key is offered in the footer or help"
    );
    assert_eq!(press(&mut s, KeyCode::Char('v')), None);
    for c in "1h".chars() {
        assert_eq!(press(&mut s, KeyCode::Char(c)), None);
    }
    assert!(screen(&s).contains("compare with 1h_"), "{}", screen(&s));
    let effect = press(&mut s, KeyCode::Enter);
    let now = crate::history::range::Window {
        from_ms: t0 + 10_200_000,
        to_ms: t0 + 10_800_000,
    };
    let vs = Duration::from_secs(3600);
    assert_eq!(effect, Some(Effect::Compare { now, vs }));
    // What the event loop computes from the history, given back.
    let compared = crate::history::compare::compare_window(
        tmp.path(),
        now,
        vs,
        (&Default::default(), &[Dim::Reason, Dim::Location]),
        crate::model::compare::DEFAULT_ALPHA,
        &[],
    )
    .expect("compared");
    assert_eq!(compared.comparison.total.base_count, 600);
    assert_eq!(compared.comparison.total.new_count, 6_600);
    update(&mut s, Msg::Compared(Box::new(Ok(compared))));
    let shown = screen(&s);
    assert!(
        shown.contains("(1h earlier, p < 0.001)"),
        "the windows compared: {shown}"
    );
    assert!(shown.contains("now 20"), "{shown}");
    let line = |what: &str| -> String {
        shown
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what} row:\n{shown}"))
            .to_string()
    };
    // Then, now and the change per row: TCP is new (significant), UDP the same.
    let tcp = line("tcp_v4_rcv");
    assert!(tcp.contains("▲ more"), "{tcp}");
    assert!(tcp.contains("0.0/s") && tcp.contains("10.0/s"), "{tcp}");
    assert!(tcp.contains("6,000") && tcp.contains("new"), "{tcp}");
    let udp = line("__udp4_lib_rcv");
    assert!(!udp.contains('▲') && !udp.contains('▼'), "{udp}");
    assert!(udp.contains("1.0/s") && udp.contains("1.00x"), "{udp}");
    let total = line("all drops");
    assert!(total.contains("600") && total.contains("6,600"), "{total}");
    // Esc leaves the comparison for the table.
    assert_eq!(press(&mut s, KeyCode::Esc), None);
    assert!(s.compare.is_none());
    assert!(screen(&s).contains("COUNT"), "the table again");
    // A window with nothing recorded is said, never compared as zero drops.
    let err = crate::history::compare::compare_window(
        tmp.path(),
        now,
        Duration::from_secs(86_400),
        (&Default::default(), &[]),
        0.001,
        &[],
    )
    .expect_err("a day before the history");
    update(&mut s, Msg::Compared(Box::new(Err(format!("{err:#}")))));
    assert!(
        s.status
            .as_deref()
            .is_some_and(|m| m.contains("not recorded")),
        "{:?}",
        s.status
    );
    assert!(s.compare.is_none());
}

#[test]
fn t_to_a_time_outside_the_stretch_replayed_jumps_there_within_the_history() {
    let mut s = state((120, 20));
    let t0 = 1_790_000_000_000;
    // The session started at the epoch (see `info`); the stretch replayed is its 100 s to
    // 200 s, of a history from the epoch to t0.
    s.replay = Some(ReplayStatus {
        position: Duration::from_secs(150),
        duration: Duration::from_secs(200),
        speed: 1.0,
        ..Default::default()
    });
    s.timeline = Some(Timeline {
        from_ms: 0,
        to_ms: t0,
        buckets: vec![Some(1.0); 4],
        replay_started_ms: 0,
        replay_from_ms: 100_000,
        ..Default::default()
    });
    let mut jump = |typed: &str| {
        press(&mut s, KeyCode::Char('t'));
        for c in typed.chars() {
            press(&mut s, KeyCode::Char(c));
        }
        let e = press(&mut s, KeyCode::Enter);
        (e, s.status.clone().unwrap_or_default())
    };
    // Within the stretch: a seek.
    assert_eq!(
        jump("1970-01-01T00:02:30Z").0,
        Some(Effect::Replay(ReplayCommand::SeekBy(0.0)))
    );
    // Later than the stretch (another session of the history): the window around it is read.
    let (e, msg) = jump("2026-09-21T14:13:20Z");
    assert_eq!(e, Some(Effect::Jump(1_790_000_000_000)));
    assert!(msg.contains("reading the history around"), "{msg}");
    // Before it (a gap, or an earlier session): the same.
    let (e, _) = jump("1970-01-01T00:00:30Z");
    assert_eq!(e, Some(Effect::Jump(30_000)));
    // Past the history's end: said, with its range, no jump.
    let (e, msg) = jump("2026-09-21T14:13:21Z");
    assert_eq!(e, None);
    assert!(msg.contains("outside the history"), "{msg}");
}

#[test]
fn v_with_budgets_marks_the_rows_over_budget() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t0 = 1_790_000_000_000;
    generated_history(tmp.path(), t0);
    let now = crate::history::range::Window {
        from_ms: t0 + 10_200_000,
        to_ms: t0 + 10_800_000,
    };
    let judged = |clauses: &[&str]| {
        let budget: Vec<_> = (clauses.iter())
            .map(|c| crate::vocab::budget::parse(c).expect("clause"))
            .collect();
        crate::history::compare::compare_window(
            tmp.path(),
            now,
            Duration::from_secs(3600),
            (&Default::default(), &[Dim::Reason, Dim::Location]),
            crate::model::compare::DEFAULT_ALPHA,
            &budget,
        )
        .expect("compared")
    };
    let shown = |compared| {
        let mut s = state((160, 24));
        update(&mut s, Msg::Compared(Box::new(Ok(compared))));
        screen(&s)
    };
    let line = |shown: &str, what: &str| -> String {
        shown
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what} row:\n{shown}"))
            .to_string()
    };
    // The window shown drops 11/s (1/s UDP, 10/s TCP, both NO_SOCKET): over a total of 5/s,
    // within 20/s of NO_SOCKET.
    let c = judged(&["total<5/s", "NO_SOCKET<20/s"]);
    assert_eq!(c.verdicts.len(), 2);
    let screen1 = shown(c);
    assert!(screen1.contains("BUDGET"), "{screen1}");
    assert!(line(&screen1, "all drops").contains("✗ over"), "{screen1}");
    assert!(!line(&screen1, "tcp_v4_rcv").contains("over"), "{screen1}");
    assert!(
        !line(&screen1, "__udp4_lib_rcv").contains("over"),
        "{screen1}"
    );
    assert!(screen1.contains("over budget: "), "{screen1}");
    assert!(screen1.contains("within budget: "), "{screen1}");
    // A reason's clause marks the rows of that reason, not the total.
    let screen2 = shown(judged(&["NO_SOCKET<5/s"]));
    assert!(line(&screen2, "tcp_v4_rcv").contains("✗ over"), "{screen2}");
    assert!(
        line(&screen2, "__udp4_lib_rcv").contains("✗ over"),
        "{screen2}"
    );
    assert!(!line(&screen2, "all drops").contains("over"), "{screen2}");
    // Without budgets: no column.
    assert!(!shown(judged(&[])).contains("BUDGET"));
}

#[test]
fn a_position_in_a_gap_is_said_in_the_header_never_as_zero_drops() {
    let mut s = state((160, 20));
    s.replay = Some(ReplayStatus {
        position: Duration::from_secs(15),
        duration: Duration::from_secs(40),
        speed: 1.0,
        ..Default::default()
    });
    let mut buckets = vec![Some(10.0); 10];
    buckets.extend([None; 10]);
    buckets.extend([Some(5.0); 20]);
    s.timeline = Some(Timeline {
        from_ms: 0,
        to_ms: 40_000,
        buckets,
        gaps: vec![(10_000, 20_000)],
        ..Default::default()
    });
    let line = |s: &State| {
        screen(s)
            .lines()
            .find(|l| l.starts_with("history "))
            .expect("the strip")
            .to_string()
    };
    let in_gap = line(&s);
    assert!(in_gap.contains("in a gap: not recorded"), "{in_gap}");
    assert!(in_gap.contains("not zero drops"), "{in_gap}");
    if let Some(r) = s.replay.as_mut() {
        r.position = Duration::from_secs(25);
    }
    assert!(!line(&s).contains("in a gap"), "{}", line(&s));
}
