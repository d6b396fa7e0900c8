//! The comparison as `diff` makes it, from synthetic recordings written with the recording
//! writer: a doubled rate is found, equal rates are rarely flagged.
use std::{sync::Arc, time::Duration};

use super::{input, side};
use crate::{
    model::{
        Attribution, DropCount, DropKey, SessionInfo, Snapshot,
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
        attr: Attribution {
            netns: Some(4026532001),
            netns_name: Some(Arc::from("web")),
            ..Default::default()
        },
        ..crate::fixtures::key(code, reason, "__udp4_lib_rcv+0x1c")
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
    let (b, n) = (recorded(base), recorded(new));
    assert_eq!(b.seconds, 10.0);
    compare::compare(
        &side(&b, &Filter::default(), &Dim::ALL, None),
        &side(&n, &Filter::default(), &Dim::ALL, None),
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

/// A recording of 10 one-second snapshots of 100 NO_SOCKET drops a second, its kernel
/// readings carrying `xdp_per_s` XDP_DROP verdicts a second of one program (none: no reading).
fn with_program(xdp_per_s: Option<u64>) -> Recording {
    with_program_id(xdp_per_s, 42)
}

/// [`with_program`] with the program's id.
fn with_program_id(xdp_per_s: Option<u64>, id: u32) -> Recording {
    let snaps: Vec<Snapshot> = (1..=10u64)
        .map(|t| Snapshot {
            elapsed: Duration::from_secs(t),
            unix_ms: 1_750_000_000_000 + 1000 * t,
            total: 100 * t,
            drops: vec![DropCount {
                key: key("NO_SOCKET", 2),
                count: 100 * t,
            }],
            kernel: xdp_per_s.map(|n| {
                let mut r = crate::model::KernelReading {
                    unix_ms: 1_750_000_000_000 + 1000 * t,
                    initial_netns: 1,
                    ..Default::default()
                };
                r.netns.entry(4026532001).or_default().insert(
                    Arc::from(format!("Xdp:vb:xdpdrv:ddos_guard#{id}:drop")),
                    n * t,
                );
                Arc::new(r)
            }),
            ..Default::default()
        })
        .collect();
    let bytes = record::encode(&SessionInfo::default(), &snaps).expect("encode");
    Recording::from_bytes(&bytes).expect("read back")
}

/// A recording as `diff` reads it.
fn recorded(rec: &Recording) -> input::Input {
    let (snapshot, seconds) = input::whole(rec).expect("snapshot");
    input::Input {
        name: "synthetic".into(),
        programs: crate::model::programs::of_snapshot(&snapshot),
        programs_counted: crate::model::programs::counted(&snapshot),
        snapshot,
        seconds,
        json: false,
    }
}

#[test]
fn a_programs_verdicts_are_keys_of_the_diff_and_judged_by_budgets_never_in_the_total() {
    use crate::model::budget;
    // BASE counted the programs' verdicts (its readings hold none), NEW's program drops.
    let (base, new) = (
        recorded(&with_program(Some(0))),
        recorded(&with_program(Some(50))),
    );
    let (b, n) = (
        side(&base, &Filter::default(), &Dim::ALL, None),
        side(&new, &Filter::default(), &Dim::ALL, None),
    );
    // The program's 500 drops are a key of NEW, beside the probe's 1,000, not in its total.
    assert_eq!((b.total, n.total), (1000, 1000));
    let xdp = (n.counts.iter())
        .find(|(k, _)| &*k.reason == "XDP_DROP")
        .expect("an XDP_DROP key");
    // By name: a program's id changes with every load.
    assert_eq!(&*xdp.0.location, "prog ddos_guard (xdpdrv)");
    assert_eq!(xdp.0.device.as_deref(), Some("vb"));
    assert_eq!(*xdp.1, 500);
    let c = compare::compare(&b, &n, 0.001);
    assert_eq!(change(&c, "XDP_DROP"), Some(Change::Regression), "{c:#?}");
    assert_eq!(c.total.change, None, "{c:#?}");
    // Budgets: the program's rate breaks its clause and is a new reason; the total's clause
    // and its largest key are the probe's.
    let clauses = [
        "XDP_DROP<10/s",
        "NO_SOCKET<200/s",
        "total<150/s",
        "new-reasons=0",
    ]
    .map(|c| crate::vocab::budget::parse(c).expect(c));
    let v = budget::judge(&clauses, &n, Some(&b), "new").expect("judged");
    let ok: Vec<bool> = v.iter().map(|v| v.ok).collect();
    assert_eq!(ok, [false, true, true, false], "{v:#?}");
    assert_eq!(v[0].value, 50.0);
    assert!(
        v[0].message.contains("prog ddos_guard (xdpdrv)"),
        "{}",
        v[0].message
    );
    assert_eq!(v[2].value, 100.0);
    assert_eq!(&*v[2].keys[0].reason, "NO_SOCKET");
    assert!(v[3].message.contains("XDP_DROP"), "{}", v[3].message);
    // Grouped by reason alone, the program's row keeps its program (as in the live view).
    let by_reason = side(&new, &Filter::default(), &[Dim::Reason], None);
    assert!(
        (by_reason.counts.keys()).any(|k| &*k.location == "prog ddos_guard (xdpdrv)"),
        "{by_reason:#?}"
    );
    // Filtered, no program row: a filter on drops knows nothing of the programs' counts.
    let filtered = side(
        &new,
        &Filter {
            reasons: vec!["NO_SOCKET".into()],
            ..Default::default()
        },
        &Dim::ALL,
        None,
    );
    assert!(
        !(filtered.counts.keys()).any(|k| &*k.reason == "XDP_DROP"),
        "{filtered:#?}"
    );
    // Against a BASE that did not count them (no reading of the kernel's counters), the
    // verdicts are neither compared nor new; NEW's own clause is still judged.
    let uncounted = recorded(&with_program(None));
    assert!(uncounted.programs_counted.is_err());
    let u = side(&uncounted, &Filter::default(), &Dim::ALL, None);
    let c = compare::compare(&u, &n, 0.001);
    assert!(
        !(c.rows.iter()).any(|r| &*r.key.reason == "XDP_DROP"),
        "{c:#?}"
    );
    let v = budget::judge(&clauses, &n, Some(&u), "new").expect("judged");
    let ok: Vec<bool> = v.iter().map(|v| v.ok).collect();
    assert_eq!(ok, [false, true, true, true], "{v:#?}");
}

#[test]
fn a_clause_on_a_programs_verdicts_is_refused_with_drops_filtered() {
    let clauses = ["XDP_DROP<1/s"].map(|c| crate::vocab::budget::parse(c).expect(c));
    let filter = Filter {
        device: Some("vb".into()),
        ..Default::default()
    };
    let err = super::refuse_filtered_programs(&clauses, &filter).expect_err("refused");
    assert!(
        err.to_string().contains("judge it without the filter"),
        "{err}"
    );
    assert!(super::refuse_filtered_programs(&clauses, &Filter::default()).is_ok());
    let other = ["NO_SOCKET<1/s"].map(|c| crate::vocab::budget::parse(c).expect(c));
    assert!(super::refuse_filtered_programs(&other, &filter).is_ok());
    // A program verdict's name is known without the reason guide having it.
    super::check_budget_reasons(&clauses, &Default::default()).expect("known");
}

#[test]
fn a_program_reloaded_between_runs_is_the_same_key() {
    // The same program at the same rate, loaded again (another id) for NEW: no change.
    let (base, new) = (
        recorded(&with_program_id(Some(50), 42)),
        recorded(&with_program_id(Some(50), 57)),
    );
    let c = compare::compare(
        &side(&base, &Filter::default(), &Dim::ALL, None),
        &side(&new, &Filter::default(), &Dim::ALL, None),
        0.001,
    );
    let rows: Vec<_> = (c.rows.iter())
        .filter(|r| &*r.key.reason == "XDP_DROP")
        .collect();
    assert_eq!(rows.len(), 1, "{c:#?}");
    assert_eq!(
        (rows[0].rates.base_count, rows[0].rates.new_count),
        (500, 500)
    );
    assert_eq!(rows[0].rates.change, None);
    // A recording without the kernel's counters cannot judge a program's verdicts.
    assert!(recorded(&with_program(None)).programs_counted.is_err());
    assert_eq!(base.programs_counted, Ok(()));
}

#[test]
fn diff_history_compares_the_programs_verdicts_of_its_windows() {
    use crate::history::synthetic::{session, with_counters, write_session};
    use clap::Parser as _;
    let tmp = tempfile::tempdir().expect("tempdir");
    let t0 = 1_790_000_000_000;
    let seq = write_session(
        tmp.path(),
        1,
        &session("d", t0),
        &with_counters(t0, 10, 20),
        6,
    )
    .expect("a");
    let b = with_counters(t0 + 100_000, 40, 20);
    write_session(tmp.path(), seq, &session("d", t0 + 100_000), &b, 6).expect("b");
    // NEW: 5 s to 15 s into the second session; BASE: the same 100 s earlier, in the first.
    let at = "2026-09-21T14:15:15Z";
    assert_eq!(
        crate::history::when::parse_wall(at, &jiff::Zoned::now()),
        Ok(t0 + 115_000)
    );
    let dir = tmp.path().to_str().expect("utf-8");
    let args = [
        "dropscope",
        "diff",
        "--history",
        dir,
        "--last",
        "10s",
        "--vs",
        "100s",
    ];
    let cli = crate::cli::Cli::try_parse_from(args.into_iter().chain(["--at", at])).expect("args");
    let Some(crate::cli::Command::Diff(args)) = cli.command else {
        panic!("not diff");
    };
    let (base, new) = input::history(tmp.path(), &args).expect("sides");
    assert_eq!((base.snapshot.total, new.snapshot.total), (100, 400));
    assert_eq!(
        (base.programs_counted.clone(), new.programs_counted.clone()),
        (Ok(()), Ok(()))
    );
    // The verdicts between the readings at 5 s and 15 s: 5/s, then 20/s.
    let verdicts = |i: &input::Input| i.programs.iter().map(|d| d.count).sum::<u64>();
    assert_eq!((verdicts(&base), verdicts(&new)), (50, 200));
    let (b, n) = (
        side(&base, &Filter::default(), &Dim::ALL, None),
        side(&new, &Filter::default(), &Dim::ALL, None),
    );
    let c = compare::compare(&b, &n, 0.001);
    let xdp = (c.rows.iter())
        .find(|r| &*r.key.reason == "XDP_DROP")
        .unwrap_or_else(|| panic!("no XDP_DROP row: {c:#?}"));
    assert_eq!((xdp.rates.base_count, xdp.rates.new_count), (50, 200));
    assert_eq!(xdp.rates.change, Some(Change::Regression));
    // Not in the probe's total.
    assert_eq!((c.total.base_count, c.total.new_count), (100, 400));
}
