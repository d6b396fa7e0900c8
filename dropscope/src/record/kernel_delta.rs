//! Kernel delta frames (version 5 on): the counters that changed since the kernel frame
//! before, so that a reading brought up to date every poll (the programs' verdict counts under
//! an XDP or tc flood) does not write every namespace's counters again each time. A full
//! kernel frame starts each chain, at least every [`FULL_EVERY`] and [`MAX_CHAIN`] frames,
//! so a seek applies a bounded number of deltas.
use std::{collections::BTreeMap, sync::Arc, time::Duration};

use super::{
    format::{Malformed, Reader, put_str, put_uvarint},
    kernel::{
        MAX_COUNTER_NAME, MAX_KERNEL_FRAME, MAX_NETNS, each_netns, notes, plain, read_counter_name,
        read_notes,
    },
};
use crate::model::KernelReading;

/// A full kernel frame at least this often (of elapsed time).
pub const FULL_EVERY: Duration = Duration::from_secs(60);
/// Deltas the writer puts after a full kernel frame at most.
pub const WRITE_CHAIN: u32 = 63;
/// Deltas a reader takes after a full kernel frame at most.
pub const MAX_CHAIN: usize = 255;
/// The most a reading rebuilt from deltas may hold, counted as [`size`]: more than any whole
/// frame holds (its counters take at least their name and 2 bytes each, within 1 MiB), and the
/// writer writes no delta past it.
const MAX_REBUILT: usize = 4 * MAX_KERNEL_FRAME;

/// A counter's share of [`MAX_REBUILT`].
fn counter_size(name: &str) -> usize {
    name.len() + 11
}

/// What a reading holds, as [`MAX_REBUILT`] counts it.
pub fn size(r: &KernelReading) -> usize {
    (r.netns.values().flat_map(|g| g.keys()))
        .map(|n| counter_size(n))
        .sum()
}

/// What changed between two readings: their time, each counter that changed (0: left the
/// reading) per namespace, and the later reading's notes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delta {
    unix_ms: u64,
    netns: BTreeMap<u64, Vec<(Arc<str>, u64)>>,
    errors: Vec<String>,
    /// Namespace cookies that changed (version 8 on; 0: left the reading).
    cookies: Vec<(u64, u64)>,
    /// Namespace names that changed (version 10 on; empty: left the reading).
    names: Vec<(u64, Arc<str>)>,
}

/// The delta frame's payload from `before` (as a reader rebuilds it) to `now`, or `None` when
/// only a full frame says it: another initial namespace or other devices, a counter at 0 or a
/// namespace with none (a delta's 0 removes a counter, and a namespace left with none), a
/// reading larger than a reader rebuilds, or a delta not smaller than half of `full` (the
/// full frame's payload).
pub fn encode(before: &KernelReading, now: &KernelReading, full: usize) -> Option<Vec<u8>> {
    if before.initial_netns != now.initial_netns
        || before.devices != now.devices
        || (now.netns.values()).any(|g| g.is_empty() || g.values().any(|v| *v == 0))
        || now.netns.len() > MAX_NETNS
        || size(now) > MAX_REBUILT
    {
        return None;
    }
    let empty = crate::vocab::reading::Growth::new();
    let mut blocks = Vec::new();
    let namespaces: std::collections::BTreeSet<&u64> =
        before.netns.keys().chain(now.netns.keys()).collect();
    for ns in namespaces {
        let (was, is) = (
            before.netns.get(ns).unwrap_or(&empty),
            now.netns.get(ns).unwrap_or(&empty),
        );
        let mut changed: Vec<(&str, u64)> = (is.iter())
            .filter(|(n, v)| was.get(*n) != Some(*v))
            .map(|(n, v)| (&**n, *v))
            .collect();
        changed.extend(
            (was.keys())
                .filter(|n| !is.contains_key(*n))
                .map(|n| (&**n, 0)),
        );
        if changed.is_empty() {
            continue;
        }
        // What a reader would refuse: only a full frame (which leaves it out) says it.
        if changed
            .iter()
            .any(|(n, _)| n.len() > MAX_COUNTER_NAME || !plain(n))
        {
            return None;
        }
        changed.sort_unstable();
        let mut b = Vec::new();
        put_uvarint(&mut b, *ns);
        put_uvarint(&mut b, changed.len() as u64);
        for (name, v) in changed {
            put_str(&mut b, name);
            put_uvarint(&mut b, v);
        }
        blocks.push(b);
    }
    if blocks.len() > MAX_NETNS {
        return None;
    }
    let mut p = Vec::new();
    put_uvarint(&mut p, now.unix_ms);
    put_uvarint(&mut p, blocks.len() as u64);
    for b in blocks {
        p.extend_from_slice(&b);
    }
    let notes = notes(&now.errors);
    put_uvarint(&mut p, notes.len() as u64);
    for e in &notes {
        put_str(&mut p, e);
    }
    p.extend_from_slice(&super::cookies::diff(&before.cookies, &now.cookies)?);
    p.extend_from_slice(&super::netns_names::diff(&before.names, &now.names)?);
    (p.len() * 2 < full).then_some(p)
}

/// Decodes a delta frame's payload of a recording of format `version`, refusing anything the
/// writer would not have written.
pub fn decode(payload: &[u8], version: u16) -> Result<Delta, Malformed> {
    if payload.len() > MAX_KERNEL_FRAME {
        return Err(Malformed("a kernel delta frame beyond 1 MiB"));
    }
    let mut r = Reader::new(payload);
    let mut d = Delta {
        unix_ms: r.uvarint()?,
        ..Delta::default()
    };
    each_netns(&mut r, |r, ns| {
        let m = r.count(2)?;
        if m == 0 {
            return Err(Malformed("a kernel delta frame's namespace with no change"));
        }
        let mut changed: Vec<(Arc<str>, u64)> = Vec::with_capacity(m);
        for _ in 0..m {
            let name = read_counter_name(r)?;
            if changed.last().is_some_and(|(l, _)| **l >= *name) {
                return Err(Malformed("kernel delta frame counters out of order"));
            }
            changed.push((Arc::from(name), r.uvarint()?));
        }
        d.netns.insert(ns, changed);
        Ok(())
    })?;
    d.errors = read_notes(&mut r)?;
    if version >= 8 {
        d.cookies = super::cookies::changes(&mut r)?;
    }
    if version >= 10 {
        d.names = super::netns_names::changes(&mut r)?;
    }
    r.finish()?;
    Ok(d)
}

impl Delta {
    /// `base` brought up to this delta's reading (`held`: its [`size`], kept up to date);
    /// refused (and `base` then not to be used) when the reading it makes holds more than a
    /// reader takes.
    pub fn apply(&self, base: &mut KernelReading, held: &mut usize) -> Result<(), Malformed> {
        base.unix_ms = self.unix_ms;
        for (ns, changed) in &self.netns {
            let g = base.netns.entry(*ns).or_default();
            for (name, v) in changed {
                let had = match v {
                    0 => g.remove(name).is_some(),
                    v => g.insert(name.clone(), *v).is_some(),
                };
                match (had, *v == 0) {
                    (true, true) => *held = held.saturating_sub(counter_size(name)),
                    (false, false) => *held = held.saturating_add(counter_size(name)),
                    _ => {}
                }
            }
            if g.is_empty() {
                base.netns.remove(ns);
                base.devices.remove(ns);
            }
        }
        base.errors.clone_from(&self.errors);
        super::cookies::apply(&mut base.cookies, &self.cookies)?;
        super::netns_names::apply(&mut base.names, &self.names)?;
        if base.netns.len() > MAX_NETNS || *held > MAX_REBUILT {
            return Err(Malformed(
                "kernel delta frames that make a reading larger than a frame holds",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::kernel::tests::reading, record::format::VERSION};

    fn many(unix_ms: u64, xdp: u64) -> KernelReading {
        let mut r = reading(unix_ms, &[(1, "Xdp:vb:xdpdrv:p#4:drop", xdp)]);
        for ns in 1..40 {
            let g = r.netns.entry(ns).or_default();
            for c in 0..10 {
                g.insert(format!("Link:veth{c}:rx_dropped").into(), ns * 100 + c);
            }
        }
        r
    }

    #[test]
    fn a_delta_rebuilds_the_later_reading() {
        let mut a = many(10, 5);
        a.errors.push("namespace 9: gone".into());
        a.cookies = [(3, 30), (7, 70)].into();
        a.names = [(3, "web".into()), (7, "db".into())].into();
        let mut b = many(20, 900);
        // Namespace 7 ended; 99 was first read; 3 was found to be a container.
        b.cookies = [(3, 30), (99, 990)].into();
        b.names = [(3, "docker:web".into()), (99, "cache".into())].into();
        b.netns
            .get_mut(&3)
            .expect("ns")
            .remove("Link:veth2:rx_dropped");
        b.netns.remove(&7);
        b.netns
            .entry(99)
            .or_default()
            .insert("Udp:NoPorts".into(), 4);
        let full = super::super::kernel::encode(&b).0.len();
        let p = encode(&a, &b, full).expect("a delta: little changed");
        assert!(p.len() * 10 < full, "{} of {full}", p.len());
        let mut rebuilt = a.clone();
        let mut held = size(&a);
        (decode(&p, VERSION).expect("decodes"))
            .apply(&mut rebuilt, &mut held)
            .expect("applies");
        assert_eq!(rebuilt, b);
        assert_eq!(held, size(&b), "kept up to date");
        // Truncated anywhere: an error, never a panic.
        for n in 0..p.len() {
            assert!(decode(&p[..n], VERSION).is_err(), "{n}");
        }
    }

    #[test]
    fn only_a_full_frame_says_what_a_delta_cannot() {
        let a = many(10, 5);
        // Most counters changed: not smaller than half the full frame.
        let mut b = a.clone();
        for g in b.netns.values_mut() {
            for v in g.values_mut() {
                *v += 1;
            }
        }
        let full = super::super::kernel::encode(&b).0.len();
        assert!(encode(&a, &b, full).is_none());
        // Other devices, another initial namespace.
        let mut b = many(20, 6);
        b.devices.insert(1, [(3, "vb".to_owned())].into());
        assert!(encode(&a, &b, usize::MAX).is_none());
        let mut b = many(20, 6);
        b.initial_netns = 2;
        assert!(encode(&a, &b, usize::MAX).is_none());
        // A counter at 0, a namespace with none: a delta's 0 would remove them.
        let mut b = many(20, 6);
        b.netns
            .get_mut(&4)
            .expect("ns")
            .insert("Udp:NoPorts".into(), 0);
        assert!(encode(&a, &b, usize::MAX).is_none());
        let mut b = many(20, 6);
        b.netns.insert(77, Default::default());
        assert!(encode(&a, &b, usize::MAX).is_none());
        // Larger than a reader rebuilds.
        let mut b = many(20, 6);
        let g = b.netns.entry(500).or_default();
        for c in 0..40_000 {
            g.insert(format!("Udp:{c:0>100}").into(), 1);
        }
        assert!(size(&b) > MAX_REBUILT);
        assert!(encode(&a, &b, usize::MAX).is_none());
    }

    #[test]
    fn refuses_deltas_the_writer_never_writes_or_that_grow_a_reading_past_a_frame() {
        // Counters out of order, a namespace with no change.
        let mut p = Vec::new();
        for v in [1, 1, 5, 2] {
            put_uvarint(&mut p, v);
        }
        for name in ["b", "a"] {
            put_str(&mut p, name);
            put_uvarint(&mut p, 1);
        }
        put_uvarint(&mut p, 0);
        assert!(decode(&p, 7).is_err());
        let mut p = Vec::new();
        for v in [1, 1, 5, 0, 0] {
            put_uvarint(&mut p, v);
        }
        assert!(decode(&p, 7).is_err());
        // Each delta adds 100 KiB of new counters: the reading it makes stops at what a reader
        // rebuilds.
        let (mut base, mut held) = (KernelReading::default(), 0);
        let mut refused = false;
        for round in 0..60u64 {
            let mut p = Vec::new();
            put_uvarint(&mut p, round);
            put_uvarint(&mut p, 1);
            put_uvarint(&mut p, round);
            put_uvarint(&mut p, 1000);
            let mut names: Vec<String> = (0..1000).map(|c| format!("{c:0>90}")).collect();
            names.sort();
            for n in &names {
                put_str(&mut p, n);
                put_uvarint(&mut p, 1);
            }
            put_uvarint(&mut p, 0);
            let d = decode(&p, 7).expect("each delta is well formed");
            if d.apply(&mut base, &mut held).is_err() {
                refused = true;
                break;
            }
        }
        assert!(
            refused,
            "a chain of deltas may not grow a reading without bound"
        );
    }
}
