//! Sampled kernel stacks per row: reading their weights, resolving their frames, adapting the
//! sampling period to the drop rate, and scaling each row's weights to its exact count.
use std::collections::HashMap;

use super::{stack_owner::Owner, *};

impl Collector {
    /// Folds the kernel's cumulative stack weights into the session's, by difference with what
    /// was read last time. The kernel maps are only emptied when they near capacity.
    pub(super) fn read_stacks(&mut self, exact: &HashMap<DropKey, u64>) -> std::io::Result<()> {
        let full = self.stack_ids.len() > dropscope_common::STACK_TRACE_ENTRIES as usize / 2
            || self.stack_base.len() > dropscope_common::STACK_COUNT_ENTRIES as usize * 3 / 4;
        let entries = self.probe.read_stack_counts(full)?;
        let mut deltas = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let base = self.stack_base.entry(k).or_default();
            let delta = StackValue {
                weight: v.weight.saturating_sub(base.weight),
                samples: v.samples.saturating_sub(base.samples),
            };
            *base = v;
            if delta.samples > 0 {
                deltas.push((k, delta));
            }
        }
        self.resolve_stacks(deltas.iter().map(|(k, _)| k.stack_id));
        let slots: HashMap<u32, dropscope_common::DropKey> = (self.counts.slots().iter())
            .map(|&(k, slot)| (slot, k))
            .collect();
        for (k, v) in deltas {
            let Some(frames) = self.stack_ids.get(&k.stack_id).cloned() else {
                // The kernel no longer has this stack's frames: counted, never guessed.
                self.stack_lost += v.samples;
                continue;
            };
            // The stack belongs to its drop's row (a drop that got no slot: to its reason and
            // location only).
            let owner = match slots.get(&k.slot) {
                Some(kernel) => Owner::Key(*kernel),
                None => Owner::Unslotted {
                    reason: k.reason,
                    location: k.location,
                },
            };
            let e = self.stacks.entry((owner, frames)).or_default();
            e.0 += v.weight;
            e.1 += v.samples;
        }
        if full {
            // Start over so the kernel's maps never stay full: frames were copied out already.
            self.stack_base.clear();
            for id in std::mem::take(&mut self.stack_ids).into_keys() {
                self.probe.forget_stack(id);
            }
        }
        // The model's keys as of now: a namespace or device named since a stack was first
        // seen names its stacks too, as it names its counts.
        let owned: Vec<_> = (self.stacks.iter())
            .map(|((owner, frames), &v)| (*owner, frames.clone(), v))
            .collect();
        let mut merged: HashMap<(DropKey, Frames), (u64, u64)> = HashMap::new();
        for (owner, frames, (weight, samples)) in owned {
            let key = match owner {
                Owner::Key(kernel) => self.model_key(&kernel),
                Owner::Unslotted { reason, location } => DropKey {
                    reason: self.probe.reasons().reason(reason),
                    location: self.symbolizer.name(location),
                    attr: Attribution::default(),
                },
            };
            let e = merged
                .entry((group::coarser(&key, &self.opts.by), frames))
                .or_default();
            e.0 += weight;
            e.1 += samples;
        }
        let mut stacks: Vec<StackCount> = merged
            .into_iter()
            .map(|((key, frames), (weight, samples))| StackCount {
                key,
                frames,
                weight,
                samples,
            })
            .collect();
        calibrate(&mut stacks, exact);
        self.last.stacks = stacks;
        Ok(())
    }

    /// Copies out and symbolizes (in one batch) the frames of stacks not seen before.
    pub(super) fn resolve_stacks(&mut self, ids: impl Iterator<Item = u32>) {
        let mut raw = Vec::new();
        for id in ids {
            if self.stack_ids.contains_key(&id) || raw.iter().any(|(i, _)| *i == id) {
                continue;
            }
            if let Some(addrs) = self.probe.stack_frames(id) {
                raw.push((id, addrs));
            }
        }
        self.symbolizer
            .prefetch(raw.iter().flat_map(|(_, a)| a.iter().copied()));
        for (id, addrs) in raw {
            let frames: Vec<Arc<str>> = addrs
                .iter()
                .rev()
                .map(|a| self.symbolizer.name(*a))
                .filter(|n| !is_probe_frame(n))
                .collect();
            self.stack_ids.insert(id, frames.into());
        }
    }

    /// Sets the sampling period so that stack captures stay near the budget.
    pub(super) fn adapt_sampling(&mut self, drops_per_sec: f64) {
        if !self.opts.stacks {
            return;
        }
        let budget = self.opts.stack_budget.max(1) as f64;
        let period = (drops_per_sec / budget)
            .ceil()
            .clamp(1.0, (1u64 << 24) as f64) as u64;
        self.probe
            .set_stack_sampling(period, self.opts.stack_budget);
        self.last.health.sample_period = period;
    }
}

/// Scales each row's sampled stack weights so they add up to its exact count:
/// the samples give the shares of its stacks, the counter gives the total. (A sample weighs the
/// drops on its CPU since the previous one, so weight leaks across keys that interleave on a
/// CPU, and the drops after a CPU's last sample are in no sample yet.) Largest remainders keep
/// the sum exact.
pub(super) fn calibrate(stacks: &mut [StackCount], exact: &HashMap<DropKey, u64>) {
    let mut groups: HashMap<&DropKey, Vec<usize>> = HashMap::new();
    for (i, s) in stacks.iter().enumerate() {
        groups.entry(&s.key).or_default().push(i);
    }
    let groups: Vec<(DropKey, Vec<usize>)> =
        groups.into_iter().map(|(k, v)| (k.clone(), v)).collect();
    for (key, members) in groups {
        let Some(&count) = exact.get(&key) else {
            continue;
        };
        let sampled: u128 = members.iter().map(|&i| u128::from(stacks[i].weight)).sum();
        if sampled == 0 {
            continue;
        }
        let mut given = 0u64;
        let mut rest: Vec<(u128, usize)> = Vec::with_capacity(members.len());
        for &i in &members {
            let share = u128::from(stacks[i].weight) * u128::from(count);
            let w = (share / sampled) as u64;
            stacks[i].weight = w;
            given += w;
            rest.push((share % sampled, i));
        }
        rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i) in rest.into_iter().take((count - given.min(count)) as usize) {
            stacks[i].weight += 1;
        }
    }
}

/// Frames of the tracing machinery itself, not of the network stack.
pub(super) fn is_probe_frame(name: &str) -> bool {
    [
        "bpf_prog_",
        "bpf_trace_run",
        "__bpf_trace_",
        "__traceiter_",
        "bpf_trampoline",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

#[cfg(test)]
mod calibrate_tests {
    use super::*;
    use crate::model::Reason;

    fn stack(code: u32, frame: &str, weight: u64) -> StackCount {
        StackCount {
            key: DropKey {
                reason: Reason {
                    code,
                    name: format!("R{code}").into(),
                },
                location: "f+0x1".into(),
                attr: Attribution::default(),
            },
            frames: vec![Arc::<str>::from(frame)].into(),
            weight,
            samples: 1,
        }
    }

    #[test]
    fn weights_add_up_to_the_exact_count_in_their_sampled_shares() {
        let mut s = vec![
            stack(3, "a", 600),
            stack(3, "b", 300),
            stack(3, "c", 1),
            stack(7, "x", 1),
        ];
        let exact = HashMap::from([(s[0].key.clone(), 2000), (s[3].key.clone(), 1)]);
        calibrate(&mut s, &exact);
        let w: Vec<u64> = s.iter().map(|s| s.weight).collect();
        assert_eq!(w[0] + w[1] + w[2], 2000);
        assert_eq!((w[0], w[1]), (1332, 666));
        assert_eq!(w[3], 1, "a single rare drop keeps its weight of one");
    }

    /// Two rows of one reason and location (two namespaces): each row's stacks add up to its
    /// own count, never to the other's.
    #[test]
    fn each_row_gets_its_own_count() {
        let mut s = vec![stack(3, "a", 500), stack(3, "b", 500), stack(3, "c", 2)];
        s[2].key.attr.netns = Some(4026532002);
        let exact = HashMap::from([(s[0].key.clone(), 1486), (s[2].key.clone(), 1)]);
        calibrate(&mut s, &exact);
        assert_eq!(s[0].weight + s[1].weight, 1486);
        assert_eq!(
            s[2].weight, 1,
            "a row of one drop shows one, not an estimate of another"
        );
    }

    #[test]
    fn a_key_without_an_exact_count_is_left_as_sampled() {
        let mut s = vec![stack(3, "a", 17)];
        calibrate(&mut s, &HashMap::new());
        assert_eq!(s[0].weight, 17);
    }
}
