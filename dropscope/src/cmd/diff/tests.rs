//! The comparison as `diff` makes it, from synthetic recordings written with the recording
//! writer: a doubled rate is found, equal rates are rarely flagged.
use std::{sync::Arc, time::Duration};

use super::{input, side};
use crate::{
    model::{
        Attribution, DropCount, DropKey, Reason, SessionInfo, Snapshot,
        compare::{self, Change, Comparison},
        group::{Dim, Filter},
    },
    record::{self, Recording},
};

/// A seeded generator (SplitMix64): the same counts on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A Poisson-distributed count of mean `lambda` (Knuth's method; `lambda` well below 700).
    fn poisson(&mut self, lambda: f64) -> u64 {
        let limit = (-lambda).exp();
        let (mut k, mut p) = (0, self.uniform());
        while p > limit {
            k += 1;
            p *= self.uniform();
        }
        k
    }
}

fn key(reason: &str, code: u32) -> DropKey {
    DropKey {
        reason: Reason {
            code,
            name: Arc::from(reason),
        },
        location: Arc::from("__udp4_lib_rcv+0x1c"),
        attr: Attribution {
            netns: Some(4026532001),
            netns_name: Some(Arc::from("web")),
            ..Default::default()
        },
    }
}

/// A recording of `seconds` one-second snapshots, each key's drops per second drawn from a
/// Poisson distribution of its rate (`rates`: reason and drops per second).
fn recording(rng: &mut Rng, rates: &[(&str, f64)], seconds: u64) -> Recording {
    let mut counts = vec![0u64; rates.len()];
    let snaps: Vec<Snapshot> = (1..=seconds)
        .map(|t| {
            for (c, (_, rate)) in counts.iter_mut().zip(rates) {
                *c += rng.poisson(*rate);
            }
            let drops: Vec<DropCount> = (rates.iter().zip(&counts).enumerate())
                .map(|(i, ((reason, _), &count))| DropCount {
                    key: key(reason, i as u32 + 2),
                    count,
                })
                .collect();
            Snapshot {
                elapsed: Duration::from_secs(t),
                unix_ms: 1_750_000_000_000 + 1000 * t,
                total: counts.iter().sum(),
                drops,
                ..Default::default()
            }
        })
        .collect();
    let bytes = record::encode(&SessionInfo::default(), &snaps).expect("encode");
    Recording::from_bytes(&bytes).expect("read back")
}

/// `diff` of two recordings as the command compares them (by every dimension they have).
fn diff(base: &Recording, new: &Recording, alpha: f64) -> Comparison {
    let input = |rec: &Recording| {
        let (snapshot, seconds) = input::whole(rec).expect("snapshot");
        input::Input {
            name: "synthetic".into(),
            snapshot,
            seconds,
        }
    };
    let (b, n) = (input(base), input(new));
    assert_eq!(b.seconds, 10.0);
    compare::compare(
        &side(&b, &Filter::default(), &Dim::ALL),
        &side(&n, &Filter::default(), &Dim::ALL),
        alpha,
    )
}

fn change(c: &Comparison, reason: &str) -> Option<Change> {
    let row = (c.rows.iter())
        .find(|r| &*r.key.reason == reason)
        .unwrap_or_else(|| panic!("no {reason} row: {c:#?}"));
    row.rates.change
}

#[test]
fn a_doubled_rate_is_found_in_ten_second_recordings() {
    let mut rng = Rng(7);
    let mut steady_flagged = 0;
    for _ in 0..20 {
        let base = recording(&mut rng, &[("NO_SOCKET", 50.0), ("OTHERHOST", 50.0)], 10);
        let new = recording(&mut rng, &[("NO_SOCKET", 100.0), ("OTHERHOST", 50.0)], 10);
        let c = diff(&base, &new, 0.001);
        assert_eq!(change(&c, "NO_SOCKET"), Some(Change::Regression), "{c:#?}");
        let ratio = (c.rows.iter())
            .find(|r| &*r.key.reason == "NO_SOCKET")
            .and_then(|r| r.rates.ratio)
            .expect("a ratio");
        assert!((1.6..2.5).contains(&ratio), "{ratio}");
        steady_flagged += usize::from(change(&c, "OTHERHOST").is_some());
    }
    assert!(
        steady_flagged <= 1,
        "{steady_flagged} of 20 steady keys flagged"
    );
}

#[test]
fn equal_rates_are_flagged_in_fewer_than_one_percent_of_pairs() {
    let mut rng = Rng(42);
    let (mut flagged, mut at_5_percent) = (0, 0);
    for _ in 0..100 {
        let base = recording(&mut rng, &[("NO_SOCKET", 50.0)], 10);
        let new = recording(&mut rng, &[("NO_SOCKET", 50.0)], 10);
        flagged += usize::from(change(&diff(&base, &new, 0.001), "NO_SOCKET").is_some());
        at_5_percent += usize::from(change(&diff(&base, &new, 0.05), "NO_SOCKET").is_some());
    }
    assert!(
        flagged < 1,
        "{flagged} of 100 equal-rate pairs flagged at p < 0.001"
    );
    // The test is calibrated, not merely timid: at 5%, about 5 of 100 pairs are flagged.
    assert!(
        (1..=12).contains(&at_5_percent),
        "{at_5_percent} of 100 equal-rate pairs flagged at p < 0.05"
    );
}
