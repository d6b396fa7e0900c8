//! Grouping and filtering: nothing lost, the same answer for every dimension a key has, and a
//! clear refusal for a dimension it lacks.
use super::*;
use crate::model::Attribution;

fn count(reason: &str, netns: u64, device: &str, proto: &str, n: u64) -> DropCount {
    DropCount {
        key: DropKey {
            attr: Attribution {
                netns: Some(netns),
                // A cookie of its own per namespace (its identity): merging the namespace
                // away merges the cookie away too.
                netns_cookie: Some(netns + 4096),
                netns_name: Some(format!("ns{netns}").into()),
                ifindex: Some(if device == "lo" { 1 } else { 7 }),
                device: Some(device.into()),
                protocol: Some(proto.into()),
                port: None,
                socket: None,
                culprit: None,
            },
            ..crate::fixtures::key(reason.len() as u32, reason, "f+0x1")
        },
        count: n,
    }
}

fn snap() -> Snapshot {
    let drops = vec![
        count("NO_SOCKET", 1, "lo", "udp", 10),
        count("NO_SOCKET", 2, "lo", "udp", 20),
        count("NO_SOCKET", 2, "veth0", "tcp", 5),
        count("NETFILTER_DROP", 2, "veth0", "udp", 7),
    ];
    let stacks = drops
        .iter()
        .map(|d| StackCount {
            key: d.key.clone(),
            frames: Arc::from(vec![Arc::from("f"), Arc::from(d.key.reason.name.as_ref())]),
            weight: d.count,
            samples: 1,
        })
        .collect();
    Snapshot {
        stacks,
        ..crate::fixtures::snap(0, drops, 3)
    }
}

#[test]
fn regrouping_coarser_merges_and_keeps_every_count() {
    let s = snap();
    let by_ns = regroup(&s, &[Dim::Netns]);
    assert_eq!(by_ns.drops.len(), 2);
    assert!(by_ns.invariant_holds());
    let ns2 = (by_ns.drops.iter())
        .find(|d| d.key.attr.netns == Some(2))
        .expect("ns 2");
    assert_eq!(ns2.count, 32);
    assert_eq!(ns2.key.attr.device, None);
    let by_reason_proto = regroup(&s, &[Dim::Reason, Dim::Protocol]);
    assert_eq!(by_reason_proto.drops.len(), 3);
    assert_eq!(by_reason_proto.keyed_sum(), 42);
    let everything = regroup(&s, &[]);
    assert_eq!(everything.drops.len(), 1);
    assert_eq!(everything.drops[0].count, 42);
    // Stacks merge with their rows: their weights still add up to the rows' counts.
    assert_eq!(everything.stacks.iter().map(|s| s.weight).sum::<u64>(), 42);
}

#[test]
fn a_device_without_its_namespace_is_one_row_per_name() {
    let by_dev = regroup(&snap(), &[Dim::Device]);
    let lo: Vec<_> = (by_dev.drops.iter())
        .filter(|d| d.key.attr.device.as_deref() == Some("lo"))
        .collect();
    assert_eq!(lo.len(), 1, "{by_dev:#?}");
    assert_eq!(lo[0].count, 30);
}

#[test]
fn filters_match_names_numbers_and_reasons() {
    let s = snap();
    let sel = |f: &dyn Fn(&mut Filter)| {
        let mut x = Filter::default();
        f(&mut x);
        let out = apply(&s, &x, &Dim::ALL);
        assert!(out.invariant_holds());
        assert_eq!(
            out.stacks.iter().map(|s| s.weight).sum::<u64>(),
            out.keyed_sum(),
            "a row's stacks are filtered with it"
        );
        out.keyed_sum()
    };
    let ns = |text: &str, inode| NetnsFilter {
        inode,
        text: text.into(),
    };
    assert_eq!(sel(&|x| x.netns = Some(ns("ns2", None))), 32);
    assert_eq!(sel(&|x| x.netns = Some(ns("1", None))), 10);
    assert_eq!(sel(&|x| x.netns = Some(ns("whatever", Some(2)))), 32);
    assert_eq!(sel(&|x| x.device = Some("veth0".into())), 12);
    assert_eq!(sel(&|x| x.protocol = Some(6)), 5);
    assert_eq!(sel(&|x| x.reasons = vec!["netfilter_drop".into()]), 7);
    assert_eq!(
        sel(&|x| x.reasons = vec!["SKB_DROP_REASON_NETFILTER_DROP".into()]),
        7
    );
    assert_eq!(sel(&|x| x.exclude_reasons = vec!["NO_SOCKET".into()]), 7);
    // The total shown is what passes, plus the drops that could not be keyed.
    let lo = Filter {
        device: Some("lo".into()),
        ..Filter::default()
    };
    assert_eq!(apply(&s, &lo, &Dim::ALL).total, 30 + 3);
}

#[test]
fn a_dimension_the_counts_lack_is_refused_not_ignored() {
    let s = regroup(&snap(), &[Dim::Reason, Dim::Location]);
    let port = Filter {
        port: Some(53),
        ..Filter::default()
    };
    let e = check(&s, &port, &[]).expect_err("not counted by port");
    assert_eq!(e.dim, Dim::Port);
    assert!(e.to_string().contains("--port"), "{e}");
    // It names the dimension and the `--by` that counts it: what was counted, and it.
    assert_eq!(
        e.to_string(),
        "--port: port is not counted (these drops are counted by reason,location); count it \
         with `--by reason,location,port`"
    );
    let e = check(&s, &Filter::default(), &[Dim::Netns]).expect_err("not by netns");
    assert!(
        e.to_string().contains("`--by reason,location,netns`"),
        "{e}"
    );
    assert!(
        check(&snap(), &port, &[]).is_err(),
        "ports were not counted"
    );
    let dev = Filter {
        device: Some("lo".into()),
        ..Filter::default()
    };
    assert_eq!(check(&snap(), &dev, &[Dim::Netns, Dim::Device]), Ok(()));
    assert_eq!(check(&Snapshot::default(), &port, &[Dim::Port]), Ok(()));
}

#[test]
fn a_row_covers_its_own_keys_only() {
    let s = snap();
    let a = &s.drops[0].key; // NO_SOCKET ns1 lo
    let b = &s.drops[1].key; // NO_SOCKET ns2 lo
    assert!(covers(a, a));
    assert!(!covers(a, b), "another namespace's drops");
    let by_reason = coarser(a, &[Dim::Reason, Dim::Location]);
    assert!(covers(&by_reason, a) && covers(&by_reason, b));
    let lo = coarser(a, &[Dim::Device]);
    assert!(covers(&lo, b), "lo of every namespace");
    assert!(!covers(&lo, &s.drops[2].key), "not veth0");
    // A key grouped by what it has covers exactly the counts regroup puts in its row.
    for by in [
        &[Dim::Netns][..],
        &[Dim::Reason, Dim::Device],
        &Dim::ALL,
        &[],
    ] {
        for row in regroup(&s, by).drops {
            let covered: u64 = (s.drops.iter())
                .filter(|d| covers(&row.key, &d.key))
                .map(|d| d.count)
                .sum();
            assert_eq!(covered, row.count, "{by:?} {row:?}");
        }
    }
}

/// A program's frames keep its row's key whatever the grouping: its row comes from the kernel's
/// reading as it is, never regrouped here.
#[test]
fn a_programs_samples_keep_its_key_when_regrouped() {
    let counter = "Xdp:vb:xdpdrv:guard#42:drop";
    let prog = crate::model::programs::counter_key(9, counter, 1, None).expect("a key");
    let sample = crate::model::Sample::from_frame(1, 40, &[0u8; 40]);
    let mut s = snap();
    s.samples = vec![
        KeySamples {
            key: prog.clone(),
            packets: vec![sample.clone()],
        },
        KeySamples {
            key: s.drops[0].key.clone(),
            packets: vec![sample],
        },
    ];
    let r = regroup(&s, &[Dim::Reason, Dim::Location]);
    assert_eq!(r.samples.len(), 2, "{:?}", r.samples);
    assert!(r.samples.iter().any(|k| k.key == prog));
    assert!(
        (r.samples.iter())
            .any(|k| k.key.attr.netns.is_none() && k.key.reason.name.as_ref() == "NO_SOCKET"),
        "{:?}",
        r.samples
    );
}

/// IPv6's hop-by-hop options header (next header 0) is named, as /etc/protocols names it, not
/// shown as protocol `0`; `--protocol 0` still finds it, in counts named either way.
#[test]
fn ipv6_hop_by_hop_is_named() {
    assert_eq!(protocol_name(0), "hopopt");
    assert_eq!(protocol_number("hopopt"), Some(0));
    assert_eq!(protocol_number("HOPOPT"), Some(0));
    assert_eq!(protocol_number("0"), Some(0));
    let f = Filter {
        protocol: Some(0),
        ..Filter::default()
    };
    let mut k = snap().drops[0].key.clone();
    for shown in ["hopopt", "0"] {
        k.attr.protocol = Some(shown.into());
        assert!(f.matches(&k), "{shown}");
    }
    k.attr.protocol = Some("udp".into());
    assert!(!f.matches(&k));
}
