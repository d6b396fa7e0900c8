//! The count reader against a fake kernel that runs the program's steps in the middle of a
//! read, through every interleaving of a few drops and through many random ones.
use std::{
    cell::RefCell,
    collections::{HashMap, VecDeque},
    io,
};

use dropscope_common::DropKey as KernelKey;

use super::{CountMaps, CountRead, CountReader};
use crate::probe::Totals;

fn key(location: u64) -> KernelKey {
    KernelKey {
        location,
        reason: 2,
        ..KernelKey::default()
    }
}

/// Where the fake program is within the current drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Look the key up; take a free slot and insert it if new (or overflow when none is free).
    Lookup,
    /// Count the new key in this CPU's `new_keys`.
    NewKey(u32),
    /// Increment this CPU's counter of the slot.
    Count(u32),
    /// Increment this CPU's total (last).
    Total,
}

/// A memory location the program stores to (each is written by one CPU only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    NewKeys(usize),
    Count(usize, u32),
    Overflow(usize),
    Total(usize),
}

/// A store of the program not yet visible to the reader (weakly ordered model only).
#[derive(Clone, Copy, Debug)]
struct Store {
    loc: Loc,
    /// The drop (index in the script) it belongs to.
    drop: usize,
    /// How many reads had ended when its drop began.
    epoch: u64,
}

/// The order in which the reader sees the program's stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// In program order (x86's TSO, for these plain stores).
    Program,
    /// Stores to different locations become visible in any order (arm64): each waits in a
    /// store buffer until drained, one location's stores in order. The seed drives the drain
    /// order.
    Weak(u64),
}

#[derive(Debug)]
struct Kernel {
    ncpus: usize,
    hash: Vec<(KernelKey, u32)>,
    free: VecDeque<u32>,
    /// What the reader sees.
    counts: Vec<Vec<u64>>,
    total: Vec<u64>,
    overflow: Vec<u64>,
    new_keys: Vec<u64>,
    script: Vec<(usize, KernelKey)>,
    next: usize,
    step: Step,
    order: Order,
    /// Stores made but not yet visible, oldest first.
    pending: Vec<Store>,
    /// Per drop: its stores not yet visible, whether its program finished, and whether it
    /// was counted under its key (`Some(key)`) or as overflow (`None`).
    outstanding: Vec<u32>,
    finished_program: Vec<bool>,
    counted_as: Vec<Option<Option<KernelKey>>>,
    /// Reads ended so far.
    epoch: u64,
    /// How many reads had ended when the current drop began.
    drop_epoch: u64,
    rng: u64,
    /// Drops completed (every step done and visible), per key; `None` for overflow.
    done: HashMap<Option<KernelKey>, u64>,
    /// Drops whose count (or overflow) store is visible, per key; `None` for overflow.
    counted: HashMap<Option<KernelKey>, u64>,
}

impl Kernel {
    fn new(ncpus: usize, capacity: u32, script: Vec<(usize, KernelKey)>, order: Order) -> Self {
        let n = script.len();
        Self {
            ncpus,
            hash: Vec::new(),
            free: (0..capacity).collect(),
            counts: vec![vec![0; capacity as usize]; ncpus],
            total: vec![0; ncpus],
            overflow: vec![0; ncpus],
            new_keys: vec![0; ncpus],
            script,
            next: 0,
            step: Step::Lookup,
            order,
            pending: Vec::new(),
            outstanding: vec![0; n],
            finished_program: vec![false; n],
            counted_as: vec![None; n],
            epoch: 0,
            drop_epoch: 0,
            rng: match order {
                Order::Weak(seed) => seed | 1,
                Order::Program => 1,
            },
            done: HashMap::new(),
            counted: HashMap::new(),
        }
    }

    fn finished(&self) -> bool {
        self.next >= self.script.len() && self.pending.is_empty()
    }

    /// A drop a reader may see half-way: between its count and its total in program order,
    /// or with stores still invisible.
    fn mid_drop(&self) -> bool {
        self.step == Step::Total || !self.pending.is_empty()
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// The program stores to `loc` for the current drop: visible now in program order, else
    /// buffered.
    fn store(&mut self, loc: Loc) {
        let drop = self.next;
        match self.order {
            Order::Program => self.apply(loc, drop),
            Order::Weak(_) => {
                self.outstanding[drop] += 1;
                self.pending.push(Store {
                    loc,
                    drop,
                    epoch: self.drop_epoch,
                });
            }
        }
    }

    /// Makes a store visible.
    fn apply(&mut self, loc: Loc, drop: usize) {
        let key = self.script[drop].1;
        match loc {
            Loc::NewKeys(cpu) => self.new_keys[cpu] += 1,
            Loc::Count(cpu, slot) => {
                self.counts[cpu][slot as usize] += 1;
                *self.counted.entry(Some(key)).or_default() += 1;
            }
            Loc::Overflow(cpu) => {
                self.overflow[cpu] += 1;
                *self.counted.entry(None).or_default() += 1;
            }
            Loc::Total(cpu) => self.total[cpu] += 1,
        }
        self.settle(drop);
    }

    /// Counts a drop as done once its program finished and all its stores are visible.
    fn settle(&mut self, drop: usize) {
        if self.finished_program[drop]
            && self.outstanding[drop] == 0
            && let Some(as_key) = self.counted_as[drop]
        {
            *self.done.entry(as_key).or_default() += 1;
            // Once only.
            self.counted_as[drop] = None;
        }
    }

    /// Makes the pending store at `i` visible, or the oldest one to the same location before
    /// it (one location's stores become visible in order).
    fn drain(&mut self, i: usize) {
        let loc = self.pending[i].loc;
        let first = self.pending.iter().position(|s| s.loc == loc).unwrap_or(i);
        let s = self.pending.remove(first);
        self.outstanding[s.drop] -= 1;
        self.apply(s.loc, s.drop);
    }

    /// Makes visible every store of the drops begun before `epoch` reads had ended.
    fn drain_before(&mut self, epoch: u64) {
        while let Some(i) = self.pending.iter().position(|s| s.epoch < epoch) {
            self.drain(i);
        }
    }

    /// What the real machine guarantees between two polls (hundreds of milliseconds apart): a
    /// drop that had begun when the last read ended has run to its end (a program run takes
    /// microseconds and is not preempted) and all its stores are visible (a store buffer
    /// drains in nanoseconds). Without this, a drop would be half-done across two reads: lost,
    /// as far as any reader can tell.
    fn between_reads(&mut self) {
        let epoch = self.epoch;
        while self.step != Step::Lookup && self.drop_epoch < epoch {
            self.step();
        }
        self.drain_before(epoch);
    }

    /// One action: a program step, or (weakly ordered, at random) making a buffered store
    /// visible. False when nothing is left to do.
    fn act(&mut self) -> bool {
        let program_left = self.next < self.script.len();
        if !self.pending.is_empty() && (!program_left || self.random().is_multiple_of(2)) {
            let i = (self.random() % self.pending.len() as u64) as usize;
            self.drain(i);
            return true;
        }
        self.step()
    }

    /// Runs one step of the program; false when the script is over.
    fn step(&mut self) -> bool {
        let Some(&(cpu, key)) = self.script.get(self.next) else {
            return false;
        };
        if self.step == Step::Lookup {
            self.drop_epoch = self.epoch;
        }
        self.step = match self.step {
            // The map's own insert is ordered by the kernel (locks, RCU publication).
            Step::Lookup => match self.hash.iter().find(|(k, _)| *k == key) {
                Some(&(_, slot)) => Step::Count(slot),
                None => match self.free.pop_front() {
                    Some(slot) => {
                        self.hash.push((key, slot));
                        Step::NewKey(slot)
                    }
                    None => {
                        self.next_overflow(cpu);
                        return true;
                    }
                },
            },
            Step::NewKey(slot) => {
                self.store(Loc::NewKeys(cpu));
                Step::Count(slot)
            }
            Step::Count(slot) => {
                self.counted_as[self.next] = Some(Some(key));
                self.store(Loc::Count(cpu, slot));
                Step::Total
            }
            Step::Total => {
                self.store(Loc::Total(cpu));
                self.end_drop();
                Step::Lookup
            }
        };
        true
    }

    /// An overflowed drop's overflow and total steps, folded into one step for brevity (they
    /// are still two stores).
    fn next_overflow(&mut self, cpu: usize) {
        self.counted_as[self.next] = Some(None);
        self.store(Loc::Overflow(cpu));
        self.store(Loc::Total(cpu));
        self.end_drop();
        self.step = Step::Lookup;
    }

    fn end_drop(&mut self) {
        let drop = self.next;
        self.finished_program[drop] = true;
        self.next += 1;
        self.settle(drop);
    }
}

/// The fake kernel behind the seam: before serving each call of the reader, it runs the number
/// of program steps the schedule gives for that call.
struct Fake {
    kernel: RefCell<Kernel>,
    schedule: RefCell<VecDeque<usize>>,
    /// Whether a drop was half-way at some call of the current read.
    saw_mid_drop: RefCell<bool>,
}

impl Fake {
    fn tick(&self) {
        let n = self.schedule.borrow_mut().pop_front().unwrap_or(0);
        let mut k = self.kernel.borrow_mut();
        for _ in 0..n {
            k.act();
        }
        if k.mid_drop() {
            *self.saw_mid_drop.borrow_mut() = true;
        }
    }
}

impl CountMaps for Fake {
    fn totals(&self) -> Totals {
        self.tick();
        let k = self.kernel.borrow();
        Totals {
            total: k.total.iter().sum(),
            overflow: k.overflow.iter().sum(),
            new_keys: k.new_keys.iter().sum(),
            ..Totals::default()
        }
    }
    fn key_slots(&self) -> io::Result<Vec<(KernelKey, u32)>> {
        self.tick();
        Ok(self.kernel.borrow().hash.clone())
    }
    fn ncpus(&self) -> usize {
        self.kernel.borrow().ncpus
    }
    fn slot_count(&self, cpu: usize, slot: u32) -> u64 {
        self.tick();
        self.kernel.borrow().counts[cpu][slot as usize]
    }
}

/// Checks one read against what the kernel had done at its start and at its end.
fn check(
    read: &CountRead,
    before: &HashMap<Option<KernelKey>, u64>,
    after: &HashMap<Option<KernelKey>, u64>,
    previous: &HashMap<Option<KernelKey>, u64>,
    saw_mid_drop: bool,
) -> HashMap<Option<KernelKey>, u64> {
    let mut got: HashMap<Option<KernelKey>, u64> =
        read.counts.iter().map(|(k, n)| (Some(*k), *n)).collect();
    got.insert(None, read.overflow);
    let keys: Vec<_> = before
        .keys()
        .chain(after.keys())
        .chain(got.keys())
        .collect();
    for k in keys {
        let n = got.get(k).copied().unwrap_or(0);
        let low = before.get(k).copied().unwrap_or(0);
        let high = after.get(k).copied().unwrap_or(0);
        assert!(
            low <= n && n <= high,
            "{k:?}: read {n}, but {low} drops were done before the read and {high} counted by its end"
        );
        let prev = previous.get(k).copied().unwrap_or(0);
        assert!(n >= prev, "{k:?} went backwards: {prev} then {n}");
    }
    assert_eq!(
        read.total,
        read.counts.iter().map(|(_, n)| n).sum::<u64>() + read.overflow
    );
    if let Some(kernel) = read.settled_total
        && kernel != read.total
    {
        assert!(
            saw_mid_drop,
            "a settled read disagreed ({kernel} vs {}) with no drop half-way",
            read.total
        );
    }
    assert!(
        !read.mismatch,
        "a mismatch was reported, yet nothing was lost"
    );
    got
}

/// Runs two reads with the program's steps placed by `schedule` (steps before each reader
/// call), then finishes the script and reads once more, which must be exact and settled.
fn run(ncpus: usize, capacity: u32, script: &[(usize, KernelKey)], schedule: &[usize]) {
    run_ordered(ncpus, capacity, script, schedule, Order::Program, 2);
}

/// Runs `reads` reads with the program's actions (steps, and in the weak order stores made
/// visible) placed by `schedule` (actions before each reader call), then finishes the script,
/// makes every store visible and reads once more, which must be exact and settled.
fn run_ordered(
    ncpus: usize,
    capacity: u32,
    script: &[(usize, KernelKey)],
    schedule: &[usize],
    order: Order,
    reads: usize,
) {
    let fake = Fake {
        kernel: RefCell::new(Kernel::new(ncpus, capacity, script.to_vec(), order)),
        schedule: RefCell::new(schedule.iter().copied().collect()),
        saw_mid_drop: RefCell::new(false),
    };
    let mut reader = CountReader::default();
    let mut previous = HashMap::new();
    for _ in 0..reads {
        fake.kernel.borrow_mut().between_reads();
        let before = fake.kernel.borrow().done.clone();
        *fake.saw_mid_drop.borrow_mut() = fake.kernel.borrow().mid_drop();
        let read = reader.read(&fake).expect("fake reads cannot fail");
        fake.kernel.borrow_mut().epoch += 1;
        let after = fake.kernel.borrow().counted.clone();
        previous = check(
            &read,
            &before,
            &after,
            &previous,
            *fake.saw_mid_drop.borrow(),
        );
    }
    fake.schedule.borrow_mut().clear();
    while fake.kernel.borrow_mut().step() {}
    fake.kernel.borrow_mut().drain_before(u64::MAX);
    let read = reader.read(&fake).expect("fake reads cannot fail");
    let k = fake.kernel.borrow();
    assert!(k.finished());
    let done = k.done.clone();
    drop(k);
    check(&read, &done, &done, &previous, false);
    assert_eq!(
        read.settled_total,
        Some(read.total),
        "a quiet read is settled and exact"
    );
    assert_eq!(read.total, script.len() as u64);
}

/// Every way of placing `steps` program steps before the reader's first `slots` calls.
fn schedules(steps: usize, slots: usize, out: &mut Vec<Vec<usize>>, cur: &mut Vec<usize>) {
    if cur.len() == slots - 1 {
        cur.push(steps);
        out.push(cur.clone());
        cur.pop();
        return;
    }
    for here in 0..=steps {
        cur.push(here);
        schedules(steps - here, slots, out, cur);
        cur.pop();
    }
}

#[test]
fn every_interleaving_of_runs_and_new_keys_is_exact_fresh_and_monotonic() {
    // Two CPUs; runs of one key, a second key interleaved, a key new to the map mid-read.
    let script = [
        (0, key(1)),
        (0, key(1)),
        (0, key(2)),
        (1, key(1)),
        (0, key(1)),
    ];
    // 5 drops of up to 4 steps each; the two reads make at most 2 * (2 + 1 + 2 * 2) calls.
    let steps = 17;
    let mut all = Vec::new();
    schedules(steps, 6, &mut all, &mut Vec::new());
    assert!(all.len() > 10_000, "{}", all.len());
    for s in &all {
        // The rest of the steps go after the sixth call (or at the end).
        run(2, 8, &script, s);
    }
}

#[test]
fn every_interleaving_with_a_full_map_counts_overflow_exactly() {
    // Capacity 1: the second key overflows; the invariant must hold on every read.
    let script = [(0, key(1)), (0, key(2)), (1, key(2)), (0, key(1))];
    let mut all = Vec::new();
    schedules(13, 6, &mut all, &mut Vec::new());
    for s in &all {
        run(2, 1, &script, s);
    }
}

#[test]
fn random_interleavings_of_many_drops_on_four_cpus() {
    // A small deterministic generator (xorshift): no dependency, reproducible failures.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2_000 {
        let script: Vec<_> = (0..40)
            .map(|_| ((next() % 4) as usize, key(next() % 6)))
            .collect();
        let schedule: Vec<usize> = (0..120).map(|_| (next() % 4) as usize).collect();
        run(4, 5, &script, &schedule);
    }
}

#[test]
fn a_gap_that_persists_is_reported() {
    // A kernel that loses a drop for real: its total says 3, its counts say 2.
    let fake = Fake {
        kernel: RefCell::new(Kernel::new(
            1,
            4,
            vec![(0, key(1)), (0, key(1))],
            Order::Program,
        )),
        schedule: RefCell::new(VecDeque::new()),
        saw_mid_drop: RefCell::new(false),
    };
    while fake.kernel.borrow_mut().step() {}
    fake.kernel.borrow_mut().total[0] += 1;
    let mut reader = CountReader::default();
    let first = reader.read(&fake).expect("fake reads cannot fail");
    assert!(!first.mismatch, "once may be a drop read half-way");
    assert_eq!(first.shown_total(), 2);
    let second = reader.read(&fake).expect("fake reads cannot fail");
    assert!(second.mismatch);
    assert_eq!(
        second.shown_total(),
        3,
        "the kernel's total is shown beside the counts"
    );
}

#[test]
fn random_interleavings_with_stores_seen_out_of_order() {
    // arm64: a drop's count, total and new-key stores reach the reader in any order.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..4_000 {
        let ncpus = 1 + (next() % 3) as usize;
        let len = 4 + (next() % 24) as usize;
        let script: Vec<_> = (0..len)
            .map(|_| ((next() % ncpus as u64) as usize, key(next() % 4)))
            .collect();
        // Mostly quiet reader calls (settled reads are the ones checked against the kernel's
        // total), with bursts of steps and stores made visible.
        let schedule: Vec<usize> = (0..200)
            .map(|_| {
                if next().is_multiple_of(3) {
                    1 + (next() % 4) as usize
                } else {
                    0
                }
            })
            .collect();
        let capacity = 2 + (next() % 3) as u32;
        run_ordered(ncpus, capacity, &script, &schedule, Order::Weak(next()), 8);
    }
}

#[test]
fn a_total_seen_before_its_count_then_a_count_before_its_total_is_no_mismatch() {
    // Two settled reads in a row disagree at the same kernel total, for two different drops
    // each seen half-way, in opposite directions: weak ordering, not a loss.
    let fake = Fake {
        kernel: RefCell::new(Kernel::new(
            1,
            4,
            vec![(0, key(1)), (0, key(1))],
            Order::Weak(1),
        )),
        schedule: RefCell::new(VecDeque::new()),
        saw_mid_drop: RefCell::new(false),
    };
    let visible = |k: &mut Kernel, drop: usize, total: bool| {
        let i = k
            .pending
            .iter()
            .position(|s| s.drop == drop && matches!(s.loc, Loc::Total(_)) == total)
            .expect("a pending store");
        k.drain(i);
    };
    {
        // The first drop's new key and total are visible, its count not yet.
        let mut k = fake.kernel.borrow_mut();
        for _ in 0..4 {
            k.step();
        }
        let i = k
            .pending
            .iter()
            .position(|s| matches!(s.loc, Loc::NewKeys(_)))
            .expect("the new key's store");
        k.drain(i);
        visible(&mut k, 0, true);
    }
    let mut reader = CountReader::default();
    let first = reader.read(&fake).expect("fake reads cannot fail");
    assert_eq!((first.settled_total, first.total), (Some(1), 0));
    assert!(!first.mismatch);
    {
        // Before the next read: the first drop's count is visible; the second drop's count is
        // visible too, its total not yet.
        let mut k = fake.kernel.borrow_mut();
        k.drain_before(u64::MAX);
        for _ in 0..3 {
            k.step();
        }
        visible(&mut k, 1, false);
    }
    let second = reader.read(&fake).expect("fake reads cannot fail");
    assert_eq!((second.settled_total, second.total), (Some(1), 2));
    assert!(
        !second.mismatch,
        "two drops each seen half-way are not a lost drop"
    );
    assert_eq!(second.shown_total(), 2);
    fake.kernel.borrow_mut().drain_before(u64::MAX);
    let third = reader.read(&fake).expect("fake reads cannot fail");
    assert_eq!((third.settled_total, third.total), (Some(2), 2));
}
