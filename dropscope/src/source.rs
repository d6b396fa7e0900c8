//! Where snapshots come from, live collector or recording: consumers cannot tell them apart;
//! and the [`Stopper`] that ends a live one.
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::model::{SessionInfo, Snapshot};

/// A stream of snapshots with the facts of its session.
pub struct Feed {
    /// Host, kernel, start time and probe of the session.
    pub info: SessionInfo,
    /// Cumulative snapshots, oldest first. After a replay seek, a snapshot may be older than the
    /// one before it: consumers must treat a decrease in `elapsed` as a restart of their history.
    pub snapshots: mpsc::Receiver<Snapshot>,
    /// Timeline controls, present only when replaying a recording.
    pub replay: Option<ReplayHandle>,
    /// How often the kernel's counters are read (live, when a consumer asked for them).
    pub kernel_pace: Option<KernelPace>,
}

/// Stops a spawned collector: it takes a last snapshot, sends it, and detaches the probe (on its
/// own thread, which [`Stopper::finish`] and `Drop` wait for, so nothing outlives the process's
/// orderly exit: programs, a tracefs mount, BPF statistics).
#[cfg(feature = "live")]
pub struct Stopper {
    stop: std::sync::mpsc::Sender<()>,
    handle: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

#[cfg(feature = "live")]
impl Stopper {
    /// The handle of a collector on thread `handle`, which stops when `stop` is sent to (or
    /// dropped).
    pub(crate) fn new(
        stop: std::sync::mpsc::Sender<()>,
        handle: std::thread::JoinHandle<std::io::Result<()>>,
    ) -> Self {
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Asks the collector to take a last snapshot and stop; the feed closes after it.
    pub fn stop(&self) {
        let _ = self.stop.send(());
    }

    /// Stops the collector, waits until the probe is detached, and returns what ended it.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.stop();
        match self.handle.take().map(std::thread::JoinHandle::join) {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(e))) => Err(anyhow::Error::new(e).context("reading the probe's maps")),
            Some(Err(_)) => Err(anyhow::anyhow!("the collector thread panicked")),
        }
    }
}

#[cfg(feature = "live")]
impl Drop for Stopper {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// How often a live source reads the kernel's counters, changeable while it runs (the TUI reads
/// them more often while their panel is open).
#[derive(Clone, Debug)]
pub struct KernelPace(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl KernelPace {
    /// Every `every`.
    pub fn new(every: std::time::Duration) -> Self {
        Self(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(
            every.as_millis() as u64,
        )))
    }

    /// From now on, every `every`.
    pub fn set(&self, every: std::time::Duration) {
        (self.0).store(
            every.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The period in force.
    pub fn get(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Feed {
    /// The same feed with every snapshot passed through `f` (e.g. a filter and grouping),
    /// in order, by a task of its own.
    pub fn map(self, f: impl Fn(Snapshot) -> Snapshot + Send + 'static) -> Feed {
        let (tx, rx) = mpsc::channel(4);
        let mut from = self.snapshots;
        tokio::spawn(async move {
            while let Some(s) = from.recv().await {
                if tx.send(f(s)).await.is_err() {
                    break;
                }
            }
        });
        Feed {
            snapshots: rx,
            ..self
        }
    }
}

/// Controls and position of a replay.
pub struct ReplayHandle {
    /// Commands to the replay task.
    pub commands: mpsc::UnboundedSender<ReplayCommand>,
    /// Where the replay is now.
    pub status: watch::Receiver<ReplayStatus>,
}

/// A command to the replay timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplayCommand {
    /// Pause if playing, play if paused.
    TogglePause,
    /// Move by this many seconds (negative: backward).
    SeekBy(f64),
    /// Jump to the start.
    Start,
    /// Jump to the end.
    End,
    /// Set the playback speed (clamped to 0.25..=16).
    Speed(f64),
}

/// The replay's position on its timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplayStatus {
    /// Session time (`Snapshot::elapsed`) of the snapshot shown. A recording started partway
    /// through a session begins at its first snapshot's session time, not at zero.
    pub position: Duration,
    /// Session time of the recording's last snapshot.
    pub duration: Duration,
    /// Playback speed.
    pub speed: f64,
    /// Whether playback is paused.
    pub paused: bool,
    /// Following a stream as it grows (`replay -`): each snapshot is shown as it arrives, and
    /// `duration` is where the stream has got to so far.
    pub live: bool,
}
