//! The interactive terminal UI, in the Elm style: a [`state::State`], messages that
//! [`update::update`] applies to it, and a [`view::render`] that is a pure function of it.
//!
//! [`run`] owns the terminal and the one event loop: it awaits terminal input, snapshots, replay
//! status and one redraw timer, and never polls. Keys redraw at once; data redraws at most twice
//! a second, at once when the last redraw is old enough (so the feed's own pace sets the
//! redraws, without a timer of their own); the header clock ticks only when no snapshot came.
pub mod help;
pub mod keys;
pub mod state;
pub mod terminal;
pub mod update;
pub mod view;
pub mod warnings;

mod effects;
pub use effects::{CompareSource, JumpSource, Jumped};
#[cfg(test)]
mod tests;

use std::{
    io::{self, BufWriter},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use crossterm::event::{Event, EventStream, KeyEventKind};
use futures::StreamExt;
use ratatui::{Terminal, TerminalOptions, Viewport, backend::CrosstermBackend, layout::Rect};
use tokio::{
    signal::unix::SignalKind,
    sync::{mpsc, watch},
    time::Instant,
};

use self::{
    effects::ActiveRecording,
    state::{Panel, State},
    terminal::TerminalGuard,
    update::{Effect, Msg, update},
};
use crate::{
    model::{SessionInfo, Snapshot},
    source::{Feed, ReplayStatus},
};

/// Where the TUI writes files.
#[derive(Clone, Debug)]
pub struct TuiOptions {
    /// Directory for flamegraph SVGs written with `f`.
    pub flamegraph_dir: PathBuf,
    /// Directory for recordings started with `r`.
    pub record_dir: PathBuf,
    /// The drop filters in force, described (with any, no drops are called unseen); the
    /// header shows them.
    pub filter: Option<String>,
    /// The grouping the counts come in (`--by`); empty: as found in the data (replay).
    pub by: Vec<crate::model::group::Dim>,
    /// Replaying a history: drops per second over its whole range, shown as a strip.
    pub timeline: Option<crate::history::timeline::Timeline>,
    /// Replaying a history: where `v` reads the windows it compares.
    pub compare: Option<CompareSource>,
    /// Replaying a history: how `t` opens a window past the one replayed.
    pub jump: Option<JumpSource>,
}

/// Least time between two redraws caused by data (snapshots, replay position).
const DATA_REDRAW: Duration = Duration::from_millis(500);
/// Data that comes this much sooner than DATA_REDRAW after the last redraw is still drawn at
/// once: a feed polled every 500 ms then draws on arrival, with no timer wake-up of its own
/// (each costs system calls: a timer set earlier than the runtime's next wake-up writes to
/// its eventfd to wake it).
const DATA_SLACK: Duration = Duration::from_millis(100);
/// How often the header clock advances between snapshots.
const CLOCK: Duration = Duration::from_secs(1);
/// A live feed sends a snapshot at least once a second, and each advances the clock; the
/// clock's own timer waits this much longer after one, so that it runs only when the feed is
/// late.
const CLOCK_GRACE: Duration = Duration::from_millis(250);
/// How often a live source reads the kernel's counters while their panel (or the ledger's) is
/// open.
pub const KERNEL_READ: Duration = Duration::from_secs(1);
/// How often while their panel is closed (for the header's UNSEEN badge and the RATIO%
/// column): a reading costs some 20 system calls in the initial namespace and 30 in each other
/// one, which at this pace keeps the idle view near 20 syscalls/s (docs/benchmark.md).
pub const KERNEL_READ_CLOSED: Duration = Duration::from_secs(10);

type Term = Terminal<CrosstermBackend<BufWriter<io::Stdout>>>;

/// Waits for the replay's next status; never resolves when there is no replay (any more).
async fn next_status(rx: &mut Option<watch::Receiver<ReplayStatus>>) -> ReplayStatus {
    let Some(r) = rx else {
        return std::future::pending().await;
    };
    if r.changed().await.is_err() {
        *rx = None;
        return std::future::pending().await;
    }
    *r.borrow_and_update()
}

/// Forwards terminal events from crossterm's [`EventStream`] to a channel.
///
/// The stream gets its own task so that it is polled only when crossterm's reader wakes it: each
/// poll of an idle `EventStream` costs a lock attempt that spins with `sched_yield`, which the
/// main loop, woken by every snapshot, would otherwise pay every time.
fn forward_events() -> (
    mpsc::Receiver<io::Result<Event>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(async move {
        let mut events = EventStream::new();
        while let Some(ev) = events.next().await {
            if tx.send(ev).await.is_err() {
                break;
            }
        }
    });
    (rx, task)
}

fn draw(terminal: &mut Term, state: &State) -> io::Result<()> {
    terminal.draw(|f| view::render(f, state)).map(|_| ())
}

/// Whether `k` is Ctrl-Z (in raw mode the terminal sends it as a key, not as SIGTSTP).
fn is_suspend(k: &crossterm::event::KeyEvent) -> bool {
    use crossterm::event::{KeyCode, KeyModifiers};
    k.kind == KeyEventKind::Press
        && k.modifiers.contains(KeyModifiers::CONTROL)
        && matches!(k.code, KeyCode::Char('z' | 'Z'))
}

/// Runs `step` (stop and continue, or just continue), then redraws the whole screen.
fn suspend_and_redraw(
    terminal: &mut Term,
    state: &State,
    step: fn() -> io::Result<()>,
) -> anyhow::Result<()> {
    terminal.flush().context("writing the screen")?;
    step().context("restoring the terminal after a stop")?;
    terminal.clear().context("redrawing the screen")?;
    draw(terminal, state).context("redrawing the screen")
}

/// Writes `snap` to the recording in progress, if any; the header's new status, and a message
/// if the recording had to stop.
fn record(recording: &mut Option<ActiveRecording>, snap: &Snapshot) -> Vec<Msg> {
    let Some(rec) = recording.as_mut() else {
        return Vec::new();
    };
    match rec.write(snap) {
        Ok(()) => vec![Msg::Recording(Some(rec.status()))],
        Err(e) => {
            *recording = None;
            vec![
                Msg::Recording(None),
                Msg::Status(format!(
                    "recording stopped, nothing saved: {}",
                    crate::sanitize::terminal(&format!("{e:#}"))
                )),
            ]
        }
    }
}

/// Starts or stops recording; the header's new status and a message saying what happened.
fn toggle_recording(
    recording: &mut Option<ActiveRecording>,
    dir: &Path,
    info: &SessionInfo,
    latest: Option<&Snapshot>,
) -> [Msg; 2] {
    if let Some(rec) = recording.take() {
        return [Msg::Recording(None), Msg::Status(rec.stop())];
    }
    match ActiveRecording::start(dir, info, latest) {
        Ok(rec) => {
            let msgs = [
                Msg::Recording(Some(rec.status())),
                Msg::Status(format!(
                    "recording to {} (saved under that name when stopped)",
                    crate::sanitize::terminal(&rec.path().to_string_lossy())
                )),
            ];
            *recording = Some(rec);
            msgs
        }
        Err(e) => [
            Msg::Recording(None),
            Msg::Status(format!("cannot record: {e:#}")),
        ],
    }
}

/// SIGTERM, SIGINT (from `kill`; in raw mode Ctrl-C is a key), SIGHUP and SIGQUIT end the TUI
/// the same way `q` does, so the terminal is restored, a recording finished and the caller
/// detaches the probe. SIGTSTP (and Ctrl-Z, a key in raw mode) restores the terminal before
/// stopping; SIGCONT puts it back and redraws.
struct Signals {
    end: crate::signals::Interrupt,
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

/// What a signal asks of the TUI.
enum Sig {
    End,
    Suspend,
    Resume,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        let signal =
            |kind| tokio::signal::unix::signal(kind).context("installing a signal handler");
        Ok(Self {
            end: crate::signals::Interrupt::new()?,
            tstp: signal(SignalKind::from_raw(libc::SIGTSTP))?,
            cont: signal(SignalKind::from_raw(libc::SIGCONT))?,
        })
    }

    async fn next(&mut self) -> Sig {
        tokio::select! {
            () = self.end.recv() => Sig::End,
            _ = self.tstp.recv() => Sig::Suspend,
            _ = self.cont.recv() => Sig::Resume,
        }
    }
}

/// The running TUI: its terminal, state, and what its effects reach.
struct Session {
    terminal: Term,
    state: State,
    info: SessionInfo,
    opts: TuiOptions,
    recording: Option<ActiveRecording>,
    replay_tx: Option<mpsc::UnboundedSender<crate::source::ReplayCommand>>,
    kernel_pace: Option<crate::source::KernelPace>,
    done_tx: mpsc::UnboundedSender<Msg>,
    /// Where a jump's window comes back (see [`effects::spawn_jump`]).
    jumped_tx: mpsc::UnboundedSender<(u64, Result<Jumped, String>)>,
    /// Data changes mark the screen dirty; one timer draws it, at most every DATA_REDRAW, or
    /// every CLOCK while the header clock runs. Keys draw at once.
    dirty: bool,
    last_draw: Instant,
    /// Whether the clock's timer drew since the last snapshot (then it ticks every CLOCK;
    /// before, CLOCK_GRACE later).
    ticked: bool,
}

impl Session {
    /// When the next timed redraw is due, if one is.
    fn next_draw(&self) -> Option<Instant> {
        if self.dirty {
            Some(self.last_draw + DATA_REDRAW)
        } else if self.state.clock_running() {
            let grace = if self.ticked {
                Duration::ZERO
            } else {
                CLOCK_GRACE
            };
            Some(self.last_draw + CLOCK + grace)
        } else {
            None
        }
    }

    fn redraw(&mut self) -> anyhow::Result<()> {
        self.dirty = false;
        self.last_draw = Instant::now();
        draw(&mut self.terminal, &self.state)?;
        Ok(())
    }

    fn suspend(&mut self, f: fn() -> io::Result<()>) -> anyhow::Result<()> {
        suspend_and_redraw(&mut self.terminal, &self.state, f)
    }

    /// Live, finds how a shell enters the selected row's namespace (once per namespace), for
    /// the commands the explain panel and `y` fill in.
    fn find_way_in(&mut self) {
        let (Some(ns), Some(k)) = (
            (self.state.selected.as_ref()).and_then(|k| k.attr.netns),
            &self.state.kernel,
        ) else {
            return;
        };
        if self.state.is_replay() || self.state.ways.contains_key(&ns) {
            return;
        }
        let way = crate::explain::fill::way_in(
            ns,
            k.initial_netns,
            std::path::Path::new(crate::vocab::reading::RUN_NETNS),
            std::path::Path::new("/proc"),
        );
        self.state.ways.insert(ns, way);
    }

    /// Takes in the window a jump opened: its feed replaces the replay's (the old one's
    /// player ends with its channels), the state starts again from it, and the replay seeks
    /// to the time jumped to.
    fn jumped(
        &mut self,
        at_ms: u64,
        jumped: Result<Jumped, String>,
        snapshots: &mut mpsc::Receiver<Snapshot>,
        replay_rx: &mut Option<watch::Receiver<ReplayStatus>>,
    ) -> Msg {
        let j = match jumped {
            Ok(j) => j,
            Err(e) => return Msg::Status(format!("no jump: {e}")),
        };
        let Feed {
            info,
            snapshots: snaps,
            replay: Some(handle),
            ..
        } = j.feed
        else {
            return Msg::Status("no jump: the window opened is not a replay".into());
        };
        let mut status = handle.status;
        let initial = *status.borrow_and_update();
        *snapshots = snaps;
        *replay_rx = Some(status);
        let target = at_ms.saturating_sub(j.timeline.replay_started_ms);
        let by = Duration::from_millis(target).as_secs_f64() - initial.position.as_secs_f64();
        let _ = handle
            .commands
            .send(crate::source::ReplayCommand::SeekBy(by));
        self.replay_tx = Some(handle.commands);
        self.info = info.clone();
        self.state.jumped(info, initial, j.timeline);
        let mut msg = format!(
            "jumped to {}: replaying the history around it",
            crate::history::when::local(at_ms)
        );
        if let Some(n) = j.notes.first() {
            msg.push_str(&format!(
                " (note: {}{})",
                crate::sanitize::terminal(n),
                if j.notes.len() > 1 { ", ..." } else { "" }
            ));
        }
        Msg::Status(msg)
    }

    /// Takes in one message; returns whether the TUI is to end.
    fn handle(&mut self, msg: Msg) -> anyhow::Result<bool> {
        if let Msg::Snapshot(s, _) = &msg {
            self.ticked = false;
            // Warnings raised since (they cannot go to stderr under the screen).
            let raised = warnings::raised();
            if raised != self.state.warnings.0 {
                self.state.warnings = (raised, warnings::kept());
            }
            // Every snapshot received while recording goes to the file.
            for m in record(&mut self.recording, s) {
                update(&mut self.state, m);
            }
        }
        let mut urgent = matches!(msg, Msg::Key(_) | Msg::Resize(..) | Msg::Status(_));
        if matches!(msg, Msg::Key(_)) {
            self.find_way_in();
        }
        // A selection that moved to another key (the top row changed) is drawn at once, so
        // that Enter opens the row the screen shows selected.
        let selected = self.state.selected.clone();
        let effect = update(&mut self.state, msg);
        urgent |= self.state.selected != selected;
        if let Some(pace) = &self.kernel_pace {
            // The counters travel in the snapshots; they are read more often while shown.
            pace.set(
                if matches!(self.state.panel, Some(Panel::Counters | Panel::Ledger)) {
                    KERNEL_READ
                } else {
                    KERNEL_READ_CLOSED
                },
            );
        }
        match effect {
            Some(Effect::Quit) => return Ok(true),
            Some(Effect::Replay(cmd)) => {
                if let Some(tx) = &self.replay_tx {
                    let _ = tx.send(cmd);
                }
            }
            Some(Effect::Flamegraph(req)) => {
                let (dir, done) = (&self.opts.flamegraph_dir, self.done_tx.clone());
                effects::spawn_flamegraph(req, &self.info, dir, done);
            }
            Some(Effect::Copy(command)) => effects::copy(&command)?,
            Some(Effect::Jump(at_ms)) => match &self.opts.jump {
                Some(src) => effects::spawn_jump(src.clone(), at_ms, self.jumped_tx.clone()),
                None => {
                    update(&mut self.state, Msg::Status("no history to jump in".into()));
                }
            },
            Some(Effect::Compare { now, vs }) => match &self.opts.compare {
                Some(src) => effects::spawn_compare(src.clone(), now, vs, self.done_tx.clone()),
                None => {
                    let msg = Msg::Status("no history to compare with".into());
                    update(&mut self.state, msg);
                }
            },
            Some(Effect::ToggleRecording) => {
                let latest = self.state.tracker.latest();
                let dir = &self.opts.record_dir;
                for m in toggle_recording(&mut self.recording, dir, &self.info, latest) {
                    update(&mut self.state, m);
                }
            }
            None => {}
        }
        if urgent || self.last_draw.elapsed() + DATA_SLACK >= DATA_REDRAW {
            self.redraw()?;
        } else {
            self.dirty = true;
        }
        Ok(false)
    }
}

/// What one turn of the loop got.
enum Turn {
    Msg(Msg),
    /// Handled already (a redraw, a suspension, an event that means nothing).
    Again,
    End(anyhow::Result<()>),
}

/// A terminal event as a turn of the loop.
fn on_event(s: &mut Session, ev: Option<io::Result<Event>>) -> Turn {
    match ev {
        Some(Ok(Event::Key(k))) if is_suspend(&k) => match s.suspend(terminal::suspend) {
            Ok(()) => Turn::Again,
            Err(e) => Turn::End(Err(e)),
        },
        Some(Ok(Event::Key(k))) if k.kind != KeyEventKind::Release => Turn::Msg(Msg::Key(k)),
        Some(Ok(Event::Resize(w, h))) => match s.terminal.resize(Rect::new(0, 0, w, h)) {
            Ok(()) => Turn::Msg(Msg::Resize(w, h)),
            Err(e) => Turn::End(Err(anyhow::Error::new(e).context("resizing the screen"))),
        },
        Some(Ok(_)) => Turn::Again,
        Some(Err(e)) => Turn::End(Err(anyhow::Error::new(e).context("reading the terminal"))),
        None => Turn::End(Ok(())),
    }
}

/// Runs the TUI on `feed` until the user quits or the feed ends.
///
/// The caller checks that stdout is a terminal. The terminal is restored on return, on error
/// and on panic. A recording in progress is finished on the way out.
pub async fn run(feed: Feed, opts: TuiOptions) -> anyhow::Result<()> {
    let Feed {
        info,
        mut snapshots,
        replay,
        kernel_pace,
    } = feed;
    let (replay_tx, mut replay_rx) = match replay {
        Some(h) => (Some(h.commands), Some(h.status)),
        None => (None, None),
    };
    let initial = replay_rx.as_mut().map(|r| *r.borrow_and_update());
    let guard = TerminalGuard::enter()?;
    let (w, h) = crossterm::terminal::size()?;
    // A fixed viewport, resized on resize events, spares a size query on every draw.
    let mut terminal = Terminal::with_options(
        CrosstermBackend::new(BufWriter::with_capacity(1 << 16, io::stdout())),
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, w, h)),
        },
    )?;
    terminal.clear()?;
    let mut state = State::new(info.clone(), initial, (w, h));
    state.filters = opts.filter.clone();
    state.by = opts.by.clone();
    state.timeline = opts.timeline.clone();
    let (mut events, events_task) = forward_events();
    let mut signals = Signals::new()?;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Msg>();
    let (jumped_tx, mut jumped_rx) = mpsc::unbounded_channel();
    let mut s = Session {
        terminal,
        state,
        info,
        opts,
        recording: None,
        replay_tx,
        kernel_pace,
        done_tx,
        jumped_tx,
        dirty: false,
        last_draw: Instant::now(),
        ticked: false,
    };
    s.redraw()?;

    let result: anyhow::Result<()> = loop {
        let next_draw = s.next_draw();
        // In order: what is waiting is taken in before a due redraw draws it.
        let turn = tokio::select! {
            biased;
            ev = events.recv() => on_event(&mut s, ev),
            snap = snapshots.recv() => match snap {
                Some(snap) => Turn::Msg(Msg::Snapshot(Box::new(snap), Instant::now().into_std())),
                None => Turn::End(Ok(())),
            },
            status = next_status(&mut replay_rx) => Turn::Msg(Msg::Replay(status)),
            Some(msg) = done_rx.recv() => Turn::Msg(msg),
            Some((at, j)) = jumped_rx.recv() => Turn::Msg(s.jumped(at, j, &mut snapshots, &mut replay_rx)),
            sig = signals.next() => match sig {
                Sig::End => Turn::End(Ok(())),
                Sig::Suspend => s.suspend(terminal::suspend).map_or_else(|e| Turn::End(Err(e)), |()| Turn::Again),
                Sig::Resume => s.suspend(terminal::resume).map_or_else(|e| Turn::End(Err(e)), |()| Turn::Again),
            },
            _ = tokio::time::sleep_until(next_draw.unwrap_or(s.last_draw)), if next_draw.is_some() => {
                update(&mut s.state, Msg::Tick(Instant::now().into_std()));
                s.ticked |= !s.dirty;
                s.redraw().map_or_else(|e| Turn::End(Err(e)), |()| Turn::Again)
            }
        };
        match turn {
            Turn::Msg(msg) => match s.handle(msg) {
                Ok(false) => {}
                Ok(true) => break Ok(()),
                Err(e) => break Err(e),
            },
            Turn::Again => {}
            Turn::End(r) => break r,
        }
    };

    events_task.abort();
    let _ = events_task.await;
    let saved = s.recording.take().map(ActiveRecording::stop);
    let copied = s.state.copied.take();
    drop(s);
    drop(guard);
    if let Some(c) = copied {
        println!("{}", crate::sanitize::terminal(&c));
    }
    if let Some(msg) = saved {
        eprintln!("dropscope: {msg}");
    }
    result
}
