//! The side effects the update function asks for: flamegraph files and recordings.
use std::{
    path::{Path, PathBuf},
    time::SystemTime,
};

use anyhow::Context;
use tokio::sync::mpsc;

use super::{
    format,
    state::RecordingStatus,
    update::{FlameRequest, Msg},
};
use crate::{
    flamegraph::{GraphMeta, snapshot_svg},
    model::{SessionInfo, Snapshot},
    record::Recorder,
};

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
        let msg = match snapshot_svg(&req.stacks, &meta, &dir) {
            Ok(path) => format!("flamegraph written to {}", path.display()),
            Err(e) => format!("flamegraph not written: {e:#}"),
        };
        let _ = done.send(Msg::Status(msg));
    });
}

/// `YYYYmmdd-HHMMSSZ` in UTC.
fn stamp(now: SystemTime) -> String {
    humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter_map(|c| match c {
            '0'..='9' | 'Z' => Some(c),
            'T' => Some('-'),
            _ => None,
        })
        .collect()
}

/// A recording started with `r`.
pub struct ActiveRecording {
    recorder: Recorder,
    path: PathBuf,
}

impl ActiveRecording {
    /// Creates a new timestamped file in `dir` and writes `latest`, if any, as its first frame.
    pub fn start(
        dir: &Path,
        info: &SessionInfo,
        latest: Option<&Snapshot>,
    ) -> anyhow::Result<Self> {
        let stem = format!("dropscope-{}", stamp(SystemTime::now()));
        let path = (0..1000)
            .map(|n| match n {
                0 => dir.join(format!("{stem}.dsrec")),
                n => dir.join(format!("{stem}-{n}.dsrec")),
            })
            .find(|p| !p.exists())
            .context("no free recording file name")?;
        let recorder = Recorder::create(&path, info)
            .with_context(|| format!("creating {}", path.display()))?;
        let mut rec = Self { recorder, path };
        if let Some(s) = latest {
            rec.write(s)?;
        }
        Ok(rec)
    }

    /// Appends one snapshot.
    pub fn write(&mut self, snap: &Snapshot) -> anyhow::Result<()> {
        self.recorder
            .write(snap)
            .with_context(|| format!("recording to {}", self.path.display()))
    }

    /// Where it records to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File name and size, for the header.
    pub fn status(&self) -> RecordingStatus {
        RecordingStatus {
            name: self
                .path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            bytes: self.recorder.bytes_written(),
        }
    }

    /// Finishes the file; says where it is, or what went wrong.
    pub fn stop(self) -> String {
        let size = format::bytes(self.recorder.bytes_written());
        let path = self.path.display().to_string();
        match self.recorder.finish() {
            Ok(()) => format!("recording saved to {path} ({size})"),
            Err(e) => format!("recording {path} not finished cleanly: {e}"),
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
        assert_eq!(stamp(t), "20231114-221320Z");
    }

    #[test]
    fn recordings_get_fresh_names_and_their_size_shows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let info = SessionInfo::default();
        let snap = Snapshot::default();
        let a = ActiveRecording::start(dir.path(), &info, Some(&snap)).expect("start");
        let b = ActiveRecording::start(dir.path(), &info, None).expect("start");
        assert_ne!(a.path(), b.path());
        assert!(a.status().name.ends_with(".dsrec"));
        assert!(a.status().bytes > 0);
        assert!(a.stop().starts_with("recording saved to "));
        assert!(b.stop().contains(".dsrec"));
    }
}
