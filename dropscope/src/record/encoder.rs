//! Encoding snapshots: names interned once, then keyframes and deltas of the counts that changed.
use std::{collections::HashMap, sync::Arc, time::Duration};

use super::{
    budget::MAX_RENAMES_PER_KEY,
    budget::{MAX_SAMPLE_BYTES, MAX_SAMPLES},
    decode::State,
    error::RecordError,
    format::{FILE_HEADER_LEN, Kind, MAGIC, MAX_STRING, VERSION, push_frame, put_str, put_uvarint},
    health,
};
use crate::{
    model::{Sample, SessionInfo, Snapshot},
    vocab::packet::PER_KEY,
};

/// A keyframe is written at least this often (in recorded time) ...
pub const KEYFRAME_EVERY: Duration = Duration::from_secs(30);
/// ... and at least every this many snapshot frames, so a seek decodes at most this many frames.
pub const KEYFRAME_MAX_FRAMES: u32 = 256;

/// A key's attribution as written: netns, netns name id, device id, protocol id, port,
/// interface index, netns cookie, socket identity.
type AttrRef = (
    Option<u64>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u16>,
    Option<u32>,
    Option<u64>,
    Option<u64>,
);
/// A key's names as written: netns name id and device id.
type NamesRef = (Option<u32>, Option<u32>);
/// A key as written: reason code, reason name id, location id, attribution.
type KeyRef = (u32, u32, u32, AttrRef);
/// A stack as written: key id and frame string ids.
type StackRef = (u32, Box<[u32]>);

/// What the previous snapshot frame held, to compute the next delta from.
struct Prev {
    elapsed_ns: u64,
    state: State,
}

/// Turns snapshots into frames. Pure: it appends bytes to a buffer and does no I/O.
#[derive(Default)]
pub(crate) struct Encoder {
    strings: HashMap<Arc<str>, u32>,
    keys: HashMap<KeyRef, u32>,
    /// Each key's id by the key's identity (its names excluded): a key whose names change
    /// keeps its id and its first definition.
    ids: HashMap<crate::model::DropKey, u32>,
    new_ids: Vec<crate::model::DropKey>,
    /// Each key's names as last written (netns name and device string ids) and how often
    /// they were written again.
    names: Vec<(NamesRef, u8)>,
    /// Names written again in the pending frame: key id, new names, the names before.
    new_names: Vec<(u32, NamesRef, NamesRef)>,
    /// What was found of each key's socket, as written (and pending).
    sockets: super::socket::Written,
    stacks: HashMap<StackRef, u32>,
    // Definitions made while encoding the current snapshot, written as one dictionary frame.
    new_strings: Vec<Arc<str>>,
    new_keys: Vec<KeyRef>,
    new_stacks: Vec<StackRef>,
    /// Samples written so far per key id, and in all.
    samples_of: HashMap<u32, usize>,
    samples: usize,
    new_samples: Vec<(u32, Sample)>,
    prev: Option<Prev>,
    /// The kernel reading written last: a reading is written again when it changed, as a
    /// reading whose programs' verdict counts were brought up to date does, at the same time.
    kernel_last: Option<std::sync::Arc<crate::model::KernelReading>>,
    /// While a delta may follow (the last full kernel frame held the whole reading): its time
    /// and how many deltas followed it.
    kernel_chain: Option<(u64, u32)>,
    /// The reading whose rulesets, programs and listeners were written last (an attribution
    /// frame is written when they change).
    attribution_last: Option<std::sync::Arc<crate::model::KernelReading>>,
    /// While an attribution delta may follow (the last whole attribution frame held every
    /// namespace): its time and how many deltas followed it.
    attribution_chain: Option<(u64, u32)>,
    last_keyframe_ns: u64,
    since_keyframe: u32,
}

/// The file header and the session information frame.
pub(crate) fn header(info: &SessionInfo) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::with_capacity(FILE_HEADER_LEN + 64);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    let mut p = Vec::new();
    for s in [&info.host, &info.kernel] {
        check_len(s)?;
        put_str(&mut p, s);
    }
    put_uvarint(&mut p, info.started_unix_ms);
    check_len(&info.probe)?;
    put_str(&mut p, &info.probe);
    push_frame(&mut out, Kind::Info, 0, &p)?;
    Ok(out)
}

/// The frame that marks a cleanly finished recording.
pub(crate) fn end_frame(elapsed_ns: u64) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::new();
    push_frame(&mut out, Kind::End, elapsed_ns, &[])?;
    Ok(out)
}

fn check_len(s: &str) -> Result<(), RecordError> {
    if s.len() > MAX_STRING {
        return Err(RecordError::StringTooLong(s.len()));
    }
    Ok(())
}

fn check_key(k: &crate::model::DropKey) -> Result<(), RecordError> {
    let a = &k.attr;
    for s in [&a.netns_name, &a.device, &a.protocol]
        .into_iter()
        .flatten()
    {
        check_len(s)?;
    }
    check_len(&k.reason.name)?;
    check_len(&k.location)
}

fn put_gap(out: &mut Vec<u8>, last: &mut Option<usize>, id: usize) {
    put_uvarint(out, last.map_or(id, |l| id - l - 1) as u64);
    *last = Some(id);
}

impl Encoder {
    /// Elapsed time of the last snapshot encoded, in nanoseconds.
    pub(crate) fn last_elapsed_ns(&self) -> u64 {
        self.prev.as_ref().map_or(0, |p| p.elapsed_ns)
    }

    fn string(&mut self, s: &Arc<str>) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.insert(s.clone(), id);
        self.new_strings.push(s.clone());
        id
    }

    /// The id of key `k`, defined if new. Its names are written again if they changed and
    /// `names` says they are the key's current ones (a count's key; stacks and samples may
    /// carry the names their key had when they were first seen).
    fn key(&mut self, k: &crate::model::DropKey, names: bool) -> u32 {
        if let Some(&id) = self.ids.get(k) {
            if names {
                self.rename(id, k);
                self.describe_socket(id, k);
            }
            return id;
        }
        let id = self.define_key(k);
        self.ids.insert(k.clone(), id);
        self.new_ids.push(k.clone());
        self.describe_socket(id, k);
        id
    }

    /// Writes what was found of key `id`'s socket when it changed (within the bound).
    fn describe_socket(&mut self, id: u32, k: &crate::model::DropKey) {
        if let Some(s) = &k.attr.socket {
            let about = super::socket::encode(&s.about, |s| self.string(s));
            self.sockets.offer(id, about);
        }
    }

    /// Writes the names of key `id` again when they changed, at most
    /// [`MAX_RENAMES_PER_KEY`] times (then the last written stay).
    fn rename(&mut self, id: u32, k: &crate::model::DropKey) {
        let Some(&((netns_name, device), renames)) = self.names.get(id as usize) else {
            return;
        };
        let same = |written: Option<u32>,
                    now: &Option<Arc<str>>,
                    strings: &HashMap<Arc<str>, u32>| {
            match (written, now) {
                (None, None) => true,
                (Some(w), Some(n)) => strings.get(n) == Some(&w),
                _ => false,
            }
        };
        if renames >= MAX_RENAMES_PER_KEY
            || (same(netns_name, &k.attr.netns_name, &self.strings)
                && same(device, &k.attr.device, &self.strings))
        {
            return;
        }
        let now = (
            k.attr.netns_name.as_ref().map(|s| self.string(s)),
            k.attr.device.as_ref().map(|s| self.string(s)),
        );
        self.new_names.push((id, now, (netns_name, device)));
        self.names[id as usize] = (now, renames + 1);
    }

    fn define_key(&mut self, k: &crate::model::DropKey) -> u32 {
        let a = &k.attr;
        let attr = (
            a.netns,
            a.netns_name.as_ref().map(|s| self.string(s)),
            a.device.as_ref().map(|s| self.string(s)),
            a.protocol.as_ref().map(|s| self.string(s)),
            a.port,
            a.ifindex,
            a.netns_cookie,
            a.socket.as_deref().map(super::socket::identity),
        );
        let r = (
            k.reason.code,
            self.string(&k.reason.name),
            self.string(&k.location),
            attr,
        );
        if let Some(&id) = self.keys.get(&r) {
            return id;
        }
        let id = self.keys.len() as u32;
        self.keys.insert(r, id);
        self.new_keys.push(r);
        self.names.push(((r.3.1, r.3.2), 0));
        id
    }

    fn stack(&mut self, s: &crate::model::StackCount) -> u32 {
        let key = self.key(&s.key, false);
        let frames: Box<[u32]> = s.frames.iter().map(|f| self.string(f)).collect();
        let r = (key, frames);
        if let Some(&id) = self.stacks.get(&r) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.insert(r.clone(), id);
        self.new_stacks.push(r);
        id
    }

    /// Forgets the definitions of a snapshot that could not be encoded.
    fn roll_back(&mut self) {
        for s in self.new_strings.drain(..) {
            self.strings.remove(&s);
        }
        for k in self.new_keys.drain(..) {
            self.keys.remove(&k);
        }
        for k in self.new_ids.drain(..) {
            self.ids.remove(&k);
        }
        for (id, _, before) in self.new_names.drain(..).rev() {
            if let Some(n) = self.names.get_mut(id as usize) {
                *n = (before, n.1.saturating_sub(1));
            }
        }
        self.names.truncate(self.keys.len());
        for s in self.new_stacks.drain(..) {
            self.stacks.remove(&s);
        }
        self.sockets.roll_back();
        for (k, _) in self.new_samples.drain(..) {
            self.samples -= 1;
            if let Some(n) = self.samples_of.get_mut(&k) {
                *n -= 1;
            }
        }
    }

    /// Appends the frames for one snapshot: a dictionary frame when it introduces names, then a
    /// keyframe or a delta frame. On error nothing is appended and the encoder is unchanged.
    pub(crate) fn encode(&mut self, s: &Snapshot, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let elapsed_ns = u64::try_from(s.elapsed.as_nanos())
            .map_err(|_| RecordError::ElapsedTooLarge(s.elapsed))?;
        if let Some(p) = &self.prev
            && elapsed_ns < p.elapsed_ns
        {
            return Err(RecordError::OutOfOrder {
                previous: Duration::from_nanos(p.elapsed_ns),
                next: s.elapsed,
            });
        }
        for d in &s.drops {
            check_key(&d.key)?;
        }
        for k in &s.samples {
            check_key(&k.key)?;
        }
        for st in &s.stacks {
            check_key(&st.key)?;
            st.frames.iter().try_for_each(|f| check_len(f))?;
        }
        let start = out.len();
        let r = self.encode_checked(s, elapsed_ns, out);
        if r.is_err() {
            out.truncate(start);
            self.roll_back();
        }
        r
    }

    fn encode_checked(
        &mut self,
        s: &Snapshot,
        elapsed_ns: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        // Intern, merging duplicate keys (and duplicate stacks) by adding their counts.
        let drop_ids: Vec<u32> = s.drops.iter().map(|d| self.key(&d.key, true)).collect();
        let stack_ids: Vec<u32> = s.stacks.iter().map(|st| self.stack(st)).collect();
        self.intern_samples(s);
        let mut counts = vec![None; self.keys.len()];
        for (d, &id) in s.drops.iter().zip(&drop_ids) {
            let c: &mut Option<u64> = &mut counts[id as usize];
            *c = Some(c.unwrap_or(0).saturating_add(d.count));
        }
        let mut stacks = vec![None; self.stacks.len()];
        for (st, &id) in s.stacks.iter().zip(&stack_ids) {
            let c: &mut Option<(u64, u64)> = &mut stacks[id as usize];
            let (w, n) = c.unwrap_or((0, 0));
            *c = Some((w.saturating_add(st.weight), n.saturating_add(st.samples)));
        }

        if !(self.new_strings.is_empty()
            && self.new_keys.is_empty()
            && self.new_names.is_empty()
            && self.new_stacks.is_empty()
            && self.new_samples.is_empty()
            && self.sockets.is_empty())
        {
            let dict = self.dictionary();
            push_frame(out, Kind::Dictionary, elapsed_ns, &dict)?;
        }
        // A new reading of the kernel's counters goes before the first snapshot carrying it.
        let kernel = s.kernel.as_ref().filter(|r| {
            !(self.kernel_last.as_ref())
                .is_some_and(|l| std::sync::Arc::ptr_eq(l, r) || **l == ***r)
        });
        let mut chain = self.kernel_chain;
        if let Some(r) = kernel {
            let (full, whole) = super::kernel::encode(r);
            // The changes only, while a chain may go on: a seek applies a bounded number.
            let delta = match (&self.kernel_last, chain) {
                (Some(last), Some((since, n)))
                    if whole
                        && n < super::kernel_delta::WRITE_CHAIN
                        && elapsed_ns.saturating_sub(since)
                            < super::kernel_delta::FULL_EVERY.as_nanos() as u64 =>
                {
                    super::kernel_delta::encode(last, r, full.len())
                }
                _ => None,
            };
            match delta {
                Some(d) => {
                    push_frame(out, Kind::KernelDelta, elapsed_ns, &d)?;
                    chain = chain.map(|(since, n)| (since, n + 1));
                }
                None => {
                    if full.len() > super::kernel::MAX_KERNEL_FRAME {
                        return Err(RecordError::FrameTooLarge(full.len()));
                    }
                    push_frame(out, Kind::Kernel, elapsed_ns, &full)?;
                    // A reading not held whole is not what a reader rebuilds: no delta from it.
                    chain = whole.then_some((elapsed_ns, 0));
                }
            }
        }
        // Who could have dropped, where that changed with it.
        let attribution =
            kernel.filter(|r| super::attribution::changed(self.attribution_last.as_deref(), r));
        let mut attribution_chain = self.attribution_chain;
        if let Some(r) = attribution {
            use super::attribution_delta as delta;
            let (full, whole) = super::attribution::encode_whole(r);
            // The counters that changed only, while a chain may go on.
            let d = match (&self.attribution_last, attribution_chain) {
                (Some(last), Some((since, n)))
                    if n < delta::WRITE_CHAIN
                        && elapsed_ns.saturating_sub(since)
                            < delta::FULL_EVERY.as_nanos() as u64 =>
                {
                    delta::encode(last, r, full.len())
                }
                _ => None,
            };
            match d {
                Some(d) => {
                    push_frame(out, Kind::AttributionDelta, elapsed_ns, &d)?;
                    attribution_chain = attribution_chain.map(|(since, n)| (since, n + 1));
                }
                None => {
                    push_frame(out, Kind::Attribution, elapsed_ns, &full)?;
                    attribution_chain = whole.then_some((elapsed_ns, 0));
                }
            }
        }
        let keyframe = match &self.prev {
            None => true,
            Some(_) => {
                elapsed_ns.saturating_sub(self.last_keyframe_ns) >= KEYFRAME_EVERY.as_nanos() as u64
                    || self.since_keyframe + 1 >= KEYFRAME_MAX_FRAMES
            }
        };
        let mut p = Vec::new();
        match &self.prev {
            Some(prev) if !keyframe => put_delta(&mut p, s, &prev.state, &counts, &stacks),
            _ => put_keyframe(&mut p, s, &counts, &stacks),
        }
        let kind = if keyframe {
            Kind::Keyframe
        } else {
            Kind::Delta
        };
        push_frame(out, kind, elapsed_ns, &p)?;
        // Committed.
        if let Some(r) = kernel {
            self.kernel_last = Some(r.clone());
            self.kernel_chain = chain;
        }
        if let Some(r) = attribution {
            self.attribution_last = Some(r.clone());
            self.attribution_chain = attribution_chain;
        }
        self.new_samples.clear();
        self.new_strings.clear();
        self.new_keys.clear();
        self.new_ids.clear();
        self.new_names.clear();
        self.sockets.commit();
        self.new_stacks.clear();
        if keyframe {
            self.last_keyframe_ns = elapsed_ns;
            self.since_keyframe = 0;
        } else {
            self.since_keyframe += 1;
        }
        self.prev = Some(Prev {
            elapsed_ns,
            state: State {
                unix_ms: s.unix_ms,
                total: s.total,
                overflow: s.overflow,
                health: s.health.clone(),
                counts,
                stacks,
            },
        });
        Ok(())
    }

    fn dictionary(&self) -> Vec<u8> {
        let mut p = Vec::new();
        put_uvarint(&mut p, self.new_strings.len() as u64);
        for s in &self.new_strings {
            put_str(&mut p, s);
        }
        put_uvarint(&mut p, self.new_keys.len() as u64);
        for &(
            code,
            name,
            loc,
            (netns, netns_name, device, protocol, port, ifindex, cookie, socket),
        ) in &self.new_keys
        {
            for v in [code, name, loc] {
                put_uvarint(&mut p, v.into());
            }
            let mask = u64::from(netns.is_some())
                | u64::from(netns_name.is_some()) << 1
                | u64::from(device.is_some()) << 2
                | u64::from(protocol.is_some()) << 3
                | u64::from(port.is_some()) << 4
                | u64::from(ifindex.is_some()) << 5
                | u64::from(cookie.is_some()) << 6
                | u64::from(socket.is_some()) << 7;
            put_uvarint(&mut p, mask);
            let fields = [
                netns,
                netns_name.map(u64::from),
                device.map(u64::from),
                protocol.map(u64::from),
                port.map(u64::from),
                ifindex.map(u64::from),
                cookie,
                socket,
            ];
            for v in fields.into_iter().flatten() {
                put_uvarint(&mut p, v);
            }
        }
        put_uvarint(&mut p, self.new_stacks.len() as u64);
        for (key, frames) in &self.new_stacks {
            put_uvarint(&mut p, (*key).into());
            put_uvarint(&mut p, frames.len() as u64);
            for &f in frames.iter() {
                put_uvarint(&mut p, f.into());
            }
        }
        put_uvarint(&mut p, self.new_samples.len() as u64);
        for (key, smp) in &self.new_samples {
            put_uvarint(&mut p, (*key).into());
            put_uvarint(&mut p, smp.unix_ms);
            put_uvarint(&mut p, smp.len.into());
            put_uvarint(&mut p, smp.l3proto.into());
            put_uvarint(&mut p, smp.bytes.len() as u64);
            p.extend_from_slice(&smp.bytes);
        }
        put_uvarint(&mut p, self.new_names.len() as u64);
        for &(id, (netns_name, device), _) in &self.new_names {
            put_uvarint(&mut p, id.into());
            for name in [netns_name, device] {
                put_uvarint(&mut p, name.map_or(0, |n| u64::from(n) + 1));
            }
        }
        // Left out when empty: such a frame is also one of version 6.
        if !self.sockets.is_empty() {
            self.sockets.put(&mut p);
        }
        p
    }

    /// Interns the samples not written yet: the first `PER_KEY` of each key, at most
    /// `MAX_SAMPLES` in all (the reader's limits), their bytes cut to `MAX_SAMPLE_BYTES`.
    fn intern_samples(&mut self, s: &Snapshot) {
        for ks in &s.samples {
            let id = self.key(&ks.key, false);
            let done = self.samples_of.get(&id).copied().unwrap_or(0);
            let room = PER_KEY.saturating_sub(done).min(MAX_SAMPLES - self.samples);
            let fresh: Vec<Sample> = ks.packets.iter().skip(done).take(room).cloned().collect();
            for mut smp in fresh {
                if smp.bytes.len() > MAX_SAMPLE_BYTES {
                    smp.bytes = smp.bytes[..MAX_SAMPLE_BYTES].into();
                }
                *self.samples_of.entry(id).or_default() += 1;
                self.samples += 1;
                self.new_samples.push((id, smp));
            }
        }
    }
}

fn put_keyframe(
    p: &mut Vec<u8>,
    s: &Snapshot,
    counts: &[Option<u64>],
    stacks: &[Option<(u64, u64)>],
) {
    for v in [s.unix_ms, s.total, s.overflow] {
        put_uvarint(p, v);
    }
    health::put_full(p, &s.health);
    put_uvarint(p, counts.iter().flatten().count() as u64);
    let mut last = None;
    for (id, c) in counts.iter().enumerate() {
        if let Some(c) = c {
            put_gap(p, &mut last, id);
            put_uvarint(p, *c);
        }
    }
    put_uvarint(p, stacks.iter().flatten().count() as u64);
    let mut last = None;
    for (id, c) in stacks.iter().enumerate() {
        if let Some((w, n)) = c {
            put_gap(p, &mut last, id);
            put_uvarint(p, *w);
            put_uvarint(p, *n);
        }
    }
}

/// Ids present before and absent now, in ascending order.
fn removed<T>(before: &[Option<T>], now: &[Option<T>]) -> Vec<usize> {
    (0..before.len())
        .filter(|&i| before[i].is_some() && now.get(i).is_none_or(|c| c.is_none()))
        .collect()
}

fn put_removed(p: &mut Vec<u8>, ids: &[usize]) {
    put_uvarint(p, ids.len() as u64);
    let mut last = None;
    for &id in ids {
        put_gap(p, &mut last, id);
    }
}

fn put_delta(
    p: &mut Vec<u8>,
    s: &Snapshot,
    prev: &State,
    counts: &[Option<u64>],
    stacks: &[Option<(u64, u64)>],
) {
    use super::format::zigzag_diff as zz;
    put_uvarint(p, zz(prev.unix_ms, s.unix_ms));
    put_uvarint(p, zz(prev.total, s.total));
    put_uvarint(p, zz(prev.overflow, s.overflow));
    health::put_delta(p, &prev.health, &s.health);

    put_removed(p, &removed(&prev.counts, counts));
    let changed: Vec<(usize, u64)> = counts
        .iter()
        .enumerate()
        .filter_map(|(id, c)| {
            let before = prev.counts.get(id).copied().flatten();
            c.filter(|&c| before != Some(c))
                .map(|c| (id, zz(before.unwrap_or(0), c)))
        })
        .collect();
    put_uvarint(p, changed.len() as u64);
    let mut last = None;
    for (id, d) in changed {
        put_gap(p, &mut last, id);
        put_uvarint(p, d);
    }

    put_removed(p, &removed(&prev.stacks, stacks));
    let changed: Vec<(usize, (u64, u64))> = stacks
        .iter()
        .enumerate()
        .filter_map(|(id, c)| {
            let before = prev.stacks.get(id).copied().flatten();
            c.filter(|&c| before != Some(c)).map(|(w, n)| {
                let (bw, bn) = before.unwrap_or((0, 0));
                (id, (zz(bw, w), zz(bn, n)))
            })
        })
        .collect();
    put_uvarint(p, changed.len() as u64);
    let mut last = None;
    for (id, (w, n)) in changed {
        put_gap(p, &mut last, id);
        put_uvarint(p, w);
        put_uvarint(p, n);
    }
}
