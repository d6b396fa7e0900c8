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

#[derive(Debug)]
struct Kernel {
    ncpus: usize,
    hash: Vec<(KernelKey, u32)>,
    free: VecDeque<u32>,
    counts: Vec<Vec<u64>>,
    total: Vec<u64>,
    overflow: Vec<u64>,
    new_keys: Vec<u64>,
    script: Vec<(usize, KernelKey)>,
    next: usize,
    step: Step,
    /// Drops completed (every step done), per key; `None` for overflow.
    done: HashMap<Option<KernelKey>, u64>,
    /// Drops whose count step is done, per key; `None` for overflow.
    counted: HashMap<Option<KernelKey>, u64>,
}

impl Kernel {
    fn new(ncpus: usize, capacity: u32, script: Vec<(usize, KernelKey)>) -> Self {
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
            done: HashMap::new(),
            counted: HashMap::new(),
        }
    }

    fn finished(&self) -> bool {
        self.next >= self.script.len()
    }

    /// Between its count and its total: a drop a reader may see half-way.
    fn mid_drop(&self) -> bool {
        self.step == Step::Total
    }

    /// Runs one step of the program; false when the script is over.
    fn step(&mut self) -> bool {
        let Some(&(cpu, key)) = self.script.get(self.next) else {
            return false;
        };
        self.step = match self.step {
            Step::Lookup => match self.hash.iter().find(|(k, _)| *k == key) {
                Some(&(_, slot)) => Step::Count(slot),
                None => match self.free.pop_front() {
                    Some(slot) => {
                        self.hash.push((key, slot));
                        Step::NewKey(slot)
                    }
                    None => {
                        self.overflow[cpu] += 1;
                        *self.counted.entry(None).or_default() += 1;
                        self.next_overflow(cpu);
                        return true;
                    }
                },
            },
            Step::NewKey(slot) => {
                self.new_keys[cpu] += 1;
                Step::Count(slot)
            }
            Step::Count(slot) => {
                self.counts[cpu][slot as usize] += 1;
                *self.counted.entry(Some(key)).or_default() += 1;
                Step::Total
            }
            Step::Total => {
                self.total[cpu] += 1;
                *self.done.entry(Some(key)).or_default() += 1;
                self.next += 1;
                Step::Lookup
            }
        };
        true
    }

    /// An overflowed drop's total step, folded into the same step for brevity.
    fn next_overflow(&mut self, cpu: usize) {
        self.total[cpu] += 1;
        *self.done.entry(None).or_default() += 1;
        self.next += 1;
        self.step = Step::Lookup;
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
            k.step();
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
    let fake = Fake {
        kernel: RefCell::new(Kernel::new(ncpus, capacity, script.to_vec())),
        schedule: RefCell::new(schedule.iter().copied().collect()),
        saw_mid_drop: RefCell::new(false),
    };
    let mut reader = CountReader::default();
    let mut previous = HashMap::new();
    for _ in 0..2 {
        let before = fake.kernel.borrow().done.clone();
        *fake.saw_mid_drop.borrow_mut() = fake.kernel.borrow().mid_drop();
        let read = reader.read(&fake).expect("fake reads cannot fail");
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
        kernel: RefCell::new(Kernel::new(1, 4, vec![(0, key(1)), (0, key(1))])),
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
