//! Who dropped it, all at once: in namespaces of the test's own, at the same time, an nft rule
//! with a counter dropping, an nft chain whose policy drops, an iptables rule (nft backend) with
//! a comment, a tc program shooting packets on a veth, and a UDP socket with a tiny receive
//! buffer that never reads. Every row of them, in `report` (text and JSON) and in `serve`'s
//! `culprit` label, says who dropped it (or which candidates), with the counts the kernel's
//! own tools show (nft counters, iptables-save -c, the namespace's Udp:RcvbufErrors), and the
//! TUI's `e` panel says what to change. Needs root, nft, iptables, tc and tmux.
mod common;

use std::time::{Duration, Instant};

use dropscope_tests::{
    Counting, Netns,
    fixture::{self, Bpffs, Kind, TC_ACT_SHOT},
    holder::{Holder, rcvbuf_errors},
    root_test,
    rules::{handle_of, iptables_drop, iptables_packets, nft, nft_packets},
    serve::{self, Serve},
    tmux::Tmux,
};
use serde_json::Value;

/// The one row of `reason` in namespace `ns` of a JSON report.
fn row<'a>(report: &'a Value, reason: &str, ns: &Netns) -> &'a Value {
    let rows: Vec<&Value> = (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["reason"] == reason && d["netns_name"] == ns.name.as_str())
        .collect();
    assert_eq!(rows.len(), 1, "{reason} in {}: {report:#}", ns.name);
    rows[0]
}

/// The `dropscope_drops_total` series of `reason` in namespace `ns`, once one has a culprit
/// label that `ok` accepts (a reading of the kernel's view after the drops): its labels and
/// value.
fn series(port: u16, reason: &str, ns: &Netns, ok: impl Fn(&str) -> bool) -> (String, u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _, body) = serve::get(port, "/metrics", "text/plain");
        let found = (status == 200)
            .then(|| {
                (body.lines())
                    .filter(|l| l.starts_with("dropscope_drops_total{"))
                    .filter(|l| l.contains(&format!("reason=\"{reason}\"")))
                    .filter(|l| l.contains(&format!("netns_name=\"{}\"", ns.name)))
                    .find_map(|l| {
                        let (labels, v) = l.rsplit_once(' ')?;
                        Some((labels.to_string(), v.parse::<u64>().ok()?))
                    })
            })
            .flatten();
        match found {
            Some((l, n)) if ok(&l) => return (l, n),
            _ if Instant::now() > deadline => panic!("{reason}: no culprit label: {found:?}"),
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

#[test]
fn every_drop_says_who_dropped_it_and_what_to_change_all_at_once() {
    let _serial = root_test();
    let (a, b, c) = (
        Netns::new("who-a"),
        Netns::new("who-b"),
        Netns::new("who-c"),
    );
    let (_va, vb) = dropscope_tests::veth_pair(&a, &b, "10.87.0");
    // b: an nft rule with a counter, an iptables rule with a comment, a tc program on vb.
    nft(
        &b,
        "table inet dswho { chain input { type filter hook input priority 0;
           udp dport 5021 counter drop comment \"who-nft\"\n }\n}",
    );
    iptables_drop(&b, 6021, "who-ipt");
    let fs = Bpffs::mount();
    let shoot = fixture::load(Kind::Tc, "ds_who_all", 7121, TC_ACT_SHOT, true).expect("load");
    let prog = fixture::prog_id(&shoot).expect("program id");
    dropscope_tests::tc_ingress(&b, &vb, &fs.pin(&shoot, "who_all"));
    // c: a chain whose policy drops.
    nft(
        &c,
        "table ip dswhop { chain gate { type filter hook input priority 10; policy drop; }\n}",
    );

    let json = Counting::start(&["report", "--format", "json"]);
    let text = Counting::start(&["report"]);
    let s = Serve::start(&[]);
    let tui = Tmux::start(
        "who-all",
        &format!("--netns {} --reason SOCKET_RCVBUFF", b.name),
    );
    tui.wait_for("tp_btf/kfree_skb");

    a.traffic(&["udp-to", "10.87.0.2", "7121", "250"]);
    b.traffic(&["udp", "5021", "321"]);
    b.traffic(&["udp", "6021", "77"]);
    c.traffic(&["udp", "5031", "100"]);
    let mut holder = Holder::start(&b, 30, 0);
    let dropped = holder.dropped();
    assert!(dropped > 0, "a socket of buffer {} took all", holder.rcvbuf);
    let pid = holder.child.id();
    let process = format!("traffic[{pid}]");

    // The TUI: `e` on the socket's row says who and what to change.
    tui.wait_for("SOCKET_RCVBUFF");
    // The WHO cell (cut on this 100-column screen) names it once its holders are found.
    tui.wait_for("traffic[");
    tui.keys("e");
    let panel = tui.wait_for("to change:");
    assert!(panel.contains("who: exact"), "{panel}");
    assert!(
        panel.contains(&format!("to change: {process} reads udp")),
        "{panel}"
    );

    // serve: each series names its culprit, with its count.
    let (l, n) = series(s.port, "NETFILTER_DROP", &b, |l| {
        l.contains("culprit=\"rule ") && !l.contains("culprit=\"maybe")
    });
    assert_eq!(n, 321 + 77, "{l}");
    let (l, n) = series(s.port, "NETFILTER_DROP", &c, |l| l.contains("culprit="));
    assert!(l.contains("policy dswhop gate"), "{l}");
    assert_eq!(n, 100, "{l}");
    let (l, n) = series(s.port, "TC_INGRESS", &b, |l| l.contains("culprit="));
    assert!(l.contains(&format!("prog ds_who_all#{prog}")), "{l}");
    assert_eq!(n, 250, "{l}");
    let (l, n) = series(s.port, "SOCKET_RCVBUFF", &b, |l| l.contains("culprit="));
    assert!(
        l.contains(&format!(
            "culprit=\"{process} udp 127.0.0.1:{}",
            holder.port
        )),
        "{l}"
    );
    assert_eq!(n, dropped, "{l}");
    drop(s);

    let report: Value = serde_json::from_str(&json.interrupt()).expect("JSON report");
    let text = text.interrupt();
    drop(tui);

    // The kernel's own counts.
    let nft_handle = handle_of(&b, "inet", "dswho", "input", "who-nft");
    assert_eq!(nft_packets(&b, "inet", "dswho", "input", nft_handle), 321);
    assert_eq!(iptables_packets(&b, "who-ipt"), 77);
    assert_eq!(rcvbuf_errors(&b), dropped, "Udp:RcvbufErrors");

    // Rules: one row, exact, each rule with its counter's count.
    let r = row(&report, "NETFILTER_DROP", &b);
    assert_eq!(r["count"], 321 + 77, "{r:#}");
    assert_eq!(r["culprit"]["certainty"], "exact", "{r:#}");
    let who = r["culprit"]["who"].as_array().expect("who");
    let rule = |comment: &str| {
        (who.iter())
            .find(|w| w["comment"] == comment)
            .unwrap_or_else(|| panic!("no rule {comment}: {r:#}"))
    };
    assert_eq!(rule("who-nft")["counted"], 321, "{r:#}");
    assert_eq!(rule("who-nft")["handle"], nft_handle, "{r:#}");
    assert_eq!(rule("who-ipt")["counted"], 77, "{r:#}");
    assert_eq!(rule("who-ipt")["chain"], "INPUT", "{r:#}");
    // The policy: the only thing there that drops (nothing counts a policy's drops).
    let r = row(&report, "NETFILTER_DROP", &c);
    assert_eq!(r["count"], 100, "{r:#}");
    assert_ne!(r["culprit"]["certainty"], "unknown", "{r:#}");
    assert_eq!(r["culprit"]["who"][0]["kind"], "policy", "{r:#}");
    assert_eq!(r["culprit"]["who"][0]["chain"], "gate", "{r:#}");
    // The tc program, with its filter's priority and handle (exact where its verdicts are
    // counted; this kind of host refuses fexit: then the one candidate there).
    let r = row(&report, "TC_INGRESS", &b);
    assert_eq!(r["count"], 250, "{r:#}");
    assert_ne!(r["culprit"]["certainty"], "unknown", "{r:#}");
    let p = &r["culprit"]["who"][0];
    assert_eq!(p["program"], format!("prog ds_who_all#{prog}"), "{r:#}");
    assert!(p["pref"].is_u64() && p["handle"].is_string(), "{r:#}");
    // The socket: its process, exactly.
    let r = row(&report, "SOCKET_RCVBUFF", &b);
    assert_eq!(r["count"], dropped, "{r:#}");
    assert_eq!(r["culprit"]["certainty"], "exact", "{r:#}");
    let sock = &r["culprit"]["who"][0];
    assert_eq!(sock["kind"], "socket", "{r:#}");
    assert_eq!(sock["processes"][0], process.as_str(), "{r:#}");
    assert_eq!(sock["local"], format!("127.0.0.1:{}", holder.port), "{r:#}");

    // The text report: each says who, and what to change, in its namespace.
    for want in [
        "rule inet dswho input (input) handle".to_string(),
        "\"who-ipt\"".into(),
        "policy drop of chain ip dswhop gate".into(),
        format!("prog ds_who_all#{prog} at {vb} tc ingress (clsact filter) pref "),
        format!("socket {process} udp 127.0.0.1:{}", holder.port),
        format!(
            "`ip netns exec {} nft delete rule inet dswho input handle {nft_handle}`",
            b.name
        ),
        format!(
            "`ip netns exec {} tc filter del dev {vb} ingress pref ",
            b.name
        ),
        format!("{process} reads udp 127.0.0.1:{} too slowly", holder.port),
    ] {
        assert!(text.contains(&want), "no {want:?} in:\n{text}");
    }
    assert!(
        common::dropscope_programs().is_empty(),
        "programs left attached"
    );
}
