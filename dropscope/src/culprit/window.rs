//! Each namespace's drop rules' counter growth over the window, from its readings: the first
//! reading of a namespace is its baseline; a rule first read later was made in the window and
//! counts from zero (or, where the baseline reading was cut, from its first reading, and the
//! window says it came `late`).
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::ruleset::{ChainId, RulesWindow, Ruleset};

/// Packets per rule (chain and handle) at a namespace's baseline.
type Base = HashMap<(ChainId, u64), u64>;

/// The rule counters' windows of the namespaces read.
#[derive(Debug, Default)]
pub struct RuleWindows {
    /// Per namespace: whether its baseline reading was whole, and its packets per rule.
    base: BTreeMap<u64, (bool, Base)>,
    /// Per namespace: the generation of its baseline reading.
    generation: BTreeMap<u64, u32>,
    latest: BTreeMap<u64, RulesWindow>,
}

impl RuleWindows {
    /// Takes in the rulesets of one reading; `first`: namespaces read for the first time (or
    /// whose inode is another namespace's now); `tracked`: the namespaces still there.
    pub fn fold(
        &mut self,
        rulesets: BTreeMap<u64, Ruleset>,
        first: &BTreeSet<u64>,
        tracked: &BTreeSet<u64>,
    ) {
        for (ns, r) in rulesets {
            if first.contains(&ns) {
                self.base.remove(&ns);
                self.generation.remove(&ns);
            }
            let start = *self.generation.entry(ns).or_insert(r.generation);
            let (whole, base) = self.base.entry(ns).or_insert_with(|| {
                let base = (r.rules.iter())
                    .filter_map(|x| Some(((x.id.clone(), x.handle), x.packets?)))
                    .collect();
                (r.whole, base)
            });
            let mut late = false;
            for x in &r.rules {
                let Some(p) = x.packets else { continue };
                // Made in the window, unless the baseline may have missed it.
                base.entry((x.id.clone(), x.handle)).or_insert_with(|| {
                    late |= !*whole;
                    if *whole { 0 } else { p }
                });
            }
            // Rules gone are forgotten (their handles are never given again in a table, but
            // a table made again starts over).
            let keep: std::collections::HashSet<(&ChainId, u64)> =
                r.rules.iter().map(|x| (&x.id, x.handle)).collect();
            if r.whole {
                base.retain(|(id, h), _| keep.contains(&(id, *h)));
            }
            let mut w = RulesWindow::new(&r, base);
            w.late = late || self.latest.get(&ns).is_some_and(|l| l.late);
            w.changed = start != r.generation;
            self.latest.insert(ns, w);
        }
        self.base.retain(|ns, _| tracked.contains(ns));
        self.generation.retain(|ns, _| tracked.contains(ns));
        self.latest.retain(|ns, _| tracked.contains(ns));
    }

    /// Each namespace's window as last read.
    pub fn windows(&self) -> BTreeMap<u64, RulesWindow> {
        self.latest.clone()
    }
}
