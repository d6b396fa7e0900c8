//! Everything the screen shows, and nothing else: the view is a pure function of [`State`].
use std::time::{Duration, Instant};

use crate::{
    kcounters::KernelView,
    model::{
        DropKey, SessionInfo, StackCount,
        stacks::{StackTree, TreeLine},
        table::{Row, SortKey, Tracker, matches},
    },
    source::ReplayStatus,
};

/// Which main screen is shown.
#[derive(Clone, Debug, PartialEq)]
pub enum Screen {
    /// The table of drops.
    Table,
    /// The stacks of one row or of the filtered set.
    Stacks(StackView),
}

/// The panel under the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panel {
    /// The selected row's entry of the reason guide.
    Explain,
    /// The kernel's drop counters and the drops the probe did not see.
    Counters,
}

/// Whose stacks the stack view shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackScope {
    /// One (reason, location) key.
    Row(DropKey),
    /// Every key that passes this filter (empty: all keys).
    Set(String),
}

impl StackScope {
    /// Whether a stack belongs to this scope.
    pub fn contains(&self, s: &StackCount) -> bool {
        match self {
            // Stacks are sampled per (reason, location): a row of one namespace, interface
            // or protocol shows the stacks of its reason and location ("*": merged away).
            Self::Row(k) => {
                (&*k.reason.name == "*" || s.key.reason == k.reason)
                    && (&*k.location == "*" || s.key.location == k.location)
            }
            Self::Set(f) => matches(&s.key, f),
        }
    }

    /// A one-line description: the key, or the filter.
    pub fn describe(&self) -> String {
        match self {
            Self::Row(k) => format!("{} @ {}", k.reason.name, k.location),
            Self::Set(f) if f.is_empty() => "all drops".into(),
            Self::Set(f) => format!("filter \"{f}\""),
        }
    }
}

/// The stack view: a tree computed from the shown snapshot when it changes.
#[derive(Clone, Debug, PartialEq)]
pub struct StackView {
    /// Whose stacks.
    pub scope: StackScope,
    /// The tree, flattened.
    pub lines: Vec<TreeLine>,
    /// Estimated drops of the scope (a sampled estimate).
    pub estimated: u64,
    /// Stack samples of the scope.
    pub samples: u64,
    /// Exact count of the scope.
    pub exact: u64,
    /// First line shown.
    pub scroll: usize,
}

impl StackView {
    /// Builds the view of `scope` from what `tracker` shows now, keeping `scroll` in range.
    pub fn build(scope: StackScope, tracker: &Tracker, scroll: usize) -> Self {
        let stacks = tracker.latest().map_or(&[][..], |s| &s.stacks[..]);
        let tree = StackTree::build(stacks.iter().filter(|s| scope.contains(s)));
        let exact = match &scope {
            StackScope::Row(k) => tracker
                .latest()
                .and_then(|s| s.drops.iter().find(|d| d.key == *k))
                .map_or(0, |d| d.count),
            StackScope::Set(f) => tracker
                .rows(SortKey::Count, f)
                .iter()
                .map(|r| r.count)
                .sum(),
        };
        let lines = tree.lines();
        Self {
            scroll: scroll.min(lines.len().saturating_sub(1)),
            scope,
            estimated: tree.total_weight(),
            samples: tree.total_samples(),
            exact,
            lines,
        }
    }
}

/// The file being recorded, for the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordingStatus {
    /// File name (without directory).
    pub name: String,
    /// Bytes written so far.
    pub bytes: u64,
}

/// The whole state of the TUI.
#[derive(Clone, Debug)]
pub struct State {
    /// The session being watched.
    pub info: SessionInfo,
    /// Counts, rates and trends, always up to date.
    pub tracker: Tracker,
    /// What is shown while the live display is paused.
    pub frozen: Option<Box<Tracker>>,
    /// Table order.
    pub sort: SortKey,
    /// Text filter over reason and location.
    pub filter: String,
    /// Whether the filter is being typed.
    pub editing: bool,
    /// The selected row's key.
    pub selected: Option<DropKey>,
    /// First table row shown.
    pub scroll: usize,
    /// Table or stacks.
    pub screen: Screen,
    /// Whether the help overlay is open.
    pub help: bool,
    /// A message for the status line (e.g. where a flamegraph was written).
    pub status: Option<String>,
    /// The replay timeline, when replaying.
    pub replay: Option<ReplayStatus>,
    /// The recording in progress, if any.
    pub recording: Option<RecordingStatus>,
    /// Terminal size (columns, rows).
    pub size: (u16, u16),
    /// When the latest snapshot arrived.
    pub snapshot_at: Option<Instant>,
    /// The time of the latest clock tick or snapshot.
    pub now: Option<Instant>,
    /// The panel open under the table, if any.
    pub panel: Option<Panel>,
    /// The kernel's drop counters over the session (live only).
    pub kernel: Option<KernelView>,
}

impl State {
    /// The state before any snapshot. `replay` is the replay's status when replaying.
    pub fn new(info: SessionInfo, replay: Option<ReplayStatus>, size: (u16, u16)) -> Self {
        Self {
            info,
            tracker: Tracker::new(),
            frozen: None,
            sort: SortKey::default(),
            filter: String::new(),
            editing: false,
            selected: None,
            scroll: 0,
            screen: Screen::Table,
            help: false,
            status: None,
            replay,
            recording: None,
            size,
            snapshot_at: None,
            now: None,
            panel: None,
            kernel: None,
        }
    }

    /// Whether this is a replay of a recording.
    pub fn is_replay(&self) -> bool {
        self.replay.is_some()
    }

    /// Whether the display is paused (live: frozen; replay: the timeline is paused).
    pub fn paused(&self) -> bool {
        match &self.replay {
            Some(r) => r.paused,
            None => self.frozen.is_some(),
        }
    }

    /// The tracker whose numbers are on screen.
    pub fn shown(&self) -> &Tracker {
        self.frozen.as_deref().unwrap_or(&self.tracker)
    }

    /// The table rows on screen, filtered and sorted.
    pub fn rows(&self) -> Vec<Row<'_>> {
        self.shown().rows(self.sort, &self.filter)
    }

    /// Index of the selected row in `rows`.
    pub fn selected_index(&self, rows: &[Row<'_>]) -> Option<usize> {
        let key = self.selected.as_ref()?;
        rows.iter().position(|r| r.key == key)
    }

    /// Session time on screen: the shown snapshot's, advanced by the clock while live and
    /// running.
    pub fn elapsed(&self) -> Duration {
        let base = self.shown().latest().map_or(Duration::ZERO, |s| s.elapsed);
        if self.is_replay() || self.frozen.is_some() {
            return base;
        }
        match (self.snapshot_at, self.now) {
            (Some(at), Some(now)) => base + now.saturating_duration_since(at),
            _ => base,
        }
    }

    /// Whether the header clock needs ticking (live, running, with data).
    pub fn clock_running(&self) -> bool {
        !self.is_replay() && self.frozen.is_none() && self.snapshot_at.is_some()
    }
}
