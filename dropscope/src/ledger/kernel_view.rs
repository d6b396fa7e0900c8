//! What the report and the TUI show of the kernel's counters over one window: their growth,
//! the drops only they saw, drop ratios, the ledger and the rows beside the probe's
//! ([`view`]), computed from a snapshot's reading and the probe's drops alone.
use std::collections::BTreeMap;

use super::{
    ratio::{self, Ratio},
    reconcile::{self, Ledger},
    unseen::{self, CounterDelta, Unseen, seen_drops},
};
use crate::model::{KernelReading, Snapshot, notes};

/// Counter deltas and unseen drops over one window: what the report and the TUI show.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelView {
    /// The initial namespace's inode number.
    pub initial_netns: u64,
    /// Counters that grew, per namespace.
    pub counters: Vec<CounterDelta>,
    /// Drops counted by the kernel but not seen by the probe; `None` while drops are filtered
    /// (the probe then does not count every drop, so nothing can be called unseen).
    pub unseen: Option<Vec<Unseen>>,
    /// The drop filters in force, described, when there are any.
    pub filter: Option<String>,
    /// Namespaces that could not be read (and how many waited for a later poll).
    pub errors: Vec<String>,
    /// Human names of namespaces (from the drops' keys; escaped as kernel names are, see
    /// [`crate::sanitize::kernel_name`]).
    pub names: BTreeMap<u64, String>,
    /// Drops per packet handled, per namespace and per device (see [`ratio::ratios`]).
    pub ratios: Vec<Ratio>,
    /// Every layer's drops reconciled with the probe's (see [`reconcile`]); `None` when unseen
    /// is (filtered counts, or counts grouped without the reason).
    pub ledger: Option<Ledger>,
    /// The XDP and tc programs' drop verdicts over the window, as rows beside the probe's (see
    /// [`crate::model::programs`]); `None` while drops are filtered (a filter their counts know
    /// nothing of) or where the counters span more than the window (see
    /// [`crate::kcounters::hooks`]: a recording's note [`notes::SINCE_START`]).
    pub programs: Option<Vec<crate::model::DropCount>>,
    /// The drops only a kernel counter saw, as rows beside the probe's (see
    /// [`crate::model::counter_only`]): each once, adding up to [`KernelView::unseen_total`];
    /// `None` where unseen is.
    pub counter_only: Option<Vec<crate::model::DropCount>>,
    /// The TCP listeners whose accept queue was full when the counters were read, per
    /// namespace (see [`listeners`]): shown on the namespace's `TcpExt:ListenDrops` row.
    pub listeners: BTreeMap<u64, Vec<crate::vocab::reading::Listener>>,
}

impl KernelView {
    /// The unseen drops as [`unseen::total`] takes them, in their order.
    fn alone(&self) -> Vec<unseen::Alone<'_>> {
        (self.unseen.iter().flatten()).map(Into::into).collect()
    }

    /// Which unseen rows a total sums (see [`unseen::summed`]), in their order: the others'
    /// drops are counted by another counter too.
    pub fn unseen_summed(&self) -> Vec<bool> {
        unseen::summed(&self.alone())
    }

    /// The unseen drops, each once (see [`unseen::total`]); `None` where unseen is not
    /// computed. Every total of unseen drops shown is this one.
    pub fn unseen_total(&self) -> Option<u64> {
        self.unseen.as_ref().map(|_| unseen::total(&self.alone()))
    }

    /// The full listeners a counter-only row names (see
    /// [`crate::model::counter_only::listeners`]); none for any other row.
    pub fn listeners_of(&self, key: &crate::model::DropKey) -> &[crate::vocab::reading::Listener] {
        crate::model::counter_only::listeners(&self.listeners, key)
    }

    /// How a namespace is shown: `init`, its name and inode, or its inode (terminal-safe).
    pub fn netns_label(&self, netns: u64) -> String {
        match self.names.get(&netns) {
            _ if netns == self.initial_netns => format!("{netns} (init)"),
            Some(n) => format!("{netns} ({})", crate::sanitize::terminal(n)),
            None => netns.to_string(),
        }
    }
}

/// The deltas and unseen drops of a reading (growth over a window) given the probe's counts
/// over the same window or a longer one that holds it (`snap`: every drop a counter counted in
/// the window, the probe had counted too, so only what the probe never sees is unseen).
/// Counts grouped without the reason cannot be matched with counters, nor can filtered ones
/// (`filter`: the probe then does not count every drop): unseen is then not computed
/// (`None`), never guessed.
pub fn view(reading: &KernelReading, snap: &Snapshot, filter: Option<String>) -> KernelView {
    let counters = unseen::growth_deltas(reading);
    let initial = reading.initial_netns;
    let by_reason = snap.drops.iter().all(|d| &*d.key.reason.name != "*");
    let (unseen, ledger) = match filter {
        None if by_reason => (
            Some(unseen::unseen(
                &counters,
                seen_drops(snap, reading),
                initial,
            )),
            Some(reconcile::ledger(reading, snap)),
        ),
        _ => (None, None),
    };
    let spans_more = (reading.errors.iter()).any(|e| notes::Note::of(e) == notes::Note::SinceStart);
    let names = crate::model::programs::netns_names(snap, reading);
    let programs =
        (filter.is_none() && !spans_more).then(|| crate::model::programs::rows(reading, &names));
    let counter_only =
        (unseen.is_some()).then(|| crate::model::counter_only::rows(reading, snap, &names));
    KernelView {
        programs,
        counter_only,
        initial_netns: initial,
        counters,
        unseen,
        filter,
        ratios: ratio::ratios(reading, snap),
        ledger,
        listeners: reading.listeners.clone(),
        errors: reading.errors.clone(),
        names: (names.iter())
            .map(|(i, n)| (*i, crate::sanitize::kernel_name(n).into_owned()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counter-only rows add up to the one total of unseen drops.
    #[test]
    fn the_counter_only_rows_add_up_to_the_unseen_total() {
        let (r, snap) = crate::model::counter_only::tests::listen_drops_window();
        let view = view(&r, &snap, None);
        let rows = view.counter_only.as_ref().expect("counter-only rows");
        let sum: u64 = rows.iter().map(|d| d.count).sum();
        assert_eq!(Some(sum), view.unseen_total());
        assert_eq!(sum, 43, "{rows:?}");
    }

    /// A window of many keys and many grown counters (as a recording may hold, or a host
    /// where anyone can make devices): its rows bounded, the cut noted, and the headline still
    /// of every counter. Its time is printed, not asserted (a test is no benchmark; keys times
    /// counters took minutes here before the ledger was indexed).
    #[test]
    fn many_keys_and_counters_cost_their_sum_and_the_rows_are_bounded() {
        let snaps = crate::record::synthetic::ledger_heavy(100_000, 40_000);
        let s = &snaps[0];
        let r = s.kernel.as_ref().expect("a reading");
        let t0 = std::time::Instant::now();
        let k = view(r, s, None);
        let took = t0.elapsed();
        let l = k.ledger.as_ref().expect("a ledger");
        println!("a view of 100,000 keys and 40,000 grown counters took {took:?}");
        assert_eq!(
            l.counters.len(),
            reconcile::MAX_ROWS,
            "{}",
            l.counters.len()
        );
        assert!(l.layers.len() <= reconcile::MAX_ROWS);
        let note = (l.notes.iter())
            .find(|n| n.contains("not listed"))
            .unwrap_or_else(|| panic!("no note in {:?}", l.notes));
        assert!(
            note.starts_with("35,904 layer counters not listed"),
            "{note}"
        );
        // Every counter counted only what no key explains (no key is of their reasons).
        let deltas: u64 = (0..40_000u64).map(|c| 1000 + c).sum();
        assert_eq!(l.headline.counter_only, deltas);
    }
}
