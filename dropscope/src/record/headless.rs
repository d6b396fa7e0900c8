//! Headless recording (`dropscope record`): a feed written to a file, with a status line on
//! stderr.
use std::{
    future::Future,
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use tokio::time::{Instant, MissedTickBehavior, interval};

use super::{error::RecordError, writer::Recorder};
use crate::{model::Snapshot, source::Feed};

/// What a finished headless recording holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSummary {
    /// The file written.
    pub path: PathBuf,
    /// Snapshots written.
    pub frames: u64,
    /// Size of the file in bytes.
    pub bytes: u64,
    /// Elapsed time of the last snapshot written (session time).
    pub elapsed: Duration,
    /// Total drops in the last snapshot written (cumulative since the session started).
    pub total: u64,
}

/// Records every snapshot of `feed` to `path` until `stop` resolves or the feed ends, then
/// finishes the file and gives it its name (`force`: replacing what has it).
///
/// Shows a one-line status on stderr (elapsed, drops, file size): rewritten in place with `\r`
/// when stderr is a terminal, otherwise one line about every 5 s, plus a last line at the end.
pub async fn record_feed(
    mut feed: Feed,
    path: &Path,
    force: bool,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<RecordSummary> {
    let mut recorder = Recorder::create(path, &feed.info, force)
        .with_context(|| format!("creating the recording {}", path.display()))?;
    let tty = std::io::stderr().is_terminal();
    let mut tick = interval(if tty {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(5)
    });
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut summary = RecordSummary {
        path: path.to_path_buf(),
        frames: 0,
        bytes: recorder.bytes_written(),
        elapsed: Duration::ZERO,
        total: 0,
    };
    tokio::pin!(stop);
    let mut write = |s: Snapshot, summary: &mut RecordSummary| {
        recorder.write(&s)?;
        summary.frames += 1;
        summary.elapsed = s.elapsed;
        summary.total = s.total;
        summary.bytes = recorder.bytes_written();
        Ok::<_, RecordError>(())
    };
    let mut failure = loop {
        tokio::select! {
            () = &mut stop => break None,
            s = feed.snapshots.recv() => match s {
                None => break None,
                Some(s) => {
                    if let Err(e) = write(s, &mut summary) {
                        break Some(e);
                    }
                }
            },
            _ = tick.tick() => status(tty, false, &summary, started.elapsed()),
        }
    };
    // Snapshots already delivered when asked to stop are kept.
    while let (None, Ok(s)) = (&failure, feed.snapshots.try_recv()) {
        failure = write(s, &mut summary).err();
    }
    if let Some(e) = failure {
        status(tty, true, &summary, started.elapsed());
        return Err(e).with_context(|| {
            format!(
                "writing the recording {} (nothing was saved; {} snapshots were written before \
                 the failure)",
                path.display(),
                summary.frames
            )
        });
    }
    let saved = recorder
        .finish()
        .with_context(|| format!("finishing the recording {}", path.display()))?;
    summary.bytes = std::fs::metadata(&saved).map_or(summary.bytes, |m| m.len());
    summary.path = saved;
    status(tty, true, &summary, started.elapsed());
    Ok(summary)
}

/// Prints the status line; `last` ends it with a newline.
fn status(tty: bool, last: bool, s: &RecordSummary, wall: Duration) {
    let line = status_line(s, wall);
    let mut err = std::io::stderr().lock();
    let _ = if tty {
        write!(err, "\r{line}\x1b[K{}", if last { "\n" } else { "" })
    } else {
        writeln!(err, "{line}")
    };
    let _ = err.flush();
}

fn status_line(s: &RecordSummary, wall: Duration) -> String {
    let secs = wall.as_secs();
    format!(
        "recording {}: {:02}:{:02}:{:02} elapsed, {} drops, {} snapshots, {}",
        crate::sanitize::terminal(&s.path.to_string_lossy()),
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        s.total,
        s.frames,
        crate::format::bytes(s.bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_reads_well() {
        let s = RecordSummary {
            path: "drops.dsr".into(),
            frames: 61,
            bytes: 123_456,
            elapsed: Duration::from_secs(61),
            total: 4_200,
        };
        assert_eq!(
            status_line(&s, Duration::from_secs(3723)),
            "recording drops.dsr: 01:02:03 elapsed, 4200 drops, 61 snapshots, 120.6 KiB"
        );
        assert_eq!(crate::format::bytes(999), "999 B");
        assert_eq!(crate::format::bytes(5 << 20), "5.0 MiB");
    }
}
