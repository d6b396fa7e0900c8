//! Messages and the update function: how each key, snapshot and tick changes the [`State`],
//! and which side effects (quit, replay commands, flamegraph, recording) it asks for.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::{
    keys::{self, Action},
    state::{CompareView, Panel, RecordingStatus, Screen, StackScope, StackView, State},
    view,
};
use crate::{
    model::group::{self as select, Dim},
    model::{Snapshot, StackCount},
    source::{ReplayCommand, ReplayStatus},
};

/// Something that happened.
#[derive(Clone, Debug)]
pub enum Msg {
    /// A key was pressed.
    Key(KeyEvent),
    /// The terminal was resized to (columns, rows).
    Resize(u16, u16),
    /// A snapshot arrived at this instant.
    Snapshot(Box<Snapshot>, Instant),
    /// The clock ticked.
    Tick(Instant),
    /// The replay moved on its timeline.
    Replay(ReplayStatus),
    /// The recording started, grew or stopped.
    Recording(Option<RecordingStatus>),
    /// A message for the status line.
    Status(String),
    /// The comparison `v` asked for, or why there is none.
    Compared(Box<Result<crate::history::compare::Compared, String>>),
}

/// A flamegraph to write: the stacks of the current view.
#[derive(Clone, Debug, PartialEq)]
pub struct FlameRequest {
    /// The stacks (cumulative since the session started).
    pub stacks: Vec<StackCount>,
    /// The time window, relative to the session start.
    pub window: (Duration, Duration),
    /// What the view is restricted to (the filter or the row), for the title.
    pub filter: Option<String>,
}

/// A side effect for the event loop to perform.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Leave the TUI.
    Quit,
    /// Send a command to the replay.
    Replay(ReplayCommand),
    /// Write a flamegraph SVG.
    Flamegraph(FlameRequest),
    /// Start recording if not recording, else stop.
    ToggleRecording,
    /// Put this command on the clipboard (OSC 52 to the terminal).
    Copy(String),
    /// Replay the window of the history around this wall time (ms since the epoch): a jump
    /// past the window replayed.
    Jump(u64),
    /// Compare this window of the history with the same window `vs` earlier.
    Compare {
        /// The window shown.
        now: crate::history::range::Window,
        /// How much earlier the other window is.
        vs: Duration,
    },
}

/// Seek steps of the replay keys, in seconds.
const SEEK_SHORT: f64 = 10.0;
const SEEK_LONG: f64 = 60.0;
/// Replay speed bounds.
const SPEED_MIN: f64 = 0.25;
const SPEED_MAX: f64 = 16.0;

/// Applies `msg` to `state`; returns the side effect it asks for, if any.
pub fn update(state: &mut State, msg: Msg) -> Option<Effect> {
    match msg {
        Msg::Key(key) => return on_key(state, key),
        Msg::Resize(w, h) => {
            state.size = (w, h);
            fix_selection(state);
            fix_stack_scroll(state);
        }
        Msg::Snapshot(snap, at) => {
            // A new reading of the kernel's counters is matched with the snapshot that
            // carries it (taken after it: the same span or more) once, not on every snapshot.
            if let Some(r) = &snap.kernel
                && state
                    .kernel_reading
                    .as_ref()
                    .is_none_or(|o| !Arc::ptr_eq(o, r))
            {
                state.kernel = Some(crate::ledger::view(r, &snap, state.filters.clone()));
                state.kernel_reading = Some(r.clone());
                state.culprits = crate::culprit::culprits(&snap);
            } else if snap.drops.iter().any(|d| d.key.attr.culprit.is_some()) {
                // Rows grouped by culprit carry it, derived per snapshot.
                state.culprits = crate::culprit::culprits(&snap);
            } else {
                // A socket's holders are found beside the readings, as they come.
                state
                    .culprits
                    .extend(crate::culprit::sockets::culprits(&snap));
            }
            state.tracker.push(*snap);
            state.snapshot_at = Some(at);
            state.now = Some(at);
            if state.frozen.is_none() {
                refresh(state);
            }
        }
        Msg::Tick(now) => state.now = Some(now),
        Msg::Replay(status) => state.replay = Some(status),
        Msg::Recording(r) => state.recording = r,
        Msg::Status(s) => state.status = Some(s),
        Msg::Compared(result) => match *result {
            Ok(compared) => {
                state.status = None;
                state.screen = Screen::Table;
                state.compare = Some(CompareView {
                    compared,
                    scroll: 0,
                });
            }
            Err(e) => state.status = Some(format!("no comparison: {e}")),
        },
    }
    None
}

/// Recomputes what depends on the shown numbers: the selection and the stack view.
fn refresh(state: &mut State) {
    fix_selection(state);
    if let Screen::Stacks(v) = &state.screen {
        let by = state.regrouping();
        let view = StackView::build(v.scope.clone(), state.shown(), by.as_deref(), v.scroll);
        state.screen = Screen::Stacks(Box::new(view));
        fix_stack_scroll(state);
    }
}

/// Keeps the selection on a shown row and in sight: the row the user chose, wherever its key
/// moved; else (or once it is gone) the top row.
fn fix_selection(state: &mut State) {
    let rows = state.rows();
    let chosen = state.pinned.then(|| state.selected_index(&rows)).flatten();
    let index = chosen.or((!rows.is_empty()).then_some(0));
    let key = index.map(|i| rows[i].key.clone().into_owned());
    let len = rows.len();
    drop(rows);
    state.pinned = chosen.is_some();
    state.selected = key;
    let page = view::table_page(state);
    let mut scroll = state.scroll.min(len.saturating_sub(page));
    if let Some(i) = index {
        scroll = scroll.min(i).max((i + 1).saturating_sub(page));
    }
    state.scroll = scroll;
}

fn fix_stack_scroll(state: &mut State) {
    let page = view::stack_page(state);
    if let Screen::Stacks(v) = &mut state.screen {
        v.scroll = v.scroll.min(v.lines.len().saturating_sub(page));
    }
}

/// Moves the selection by `delta` rows (clamped to the table); the row reached is the user's
/// choice, followed as rows move.
fn move_selection(state: &mut State, delta: isize) {
    let rows = state.rows();
    if rows.is_empty() {
        return;
    }
    let cur = state.selected_index(&rows).unwrap_or(0);
    let next = cur.saturating_add_signed(delta).min(rows.len() - 1);
    let key = rows[next].key.clone().into_owned();
    drop(rows);
    state.selected = Some(key);
    state.pinned = true;
    fix_selection(state);
}

fn scroll_stacks(state: &mut State, delta: isize) {
    if let Screen::Stacks(v) = &mut state.screen {
        v.scroll = v.scroll.saturating_add_signed(delta);
    }
    fix_stack_scroll(state);
}

/// Moves by `delta` lines in whichever screen is shown.
fn step(state: &mut State, delta: isize) {
    if let (Some(c), Screen::Table) = (&mut state.compare, &state.screen) {
        let last = c.compared.comparison.rows.len().saturating_sub(1);
        c.scroll = c.scroll.saturating_add_signed(delta).min(last);
        return;
    }
    match state.screen {
        Screen::Table => move_selection(state, delta),
        Screen::Stacks(_) => scroll_stacks(state, delta),
    }
}

fn open_stacks(state: &mut State, scope: StackScope) {
    let by = state.regrouping();
    state.screen = Screen::Stacks(Box::new(StackView::build(
        scope,
        state.shown(),
        by.as_deref(),
        0,
    )));
}

/// Shows the next coarser grouping (after the coarsest, the counts as counted again). The
/// selection moves to the row holding (or held by) the selected one.
fn cycle_grouping(state: &mut State) {
    let (old, _) = state.grouping_dims();
    let levels = state.groupings().len();
    state.grouping = (state.grouping.min(levels - 1) + 1) % levels;
    let (new, _) = state.grouping_dims();
    state.screen = Screen::Table;
    if let Some(sel) = state.selected.take() {
        let common: Vec<Dim> = old.iter().filter(|d| new.contains(d)).copied().collect();
        let want = select::coarser(&sel, &common);
        let rows = state.rows();
        let key = rows
            .iter()
            .find(|r| select::coarser(&r.key, &common) == want)
            .map(|r| r.key.clone().into_owned());
        drop(rows);
        state.selected = key;
    }
    fix_selection(state);
}

/// Opens `panel` under the table (closing it if open); the table gets fewer rows.
fn toggle_panel(state: &mut State, panel: Panel) {
    state.panel = (state.panel != Some(panel)).then_some(panel);
    state.screen = Screen::Table;
    fix_selection(state);
}

fn toggle_pause(state: &mut State) -> Option<Effect> {
    if let Some(r) = &mut state.replay {
        r.paused = !r.paused;
        return Some(Effect::Replay(ReplayCommand::TogglePause));
    }
    state.frozen = match state.frozen.take() {
        Some(_) => None,
        None => Some(Box::new(state.tracker.clone())),
    };
    refresh(state);
    None
}

fn flamegraph(state: &mut State) -> Option<Effect> {
    let Some(snap) = state.shown().latest() else {
        state.status = Some("no counts yet: nothing to draw".into());
        return None;
    };
    let (scope, filter) = match &state.screen {
        Screen::Stacks(v) => (v.scope.clone(), Some(v.scope.describe())),
        Screen::Table => {
            let f = (!state.filter.is_empty()).then(|| format!("filter \"{}\"", state.filter));
            (StackScope::Set(state.filter.clone()), f)
        }
    };
    let stacks: Vec<StackCount> = snap
        .stacks
        .iter()
        .filter(|s| scope.contains(s))
        .cloned()
        .collect();
    // Function names without offsets, as `dropscope flamegraph` draws them by default.
    let stacks = crate::flamegraph::without_offsets(&stacks);
    let window = (Duration::ZERO, snap.elapsed);
    state.status = Some("writing flamegraph...".into());
    Some(Effect::Flamegraph(FlameRequest {
        stacks,
        window,
        filter,
    }))
}

fn replay_key(state: &mut State, action: Action) -> Option<Effect> {
    let r = state.replay.as_mut()?;
    let cmd = match action {
        Action::SeekBack => ReplayCommand::SeekBy(-SEEK_SHORT),
        Action::SeekForward => ReplayCommand::SeekBy(SEEK_SHORT),
        Action::SeekBackLong => ReplayCommand::SeekBy(-SEEK_LONG),
        Action::SeekForwardLong => ReplayCommand::SeekBy(SEEK_LONG),
        Action::Start => ReplayCommand::Start,
        Action::End => ReplayCommand::End,
        Action::Faster | Action::Slower => {
            let cur = if r.speed > 0.0 { r.speed } else { 1.0 };
            let next = if action == Action::Faster {
                cur * 2.0
            } else {
                cur / 2.0
            };
            r.speed = next.clamp(SPEED_MIN, SPEED_MAX);
            ReplayCommand::Speed(r.speed)
        }
        _ => return None,
    };
    Some(Effect::Replay(cmd))
}

fn on_filter_key(state: &mut State, key: KeyEvent) {
    match key.code {
        KeyCode::Enter => state.editing = false,
        KeyCode::Esc => {
            state.editing = false;
            state.filter.clear();
        }
        KeyCode::Backspace => {
            state.filter.pop();
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            state.filter.push(c);
        }
        _ => {}
    }
    fix_selection(state);
}

fn on_key(state: &mut State, key: KeyEvent) -> Option<Effect> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c' | 'C')) {
        return Some(Effect::Quit);
    }
    if state.editing {
        on_filter_key(state, key);
        return None;
    }
    if state.goto.is_some() {
        return on_goto_key(state, key);
    }
    if state.compare_typed.is_some() {
        return on_compare_key(state, key);
    }
    if state.help {
        state.help = false;
        return (key.code == KeyCode::Char('q')).then_some(Effect::Quit);
    }
    state.status = None;
    let page = match state.screen {
        Screen::Table => view::table_page(state),
        Screen::Stacks(_) => view::stack_page(state),
    } as isize;
    let action = keys::action(key.code)?;
    match action {
        Action::Quit => return Some(Effect::Quit),
        Action::Help => state.help = true,
        Action::Pause => return toggle_pause(state),
        Action::Filter => {
            state.screen = Screen::Table;
            state.editing = true;
        }
        Action::Sort => {
            state.sort = state.sort.next();
            fix_selection(state);
        }
        Action::Reverse => {
            state.reverse = !state.reverse;
            fix_selection(state);
        }
        Action::Flamegraph => return flamegraph(state),
        Action::Explain => toggle_panel(state, Panel::Explain),
        Action::Copy => match state.check_command() {
            Some(c) => {
                state.status = Some(format!(
                    "copied (printed again on exit): {}",
                    crate::sanitize::terminal(&c)
                ));
                state.copied = Some(c.clone());
                return Some(Effect::Copy(c));
            }
            None => state.status = Some("no command to copy: select a row with checks".into()),
        },
        Action::Counters => toggle_panel(state, Panel::Counters),
        Action::Ledger => toggle_panel(state, Panel::Ledger),
        Action::Record if state.is_replay() => {
            state.status = Some("recording works live only: this is already a recording".into());
        }
        Action::Record => return Some(Effect::ToggleRecording),
        Action::Up => step(state, -1),
        Action::Down => step(state, 1),
        Action::PageUp => step(state, -page),
        Action::PageDown => step(state, page),
        Action::First if matches!(state.screen, Screen::Table) => {
            // The top row again, whichever key comes to it.
            state.pinned = false;
            fix_selection(state);
        }
        Action::First => step(state, isize::MIN),
        Action::Last => step(state, isize::MAX),
        Action::Stacks if matches!(state.screen, Screen::Table) => {
            let scope = match &state.selected {
                Some(k) => StackScope::Row(k.clone()),
                None => StackScope::Set(state.filter.clone()),
            };
            open_stacks(state, scope);
        }
        Action::Stacks => {}
        Action::AllStacks => open_stacks(state, StackScope::Set(state.filter.clone())),
        Action::Back if state.compare.is_some() && matches!(state.screen, Screen::Table) => {
            state.compare = None;
        }
        Action::Back if !matches!(state.screen, Screen::Table) => {
            state.screen = Screen::Table;
            fix_selection(state);
        }
        Action::Back if key.code == KeyCode::Esc => {
            state.filter.clear();
            fix_selection(state);
        }
        Action::Back => {}
        Action::Regroup => cycle_grouping(state),
        Action::SeekBack
        | Action::SeekForward
        | Action::SeekBackLong
        | Action::SeekForwardLong
        | Action::Start
        | Action::End
        | Action::Slower
        | Action::Faster => return replay_key(state, action),
        Action::GoTo if state.replay.is_some() => state.goto = Some(String::new()),
        Action::GoTo => {}
        Action::Compare if state.timeline.is_some() => state.compare_typed = Some(String::new()),
        Action::Compare => {
            state.status = Some(
                "v compares a history's windows: replay a history directory (replay DIR)".into(),
            );
        }
    }
    None
}

/// Whether wall time `ms` lies outside the stretch of history replayed (another session, or a
/// gap), where a seek on this session's clock would land on the wrong snapshot.
fn outside_replay(state: &State, ms: u64) -> bool {
    let (Some(t), Some(r)) = (&state.timeline, &state.replay) else {
        return false;
    };
    ms < t.replay_from_ms || ms > t.wall_ms(r.duration)
}

/// What `t` says of a time outside the whole history.
fn outside_message(t: &crate::history::timeline::Timeline, ms: u64) -> String {
    use crate::history::when::local;
    format!(
        "{} is outside the history ({} – {})",
        local(ms),
        local(t.from_ms),
        local(t.to_ms)
    )
}

/// A key typed into the line `slot` (at most `max` bytes): `Esc` gives up, `Backspace` takes
/// a character back; `Enter` ends the line and returns it.
fn type_into(slot: &mut Option<String>, key: KeyEvent, max: usize) -> Option<String> {
    let typed = slot.as_mut()?;
    match key.code {
        KeyCode::Esc => *slot = None,
        KeyCode::Backspace => {
            typed.pop();
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) && typed.len() < max => {
            typed.push(c);
        }
        KeyCode::Enter => return slot.take(),
        _ => {}
    }
    None
}

/// A key while typing the interval `v` compares with: `Enter` asks for the comparison of the
/// window shown (the replay's first snapshot to its position) with the same window that much
/// earlier, `Esc` gives up.
fn on_compare_key(state: &mut State, key: KeyEvent) -> Option<Effect> {
    let typed = type_into(&mut state.compare_typed, key, 32)?;
    let (t, r) = (state.timeline.as_ref()?, state.replay.as_ref()?);
    let now = crate::history::range::Window {
        from_ms: t.replay_from_ms,
        to_ms: t.wall_ms(r.position).max(t.replay_from_ms),
    };
    match crate::cli::parse_duration(&typed) {
        Ok(vs) if vs >= Duration::from_secs(1) => {
            state.status = Some(format!(
                "comparing {} to {} with {} earlier...",
                crate::history::when::local(now.from_ms),
                crate::history::when::local(now.to_ms),
                crate::format::duration(vs)
            ));
            return Some(Effect::Compare { now, vs });
        }
        Ok(_) => state.status = Some("compare with at least 1s earlier".into()),
        Err(e) => state.status = Some(crate::sanitize::terminal(&e).into_owned()),
    }
    None
}

/// A key while typing a time to jump to: `Enter` jumps (a duration is session time, anything
/// else a wall-clock time placed on the session's clock), `Esc` gives up.
fn on_goto_key(state: &mut State, key: KeyEvent) -> Option<Effect> {
    let typed = type_into(&mut state.goto, key, 64)?;
    let position = state.replay.as_ref()?.position;
    match crate::history::when::parse_time(&typed) {
        Ok(crate::history::when::TimeArg::Wall(ms)) if outside_replay(state, ms) => {
            let t = state.timeline.as_ref()?;
            if ms < t.from_ms || ms > t.to_ms {
                state.status = Some(outside_message(t, ms));
                return None;
            }
            // Elsewhere in the history: its window around `ms` is read and replayed.
            state.status = Some(format!(
                "reading the history around {}...",
                crate::history::when::local(ms)
            ));
            return Some(Effect::Jump(ms));
        }
        Ok(t) => {
            let target = t.session(state.info.started_unix_ms);
            let by = target.as_secs_f64() - position.as_secs_f64();
            return Some(Effect::Replay(ReplayCommand::SeekBy(by)));
        }
        Err(e) => state.status = Some(crate::sanitize::terminal(&e).into_owned()),
    }
    None
}
