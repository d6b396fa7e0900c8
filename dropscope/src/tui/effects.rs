//! The side effects the update function asks for: flamegraph files, recordings and the
//! comparisons of a history's windows.
use std::{
    path::{Path, PathBuf},
    time::SystemTime,
};

use anyhow::Context;
use tokio::sync::mpsc;

use super::{
    state::RecordingStatus,
    update::{FlameRequest, Msg},
};
use crate::{
    flamegraph::GraphMeta,
    format,
    model::{SessionInfo, Snapshot, StackCount},
    record::Recorder,
    sanitize,
};

/// The history `v` compares windows of, and the filter and grouping the replay applies (the
/// comparison applies them too).
#[derive(Clone, Debug)]
pub struct CompareSource {
    /// The history directory.
    pub dir: PathBuf,
    /// The drop filters of the command line.
    pub filter: crate::model::group::Filter,
    /// The grouping of the command line.
    pub by: Vec<crate::model::group::Dim>,
    /// The budget clauses of the command line, judged on the window shown.
    pub budget: Vec<crate::vocab::budget::Clause>,
}

/// Puts `command` on the clipboard through the terminal (OSC 52): base64, so nothing in it
/// reaches the terminal as a control sequence.
pub fn copy(command: &str) -> std::io::Result<()> {
    use base64::Engine as _;
    use std::io::Write as _;
    let data = base64::engine::general_purpose::STANDARD.encode(command);
    let mut out = std::io::stdout().lock();
    write!(out, "\x1b]52;c;{data}\x07")?;
    out.flush()
}

/// Writes the flamegraph off the event loop; its path or error comes back as a status message.
pub fn spawn_flamegraph(
    req: FlameRequest,
    info: &SessionInfo,
    dir: &Path,
    done: mpsc::UnboundedSender<Msg>,
) {
    let info = info.clone();
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let meta = GraphMeta {
            info: &info,
            window: req.window,
            filter: req.filter.as_deref(),
        };
        let msg = match write_flamegraph(&req.stacks, &meta, &dir, SystemTime::now()) {
            Ok(path) => format!(
                "flamegraph written to {}",
                sanitize::terminal(&path.to_string_lossy())
            ),
            Err(e) => format!(
                "flamegraph not written: {}",
                sanitize::terminal(&format!("{e:#}"))
            ),
        };
        let _ = done.send(Msg::Status(msg));
    });
}

/// Compares the window `now` of the history with the same window `vs` earlier off the event
/// loop (it reads segments); the comparison or its error comes back as a message.
pub fn spawn_compare(
    src: CompareSource,
    now: crate::history::range::Window,
    vs: std::time::Duration,
    done: mpsc::UnboundedSender<Msg>,
) {
    tokio::task::spawn_blocking(move || {
        let alpha = crate::model::compare::DEFAULT_ALPHA;
        let result = crate::history::compare::compare_window(
            &src.dir,
            now,
            vs,
            (&src.filter, &src.by),
            alpha,
            &src.budget,
        )
        .map_err(|e| sanitize::terminal(&format!("{e:#}")).into_owned());
        let _ = done.send(Msg::Compared(Box::new(result)));
    });
}

/// Replaying a history: how a jump (`t` to a time past the window replayed) opens the window
/// around that time, as a feed filtered and grouped as the replay is.
#[derive(Clone)]
pub struct JumpSource(pub std::sync::Arc<dyn Fn(u64) -> anyhow::Result<Jumped> + Send + Sync>);

impl std::fmt::Debug for JumpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JumpSource")
    }
}

/// The window a jump opened.
pub struct Jumped {
    /// Its replay.
    pub feed: crate::source::Feed,
    /// The history's strip, with the new window's start, clock and gaps.
    pub timeline: crate::history::timeline::Timeline,
    /// Notes on the history (refused segments, a clock set back).
    pub notes: Vec<String>,
}

/// Opens the window around wall time `at_ms` off the event loop (it reads and copies
/// segments); the window, or why there is none, comes back on `done`.
pub fn spawn_jump(
    src: JumpSource,
    at_ms: u64,
    done: mpsc::UnboundedSender<(u64, Result<Jumped, String>)>,
) {
    tokio::task::spawn_blocking(move || {
        let result = (src.0)(at_ms).map_err(|e| sanitize::terminal(&format!("{e:#}")).into_owned());
        let _ = done.send((at_ms, result));
    });
}

/// Writes a flamegraph of `stacks` into `dir`, named as the flamegraph command names its
/// snapshots (UTC, as recordings): see [`crate::flamegraph::snapshot::snapshot_svg`].
pub(super) fn write_flamegraph(
    stacks: &[StackCount],
    meta: &GraphMeta,
    dir: &Path,
    now: SystemTime,
) -> anyhow::Result<PathBuf> {
    crate::flamegraph::snapshot::snapshot_svg(stacks, meta, dir, now)
}

/// A recording started with `r`.
pub struct ActiveRecording {
    recorder: Recorder,
    stem: PathBuf,
}

/// `stem.dsrec`, then `stem-1.dsrec`, ... up to `stem-999.dsrec`.
fn names(stem: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    (0..1000).map(move |n| {
        let mut name = stem.as_os_str().to_owned();
        if n > 0 {
            name.push(format!("-{n}"));
        }
        name.push(".dsrec");
        PathBuf::from(name)
    })
}

impl ActiveRecording {
    /// Starts a recording in `dir` and writes `latest`, if any, as its first frame.
    ///
    /// It is written to a private temporary file and gets its timestamped name (the first one
    /// that nothing has, not even a dangling symlink) when stopped.
    pub fn start(
        dir: &Path,
        info: &SessionInfo,
        latest: Option<&Snapshot>,
    ) -> anyhow::Result<Self> {
        let stem = dir.join(format!(
            "dropscope-{}",
            crate::format::file_stamp(SystemTime::now())
        ));
        let path = names(&stem)
            .find(|p| std::fs::symlink_metadata(p).is_err())
            .context("no free recording file name")?;
        let recorder = Recorder::create(&path, info, false)
            .with_context(|| format!("creating {}", sanitize::terminal(&path.to_string_lossy())))?;
        let mut rec = Self { recorder, stem };
        if let Some(s) = latest {
            rec.write(s)?;
        }
        Ok(rec)
    }

    /// Appends one snapshot.
    pub fn write(&mut self, snap: &Snapshot) -> anyhow::Result<()> {
        let path = self.recorder.path().to_string_lossy().into_owned();
        self.recorder
            .write(snap)
            .with_context(|| format!("recording to {}", sanitize::terminal(&path)))
    }

    /// Where it will be saved.
    pub fn path(&self) -> &Path {
        self.recorder.path()
    }

    /// File name and size, for the header.
    pub fn status(&self) -> RecordingStatus {
        RecordingStatus {
            name: self.path().file_name().map_or_else(String::new, |n| {
                sanitize::terminal(&n.to_string_lossy()).into_owned()
            }),
            bytes: self.recorder.bytes_written(),
        }
    }

    /// Finishes the file and gives it its name; says where it is, or what went wrong.
    pub fn stop(self) -> String {
        let size = format::bytes(self.recorder.bytes_written());
        let chosen = self.recorder.path().to_path_buf();
        // The chosen name first, then the next free ones if it was taken meanwhile.
        let candidates: Vec<PathBuf> = std::iter::once(chosen.clone())
            .chain(names(&self.stem).filter(|p| *p != chosen))
            .collect();
        match self.recorder.finish_first_free(candidates) {
            Ok(path) => format!(
                "recording saved to {} ({size})",
                sanitize::terminal(&path.to_string_lossy())
            ),
            Err(e) => format!(
                "recording {} not saved: {}",
                sanitize::terminal(&chosen.to_string_lossy()),
                sanitize::terminal(&e.to_string())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn stamps_are_utc_and_file_friendly() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(crate::format::file_stamp(t), "20231114-221320Z");
    }

    #[test]
    fn recordings_get_fresh_names_and_their_size_shows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = SessionInfo::default();
        let snap = Snapshot::default();
        let a = ActiveRecording::start(dir.path(), &info, Some(&snap)).expect("start");
        let b = ActiveRecording::start(dir.path(), &info, None).expect("start");
        assert!(a.status().name.ends_with(".dsrec"));
        assert!(a.status().bytes > 0);
        // Both may have picked the same free name; the second one stopped takes the next.
        let (sa, sb) = (a.stop(), b.stop());
        assert!(sa.starts_with("recording saved to "), "{sa}");
        assert!(sb.starts_with("recording saved to "), "{sb}");
        assert_ne!(sa, sb);
        let files: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert_eq!(files.len(), 2, "two recordings, no temporary file");
    }

    #[test]
    fn a_planted_symlink_is_skipped_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        let stem = dir.path().join(format!(
            "dropscope-{}",
            crate::format::file_stamp(SystemTime::now())
        ));
        // Dangling symlinks at the next few names (exists() is false for them).
        for p in names(&stem).take(3) {
            std::os::unix::fs::symlink(&victim, p).expect("symlink");
        }
        let rec = ActiveRecording::start(dir.path(), &SessionInfo::default(), None).expect("start");
        let msg = rec.stop();
        assert!(msg.contains("-3.dsrec"), "{msg}");
        assert!(!victim.exists(), "written through a symlink");
    }
}
