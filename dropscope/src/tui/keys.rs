//! The one key table: every key, what it does, its help text and where it applies. Dispatch
//! ([`action`]), the `?` overlay and the footer are all read from it, and a test checks that
//! README's key table lists the same keys.
use crossterm::event::KeyCode;

use super::state::{Screen, State};

/// What a key does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Quit.
    Quit,
    /// Show the help overlay.
    Help,
    /// Pause or resume (replay: pause or play).
    Pause,
    /// Edit the filter.
    Filter,
    /// Cycle the sort.
    Sort,
    /// Reverse the sort order.
    Reverse,
    /// Selection (or stack scroll) one up.
    Up,
    /// Selection (or stack scroll) one down.
    Down,
    /// A page up.
    PageUp,
    /// A page down.
    PageDown,
    /// The first row.
    First,
    /// The last row.
    Last,
    /// Stacks of the selected row.
    Stacks,
    /// Stacks of every row shown.
    AllStacks,
    /// Back to the table; in the table, clear the filter.
    Back,
    /// The explain panel.
    Explain,
    /// Copy the selected row's first check command.
    Copy,
    /// The kernel counters panel.
    Counters,
    /// The drop ledger panel.
    Ledger,
    /// Write a flamegraph.
    Flamegraph,
    /// Start or stop recording.
    Record,
    /// Cycle the grouping, coarser each time.
    Regroup,
    /// Seek 10 s back.
    SeekBack,
    /// Seek 10 s forward.
    SeekForward,
    /// Seek 60 s back.
    SeekBackLong,
    /// Seek 60 s forward.
    SeekForwardLong,
    /// Jump to the start.
    Start,
    /// Jump to the end.
    End,
    /// Halve the speed.
    Slower,
    /// Double the speed.
    Faster,
    /// Type a time to jump to.
    GoTo,
    /// Compare the window shown with the same window an interval earlier (a history).
    Compare,
}

/// Where a key applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies {
    /// Live and in replay.
    Both,
    /// Live only.
    Live,
    /// Replay only.
    Replay,
}

/// A footer hint: the key as shown, and a word for each screen it is hinted on.
#[derive(Clone, Copy, Debug)]
pub struct Hint {
    /// The key as the footer shows it.
    pub label: &'static str,
    /// The word on the table screen, if hinted there.
    pub table: Option<&'static str>,
    /// The word on the stack screen, if hinted there.
    pub stacks: Option<&'static str>,
}

/// One row of the table: keys that do related things, shown together.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The keys, as the user types them (space-separated; two spaces between groups).
    pub keys: &'static str,
    /// The help text.
    pub action: &'static str,
    /// Each key code and what it does (aliases such as `=` for `+` included).
    pub bind: &'static [(KeyCode, Action)],
    /// Where the keys apply.
    pub applies: Applies,
    /// The footer hint, if any.
    pub hint: Option<Hint>,
}

const fn key(
    keys: &'static str,
    action: &'static str,
    bind: &'static [(KeyCode, Action)],
    applies: Applies,
) -> Key {
    Key {
        keys,
        action,
        bind,
        applies,
        hint: None,
    }
}

const fn hint(
    mut k: Key,
    label: &'static str,
    table: Option<&'static str>,
    stacks: Option<&'static str>,
) -> Key {
    k.hint = Some(Hint {
        label,
        table,
        stacks,
    });
    k
}

use Action as A;
use Applies::{Both, Live, Replay};
use KeyCode as C;

/// Keys that work everywhere (`c` and `r`: live only).
pub const GENERAL: &[Key] = &[
    hint(
        key("q  Ctrl-C", "quit", &[(C::Char('q'), A::Quit)], Both),
        "q",
        Some("quit"),
        Some("quit"),
    ),
    hint(
        key(
            "?",
            "show or hide this help",
            &[(C::Char('?'), A::Help)],
            Both,
        ),
        "?",
        Some("help"),
        Some("help"),
    ),
    hint(
        key(
            "space  p",
            "pause/resume the display (replay: pause/play)",
            &[(C::Char(' '), A::Pause), (C::Char('p'), A::Pause)],
            Both,
        ),
        "space",
        Some("pause"),
        Some("pause"),
    ),
    hint(
        key(
            "/",
            "filter by any column; Enter keeps it, Esc clears",
            &[(C::Char('/'), A::Filter)],
            Both,
        ),
        "/",
        Some("filter"),
        None,
    ),
    hint(
        key(
            "s  S",
            "sort by last 1m, rate, count, reason, location; S reverses",
            &[(C::Char('s'), A::Sort), (C::Char('S'), A::Reverse)],
            Both,
        ),
        "s/S",
        Some("sort/reverse"),
        None,
    ),
    hint(
        key(
            "b",
            "cycle the grouping, coarser than --by (counts are summed)",
            &[(C::Char('b'), A::Regroup)],
            Both,
        ),
        "b",
        Some("group"),
        None,
    ),
    hint(
        key(
            "Up Down  k j",
            "select a row (stack view: scroll)",
            &[
                (C::Up, A::Up),
                (C::Down, A::Down),
                (C::Char('k'), A::Up),
                (C::Char('j'), A::Down),
            ],
            Both,
        ),
        "Up/Down",
        None,
        Some("scroll"),
    ),
    key(
        "PgUp PgDn",
        "a page up or down",
        &[(C::PageUp, A::PageUp), (C::PageDown, A::PageDown)],
        Both,
    ),
    key(
        "Home End  g G",
        "the top row (kept as rows move) or the last row",
        &[
            (C::Home, A::First),
            (C::End, A::Last),
            (C::Char('g'), A::First),
            (C::Char('G'), A::Last),
        ],
        Both,
    ),
    hint(
        key(
            "Enter",
            "stacks and sampled packets of the selected row",
            &[(C::Enter, A::Stacks)],
            Both,
        ),
        "Enter",
        Some("packets"),
        None,
    ),
    key(
        "a",
        "stacks of every row shown (the filtered set)",
        &[(C::Char('a'), A::AllStacks)],
        Both,
    ),
    hint(
        key(
            "Esc",
            "back to the table; in the table, clear the filter",
            &[(C::Esc, A::Back), (C::Backspace, A::Back)],
            Both,
        ),
        "Esc",
        None,
        Some("back"),
    ),
    hint(
        key(
            "e",
            "explain the selected row's reason and who dropped it",
            &[(C::Char('e'), A::Explain)],
            Both,
        ),
        "e",
        Some("explain"),
        None,
    ),
    hint(
        key(
            "y",
            "copy the row's first check command (OSC 52; printed on exit)",
            &[(C::Char('y'), A::Copy)],
            Both,
        ),
        "y",
        Some("copy"),
        None,
    ),
    hint(
        key(
            "c",
            "kernel drop counters, and drops the probe did not see",
            &[(C::Char('c'), A::Counters)],
            Both,
        ),
        "c",
        Some("counters"),
        None,
    ),
    hint(
        key(
            "L",
            "the drop ledger: every layer's drops, reconciled",
            &[(C::Char('L'), A::Ledger)],
            Both,
        ),
        "L",
        Some("ledger"),
        None,
    ),
    hint(
        key(
            "f",
            "write a flamegraph SVG of the current view",
            &[(C::Char('f'), A::Flamegraph)],
            Both,
        ),
        "f",
        Some("flame"),
        Some("flamegraph"),
    ),
    hint(
        key(
            "r",
            "start or stop recording to a file (live only)",
            &[(C::Char('r'), A::Record)],
            Live,
        ),
        "r",
        Some("record"),
        None,
    ),
];

/// Replay timeline keys.
pub const REPLAY: &[Key] = &[
    hint(
        key(
            "[ ]  Left Right",
            "seek back or forward 10 s",
            &[
                (C::Char('['), A::SeekBack),
                (C::Char(']'), A::SeekForward),
                (C::Left, A::SeekBack),
                (C::Right, A::SeekForward),
            ],
            Replay,
        ),
        "[ ]",
        Some("seek"),
        Some("seek"),
    ),
    key(
        "{ }",
        "seek back or forward 60 s",
        &[
            (C::Char('{'), A::SeekBackLong),
            (C::Char('}'), A::SeekForwardLong),
        ],
        Replay,
    ),
    key(
        "0  $",
        "jump to the start or the end",
        &[(C::Char('0'), A::Start), (C::Char('$'), A::End)],
        Replay,
    ),
    key(
        "t",
        "jump to a typed time: 90s, 03:12, 2026-11-27 03:12 (a history: anywhere in it)",
        &[(C::Char('t'), A::GoTo)],
        Replay,
    ),
    key(
        "v",
        "history: compare the window shown with the same window a typed interval earlier \
         (1h, 1d, 90 = seconds), judged against replay's --budget, rows over it marked; Esc \
         leaves",
        &[(C::Char('v'), A::Compare)],
        Replay,
    ),
    hint(
        key(
            "-  +",
            "halve or double the speed (0.25x to 16x)",
            &[
                (C::Char('-'), A::Slower),
                (C::Char('_'), A::Slower),
                (C::Char('+'), A::Faster),
                (C::Char('='), A::Faster),
            ],
            Replay,
        ),
        "- +",
        Some("speed"),
        None,
    ),
];

/// Every row, general keys first.
pub fn all() -> impl Iterator<Item = &'static Key> {
    GENERAL.iter().chain(REPLAY)
}

/// What `code` does (Ctrl-C is handled before the table: it quits even while typing).
pub fn action(code: KeyCode) -> Option<Action> {
    all()
        .flat_map(|k| k.bind)
        .find(|(c, _)| *c == code)
        .map(|(_, a)| *a)
}

/// Whether `k` does something in `state`'s mode: live or replay, `b` only where a coarser
/// grouping exists, and `v` only in the replay of a history. The footer and the `?` overlay
/// offer only such keys.
pub fn offered(k: &Key, state: &State) -> bool {
    let mode = match k.applies {
        Both => true,
        Live => !state.is_replay(),
        Replay => state.is_replay(),
    };
    let does = |a: Action| k.bind.iter().any(|(_, b)| *b == a);
    mode && (!does(A::Regroup) || state.groupings().len() > 1)
        && (!does(A::Compare) || state.timeline.is_some())
}

/// The footer hints of `state`'s screen (the table or the stack view), for the keys
/// [`offered`] there: in table order, but a replay's timeline keys right after pause/play, so
/// that a narrow footer keeps them. Pause reads "resume" (a replay: "play") while paused.
pub fn hints(state: &State) -> Vec<(&'static str, &'static str)> {
    let stacks = matches!(state.screen, Screen::Stacks(_));
    let hint = |k: &Key| {
        let h = k.hint?;
        let word = if stacks { h.stacks } else { h.table }?;
        let pause = k.bind.iter().any(|(_, a)| *a == A::Pause);
        let word = match (pause && state.paused(), state.is_replay()) {
            (true, true) => "play",
            (true, false) => "resume",
            (false, _) => word,
        };
        Some((h.label, word))
    };
    let offered = |k: &&Key| offered(k, state);
    let mut out: Vec<_> = GENERAL.iter().filter(offered).filter_map(hint).collect();
    let after_pause = GENERAL
        .iter()
        .filter(offered)
        .filter_map(|k| Some((hint(k)?, k)))
        .position(|(_, k)| k.bind.iter().any(|(_, a)| *a == A::Pause))
        .map_or(0, |i| i + 1);
    let timeline: Vec<_> = REPLAY.iter().filter(offered).filter_map(hint).collect();
    out.splice(after_pause..after_pause, timeline);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The key names of a label, as the docs write them (arrows as arrows).
    fn names(label: &str) -> impl Iterator<Item = String> + '_ {
        label.split_whitespace().map(|k| {
            match k {
                "Up" => "↑",
                "Down" => "↓",
                "Left" => "←",
                "Right" => "→",
                k => k,
            }
            .to_string()
        })
    }

    /// The keys of a document's table whose header starts `header` (`| key |`): the backquoted
    /// names in the first column of the rows after the header.
    fn documented_keys(doc: &str, header: &str) -> BTreeSet<String> {
        let mut lines = doc
            .lines()
            .skip_while(|l| !l.to_lowercase().starts_with(header));
        let _header = lines
            .next()
            .unwrap_or_else(|| panic!("the document has a `{header} ... |` table"));
        lines
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .flat_map(|l| {
                let first = l.split('|').nth(1).unwrap_or_default().to_string();
                first
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .flat_map(|k| names(k).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The user guide's key table (`| key | action |`) is the full one.
    #[test]
    fn the_guide_lists_the_same_keys() {
        let table: BTreeSet<String> = all().flat_map(|k| names(k.keys)).collect();
        let guide = documented_keys(include_str!("../../../docs/guide.md"), "| key |");
        assert_eq!(
            table.difference(&guide).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "keys missing from docs/guide.md's key table"
        );
        assert_eq!(
            guide.difference(&table).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "docs/guide.md lists keys the TUI does not have"
        );
    }

    /// README's first-screen table (`| press | to see |`) shows keys the TUI has.
    #[test]
    fn the_readme_shows_keys_the_tui_has() {
        let table: BTreeSet<String> = all().flat_map(|k| names(k.keys)).collect();
        let readme = documented_keys(include_str!("../../../README.md"), "| press |");
        assert!(readme.len() >= 5, "{readme:?}");
        assert_eq!(
            readme.difference(&table).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "README shows keys the TUI does not have"
        );
    }

    #[test]
    fn every_code_means_one_thing() {
        let codes: Vec<KeyCode> = all().flat_map(|k| k.bind).map(|(c, _)| *c).collect();
        let distinct: BTreeSet<String> = codes.iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(codes.len(), distinct.len());
        assert_eq!(action(KeyCode::Char('q')), Some(Action::Quit));
        assert_eq!(action(KeyCode::Char('=')), Some(Action::Faster));
        assert_eq!(action(KeyCode::Char('x')), None);
    }

    #[test]
    fn replay_keys_apply_to_replay_and_record_to_live() {
        assert!(REPLAY.iter().all(|k| k.applies == Applies::Replay));
        let r = GENERAL.iter().find(|k| k.keys == "r").expect("an r row");
        assert_eq!(r.applies, Applies::Live);
    }
}
