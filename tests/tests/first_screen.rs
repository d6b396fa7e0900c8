//! From the first screen to the fix: six kinds of drops in three namespaces at once (a closed
//! UDP port, a UDP socket that never reads, a listener that never accepts, an nft rule, an nft
//! chain's policy, a shaper under a burst), and every view agreeing with every other and with
//! the kernel's own tools (`nstat`, `nft`, `tc -s`, the packets sent): the live view (tmux),
//! `report` text and JSON, a recording, and `serve`, started before the namespaces existed.
//! Needs root (run by `cargo xtask test`).
use std::{collections::BTreeMap, process::Command, time::Duration};

use dropscope_tests::{
    Counting, Netns, dropscope_bin, json_output, listen::overflow_accept_queue, root_test,
    serve::Serve, tmux::Tmux, veth_pair,
};
use serde_json::Value;

/// Every view counts by reason and namespace: one row per kind of drop and namespace.
const BY: &str = "reason,netns";

/// A counter of `nstat` (absolute) in `ns`.
fn nstat(ns: &Netns, name: &str) -> u64 {
    let out = ns.exec(&["nstat", "-saz", name]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(name)).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("nstat has no {name}"))
}

/// The packets the first counter of nft table `table` counted.
fn nft_counter(ns: &Netns, table: &str) -> u64 {
    let out = ns.exec(&["nft", "list", "table", "inet", table]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {text}"))
}

/// The drops `tc -s qdisc` shows for the root qdisc of `dev`.
fn tc_root_drops(ns: &Netns, dev: &str) -> u64 {
    let out = ns.exec(&["tc", "-s", "-j", "qdisc", "show", "dev", dev]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("tc -j output");
    (v.as_array().expect("qdiscs").iter())
        .find(|q| q["root"] == true)
        .and_then(|q| q["drops"].as_u64())
        .unwrap_or_else(|| panic!("no root qdisc drops in {v}"))
}

/// A JSON report's counts by (reason, namespace name): the probe's rows and the rows only a
/// kernel counter saw.
fn json_counts(report: &Value) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for list in ["drops", "counter_only"] {
        for r in report[list].as_array().into_iter().flatten() {
            let (Some(reason), Some(ns)) = (r["reason"].as_str(), r["netns_name"].as_str()) else {
                continue;
            };
            *out.entry((reason.to_string(), ns.to_string())).or_default() +=
                r["count"].as_u64().expect("count");
        }
    }
    out
}

/// The count on the line of a text table (or a screen) that names `reason` and `ns`, read as
/// the first whole number after the namespace (separators allowed).
fn text_count(text: &str, reason: &str, ns: &str) -> Option<u64> {
    text.lines()
        .filter(|l| l.split_whitespace().any(|w| w == reason))
        .find_map(|l| {
            let after = l.split_once(ns)?.1;
            // The first number after the namespace: a word of digits (and thousands commas),
            // never a word of a WHO cell such as `+1` or `#2`.
            after
                .split_whitespace()
                .filter(|w| w.chars().all(|c| c.is_ascii_digit() || c == ','))
                .find_map(|w| w.replace(',', "").parse().ok())
        })
}

#[test]
fn six_kinds_of_drops_in_three_namespaces_agree_in_every_view_and_with_the_kernels_tools() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    // Started before the namespaces exist: their names must still reach its labels.
    let serve = Serve::start(&["--by", BY]);
    let app = Netns::create("dsfs-app").expect("namespace");
    let fw = Netns::create("dsfs-fw").expect("namespace");
    let q = Netns::create("dsfs-q").expect("namespace");
    let sink = Netns::create("dsfs-sink").expect("namespace");
    let (vq, _) = veth_pair(&q, &sink, "10.86.0");
    // A shaper that holds about two datagrams: a burst overflows it.
    q.exec(&[
        "tc", "qdisc", "add", "dev", &vq, "root", "handle", "1:", "tbf", "rate", "1mbit", "burst",
        "1600", "limit", "3000",
    ]);
    // A rule that drops port 7777 (with a counter), and a chain whose policy drops port 7778.
    for cmd in [
        "add table inet dsfs",
        "add chain inet dsfs rules { type filter hook input priority 0 ; }",
        "add rule inet dsfs rules udp dport 7777 counter drop",
        "add chain inet dsfs gate { type filter hook input priority 10 ; policy drop ; }",
        "add rule inet dsfs gate meta l4proto != udp accept",
        "add rule inet dsfs gate udp dport != 7778 accept",
    ] {
        fw.exec(&["nft", cmd]);
    }
    // The neighbour is resolved before counting (its ARP request is not in the burst).
    q.traffic(&["udp-to", "10.86.0.2", "9", "1"]);
    dropscope_tests::wait::neighbour_resolved(&q, "10.86.0.2");

    let tools = || {
        [
            nstat(&app, "UdpNoPorts"),
            nstat(&app, "UdpRcvbufErrors"),
            nstat(&app, "TcpExtListenDrops"),
            nft_counter(&fw, "dsfs"),
            tc_root_drops(&q, &vq),
        ]
    };
    let before = tools();
    let rec = dir.path().join("six.dsrec");
    let recorder = Counting::start(&["record", "-o", rec.to_str().expect("utf-8"), "--by", BY]);
    let json = Counting::start(&["report", "--format", "json", "--by", BY]);
    let text = Counting::start(&["report", "--by", BY]);
    let tui = Tmux::start("fs", &format!("--by {BY}"));
    tui.wait_for("drops by");

    app.traffic(&["udp", "9", "300"]);
    let unread: u64 = app
        .traffic(&["rcvbuf", "300"])
        .parse()
        .expect("rcvbuf drops");
    overflow_accept_queue(&app, 1, 40);
    fw.traffic(&["udp", "7777", "150"]);
    fw.traffic(&["udp", "7778", "100"]);
    q.traffic(&["udp-to", "10.86.0.2", "9", "400"]);
    // The shaper has sent or dropped all it was given (its queue empty) before the kernel's
    // counts are taken.
    dropscope_tests::wait::until("the shaper's queue empty", || {
        let out = q.exec(&["tc", "-s", "-j", "qdisc", "show", "dev", &vq, "root"]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("tc -j output");
        v[0]["qlen"].as_u64() == Some(0) && v[0]["backlog"].as_u64() == Some(0)
    });
    let after = tools();
    let delta: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let json: Value = serde_json::from_str(&json.interrupt()).expect("JSON report");
    let text = text.interrupt();
    recorder.interrupt();
    let recorded = json_output(
        Command::new(dropscope_bin())
            .args(["report", "--format", "json", "--input"])
            .arg(&rec),
    );

    // What the kernel's tools and the packets sent say.
    assert_eq!(delta[0], 300, "nstat UdpNoPorts");
    assert_eq!(delta[1], unread, "nstat UdpRcvbufErrors");
    assert_eq!(delta[3], 150, "the nft rule's counter");
    assert!(delta[2] > 0, "the accept queue did not overflow");
    assert!(delta[4] > 100, "tbf dropped only {} of 400", delta[4]);
    let seen_overflow = json_counts(&json)
        .get(&("TCP_LISTEN_OVERFLOW".into(), app.name.clone()))
        .copied()
        .unwrap_or(0);
    let expected: BTreeMap<(String, String), u64> = [
        (("NO_SOCKET", &app), delta[0]),
        (("SOCKET_RCVBUFF", &app), delta[1]),
        (("TcpExt:ListenDrops", &app), delta[2] - seen_overflow),
        (("NETFILTER_DROP", &fw), delta[3] + 100),
        (("QDISC_DROP", &q), delta[4]),
    ]
    .into_iter()
    .map(|((r, ns), n)| ((r.to_string(), ns.name.clone()), n))
    .collect();

    // report JSON, live and recorded: those counts, and no row counted twice (a drop the
    // probe saw is never also a counter-only row).
    let ours = [&app, &fw, &q];
    for (report, how) in [(&json, "live"), (&recorded, "recorded")] {
        let counts = json_counts(report);
        for (key, n) in &expected {
            assert_eq!(counts.get(key), Some(n), "{how} JSON {key:?}: {counts:#?}");
        }
        for r in report["counter_only"].as_array().into_iter().flatten() {
            let key = (
                r["reason"].as_str().unwrap_or_default().to_string(),
                r["netns_name"].as_str().unwrap_or_default().to_string(),
            );
            if ours.iter().any(|ns| ns.name == key.1) {
                assert!(expected.contains_key(&key), "{how}: counted twice: {r:#}");
            }
        }
    }
    // report text.
    for ((reason, ns), n) in &expected {
        assert_eq!(
            text_count(&text, reason, ns),
            Some(*n),
            "text report {reason} {ns}:\n{text}"
        );
    }
    // The live view, as a person reads it.
    let screen = tui.wait("every kind of drop with its exact count", |screen| {
        expected
            .iter()
            .all(|((r, ns), n)| text_count(screen, r, ns) == Some(*n))
    });
    for ns in ours {
        assert_eq!(
            text_count(&screen, "Udp:NoPorts", &ns.name),
            None,
            "a drop the probe saw is a counter-only row too:\n{screen}"
        );
    }
    tui.keys("q");
    // serve: each namespace by its name, within a few scrapes, with the same counts.
    let mut last = Vec::new();
    let agreed = (0..40).any(|_| {
        last = serve.drops();
        let ok = expected
            .iter()
            .filter(|((r, _), _)| r.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .all(|((r, ns), n)| {
                last.iter().any(|(labels, v)| {
                    labels.contains(&format!("reason=\"{r}\""))
                        && labels.contains(&format!("netns_name=\"{ns}\""))
                        && v == n
                })
            });
        if !ok {
            std::thread::sleep(Duration::from_millis(500));
        }
        ok
    });
    assert!(agreed, "serve's samples never agreed: {last:#?}");
}
