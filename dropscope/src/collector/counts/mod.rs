//! The reader's side of the counting protocol (docs/counting-protocol.md): exact, fresh counts
//! from the kernel's maps, through a small seam ([`CountMaps`]) that tests can stand in for.
use std::io;

use dropscope_common::DropKey as KernelKey;

use crate::probe::{Probe, Totals};

/// What the count reader needs from the kernel. [`Probe`] reads the real maps; tests use a fake
/// kernel that changes its counters in the middle of a read.
pub trait CountMaps {
    /// The per-CPU counters, summed (mmap reads: no syscall).
    fn totals(&self) -> Totals;
    /// Every key with its slot (one batch syscall).
    fn key_slots(&self) -> io::Result<Vec<(KernelKey, u32)>>;
    /// Number of CPUs counters are kept for.
    fn ncpus(&self) -> usize;
    /// CPU `cpu`'s count in slot `slot` (one mmap read: no syscall).
    fn slot_count(&self, cpu: usize, slot: u32) -> u64;
}

impl CountMaps for Probe {
    fn totals(&self) -> Totals {
        Probe::totals(self)
    }
    fn key_slots(&self) -> io::Result<Vec<(KernelKey, u32)>> {
        Probe::key_slots(self)
    }
    fn ncpus(&self) -> usize {
        Probe::ncpus(self)
    }
    fn slot_count(&self, cpu: usize, slot: u32) -> u64 {
        Probe::slot_count(self, cpu, slot)
    }
}

/// One read of the exact counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CountRead {
    /// Each key's exact count (keys with none yet left out).
    pub counts: Vec<(KernelKey, u64)>,
    /// Drops that could not be keyed.
    pub overflow: u64,
    /// `sum(counts) + overflow`: the total consistent with the counts.
    pub total: u64,
    /// The kernel's own total, when no drop arrived during the read (it should equal `total`).
    pub settled_total: Option<u64>,
    /// Two settled reads in a row disagreed with the counts, with the same kernel total and
    /// the same counts: a real gap, to be shown. Once is not enough: a drop can be read between
    /// its keyed and its total increment (or, on weakly ordered CPUs, with its total seen
    /// before its count); and two different drops can be seen half-way by two reads at the
    /// same kernel total, one each way, so the counts must not have moved either.
    pub mismatch: bool,
    /// The per-CPU counters as read at the end.
    pub totals: Totals,
}

/// Reads counts, keeping the table of keys (they are only ever added) between reads.
#[derive(Debug, Default)]
pub struct CountReader {
    slots: Vec<(KernelKey, u32)>,
    /// The last read, if it was settled and disagreed: (kernel total, keyed + overflow).
    suspect: Option<(u64, u64)>,
}

impl CountRead {
    /// The total to show: consistent with the counts, or the kernel's own when they disagree
    /// for real (then the gap is visible as such).
    pub fn shown_total(&self) -> u64 {
        match self.settled_total {
            Some(kernel) if self.mismatch => kernel,
            _ => self.total,
        }
    }
}

impl CountReader {
    /// The keys known, with their slots.
    pub fn slots(&self) -> &[(KernelKey, u32)] {
        &self.slots
    }

    /// Reads every key's count. No syscall unless keys were added since the last read.
    pub fn read(&mut self, maps: &impl CountMaps) -> io::Result<CountRead> {
        let before = maps.totals();
        // Keys are never removed and each adds one to `new_keys`: a table shorter than that
        // misses keys. A key whose count becomes visible before the key itself (or that is
        // added after the table was read) waits for the next read: those drops arrived during
        // this one.
        if before.new_keys > self.slots.len() as u64 {
            self.slots = maps.key_slots()?;
        }
        let ncpus = maps.ncpus();
        let counts: Vec<(KernelKey, u64)> = self
            .slots
            .iter()
            .map(|(key, slot)| {
                let n = (0..ncpus).map(|cpu| maps.slot_count(cpu, *slot)).sum();
                (*key, n)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let after = maps.totals();
        let keyed: u64 = counts.iter().map(|(_, n)| n).sum();
        // Overflow only grows; read after the counts, it covers every overflowed drop that
        // happened before them.
        let overflow = after.overflow;
        let settled = before.total == after.total
            && before.overflow == after.overflow
            && after.new_keys == self.slots.len() as u64;
        let total = keyed + overflow;
        let gap = (settled && after.total != total).then_some((after.total, total));
        let mismatch = gap.is_some() && self.suspect == gap;
        self.suspect = gap;
        Ok(CountRead {
            counts,
            overflow,
            total,
            settled_total: settled.then_some(after.total),
            mismatch,
            totals: after,
        })
    }
}

#[cfg(test)]
mod tests;
