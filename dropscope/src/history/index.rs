//! The index kept beside each closed segment (`SEGMENT.idx`): what the catalog needs of a
//! segment (its session, first and last snapshot, how many, whether it ends with the end
//! marker) without reading it whole. Never trusted: every read checks it against the segment
//! itself (its length, its session frame and the checksums of the frames it points at), and an
//! index that does not match is set aside with a note and the segment read in full.
use std::{
    io::Read as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::{
    model::SessionInfo,
    record::{Peek, PeekedKind, Recording},
};

/// What an index's file name has after its segment's name.
pub const SUFFIX: &str = ".idx";
/// The version of the index's layout written here; others are read in full instead.
const FORMAT: u32 = 1;
/// An index is a few kilobytes: a larger file is not one (and is not read).
const MAX_BYTES: u64 = 256 << 10;
/// Totals an index keeps at most (one a minute of an hour's segment is 61).
pub const MAX_TOTALS: usize = 4096;
/// The step between the totals an index keeps, at least.
const TOTALS_STEP: Duration = Duration::from_secs(60);
/// Frames looked at before the first snapshot and after the last: the writer puts a handful
/// there (names, the kernel's counters, attribution, the end marker).
const MAX_WALK: usize = 16;
/// Warnings kept from the segment's reading, and their length.
const MAX_WARNINGS: usize = 8;
const MAX_WARNING_LEN: usize = 400;

/// The index of one segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentIndex {
    /// Layout version ([`FORMAT`]).
    pub format: u32,
    /// The segment's length in bytes when indexed.
    pub bytes: u64,
    /// Its session.
    pub info: SessionInfo,
    /// Byte offset and session time (ns) of its first snapshot frame.
    pub first_offset: u64,
    /// See `first_offset`.
    pub first_ns: u64,
    /// Byte offset and session time (ns) of its last snapshot frame.
    pub last_offset: u64,
    /// See `last_offset`.
    pub last_ns: u64,
    /// Snapshots it holds.
    pub snapshots: u64,
    /// Whether it ends with the end marker.
    pub finished: bool,
    /// What its reader found wrong with it (a cut tail).
    pub warnings: Vec<String>,
    /// The session's cumulative total at its first snapshot, then at the first at or after
    /// each minute of session time, and at its last: `[session time in ms, total]`, for the
    /// timeline strip (counts of windows are always read from the segment).
    pub totals: Vec<[u64; 2]>,
}

impl SegmentIndex {
    /// Session time of its first snapshot.
    pub fn first(&self) -> Duration {
        Duration::from_nanos(self.first_ns)
    }

    /// Session time of its last snapshot.
    pub fn last(&self) -> Duration {
        Duration::from_nanos(self.last_ns)
    }

    /// Whether its totals are in order (times and totals never going back), within its first
    /// and last snapshot, and as many as are kept at most.
    fn totals_in_order(&self) -> bool {
        let ms = |ns: u64| ns / 1_000_000;
        self.totals.len() <= MAX_TOTALS
            && self
                .totals
                .first()
                .is_some_and(|t| t[0] == ms(self.first_ns))
            && self.totals.last().is_some_and(|t| t[0] == ms(self.last_ns))
            && self
                .totals
                .windows(2)
                .all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1])
    }
}

/// The path of `segment`'s index.
pub fn path_of(segment: &Path) -> PathBuf {
    let mut p = segment.as_os_str().to_owned();
    p.push(SUFFIX);
    PathBuf::from(p)
}

/// The index of the recording `rec` read from a file of `bytes` bytes; `None` if it holds no
/// snapshot.
pub fn of_recording(rec: &Recording, bytes: u64) -> anyhow::Result<Option<SegmentIndex>> {
    let frames = rec.frames();
    let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
        return Ok(None);
    };
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let step = TOTALS_STEP.max((last.elapsed - first.elapsed) / (MAX_TOTALS as u32 - 2));
    let mut totals = Vec::new();
    let mut next = first.elapsed;
    for (i, f) in frames.iter().enumerate() {
        if f.elapsed >= next || i + 1 == frames.len() {
            totals.push([ms(f.elapsed), rec.snapshot_of(i)?.total]);
            next = f.elapsed + step;
        }
    }
    Ok(Some(SegmentIndex {
        format: FORMAT,
        bytes,
        info: rec.info().clone(),
        first_offset: first.offset,
        first_ns: ns(first.elapsed),
        last_offset: last.offset,
        last_ns: ns(last.elapsed),
        snapshots: frames.len() as u64,
        finished: rec.finished(),
        warnings: rec.warnings().iter().take(MAX_WARNINGS).cloned().collect(),
        totals,
    }))
}

/// Reads segment `segment` whole and writes its index beside it (replacing a stale one).
pub fn index_segment(segment: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::symlink_metadata(segment)
        .with_context(|| format!("reading {}", segment.display()))?
        .len();
    let rec = Recording::open(segment).with_context(|| format!("reading {}", segment.display()))?;
    let Some(idx) = of_recording(&rec, bytes)? else {
        return Ok(());
    };
    // Written to meanwhile (or not what was read): not indexed now.
    verify(segment, &idx).map_err(|why| anyhow::anyhow!("{}: {why}", segment.display()))?;
    write(segment, &idx)
}

/// Writes `idx` as `segment`'s index: a private temporary file (0600) in the same directory,
/// synced, then renamed into place; a file or link already there is removed first, never
/// written through.
pub fn write(segment: &Path, idx: &SegmentIndex) -> anyhow::Result<()> {
    let dir = segment
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let target = path_of(segment);
    let mut tmp = tempfile::Builder::new()
        .prefix(".index.")
        .suffix(".part")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    serde_json::to_writer(&mut tmp, idx)?;
    tmp.as_file().sync_data()?;
    match std::fs::remove_file(&target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", target.display())),
    }
    tmp.persist_noclobber(&target)
        .map_err(|e| e.error)
        .with_context(|| format!("naming {}", target.display()))?;
    Ok(())
}

/// What was found beside a segment.
#[derive(Debug)]
pub enum Loaded {
    /// An index that matches the segment.
    Verified(SegmentIndex),
    /// No index (the segment being written, or one from before indexes were kept).
    Missing,
    /// An index that does not match or does not read, and why: the segment is read in full.
    Rejected(String),
}

/// The index beside `segment`, checked against it.
pub fn load(segment: &Path) -> Loaded {
    let path = path_of(segment);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => return Loaded::Rejected(format!("does not open ({e})")),
    };
    match file.metadata() {
        Ok(m) if m.is_file() && m.len() <= MAX_BYTES => {}
        Ok(m) if m.is_file() => return Loaded::Rejected(format!("{} bytes: too large", m.len())),
        Ok(_) => return Loaded::Rejected("not a regular file".into()),
        Err(e) => return Loaded::Rejected(format!("does not open ({e})")),
    }
    let mut text = Vec::new();
    if let Err(e) = file.take(MAX_BYTES + 1).read_to_end(&mut text) {
        return Loaded::Rejected(format!("does not read ({e})"));
    }
    let idx: SegmentIndex = match serde_json::from_slice(&text) {
        Ok(i) => i,
        Err(e) => return Loaded::Rejected(format!("does not parse ({e})")),
    };
    if idx.format != FORMAT {
        return Loaded::Rejected(format!("layout {} is not {FORMAT}", idx.format));
    }
    match verify(segment, &idx) {
        Ok(()) => Loaded::Verified(clean(idx)),
        Err(why) => Loaded::Rejected(why),
    }
}

/// `idx` with its warnings bounded and made safe to show.
fn clean(mut idx: SegmentIndex) -> SegmentIndex {
    idx.warnings.truncate(MAX_WARNINGS);
    for w in &mut idx.warnings {
        let mut s = crate::sanitize::terminal(w).into_owned();
        if s.len() > MAX_WARNING_LEN {
            let mut end = MAX_WARNING_LEN;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
        }
        *w = s;
    }
    idx
}

/// Checks `idx` against the segment: the same length and session, no snapshot frame before
/// the first it names nor after the last, those two frames intact (checksums) at the session
/// times it gives, and the end marker exactly where it says.
pub fn verify(segment: &Path, idx: &SegmentIndex) -> Result<(), String> {
    let peek = Peek::open(segment).map_err(|e| format!("the segment does not open ({e})"))?;
    if peek.len() != idx.bytes {
        return Err(format!(
            "the segment is {} bytes, its index says {} (written to after it was indexed, or \
             replaced)",
            peek.len(),
            idx.bytes
        ));
    }
    if peek.info() != &idx.info {
        return Err("its session is not the segment's".into());
    }
    if idx.snapshots == 0
        || idx.first_ns > idx.last_ns
        || idx.first_offset > idx.last_offset
        || (idx.snapshots == 1) != (idx.first_offset == idx.last_offset)
        || idx.snapshots > idx.bytes
    {
        return Err("its first and last snapshots do not agree with each other".into());
    }
    if !idx.totals_in_order() {
        return Err("its totals are out of order".into());
    }
    let bad = |what: &str, e: &dyn std::fmt::Display| format!("{what} ({e})");
    // Up to the first snapshot: only frames beside the snapshots.
    let mut at = peek.after_info();
    for _ in 0..MAX_WALK {
        if at >= idx.first_offset {
            break;
        }
        let f = peek
            .frame(at)
            .map_err(|e| bad("a frame before its first snapshot does not read", &e))?;
        if f.kind != PeekedKind::Beside {
            return Err("the segment has a snapshot before the first its index names".into());
        }
        at = f.next;
    }
    if at != idx.first_offset {
        return Err("its first snapshot is not where the segment's is".into());
    }
    for (offset, ns, which) in [
        (idx.first_offset, idx.first_ns, "first"),
        (idx.last_offset, idx.last_ns, "last"),
    ] {
        let f = peek
            .frame(offset)
            .map_err(|e| bad(&format!("its {which} snapshot does not read"), &e))?;
        if f.kind != PeekedKind::Snapshot || f.elapsed != Duration::from_nanos(ns) {
            return Err(format!("its {which} snapshot is not the segment's"));
        }
        at = f.next;
    }
    // After the last snapshot: frames beside the snapshots, then the end marker (finished) or
    // the end of the file, or a frame cut short (a segment cut by a kill or a crash).
    for _ in 0..MAX_WALK {
        if at == idx.bytes {
            return if idx.finished {
                Err("it says the segment is finished, and it has no end marker".into())
            } else {
                Ok(())
            };
        }
        match peek.frame(at) {
            Ok(f) if f.kind == PeekedKind::Beside => at = f.next,
            Ok(f) if f.kind == PeekedKind::End && f.next == idx.bytes && idx.finished => {
                return Ok(());
            }
            Ok(_) => return Err("the segment goes on after the last snapshot it names".into()),
            // A full read stops there too: the segment was cut (a kill, a crash, a full disk).
            Err(_) if !idx.finished => return Ok(()),
            Err(e) => return Err(bad("a frame after its last snapshot does not read", &e)),
        }
    }
    Err("too many frames after its last snapshot".into())
}

/// Removes indexes whose segment is gone, then indexes the first closed segment (not
/// `current`, the one being written, nor one of `failed`) that has no index that matches; one
/// a call, so the writer is not long away. A segment that cannot be indexed joins `failed`.
pub fn sweep(
    dir: &Path,
    segments: &[super::dir::SegmentFile],
    current: Option<u64>,
    failed: &mut std::collections::HashSet<u64>,
) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(seg) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            if super::dir::parse_segment(seg).is_some()
                && !matches!(std::fs::symlink_metadata(dir.join(seg)), Ok(m) if m.is_file())
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let due = segments
        .iter()
        .filter(|s| Some(s.seq) != current && !failed.contains(&s.seq))
        .find(|s| !matches!(load(&s.path), Loaded::Verified(_)));
    if let Some(s) = due
        && let Err(e) = index_segment(&s.path)
    {
        failed.insert(s.seq);
        tracing::warn!("indexing a history segment: {e:#}");
    }
}
