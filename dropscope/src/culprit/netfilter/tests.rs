//! The netfilter attribution on made-up readings: what is exact, what is candidates, what is
//! unknown, and why.
use std::sync::Arc;

use super::culprits;
use crate::{
    culprit::{
        Culprit, Who,
        ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict},
    },
    model::{DropCount, DropKey, KernelReading, Reason, Snapshot},
};

const NS: u64 = 4026532000;

fn id(chain: &str) -> ChainId {
    ChainId {
        family: 1,
        table: "t".into(),
        chain: chain.into(),
    }
}

fn rule(handle: u64, grew: Option<u64>) -> Grown {
    Grown {
        rule: Rule {
            id: id("input"),
            handle,
            position: handle as u32,
            verdict: Verdict::Drop,
            packets: grew,
            comment: None,
            exprs: "counter immediate".into(),
        },
        grew,
    }
}

fn window(rules: Vec<Grown>, policy: bool) -> RulesWindow {
    RulesWindow {
        generation: 3,
        chains: vec![Chain {
            id: id("input"),
            hook: Some("input".into()),
            priority: Some(0),
            policy_drop: policy,
        }],
        rules,
        whole: true,
        ..RulesWindow::default()
    }
}

fn key(location: &str) -> DropKey {
    let mut k = DropKey {
        reason: Reason {
            code: 12,
            name: Arc::from("NETFILTER_DROP"),
        },
        location: Arc::from(location),
        attr: Default::default(),
    };
    k.attr.netns = Some(NS);
    k
}

fn snap(rows: &[(&str, u64)], w: Option<RulesWindow>) -> Snapshot {
    let mut r = KernelReading::default();
    if let Some(w) = w {
        r.rules.insert(NS, w);
    }
    Snapshot {
        drops: (rows.iter())
            .map(|(l, n)| DropCount {
                key: key(l),
                count: *n,
            })
            .collect(),
        kernel: Some(Arc::new(r)),
        ..Snapshot::default()
    }
}

fn counted(c: &Culprit) -> Vec<Option<u64>> {
    (c.who().iter())
        .map(|w| match w {
            Who::Rule { counted, .. } => *counted,
            _ => None,
        })
        .collect()
}

#[test]
fn counters_that_account_for_every_drop_are_exact_with_the_split() {
    let s = snap(
        &[("nft_do_chain+0x3e8", 30)],
        Some(window(
            vec![rule(2, Some(20)), rule(3, Some(10)), rule(4, Some(0))],
            true,
        )),
    );
    let c = &culprits(&s)[&key("nft_do_chain+0x3e8")];
    assert_eq!(c.certainty(), "exact", "{c:?}");
    assert_eq!(counted(c), [Some(20), Some(10)]);
}

#[test]
fn the_rules_site_is_learned_from_the_counters_and_the_other_is_the_policy() {
    let s = snap(
        &[("nft_do_chain+0x3e8", 50), ("nft_do_chain+0x5ad", 7)],
        Some(window(vec![rule(2, Some(50))], true)),
    );
    let c = culprits(&s);
    assert_eq!(c[&key("nft_do_chain+0x3e8")].certainty(), "exact");
    let p = &c[&key("nft_do_chain+0x5ad")];
    assert_eq!(p.certainty(), "exact", "{p:?}");
    assert!(matches!(&p.who()[0], Who::Policy { chain, .. } if chain == "input"));
}

#[test]
fn without_counters_nothing_is_exact() {
    let s = snap(
        &[("nft_do_chain+0x3e8", 50), ("nft_do_chain+0x5ad", 7)],
        Some(window(vec![rule(2, None)], true)),
    );
    for c in culprits(&s).values() {
        assert_eq!(c.certainty(), "candidates", "{c:?}");
        assert_eq!(c.who().len(), 2, "the rule and the policy: {c:?}");
    }
}

#[test]
fn a_ruleset_read_in_part_or_changed_never_gives_an_exact_policy() {
    for (whole, changed) in [(false, false), (true, true)] {
        let mut w = window(vec![rule(2, Some(50))], true);
        w.whole = whole;
        w.changed = changed;
        w.notes = vec!["nftables rules: dump cut".into()];
        let s = snap(
            &[("nft_do_chain+0x3e8", 50), ("nft_do_chain+0x5ad", 7)],
            Some(w),
        );
        let p = &culprits(&s)[&key("nft_do_chain+0x5ad")];
        assert_ne!(p.certainty(), "exact", "{p:?}");
        assert!(p.because().contains("ruleset"), "{p:?}");
    }
}

#[test]
fn a_namespace_not_read_or_with_nothing_that_drops_is_unknown_and_says_why() {
    let s = snap(&[("nft_do_chain+0x3e8", 5)], None);
    let c = &culprits(&s)[&key("nft_do_chain+0x3e8")];
    assert_eq!(c.certainty(), "unknown");
    assert!(c.because().contains("not read"), "{c:?}");
    let s = snap(&[("nft_do_chain+0x3e8", 5)], Some(window(vec![], false)));
    let c = &culprits(&s)[&key("nft_do_chain+0x3e8")];
    assert_eq!(c.certainty(), "unknown");
    assert!(c.because().contains("no rule"), "{c:?}");
}

#[test]
fn drops_read_in_nf_hook_slow_are_exact_only_where_counters_account_for_all() {
    let w = window(vec![rule(2, Some(9))], true);
    let s = snap(&[("nf_hook_slow+0x80", 9)], Some(w.clone()));
    assert_eq!(culprits(&s)[&key("nf_hook_slow+0x80")].certainty(), "exact");
    let s = snap(&[("nf_hook_slow+0x80", 12)], Some(w));
    let c = &culprits(&s)[&key("nf_hook_slow+0x80")];
    assert_eq!(c.certainty(), "candidates");
    // What was read (the call site), not a kernel version: Debian's 6.1 drops inside
    // `nft_do_chain` too.
    assert!(
        c.because()
            .contains("at nf_hook_slow, outside nftables' own `nft_do_chain`"),
        "{c:?}"
    );
    assert!(!c.because().contains("6.7"), "{c:?}");
}

#[test]
fn long_lists_are_cut_with_a_count_of_the_rest() {
    let rules = (1..=40).map(|h| rule(h, None)).collect();
    let s = snap(&[("nft_do_chain+0x3e8", 5)], Some(window(rules, false)));
    let c = &culprits(&s)[&key("nft_do_chain+0x3e8")];
    assert_eq!(c.who().len(), crate::culprit::MAX_LISTED);
    assert_eq!(c.who().last(), Some(&Who::More { count: 25 }));
}

#[test]
fn drops_going_on_after_the_reading_still_name_counted_rules_exactly() {
    // The snapshot counted 8 more at the rules' site than the counters had when read, and 3
    // more at the policy's.
    let s = snap(
        &[("nft_do_chain+0x3e8", 58), ("nft_do_chain+0x5ad", 10)],
        Some(window(vec![rule(2, Some(30)), rule(3, Some(20))], true)),
    );
    let c = culprits(&s);
    let rules = &c[&key("nft_do_chain+0x3e8")];
    assert_eq!(rules.certainty(), "exact", "{rules:?}");
    assert_eq!(counted(rules), [Some(30), Some(20)]);
    assert!(rules.because().contains("50 of the 58"), "{rules:?}");
    assert_eq!(c[&key("nft_do_chain+0x5ad")].certainty(), "exact");
    // With a rule without a counter, the site's drops cannot be split: candidates.
    let mut w = window(vec![rule(2, Some(30)), rule(3, Some(20))], true);
    w.rules.push(rule(4, None));
    let s = snap(
        &[("nft_do_chain+0x3e8", 58), ("nft_do_chain+0x5ad", 10)],
        Some(w),
    );
    assert_eq!(
        culprits(&s)[&key("nft_do_chain+0x3e8")].certainty(),
        "candidates"
    );
}

#[test]
fn the_hook_the_stacks_show_narrows_the_candidates() {
    let mut w = window(vec![rule(2, None)], false);
    w.chains.push(Chain {
        id: id("fwd"),
        hook: Some("forward".into()),
        priority: Some(0),
        policy_drop: true,
    });
    let mut s = snap(&[("nft_do_chain+0x3e8", 5)], Some(w));
    let frames: Vec<Arc<str>> = ["ip_rcv+0x1", "ip_local_deliver+0x2", "nf_hook_slow+0x3"]
        .into_iter()
        .map(Arc::from)
        .collect();
    s.stacks.push(crate::model::StackCount {
        key: key("nft_do_chain+0x3e8"),
        frames: frames.into(),
        weight: 5,
        samples: 1,
    });
    assert_eq!(
        super::hook_of(&s, &key("nft_do_chain+0x3e8")),
        Some("input")
    );
    let c = &culprits(&s)[&key("nft_do_chain+0x3e8")];
    // The rule of the input chain (its policy accepts), not the forward chain's policy.
    assert_eq!(c.who().len(), 1, "{c:?}");
    assert!(matches!(&c.who()[0], Who::Rule { handle: 2, .. }), "{c:?}");
    assert!(c.because().contains("input hook"), "{c:?}");
}

#[test]
fn drops_after_the_counters_reading_keep_a_counted_rule_among_the_candidates() {
    // The counters were read before the drops came: the rule had not grown yet.
    let s = snap(
        &[("nft_do_chain+0x3e8", 5)],
        Some(window(vec![rule(2, Some(0))], false)),
    );
    let c = &culprits(&s)[&key("nft_do_chain+0x3e8")];
    assert_eq!(c.certainty(), "candidates", "{c:?}");
    assert_eq!(counted(c), [Some(0)]);
}

/// Some builds drop a rule's verdict and a chain's policy at one call site of nft_do_chain
/// (Debian's arm64 6.1: 600 drops at `nft_do_chain+0x3b8`, 300 of them the counted rule's,
/// 100 the policy's): with no second site in the window, the policy stays a candidate.
#[test]
fn one_call_site_of_rules_and_policy_keeps_the_policy_a_candidate() {
    for uncounted in [true, false] {
        let mut rules = vec![rule(2, Some(300))];
        if uncounted {
            rules.push(rule(3, None));
        }
        let s = snap(&[("nft_do_chain+0x3b8", 600)], Some(window(rules, true)));
        let c = &culprits(&s)[&key("nft_do_chain+0x3b8")];
        assert_eq!(c.certainty(), "candidates", "{c:?}");
        let who = c.who();
        assert!(
            matches!(who.last(), Some(Who::Policy { chain, .. }) if chain == "input"),
            "{c:?}"
        );
        assert_eq!(counted(c)[0], Some(300), "{c:?}");
        assert_eq!(who.len(), if uncounted { 3 } else { 2 }, "{c:?}");
    }
    // The counters account for every drop there: the policy dropped none.
    let s = snap(
        &[("nft_do_chain+0x3b8", 300)],
        Some(window(vec![rule(2, Some(300))], true)),
    );
    assert_eq!(
        culprits(&s)[&key("nft_do_chain+0x3b8")].certainty(),
        "exact"
    );
}
