//! Decoding snapshot frames: the names the dictionaries define, and the counts as of a frame.
use std::sync::Arc;

use super::{
    budget::{Limit, MAX_RENAMES_PER_KEY, Spent},
    error::RecordError,
    format::{Malformed, Reader, apply_zigzag},
    health,
    index::{FrameInfo, corrupt},
};
use crate::model::{
    Attribution, DropCount, DropKey, Health, KernelReading, KeySamples, Reason, Sample, Snapshot,
    StackCount,
};

/// Everything the dictionary frames defined, in id order.
#[derive(Default)]
pub(super) struct Dictionary {
    pub(super) strings: Vec<Arc<str>>,
    pub(super) keys: Vec<DropKey>,
    /// Each stack's key id (a key's names may be written again after its stack was defined:
    /// the stack takes the key's names as of the frame read) and frames.
    pub(super) stacks: Vec<(usize, Arc<[Arc<str>]>)>,
    /// Sampled packets by key id, in the order they were defined (version 2 on).
    pub(super) samples: Vec<(u32, Sample)>,
    /// Sampled packets defined so far per key id.
    samples_of: Vec<u8>,
    /// How often each key's names were written again (version 3 on).
    renames: Vec<u8>,
    /// How often each key's socket was described (version 7 on).
    sockets: Vec<u8>,
    /// The format version of the recording (1 has no attribution and no samples).
    pub(super) version: u16,
}

/// Why a dictionary frame was refused.
pub(super) enum DictError {
    /// It does not decode.
    Malformed(&'static str),
    /// It goes beyond the reader's budget.
    Limit(Limit),
}

impl From<Malformed> for DictError {
    fn from(Malformed(why): Malformed) -> Self {
        DictError::Malformed(why)
    }
}

impl From<Limit> for DictError {
    fn from(l: Limit) -> Self {
        DictError::Limit(l)
    }
}

impl Dictionary {
    /// An empty dictionary for a recording of format `version`.
    pub(super) fn new(version: u16) -> Self {
        Dictionary {
            version,
            ..Default::default()
        }
    }

    /// Adds the definitions of one dictionary frame, counting them against the budget.
    pub(super) fn add(&mut self, payload: &[u8], spent: &mut Spent) -> Result<(), DictError> {
        let mut r = Reader::new(payload);
        let n = r.count(1)?;
        for _ in 0..n {
            let s = r.str()?;
            spent.string(s.len())?;
            self.strings.push(s.into());
        }
        let n = r.count(3)?;
        for _ in 0..n {
            spent.key()?;
            let code = r.u32()?;
            let name = self.string(r.uvarint()?)?;
            let location = self.string(r.uvarint()?)?;
            let attr = if self.version >= 2 {
                self.attribution(&mut r)?
            } else {
                Attribution::default()
            };
            let names = [&attr.netns_name, &attr.device, &attr.protocol]
                .into_iter()
                .flatten()
                .map(|n| n.len())
                .sum::<usize>();
            spent.referenced(name.len() + location.len() + names)?;
            self.keys.push(DropKey {
                reason: Reason { code, name },
                location,
                attr,
            });
            self.samples_of.push(0);
        }
        let n = r.count(2)?;
        for _ in 0..n {
            let key = usize::try_from(r.uvarint()?)
                .ok()
                .filter(|&k| k < self.keys.len())
                .ok_or(Malformed("stack of an undefined key"))?;
            let len = r.count(1)?;
            spent.stack(len)?;
            let frames = (0..len)
                .map(|_| {
                    let frame = self.string(r.uvarint()?)?;
                    spent.referenced(frame.len())?;
                    Ok(frame)
                })
                .collect::<Result<Arc<[Arc<str>]>, DictError>>()?;
            self.stacks.push((key, frames));
        }
        if self.version >= 2 {
            let n = r.count(5)?;
            for _ in 0..n {
                let key = r.u32()?;
                let of_key = self
                    .samples_of
                    .get_mut(key as usize)
                    .ok_or(Malformed("sample of an undefined key"))?;
                *of_key = of_key.saturating_add(1);
                let nth = usize::from(*of_key);
                let unix_ms = r.uvarint()?;
                let len = r.u32()?;
                let l3proto =
                    u16::try_from(r.uvarint()?).map_err(|_| Malformed("number too large"))?;
                let n_bytes = r.count(1)?;
                spent.sample(nth, n_bytes)?;
                let bytes = r.bytes(n_bytes)?.into();
                self.samples.push((
                    key,
                    Sample {
                        unix_ms,
                        len,
                        l3proto,
                        bytes,
                    },
                ));
            }
        }
        if self.version >= 3 {
            self.renames(&mut r, spent)?;
        }
        // The socket section (version 7 on) is left out of a frame that describes no socket.
        if self.version >= 7 && r.remaining() > 0 {
            let strings = &self.strings;
            let string = |id: u64| {
                usize::try_from(id)
                    .ok()
                    .and_then(|i| strings.get(i))
                    .cloned()
                    .ok_or(Malformed("undefined string"))
            };
            let mut referenced = 0;
            let read = super::socket::read_section(
                &mut r,
                &mut self.keys,
                &mut self.sockets,
                string,
                &mut referenced,
            );
            spent.referenced(referenced)?;
            read?;
        }
        Ok(r.finish()?)
    }

    /// Names written again for keys already defined (version 3 on): the namespace and device
    /// names of a key are attributes, not its identity; each key's at most
    /// [`MAX_RENAMES_PER_KEY`] times.
    ///
    /// The names given count against the budget on names as referenced, as a key's do.
    fn renames(&mut self, r: &mut Reader<'_>, spent: &mut Spent) -> Result<(), DictError> {
        let n = r.count(3)?;
        for _ in 0..n {
            let id = usize::try_from(r.uvarint()?).map_err(|_| Malformed("key id too large"))?;
            let name = |r: &mut Reader<'_>| -> Result<Option<Arc<str>>, Malformed> {
                match r.uvarint()? {
                    0 => Ok(None),
                    s => self.string(s - 1).map(Some),
                }
            };
            let (netns_name, device) = (name(r)?, name(r)?);
            spent.referenced(
                [&netns_name, &device]
                    .into_iter()
                    .flatten()
                    .map(|n| n.len())
                    .sum(),
            )?;
            if self.renames.len() < self.keys.len() {
                self.renames.resize(self.keys.len(), 0);
            }
            let (Some(key), Some(renames)) = (self.keys.get_mut(id), self.renames.get_mut(id))
            else {
                return Err(Malformed("names of an undefined key").into());
            };
            if *renames >= MAX_RENAMES_PER_KEY {
                return Err(Malformed("a key renamed too often").into());
            }
            *renames += 1;
            key.attr.netns_name = netns_name;
            key.attr.device = device;
        }
        Ok(())
    }

    /// A key's attribution: a presence mask, then the fields present.
    fn attribution(&self, r: &mut Reader<'_>) -> Result<Attribution, Malformed> {
        let mask = r.uvarint()?;
        // Version 3 added the interface index (bit 5), version 6 the namespace cookie (bit 6),
        // version 7 the socket (bit 7).
        let known = match self.version {
            7.. => 8,
            6.. => 7,
            3.. => 6,
            _ => 5,
        };
        if mask >> known != 0 {
            return Err(Malformed("unknown attribution fields"));
        }
        let has = |bit: u32| mask & (1 << bit) != 0;
        let name = |r: &mut Reader<'_>, bit| -> Result<Option<Arc<str>>, Malformed> {
            has(bit).then(|| self.string(r.uvarint()?)).transpose()
        };
        let netns = has(0).then(|| r.uvarint()).transpose()?;
        let netns_name = name(r, 1)?;
        let device = name(r, 2)?;
        let protocol = name(r, 3)?;
        let port = has(4)
            .then(|| u16::try_from(r.uvarint()?).map_err(|_| Malformed("port too large")))
            .transpose()?;
        let ifindex = has(5)
            .then(|| {
                u32::try_from(r.uvarint()?).map_err(|_| Malformed("interface index too large"))
            })
            .transpose()?;
        let netns_cookie = has(6).then(|| r.uvarint()).transpose()?;
        let socket = has(7)
            .then(|| super::socket::from_identity(r.uvarint()?).map(Arc::new))
            .transpose()?;
        Ok(Attribution {
            ifindex,
            netns,
            netns_cookie,
            netns_name,
            device,
            protocol,
            port,
            socket,
            culprit: None,
        })
    }

    /// The sampled packets of the first `n` defined, grouped by key in key order.
    fn key_samples(&self, n: usize) -> Vec<KeySamples> {
        let mut by_key: std::collections::BTreeMap<u32, Vec<Sample>> = Default::default();
        for (k, s) in &self.samples[..n.min(self.samples.len())] {
            by_key.entry(*k).or_default().push(s.clone());
        }
        by_key
            .into_iter()
            .filter_map(|(k, packets)| {
                let key = self.keys.get(k as usize)?.clone();
                Some(KeySamples { key, packets })
            })
            .collect()
    }

    fn string(&self, id: u64) -> Result<Arc<str>, Malformed> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.strings.get(i))
            .cloned()
            .ok_or(Malformed("undefined string"))
    }
}

/// The counts as of one frame, by key and stack id: what the decoder rebuilds, and what the
/// encoder remembers to write the next delta against.
#[derive(Default)]
pub(super) struct State {
    pub(super) unix_ms: u64,
    pub(super) total: u64,
    pub(super) overflow: u64,
    pub(super) health: Health,
    pub(super) counts: Vec<Option<u64>>,
    pub(super) stacks: Vec<Option<(u64, u64)>>,
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

    fn snapshot(&self, f: &FrameInfo, dict: &Dictionary) -> Snapshot {
        let elapsed = f.elapsed;
        // A program's key holds its frames only (its counts are in the kernel's readings): a
        // count a file gives it is not a row of the probe's, but a drop not keyed.
        let mut overflow = self.overflow;
        let drops = (self.counts.iter().zip(&dict.keys))
            .filter_map(|(c, key)| {
                let count = (*c)?;
                if crate::model::programs::is_program(key) {
                    overflow = overflow.saturating_add(count);
                    return None;
                }
                Some(DropCount {
                    key: key.clone(),
                    count,
                })
            })
            .collect();
        let stacks = (self.stacks.iter().zip(&dict.stacks))
            .filter_map(|(c, (key, frames))| {
                c.map(|(weight, samples)| StackCount {
                    key: dict.keys[*key].clone(),
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
            overflow,
            drops,
            stacks,
            samples: dict.key_samples(f.samples_defined),
            health: self.health.clone(),
            kernel: None,
        }
    }
}

/// What a [`Cursor`] decodes from: a recording's frame index, payloads and names.
pub(crate) trait Frames {
    /// The index of valid frames.
    fn frames(&self) -> &[FrameInfo];
    /// The (decompressed) payload of a frame.
    fn payload(&self, f: &FrameInfo) -> Result<Vec<u8>, RecordError>;
    /// The names the dictionary frames define.
    fn dictionary(&self) -> &Dictionary;
    /// Kernel frame `i`.
    fn kernel_frame(&self, i: usize) -> Option<&FrameInfo>;
    /// Attribution frame `i`.
    fn attribution_frame(&self, i: usize) -> Option<&FrameInfo>;
}

/// A position in a recording with its decoded state: moving forward applies only the frames in
/// between; moving elsewhere starts again from the target's keyframe.
#[derive(Default)]
pub(crate) struct Cursor {
    state: State,
    at: Option<usize>,
    /// The kernel reading decoded last, by kernel frame index, with its size (see
    /// `kernel_delta::size`).
    kernel: Option<(usize, Arc<KernelReading>, usize)>,
    /// The reading given last, by kernel and attribution frame index: the kernel frame's
    /// reading with the attribution frame's rulesets, programs and listeners.
    attributed: Option<((usize, usize), Arc<KernelReading>)>,
    /// The attribution decoded last, by attribution frame index.
    attribution: Option<(usize, Arc<super::attribution::Attribution>)>,
}

impl Cursor {
    /// The snapshot of frame `target` (which must be a valid index of `rec`).
    pub(crate) fn goto(
        &mut self,
        rec: &impl Frames,
        target: usize,
    ) -> Result<Snapshot, RecordError> {
        let f = rec.frames().get(target).ok_or(RecordError::Empty)?;
        let from = match self.at {
            Some(a) if a <= target && a >= f.base => a + 1,
            _ => f.base,
        };
        for frame in &rec.frames()[from..=target] {
            self.at = None;
            let payload = rec.payload(frame)?;
            self.state
                .apply(frame, &payload)
                .map_err(|Malformed(why)| corrupt(frame.offset, why))?;
        }
        self.at = Some(target);
        let mut snap = self.state.snapshot(f, rec.dictionary());
        snap.kernel = match (f.kernel, f.attribution) {
            (Some(k), Some(a)) => Some(self.attributed(rec, k, a)?),
            (Some(k), None) => Some(self.kernel(rec, k)?),
            (None, _) => None,
        };
        Ok(snap)
    }

    /// Kernel frame `k`'s reading with attribution frame `a`'s (once for the snapshots after
    /// both).
    fn attributed(
        &mut self,
        rec: &impl Frames,
        k: usize,
        a: usize,
    ) -> Result<Arc<KernelReading>, RecordError> {
        if let Some((at, r)) = &self.attributed
            && *at == (k, a)
        {
            return Ok(r.clone());
        }
        let mut r = KernelReading::clone(&*self.kernel(rec, k)?);
        self.attribution(rec, a)?.apply(&mut r);
        let r = Arc::new(r);
        self.attributed = Some(((k, a), r.clone()));
        Ok(r)
    }

    /// Attribution frame `i`, decoded (once for the snapshots after it): a delta applied to
    /// the attribution decoded last when it is of the same chain and before it, else to the
    /// chain's whole frame.
    fn attribution(
        &mut self,
        rec: &impl Frames,
        i: usize,
    ) -> Result<Arc<super::attribution::Attribution>, RecordError> {
        if let Some((at, a)) = &self.attribution
            && *at == i
        {
            return Ok(a.clone());
        }
        let f = rec.attribution_frame(i).ok_or(RecordError::Empty)?;
        let (mut a, from) = match &self.attribution {
            Some((at, a)) if !f.keyframe && *at >= f.base && *at < i => ((**a).clone(), at + 1),
            _ => {
                let b = rec.attribution_frame(f.base).ok_or(RecordError::Empty)?;
                let payload = rec.payload(b)?;
                let a = super::attribution::decode(&payload)
                    .map_err(|Malformed(why)| corrupt(b.offset, why))?;
                (a, f.base + 1)
            }
        };
        for j in from..=i {
            let d = rec.attribution_frame(j).ok_or(RecordError::Empty)?;
            let payload = rec.payload(d)?;
            super::attribution_delta::apply(&payload, &mut a)
                .map_err(|Malformed(why)| corrupt(d.offset, why))?;
        }
        let a = Arc::new(a);
        self.attribution = Some((i, a.clone()));
        Ok(a)
    }

    /// Kernel frame `i`, decoded (once for the snapshots after it).
    fn kernel(&mut self, rec: &impl Frames, i: usize) -> Result<Arc<KernelReading>, RecordError> {
        if let Some((at, r, _)) = &self.kernel
            && *at == i
        {
            return Ok(r.clone());
        }
        let f = rec.kernel_frame(i).ok_or(RecordError::Empty)?;
        // A delta applies to the reading before it: from the one decoded last when it is of
        // the same chain and before it, else from the chain's whole reading.
        let (mut r, mut size, from) = match &self.kernel {
            Some((at, r, size)) if !f.keyframe && *at >= f.base && *at < i => {
                ((**r).clone(), *size, at + 1)
            }
            _ => {
                let b = rec.kernel_frame(f.base).ok_or(RecordError::Empty)?;
                let payload = rec.payload(b)?;
                let r = super::kernel::decode(&payload, rec.dictionary().version)
                    .map_err(|Malformed(why)| corrupt(b.offset, why))?;
                let size = super::kernel_delta::size(&r);
                (r, size, f.base + 1)
            }
        };
        for j in from..=i {
            let d = rec.kernel_frame(j).ok_or(RecordError::Empty)?;
            let payload = rec.payload(d)?;
            (super::kernel_delta::decode(&payload, rec.dictionary().version)
                .and_then(|delta| delta.apply(&mut r, &mut size)))
            .map_err(|Malformed(why)| corrupt(d.offset, why))?;
        }
        let r = Arc::new(r);
        self.kernel = Some((i, r.clone(), size));
        Ok(r)
    }
}
