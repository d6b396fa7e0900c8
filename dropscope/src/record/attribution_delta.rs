//! Attribution delta frames (version 9 on): the drop rules' counters that changed since the
//! attribution frame before, by the rule's place in its namespace's window, so that a reading
//! whose counted rules' counters grew (every reading, while a rule drops) does not write every
//! rule, chain, program and listener again. Only counters and a window's generation and bits
//! change in a delta; anything else (a rule made or deleted, a program attached, a listener's
//! queue) is a whole attribution frame. A whole frame starts each chain, at least every
//! [`FULL_EVERY`] and [`WRITE_CHAIN`] deltas, so a seek applies a bounded number; a history's
//! segment is a recording of its own and starts with one.
use super::{
    attribution::{Attribution, MAX_FRAME, MAX_RULES, bits},
    format::{Malformed, Reader, apply_zigzag, each_netns, put_uvarint, zigzag_diff},
};
use crate::{
    culprit::ruleset::{Grown, RulesWindow},
    model::KernelReading,
};

pub use super::kernel_delta::{MAX_CHAIN, WRITE_CHAIN};

/// A whole attribution frame at least this often (of elapsed time), besides every
/// [`WRITE_CHAIN`] deltas: a ruleset's whole frame is large (about 57 KB of 4,000 counted
/// rules) and its deltas small, and a seek applies at most [`WRITE_CHAIN`] of them whatever
/// the time.
pub const FULL_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// The rules of `w` a whole frame writes (the others are cut, with a note).
fn written(w: &RulesWindow) -> usize {
    let chains = w.chains.len().min(MAX_RULES);
    w.rules.len().min(MAX_RULES - chains)
}

/// Whether two rules are the same but for their counters.
fn same_rule(a: &Grown, b: &Grown) -> bool {
    let (a, b) = (&a.rule, &b.rule);
    (&a.id, a.handle, a.position, a.verdict, &a.comment, &a.exprs)
        == (&b.id, b.handle, b.position, b.verdict, &b.comment, &b.exprs)
        && a.packets.is_some() == b.packets.is_some()
}

/// Whether `now` says what `before` says but for its rules' counters and its windows'
/// generation and bits: what a delta can say.
fn counters_only(before: &KernelReading, now: &KernelReading) -> bool {
    before.attributed == now.attributed
        && before.attached == now.attached
        && before.listeners == now.listeners
        && before.rules.len() == now.rules.len()
        && (before.rules.iter().zip(&now.rules)).all(|((n1, a), (n2, b))| {
            n1 == n2
                && a.chains == b.chains
                && a.notes == b.notes
                && a.rules.len() == b.rules.len()
                && (a.rules.iter().zip(&b.rules))
                    .all(|(x, y)| same_rule(x, y) && x.grew.is_some() == y.grew.is_some())
        })
}

/// How much a counter present in both changed (wrapping), `None` where absent.
fn changes(was: Option<u64>, now: Option<u64>) -> Option<u64> {
    Some(now?.wrapping_sub(was?))
}

/// The delta frame's payload from `before` (the reading whose attribution was written last,
/// its whole frame holding every namespace) to `now`, or `None` when only a whole frame says
/// it: anything but counters changed, or the delta is not smaller than half of `full` (the
/// whole frame's payload).
pub fn encode(before: &KernelReading, now: &KernelReading, full: usize) -> Option<Vec<u8>> {
    if !counters_only(before, now) {
        return None;
    }
    let mut blocks = Vec::new();
    for ((ns, was), is) in before.rules.iter().zip(now.rules.values()) {
        let n = written(is);
        let changed: Vec<usize> = (0..n)
            .filter(|&i| {
                let (a, b) = (&was.rules[i], &is.rules[i]);
                (a.rule.packets, a.grew) != (b.rule.packets, b.grew)
            })
            .collect();
        if changed.is_empty() && (was.generation, bits(was)) == (is.generation, bits(is)) {
            continue;
        }
        let mut b = Vec::new();
        put_uvarint(&mut b, *ns);
        put_uvarint(&mut b, u64::from(is.generation));
        put_uvarint(&mut b, bits(is));
        put_uvarint(&mut b, changed.len() as u64);
        let mut next = 0;
        for i in changed {
            // The gap from the rule after the last one changed.
            put_uvarint(&mut b, (i - next) as u64);
            next = i + 1;
            // Each counter the rule has (which ones is the frame before's): its change, the
            // growth's less the counter's (0 where they grew alike).
            let (a, g) = (&was.rules[i], &is.rules[i]);
            let packets = changes(a.rule.packets, g.rule.packets);
            if let Some(p) = packets {
                put_uvarint(&mut b, zigzag_diff(0, p));
            }
            if let Some(d) = changes(a.grew, g.grew) {
                put_uvarint(&mut b, zigzag_diff(packets.unwrap_or(0), d));
            }
        }
        blocks.push(b);
    }
    let mut p = Vec::new();
    put_uvarint(&mut p, blocks.len() as u64);
    for b in blocks {
        p.extend_from_slice(&b);
    }
    (p.len() * 2 < full && p.len() <= MAX_FRAME).then_some(p)
}

/// Brings `a` (the attribution of the frames before) up to a delta frame's payload, refusing
/// anything the writer would not have written: a namespace or rule `a` does not have, rules
/// out of order. A rule's counters are those it has in `a`: a delta changes their values
/// only. On error `a` is not to be used.
pub fn apply(payload: &[u8], a: &mut Attribution) -> Result<(), Malformed> {
    if payload.len() > MAX_FRAME {
        return Err(Malformed("an attribution delta frame beyond 1 MiB"));
    }
    let mut r = Reader::new(payload);
    each_netns(&mut r, |r, ns| {
        let w = (a.rules.get_mut(&ns)).ok_or(Malformed(
            "an attribution delta of a namespace without rules",
        ))?;
        w.generation = u32::try_from(r.uvarint()?)
            .map_err(|_| Malformed("an attribution number too large"))?;
        let b = r.uvarint()?;
        if b > 7 {
            return Err(Malformed("unknown ruleset bits"));
        }
        (w.whole, w.late, w.changed) = (b & 1 != 0, b & 2 != 0, b & 4 != 0);
        let n = r.count(1)?;
        if n > w.rules.len() {
            return Err(Malformed(
                "an attribution delta of more rules than there are",
            ));
        }
        let mut next = 0usize;
        for _ in 0..n {
            let i = usize::try_from(r.uvarint()?)
                .ok()
                .and_then(|gap| next.checked_add(gap))
                .filter(|&i| i < w.rules.len())
                .ok_or(Malformed("an attribution delta of a rule there is not"))?;
            next = i + 1;
            let g = &mut w.rules[i];
            let mut by = 0;
            if let Some(p) = &mut g.rule.packets {
                by = apply_zigzag(0, r.uvarint()?);
                *p = p.wrapping_add(by);
            }
            if let Some(grew) = &mut g.grew {
                *grew = grew.wrapping_add(apply_zigzag(by, r.uvarint()?));
            }
        }
        Ok(())
    })?;
    r.finish()
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use super::*;
    use crate::{
        culprit::ruleset::{ChainId, Rule, Verdict},
        model::Snapshot,
        record::{Recording, attribution, encode as record, tests::session},
    };

    /// A reading of one namespace with `n` counted drop rules, rule `i` having grown by
    /// `grew(i)` (its counter by as much over 10,000,000).
    fn counted(n: usize, grew: impl Fn(usize) -> u64) -> KernelReading {
        let id = ChainId {
            family: 1,
            table: "filter".into(),
            chain: "input".into(),
        };
        let rules = (0..n)
            .map(|i| Grown {
                rule: Rule {
                    id: id.clone(),
                    handle: 4 + i as u64,
                    position: 1 + i as u32,
                    verdict: Verdict::Drop,
                    packets: Some(10_000_000 + grew(i)),
                    comment: Some(format!("block 10.{}.{}.0/24", i / 256, i % 256)),
                    exprs: "payload cmp counter immediate".into(),
                },
                grew: Some(grew(i)),
            })
            .collect();
        KernelReading {
            unix_ms: 1,
            attributed: true,
            rules: [(
                4026531840,
                RulesWindow {
                    generation: 3,
                    rules,
                    whole: true,
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_delta_brings_the_whole_frame_before_up_to_the_reading() {
        let before = counted(50, |i| i as u64);
        let mut now = counted(50, |i| {
            if i % 7 == 0 {
                1000 + i as u64
            } else {
                i as u64
            }
        });
        now.rules.values_mut().for_each(|w| w.changed = true);
        let full = attribution::encode(&now);
        let d = encode(&before, &now, full.len()).expect("a delta");
        assert!(d.len() * 10 < full.len(), "{} of {}", d.len(), full.len());
        let mut a = attribution::decode(&attribution::encode(&before)).expect("whole");
        apply(&d, &mut a).expect("applies");
        assert_eq!(a, attribution::decode(&full).expect("whole"));
        // Truncated anywhere: an error, never a panic.
        for n in 0..d.len() {
            let mut a = attribution::decode(&attribution::encode(&before)).expect("whole");
            assert!(apply(&d[..n], &mut a).is_err(), "{n}");
        }
    }

    #[test]
    fn anything_but_counters_is_a_whole_frame() {
        let before = counted(5, |i| i as u64);
        let full = attribution::encode(&before).len();
        let mut gone = counted(4, |i| i as u64 + 1);
        assert_eq!(encode(&before, &gone, full), None, "a rule deleted");
        gone = counted(5, |i| i as u64 + 1);
        gone.rules
            .values_mut()
            .for_each(|w| w.rules[2].rule.comment = None);
        assert_eq!(encode(&before, &gone, full), None, "a comment changed");
        let mut lost = counted(5, |i| i as u64 + 1);
        lost.rules.values_mut().for_each(|w| w.rules[0].grew = None);
        assert_eq!(encode(&before, &lost, full), None, "a counter gone");
        let mut attached = counted(5, |i| i as u64 + 1);
        attached.attached.insert(7, Vec::new());
        assert_eq!(encode(&before, &attached, full), None, "a program attached");
        // Nothing changed but the time: an empty delta.
        let same = encode(&before, &before, full).expect("a delta");
        let mut a = attribution::decode(&attribution::encode(&before)).expect("whole");
        apply(&same, &mut a).expect("applies");
        assert!(a.same_as(&before));
    }

    #[test]
    fn crafted_deltas_are_refused() {
        let base = || attribution::decode(&attribution::encode(&counted(3, |_| 1))).expect("w");
        let frame = |v: &[u64]| {
            let mut p = Vec::new();
            v.iter().for_each(|&x| put_uvarint(&mut p, x));
            p
        };
        let ns = 4026531840;
        for (bad, why) in [
            (frame(&[1, 9, 3, 1, 0]), "a namespace without rules"),
            (frame(&[1, ns, 3, 8, 0]), "unknown bits"),
            (
                frame(&[1, ns, 3, 1, 4, 0, 2, 0, 0, 2, 0]),
                "more rules than it has",
            ),
            (frame(&[1, ns, 3, 1, 1, 3, 2, 0]), "a rule past the last"),
            (frame(&[1, ns, 3, 1, 1, 0, 2]), "a rule's counters cut"),
            (frame(&[2, ns, 3, 1, 0, ns, 3, 1, 0]), "a namespace twice"),
            (frame(&[1, ns, 3, 1, 0, 7]), "trailing bytes"),
            (
                frame(&[1, ns, 1 << 33, 1, 0]),
                "a generation beyond 32 bits",
            ),
        ] {
            assert!(apply(&bad, &mut base()).is_err(), "{why}");
        }
        // Rule 0 grew by 1 (its growth alike), rule 1 by 2.
        let ok = frame(&[1, ns, 3, 1, 2, 0, 2, 0, 0, 4, 0]);
        let mut a = base();
        apply(&ok, &mut a).expect("a delta as written");
        let grew: Vec<_> = a.rules[&ns].rules.iter().map(|g| g.grew).collect();
        assert_eq!(grew, [Some(2), Some(3), Some(1)]);
    }

    /// Bytes per reading of attribution for 4,000 counted rules, one reading every 10 s for 20
    /// minutes, each reading's rules grown by `grow(t, i)`: (whole, as format 8 wrote every
    /// reading, its frames as written; as format 9 writes them). Every snapshot and a seek
    /// into a chain read back as written.
    fn per_reading(grow: impl Fn(u64, usize) -> u64) -> (usize, usize) {
        let readings = 120u64;
        let reading = |t: u64| {
            let mut r = counted(4000, |i| (1..=t).map(|s| grow(s, i)).sum());
            r.unix_ms = 1_750_000_000_000 + 10_000 * t;
            r
        };
        let snaps: Vec<Snapshot> = (1..=readings)
            .map(|t| Snapshot {
                elapsed: Duration::from_secs(10 * t),
                unix_ms: 1_750_000_000_000 + 10_000 * t,
                kernel: Some(Arc::new(reading(t))),
                ..Default::default()
            })
            .collect();
        let size = |f: &dyn Fn(&KernelReading) -> KernelReading| {
            let s: Vec<Snapshot> = (snaps.iter())
                .map(|s| {
                    let mut s = s.clone();
                    s.kernel = s.kernel.as_deref().map(|r| Arc::new(f(r)));
                    s
                })
                .collect();
            record(&session(), &s).expect("encode").len()
        };
        // The recording less the same readings without attribution.
        let plain = size(&|r| KernelReading {
            unix_ms: r.unix_ms,
            ..Default::default()
        });
        let bytes = record(&session(), &snaps).expect("encode");
        let after = bytes.len() - plain;
        let whole: usize = (snaps.iter())
            .map(|s| {
                let mut f = Vec::new();
                let p = attribution::encode(s.kernel.as_ref().expect("a reading"));
                let kind = crate::record::format::Kind::Attribution;
                crate::record::format::push_frame(&mut f, kind, 0, &p).expect("frame");
                f.len()
            })
            .sum();
        let rec = Recording::from_bytes(&bytes).expect("open");
        assert!(rec.warnings().is_empty(), "{:?}", rec.warnings());
        for (i, got) in rec.snapshots().enumerate() {
            let got = got.expect("decodes");
            let want = &snaps[i].kernel.as_ref().expect("written").rules;
            assert_eq!(&got.kernel.expect("a reading").rules, want, "{i}");
        }
        let mid = rec.snapshot_at(Duration::from_secs(455)).expect("seek");
        let want = &snaps[44].kernel.as_ref().expect("written").rules;
        assert_eq!(&mid.kernel.expect("a reading").rules, want);
        (whole / readings as usize, after / readings as usize)
    }

    /// `cargo test -p dropscope --lib bytes_per_reading -- --nocapture` prints the figures of
    /// docs/recording-format.md.
    #[test]
    fn bytes_per_reading_of_4000_counted_rules() {
        // A pseudo-random growth (so that it does not compress away) of 1 to 1,000.
        let noise = |t: u64, i: usize| (t * 7919 + i as u64 * 104_729) % 1000 + 1;
        let (whole, every) = per_reading(noise);
        println!(
            "4,000 counted rules, every one growing each reading: {whole} bytes a reading \
             whole (format 8), {every} as whole frames and deltas (format 9)"
        );
        assert!(every * 3 < whole, "{every} against {whole}");
        let (whole, some) = per_reading(|t, i| if i % 100 == 0 { noise(t, i) } else { 0 });
        println!(
            "4,000 counted rules, 40 of them growing each reading: {whole} bytes a reading \
             whole (format 8), {some} as whole frames and deltas (format 9)"
        );
        assert!(some * 10 < whole, "{some} against {whole}");
    }

    /// A recording whose first attribution frame is cut out: the delta after it has nothing
    /// to apply to, and the reader keeps what came before it, with a warning.
    #[test]
    fn a_delta_without_its_whole_frame_ends_the_valid_part() {
        use crate::record::format::{FILE_HEADER_LEN, FRAME_HEADER_LEN};
        let snaps: Vec<Snapshot> = (1..=3u64)
            .map(|t| Snapshot {
                elapsed: Duration::from_secs(t),
                kernel: Some(Arc::new(counted(20, |i| t * i as u64))),
                ..Default::default()
            })
            .collect();
        let bytes = record(&session(), &snaps).expect("encode");
        let mut frames = Vec::new();
        let mut at = FILE_HEADER_LEN;
        while at + FRAME_HEADER_LEN <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
            frames.push((at, bytes[at + 4], FRAME_HEADER_LEN + len as usize));
            at += FRAME_HEADER_LEN + len as usize;
        }
        let kinds: Vec<u8> = frames.iter().map(|f| f.1).filter(|k| *k >= 7).collect();
        assert_eq!(kinds, [7, 8, 8], "a whole frame and two deltas");
        let (whole, _, len) = *frames.iter().find(|f| f.1 == 7).expect("a whole frame");
        let cut = [&bytes[..whole], &bytes[whole + len..]].concat();
        let rec = Recording::from_bytes(&cut).expect("opens");
        let w = rec.warnings().join("; ");
        assert!(
            w.contains("an attribution delta frame before any attribution"),
            "{w}"
        );
        assert!(rec.len() < snaps.len(), "{}", rec.len());
    }
}
