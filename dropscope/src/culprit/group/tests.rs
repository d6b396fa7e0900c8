//! Grouping and filtering by culprit: rows split by who dropped them, merged with their
//! counts summed once per namespace, unknown and unnamed rows grouped apart.
use std::{sync::Arc, time::Duration};

use super::{NONE, UNKNOWN, apply};
use crate::{
    culprit::{
        Culprit,
        ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict},
    },
    model::{
        DropCount, DropKey, KernelReading, Reason, Snapshot,
        group::{Dim, Filter},
    },
};

fn key(reason: &str, location: &str, ns: u64, device: &str) -> DropKey {
    let mut k = DropKey {
        reason: Reason {
            code: 1,
            name: reason.into(),
        },
        location: location.into(),
        attr: Default::default(),
    };
    k.attr.netns = Some(ns);
    k.attr.device = Some(device.into());
    k
}

/// A namespace whose chain `filter INPUT` has one counted drop rule (`handle`) that grew by
/// `grew`.
fn rules(handle: u64, grew: u64) -> RulesWindow {
    let id = ChainId {
        family: 2,
        table: "filter".into(),
        chain: "INPUT".into(),
    };
    RulesWindow {
        chains: vec![Chain {
            id: id.clone(),
            hook: Some("input".into()),
            priority: Some(0),
            policy_drop: false,
        }],
        rules: vec![Grown {
            rule: Rule {
                id,
                handle,
                position: 1,
                verdict: Verdict::Drop,
                packets: Some(grew),
                comment: Some(format!("rule {handle}")),
                exprs: "match counter immediate".into(),
            },
            grew: Some(grew),
        }],
        whole: true,
        ..Default::default()
    }
}

/// Namespaces 1 and 2 with rule handle 4 (70 and 30 drops), namespace 3 with rule handle 9
/// (50), namespace 4 not read (10 netfilter drops), and 25 NO_SOCKET drops nobody is named for.
fn snap() -> Snapshot {
    let mut r = KernelReading {
        attributed: true,
        ..Default::default()
    };
    r.rules.insert(1, rules(4, 70));
    r.rules.insert(2, rules(4, 30));
    r.rules.insert(3, rules(9, 50));
    let nf = |ns, dev, count| DropCount {
        key: key("NETFILTER_DROP", "nft_do_chain+0x3e8", ns, dev),
        count,
    };
    let drops = vec![
        nf(1, "eth0", 70),
        nf(2, "eth0", 30),
        nf(3, "eth0", 50),
        nf(4, "eth0", 10),
        DropCount {
            key: key("NO_SOCKET", "__udp4_lib_rcv+0x1c", 1, "lo"),
            count: 25,
        },
    ];
    Snapshot {
        elapsed: Duration::from_secs(1),
        total: 185 + 5,
        overflow: 5,
        drops,
        kernel: Some(Arc::new(r)),
        ..Default::default()
    }
}

/// Rows of `s` by their culprit's label, with their counts and culprits.
fn rows(s: &Snapshot) -> Vec<(String, u64, Option<Culprit>)> {
    let mut out: Vec<_> = (s.drops.iter())
        .map(|d| {
            let g = d.key.attr.culprit.as_ref().expect("grouped by culprit");
            (g.label.to_string(), d.count, g.culprit.clone())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn counted(c: &Option<Culprit>) -> Option<u64> {
    match c.as_ref()?.who().first()? {
        crate::culprit::Who::Rule { counted, .. } => *counted,
        _ => None,
    }
}

#[test]
fn by_culprit_splits_two_rules_and_merges_one_rule_of_two_namespaces() {
    let s = snap();
    let g = apply(&s, &Filter::default(), &[Dim::Culprit], None);
    let rows = rows(&g);
    let labels: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        labels,
        [
            "exact: rule ip filter INPUT handle 4",
            "exact: rule ip filter INPUT handle 9",
            NONE,
            UNKNOWN
        ],
        "{rows:#?}"
    );
    // Handle 4 of namespaces 1 and 2: one row, its counter's growth summed over them.
    assert_eq!(rows[0].1, 100);
    assert_eq!(counted(&rows[0].2), Some(100));
    assert_eq!(rows[1].1, 50);
    assert_eq!(counted(&rows[1].2), Some(50));
    assert_eq!((rows[2].1, &rows[2].2), (25, &None));
    assert_eq!(rows[3].1, 10);
    assert_eq!(rows[3].2.as_ref().map(Culprit::certainty), Some("unknown"));
    // Nothing lost: keyed + overflow is the total.
    assert_eq!(g.keyed_sum() + g.overflow, g.total);
    assert_eq!(g.total, s.total);
    // What views derive for the grouped rows is what they carry.
    let derived = crate::culprit::culprits(&g);
    assert_eq!(derived.len(), 3, "{derived:#?}");
}

#[test]
fn rows_of_one_namespace_merged_count_its_rules_once() {
    let mut s = snap();
    // Namespace 1's 70 drops on two interfaces: each row names the rule with 70.
    s.drops[0].count = 40;
    s.drops.push(DropCount {
        key: key("NETFILTER_DROP", "nft_do_chain+0x3e8", 1, "eth1"),
        count: 30,
    });
    let g = apply(&s, &Filter::default(), &[Dim::Reason, Dim::Culprit], None);
    let rows = rows(&g);
    let h4 = rows
        .iter()
        .find(|r| r.0.ends_with("handle 4"))
        .expect("row");
    assert_eq!(h4.1, 100, "{rows:#?}");
    assert_eq!(counted(&h4.2), Some(100), "{rows:#?}");
}

#[test]
fn a_finer_grouping_keeps_each_namespace_apart_and_a_pattern_keeps_its_rows() {
    let s = snap();
    let g = apply(&s, &Filter::default(), &[Dim::Netns, Dim::Culprit], None);
    assert_eq!(g.drops.len(), 5);
    // `--culprit 'handle 4'`: only the rows that rule dropped; their total is theirs.
    let only = apply(&s, &Filter::default(), &[Dim::Reason], Some("HANDLE 4"));
    assert_eq!(only.drops.len(), 1, "{:#?}", only.drops);
    assert_eq!(
        (only.drops[0].count, only.total, only.overflow),
        (100, 100, 0)
    );
    assert!(only.drops[0].key.attr.culprit.is_none());
    // With the other filters too.
    let f = Filter {
        netns: Some(crate::model::group::NetnsFilter {
            inode: Some(2),
            text: "2".into(),
        }),
        ..Filter::default()
    };
    let only = apply(&s, &f, &[Dim::Netns, Dim::Culprit], Some("handle 4"));
    assert_eq!(only.drops.len(), 1);
    assert_eq!(only.total, 30);
    // A pattern nothing matches keeps nothing.
    let none = apply(&s, &Filter::default(), &[Dim::Culprit], Some("handle 77"));
    assert_eq!((none.drops.len(), none.total), (0, 0));
}

#[test]
fn the_kernel_counts_what_the_culprit_is_derived_from() {
    assert_eq!(
        Dim::counted(&[Dim::Reason, Dim::Culprit]),
        [
            Dim::Reason,
            Dim::Location,
            Dim::Netns,
            Dim::Device,
            Dim::Socket
        ]
    );
    assert_eq!(
        Dim::counted(&[Dim::Port, Dim::Culprit]),
        [
            Dim::Reason,
            Dim::Location,
            Dim::Netns,
            Dim::Device,
            Dim::Port,
            Dim::Socket
        ]
    );
    assert_eq!(Dim::counted(&[Dim::Reason]), [Dim::Reason]);
}

/// Across two runs a culprit is matched by what stays the same: a program's name and attach
/// point (not its id, new at every load), a socket's holders by name (not their pids); its
/// certainty and a rule's handle still tell two culprits apart.
#[test]
fn stable_labels_leave_out_what_changes_from_run_to_run() {
    use super::stable_label;
    use crate::culprit::Who;
    let prog = |id: u32, pref: u16| Culprit::Candidates {
        who: vec![Who::Program {
            program: format!("prog shoot#{id}"),
            attach: "veth0 tc ingress".into(),
            pref: Some(pref),
            handle: Some("0x1".into()),
        }],
        why: "two programs".into(),
    };
    assert_eq!(
        stable_label(Some(&prog(12, 1))),
        "candidates: prog shoot at veth0 tc ingress"
    );
    assert_eq!(
        stable_label(Some(&prog(12, 1))),
        stable_label(Some(&prog(40, 49152)))
    );
    let socket = |pid: u32| Culprit::Exact {
        who: vec![Who::Socket {
            local: "127.0.0.1:5353".into(),
            protocol: "udp".into(),
            processes: vec![format!("traffic[{pid}]"), "odd[name".into()],
            rcvbuf: Some(2304),
            inode: Some(pid),
            buffer: true,
        }],
        how: "the kernel keyed it".into(),
    };
    assert_eq!(
        stable_label(Some(&socket(4242))),
        "exact: socket traffic,odd[name udp 127.0.0.1:5353"
    );
    assert_eq!(
        stable_label(Some(&socket(4242))),
        stable_label(Some(&socket(77)))
    );
    let g = apply(&snap(), &Filter::default(), &[Dim::Culprit], None);
    let labels: Vec<String> = rows(&super::stable(g)).into_iter().map(|r| r.0).collect();
    assert_eq!(
        labels,
        [
            "exact: rule ip filter INPUT handle 4",
            "exact: rule ip filter INPUT handle 9",
            NONE,
            UNKNOWN
        ]
    );
}
