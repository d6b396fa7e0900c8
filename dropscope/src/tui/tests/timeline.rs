//! Replaying a history: the strip of drops/s over its whole range in the header, gaps blank,
//! the replay's position marked.
use super::*;
use crate::history::timeline::Timeline;

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
