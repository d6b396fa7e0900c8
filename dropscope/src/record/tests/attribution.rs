//! What live attribution and matching use, read back from a recording (version 8): the
//! readings' namespace cookies, rulesets, attached programs and full listeners, so that a
//! replay's ledger and culprits are the live ones.
use std::{sync::Arc, time::Duration};

use crate::record::{Recording, encode, tests::session};
use crate::{
    culprit::{self, Culprit},
    ledger::reconcile,
    model::{
        Attribution, DropCount, DropKey, KernelReading, Reason, Snapshot, kernel::tests::reading,
    },
};

/// The namespace whose inode went from one namespace to the next.
const NS: u64 = 4026532999;

fn key(reason: &str, location: &str, cookie: u64) -> DropKey {
    DropKey {
        reason: Reason {
            code: 2,
            name: reason.into(),
        },
        location: location.into(),
        attr: Attribution {
            netns: Some(NS),
            netns_cookie: Some(cookie),
            ..Default::default()
        },
    }
}

fn snap(secs: u64, drops: Vec<DropCount>, r: KernelReading) -> Snapshot {
    let total = drops.iter().map(|d| d.count).sum();
    Snapshot {
        elapsed: Duration::from_secs(secs),
        unix_ms: 1_750_000_000_000 + secs * 1000,
        total,
        drops,
        kernel: Some(Arc::new(r)),
        ..Default::default()
    }
}

fn round_trip(snaps: &[Snapshot]) -> Vec<Snapshot> {
    let bytes = encode(&session(), snaps).expect("encode");
    let rec = Recording::from_bytes(&bytes).expect("open");
    assert!(rec.warnings().is_empty(), "{:?}", rec.warnings());
    crate::record::tests::decode_all(&rec)
}

/// A namespace that ended (drops keyed by its cookie 5) and the one given its inode next
/// (cookie 9, as the reading read it): replayed, its counter's 10 drops stay unseen by the
/// probe, as live, never matched with the ended one's 5,000.
#[test]
fn a_replayed_ledger_matches_an_ended_namespaces_drops_by_cookie_as_live() {
    let mut r = reading(1_750_000_000_000, &[(NS, "Udp:NoPorts", 10)]);
    r.cookies.insert(NS, 9);
    let ended = DropCount {
        key: key("NO_SOCKET", "__udp4_lib_rcv+0x1", 5),
        count: 5000,
    };
    let live = snap(1, vec![ended], r);
    let back = round_trip(std::slice::from_ref(&live));
    let replayed = back[0].kernel.as_deref().expect("a reading");
    let row = |l: &reconcile::Ledger| {
        let u = (l.counters.iter())
            .find(|r| r.counter == "Udp:NoPorts")
            .expect("the counter's row");
        (u.matched, u.counter_only)
    };
    let live_row = row(&reconcile::ledger(
        live.kernel.as_deref().expect("r"),
        &live,
    ));
    assert_eq!(live_row, (0, 10));
    assert_eq!(row(&reconcile::ledger(replayed, &back[0])), live_row);
    assert_eq!(replayed.cookies, [(NS, 9)].into());
}

/// Cookies change between readings (a namespace ended, another was read): each snapshot reads
/// back the cookies of its own reading, whole or through kernel delta frames, and by seeks.
#[test]
fn cookies_that_change_between_readings_read_back_with_each_snapshot() {
    let snaps: Vec<Snapshot> = (0..30u64)
        .map(|i| {
            let mut r = reading(1_750_000_000_000 + i, &[(NS, "Udp:NoPorts", 10 + i)]);
            r.cookies = [(1, 1), (NS, 100 + i / 10)].into();
            if i % 7 == 3 {
                r.cookies.insert(NS + 1, 77);
            }
            snap(i, Vec::new(), r)
        })
        .collect();
    let bytes = encode(&session(), &snaps).expect("encode");
    let rec = Recording::from_bytes(&bytes).expect("open");
    for (i, s) in crate::record::tests::decode_all(&rec).iter().enumerate() {
        let want = &snaps[i].kernel.as_deref().expect("r").cookies;
        assert_eq!(
            &s.kernel.as_deref().expect("a reading").cookies,
            want,
            "{i}"
        );
    }
    let at = rec.snapshot_at(Duration::from_secs(24)).expect("seek");
    assert_eq!(
        at.kernel.expect("a reading").cookies,
        [(1, 1), (NS, 102), (NS + 1, 77)].into()
    );
}

/// A reading with a counted nft drop rule that grew by as many drops as the row counts, and a
/// tc program at its attach point: the culprits of the replayed snapshots are the live ones,
/// exact, and a listener is read back with its process.
#[test]
fn culprits_of_a_replay_are_the_live_ones() {
    let attributed = crate::record::attribution::tests::attributed();
    let mut snaps = Vec::new();
    for i in 1..=3u64 {
        let mut r = attributed.clone();
        r.unix_ms = 1_750_000_000_000 + i;
        r.netns = reading(0, &[(NS, "Ip:InReceives", 100 * i)]).netns;
        let w = r.rules.get_mut(&NS).expect("a window");
        w.rules[0].grew = Some(400 * i);
        let drops = vec![
            DropCount {
                key: key("NETFILTER_DROP", "nf_hook_slow+0xa1", 1),
                count: 400 * i,
            },
            DropCount {
                key: key("TC_INGRESS", "tcf_classify+0x3c", 1),
                count: 7 * i,
            },
        ];
        snaps.push(snap(i, drops, r));
    }
    let back = round_trip(&snaps);
    for (live, replayed) in snaps.iter().zip(&back) {
        let (live_c, replayed_c) = (culprit::culprits(live), culprit::culprits(replayed));
        let nf = &live_c[&live.drops[0].key];
        assert!(matches!(nf, Culprit::Exact { .. }), "{nf:?}");
        assert!(!nf.line().contains("recorded before"), "{}", nf.line());
        assert_eq!(replayed_c, live_c);
        let r = replayed.kernel.as_deref().expect("a reading");
        assert_eq!(r.listeners, attributed.listeners);
        assert!(r.attributed);
    }
}

/// A reading without attribution (as a replayed version 7 reading is) is written without an
/// attribution frame and reads back unattributed: "recorded before attribution".
#[test]
fn a_reading_without_attribution_reads_back_recorded_before() {
    let mut r = reading(1_750_000_000_000, &[(NS, "Ip:InReceives", 10)]);
    r.attributed = false;
    let drops = vec![DropCount {
        key: key("NETFILTER_DROP", "nf_hook_slow+0xa1", 1),
        count: 4,
    }];
    let back = round_trip(&[snap(1, drops, r)]);
    let c = culprit::culprits(&back[0]);
    let line = c.values().next().expect("a culprit").line();
    assert!(
        line.starts_with("unknown: recorded before attribution"),
        "{line}"
    );
}

/// A recording of format 8 (attribution frames whole, no deltas: `testdata/version8.dsrec`,
/// the sample recording as it was recorded then) still reads: its readings carry the
/// programs attached, and its tc program is named as the candidate of its drops.
#[test]
fn a_recording_of_format_8_still_names_its_culprits() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/record/testdata/version8.dsrec");
    let bytes = std::fs::read(path).expect("the format 8 sample");
    assert_eq!(&bytes[14..16], &8u16.to_le_bytes());
    let rec = Recording::from_bytes(&bytes).expect("opens");
    let last = (rec.snapshots().last())
        .expect("snapshots")
        .expect("decodes");
    let r = last.kernel.as_ref().expect("a reading");
    assert!(r.attributed && !r.attached.is_empty(), "{r:?}");
    let named = culprit::culprits(&last);
    assert!(
        (named.values()).any(|c| matches!(c, Culprit::Candidates { who, .. }
            if who.iter().any(|w| matches!(w, culprit::Who::Program { .. })))),
        "{named:?}"
    );
}

/// A recording of format 9 (`testdata/version9.dsrec`, the sample recording as it was recorded
/// then: kernel frames without the namespaces' names) still reads: its culprits are named, and
/// its readings' namespaces are named by its drops alone.
#[test]
fn a_recording_of_format_9_still_reads_without_namespace_names() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/record/testdata/version9.dsrec");
    let bytes = std::fs::read(path).expect("the format 9 sample");
    assert_eq!(&bytes[14..16], &9u16.to_le_bytes());
    let rec = Recording::from_bytes(&bytes).expect("opens");
    assert!(rec.warnings().is_empty(), "{:?}", rec.warnings());
    let last = (rec.snapshots().last())
        .expect("snapshots")
        .expect("decodes");
    assert!(last.invariant_holds());
    let r = last.kernel.as_ref().expect("a reading");
    assert!(r.names.is_empty(), "format 9 has no names: {:?}", r.names);
    let names = crate::model::programs::netns_names(&last, r);
    for ns in ["dsample-web", "dsample-db"] {
        assert!(names.values().any(|n| &**n == ns), "{ns}: {names:?}");
    }
    assert!(!culprit::culprits(&last).is_empty());
}
