//! Everything the screen shows, and nothing else: the view is a pure function of [`State`].
use std::time::{Duration, Instant};

use crate::{
    ledger::KernelView,
    model::group::{self as select, Dim},
    model::{
        DropKey, Sample, SessionInfo, StackCount,
        stacks::{StackTree, TreeLine},
        table::{Row, SortKey, Tracker, matches},
    },
    source::ReplayStatus,
    vocab::packet,
};

/// The coarser groupings `b` offers after the finest one (each where the finest has all of
/// its dimensions).
const COARSER: &[&[Dim]] = &[
    &[Dim::Reason, Dim::Location],
    &[Dim::Reason],
    &[Dim::Netns],
    &[Dim::Netns, Dim::Device],
    &[Dim::Protocol],
    &[Dim::Culprit],
];

/// The groupings `b` cycles through for counts keyed by `finest`: `finest` first, then each
/// coarser grouping it can be merged into.
pub fn groupings(finest: &[Dim]) -> Vec<Vec<Dim>> {
    // An interface is always keyed with its namespace.
    let has = |d: Dim| finest.contains(&d) || (d == Dim::Netns && finest.contains(&Dim::Device));
    let mut out = vec![finest.to_vec()];
    for level in COARSER {
        let mut sorted = finest.to_vec();
        sorted.sort();
        if level.iter().all(|d| has(*d)) && level.to_vec() != sorted {
            out.push(level.to_vec());
        }
    }
    out
}

/// Which main screen is shown.
#[derive(Clone, Debug, PartialEq)]
pub enum Screen {
    /// The table of drops.
    Table,
    /// The stacks of one row or of the filtered set (boxed: a view holds a whole key).
    Stacks(Box<StackView>),
}

/// The panel under the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panel {
    /// The selected row's entry of the reason guide.
    Explain,
    /// The kernel's drop counters and the drops the probe did not see.
    Counters,
    /// The drop ledger: every layer's drops reconciled with the probe's.
    Ledger,
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
            // Stacks are weighed per key: a row shows the stacks of the keys it covers, never
            // another namespace's or interface's.
            Self::Row(k) => crate::model::group::covers(k, &s.key),
            Self::Set(f) => matches(&s.key, f),
        }
    }

    /// A one-line description: the key (with its attribution), or the filter.
    pub fn describe(&self) -> String {
        match self {
            Self::Row(k) => {
                let a = &k.attr;
                let mut out = format!("{} @ {}", k.reason.name, k.location);
                let netns = (a.netns_name.as_deref().map(str::to_string))
                    .or_else(|| a.netns.map(|n| n.to_string()));
                for part in [
                    netns.map(|n| format!("netns {n}")),
                    a.device.as_deref().map(|d| format!("device {d}")),
                    a.protocol.as_deref().map(str::to_string),
                    a.port.map(|p| format!("port {p}")),
                ]
                .into_iter()
                .flatten()
                {
                    out.push_str(", ");
                    out.push_str(&part);
                }
                out
            }
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
    /// The row's sampled packets, oldest first (none for a set, or where none were kept).
    pub packets: Vec<Sample>,
    /// The row's socket line (`socket: nginx[812] udp 0.0.0.0:53 ...`), as found now.
    pub socket: Option<String>,
}

impl StackView {
    /// Builds the view of `scope` from what `tracker` shows now, grouped by `by` (`None`: as
    /// counted), keeping `scroll` in range.
    pub fn build(scope: StackScope, tracker: &Tracker, by: Option<&[Dim]>, scroll: usize) -> Self {
        let stacks = tracker.latest().map_or(&[][..], |s| &s.stacks[..]);
        let tree = StackTree::build(stacks.iter().filter(|s| scope.contains(s)));
        let mut packets = Vec::new();
        if let (StackScope::Row(k), Some(snap)) = (&scope, tracker.latest()) {
            for s in &snap.samples {
                if by.map_or(s.key == *k, |by| select::coarser(&s.key, by) == *k) {
                    packets.extend(s.packets.iter().cloned());
                }
            }
            packets.sort_by_key(|p| p.unix_ms);
            packets.truncate(packet::PER_KEY);
        }
        let mut socket = None;
        let exact = match &scope {
            StackScope::Row(k) => {
                let rows = tracker.grouped_rows(SortKey::Count, "", by, true);
                let row = rows.iter().find(|r| *r.key == *k);
                // The row's key as shown now: what was found of its socket since Enter.
                socket = row
                    .and_then(|r| r.key.attr.socket.as_ref())
                    .map(|s| s.describe(crate::model::socket::buffer_reason(&k.reason.name)));
                row.map_or(0, |r| r.count)
            }
            // The stacks are the probe's: a program's verdicts (no stacks) are not in a set's
            // count.
            StackScope::Set(f) => tracker
                .grouped_rows(SortKey::Count, f, None, false)
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
            packets,
            socket,
        }
    }
}

/// The comparison of the window shown with the same window an interval earlier (`v`).
#[derive(Clone, Debug, PartialEq)]
pub struct CompareView {
    /// The two windows compared, key by key.
    pub compared: crate::history::compare::Compared,
    /// First row shown.
    pub scroll: usize,
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
    /// Whether the order of `sort` is reversed (`S`).
    pub reverse: bool,
    /// Text filter over reason and location.
    pub filter: String,
    /// Whether the filter is being typed.
    pub editing: bool,
    /// The selected row's key.
    pub selected: Option<DropKey>,
    /// Whether the user chose the selected row: it then follows its key as rows move.
    /// Otherwise the selection is the top row, whichever key that is.
    pub pinned: bool,
    /// First table row shown.
    pub scroll: usize,
    /// Table or stacks.
    pub screen: Screen,
    /// Whether the help overlay is open.
    pub help: bool,
    /// A message for the status line (e.g. where a flamegraph was written).
    pub status: Option<String>,
    /// Warnings raised while the screen is shown: how many in all, and the last few
    /// ([`super::warnings`]).
    pub warnings: (u64, Vec<String>),
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
    /// The reading `kernel` was made from.
    pub kernel_reading: Option<std::sync::Arc<crate::model::KernelReading>>,
    /// The drop filters in force, described (shown in the header).
    pub filters: Option<String>,
    /// A time being typed to jump to (`t` in replay).
    pub goto: Option<String>,
    /// Replaying a history: its timeline strip.
    pub timeline: Option<crate::history::timeline::Timeline>,
    /// An interval being typed to compare the window shown with (`v` in a history's replay).
    pub compare_typed: Option<String>,
    /// The comparison shown in place of the table, until Esc.
    pub compare: Option<CompareView>,
    /// The grouping the counts come in (`--by`); empty: as found in the data (replay).
    pub by: Vec<Dim>,
    /// Which of [`State::groupings`] the table shows (0: as counted).
    pub grouping: usize,
    /// How a shell enters each namespace explained so far (live only; see
    /// [`crate::explain::fill::way_in`]).
    pub ways: std::collections::BTreeMap<u64, crate::explain::fill::Way>,
    /// The command copied last (`y`), printed again on exit.
    pub copied: Option<String>,
    /// Who dropped each attributed row, as of the latest kernel reading (see
    /// [`crate::culprit`]).
    pub culprits: std::collections::HashMap<DropKey, crate::culprit::Culprit>,
}

impl State {
    /// The state before any snapshot. `replay` is the replay's status when replaying.
    pub fn new(info: SessionInfo, replay: Option<ReplayStatus>, size: (u16, u16)) -> Self {
        Self {
            info,
            tracker: Tracker::new(),
            frozen: None,
            sort: SortKey::default(),
            reverse: false,
            filter: String::new(),
            editing: false,
            selected: None,
            pinned: false,
            scroll: 0,
            screen: Screen::Table,
            help: false,
            status: None,
            warnings: (0, Vec::new()),
            replay,
            recording: None,
            size,
            snapshot_at: None,
            now: None,
            panel: None,
            kernel: None,
            kernel_reading: None,
            filters: None,
            goto: None,
            timeline: None,
            compare_typed: None,
            compare: None,
            by: Vec::new(),
            grouping: 0,
            ways: Default::default(),
            copied: None,
            culprits: Default::default(),
        }
    }

    /// Replaying a history, the replay moved to another window (a jump with `t`): the counts,
    /// rates and kernel reading start again from the new window's; what the screen shows (panel,
    /// sort, filter, selection, grouping) stays.
    pub fn jumped(
        &mut self,
        info: SessionInfo,
        replay: ReplayStatus,
        timeline: crate::history::timeline::Timeline,
    ) {
        self.info = info;
        self.tracker = Tracker::new();
        self.frozen = None;
        self.replay = Some(replay);
        self.timeline = Some(timeline);
        self.kernel = None;
        self.kernel_reading = None;
        self.culprits.clear();
        self.compare = None;
        self.snapshot_at = None;
    }

    /// What the guide's checks for `key` are filled in with: its device and port, and the way
    /// into its namespace as found live (`nsenter` with a `PID` to fill in where none was), or
    /// in a replay as the recording names it (`ip netns exec NAME`, as `report --input` fills
    /// them: [`crate::explain::fill::Origin::Recorded`]).
    pub fn check_target<'a>(&self, key: &'a DropKey) -> crate::explain::fill::Target<'a> {
        use crate::explain::fill::{Origin, Target, Way, Ways};
        let initial = self.kernel.as_ref().map(|k| k.initial_netns);
        if self.is_replay() {
            return Ways::new(initial, Origin::Recorded).target(key);
        }
        let way = match key.attr.netns {
            None => Way::Here,
            Some(ns) if Some(ns) == initial => Way::Here,
            Some(ns) => self.ways.get(&ns).cloned().unwrap_or(Way::Unknown),
        };
        Target {
            way,
            device: key.attr.device.as_deref(),
            port: key.attr.port,
        }
    }

    /// The selected row's first check command, filled in (what `y` copies).
    pub fn check_command(&self) -> Option<String> {
        let key = self.selected.as_ref()?;
        let e = crate::explain::Guide::builtin().explain(&key.reason.name);
        crate::explain::fill::first_command(e.check, &self.check_target(key))
    }

    /// The finest grouping: `--by`, or in a replay the dimensions the shown counts have.
    pub fn finest(&self) -> Vec<Dim> {
        if !self.by.is_empty() {
            return self.by.clone();
        }
        let mut dims = vec![Dim::Reason, Dim::Location];
        let drops = self.shown().latest().map_or(&[][..], |s| &s.drops[..]);
        let attr = |d: Dim| {
            drops.iter().any(|c| {
                let a = &c.key.attr;
                match d {
                    Dim::Netns => a.netns.is_some() || a.netns_name.is_some(),
                    Dim::Device => a.device.is_some(),
                    Dim::Protocol => a.protocol.is_some(),
                    Dim::Port => a.port.is_some(),
                    Dim::Socket => a.socket.is_some(),
                    Dim::Culprit => a.culprit.is_some(),
                    Dim::Reason | Dim::Location => true,
                }
            })
        };
        dims.extend(
            [
                Dim::Netns,
                Dim::Device,
                Dim::Protocol,
                Dim::Port,
                Dim::Socket,
                Dim::Culprit,
            ]
            .into_iter()
            .filter(|d| attr(*d)),
        );
        dims
    }

    /// The groupings `b` cycles through, the finest first.
    pub fn groupings(&self) -> Vec<Vec<Dim>> {
        groupings(&self.finest())
    }

    /// The grouping shown: its dimensions, and whether it is coarser than the counts.
    pub fn grouping_dims(&self) -> (Vec<Dim>, bool) {
        let mut all = self.groupings();
        let i = self.grouping.min(all.len() - 1);
        (all.swap_remove(i), i > 0)
    }

    /// The regrouping to apply to the counts (`None`: shown as counted).
    pub fn regrouping(&self) -> Option<Vec<Dim>> {
        let (dims, coarser) = self.grouping_dims();
        coarser.then_some(dims)
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

    /// The table rows on screen, filtered and sorted (the other way round when reversed).
    pub fn rows(&self) -> Vec<Row<'_>> {
        let by = self.regrouping();
        // Drop filters are the probe's: the programs' verdicts are not filtered, so neither
        // shown nor in the shares' whole (as `report` does).
        let mut rows = (self.shown()).grouped_rows(
            self.sort,
            &self.filter,
            by.as_deref(),
            self.filters.is_none(),
        );
        if self.reverse {
            rows.reverse();
        }
        rows
    }

    /// Why the text filter finds nothing, when it names a dimension the counts lack (a port
    /// while ports are not counted): `None` otherwise, or before any drop of a replay (whose
    /// dimensions are not known yet).
    pub fn uncounted_filter(&self) -> Option<crate::model::group::MissingDim> {
        let no_drops = self.shown().latest().is_none_or(|s| s.drops.is_empty());
        if self.by.is_empty() && no_drops {
            return None;
        }
        crate::model::table::uncounted(&self.filter, &self.finest())
    }

    /// Whether the table is in descending order: highest number first (the default for the
    /// last minute's drops, rate and count), or names Z to A (reversed).
    pub fn descending(&self) -> bool {
        self.sort.descending() != self.reverse
    }

    /// The interval the rates are over: the time between the last two snapshots shown.
    pub fn rate_window(&self) -> Option<Duration> {
        self.shown().interval()
    }

    /// Index of the selected row in `rows`.
    pub fn selected_index(&self, rows: &[Row<'_>]) -> Option<usize> {
        let key = self.selected.as_ref()?;
        rows.iter().position(|r| *r.key == *key)
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
