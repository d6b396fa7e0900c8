//! Reading recordings: validate and index on open, decode snapshots on demand from keyframes.
use std::{fs::File, os::unix::fs::FileExt, path::Path, sync::Arc, time::Duration};

use super::{
    budget::{Limit, MAX_CHAIN_BYTES, MAX_DELTAS, Spent},
    decode::{Cursor, DictError, Dictionary, Frames},
    error::RecordError,
    format::{
        FILE_HEADER_LEN, FLAG_LZ4, FRAME_HEADER_LEN, FrameHeader, HeaderProblem, Kind, MAGIC,
        Malformed, Reader, VERSION, unpack,
    },
    index::{FrameInfo, corrupt},
    kernel_delta::MAX_CHAIN,
    spool::Spool,
};
use crate::model::{SessionInfo, Snapshot};

/// A kind of frame beside the snapshot frames: its size limit and what is said of it.
struct Side {
    max: usize,
    early: &'static str,
    too_large: &'static str,
}

impl Side {
    const KERNEL: Side = Side {
        max: super::kernel::MAX_KERNEL_FRAME,
        early: "a kernel frame in a recording before its version",
        too_large: "a kernel frame beyond 1 MiB",
    };
    const ATTRIBUTION: Side = Side {
        max: super::attribution::MAX_FRAME,
        early: "an attribution frame in a recording before its version",
        too_large: "an attribution frame beyond 1 MiB",
    };
}

/// Where the bytes are: a file read with `pread`, memory, or a stream spooled to a file.
pub(super) enum Storage {
    File(File),
    Bytes(Vec<u8>),
    Spool(File, Arc<Spool>),
}

impl Storage {
    pub(super) fn len(&self) -> Result<u64, RecordError> {
        Ok(match self {
            Storage::File(f) => f.metadata()?.len(),
            Storage::Bytes(b) => b.len() as u64,
            Storage::Spool(_, s) => s.status().0,
        })
    }

    /// Fills `buf` from `offset`; the caller has checked the range against the length.
    pub(super) fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), RecordError> {
        match self {
            Storage::File(f) | Storage::Spool(f, _) => f.read_exact_at(buf, offset)?,
            Storage::Bytes(b) => {
                let src = usize::try_from(offset)
                    .ok()
                    .and_then(|o| b.get(o..o.checked_add(buf.len())?))
                    .ok_or(RecordError::Truncated { offset })?;
                buf.copy_from_slice(src);
            }
        }
        Ok(())
    }
}

/// An opened recording: its session, an index of its valid frames, and what was wrong with it.
///
/// Opening reads the file once to check every frame's checksum and to learn the names it
/// defines; snapshots are decoded on demand, each from the nearest keyframe before it.
pub struct Recording {
    storage: Storage,
    info: SessionInfo,
    frames: Vec<FrameInfo>,
    /// Kernel frames (readings of the kernel's counters, whole or as deltas), in order.
    kernel_frames: Vec<FrameInfo>,
    /// The reading the kernel frames so far make, and its size: each delta is checked against
    /// it on opening.
    kernel_now: Option<(crate::model::KernelReading, usize)>,
    /// The attribution of the frames read so far (an attribution delta applies to it).
    attribution_now: Option<super::attribution::Attribution>,
    /// Attribution frames (version 8 on: rulesets, attached programs, listeners), in order.
    attribution_frames: Vec<FrameInfo>,
    pub(super) dict: Dictionary,
    spent: Spent,
    /// Decompressed bytes of the last keyframe and the deltas after it.
    chain_bytes: u64,
    warnings: Vec<String>,
    finished: bool,
    /// Where the next frame to index starts, and the length indexed up to.
    next: u64,
    seen: u64,
    /// No more frames will be indexed (the input ended, was damaged or finished).
    done: bool,
    /// Where the bytes indexed so far are published (see [`Recording::open_counting`]).
    indexed: Option<Arc<std::sync::atomic::AtomicU64>>,
}

fn over(offset: u64, l: Limit) -> RecordError {
    RecordError::OverBudget {
        offset,
        what: l.what,
        max: l.max,
    }
}

/// Decompressed length of a stored payload (the varint in front of a compressed one).
fn raw_len(flags: u8, stored: &[u8]) -> Result<usize, &'static str> {
    if flags & FLAG_LZ4 == 0 {
        return Ok(stored.len());
    }
    let n = Reader::new(stored)
        .uvarint()
        .map_err(|_| "bad compressed length")?;
    usize::try_from(n).map_err(|_| "implausible compressed length")
}

/// Reads frame `offset`'s header; `Ok(None)` when fewer than a header's bytes remain.
pub(super) fn read_header(
    s: &Storage,
    offset: u64,
    file_len: u64,
) -> Result<Option<([u8; FRAME_HEADER_LEN], FrameHeader)>, RecordError> {
    if file_len.saturating_sub(offset) < FRAME_HEADER_LEN as u64 {
        return Ok(None);
    }
    let mut raw = [0u8; FRAME_HEADER_LEN];
    s.read_at(offset, &mut raw)?;
    match FrameHeader::parse(&raw) {
        Ok(h) => Ok(Some((raw, h))),
        Err(HeaderProblem::Invalid(why)) => Err(corrupt(offset, why)),
        Err(HeaderProblem::TooLong(_)) => Err(corrupt(offset, "frame length beyond the limit")),
    }
}

/// Reads and checks frame `offset`'s stored payload; `Ok(None)` when the file ends inside it.
pub(super) fn read_payload(
    s: &Storage,
    offset: u64,
    file_len: u64,
    raw: &[u8; FRAME_HEADER_LEN],
    h: &FrameHeader,
) -> Result<Option<Vec<u8>>, RecordError> {
    let start = offset + FRAME_HEADER_LEN as u64;
    if file_len.saturating_sub(start) < u64::from(h.len) {
        return Ok(None);
    }
    let mut payload = vec![0u8; h.len as usize];
    s.read_at(start, &mut payload)?;
    if !h.crc_matches(raw, &payload) {
        return Err(corrupt(offset, "checksum mismatch"));
    }
    Ok(Some(payload))
}

fn read_info(payload: &[u8]) -> Result<SessionInfo, Malformed> {
    let mut r = Reader::new(payload);
    let host = r.str()?.to_owned();
    let kernel = r.str()?.to_owned();
    let started_unix_ms = r.uvarint()?;
    let probe = r.str()?.to_owned();
    r.finish()?;
    Ok(SessionInfo {
        host,
        kernel,
        started_unix_ms,
        probe,
    })
}

/// Checks a recording's file header and reads its session information frame: the session,
/// the format version, and where the frame after it starts.
pub(super) fn read_head(
    storage: &Storage,
    file_len: u64,
) -> Result<(SessionInfo, u16, u64), RecordError> {
    let mut head = [0u8; FILE_HEADER_LEN];
    let have = file_len.min(FILE_HEADER_LEN as u64) as usize;
    storage.read_at(0, &mut head[..have])?;
    let m = have.min(MAGIC.len());
    if head[..m] != MAGIC[..m] {
        return Err(RecordError::NotARecording);
    }
    if have < FILE_HEADER_LEN {
        return Err(RecordError::Truncated { offset: file_len });
    }
    let version = u16::from_le_bytes([head[MAGIC.len()], head[MAGIC.len() + 1]]);
    if version > VERSION {
        return Err(RecordError::NewerVersion {
            found: version,
            supported: VERSION,
        });
    }
    if version == 0 {
        return Err(corrupt(MAGIC.len() as u64, "format version 0"));
    }

    let offset = FILE_HEADER_LEN as u64;
    let (raw, h) =
        read_header(storage, offset, file_len)?.ok_or(RecordError::Truncated { offset })?;
    if h.kind != Kind::Info {
        return Err(corrupt(offset, "the session information frame is missing"));
    }
    let payload = read_payload(storage, offset, file_len, &raw, &h)?
        .ok_or(RecordError::Truncated { offset })?;
    let info = unpack(h.flags, &payload)
        .map_err(|why| corrupt(offset, why))
        .and_then(|p| read_info(&p).map_err(|Malformed(why)| corrupt(offset, why)))?;

    Ok((
        info,
        version,
        offset + FRAME_HEADER_LEN as u64 + u64::from(h.len),
    ))
}

impl Recording {
    /// Opens and indexes a recording file. A damaged file opens with the valid frames before
    /// the damage and a warning; only a file that is not a recording at all is an error.
    pub fn open(path: &Path) -> Result<Recording, RecordError> {
        Self::open_counting(path, None)
    }

    /// [`Recording::open`], storing in `indexed` how many bytes are indexed so far (for a
    /// progress line while a large file is read).
    pub fn open_counting(
        path: &Path,
        indexed: Option<Arc<std::sync::atomic::AtomicU64>>,
    ) -> Result<Recording, RecordError> {
        let file = File::open(path)?;
        if !file.metadata()?.is_file() {
            return Err(RecordError::NotARecording);
        }
        Self::load_counting(Storage::File(file), indexed)
    }

    /// Opens a recording held in memory.
    pub fn from_bytes(bytes: &[u8]) -> Result<Recording, RecordError> {
        Self::load(Storage::Bytes(bytes.to_vec()))
    }

    /// Opens what a stream has spooled so far; `Truncated` while its header is incomplete.
    pub(super) fn load_stream(file: &File, spool: &Arc<Spool>) -> Result<Recording, RecordError> {
        Self::load(Storage::Spool(file.try_clone()?, spool.clone()))
    }

    fn load(storage: Storage) -> Result<Recording, RecordError> {
        Self::load_counting(storage, None)
    }

    fn load_counting(
        storage: Storage,
        indexed: Option<Arc<std::sync::atomic::AtomicU64>>,
    ) -> Result<Recording, RecordError> {
        let file_len = storage.len()?;
        let (info, version, next) = read_head(&storage, file_len)?;
        let mut rec = Recording {
            storage,
            info,
            frames: Vec::new(),
            kernel_frames: Vec::new(),
            kernel_now: None,
            attribution_now: None,
            attribution_frames: Vec::new(),
            dict: Dictionary::new(version),
            spent: Spent::default(),
            chain_bytes: 0,
            warnings: Vec::new(),
            finished: false,
            next,
            seen: 0,
            done: false,
            indexed,
        };
        rec.refresh()?;
        Ok(rec)
    }

    pub(super) fn spool(&self) -> Option<&Arc<Spool>> {
        match &self.storage {
            Storage::Spool(_, s) => Some(s),
            _ => None,
        }
    }

    /// Bytes of the input indexed so far (all of it, unless it is a stream still growing).
    pub(super) fn seen_len(&self) -> u64 {
        self.seen
    }

    /// Whether more frames may still arrive: a stream that has not ended, been damaged or
    /// finished. Always false for a file or bytes in memory.
    pub fn is_growing(&self) -> bool {
        !self.done
    }

    /// Indexes the frames of a stream that arrived since the last call; returns whether any
    /// did. At the stream's end (or at damage) it stops for good, with the same warnings a
    /// file gets. A file is indexed whole when opened: this does nothing then.
    pub fn refresh(&mut self) -> Result<bool, RecordError> {
        if self.done {
            return Ok(false);
        }
        let ended = self.spool().is_none_or(|s| s.status().1);
        let file_len = self.storage.len()?;
        self.seen = file_len;
        let before = self.frames.len();
        let problem = loop {
            if self.next == file_len {
                break None;
            }
            match self.index_one(self.next, file_len) {
                Ok(Some(next)) => {
                    self.next = next;
                    if let Some(i) = &self.indexed {
                        i.store(next, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                Ok(None) => break None,
                Err(RecordError::Truncated { .. }) if !ended => {
                    return Ok(self.frames.len() > before);
                }
                Err(e @ (RecordError::Truncated { .. } | RecordError::Corrupt { .. })) => {
                    break Some(e);
                }
                Err(e) => {
                    self.stop();
                    return Err(e);
                }
            }
        };
        if problem.is_none() && !self.finished && !ended {
            return Ok(self.frames.len() > before);
        }
        self.stop();
        self.warn(problem);
        Ok(self.frames.len() > before)
    }

    fn stop(&mut self) {
        self.done = true;
        if let Some(s) = self.spool() {
            s.stop();
        }
    }

    /// Records why the input ended where it did.
    fn warn(&mut self, problem: Option<RecordError>) {
        let n = self.frames.len();
        let offset = self.next;
        if let Some(why) = self.spool().and_then(|s| s.error()) {
            self.warnings.push(why);
        }
        let stream = self.spool().is_some();
        match problem {
            Some(RecordError::Truncated { offset }) if stream => self.warnings.push(format!(
                "the stream ended inside the frame at byte {offset} (its writer stopped \
                 mid-frame): replaying the {n} valid frames before it"
            )),
            Some(RecordError::Truncated { offset }) => self.warnings.push(format!(
                "truncated at byte {offset}: replaying the {n} valid frames before it"
            )),
            Some(RecordError::Corrupt { offset, reason }) => self.warnings.push(format!(
                "corrupt frame at byte {offset} ({reason}): replaying the {n} valid frames before it"
            )),
            Some(e) => self.warnings.push(e.to_string()),
            None if !self.finished && stream => self.warnings.push(format!(
                "the stream ended without its end marker (its recorder was stopped): it ends \
                 at byte {offset}, with {n} complete frames"
            )),
            None if !self.finished => self.warnings.push(format!(
                "the recording was not finished (its recorder was interrupted): it ends at \
                 byte {offset}, replaying its {n} complete frames"
            )),
            None => {}
        }
    }

    /// The decompressed payload of a frame beside the snapshot frames (a kernel or attribution
    /// frame), after the checks they share: not `early` (in a recording before its version),
    /// within its size, counted in the index like a snapshot frame (a file of tiny ones must
    /// not grow the index past the budget), and not before the snapshot frame before it.
    fn beside(
        &mut self,
        offset: u64,
        (h, payload, raw): (&FrameHeader, &[u8], usize),
        early: bool,
        side: Side,
    ) -> Result<Vec<u8>, RecordError> {
        if early {
            return Err(corrupt(offset, side.early));
        }
        if raw > side.max {
            return Err(corrupt(offset, side.too_large));
        }
        self.spent.indexed_frame().map_err(|l| over(offset, l))?;
        let elapsed = Duration::from_nanos(h.elapsed_ns);
        if self.frames.last().is_some_and(|p| p.elapsed > elapsed) {
            return Err(corrupt(offset, "time goes backward"));
        }
        unpack(h.flags, payload).map_err(|why| corrupt(offset, why))
    }

    /// Checks and indexes the frame at `offset`; returns where the next frame starts, or `None`
    /// after the end marker.
    fn index_one(&mut self, offset: u64, file_len: u64) -> Result<Option<u64>, RecordError> {
        let (raw, h) = read_header(&self.storage, offset, file_len)?
            .ok_or(RecordError::Truncated { offset })?;
        let payload = read_payload(&self.storage, offset, file_len, &raw, &h)?
            .ok_or(RecordError::Truncated { offset })?;
        let next = offset + FRAME_HEADER_LEN as u64 + u64::from(h.len);
        let elapsed = Duration::from_nanos(h.elapsed_ns);
        let raw = raw_len(h.flags, &payload).map_err(|why| corrupt(offset, why))?;
        self.spent
            .frame(raw, h.kind == Kind::Dictionary)
            .map_err(|l| over(offset, l))?;
        match h.kind {
            Kind::Info => return Err(corrupt(offset, "a second session information frame")),
            Kind::Dictionary => {
                let p = unpack(h.flags, &payload).map_err(|why| corrupt(offset, why))?;
                self.dict.add(&p, &mut self.spent).map_err(|e| match e {
                    DictError::Malformed(why) => corrupt(offset, why),
                    DictError::Limit(l) => over(offset, l),
                })?;
            }
            Kind::Kernel | Kind::KernelDelta => {
                let whole = h.kind == Kind::Kernel;
                let early = self.dict.version < 4 || (!whole && self.dict.version < 5);
                let p = self.beside(offset, (&h, &payload, raw), early, Side::KERNEL)?;
                // Checked now, so that a damaged reading is refused on opening; decoded
                // again when a snapshot after it is shown. A delta applies to the reading of
                // the frames before it, after a whole one and at most `MAX_CHAIN` of them.
                let base = match self.kernel_frames.last() {
                    _ if whole => self.kernel_frames.len(),
                    Some(prev) if self.kernel_frames.len() - prev.base <= MAX_CHAIN => prev.base,
                    Some(_) => {
                        return Err(corrupt(
                            offset,
                            "more than 255 kernel delta frames in a row",
                        ));
                    }
                    None => return Err(corrupt(offset, "a kernel delta frame before any reading")),
                };
                let now = if whole {
                    (super::kernel::decode(&p, self.dict.version))
                        .map(|r| (super::kernel_delta::size(&r), r))
                        .map(|(size, r)| (r, size))
                } else {
                    let (mut now, mut size) = self.kernel_now.take().unwrap_or_default();
                    (super::kernel_delta::decode(&p, self.dict.version)
                        .and_then(|d| d.apply(&mut now, &mut size)))
                    .map(|()| (now, size))
                };
                self.kernel_now = Some(now.map_err(|Malformed(why)| corrupt(offset, why))?);
                (self.kernel_frames).push(FrameInfo::beside(offset, &h, elapsed, whole, base));
            }
            Kind::Attribution | Kind::AttributionDelta => {
                let whole = h.kind == Kind::Attribution;
                let early = self.dict.version < if whole { 8 } else { 9 };
                let p = self.beside(offset, (&h, &payload, raw), early, Side::ATTRIBUTION)?;
                // Checked now, so that a damaged frame is refused on opening; decoded again
                // when a snapshot after it is shown. A delta applies to the attribution of
                // the frames before it, after a whole one and at most `MAX_CHAIN` of them.
                let base = match self.attribution_frames.last() {
                    _ if whole => self.attribution_frames.len(),
                    Some(prev) if self.attribution_frames.len() - prev.base <= MAX_CHAIN => {
                        prev.base
                    }
                    Some(_) => {
                        return Err(corrupt(
                            offset,
                            "more than 255 attribution delta frames in a row",
                        ));
                    }
                    None => {
                        return Err(corrupt(
                            offset,
                            "an attribution delta frame before any attribution",
                        ));
                    }
                };
                let now = if whole {
                    super::attribution::decode(&p)
                } else {
                    let mut now = self.attribution_now.take().unwrap_or_default();
                    super::attribution_delta::apply(&p, &mut now).map(|()| now)
                };
                self.attribution_now = Some(now.map_err(|Malformed(why)| corrupt(offset, why))?);
                (self.attribution_frames).push(FrameInfo::beside(offset, &h, elapsed, whole, base));
            }
            Kind::Keyframe | Kind::Delta => {
                let keyframe = h.kind == Kind::Keyframe;
                let base = match self.frames.last() {
                    _ if keyframe => self.frames.len(),
                    Some(prev) => prev.base,
                    None => return Err(corrupt(offset, "a delta frame before any keyframe")),
                };
                if self.frames.last().is_some_and(|p| p.elapsed > elapsed) {
                    return Err(corrupt(offset, "time goes backward"));
                }
                // A seek decodes the keyframe and every delta after it: both are bounded.
                if self.frames.len() - base > MAX_DELTAS {
                    return Err(corrupt(
                        offset,
                        "more than 255 delta frames after a keyframe",
                    ));
                }
                self.chain_bytes = if keyframe {
                    raw as u64
                } else {
                    self.chain_bytes.saturating_add(raw as u64)
                };
                if self.chain_bytes > MAX_CHAIN_BYTES {
                    return Err(corrupt(
                        offset,
                        "a keyframe and its deltas beyond 256 MiB decompressed",
                    ));
                }
                self.spent.indexed_frame().map_err(|l| over(offset, l))?;
                self.frames.push(FrameInfo {
                    keys_defined: self.dict.keys.len(),
                    stacks_defined: self.dict.stacks.len(),
                    samples_defined: self.dict.samples.len(),
                    kernel: self.kernel_frames.len().checked_sub(1),
                    attribution: self.attribution_frames.len().checked_sub(1),
                    ..FrameInfo::beside(offset, &h, elapsed, keyframe, base)
                });
            }
            Kind::End => {
                self.finished = true;
                if next != file_len {
                    self.warnings.push(format!(
                        "{} bytes after the end marker at byte {offset} were ignored",
                        file_len - next
                    ));
                }
                return Ok(None);
            }
        }
        Ok(Some(next))
    }

    /// Bytes of names referenced by the keys and stacks defined so far (each reference counted,
    /// see [`MAX_REFERENCED_BYTES`](super::budget::MAX_REFERENCED_BYTES)): what the output of a
    /// report or graph grows with.
    pub fn referenced_bytes(&self) -> u64 {
        self.spent.referenced_bytes()
    }

    /// The session the recording was made in.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// Elapsed time of the last valid frame (zero when there is none).
    pub fn duration(&self) -> Duration {
        self.frames.last().map_or(Duration::ZERO, |f| f.elapsed)
    }

    /// Elapsed time of the first frame (zero when there is none). A recording started during a
    /// live session begins later than zero, with counts cumulative since the session start.
    pub fn start(&self) -> Duration {
        self.frames.first().map_or(Duration::ZERO, |f| f.elapsed)
    }

    /// What was wrong with the file (truncation, corruption, an unfinished recording), each
    /// naming the byte offset where the valid part ends.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether the recording ends with the end marker of a cleanly finished recorder.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Frames counted against the index's limit (snapshot and kernel frames).
    #[cfg(test)]
    pub(super) fn indexed_frames(&self) -> usize {
        self.spent.frames
    }

    /// Number of valid snapshot frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether the recording holds no snapshot.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The index of snapshot frames, oldest first.
    pub fn frames(&self) -> &[FrameInfo] {
        &self.frames
    }

    /// Index of the last frame with elapsed `<= t`, or of the first frame if `t` is before it.
    pub fn frame_at(&self, t: Duration) -> Option<usize> {
        if self.frames.is_empty() {
            return None;
        }
        Some(self.frames.partition_point(|f| f.elapsed <= t).max(1) - 1)
    }

    /// The last snapshot with elapsed `<= t` (the first snapshot if `t` is before it),
    /// decoded from the nearest keyframe at or before it.
    pub fn snapshot_at(&self, t: Duration) -> Result<Snapshot, RecordError> {
        let i = self.frame_at(t).ok_or(RecordError::Empty)?;
        Cursor::default().goto(self, i)
    }

    /// The snapshot of frame `i` (see [`Recording::frames`]), decoded from its keyframe.
    pub fn snapshot_of(&self, i: usize) -> Result<Snapshot, RecordError> {
        Cursor::default().goto(self, i)
    }

    /// Every snapshot in order, each frame decoded once. Stops after the first error.
    pub fn snapshots(&self) -> impl Iterator<Item = Result<Snapshot, RecordError>> + '_ {
        let mut cursor = Cursor::default();
        let mut failed = false;
        (0..self.frames.len()).map_while(move |i| {
            if failed {
                return None;
            }
            let r = cursor.goto(self, i);
            failed = r.is_err();
            Some(r)
        })
    }

    /// The decoded payload of frame `i`, its checksum checked again (the file may have changed).
    pub(super) fn payload(&self, f: &FrameInfo) -> Result<Vec<u8>, RecordError> {
        let len = self.storage.len()?;
        let (raw, h) = read_header(&self.storage, f.offset, len)?
            .ok_or(RecordError::Truncated { offset: f.offset })?;
        if h.len != f.stored_len || h.flags != f.flags {
            return Err(corrupt(f.offset, "the file changed after it was opened"));
        }
        let stored = read_payload(&self.storage, f.offset, len, &raw, &h)?
            .ok_or(RecordError::Truncated { offset: f.offset })?;
        unpack(h.flags, &stored).map_err(|why| corrupt(f.offset, why))
    }
}

impl Frames for Recording {
    fn frames(&self) -> &[FrameInfo] {
        Recording::frames(self)
    }

    fn payload(&self, f: &FrameInfo) -> Result<Vec<u8>, RecordError> {
        Recording::payload(self, f)
    }

    fn kernel_frame(&self, i: usize) -> Option<&FrameInfo> {
        self.kernel_frames.get(i)
    }

    fn attribution_frame(&self, i: usize) -> Option<&FrameInfo> {
        self.attribution_frames.get(i)
    }

    fn dictionary(&self) -> &Dictionary {
        &self.dict
    }
}
