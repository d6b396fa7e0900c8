//! Replay: a recording played back as a [`Feed`] at its recorded pace, with timeline controls.
use std::time::Duration;

use tokio::{
    sync::{mpsc, watch},
    time::{Instant, sleep, sleep_until},
};

use super::{decode::Cursor, reader::Recording};
use crate::{
    model::Snapshot,
    source::{Feed, ReplayCommand, ReplayHandle, ReplayStatus},
};

/// How often a stream being followed is checked for new frames.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// Slowest and fastest playback speeds.
const SPEEDS: (f64, f64) = (0.25, 16.0);

/// Plays `recording` as a feed, starting at its first snapshot, playing at 1x.
///
/// Spawns a task on the current tokio runtime (so it must be called from within one). The task
/// sends the snapshot of each frame when its time comes (at `speed` times the recorded pace;
/// when several frames are due at once, only the latest is sent: snapshots are cumulative),
/// obeys [`ReplayCommand`]s and publishes a [`ReplayStatus`] after every change. After a seek it
/// sends the snapshot at the new position, whose `elapsed` may be smaller than the previous one.
/// At the end it pauses on the last snapshot (play then restarts from the start). The task ends
/// when the feed's receiver is dropped.
///
/// A recording still growing (a stream, see [`Recording::follow`]) is followed: it starts at
/// its latest snapshot and sends each new one as it arrives, with [`ReplayStatus::live`] set,
/// until a seek or a pause; jumping to the end (or playing up to it) follows it again.
pub fn replay_feed(recording: Recording) -> Feed {
    let info = recording.info().clone();
    let (snaps, rx) = mpsc::channel(8);
    let (commands, cmd_rx) = mpsc::unbounded_channel();
    let (status, status_rx) = watch::channel(ReplayStatus {
        position: recording.start(),
        duration: recording.duration(),
        speed: 1.0,
        paused: true,
        live: recording.is_growing(),
    });
    let player = Player {
        follow: recording.is_growing(),
        cursor: Cursor::default(),
        at: None,
        speed: 1.0,
        paused: true,
        anchor_pos: recording.start(),
        anchor_wall: Instant::now(),
        rec: recording,
        snaps,
        status,
    };
    tokio::spawn(player.run(cmd_rx));
    Feed {
        info,
        snapshots: rx,
        replay: Some(ReplayHandle {
            commands,
            status: status_rx,
        }),
        kernel_pace: None,
    }
}

/// The receiver of the feed is gone: stop.
struct Gone;

/// What woke the player up.
enum Event {
    Gone,
    Command(Option<ReplayCommand>),
    Due,
    Follow,
}

struct Player {
    rec: Recording,
    /// Showing each new frame of a growing recording as it arrives.
    follow: bool,
    cursor: Cursor,
    /// Frame whose snapshot was sent last.
    at: Option<usize>,
    speed: f64,
    paused: bool,
    /// The playback clock: at wall time `anchor_wall` the position was `anchor_pos`.
    anchor_pos: Duration,
    anchor_wall: Instant,
    snaps: mpsc::Sender<Snapshot>,
    status: watch::Sender<ReplayStatus>,
}

impl Player {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<ReplayCommand>) {
        let _ = self.play_loop(&mut commands).await;
    }

    async fn play_loop(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<ReplayCommand>,
    ) -> Result<(), Gone> {
        if self.follow {
            self.follow_up().await?;
        } else if !self.rec.is_empty() {
            self.paused = false;
            self.seek(self.rec.start()).await?;
        }
        self.publish();
        let mut commands_open = true;
        loop {
            let due = self.next_due();
            let closed = self.snaps.clone();
            let event = tokio::select! {
                biased;
                _ = closed.closed() => Event::Gone,
                c = commands.recv(), if commands_open => Event::Command(c),
                _ = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => Event::Due,
                _ = sleep(FOLLOW_EVERY), if self.rec.is_growing() => Event::Follow,
            };
            match event {
                Event::Gone => return Err(Gone),
                Event::Command(None) => commands_open = false,
                Event::Command(Some(c)) => self.command(c).await?,
                Event::Due => self.advance().await?,
                Event::Follow => self.grow().await?,
            }
            self.publish();
        }
    }

    /// Indexes the frames that arrived; when following, shows the latest.
    async fn grow(&mut self) -> Result<(), Gone> {
        let was_empty = self.rec.is_empty();
        match self.rec.refresh() {
            Ok(true) if self.follow || was_empty => self.follow_up().await?,
            Ok(_) => {}
            Err(e) => tracing::warn!("the recording stopped growing: {e}"),
        }
        if !self.rec.is_growing() {
            self.follow = false;
        }
        Ok(())
    }

    /// Follows the stream: shows its latest snapshot.
    async fn follow_up(&mut self) -> Result<(), Gone> {
        self.follow = self.rec.is_growing();
        if self.rec.is_empty() {
            return Ok(());
        }
        self.paused = true;
        self.anchor_pos = self.rec.duration();
        self.anchor_wall = Instant::now();
        self.show(self.last()).await
    }

    /// Where the playback clock is now, within the recording.
    fn position(&self) -> Duration {
        let p = if self.paused {
            self.anchor_pos
        } else {
            self.anchor_pos
                .saturating_add(self.anchor_wall.elapsed().mul_f64(self.speed))
        };
        p.clamp(self.rec.start(), self.rec.duration())
    }

    fn last(&self) -> usize {
        self.rec.len().saturating_sub(1)
    }

    /// When the next frame is due, if playing and not at the end.
    fn next_due(&self) -> Option<Instant> {
        if self.paused {
            return None;
        }
        let next = self.rec.frames().get(self.at? + 1)?;
        let wait = next.elapsed.saturating_sub(self.anchor_pos);
        let wait = wait.div_f64(self.speed);
        // A crafted file can put frames centuries apart: never overflow the clock.
        Some(
            self.anchor_wall
                .checked_add(wait)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 30)),
        )
    }

    fn re_anchor(&mut self) {
        self.anchor_pos = self.position();
        self.anchor_wall = Instant::now();
    }

    fn publish(&self) {
        self.status.send_replace(ReplayStatus {
            position: self.position(),
            duration: self.rec.duration(),
            speed: self.speed,
            paused: self.paused && !self.follow,
            live: self.follow,
        });
    }

    /// Sends frame `i`'s snapshot. A frame that does not decode pauses the replay where it is.
    async fn show(&mut self, i: usize) -> Result<(), Gone> {
        match self.cursor.goto(&self.rec, i) {
            Ok(s) => {
                self.at = Some(i);
                self.snaps.send(s).await.map_err(|_| Gone)?;
                if i == self.last() && !self.paused {
                    self.anchor_pos = self.rec.duration();
                    self.paused = true;
                    // Played up to where a growing stream has got: follow it again.
                    self.follow = self.rec.is_growing();
                }
            }
            Err(e) => {
                tracing::warn!("replay stopped: {e}");
                self.cursor = Cursor::default();
                self.anchor_pos = self
                    .at
                    .map_or(self.rec.start(), |a| self.rec.frames()[a].elapsed);
                self.paused = true;
            }
        }
        Ok(())
    }

    /// Moves the clock to `t` and sends the snapshot there.
    async fn seek(&mut self, t: Duration) -> Result<(), Gone> {
        let Some(i) = self.rec.frame_at(t) else {
            return Ok(());
        };
        self.anchor_pos = t.clamp(self.rec.start(), self.rec.duration());
        self.anchor_wall = Instant::now();
        self.show(i).await
    }

    /// Sends the latest frame that is due.
    async fn advance(&mut self) -> Result<(), Gone> {
        let Some(at) = self.at else { return Ok(()) };
        let due = self.rec.frame_at(self.position()).unwrap_or(0);
        self.show(due.max(at + 1).min(self.last())).await
    }

    async fn command(&mut self, c: ReplayCommand) -> Result<(), Gone> {
        if self.rec.is_empty() {
            return Ok(());
        }
        let at_end = self.paused && self.at == Some(self.last());
        if self.rec.is_growing() && c == ReplayCommand::TogglePause {
            if self.follow {
                // Freeze on the snapshot shown; the stream is still indexed as it grows.
                self.follow = false;
                return Ok(());
            }
            if at_end {
                return self.follow_up().await;
            }
        }
        if self.rec.is_growing() && c == ReplayCommand::End {
            return self.follow_up().await;
        }
        if !matches!(c, ReplayCommand::Speed(_)) {
            self.follow = false;
        }
        match c {
            ReplayCommand::TogglePause if at_end => {
                self.paused = false;
                self.seek(self.rec.start()).await?;
            }
            ReplayCommand::TogglePause => {
                self.re_anchor();
                self.paused = !self.paused;
            }
            ReplayCommand::SeekBy(s) if s.is_finite() => {
                let now = self.position().as_secs_f64();
                let t = Duration::try_from_secs_f64((now + s).max(0.0)).unwrap_or(Duration::MAX);
                self.seek(t).await?;
            }
            ReplayCommand::SeekBy(_) => {}
            ReplayCommand::Start => self.seek(self.rec.start()).await?,
            ReplayCommand::End => {
                self.paused = true;
                self.seek(self.rec.duration()).await?;
            }
            ReplayCommand::Speed(x) if !x.is_nan() => {
                self.re_anchor();
                self.speed = x.clamp(SPEEDS.0, SPEEDS.1);
            }
            ReplayCommand::Speed(_) => {}
        }
        Ok(())
    }
}
