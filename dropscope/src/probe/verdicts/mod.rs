//! Programs that drop: every XDP and tc program on the host, watched by a verdict counter
//! (fexit, [`asm`]) that counts its drop verdicts in the kernel: `XDP_ABORTED` and `XDP_DROP`,
//! `TC_ACT_SHOT`.
//!
//! New programs are found by id (`BPF_PROG_GET_NEXT_ID` from the highest id seen) when the
//! [`loads`] watch saw a program loaded since the last look (memory reads, no syscall: found
//! at the next poll), and whatever it saw every [`DISCOVER_ANYWAY`] (once a second where it
//! cannot be opened), so a load it missed is found within that bound; ids the kernel gave again
//! after wrapping are found by a walk from the first id (see [`Programs::discover_if_due`]).
//! Where each is attached (device,
//! namespace, hook) comes from the kernel-counter reading (`rtnl`), which turns the counts
//! into `Xdp:` and `Tc:` counters of the ledger. A counter holds its target loaded: one whose
//! target is no longer attached anywhere is dropped after [`UNATTACHED_READINGS`] readings
//! that read whole every namespace it was last found in (a note about another namespace
//! never keeps it). A program that cannot be watched (loaded without BTF, or
//! refused) is kept with the reason, for the reading's notes.
pub mod asm;
pub mod loads;
pub mod sys;

use std::{
    collections::{BTreeMap, BTreeSet},
    os::fd::{AsFd, AsRawFd as _, OwnedFd},
    sync::Arc,
    time::{Duration, Instant},
};

use aya::maps::{Array, IterableMap as _, MapData, PerCpuArray};
use aya_obj::generated::bpf_prog_type;

use crate::{
    kcounters::Hooked,
    vocab::counter::{Counter, ProgramLayer},
    vocab::note::{PROGRAM_NOTE, UNCOUNTED},
    vocab::packet::Sample,
    vocab::reading::KernelReading,
};

/// The most programs watched at once.
pub const MAX_PROGRAMS: u32 = 256;
/// How often new programs are looked for without a [`loads::LoadWatch`].
pub const DISCOVER_EVERY: Duration = Duration::from_secs(1);
/// How often with one, when it saw no load: the bound on finding a program whose load it did
/// not see (a CPU that came online since, a record the kernel could not write). One syscall
/// when nothing is new.
pub const DISCOVER_ANYWAY: Duration = Duration::from_secs(5);
/// How often every id is walked from the first, whatever was seen: the bound on finding a
/// program given an id below the highest seen (ids wrap at `i32::MAX`) whose load was missed.
pub const WALK_ALL_EVERY: Duration = Duration::from_secs(60);
/// The most ids remembered as looked at (so that a walk from the first id opens only new
/// ones); past it, an id is looked at again on each such walk.
pub const MAX_KNOWN_IDS: usize = 65_536;
/// Readings in a row that must find a program attached nowhere before its counter goes.
pub const UNATTACHED_READINGS: u32 = 2;
/// How long a program never found attached keeps its counter: one attached within this after
/// it was found (a loader's later `ip link set ... xdp pinned`) is counted from then, not from
/// the reading that finds it attached. Its counter holds it loaded meanwhile.
pub const ATTACH_GRACE: Duration = Duration::from_secs(60);
/// The most programs looked at in one discovery (the rest wait for the next one).
pub const MAX_PER_DISCOVERY: usize = 1024;
/// The most programs kept as refused, with their reason; past it, an attached program that is
/// not watched is noted without one.
pub const MAX_REFUSED: usize = 1024;
/// Complete readings that look in every namespace a process is in after a new XDP or tc
/// program is found (it may be attached a moment after it is loaded).
pub const SEARCH_READINGS: u32 = 2;

/// The frames a program dropped with one verdict, sampled in the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerdictSamples {
    /// The namespace (inode) of the device the program is counted on.
    pub netns: u64,
    /// Its verdict counter's name (`Xdp:<dev>:<hook>:<prog>#<id>:<verdict>`).
    pub counter: String,
    /// The frames, oldest first.
    pub packets: Vec<Sample>,
}

/// The kind of program watched, and the verdicts that are drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// XDP: `XDP_ABORTED` (0) and `XDP_DROP` (1).
    Xdp,
    /// tc (`sched_cls`, `sched_act`, tcx): `TC_ACT_SHOT` (2).
    Tc,
}

impl Kind {
    fn of(prog_type: u32) -> Option<Self> {
        match prog_type {
            t if t == bpf_prog_type::BPF_PROG_TYPE_XDP as u32 => Some(Kind::Xdp),
            t if t == bpf_prog_type::BPF_PROG_TYPE_SCHED_CLS as u32
                || t == bpf_prog_type::BPF_PROG_TYPE_SCHED_ACT as u32 =>
            {
                Some(Kind::Tc)
            }
            _ => None,
        }
    }

    /// The verdicts counted, and their names in counter names.
    pub fn verdicts(self) -> &'static [(u32, &'static str)] {
        match self {
            Kind::Xdp => &[(0, "aborted"), (1, "drop")],
            Kind::Tc => &[(2, "shot")],
        }
    }
}

/// A program watched: its counter's slot and the counter's link.
#[derive(Debug)]
struct Watched {
    kind: Kind,
    name: String,
    slot: u32,
    /// The counter's program and link (the link keeps both the counter and its target).
    _prog: OwnedFd,
    _link: OwnedFd,
    /// Readings in a row that found it attached nowhere.
    unattached: u32,
    /// When its counter was attached.
    since: Instant,
    /// The frames it dropped that were read (XDP), in their places' order, with the verdict.
    frames: Vec<(u32, Sample)>,
    /// Its drops as last read (every verdict counted): frames are read while fewer than
    /// these (and than [`asm::SAMPLES_PER_PROGRAM`]) were.
    counted: std::cell::Cell<u64>,
    /// Whether the device it is counted on has Ethernet frames (see [`Hooked::ethernet`]).
    ethernet: std::cell::Cell<bool>,
}

/// What one walk of program ids found.
#[derive(Default)]
struct Walk {
    /// An XDP or tc program was looked at.
    found: bool,
    /// A tc program was looked at.
    tc: bool,
    /// The walk reached the last id.
    complete: bool,
    /// A program could not be looked at (it may have been a tc program).
    unsure: bool,
}

/// Every XDP and tc program's drop verdicts, counted in the kernel.
pub struct Programs {
    cells: PerCpuArray<MapData, u64>,
    /// XDP programs' sampled frames: claims per slot, and the frames (see [`asm::Sampler`]).
    claims: Array<MapData, u64>,
    frames: Array<MapData, asm::FrameSample>,
    watched: BTreeMap<u32, Watched>,
    /// Programs that could not be watched: name and why.
    refused: BTreeMap<u32, (String, String)>,
    free: Vec<u32>,
    /// The highest program id looked at.
    last_id: u32,
    found_at: Option<Instant>,
    /// When every id was last walked from the first.
    walked_all_at: Instant,
    /// Ids looked at (watched, refused, or not a program of ours), within [`MAX_KNOWN_IDS`].
    known: BTreeSet<u32>,
    /// The namespaces each watched or refused program was last found attached in: read on
    /// every reading, drops or not (an XDP drop frees no skb, so its namespace may have none).
    homes: BTreeMap<u32, BTreeSet<u64>>,
    /// Readings left that look in every namespace (see [`SEARCH_READINGS`]).
    search: u32,
    /// Whether `search` was sized to the namespaces there are (by the first search reading).
    search_sized: bool,
    /// Program loads seen without a syscall (`None`: the kernel refused the events).
    loads: Option<loads::LoadWatch>,
    /// Where the last reading put each watched program's counts: namespace, device, hook.
    placed: BTreeMap<u32, (u64, String, &'static str)>,
}

impl Programs {
    /// Creates the verdict array and watches every XDP and tc program loaded now.
    pub fn start() -> anyhow::Result<Self> {
        let cells = PerCpuArray::create(MAX_PROGRAMS * asm::CELLS, 0)?;
        let claims = Array::create(MAX_PROGRAMS, 0)?;
        let frames = Array::create(MAX_PROGRAMS * asm::SAMPLES_PER_PROGRAM, 0)?;
        let mut p = Self {
            cells,
            claims,
            frames,
            watched: BTreeMap::new(),
            refused: BTreeMap::new(),
            free: (0..MAX_PROGRAMS).rev().collect(),
            last_id: 0,
            found_at: None,
            walked_all_at: Instant::now(),
            known: BTreeSet::new(),
            homes: BTreeMap::new(),
            search: 0,
            search_sized: false,
            loads: loads::LoadWatch::open()
                .inspect_err(|e| tracing::debug!("program loads not watched: {e}"))
                .ok(),
            placed: BTreeMap::new(),
        };
        p.discover();
        Ok(p)
    }

    /// Looks for programs loaded since the last look: when the load watch saw one (or
    /// [`DISCOVER_ANYWAY`] passed), or without a watch once per [`DISCOVER_EVERY`]. A load seen
    /// that the walk from the highest id does not explain (an id given again after the kernel's
    /// ids wrapped, or an unload), and every [`WALK_ALL_EVERY`], walks every id from the first.
    pub fn discover_if_due(&mut self) {
        let since = self.found_at.map(|t| t.elapsed());
        let (due, seen) = match &mut self.loads {
            // A load during the walk moves a head again: looked for on the next call.
            Some(w) => {
                let seen = w.changed();
                (seen || since.is_none_or(|t| t >= DISCOVER_ANYWAY), seen)
            }
            None => (since.is_none_or(|t| t >= DISCOVER_EVERY), false),
        };
        if !due {
            return;
        }
        let new = self.discover();
        if (seen && !new) || self.walked_all_at.elapsed() >= WALK_ALL_EVERY {
            self.walk_all();
        }
    }

    /// Walks the ids above the highest one looked at; returns whether it found a program.
    fn discover(&mut self) -> bool {
        self.found_at = Some(Instant::now());
        let mut walk = Walk::default();
        for _ in 0..MAX_PER_DISCOVERY {
            let id = match sys::next_prog_id(self.last_id) {
                Ok(Some(id)) => id,
                Ok(None) => {
                    walk.complete = true;
                    break;
                }
                Err(_) => break,
            };
            self.last_id = id;
            self.look_at(id, &mut walk);
        }
        crate::kcounters::hooks::TC_PROGRAMS.found(walk.tc, walk.complete && !walk.unsure);
        walk.found
    }

    /// Walks every id from the first, looking only at those not looked at before (one syscall
    /// for each known one), and forgets known ids that are gone.
    fn walk_all(&mut self) {
        self.walked_all_at = Instant::now();
        let (mut walk, mut at, mut present) = (Walk::default(), 0, BTreeSet::new());
        loop {
            let id = match sys::next_prog_id(at) {
                Ok(Some(id)) => id,
                Ok(None) => {
                    walk.complete = true;
                    break;
                }
                Err(_) => break,
            };
            at = id;
            present.insert(id);
            if !self.known.contains(&id) {
                self.last_id = self.last_id.max(id);
                self.look_at(id, &mut walk);
            }
        }
        if walk.complete {
            self.known.retain(|id| present.contains(id));
        }
        crate::kcounters::hooks::TC_PROGRAMS.found(walk.tc, walk.complete && !walk.unsure);
    }

    /// Looks at program `id`: watches it if it is an XDP or tc program.
    fn look_at(&mut self, id: u32, walk: &mut Walk) {
        // Gone already, or not one of ours to watch. One that could not be looked at for
        // another reason may be a tc program: then none is known to be absent.
        let info = sys::prog_fd(id).and_then(|fd| sys::prog_info(fd.as_fd()).map(|i| (fd, i)));
        let (fd, info) = match info {
            Ok(x) => x,
            Err(e) => {
                walk.unsure |= e.raw_os_error() != Some(libc::ENOENT);
                return;
            }
        };
        if self.known.len() < MAX_KNOWN_IDS {
            self.known.insert(id);
        }
        let Some(kind) = Kind::of(info.kind) else {
            return;
        };
        walk.found = true;
        walk.tc |= kind == Kind::Tc;
        (self.search, self.search_sized) = (SEARCH_READINGS, false);
        if let Err(why) = self.watch(&info, kind, fd)
            && self.refused.len() < MAX_REFUSED
        {
            self.refused.insert(id, (info.name, why));
        }
    }

    fn watch(&mut self, info: &sys::ProgInfo, kind: Kind, target: OwnedFd) -> Result<(), String> {
        let btf = info.main_func.ok_or_else(|| {
            "loaded without BTF function info: its verdicts cannot be traced".to_string()
        })?;
        let slot = self
            .free
            .pop()
            .ok_or_else(|| format!("more than {MAX_PROGRAMS} programs watched"))?;
        let lo = kind.verdicts().first().map_or(0, |v| v.0);
        let hi = kind.verdicts().last().map_or(0, |v| v.0);
        // A slot used before starts from zero again, before its new counter can count.
        for (v, _) in kind.verdicts() {
            if let Err(e) = self.zero(slot * asm::CELLS + v) {
                self.free.push(slot);
                return Err(format!("its counters could not be reset: {e}"));
            }
        }
        // Its frames too (XDP): no claim taken, no place written.
        let sampler = (kind == Kind::Xdp).then(|| asm::Sampler {
            claims: self.claims.map().fd().as_fd().as_raw_fd(),
            frames: self.frames.map().fd().as_fd().as_raw_fd(),
        });
        if sampler.is_some()
            && let Err(e) = self.zero_frames(slot)
        {
            self.free.push(slot);
            return Err(format!("its sampled frames could not be reset: {e}"));
        }
        let map = self.cells.map().fd().as_fd();
        let insns = asm::verdict_counter(map.as_raw_fd(), slot, lo, hi, sampler);
        let attached = sys::load_fexit(&insns, target.as_fd(), btf)
            .map_err(|e| format!("loading: {e}"))
            .and_then(|prog| {
                sys::attach_tracing(prog.as_fd())
                    .map(|link| (prog, link))
                    .map_err(|e| format!("attaching: {e}"))
            });
        let (prog, link) = match attached {
            Ok(x) => x,
            Err(e) => {
                self.free.push(slot);
                return Err(format!("the kernel refused its verdict counter: {e}"));
            }
        };
        self.watched.insert(
            info.id,
            Watched {
                kind,
                name: info.name.clone(),
                slot,
                _prog: prog,
                _link: link,
                unattached: 0,
                since: Instant::now(),
                frames: Vec::new(),
                counted: std::cell::Cell::new(0),
                ethernet: std::cell::Cell::new(true),
            },
        );
        Ok(())
    }

    fn zero_frames(&mut self, slot: u32) -> Result<(), aya::maps::MapError> {
        let first = slot * asm::SAMPLES_PER_PROGRAM;
        for i in first..first + asm::SAMPLES_PER_PROGRAM {
            self.frames.set(i, asm::FrameSample::default(), 0)?;
        }
        self.claims.set(slot, 0, 0)
    }

    /// Reads the frames each placed XDP program dropped that are written and not read yet:
    /// only while fewer were read than it counted drops (and than
    /// [`asm::SAMPLES_PER_PROGRAM`]), so a program that drops nothing, or whose places are
    /// all read, costs no syscall. A place is read twice and kept when both reads agree: a
    /// frame being written is read again at the next poll.
    fn read_frames(&mut self) {
        let offset = crate::clock::unix_ms() as i128 - crate::clock::monotonic_ms() as i128;
        for id in self.placed.keys() {
            let Some(w) = self.watched.get_mut(id) else {
                continue;
            };
            let due = w.counted.get().min(u64::from(asm::SAMPLES_PER_PROGRAM));
            while w.kind == Kind::Xdp && (w.frames.len() as u64) < due {
                let at = w.slot * asm::SAMPLES_PER_PROGRAM + w.frames.len() as u32;
                let (Ok(f), Ok(again)) = (self.frames.get(&at, 0), self.frames.get(&at, 0)) else {
                    break;
                };
                if f.ts_ns == 0 || f != again {
                    break;
                }
                let unix_ms = (i128::from(f.ts_ns / 1_000_000) + offset).max(0) as u64;
                let caplen = (f.caplen as usize).min(f.data.len());
                let sample = if w.ethernet.get() {
                    Sample::from_frame(unix_ms, f.len, &f.data[..caplen])
                } else {
                    Sample::from_network(unix_ms, f.len, &f.data[..caplen])
                };
                w.frames.push((f.verdict, sample));
            }
        }
    }

    /// The frames each placed XDP program dropped, by its verdict counter (the collector keys
    /// them as the verdict's row). Only IPv4 and IPv6 packets are kept, as the probe keeps
    /// them: an ARP frame, or one too short for its link-layer header, has no header to show
    /// (and takes one of the places).
    pub fn samples(&self) -> Vec<VerdictSamples> {
        let mut out: Vec<VerdictSamples> = Vec::new();
        for (id, (ns, device, hook)) in &self.placed {
            let Some(w) = self.watched.get(id) else {
                continue;
            };
            for (verdict, name) in w.kind.verdicts() {
                let packets: Vec<Sample> = (w.frames.iter())
                    .filter(|(v, s)| v == verdict && matches!(s.l3proto, 0x0800 | 0x86DD))
                    .map(|(_, s)| s.clone())
                    .collect();
                if packets.is_empty() {
                    continue;
                }
                out.push(VerdictSamples {
                    netns: *ns,
                    counter: counter_name(w.kind, device, hook, &w.name, *id, name),
                    packets,
                });
            }
        }
        out
    }

    fn zero(&mut self, cell: u32) -> Result<(), aya::maps::MapError> {
        let n = aya::util::nr_cpus().map_err(|(_, e)| aya::maps::MapError::IoError(e))?;
        self.cells
            .set(cell, aya::maps::PerCpuValues::try_from(vec![0u64; n])?, 0)
    }

    /// Whether program `id` was found: watched, or refused with a reason.
    pub fn found(&self, id: u32) -> bool {
        self.watched.contains_key(&id) || self.refused.contains_key(&id)
    }

    /// Consumes the load watch's records unread, as a record the kernel could not write would
    /// be lost: for the tests of the bound on finding a program anyway.
    #[doc(hidden)]
    pub fn miss_loads(&mut self) {
        if let Some(w) = &mut self.loads {
            w.changed();
        }
    }

    /// Takes `id` as the highest id looked at, as after the kernel's ids wrapped: for the tests
    /// of finding a program given an id below it.
    #[doc(hidden)]
    pub fn assume_highest_id(&mut self, id: u32) {
        self.last_id = id;
    }

    /// Programs watched now (ids).
    pub fn watched(&self) -> impl Iterator<Item = u32> + '_ {
        self.watched.keys().copied()
    }

    /// Adds each watched program's verdict counts to `reading`, as counters of the device it
    /// is attached to (`hooks`, per namespace; one of them, with a note, for a program
    /// attached in several places: the counts are per program; see [`place`]), with a note for each attached
    /// program that is not watched; forgets counters whose target was attached nowhere for
    /// [`UNATTACHED_READINGS`] readings that looked where it was (see [`looked_everywhere`];
    /// `read`: whether the reading found the programs of a namespace whole, or it is gone).
    pub fn add_to(
        &mut self,
        reading: &mut KernelReading,
        hooks: &BTreeMap<u64, Vec<Hooked>>,
        read: impl Fn(u64) -> bool,
    ) {
        // Where each program is attached, in namespace and device order.
        let mut places: BTreeMap<u32, Vec<(u64, &Hooked)>> = BTreeMap::new();
        for (ns, list) in hooks {
            for h in list {
                places.entry(h.prog).or_default().push((*ns, h));
            }
        }
        let attached: BTreeSet<u32> = places.keys().copied().collect();
        let before = std::mem::take(&mut self.placed);
        // A program loaded since the last discovery is looked at now, not a second later.
        if attached.last().is_some_and(|id| *id > self.last_id) {
            self.discover();
        }
        if attached.iter().any(|id| !self.known.contains(id)) && self.known.len() < MAX_KNOWN_IDS {
            self.walk_all();
        }
        for (id, at) in &places {
            if let Some((name, why)) = self.refused.get(id) {
                for (ns, h) in at {
                    reading.errors.push(format!(
                        "{PROGRAM_NOTE}{id} {name:?} ({} {} on {}, netns {ns}): {UNCOUNTED}: \
                         {why}",
                        h.hook.kind_name(),
                        h.hook.as_str(),
                        h.device,
                    ));
                }
                continue;
            }
            let Some((ns, h)) = place(at, before.get(id)) else {
                continue;
            };
            let Some(w) = self.watched.get(id) else {
                reading.errors.push(format!(
                    "{PROGRAM_NOTE}{id} ({} {} on {}, netns {ns}): {UNCOUNTED}: not \
                     watched (it could not be read when it was loaded, it was found attached \
                     nowhere for {ATTACH_GRACE:.0?} after its load or was detached since, or \
                     more than {MAX_REFUSED} programs could not be watched)",
                    h.hook.kind_name(),
                    h.hook.as_str(),
                    h.device,
                ));
                continue;
            };
            // One count per program: on one place, never once per place.
            self.placed
                .insert(*id, (ns, h.device.clone(), h.hook.as_str()));
            let growth = reading.netns.entry(ns).or_default();
            let cells = read_cells(&self.cells, w);
            w.counted
                .set(cells.iter().fold(0, |t, (_, n)| t.saturating_add(*n)));
            w.ethernet.set(h.ethernet);
            for (verdict, n) in cells.iter().filter(|(_, n)| *n > 0) {
                let name = counter_name(w.kind, &h.device, h.hook.as_str(), &w.name, *id, verdict);
                growth.insert(Arc::from(name.as_str()), *n);
            }
            if at.len() > 1 {
                let all: Vec<String> = at
                    .iter()
                    .map(|(ns, h)| format!("{} {} (netns {ns})", h.hook.as_str(), h.device))
                    .collect();
                reading.errors.push(format!(
                    "{PROGRAM_NOTE}{id} {:?} is attached in {} places ({}): its verdicts are \
                     counted once, on {}",
                    w.name,
                    at.len(),
                    all.join(", "),
                    h.device
                ));
            }
        }
        let mut gone = Vec::new();
        let searching = self.searching();
        for (id, w) in &mut self.watched {
            let homes = self.homes.get(id);
            if attached.contains(id) {
                w.unattached = 0;
            } else if looked_everywhere(homes, &read, searching) {
                w.unattached += 1;
                let never = homes.is_none_or(BTreeSet::is_empty);
                if lets_go(w.unattached, never, w.since.elapsed()) {
                    gone.push(*id);
                }
            }
        }
        for id in gone {
            if let Some(w) = self.watched.remove(&id) {
                self.free.push(w.slot);
            }
        }
        // A refused program that is no longer loaded is forgotten.
        self.refused
            .retain(|id, _| attached.contains(id) || sys::prog_fd(*id).is_ok());
        for (id, at) in &places {
            self.homes
                .insert(*id, at.iter().map(|(ns, _)| *ns).collect());
        }
        let (watched, refused) = (&self.watched, &self.refused);
        self.homes
            .retain(|id, _| watched.contains_key(id) || refused.contains_key(id));
        self.read_frames();
    }

    /// Whether any watched program was found attached by the last reading: its counts can then
    /// be [refreshed](Self::refresh) between readings.
    pub fn placed(&self) -> bool {
        !self.placed.is_empty()
    }

    /// Updates the verdict counts of `reading` (the latest reading, which placed them) to the
    /// counts now, without reading any other counter: one map read per verdict of each program
    /// placed (and, when a count changed, the frames XDP programs sampled since). Returns
    /// whether any count changed.
    pub fn refresh(&mut self, reading: &mut KernelReading) -> bool {
        let mut changed = false;
        for (id, (ns, device, hook)) in &self.placed {
            let Some(w) = self.watched.get(id) else {
                continue;
            };
            let growth = reading.netns.entry(*ns).or_default();
            let cells = read_cells(&self.cells, w);
            w.counted
                .set(cells.iter().fold(0, |t, (_, n)| t.saturating_add(*n)));
            for (verdict, n) in cells.into_iter().filter(|(_, n)| *n > 0) {
                let name = counter_name(w.kind, device, hook, &w.name, *id, verdict);
                let old = growth.insert(Arc::from(name.as_str()), n);
                changed |= old != Some(n);
            }
        }
        self.read_frames();
        changed
    }

    /// The namespaces where watched or refused programs were last found attached: the
    /// reading looks there every time.
    pub fn homes(&self) -> impl Iterator<Item = u64> + '_ {
        self.homes.values().flatten().copied()
    }

    /// Whether the next reading is to look in every namespace a process is in: a new XDP or
    /// tc program was found, and where it is attached is not known yet.
    pub fn searching(&self) -> bool {
        self.search > 0
    }

    /// Whether readings at their pace are to look in every namespace a process is in too: a
    /// watched program has not been found attached yet, within [`ATTACH_GRACE`] of its watch
    /// (attached by a later step of its loader, wherever that is).
    pub fn seeking(&self) -> bool {
        (self.watched.iter()).any(|(id, w)| {
            self.homes.get(id).is_none_or(BTreeSet::is_empty) && w.since.elapsed() < ATTACH_GRACE
        })
    }

    /// Takes in that a searching reading was made; `rounds`: how many readings it takes to
    /// read every namespace once (more than one past the bound on namespaces per reading:
    /// the search then lasts as many times longer).
    pub fn searched(&mut self, rounds: u32) {
        if !self.search_sized {
            self.search = SEARCH_READINGS * rounds.max(1);
            self.search_sized = true;
        }
        self.search = self.search.saturating_sub(1);
    }
}

/// Whether the counter of a program that `unattached` readings in a row found attached nowhere
/// goes: after [`UNATTACHED_READINGS`]; for one never found attached (`never`), only once it
/// was watched for [`ATTACH_GRACE`].
fn lets_go(unattached: u32, never: bool, watched_for: Duration) -> bool {
    unattached >= UNATTACHED_READINGS && (!never || watched_for >= ATTACH_GRACE)
}

/// Whether a reading that found a program attached nowhere looked everywhere it could be: in
/// every namespace it was last found attached in (`homes`), each read whole or gone (`read`),
/// whatever the reading noted of other namespaces; for one never found attached, once no search
/// for where it is is under way (`searching`).
fn looked_everywhere(
    homes: Option<&BTreeSet<u64>>,
    read: impl Fn(u64) -> bool,
    searching: bool,
) -> bool {
    match homes {
        Some(homes) if !homes.is_empty() => homes.iter().all(|ns| read(*ns)),
        _ => !searching,
    }
}

/// Where a program attached in `at` (namespace, then device order) is counted: where it was
/// counted `before` while it is still attached there, else its first place. A program given a
/// place that orders before its own keeps its counter's name: a new name would count its
/// whole history as a window's.
fn place<'a>(
    at: &[(u64, &'a Hooked)],
    before: Option<&(u64, String, &'static str)>,
) -> Option<(u64, &'a Hooked)> {
    let kept = before.and_then(|(ns, device, hook)| {
        at.iter()
            .find(|(n, h)| n == ns && h.device == *device && h.hook.as_str() == *hook)
    });
    kept.or(at.first()).copied()
}

/// A watched program's counts since it was watched, summed over CPUs.
fn read_cells(cells: &PerCpuArray<MapData, u64>, w: &Watched) -> Vec<(&'static str, u64)> {
    w.kind
        .verdicts()
        .iter()
        .map(|(v, name)| {
            let n = cells
                .get(&(w.slot * asm::CELLS + v), 0)
                .map_or(0, |vals| vals.iter().copied().fold(0u64, u64::wrapping_add));
            (*name, n)
        })
        .collect()
}

/// A verdict counter's name in a reading: `Xdp:<dev>:<hook>:<prog>#<id>:<verdict>` or
/// `Tc:<dev>:<hook>:<prog>#<id>:shot` (device and program names have no `:`).
pub fn counter_name(
    kind: Kind,
    device: &str,
    hook: &str,
    prog: &str,
    id: u32,
    verdict: &str,
) -> String {
    let layer = match kind {
        Kind::Xdp => ProgramLayer::Xdp,
        Kind::Tc => ProgramLayer::Tc,
    };
    let program = format!("{}#{id}", if prog.is_empty() { "?" } else { prog });
    let c = Counter::Verdict {
        layer,
        dev: device,
        hook,
        program: &program,
        verdict,
    };
    c.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kcounters::hooks::Hook;

    #[test]
    fn a_program_never_found_attached_keeps_its_counter_for_the_grace() {
        let (grace, second) = (ATTACH_GRACE, Duration::from_secs(1));
        // Once attached, then attached nowhere: goes after the readings, grace or not.
        assert!(!lets_go(UNATTACHED_READINGS - 1, false, grace));
        assert!(lets_go(UNATTACHED_READINGS, false, second));
        // Never attached: stays within the grace, however many readings found it nowhere.
        assert!(!lets_go(UNATTACHED_READINGS + 100, true, grace - second));
        assert!(lets_go(UNATTACHED_READINGS, true, grace));
        assert!(!lets_go(UNATTACHED_READINGS - 1, true, grace + grace));
    }

    /// A program attached nowhere now is counted so where every namespace it was last found
    /// in was read whole or is gone: a note of another namespace (a dump cut short) never
    /// keeps it loaded; one of its own namespaces not read does.
    #[test]
    fn a_program_attached_nowhere_is_judged_by_its_own_namespaces() {
        let homes: BTreeSet<u64> = [1, 2].into();
        let read = |whole: &'static [u64]| move |ns: u64| whole.contains(&ns);
        assert!(looked_everywhere(Some(&homes), read(&[1, 2]), false));
        assert!(looked_everywhere(Some(&homes), read(&[1, 2]), true));
        assert!(!looked_everywhere(Some(&homes), read(&[1, 3]), false));
        // Never found attached: once no search is under way.
        assert!(looked_everywhere(None, read(&[]), false));
        assert!(!looked_everywhere(None, read(&[1, 2]), true));
        assert!(looked_everywhere(Some(&BTreeSet::new()), read(&[]), false));
    }

    #[test]
    fn a_program_keeps_its_place_while_it_is_attached_there() {
        let h = |device: &str, hook| Hooked {
            device: device.into(),
            hook,
            prog: 7,
            ethernet: true,
            filter: None,
        };
        let (b, a, tc) = (
            h("b", Hook::XdpDrv),
            h("a", Hook::XdpDrv),
            h("b", Hook::TcIngress),
        );
        let name = |p: Option<(u64, &Hooked)>| p.map(|(ns, h)| (ns, h.device.clone(), h.hook));
        // First seen: its first place.
        assert_eq!(
            name(place(&[(2, &b)], None)),
            Some((2, "b".into(), Hook::XdpDrv))
        );
        // Then attached to a device ordered before it: it stays where it was counted.
        let before = (2, "b".to_string(), Hook::XdpDrv.as_str());
        assert_eq!(
            name(place(&[(1, &a), (2, &b)], Some(&before))),
            Some((2, "b".into(), Hook::XdpDrv))
        );
        // Same device, another hook: not the same place.
        assert_eq!(
            name(place(&[(1, &a), (2, &tc)], Some(&before))),
            Some((1, "a".into(), Hook::XdpDrv))
        );
        // Detached from there: its first place now.
        assert_eq!(
            name(place(&[(1, &a)], Some(&before))),
            Some((1, "a".into(), Hook::XdpDrv))
        );
        assert_eq!(name(place(&[], Some(&before))), None);
    }
}
