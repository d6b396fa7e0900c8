//! Tests of the reason guide: it parses, it covers every reason of the running kernel, and
//! unknown names get the generic text.
use std::{collections::HashSet, path::Path};

use super::*;
use crate::probe::reasons::ReasonTable;
use crate::suggest::{closest, did_you_mean};

#[test]
fn the_builtin_guide_parses_and_has_no_duplicates() {
    let g = Guide::parse(GUIDE_TOML).expect("guide.toml parses");
    let mut seen = HashSet::new();
    for e in g.reasons().iter().chain(g.families()) {
        assert!(seen.insert(e.name.as_str()), "{} twice", e.name);
        assert!(!e.summary.trim().is_empty(), "{} has no summary", e.name);
        assert!(!e.text.trim().is_empty(), "{} has no text", e.name);
        assert!(
            !e.summary.contains('\n') && !e.text.contains('\n'),
            "{}: summary and text are one line / one paragraph",
            e.name
        );
    }
    assert!(g.reasons().len() > 100);
}

#[test]
fn every_reason_of_the_running_kernel_has_an_entry() {
    // The machines this project supports have BTF; see the README's requirements.
    let table =
        ReasonTable::from_btf_file(Path::new("/sys/kernel/btf/vmlinux")).expect("BTF reasons");
    let g = Guide::builtin();
    let missing: Vec<&str> = table
        .iter()
        .map(|(_, n)| n)
        .filter(|n| g.explain(n).found == Match::Generic)
        .collect();
    assert!(missing.is_empty(), "no guide entry for {missing:?}");
}

#[test]
fn names_are_found_with_or_without_the_prefix() {
    let g = Guide::builtin();
    let a = g.explain("NO_SOCKET");
    let b = g.explain("SKB_DROP_REASON_NO_SOCKET");
    let c = g.explain("no_socket");
    assert_eq!(a.found, Match::Exact);
    assert_eq!(
        a,
        Explanation {
            name: a.name.clone(),
            ..b
        }
    );
    assert_eq!(c.name, "NO_SOCKET");
    assert!(g.summary("SOCKET_RCVBUFF").contains("receive buffer"));
}

#[test]
fn subsystem_names_fall_back_to_their_family() {
    let g = Guide::builtin();
    let e = g.explain("RX_DROP_U_MIC_FAIL");
    assert_eq!(e.found, Match::Family);
    assert!(e.summary.contains("mac80211"));
    assert_eq!(g.explain("OVS_DROP_METER").found, Match::Exact);
    assert_eq!(g.explain("OVS_DROP_SOMETHING_NEW").found, Match::Family);
}

#[test]
fn unknown_names_get_a_generic_text_that_says_so() {
    let g = Guide::builtin();
    let e = g.explain("BRAND_NEW_REASON");
    assert_eq!(e.found, Match::Generic);
    assert!(
        e.text.contains("no entry for BRAND_NEW_REASON"),
        "{}",
        e.text
    );
    let sub = g.explain(&format!("UNKNOWN({})", 3 << 16 | 5));
    assert!(sub.text.contains("subsystem 3"), "{}", sub.text);
    let plain = g.explain("UNKNOWN(999)");
    assert!(plain.text.contains("does not name"), "{}", plain.text);
}

#[test]
fn render_prints_the_whole_entry() {
    let g = Guide::builtin();
    let text = render(&g.explain("TCP_LISTEN_OVERFLOW"), &["TcpExt:ListenDrops"]);
    assert!(text.starts_with("TCP_LISTEN_OVERFLOW: "), "{text}");
    assert!(text.contains("What to check:"), "{text}");
    assert!(text.contains("somaxconn"), "{text}");
    assert!(text.contains("TcpExt:ListenDrops"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
}

#[test]
fn wrap_breaks_at_word_boundaries() {
    assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc");
    assert_eq!(
        wrap("averyveryverylongword x", 5),
        "averyveryverylongword\nx"
    );
    assert_eq!(wrap("", 5), "");
}

#[test]
fn unknown_names_get_the_closest_known_ones() {
    let names: Vec<&str> = Guide::builtin()
        .reasons()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    let first = |n: &str| closest(n, names.iter().copied()).first().copied();
    assert_eq!(first("NO_SOCKT"), Some("NO_SOCKET"));
    assert_eq!(first("no_sokcet"), Some("NO_SOCKET"));
    assert_eq!(first("SKB_DROP_REASON_NO_SOKET"), Some("NO_SOCKET"));
    assert_eq!(first("SOCKET_RCVBUF"), Some("SOCKET_RCVBUFF"));
    assert_eq!(first("RCVBUFF"), Some("SOCKET_RCVBUFF"));
    assert!(closest("NO_SOCKET", names.iter().copied()).len() <= 3);
    assert!(
        !closest("NO_SOCKET", names.iter().copied()).contains(&"NO_SOCKET"),
        "a known name is not its own suggestion"
    );
    assert!(closest("QWERTYZ", names.iter().copied()).is_empty());
    let hint = did_you_mean("NO_SOCKT", names.iter().copied());
    assert!(hint.starts_with("; did you mean NO_SOCKET"), "{hint}");
    assert_eq!(did_you_mean("QWERTYZ", names.iter().copied()), "");
    assert_eq!(did_you_mean("A", ["AB"]), "; did you mean AB?");
    assert_eq!(
        did_you_mean("ABC", ["ABCD", "ABCE"]),
        "; did you mean ABCD or ABCE?"
    );
}

#[test]
fn every_layer_counter_has_an_entry_with_the_command_that_shows_it() {
    let g = Guide::builtin();
    for key in crate::ledger::layers::guide_keys() {
        let e = g
            .counter(key)
            .unwrap_or_else(|| panic!("no guide entry for {key}"));
        assert!(!e.summary.contains('\n') && !e.text.contains('\n'), "{key}");
        assert!(
            e.check.iter().any(|c| c.contains('`')),
            "{key}: no command to run in {:?}",
            e.check
        );
    }
    assert_eq!(
        g.counters().len(),
        crate::ledger::layers::guide_keys().count()
    );
    let e = g
        .counter("Qdisc:eth0:fq_codel 0: parent :1:drops")
        .expect("by name");
    assert_eq!(e.name, "Qdisc:*:drops");
    assert!(e.check.iter().any(|c| c.contains("tc -s qdisc")));
    let e = g.counter("Softnet:cpu3:dropped").expect("softnet");
    assert!(e.check.iter().any(|c| c.contains("netdev_max_backlog")));
    let e = g.counter("Link:eth0:rx_missed_errors").expect("link");
    assert!(e.check.iter().any(|c| c.contains("ethtool")));
    assert!(g.counter("NO_SOCKET").is_none());
    let text = render_counter("Link:eth0:rx_missed_errors", e);
    assert!(
        text.starts_with("Link:eth0:rx_missed_errors: frames the NIC dropped"),
        "{text}"
    );
    assert!(
        text.contains("(the guide's entry for Link:*:rx_missed_errors)"),
        "{text}"
    );
}

#[test]
fn every_kernel_counter_the_ledger_prints_is_explained() {
    for m in crate::ledger::map::COUNTERS {
        let name = m.counter.replace('*', "eth0");
        let found = crate::ledger::map::lookup(&name)
            .unwrap_or_else(|| panic!("{name} is printed but not found"));
        let text = render_kernel_counter(&name, found);
        assert!(
            text.starts_with(&format!("{name}: a kernel counter")),
            "{text}"
        );
        assert!(
            text.contains(m.source.split(' ').next().unwrap_or_default()),
            "{text}"
        );
        for r in m.reasons {
            let reason = crate::ledger::map::reason_name(r);
            assert!(
                text.contains(&format!("\n{reason}: ")),
                "{reason} not explained: {text}"
            );
        }
        if m.reasons.is_empty() {
            assert!(text.contains("unseen"), "{text}");
        }
    }
}

#[test]
fn a_counter_only_rows_reason_is_explained_by_its_counter() {
    let g = Guide::builtin();
    let e = g.explain("TcpExt:ListenDrops");
    assert_eq!(
        (e.found, e.name.as_str()),
        (Match::Exact, "TcpExt:ListenDrops")
    );
    assert!(e.summary.contains("counter only"), "{e:?}");
    assert!(e.text.contains("tcp_listendrop"), "{e:?}");
    // The checks of the same packets' reason (TCP_LISTEN_OVERFLOW).
    assert!(e.check.iter().any(|c| c.contains("ss -lnt")), "{e:?}");
    // A counter of packets consumed, not dropped: no reason, no checks to borrow.
    let e = g.explain("TcpExt:TCPReqQFullDrop");
    assert!(
        e.text.contains("consume_skb") && e.check.is_empty(),
        "{e:?}"
    );
    assert_eq!(
        g.hint("TcpExt:ListenDrops"),
        g.explain("TcpExt:ListenDrops").text
    );
}
