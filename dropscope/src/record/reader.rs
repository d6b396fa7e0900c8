//! Reading recordings: validate and index on open, decode snapshots on demand from keyframes.
use std::{fs::File, os::unix::fs::FileExt, path::Path, sync::Arc, time::Duration};

use super::{
    RecordError,
    format::{
        FILE_HEADER_LEN, FRAME_HEADER_LEN, FrameHeader, HeaderProblem, Kind, MAGIC, Malformed,
        Reader, VERSION, apply_zigzag, unpack,
    },
    health,
};
use crate::model::{DropCount, DropKey, Health, Reason, SessionInfo, Snapshot, StackCount};

/// Where the bytes are: a file read with `pread`, or memory.
enum Storage {
    File(File),
    Bytes(Vec<u8>),
}

impl Storage {
    fn len(&self) -> Result<u64, RecordError> {
        Ok(match self {
            Storage::File(f) => f.metadata()?.len(),
            Storage::Bytes(b) => b.len() as u64,
        })
    }

    /// Fills `buf` from `offset`; the caller has checked the range against the length.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), RecordError> {
        match self {
            Storage::File(f) => f.read_exact_at(buf, offset)?,
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

/// One snapshot frame in a recording's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Byte offset of the frame's header in the file.
    pub offset: u64,
    /// Stored payload length in bytes.
    pub stored_len: u32,
    /// Elapsed time of its snapshot.
    pub elapsed: Duration,
    /// Whether it is a keyframe (a full snapshot).
    pub keyframe: bool,
    /// Index of the keyframe it is decoded from (itself, for a keyframe).
    pub base: usize,
    /// Whether its payload is compressed.
    pub compressed: bool,
    flags: u8,
    keys_defined: usize,
    stacks_defined: usize,
}

/// Everything the dictionary frames defined, in id order.
#[derive(Default)]
struct Dictionary {
    strings: Vec<Arc<str>>,
    keys: Vec<DropKey>,
    stacks: Vec<(DropKey, Arc<[Arc<str>]>)>,
}

impl Dictionary {
    fn add(&mut self, payload: &[u8]) -> Result<(), Malformed> {
        let mut r = Reader::new(payload);
        let n = r.count(1)?;
        for _ in 0..n {
            self.strings.push(r.str()?.into());
        }
        let n = r.count(3)?;
        for _ in 0..n {
            let code = r.u32()?;
            let name = self.string(r.uvarint()?)?;
            let location = self.string(r.uvarint()?)?;
            self.keys.push(DropKey {
                reason: Reason { code, name },
                location,
            });
        }
        let n = r.count(2)?;
        for _ in 0..n {
            let key = usize::try_from(r.uvarint()?)
                .ok()
                .and_then(|k| self.keys.get(k))
                .cloned()
                .ok_or(Malformed("stack of an undefined key"))?;
            let len = r.count(1)?;
            let frames = (0..len)
                .map(|_| self.string(r.uvarint()?))
                .collect::<Result<Arc<[Arc<str>]>, _>>()?;
            self.stacks.push((key, frames));
        }
        r.finish()
    }

    fn string(&self, id: u64) -> Result<Arc<str>, Malformed> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.strings.get(i))
            .cloned()
            .ok_or(Malformed("undefined string"))
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
    dict: Dictionary,
    warnings: Vec<String>,
    finished: bool,
}

fn corrupt(offset: u64, reason: &'static str) -> RecordError {
    RecordError::Corrupt { offset, reason }
}

/// Reads frame `offset`'s header; `Ok(None)` when fewer than a header's bytes remain.
fn read_header(
    s: &Storage,
    offset: u64,
    file_len: u64,
) -> Result<Option<([u8; FRAME_HEADER_LEN], FrameHeader)>, RecordError> {
    if file_len - offset < FRAME_HEADER_LEN as u64 {
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
fn read_payload(
    s: &Storage,
    offset: u64,
    file_len: u64,
    raw: &[u8; FRAME_HEADER_LEN],
    h: &FrameHeader,
) -> Result<Option<Vec<u8>>, RecordError> {
    let start = offset + FRAME_HEADER_LEN as u64;
    if file_len - start < u64::from(h.len) {
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

impl Recording {
    /// Opens and indexes a recording file. A damaged file opens with the valid frames before
    /// the damage and a warning; only a file that is not a recording at all is an error.
    pub fn open(path: &Path) -> Result<Recording, RecordError> {
        let file = File::open(path)?;
        if !file.metadata()?.is_file() {
            return Err(RecordError::NotARecording);
        }
        Self::load(Storage::File(file))
    }

    /// Opens a recording held in memory.
    pub fn from_bytes(bytes: &[u8]) -> Result<Recording, RecordError> {
        Self::load(Storage::Bytes(bytes.to_vec()))
    }

    fn load(storage: Storage) -> Result<Recording, RecordError> {
        let file_len = storage.len()?;
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
            read_header(&storage, offset, file_len)?.ok_or(RecordError::Truncated { offset })?;
        if h.kind != Kind::Info {
            return Err(corrupt(offset, "the session information frame is missing"));
        }
        let payload = read_payload(&storage, offset, file_len, &raw, &h)?
            .ok_or(RecordError::Truncated { offset })?;
        let info = unpack(h.flags, &payload)
            .map_err(|why| corrupt(offset, why))
            .and_then(|p| read_info(&p).map_err(|Malformed(why)| corrupt(offset, why)))?;

        let mut rec = Recording {
            storage,
            info,
            frames: Vec::new(),
            dict: Dictionary::default(),
            warnings: Vec::new(),
            finished: false,
        };
        rec.index(
            offset + FRAME_HEADER_LEN as u64 + u64::from(h.len),
            file_len,
        )?;
        Ok(rec)
    }

    /// Walks the frames after the session frame, stopping (with a warning) at the first damage.
    fn index(&mut self, mut offset: u64, file_len: u64) -> Result<(), RecordError> {
        let problem = loop {
            if offset == file_len {
                break None;
            }
            let step = self.index_one(offset, file_len);
            match step {
                Ok(Some(next)) => offset = next,
                Ok(None) => break None,
                Err(e @ (RecordError::Truncated { .. } | RecordError::Corrupt { .. })) => {
                    break Some(e);
                }
                Err(e) => return Err(e),
            }
        };
        let n = self.frames.len();
        match problem {
            Some(RecordError::Truncated { offset }) => self.warnings.push(format!(
                "truncated at byte {offset}: replaying the {n} valid frames before it"
            )),
            Some(RecordError::Corrupt { offset, reason }) => self.warnings.push(format!(
                "corrupt frame at byte {offset} ({reason}): replaying the {n} valid frames before it"
            )),
            Some(e) => self.warnings.push(e.to_string()),
            None if !self.finished => self.warnings.push(format!(
                "the recording was not finished (its recorder was interrupted): it ends at \
                 byte {offset}, replaying its {n} complete frames"
            )),
            None => {}
        }
        Ok(())
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
        match h.kind {
            Kind::Info => return Err(corrupt(offset, "a second session information frame")),
            Kind::Dictionary => {
                let p = unpack(h.flags, &payload).map_err(|why| corrupt(offset, why))?;
                self.dict
                    .add(&p)
                    .map_err(|Malformed(why)| corrupt(offset, why))?;
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
                self.frames.push(FrameInfo {
                    offset,
                    stored_len: h.len,
                    elapsed,
                    keyframe,
                    base,
                    compressed: h.flags != 0,
                    flags: h.flags,
                    keys_defined: self.dict.keys.len(),
                    stacks_defined: self.dict.stacks.len(),
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
    fn payload(&self, f: &FrameInfo) -> Result<Vec<u8>, RecordError> {
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

/// Decoding state: the counts as of one frame, by key and stack id.
#[derive(Default)]
struct State {
    unix_ms: u64,
    total: u64,
    overflow: u64,
    health: Health,
    counts: Vec<Option<u64>>,
    stacks: Vec<Option<(u64, u64)>>,
}

/// Reads ascending ids written as gaps, each below `limit`.
fn next_id(r: &mut Reader<'_>, last: &mut Option<usize>, limit: usize) -> Result<usize, Malformed> {
    let gap = r.uvarint()?;
    let id = match *last {
        None => Some(gap),
        Some(l) => (l as u64).checked_add(1).and_then(|v| v.checked_add(gap)),
    }
    .and_then(|id| usize::try_from(id).ok())
    .filter(|&id| id < limit)
    .ok_or(Malformed("reference to an undefined key or stack"))?;
    *last = Some(id);
    Ok(id)
}

impl State {
    fn apply(&mut self, f: &FrameInfo, payload: &[u8]) -> Result<(), Malformed> {
        let mut r = Reader::new(payload);
        if f.keyframe {
            self.unix_ms = r.uvarint()?;
            self.total = r.uvarint()?;
            self.overflow = r.uvarint()?;
            self.health = health::read_full(&mut r)?;
            self.counts = vec![None; f.keys_defined];
            self.stacks = vec![None; f.stacks_defined];
            let mut last = None;
            for _ in 0..r.count(2)? {
                let id = next_id(&mut r, &mut last, f.keys_defined)?;
                self.counts[id] = Some(r.uvarint()?);
            }
            let mut last = None;
            for _ in 0..r.count(3)? {
                let id = next_id(&mut r, &mut last, f.stacks_defined)?;
                self.stacks[id] = Some((r.uvarint()?, r.uvarint()?));
            }
        } else {
            self.unix_ms = apply_zigzag(self.unix_ms, r.uvarint()?);
            self.total = apply_zigzag(self.total, r.uvarint()?);
            self.overflow = apply_zigzag(self.overflow, r.uvarint()?);
            self.health = health::read_delta(&mut r, &self.health)?;
            self.counts.resize(f.keys_defined, None);
            self.stacks.resize(f.stacks_defined, None);
            let mut last = None;
            for _ in 0..r.count(1)? {
                self.counts[next_id(&mut r, &mut last, f.keys_defined)?] = None;
            }
            let mut last = None;
            for _ in 0..r.count(2)? {
                let c = &mut self.counts[next_id(&mut r, &mut last, f.keys_defined)?];
                *c = Some(apply_zigzag(c.unwrap_or(0), r.uvarint()?));
            }
            let mut last = None;
            for _ in 0..r.count(1)? {
                self.stacks[next_id(&mut r, &mut last, f.stacks_defined)?] = None;
            }
            let mut last = None;
            for _ in 0..r.count(3)? {
                let c = &mut self.stacks[next_id(&mut r, &mut last, f.stacks_defined)?];
                let (w, n) = c.unwrap_or((0, 0));
                *c = Some((apply_zigzag(w, r.uvarint()?), apply_zigzag(n, r.uvarint()?)));
            }
        }
        r.finish()
    }

    fn snapshot(&self, elapsed: Duration, dict: &Dictionary) -> Snapshot {
        let drops = (self.counts.iter().zip(&dict.keys))
            .filter_map(|(c, key)| {
                c.map(|count| DropCount {
                    key: key.clone(),
                    count,
                })
            })
            .collect();
        let stacks = (self.stacks.iter().zip(&dict.stacks))
            .filter_map(|(c, (key, frames))| {
                c.map(|(weight, samples)| StackCount {
                    key: key.clone(),
                    frames: frames.clone(),
                    weight,
                    samples,
                })
            })
            .collect();
        Snapshot {
            elapsed,
            unix_ms: self.unix_ms,
            total: self.total,
            overflow: self.overflow,
            drops,
            stacks,
            health: self.health.clone(),
        }
    }
}

/// A position in a recording with its decoded state: moving forward applies only the frames in
/// between; moving elsewhere starts again from the target's keyframe.
#[derive(Default)]
pub(crate) struct Cursor {
    state: State,
    at: Option<usize>,
}

impl Cursor {
    /// The snapshot of frame `target` (which must be a valid index of `rec`).
    pub(crate) fn goto(&mut self, rec: &Recording, target: usize) -> Result<Snapshot, RecordError> {
        let f = rec.frames.get(target).ok_or(RecordError::Empty)?;
        let from = match self.at {
            Some(a) if a <= target && a >= f.base => a + 1,
            _ => f.base,
        };
        for frame in &rec.frames[from..=target] {
            self.at = None;
            let payload = rec.payload(frame)?;
            self.state
                .apply(frame, &payload)
                .map_err(|Malformed(why)| corrupt(frame.offset, why))?;
        }
        self.at = Some(target);
        Ok(self.state.snapshot(f.elapsed, &rec.dict))
    }
}
