//! Every key the TUI understands, for the `?` overlay.

/// A group of keys and what they do.
pub struct KeyHelp {
    /// The keys, as the user types them.
    pub keys: &'static str,
    /// What they do.
    pub action: &'static str,
}

const fn k(keys: &'static str, action: &'static str) -> KeyHelp {
    KeyHelp { keys, action }
}

/// Keys that work everywhere.
pub const GENERAL: &[KeyHelp] = &[
    k("q  Ctrl-C", "quit"),
    k("?", "show or hide this help"),
    k("space  p", "pause/resume the display (replay: pause/play)"),
    k(
        "/",
        "filter by reason or location; Enter keeps it, Esc clears",
    ),
    k("s", "cycle the sort: rate, count, reason, location"),
    k(
        "b",
        "cycle the grouping, coarser than --by (counts are summed)",
    ),
    k("Up Down  k j", "select a row (stack view: scroll)"),
    k("PgUp PgDn", "a page up or down"),
    k("Home End  g G", "first or last row"),
    k("Enter", "stacks and sampled packets of the selected row"),
    k("a", "stacks of every row shown (the filtered set)"),
    k("Esc", "back to the table; in the table, clear the filter"),
    k("e", "explain the selected row's reason (the reason guide)"),
    k("c", "kernel drop counters, and drops the probe did not see"),
    k("f", "write a flamegraph SVG of the current view"),
    k("r", "start or stop recording to a file (live only)"),
];

/// Replay timeline keys.
pub const REPLAY: &[KeyHelp] = &[
    k("[ ]  Left Right", "seek back or forward 10 s"),
    k("{ }", "seek back or forward 60 s"),
    k("0  $", "jump to the start or the end"),
    k("-  +", "halve or double the speed (0.25x to 16x)"),
];

/// Width of the keys column in the overlay.
pub const KEYS_WIDTH: usize = 16;
