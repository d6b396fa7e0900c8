//! Tests of the counter map, deltas and unseen drops (pure), and one read of this machine's
//! own counters.
use std::collections::BTreeMap;

use super::parse::Counters;
use crate::explain::{Guide, Match};
use crate::ledger::{map, unseen::*};

fn counters(pairs: &[(&str, u64)]) -> Counters {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

const INIT: u64 = 4026531840;
const NS: u64 = 4026532500;

#[test]
fn every_mapped_reason_is_in_the_guide() {
    let g = Guide::builtin();
    for m in map::COUNTERS {
        for r in m.reasons {
            let name = map::reason_name(r);
            assert_eq!(g.explain(name).found, Match::Exact, "{}: {name}", m.counter);
        }
    }
}

#[test]
fn lookup_finds_devices_by_pattern() {
    assert_eq!(
        map::lookup("Dev:eth0:RxDrop").map(|m| m.counter),
        Some("Dev:*:RxDrop")
    );
    assert_eq!(
        map::lookup("Dev:veth-a:TxDrop").map(|m| m.counter),
        Some("Dev:*:TxDrop")
    );
    assert!(map::lookup("Dev:eth0:RxBytes").is_none());
    assert!(map::lookup("Udp:InDatagrams").is_none());
    assert!(map::lookup("TcpExt:ListenDrops").is_some());
}

#[test]
fn specs_can_name_a_function() {
    assert!(map::matches(
        "NO_SOCKET@__udp4_lib_rcv",
        "NO_SOCKET",
        "__udp4_lib_rcv+0x9b0"
    ));
    assert!(!map::matches(
        "NO_SOCKET@__udp4_lib_rcv",
        "NO_SOCKET",
        "tcp_v4_rcv+0x1a2"
    ));
    assert!(!map::matches(
        "NO_SOCKET@__udp4_lib_rcv",
        "NO_SOCKET",
        "__udp4_lib_rcv_x+0x1"
    ));
    assert!(!map::matches("NO_SOCKET@__udp4_lib_rcv", "NOMEM", "*"));
    assert!(map::matches("PROTO_MEM", "PROTO_MEM", "anything"));
    assert!(!map::matches("PROTO_MEM", "NOMEM", "anything"));
    assert_eq!(map::counters_for("TCP_LISTEN_OVERFLOW").len(), 2);
}

#[test]
fn deltas_keep_only_growth_of_mapped_counters() {
    let before = BTreeMap::from([
        (
            INIT,
            counters(&[("Udp:NoPorts", 5), ("TcpExt:ListenDrops", 1)]),
        ),
        (NS, counters(&[("Udp:NoPorts", 0)])),
    ]);
    let after = BTreeMap::from([
        (
            INIT,
            counters(&[
                ("Udp:NoPorts", 5),
                ("TcpExt:ListenDrops", 4),
                ("Dev:eth0:RxDrop", 2),
            ]),
        ),
        (NS, counters(&[("Udp:NoPorts", 1000)])),
        (77, counters(&[("Udp:NoPorts", 9)])),
    ]);
    let d = deltas(&before, &after);
    let got: Vec<_> = d
        .iter()
        .map(|c| (c.netns, c.counter.as_str(), c.delta))
        .collect();
    assert_eq!(
        got,
        vec![
            (INIT, "Dev:eth0:RxDrop", 2),
            (INIT, "TcpExt:ListenDrops", 3),
            (NS, "Udp:NoPorts", 1000)
        ]
    );
    assert_eq!(d[1].reasons, vec!["TCP_LISTEN_OVERFLOW"]);
}

fn delta(netns: u64, counter: &str, delta: u64) -> CounterDelta {
    CounterDelta {
        netns,
        counter: counter.into(),
        delta,
        reasons: Vec::new(),
    }
}

fn drop(
    netns: Option<u64>,
    reason: &'static str,
    location: &'static str,
    count: u64,
) -> SeenDrop<'static> {
    SeenDrop {
        netns,
        reason,
        location,
        count,
        read: true,
    }
}

#[test]
fn unseen_is_the_excess_over_what_the_probe_saw_in_that_namespace() {
    let d = [
        delta(NS, "Udp:NoPorts", 1000),
        delta(NS, "TcpExt:ListenDrops", 50),
        delta(INIT, "TcpExt:ListenDrops", 3),
    ];
    let drops = [
        drop(Some(NS), "NO_SOCKET", "__udp4_lib_rcv+0x10", 1000),
        // TCP's NO_SOCKET is not Udp:NoPorts's.
        drop(Some(NS), "NO_SOCKET", "tcp_v4_rcv+0x10", 7),
        drop(Some(NS), "TCP_LISTEN_OVERFLOW", "tcp_v4_rcv+0x20", 8),
        // Unknown namespace: counts for the initial one.
        drop(None, "TCP_LISTEN_OVERFLOW", "tcp_v4_rcv+0x20", 3),
    ];
    let u = unseen(&d, drops, INIT);
    assert_eq!(
        u,
        vec![Unseen {
            netns: NS,
            counter: "TcpExt:ListenDrops".into(),
            count: 42
        }]
    );
}

#[test]
fn drops_counted_without_their_location_are_seen_by_a_counter_of_one_function() {
    // Grouped by reason and namespace: the location is `*`, and UDP's NO_SOCKET drops are
    // among them, never unseen as well.
    let d = [delta(NS, "Udp:NoPorts", 300)];
    let u = unseen(&d, [drop(Some(NS), "NO_SOCKET", "*", 300)], INIT);
    assert!(u.is_empty(), "{u:?}");
    assert!(map::matches("NO_SOCKET@__udp4_lib_rcv", "NO_SOCKET", "*"));
}

#[test]
fn drops_without_a_namespace_count_for_the_initial_one() {
    let d = [delta(NS, "Udp:NoPorts", 10), delta(INIT, "Udp:NoPorts", 10)];
    let drops = [drop(None, "NO_SOCKET", "__udp4_lib_rcv+0x1", 10)];
    let u = unseen(&d, drops, INIT);
    assert_eq!(u.len(), 1);
    assert_eq!((u[0].netns, u[0].count), (NS, 10));
}

#[test]
fn machine_wide_counters_compare_with_every_namespace() {
    let d = [delta(INIT, "Softnet:Dropped", 30)];
    let drops = [
        drop(Some(NS), "CPU_BACKLOG", "enqueue_to_backlog+0x1", 20),
        drop(Some(INIT), "CPU_BACKLOG", "enqueue_to_backlog+0x1", 4),
    ];
    let u = unseen(&d, drops, INIT);
    assert_eq!(u[0].count, 6);
}

#[test]
fn counters_without_reasons_are_all_unseen() {
    let d = [delta(NS, "TcpExt:TCPReqQFullDrop", 5)];
    let u = unseen(&d, std::iter::empty(), INIT);
    assert_eq!(u[0].count, 5);
}

#[test]
fn a_total_of_unseen_drops_counts_each_drop_once() {
    let a = |netns, counter, count| Alone {
        netns,
        counter,
        count,
    };
    let rows = [
        a(INIT, "TcpExt:ListenDrops", 144),
        a(INIT, "TcpExt:ListenOverflows", 144),
        // The backlog's drops are their device's too.
        a(INIT, "Softnet:Dropped", 30),
        a(NS, "Dev:vb:RxDrop", 30),
        // A /proc/net/dev column beside its device's stats64 counters is within them.
        a(NS, "Dev:eth1:RxDrop", 19),
        a(NS, "Link:eth1:rx_missed_errors", 12),
        // FIFO and overrun: one event counted twice, the larger once.
        a(NS, "Link:eth1:rx_fifo_errors", 5),
        a(NS, "Link:eth1:rx_over_errors", 7),
        a(NS, "Qdisc:eth1:tbf 1::overlimits", 900),
        a(NS, "Udp:NoPorts", 3),
    ];
    assert_eq!(
        summed(&rows),
        [
            true, false, false, true, false, true, false, true, false, true
        ]
    );
    assert_eq!(total(&rows), 144 + 30 + 12 + 7 + 3);
    assert_eq!(total(&[]), 0);
}

#[test]
fn namespace_names_are_escaped_with_the_terminals_rule() {
    use crate::model::{Attribution, DropCount, DropKey, Reason, Snapshot};
    let snap = Snapshot {
        drops: vec![DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: "NO_SOCKET".into(),
                },
                location: "__udp4_lib_rcv+0x1".into(),
                attr: Attribution {
                    netns: Some(NS),
                    netns_name: Some("web\u{34f}".into()),
                    ..Default::default()
                },
            },
            count: 1,
        }],
        total: 1,
        ..Default::default()
    };
    let k = crate::ledger::view(&crate::model::KernelReading::default(), &snap, None);
    assert_eq!(k.names[&NS], "web\\u{34f}");
}

#[test]
fn reads_this_machines_counters() {
    // /proc/net is always there; entering the initial namespace needs CAP_SYS_ADMIN, which
    // unit tests may not have, so only a clean result or a clear error is required.
    let mut ns = super::netns::Namespaces::new(crate::ledger::layers::is_kept)
        .expect("the initial namespace");
    ns.refresh(&[]);
    let r = ns.read();
    let (read, errors) = (r.counters, r.errors);
    match read.get(&ns.initial()) {
        Some(c) => {
            assert!(c.contains_key("Udp:NoPorts"), "{c:?}");
            assert!(c.contains_key("TcpExt:ListenDrops"), "{c:?}");
            // Made from the CPUs' growth, not read whole (at most 1,024 CPUs here).
            assert!(!c.contains_key("Softnet:Dropped"), "{c:?}");
            assert!(c.keys().any(|k| k.starts_with("Dev:lo:")), "{c:?}");
        }
        None => assert!(errors.iter().any(|e| e.contains("entering")), "{errors:?}"),
    }
}

#[test]
fn namespaces_are_found_by_inode_through_proc() {
    // This process's own namespace is always reachable through /proc/self.
    let own = std::fs::metadata("/proc/self/ns/net")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .expect("own netns");
    let mut ns = super::netns::Namespaces::new(crate::ledger::layers::is_kept)
        .expect("the initial namespace");
    ns.refresh(&[own, 1]);
    assert!(ns.inodes().any(|i| i == own));
    assert!(!ns.inodes().any(|i| i == 1), "no namespace has inode 1");
}

#[test]
fn gone_namespaces_keep_their_growth_or_are_forgotten() {
    use super::{KernelCounters, netns::Reading};
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading = |pairs: &[(u64, u64)], first: &[u64]| Reading {
        counters: pairs
            .iter()
            .map(|(ns, v)| (*ns, counters(&[("Udp:NoPorts", *v)])))
            .collect(),
        first: first.iter().copied().collect(),
        ..Reading::default()
    };
    let tracked = |v: &[u64]| -> BTreeSet<u64> { v.iter().copied().collect() };
    // Two namespaces found and read: their baselines.
    k.fold(reading(&[(1, 5), (2, 7)], &[1, 2]), &tracked(&[1, 2]));
    // 1 grows; 2 does not; then both are gone.
    k.fold(reading(&[(1, 9), (2, 7)], &[]), &tracked(&[1, 2]));
    k.fold(reading(&[], &[]), &tracked(&[]));
    let d = deltas(&k.baseline, &k.latest);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].netns, d[0].delta),
        (1, 4),
        "a gone namespace keeps its growth"
    );
    assert!(
        !k.latest.contains_key(&2) && !k.baseline.contains_key(&2),
        "forgotten"
    );
    // Inode 1 comes back as a new namespace: its first reading is its baseline.
    k.fold(reading(&[(1, 2)], &[1]), &tracked(&[1]));
    assert!(deltas(&k.baseline, &k.latest).is_empty());
    // A reading that waited for a later poll is said so.
    let mut r = reading(&[], &[]);
    r.deferred = 3;
    k.fold(r, &tracked(&[1]));
    assert!(
        k.notes
            .concat()
            .iter()
            .any(|e| e.starts_with("3 namespaces not read")),
        "{:?}",
        k.notes
    );
}

/// A namespace not read this time (deferred, or failed) keeps where its programs were last
/// seen attached, so their counts keep their name; a namespace read again replaces it, and
/// one that is gone forgets it.
#[test]
fn a_namespace_not_read_keeps_its_programs_places() {
    use super::{
        KernelCounters,
        hooks::{Hook, Hooked},
        netns::Reading,
    };
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let hooked = |device: &str, prog: u32| Hooked {
        device: device.into(),
        hook: Hook::XdpDrv,
        prog,
        ethernet: true,
        filter: None,
    };
    let reading = |read: &[(u64, Vec<Hooked>)]| {
        let mut r = Reading::default();
        for (ns, h) in read {
            r.counters.insert(*ns, counters(&[("Udp:NoPorts", 1)]));
            r.hooks.insert(*ns, h.clone());
        }
        r
    };
    let places = |k: &KernelCounters| -> Vec<(u64, String, u32)> {
        (k.hooks().iter())
            .flat_map(|(ns, l)| l.iter().map(|h| (*ns, h.device.clone(), h.prog)))
            .collect()
    };
    let tracked: BTreeSet<u64> = [1, 2].into();
    k.fold(
        reading(&[(1, vec![hooked("a", 10)]), (2, vec![hooked("b", 20)])]),
        &tracked,
    );
    // Namespace 2 deferred: its program is still where it was.
    let mut r = reading(&[(1, vec![hooked("a", 10)])]);
    r.deferred = 1;
    k.fold(r, &tracked);
    assert_eq!(
        places(&k),
        [(1, "a".to_string(), 10), (2, "b".to_string(), 20)]
    );
    assert!(
        k.programs_read(1) && !k.programs_read(2),
        "namespace 2 not read"
    );
    // Read again, with its program gone: replaced.
    k.fold(
        reading(&[(1, vec![hooked("a", 10)]), (2, vec![])]),
        &tracked,
    );
    assert_eq!(places(&k), [(1, "a".to_string(), 10)]);
    assert!(k.programs_read(1) && k.programs_read(2), "both read");
    // A note about another namespace (one whose dump was cut short, or that failed) leaves
    // them read whole.
    let mut r = reading(&[(1, vec![hooked("a", 10)]), (2, vec![])]);
    r.counters.insert(3, counters(&[("Udp:NoPorts", 1)]));
    r.errors.push("netns 3: links: dump cut short".into());
    k.fold(r, &[1, 2, 3].into());
    assert!(k.programs_read(1) && k.programs_read(2) && !k.programs_read(3));
    // Namespace 1 deferred, namespace 2's program back; then a reading that failed whole.
    k.fold(reading(&[(2, vec![hooked("b", 20)])]), &tracked);
    let both = [(1, "a".to_string(), 10), (2, "b".to_string(), 20)];
    assert_eq!(places(&k), both);
    k.fold(reading(&[]), &[1].into());
    assert_eq!(places(&k), both, "a failed reading keeps them");
    k.fold(reading(&[(3, vec![])]), &[3].into());
    assert!(places(&k).is_empty(), "gone namespaces forget them");
    assert!(k.programs_read(1), "a gone namespace holds no program");
}

#[test]
fn a_reading_holds_every_counters_growth_packets_included() {
    use super::{KernelCounters, netns::Reading};
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading = |pairs: &[(u64, &str, u64)], first: &[u64]| {
        let mut r = Reading {
            first: first.iter().copied().collect(),
            ..Reading::default()
        };
        for &(ns, name, v) in pairs {
            r.counters.entry(ns).or_default().insert(name.into(), v);
        }
        r
    };
    let tracked: BTreeSet<u64> = [1, 2].into();
    k.fold(
        reading(
            &[
                (1, "Ip:InReceives", 100),
                (1, "Udp:NoPorts", 3),
                (2, "Ip6:InReceives", 7),
            ],
            &[1, 2],
        ),
        &tracked,
    );
    k.fold(
        reading(
            &[
                (1, "Ip:InReceives", 150),
                (1, "Udp:NoPorts", 3),
                (2, "Ip6:InReceives", 17),
            ],
            &[],
        ),
        &tracked,
    );
    let r = k.reading();
    assert_eq!(r.netns_packets(1), 50);
    assert_eq!(r.netns_packets(2), 10);
    assert_eq!(r.packets(), 60);
    assert_eq!(
        r.growth(1, "Udp:NoPorts"),
        0,
        "what did not grow is left out"
    );
    assert_eq!(r.initial_netns, k.initial_netns());
}

#[test]
fn every_mapped_counter_is_found_by_its_own_name() {
    for m in map::COUNTERS {
        let found = map::lookup(m.counter).map(|f| f.counter);
        assert_eq!(found, Some(m.counter), "names must be unique and found");
    }
}

/// A reading of namespace [`NS`] alone: its counters, its devices if its link dump gave them,
/// and whether it is the namespace's first.
fn one_namespace(
    pairs: &[(&str, u64)],
    devices: Option<&[(u32, &str)]>,
    first: bool,
) -> super::netns::Reading {
    let mut r = super::netns::Reading::default();
    r.counters.insert(NS, counters(pairs));
    if let Some(d) = devices {
        let d = d.iter().map(|(i, n)| (*i, n.to_string())).collect();
        r.devices.insert(NS, d);
    }
    if first {
        r.first.insert(NS);
    }
    r
}

/// The growth of each counter of [`NS`] in `k`'s reading.
fn growth_of(k: &super::KernelCounters) -> Vec<(String, u64)> {
    let r = k.reading();
    (r.netns.get(&NS).into_iter().flatten())
        .map(|(n, v)| (n.to_string(), *v))
        .collect()
}

/// A device renamed between two readings keeps counting its growth under its new name, never
/// its whole history; a new device under a deleted one's name counts from zero.
#[test]
fn a_renamed_device_counts_its_growth_under_its_new_name() {
    use super::KernelCounters;
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading = |pairs: &[(&str, u64)], devices: &[(u32, &str)], first: bool| {
        one_namespace(pairs, Some(devices), first)
    };
    let tracked: BTreeSet<u64> = [NS].into();
    let growth = growth_of;
    // 900 drops before the window; 5 more, then renamed (veth7 → eth0), then 3 more.
    k.fold(
        reading(&[("Link:veth7:rx_dropped", 900)], &[(7, "veth7")], true),
        &tracked,
    );
    k.fold(
        reading(&[("Link:veth7:rx_dropped", 905)], &[(7, "veth7")], false),
        &tracked,
    );
    assert_eq!(growth(&k), [("Link:veth7:rx_dropped".to_string(), 5)]);
    k.fold(
        reading(&[("Link:eth0:rx_dropped", 908)], &[(7, "eth0")], false),
        &tracked,
    );
    assert_eq!(growth(&k), [("Link:eth0:rx_dropped".to_string(), 8)]);
    // eth0 deleted and made again (index 9): the new one's 2 drops are all the window's.
    k.fold(
        reading(&[("Link:eth0:rx_dropped", 2)], &[(9, "eth0")], false),
        &tracked,
    );
    assert_eq!(growth(&k), [("Link:eth0:rx_dropped".to_string(), 2)]);
}

/// A qdisc deleted and made again (its counter missing from one reading, then back from zero)
/// keeps the drops it counted before in the window, and adds those of the new one.
#[test]
fn a_counter_missing_then_reset_keeps_the_windows_growth() {
    use super::KernelCounters;
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading =
        |pairs: &[(&str, u64)], first: bool| one_namespace(pairs, Some(&[(3, "va")]), first);
    let tracked: BTreeSet<u64> = [NS].into();
    let growth = |k: &KernelCounters| k.reading().growth(NS, "Qdisc:va:tbf 1::drops");
    let q = "Qdisc:va:tbf 1::drops";
    k.fold(reading(&[(q, 40), ("Udp:NoPorts", 1)], true), &tracked);
    k.fold(reading(&[(q, 140), ("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 100);
    // Deleted: missing from the reading, its growth kept.
    k.fold(reading(&[("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 100);
    // Made again: 30 drops of its own, then 5 more.
    k.fold(reading(&[(q, 30), ("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 130);
    k.fold(reading(&[(q, 35), ("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 135);
    // Reset between two readings, without a reading in between.
    k.fold(reading(&[(q, 2), ("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 137);
    // The namespace read again as new (its inode reused): from its own baseline.
    k.fold(reading(&[(q, 9)], true), &tracked);
    assert_eq!(growth(&k), 0);
}

/// A reading whose link dump failed (no device list) while a device was renamed: the new
/// name's counters (from `/proc/net/dev`) wait for a reading that knows it, the old name's are
/// kept, and the next reading moves them under the new name, its window's growth only.
#[test]
fn a_rename_in_a_reading_without_a_device_list_shows_no_history() {
    use super::KernelCounters;
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading = one_namespace;
    let tracked: BTreeSet<u64> = [NS].into();
    let growth = growth_of;
    k.fold(
        reading(&[("Dev:veth7:RxDrop", 900)], Some(&[(7, "veth7")]), true),
        &tracked,
    );
    k.fold(
        reading(&[("Dev:veth7:RxDrop", 905)], Some(&[(7, "veth7")]), false),
        &tracked,
    );
    // Renamed, and the link dump failed: /proc/net/dev alone names it eth0.
    k.fold(reading(&[("Dev:eth0:RxDrop", 907)], None, false), &tracked);
    assert_eq!(growth(&k), [("Dev:veth7:RxDrop".to_string(), 5)]);
    k.fold(
        reading(&[("Dev:eth0:RxDrop", 908)], Some(&[(7, "eth0")]), false),
        &tracked,
    );
    assert_eq!(growth(&k), [("Dev:eth0:RxDrop".to_string(), 8)]);
}

/// A deleted device's kept growth stays through a reading without a device list (its link
/// dump failed) and through the first reading with one after readings without.
#[test]
fn a_deleted_devices_growth_stays_through_readings_without_a_device_list() {
    use super::KernelCounters;
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading = one_namespace;
    let tracked: BTreeSet<u64> = [NS].into();
    let a = "Link:a:rx_dropped";
    let b = "Link:b:rx_dropped";
    let both: &[(u32, &str)] = &[(3, "a"), (4, "b")];
    k.fold(reading(&[(a, 100), (b, 1)], Some(both), true), &tracked);
    k.fold(reading(&[(a, 110), (b, 1)], Some(both), false), &tracked);
    // a deleted: its 10 kept.
    k.fold(reading(&[(b, 2)], Some(&[(4, "b")]), false), &tracked);
    let grown = |k: &KernelCounters| (k.reading().growth(NS, a), k.reading().growth(NS, b));
    assert_eq!(grown(&k), (10, 1));
    // The link dump fails twice: the last list stands in, a's 10 stay.
    k.fold(reading(&[(b, 3)], None, false), &tracked);
    assert_eq!(grown(&k), (10, 2));
    k.fold(reading(&[(b, 3)], None, false), &tracked);
    assert_eq!(grown(&k), (10, 2));
    k.fold(reading(&[(b, 4)], Some(&[(4, "b")]), false), &tracked);
    assert_eq!(grown(&k), (10, 3));

    // A namespace read as new (its inode used again) whose dumps have not answered yet: the
    // first list it gets keeps what was kept, and the earlier namespace's list is not its.
    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    k.fold(reading(&[(a, 1)], Some(&[(3, "a")]), true), &tracked);
    k.fold(reading(&[(a, 50), (b, 7)], None, true), &tracked);
    k.fold(reading(&[(a, 60), (b, 9)], None, false), &tracked);
    assert_eq!(grown(&k), (10, 2));
    // Its first list: a and b swapped indexes with the earlier namespace's a; nothing
    // invented, nothing lost.
    k.fold(
        reading(&[(a, 61), (b, 9)], Some(&[(5, "a"), (3, "b")]), false),
        &tracked,
    );
    assert_eq!(grown(&k), (11, 2));
    // b deleted: its 2 kept, with or without a list after.
    k.fold(reading(&[(a, 62)], Some(&[(5, "a")]), false), &tracked);
    assert_eq!(grown(&k), (12, 2));
    k.fold(reading(&[(a, 63)], None, false), &tracked);
    assert_eq!(grown(&k), (13, 2));
}

/// A qdisc that dropped before the window and not in it, deleted and made again: the new
/// one's drops are the window's from its first, though it has fewer than the old one had.
#[test]
fn a_qdisc_made_again_after_a_reading_without_it_counts_from_zero() {
    use super::KernelCounters;
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading =
        |pairs: &[(&str, u64)], first: bool| one_namespace(pairs, Some(&[(3, "va")]), first);
    let tracked: BTreeSet<u64> = [NS].into();
    let q = "Qdisc:va:pfifo 1::drops";
    let growth = |k: &KernelCounters| k.reading().growth(NS, q);
    k.fold(reading(&[(q, 1000), ("Udp:NoPorts", 1)], true), &tracked);
    k.fold(reading(&[(q, 1000), ("Udp:NoPorts", 1)], false), &tracked);
    // Deleted (nothing to keep: it did not grow), then made again and 40 drops.
    k.fold(reading(&[("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 0);
    k.fold(reading(&[(q, 40), ("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 40);
    k.fold(reading(&[(q, 45), ("Udp:NoPorts", 1)], false), &tracked);
    assert_eq!(growth(&k), 45);
}

/// `Softnet:Dropped` is the CPUs' growth summed: a CPU whose 32-bit column wraps, or that goes
/// offline and comes back, neither loses nor invents backlog drops.
#[test]
fn the_machines_backlog_drops_are_the_cpus_growth() {
    use super::KernelCounters;
    use std::collections::BTreeSet;

    let Ok(mut k) = KernelCounters::start(crate::ledger::layers::is_kept) else {
        panic!("the initial namespace");
    };
    let reading = |pairs: &[(&str, u64)], first: bool| one_namespace(pairs, None, first);
    let tracked: BTreeSet<u64> = [NS].into();
    let dropped = |k: &KernelCounters| k.reading().growth(NS, "Softnet:Dropped");
    let top = u64::from(u32::MAX);
    k.fold(
        reading(
            &[
                ("Softnet:cpu0:dropped", 100),
                ("Softnet:cpu1:dropped", top - 9),
            ],
            true,
        ),
        &tracked,
    );
    k.fold(
        reading(
            &[
                ("Softnet:cpu0:dropped", 105),
                ("Softnet:cpu1:dropped", top - 4),
            ],
            false,
        ),
        &tracked,
    );
    assert_eq!(dropped(&k), 10);
    // cpu1 wraps: 4 to the top, 1 for the wrap, 3 after it.
    k.fold(
        reading(
            &[("Softnet:cpu0:dropped", 105), ("Softnet:cpu1:dropped", 3)],
            false,
        ),
        &tracked,
    );
    assert_eq!(dropped(&k), 18);
    // cpu0 offline (no line), then back with 2 more.
    k.fold(reading(&[("Softnet:cpu1:dropped", 3)], false), &tracked);
    assert_eq!(dropped(&k), 18);
    k.fold(
        reading(
            &[("Softnet:cpu0:dropped", 107), ("Softnet:cpu1:dropped", 3)],
            false,
        ),
        &tracked,
    );
    assert_eq!(dropped(&k), 20);
}
