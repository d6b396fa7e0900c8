//! Hostile names on screen: escapes, controls and bidi overrides are shown escaped, never
//! obeyed, in the table, the header and the stack view.
use super::*;

const EVIL_REASON: &str = "NO_SOCKET\x1b]0;TITLE\x07\x1b]52;c;cHduZWQ=\x07";
const EVIL_LOCATION: &str = "loc\rFORGED\u{8}\u{9b}31m\u{202e}gnp.exe";

/// Whether `c` would act on a terminal instead of being shown.
fn acts(c: char) -> bool {
    c.is_control() && c != '\n' || ('\u{202a}'..='\u{202e}').contains(&c)
}

#[test]
fn hostile_names_are_shown_escaped_everywhere() {
    let mut info = info();
    info.host = "h\x1b[2J\u{202e}".into();
    let mut s = State::new(info, None, (160, 40));
    let mut snap = snap(1, &[((EVIL_REASON, EVIL_LOCATION), 7)], 0);
    snap.stacks.push(StackCount {
        key: key(EVIL_REASON, EVIL_LOCATION),
        frames: vec![Arc::from("frame\u{2066}\x1b[31m")].into(),
        weight: 7,
        samples: 1,
    });
    feed(&mut s, snap, Instant::now());
    let out = screen(&s);
    assert!(!out.chars().any(acts), "{out:?}");
    assert!(out.contains("\\u{1b}]0;TITLE"), "{out}");
    assert!(out.contains("\\u{202e}gnp.exe"), "{out}");
    press(&mut s, KeyCode::Char('a'));
    let out = screen(&s);
    assert!(matches!(s.screen, Screen::Stacks(_)));
    assert!(!out.chars().any(acts), "{out:?}");
    assert!(out.contains("frame\\u{2066}\\u{1b}[31m"), "{out}");
}

#[test]
fn the_deepest_stack_a_recording_may_hold_opens_and_closes() {
    let mut s = state((100, 30));
    let depth = crate::record::budget::MAX_STACK_DEPTH;
    let frames: Arc<[Arc<str>]> = (0..depth).map(|i| Arc::from(format!("f{i}"))).collect();
    let mut deep = snap(3, &[(UDP, 1_234_001)], 0);
    deep.stacks = vec![StackCount {
        key: key(UDP.0, UDP.1),
        frames,
        weight: 5,
        samples: 1,
    }];
    feed(&mut s, deep, Instant::now());
    press(&mut s, KeyCode::Char('a'));
    // The drop site (the innermost frame) first.
    assert!(screen(&s).contains(&format!("f{}", depth - 1)));
    press(&mut s, KeyCode::Esc);
    assert!(matches!(s.screen, Screen::Table));
}
