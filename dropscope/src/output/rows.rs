//! The order of the report's rows, shared by its JSON and its text: the probe's rows by
//! count, then by their names ranked once; the rows beside the probe's largest first.
use std::{cmp::Reverse, collections::HashMap};

use crate::{
    ledger::KernelView,
    model::{DropCount, Snapshot},
};

/// The window's program rows, largest first.
pub(super) fn program_rows(k: &KernelView) -> Vec<&DropCount> {
    largest_first(k.programs.iter().flatten())
}

/// Rows beside the probe's that counted, largest first.
pub(super) fn largest_first<'a>(
    rows: impl IntoIterator<Item = &'a DropCount>,
) -> Vec<&'a DropCount> {
    let mut rows: Vec<&DropCount> = rows.into_iter().filter(|d| d.count > 0).collect();
    rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// Every distinct name of the rows, ranked in order: rows are then sorted by numbers, so that
/// sorting costs the same whatever the names' lengths (a recording may share one long name
/// among many keys: comparing it at every step made sorting take minutes). Names are found by
/// address (a recording's keys share their names), so neither ranking nor looking up reads a
/// name more than once; copies of one name at other addresses get the same rank.
pub(super) struct NameRanks<'a>(
    pub(super) HashMap<(usize, usize), u32>,
    std::marker::PhantomData<&'a str>,
);

/// Where a name is: its address and length.
fn at(name: &str) -> (usize, usize) {
    (name.as_ptr() as usize, name.len())
}

impl<'a> NameRanks<'a> {
    pub(super) fn new(rows: &[&'a DropCount]) -> Self {
        let mut names: Vec<&str> = rows
            .iter()
            .flat_map(|d| {
                let (k, a) = (&d.key, &d.key.attr);
                [&a.netns_name, &a.device, &a.protocol]
                    .into_iter()
                    .flatten()
                    .chain([&k.reason.name, &k.location])
                    .map(|n| &**n)
            })
            .map(|n| (at(n), n))
            .collect::<HashMap<_, _>>()
            .into_values()
            .collect();
        names.sort_unstable();
        let mut ranks = HashMap::with_capacity(names.len());
        let mut rank = 0u32;
        for (i, name) in names.iter().enumerate() {
            if i > 0 && names[i - 1] != *name {
                rank += 1;
            }
            ranks.insert(at(name), rank);
        }
        NameRanks(ranks, std::marker::PhantomData)
    }

    fn of(&self, name: &str) -> u32 {
        self.0.get(&at(name)).copied().unwrap_or(u32::MAX)
    }

    /// The sort key of a row: count (largest first), then the key's fields in the order of
    /// [`DropKey`]'s own ordering, names by rank.
    #[allow(clippy::type_complexity)]
    fn key(
        &self,
        d: &DropCount,
    ) -> (
        Reverse<u64>,
        u32,
        u32,
        u32,
        Option<u64>,
        Option<u64>,
        [Option<u32>; 3],
        Option<u16>,
        Option<u32>,
        Option<(crate::vocab::socket::Via, u32)>,
        Option<std::sync::Arc<str>>,
    ) {
        let (k, a) = (&d.key, &d.key.attr);
        let rank = |n: &Option<std::sync::Arc<str>>| n.as_deref().map(|n| self.of(n));
        (
            Reverse(d.count),
            k.reason.code,
            self.of(&k.reason.name),
            self.of(&k.location),
            a.netns,
            a.netns_cookie,
            [rank(&a.netns_name), rank(&a.device), rank(&a.protocol)],
            a.port,
            a.ifindex,
            a.socket.as_ref().map(|s| (s.via, s.inode)),
            a.culprit.as_ref().map(|c| c.label.clone()),
        )
    }
}

/// Rows sorted by count (largest first), then reason and location: a stable order.
pub(super) fn sorted(s: &Snapshot) -> Vec<&DropCount> {
    let mut rows: Vec<_> = s.drops.iter().filter(|d| d.count > 0).collect();
    let ranks = NameRanks::new(&rows);
    rows.sort_by_cached_key(|d| ranks.key(d));
    rows
}
