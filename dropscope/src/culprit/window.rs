//! Each namespace's drop rules' counter growth over the window, from its readings: the first
//! reading of a namespace is its baseline; a rule first read later was made in the window and
//! counts from zero (or, where the baseline reading was cut, from its first reading, and the
//! window says it came `late`).
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::ruleset::{ChainId, RulesWindow, Ruleset};

/// The most namespaces whose drop rules are kept.
pub const MAX_NAMESPACES: usize = 256;

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
            // At most MAX_NAMESPACES rulesets that can drop are kept (the initial namespace's
            // inode is the lowest: it comes first); the rest are not attributed.
            let full = self.latest.values().filter(|w| !w.rules.is_empty()).count();
            if !r.rules.is_empty() && full >= MAX_NAMESPACES && !self.latest.contains_key(&ns) {
                continue;
            }
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::{MAX_NAMESPACES, RuleWindows};
    use crate::culprit::ruleset::{ChainId, Rule, Ruleset, Verdict};

    fn ruleset(packets: u64) -> Ruleset {
        Ruleset {
            generation: 1,
            rules: vec![Rule {
                id: ChainId::default(),
                handle: 2,
                position: 1,
                verdict: Verdict::Drop,
                packets: Some(packets),
                comment: None,
                exprs: "counter immediate".into(),
            }],
            whole: true,
            ..Ruleset::default()
        }
    }

    #[test]
    fn growth_counts_from_the_first_reading_and_namespaces_made_in_bulk_are_bounded() {
        let mut w = RuleWindows::default();
        let all: BTreeSet<u64> = (1..=400).collect();
        let rulesets = |p| {
            all.iter()
                .map(|ns| (*ns, ruleset(p)))
                .collect::<BTreeMap<_, _>>()
        };
        w.fold(rulesets(10), &all, &all);
        w.fold(rulesets(25), &BTreeSet::new(), &all);
        let windows = w.windows();
        assert_eq!(windows.len(), MAX_NAMESPACES);
        // The lowest inodes (the initial namespace's is) are kept first.
        assert!(windows.contains_key(&1));
        assert_eq!(windows[&1].rules[0].grew, Some(15));
        assert!(!windows.contains_key(&400));
    }
}
