//! The history writer: a thread of its own that writes the snapshot stream into segments,
//! rotates them, prunes old ones, and pauses (then resumes by itself) when the disk refuses.
//!
//! The feed reaches it through a bounded queue written with `try_send`: a slow or stuck disk
//! never holds up the poll path or `/metrics`; a snapshot it cannot queue is counted as skipped
//! (snapshots are cumulative, so a skipped one costs resolution, never counts).
use std::{
    fs::File,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{Receiver, SyncSender, sync_channel},
    },
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

use super::{
    HistoryOptions, compact,
    dir::{self, DirLock},
    index, retention,
};
use crate::{
    model::{SessionInfo, Snapshot},
    record::Recorder,
    source::Feed,
};

/// Snapshots queued for the writer at most.
const QUEUE: usize = 64;
/// How long history stays paused after a failure before the writer tries again.
pub const RETRY: Duration = Duration::from_secs(10);
/// How often retention is applied besides at each new segment.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// The writer's state, shared with `/metrics`.
#[derive(Debug, Default)]
pub struct Status {
    paused: AtomicBool,
    skipped: AtomicU64,
    bytes: AtomicU64,
    segments: AtomicU64,
}

/// One reading of [`Status`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusView {
    /// Whether writing is paused (the disk refused a write; retried every 10 s).
    pub paused: bool,
    /// Snapshots not written: the queue was full or history was paused.
    pub skipped: u64,
    /// Bytes the history's segments take on disk.
    pub bytes: u64,
    /// Segments in the directory.
    pub segments: u64,
}

impl Status {
    /// What it says now.
    pub fn view(&self) -> StatusView {
        StatusView {
            paused: self.paused.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            segments: self.segments.load(Ordering::Relaxed),
        }
    }

    fn skip(&self) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }
}

/// A history directory opened for writing: created, locked, pruned; not yet writing.
pub struct HistoryWriter {
    opts: HistoryOptions,
    lock: DirLock,
    status: Arc<Status>,
}

/// The running writer: the task that feeds it and its thread.
pub struct Running {
    task: tokio::task::JoinHandle<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Running {
    /// Waits until the feed has ended and the last segment is finished (end marker, synced).
    pub async fn finish(self) {
        let _ = self.task.await;
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
    }
}

impl HistoryWriter {
    /// Creates (0700, never through a symlink) and locks the directory, and prunes it once.
    pub fn open(opts: HistoryOptions) -> anyhow::Result<HistoryWriter> {
        dir::create_dir(&opts.dir)?;
        let lock = DirLock::take(&opts.dir)?;
        let status = Arc::new(Status::default());
        let w = HistoryWriter { opts, lock, status };
        let mut seg = Segments::new(&w.opts, Arc::clone(&w.status));
        seg.prune(None);
        Ok(w)
    }

    /// The directory written.
    pub fn dir(&self) -> &std::path::Path {
        &self.opts.dir
    }

    /// The writer's state, for `/metrics`.
    pub fn status(&self) -> Arc<Status> {
        Arc::clone(&self.status)
    }

    /// Starts writing every snapshot of `feed`; returns the same feed for the other consumers.
    pub fn tee(self, mut feed: Feed) -> anyhow::Result<(Feed, Running)> {
        let (tx, rx) = sync_channel::<Snapshot>(QUEUE);
        let (out_tx, out_rx) = mpsc::channel(4);
        let info = feed.info.clone();
        let HistoryWriter { opts, lock, status } = self;
        let thread_status = Arc::clone(&status);
        let thread = std::thread::Builder::new()
            .name("history".into())
            .spawn(move || {
                let _lock = lock;
                write_all(&rx, &info, Segments::new(&opts, thread_status));
            })
            .map_err(|e| anyhow::Error::new(e).context("starting the history writer"))?;
        let mut input = std::mem::replace(&mut feed.snapshots, out_rx);
        let task = tokio::spawn(async move {
            let mut out = Some(out_tx);
            while let Some(s) = input.recv().await {
                offer(&tx, &status, &s);
                if let Some(o) = &out
                    && o.send(s).await.is_err()
                {
                    // The other consumers are gone; the writer still gets the last snapshots.
                    out = None;
                }
            }
        });
        Ok((feed, Running { task, thread }))
    }
}

/// Queues a copy of `s` for the writer without waiting.
fn offer(tx: &SyncSender<Snapshot>, status: &Status, s: &Snapshot) {
    // Full (the writer is behind) or gone: the snapshot is not written, and counted.
    if tx.try_send(s.clone()).is_err() {
        status.skip();
    }
}

/// The segment being written.
struct Open {
    recorder: Recorder,
    file: File,
    path: PathBuf,
    seq: u64,
    opened: Instant,
    snapshots: u64,
}

/// The writer's segments: the open one, the next number, and whether paused.
struct Segments {
    dir: PathBuf,
    keep: retention::Retention,
    length: Duration,
    full: Duration,
    retry: Duration,
    status: Arc<Status>,
    open: Option<Open>,
    next_seq: u64,
    retry_at: Option<Instant>,
    last_prune: Instant,
    /// Bytes of the closed segments at the last listing.
    closed_bytes: u64,
    /// Segments that could not be indexed (not tried again by this writer).
    unindexed: std::collections::HashSet<u64>,
}

impl Segments {
    fn new(opts: &HistoryOptions, status: Arc<Status>) -> Segments {
        Segments {
            dir: opts.dir.clone(),
            keep: opts.retention,
            length: opts.segment,
            full: opts.full_resolution,
            retry: RETRY,
            status,
            open: None,
            next_seq: 1,
            retry_at: None,
            last_prune: Instant::now(),
            closed_bytes: 0,
            unindexed: Default::default(),
        }
    }

    /// Applies retention and counts what remains.
    fn prune(&mut self, current: Option<u64>) {
        self.last_prune = Instant::now();
        if let Err(e) = retention::prune(&self.dir, current, dir::now_unix_ms(), self.keep) {
            tracing::warn!("history retention: {e:#}");
        }
        self.compact_one(current);
        if let Ok(l) = dir::list(&self.dir) {
            index::sweep(&self.dir, &l.segments, current, &mut self.unindexed);
            if let Some(last) = l.segments.last() {
                self.next_seq = self.next_seq.max(last.seq.saturating_add(1));
            }
            self.closed_bytes = (l.segments.iter())
                .filter(|s| Some(s.seq) != current)
                .map(|s| s.bytes)
                .sum();
            self.status
                .segments
                .store(l.segments.len() as u64, Ordering::Relaxed);
        }
        self.publish_bytes();
    }

    /// Makes the oldest segment due coarse (one a pass, so the writer is not long away).
    fn compact_one(&mut self, current: Option<u64>) {
        let Ok(l) = dir::list(&self.dir) else { return };
        let now = dir::now_unix_ms();
        let Some(i) = compact::next_to_compact(&l.segments, current, now, self.full) else {
            return;
        };
        if let Err(e) = compact::compact(&self.dir, &l.segments[i]) {
            tracing::warn!("making a history segment coarse: {e:#}");
        }
    }

    fn publish_bytes(&self) {
        let open = self.open.as_ref().map_or(0, |o| o.recorder.bytes_written());
        self.status
            .bytes
            .store(self.closed_bytes + open, Ordering::Relaxed);
    }

    /// Opens the next segment for a session of `info`.
    fn start(&mut self, info: &SessionInfo) -> anyhow::Result<()> {
        // After the segments already there (an earlier run's), in order of writing.
        if let Some(last) = dir::list(&self.dir)?.segments.last() {
            self.next_seq = self.next_seq.max(last.seq.saturating_add(1));
        }
        let (seq, name, file) = loop {
            let seq = self.next_seq;
            self.next_seq += 1;
            let name = dir::segment_name(seq, dir::now_unix_ms());
            match dir::create_segment(&self.dir, &name) {
                Ok(file) => break (seq, name, file),
                // Something took the name meanwhile: the next number.
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists && !seq.is_multiple_of(16) => {
                }
                Err(e) => {
                    let path = self.dir.join(&name);
                    return Err(
                        anyhow::Error::new(e).context(format!("creating {}", path.display()))
                    );
                }
            }
        };
        let path = self.dir.join(&name);
        let started = file
            .try_clone()
            .map_err(anyhow::Error::new)
            .and_then(|clone| Ok(Recorder::to_stream(Box::new(clone), info)?));
        match started {
            Ok(recorder) => {
                self.open = Some(Open {
                    recorder,
                    file,
                    path,
                    seq,
                    opened: Instant::now(),
                    snapshots: 0,
                });
                self.prune(Some(seq));
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e.context(format!("writing {}", path.display())))
            }
        }
    }

    /// Ends the open segment: end marker and sync when `clean`, else kept as it is (it reads
    /// up to its last complete frame), or removed when it holds no snapshot.
    fn close(&mut self, clean: bool) {
        let Some(o) = self.open.take() else { return };
        if o.snapshots == 0 {
            let _ = std::fs::remove_file(&o.path);
            return;
        }
        if clean {
            if let Err(e) = o.recorder.finish() {
                tracing::warn!("finishing the history segment {}: {e}", o.path.display());
            }
            let _ = o.file.sync_data();
            // Closed: indexed now, so readers need not read it whole.
            if let Err(e) = index::index_segment(&o.path) {
                tracing::warn!("indexing the history segment: {e:#}");
            }
        }
    }

    /// Writes `s`, opening a segment first if none is open, pausing on failure.
    fn write(&mut self, info: &SessionInfo, s: &Snapshot) {
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.opened.elapsed() >= self.length)
        {
            self.close(true);
        }
        if self.open.is_none() {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                self.status.skip();
                return;
            }
            if let Err(e) = self.start(info) {
                self.pause(&e);
                self.status.skip();
                return;
            }
        } else if self.last_prune.elapsed() >= PRUNE_EVERY {
            let current = self.open.as_ref().map(|o| o.seq);
            self.prune(current);
        }
        let Some(o) = self.open.as_mut() else { return };
        match o.recorder.write(s) {
            Ok(()) => {
                o.snapshots += 1;
                if self.retry_at.take().is_some() {
                    self.status.paused.store(false, Ordering::Relaxed);
                    eprintln!(
                        "dropscope: history resumed in {}",
                        crate::sanitize::terminal(&o.path.to_string_lossy())
                    );
                }
                self.publish_bytes();
            }
            Err(e) => {
                let e = anyhow::Error::new(e).context(format!("writing {}", o.path.display()));
                self.close(false);
                self.pause(&e);
                self.status.skip();
            }
        }
    }

    /// Pauses history for [`RETRY`], saying so once.
    fn pause(&mut self, e: &anyhow::Error) {
        if self.retry_at.is_none() {
            eprintln!(
                "dropscope: history paused: {}; counting and /metrics go on, and writing is \
                 retried every {} s",
                crate::sanitize::terminal(&format!("{e:#}")),
                RETRY.as_secs()
            );
        }
        self.status.paused.store(true, Ordering::Relaxed);
        self.retry_at = Some(Instant::now() + self.retry);
    }
}

/// Writes every snapshot that arrives until the queue's sender is gone, then finishes.
fn write_all(rx: &Receiver<Snapshot>, info: &SessionInfo, mut segs: Segments) {
    while let Ok(s) = rx.recv() {
        segs.write(info, &s);
    }
    segs.close(true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Recording, synthetic};

    fn opts(dir: &std::path::Path, segment: Duration) -> HistoryOptions {
        HistoryOptions {
            dir: dir.to_path_buf(),
            retention: retention::Retention::default(),
            segment,
            full_resolution: super::super::DEFAULT_FULL_RESOLUTION,
        }
    }

    #[test]
    fn each_segment_reads_on_its_own_and_counts_continue_across_them() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let snaps = synthetic::snapshots(5, 2, 10, 6);
        let info = SessionInfo::default();
        // A zero length: every snapshot opens a segment of its own.
        let mut segs = Segments::new(&opts(tmp.path(), Duration::ZERO), Arc::default());
        for s in &snaps {
            segs.write(&info, s);
        }
        // Killed: the last segment is left without its end marker.
        let last = segs.open.take().expect("open");
        drop(last);
        let listing = dir::list(tmp.path()).expect("list");
        assert_eq!(
            listing.segments.iter().map(|s| s.seq).collect::<Vec<_>>(),
            (1..=6).collect::<Vec<_>>()
        );
        for (seg, snap) in listing.segments.iter().zip(&snaps) {
            let rec = Recording::open(&seg.path).expect("a segment reads on its own");
            assert_eq!(rec.len(), 1);
            assert_eq!(rec.snapshot_of(0).expect("snapshot").total, snap.total);
            assert_eq!(rec.finished(), seg.seq != 6, "{}", seg.path.display());
            // Closed segments are indexed as they close; the cut one is not (yet).
            let indexed = matches!(index::load(&seg.path), index::Loaded::Verified(_));
            assert_eq!(indexed, seg.seq != 6, "{}", seg.path.display());
        }
    }

    #[test]
    fn a_new_run_numbers_its_segments_after_the_last_ones_there() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(tmp.path().join(dir::segment_name(41, 0)), b"earlier").expect("w");
        let mut segs = Segments::new(&opts(tmp.path(), Duration::from_secs(3600)), Arc::default());
        segs.write(
            &SessionInfo::default(),
            &synthetic::snapshots(2, 1, 1, 1)[0],
        );
        assert_eq!(segs.open.as_ref().map(|o| o.seq), Some(42));
    }

    #[test]
    fn a_refusing_disk_pauses_history_and_it_resumes_by_itself() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("h");
        dir::create_dir(&dir).expect("mkdir");
        let status = Arc::new(Status::default());
        let mut segs = Segments::new(&opts(&dir, Duration::from_secs(3600)), Arc::clone(&status));
        segs.retry = Duration::ZERO;
        let snaps = synthetic::snapshots(5, 2, 10, 4);
        let info = SessionInfo::default();
        segs.write(&info, &snaps[0]);
        assert!(!status.view().paused);
        // The directory goes away under the writer: the next segment cannot be created.
        segs.close(true);
        std::fs::remove_dir_all(&dir).expect("rm");
        segs.write(&info, &snaps[1]);
        let v = status.view();
        assert!(v.paused, "{v:?}");
        assert_eq!(v.skipped, 1);
        dir::create_dir(&dir).expect("mkdir again");
        segs.write(&info, &snaps[2]);
        let v = status.view();
        assert!(!v.paused, "{v:?}");
        assert_eq!(v.skipped, 1);
        segs.close(true);
        let listing = dir::list(&dir).expect("list");
        assert_eq!(listing.segments.len(), 1);
        let rec = Recording::open(&listing.segments[0].path).expect("open");
        assert_eq!(rec.snapshot_of(0).expect("snapshot").total, snaps[2].total);
    }
}
