//! Who dropped it: real nftables and iptables rules dropping real traffic in namespaces of the
//! test's own, named by `report` with the counts the kernel's own tools (`nft -j`,
//! `iptables-save -c`) show. On a kernel where every netfilter drop is in `nf_hook_slow`
//! (before 6.7, unless the change was backported), or where a rule's verdict and a chain's
//! policy share one call site of `nft_do_chain` (Debian's arm64 builds), a rule's drops and a
//! policy's are told apart only by counters. Needs root, nft and iptables (nft backend).
mod common;

use dropscope_tests::{
    Counting, Netns, root_test,
    rules::{handle_of, iptables_drop, iptables_packets, nft, nft_packets},
};
use serde_json::Value;

/// Whether a report of drops by rules and a policy shows them at two call sites of
/// `nft_do_chain`, a rule's verdict's and a chain's policy's: from 6.7 (and on older kernels
/// with the change, such as Debian's amd64 6.1), where the build keeps them apart. Elsewhere
/// they share one site (Debian's arm64 builds: one call) or every netfilter drop is in
/// `nf_hook_slow`, where the two cannot be told apart.
fn two_nft_do_chain_sites(report: &Value) -> bool {
    let sites: std::collections::BTreeSet<&str> = (nf_rows(report).iter())
        .filter_map(|d| d["location"].as_str())
        .filter(|l| l.starts_with("nft_do_chain+"))
        .collect();
    sites.len() >= 2
}

/// The NETFILTER_DROP rows of a JSON report.
fn nf_rows(report: &Value) -> Vec<&Value> {
    (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["reason"] == "NETFILTER_DROP")
        .collect()
}

/// The one NETFILTER_DROP row counting `count` drops.
fn row_of(report: &Value, count: u64) -> &Value {
    let rows = nf_rows(report);
    let mut it = rows.iter().filter(|d| d["count"] == count);
    match (it.next(), it.next()) {
        (Some(r), None) => r,
        _ => panic!("no single NETFILTER_DROP row of {count}: {report:#}"),
    }
}

/// Runs `dropscope ARGS` (a text report) while `traffic` runs; returns what it printed.
fn c_text(args: &[&str], traffic: impl FnOnce()) -> String {
    let c = Counting::start(args);
    traffic();
    c.interrupt()
}

/// Runs a JSON report of namespace `ns` while `traffic` runs; returns it.
fn report_while(ns: &Netns, traffic: impl FnOnce()) -> Value {
    let c = Counting::start(&["report", "--format", "json", "--netns", &ns.name]);
    traffic();
    serde_json::from_str(&c.interrupt()).expect("JSON report")
}

const RULES_AND_POLICY: &str = "
table inet dsc {
  chain input { type filter hook input priority 0; policy accept;
    udp dport 5001 counter drop comment \"counted\"
    udp dport 5002 drop comment \"uncounted\"
  }
}
table ip dsp {
  chain gate { type filter hook input priority 10; policy drop; }
}
";

#[test]
fn a_counted_rule_and_an_uncounted_one_are_candidates_and_the_policy_is_exact() {
    let _serial = root_test();
    let ns = Netns::new("culprit-mix");
    nft(&ns, RULES_AND_POLICY);
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5001", "300"]);
        ns.traffic(&["udp", "5002", "200"]);
        ns.traffic(&["udp", "5003", "100"]);
    });
    let counted = handle_of(&ns, "inet", "dsc", "input", "counted");
    assert_eq!(nft_packets(&ns, "inet", "dsc", "input", counted), 300);
    if !two_nft_do_chain_sites(&report) {
        // The rules' verdicts and the policy drop at one site: one row of all 600, whose
        // candidates are both rules, the counted one with its count, and the policy.
        let row = row_of(&report, 600);
        let at = row["location"].as_str().expect("location");
        assert!(
            at.starts_with("nf_hook_slow+") || at.starts_with("nft_do_chain+"),
            "{row:#}"
        );
        let c = &row["culprit"];
        assert_eq!(c["certainty"], "candidates", "{report:#}");
        let who = c["who"].as_array().expect("who");
        assert_eq!(who.len(), 3, "{c:#}");
        assert_eq!(who[0]["comment"], "counted");
        assert_eq!(who[0]["handle"], counted);
        assert_eq!(who[0]["counted"], 300, "{c:#}");
        assert_eq!(who[1]["comment"], "uncounted");
        assert!(who[1].get("counted").is_none(), "{c:#}");
        assert_eq!(who[2]["kind"], "policy", "{c:#}");
        assert_eq!(
            (&who[2]["table"], &who[2]["chain"]),
            (&"dsp".into(), &"gate".into())
        );
        return;
    }
    // The rules' verdict site: 500 drops, 300 of them counted by the counted rule.
    let rules = &row_of(&report, 500)["culprit"];
    assert_eq!(rules["certainty"], "candidates", "{report:#}");
    let who = rules["who"].as_array().expect("who");
    assert_eq!(who.len(), 2, "{rules:#}");
    assert_eq!(who[0]["comment"], "counted");
    assert_eq!(who[0]["handle"], counted);
    assert_eq!(who[0]["counted"], 300, "{rules:#}");
    assert_eq!(who[0]["hook"], "input");
    assert_eq!(who[1]["comment"], "uncounted");
    assert!(who[1].get("counted").is_none(), "{rules:#}");
    assert!(
        rules["why"].as_str().expect("why").contains("other 200"),
        "{rules:#}"
    );
    // The other site of nft_do_chain: the chain's policy, the only drop policy here.
    let policy = &row_of(&report, 100)["culprit"];
    assert_eq!(policy["certainty"], "exact", "{report:#}");
    assert_eq!(policy["who"][0]["kind"], "policy");
    assert_eq!(policy["who"][0]["table"], "dsp");
    assert_eq!(policy["who"][0]["chain"], "gate");
    assert_eq!(policy["who"][0]["family"], "ip");
}

#[test]
fn a_policy_alone_is_the_only_candidate_and_says_nothing_counted_it() {
    let _serial = root_test();
    let ns = Netns::new("culprit-pol");
    nft(
        &ns,
        "table ip dsp {\n chain gate { type filter hook input priority 10; policy drop; }\n}",
    );
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5003", "150"]);
    });
    let c = &row_of(&report, 150)["culprit"];
    // Nothing counts a policy's drops and no rule shows which call site is whose: the only
    // candidate, not a fact.
    assert_eq!(c["certainty"], "candidates", "{report:#}");
    assert_eq!(c["who"].as_array().expect("who").len(), 1);
    assert_eq!(c["who"][0]["kind"], "policy");
    assert_eq!(c["who"][0]["chain"], "gate");
}

#[test]
fn two_counted_rules_split_the_drops_exactly() {
    let _serial = root_test();
    let ns = Netns::new("culprit-split");
    nft(
        &ns,
        "table inet dsc { chain input { type filter hook input priority 0;
           udp dport 5001 counter drop comment \"a\"
           udp dport 5002 counter reject comment \"b\"\n }\n}",
    );
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5001", "321"]);
        ns.traffic(&["udp", "5002", "123"]);
    });
    let (a, b) = (
        handle_of(&ns, "inet", "dsc", "input", "a"),
        handle_of(&ns, "inet", "dsc", "input", "b"),
    );
    let (na, nb) = (
        nft_packets(&ns, "inet", "dsc", "input", a),
        nft_packets(&ns, "inet", "dsc", "input", b),
    );
    assert_eq!((na, nb), (321, 123));
    let c = &row_of(&report, na + nb)["culprit"];
    assert_eq!(c["certainty"], "exact", "{report:#}");
    let who = c["who"].as_array().expect("who");
    assert_eq!(who.len(), 2, "{c:#}");
    assert_eq!(
        (&who[0]["handle"], &who[0]["counted"]),
        (&a.into(), &na.into())
    );
    assert_eq!(
        (&who[1]["handle"], &who[1]["counted"]),
        (&b.into(), &nb.into())
    );
    assert_eq!(who[1]["verdict"], "reject");
}

#[test]
fn an_iptables_rule_is_named_with_its_comment_and_its_counter() {
    let _serial = root_test();
    let ns = Netns::new("culprit-ipt");
    iptables_drop(&ns, 6001, "cali:abc123");
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "6001", "77"]);
    });
    let packets = iptables_packets(&ns, "cali:abc123");
    assert_eq!(packets, 77);
    let c = &row_of(&report, packets)["culprit"];
    assert_eq!(c["certainty"], "exact", "{report:#}");
    let who = &c["who"][0];
    assert_eq!(who["family"], "ip");
    assert_eq!(who["table"], "filter");
    assert_eq!(who["chain"], "INPUT");
    assert_eq!(who["position"], 1);
    assert_eq!(who["comment"], "cali:abc123");
    assert_eq!(who["counted"], packets);
    // Only the rows that policy dropped: not the datagrams to a closed port beside them.
    let c = Counting::start(&[
        "report",
        "--format",
        "json",
        "--netns",
        &ns.name,
        "--culprit",
        "CALI:ABC",
    ]);
    ns.traffic(&["udp", "6001", "40"]);
    ns.traffic(&["udp", "6002", "25"]);
    let only: Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    let drops = only["drops"].as_array().expect("drops");
    assert_eq!(drops.len(), 1, "{only:#}");
    assert_eq!(drops[0]["reason"], "NETFILTER_DROP");
    assert_eq!(
        (&drops[0]["count"], &only["total"]),
        (&40.into(), &40.into()),
        "{only:#}"
    );
}

#[test]
fn the_same_rule_in_two_namespaces_is_counted_in_each() {
    let _serial = root_test();
    let (a, b) = (Netns::new("culprit-a"), Netns::new("culprit-b"));
    let rules = "table inet dsc { chain input { type filter hook input priority 0;
                   udp dport 5001 counter drop comment \"same\"\n }\n}";
    nft(&a, rules);
    nft(&b, rules);
    let c = Counting::start(&["report", "--format", "json"]);
    a.traffic(&["udp", "5001", "210"]);
    b.traffic(&["udp", "5001", "90"]);
    let report: Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    for (ns, n) in [(&a, 210u64), (&b, 90)] {
        let h = handle_of(ns, "inet", "dsc", "input", "same");
        assert_eq!(nft_packets(ns, "inet", "dsc", "input", h), n);
        let row = (nf_rows(&report).into_iter())
            .find(|d| d["netns_name"] == ns.name.as_str())
            .unwrap_or_else(|| panic!("no row of {}: {report:#}", ns.name));
        assert_eq!(row["count"], n, "{row:#}");
        assert_eq!(row["culprit"]["certainty"], "exact", "{row:#}");
        assert_eq!(row["culprit"]["who"][0]["counted"], n, "{row:#}");
    }
}

#[test]
fn a_rule_added_while_dropscope_runs_is_named_with_its_drops_since() {
    let _serial = root_test();
    let ns = Netns::new("culprit-change");
    nft(
        &ns,
        "table inet dsc { chain input { type filter hook input priority 0;
           udp dport 5001 counter drop comment \"before\"\n }\n}",
    );
    // Counted before the window: not the window's.
    ns.traffic(&["udp", "5001", "40"]);
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5001", "100"]);
        ns.exec(&[
            "nft",
            "add rule inet dsc input udp dport 5002 counter drop comment \"added\"",
        ]);
        ns.traffic(&["udp", "5002", "60"]);
    });
    let c = &row_of(&report, 160)["culprit"];
    assert_eq!(c["certainty"], "exact", "{report:#}");
    let who = c["who"].as_array().expect("who");
    let counted = |comment: &str| {
        (who.iter())
            .find(|w| w["comment"] == comment)
            .map(|w| w["counted"].clone())
            .unwrap_or_else(|| panic!("no {comment} in {c:#}"))
    };
    assert_eq!(counted("before"), 100);
    assert_eq!(counted("added"), 60);
    let before = handle_of(&ns, "inet", "dsc", "input", "before");
    assert_eq!(nft_packets(&ns, "inet", "dsc", "input", before), 140);
}

/// A chain name and a comment with terminal escapes, a bell, a bidi override and a
/// backslash: `nft` reads them from JSON as they are, and the kernel keeps them.
const HOSTILE: &str = r#"{"nftables":[{"add":{"table":{"family":"inet","name":"dsc"}}},
{"add":{"chain":{"family":"inet","table":"dsc","name":"in\u001b[31mred\\x","type":"filter",
"hook":"input","prio":0,"policy":"accept"}}},{"add":{"rule":{"family":"inet","table":"dsc",
"chain":"in\u001b[31mred\\x","comment":"\u001b]0;owned\u0007\u202ex","expr":[{"match":{
"op":"==","left":{"payload":{"protocol":"udp","field":"dport"}},"right":5001}},
{"counter":null},{"drop":null}]}}}]}"#;

#[test]
fn hostile_names_and_comments_are_escaped_in_text_and_json() {
    let _serial = root_test();
    let ns = Netns::new("culprit-hostile");
    let path = std::env::temp_dir().join(format!("ds-culprit-{}.json", std::process::id()));
    std::fs::write(&path, HOSTILE).expect("ruleset file");
    ns.exec(&["nft", "-j", "-f", path.to_str().expect("utf-8")]);
    let _ = std::fs::remove_file(&path);
    let c = Counting::start(&["report", "--netns", &ns.name]);
    ns.traffic(&["udp", "5001", "33"]);
    let text = c.interrupt();
    assert!(text.contains("who dropped it:"), "{text}");
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!text.contains(bad), "{bad:?} in {text}");
    }
    assert!(text.contains("[counted 33]"), "{text}");
    // The backslash is doubled, so no name passes for another's escape.
    assert!(text.contains("red\\\\x"), "{text}");
    let c = Counting::start(&["report", "--format", "json", "--netns", &ns.name]);
    ns.traffic(&["udp", "5001", "12"]);
    let raw = c.interrupt();
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!raw.contains(bad), "{bad:?} in {raw}");
    }
    let report: Value = serde_json::from_str(&raw).expect("JSON report");
    let c = &row_of(&report, 12)["culprit"];
    assert_eq!(c["certainty"], "exact", "{report:#}");
    assert_eq!(c["who"][0]["counted"], 12, "{report:#}");
}

#[test]
fn a_tc_program_shooting_on_a_veth_is_named_by_its_attach_point() {
    use dropscope_tests::fixture::{self, Bpffs, Kind, TC_ACT_SHOT};
    let _serial = root_test();
    let (a, b) = (Netns::new("culprit-tca"), Netns::new("culprit-tcb"));
    let (va, vb) = dropscope_tests::veth_pair(&a, &b, "10.86.0");
    let fs = Bpffs::mount();
    let shoot = fixture::load(Kind::Tc, "ds_who_shoot", 7103, TC_ACT_SHOT, true).expect("load");
    let id = fixture::prog_id(&shoot).expect("program id");
    dropscope_tests::tc_ingress(&b, &vb, &fs.pin(&shoot, "who_shoot"));
    // A tcx link on va's egress shoots UDP to port 7104.
    let tcx = fixture::load(Kind::Tc, "ds_who_tcx", 7104, TC_ACT_SHOT, true).expect("load");
    let tcx_id = fixture::prog_id(&tcx).expect("program id");
    let _link = fixture::attach_tcx(&tcx, &a.path(), &va, true).expect("tcx link");
    let c = Counting::start(&[
        "report",
        "--format",
        "json",
        "--by",
        "reason,location,netns,device",
    ]);
    a.traffic(&["udp-to", "10.86.0.2", "7103", "250"]);
    a.traffic(&["udp-to", "10.86.0.2", "7104", "150"]);
    let report: Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    let row = |reason: &str, dev: &str| {
        (report["drops"].as_array().expect("drops").iter())
            .find(|d| d["reason"] == reason && d["device"] == dev)
            .unwrap_or_else(|| panic!("no {reason} row on {dev}: {report:#}"))
            .clone()
    };
    for (reason, dev, count, program, attach) in [
        (
            "TC_INGRESS",
            vb.as_str(),
            250,
            format!("prog ds_who_shoot#{id}"),
            format!("{vb} tc ingress (clsact filter)"),
        ),
        (
            "TC_EGRESS",
            va.as_str(),
            150,
            format!("prog ds_who_tcx#{tcx_id}"),
            format!("{va} tc egress (tcx)"),
        ),
    ] {
        let r = row(reason, dev);
        assert_eq!(r["count"], count, "{r:#}");
        let c = &r["culprit"];
        // Exact where the verdict counter ran (fexit allowed); else the one candidate there.
        let certainty = match fixture::fentry_allowed(&shoot) {
            Ok(()) => "exact",
            Err(_) => "candidates",
        };
        assert_eq!(c["certainty"], certainty, "{r:#}");
        let who = c["who"].as_array().expect("who");
        assert_eq!(who.len(), 1, "{c:#}");
        assert_eq!(who[0]["kind"], "program");
        assert_eq!(who[0]["program"], program.as_str(), "{c:#}");
        assert_eq!(who[0]["attach"], attach.as_str(), "{c:#}");
        // A clsact filter is named by its priority and handle, as `tc filter show` prints
        // them; a tcx link has neither.
        if reason == "TC_INGRESS" {
            let show = b.exec(&["tc", "filter", "show", "dev", &vb, "ingress"]);
            let show = String::from_utf8_lossy(&show.stdout).into_owned();
            let line = (show.lines())
                .find(|l| l.contains(" handle ") && l.contains("ds_who_shoot"))
                .unwrap_or_else(|| panic!("no filter in {show}"));
            let after = |word: &str| {
                let mut it = line.split_whitespace().skip_while(|w| *w != word);
                it.nth(1)
                    .unwrap_or_else(|| panic!("no {word} in {line}"))
                    .to_string()
            };
            let (pref, handle) = (after("pref"), after("handle"));
            assert_eq!(who[0]["pref"].to_string(), pref, "{c:#} / {line}");
            assert_eq!(who[0]["handle"], handle.as_str(), "{c:#} / {line}");
        } else {
            assert!(who[0].get("pref").is_none(), "{c:#}");
        }
    }
    // What to change deletes that very filter, in its namespace.
    let text = c_text(&["report", "--by", "reason,location,netns,device"], || {
        a.traffic(&["udp-to", "10.86.0.2", "7103", "20"]);
    });
    let del = format!("tc filter del dev {vb} ingress pref ");
    let line = (text.lines())
        .find(|l| l.contains(&del))
        .unwrap_or_else(|| panic!("no `{del}` in {text}"));
    assert!(
        line.contains(&format!("ip netns exec {} tc filter del", b.name)) && line.contains(" bpf`"),
        "{line}"
    );
    // Reading who is attached changes nothing: none of dropscope's programs stays loaded.
    let left = common::dropscope_programs();
    assert!(left.is_empty(), "left loaded: {left:?}");
}

/// A ruleset of `n` accept rules after one counted drop rule (commented `first`).
fn big_ruleset(n: usize) -> String {
    let mut s = String::from(
        "table inet big {\n chain input { type filter hook input priority 0;\n  \
         udp dport 5001 counter drop comment \"first\"\n",
    );
    for i in 0..n {
        s.push_str(&format!(
            "  tcp dport {} ip saddr 10.{}.{}.{} counter accept\n",
            10000 + i % 50000,
            i / 65536,
            (i / 256) % 256,
            i % 256
        ));
    }
    s.push_str(" }\n}\n");
    s
}

#[test]
fn a_ruleset_of_100000_rules_is_read_within_its_bound_and_says_so() {
    let _serial = root_test();
    let ns = Netns::new("culprit-big");
    nft(&ns, &big_ruleset(100_000));
    let started = std::time::Instant::now();
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5001", "50"]);
    });
    let took = started.elapsed();
    // Two readings (the baseline and the last) of at most 0.5 s of dump each, then some.
    assert!(took < std::time::Duration::from_secs(40), "took {took:?}");
    let c = &row_of(&report, 50)["culprit"];
    // The first rule was read before the cut, and its counter accounts for every drop.
    assert_eq!(c["certainty"], "exact", "{c:#}");
    assert_eq!(c["who"][0]["comment"], "first");
    assert_eq!(c["who"][0]["counted"], 50);
    let notes = report["kernel_notes"].to_string();
    assert!(notes.contains("nftables rules: dump cut"), "{notes}");
}

#[test]
fn tables_made_and_deleted_while_read_never_stall_the_report() {
    let _serial = root_test();
    let ns = Netns::new("culprit-churn");
    nft(
        &ns,
        "table inet dsc {\n chain input { type filter hook input priority 0;
           udp dport 5001 counter drop comment \"steady\"\n }\n}",
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (stop, name) = (stop.clone(), ns.name.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = format!("churn{}", i % 8);
                let _ = std::process::Command::new("ip")
                    .args(["netns", "exec", &name, "nft", "add", "table", "ip", &t])
                    .output();
                let _ = std::process::Command::new("ip")
                    .args(["netns", "exec", &name, "nft", "delete", "table", "ip", &t])
                    .output();
                i += 1;
            }
            i
        })
    };
    let started = std::time::Instant::now();
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5001", "70"]);
        std::thread::sleep(std::time::Duration::from_secs(2));
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let changes = churn.join().expect("churn thread");
    assert!(changes > 5, "the ruleset changed {changes} times only");
    assert!(started.elapsed() < std::time::Duration::from_secs(40));
    let c = &row_of(&report, 70)["culprit"];
    // The steady rule's counter accounts for every drop, whatever came and went meanwhile.
    assert_eq!(c["certainty"], "exact", "{c:#}");
    assert_eq!(c["who"][0]["counted"], 70, "{c:#}");
}

#[test]
fn a_verdict_map_is_a_candidate_whose_counter_is_no_drop_count() {
    let _serial = root_test();
    let ns = Netns::new("culprit-vmap");
    nft(
        &ns,
        "table inet dsc {\n chain input { type filter hook input priority 0;
           counter udp dport vmap { 5001 : drop, 5002 : accept } comment \"map\"\n }\n}",
    );
    let report = report_while(&ns, || {
        ns.traffic(&["udp", "5001", "30"]);
        ns.traffic(&["udp", "5002", "20"]);
    });
    let c = &row_of(&report, 30)["culprit"];
    // Its counter counted the 20 accepted too: never a drop count.
    assert_eq!(c["certainty"], "candidates", "{c:#}");
    assert_eq!(c["who"][0]["verdict"], "vmap", "{c:#}");
    assert!(c["who"][0].get("counted").is_none(), "{c:#}");
}

#[test]
fn serve_labels_a_series_with_its_culprit() {
    let _serial = root_test();
    let ns = Netns::new("culprit-serve");
    iptables_drop(&ns, 6001, "KUBE-FW-x");
    let s = dropscope_tests::serve::Serve::start(&[]);
    ns.traffic(&["udp", "6001", "64"]);
    // The kernel's counters (and rulesets) are read every 10 s: wait for a reading after the
    // drops.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let line = loop {
        // 503 until the first snapshot is there.
        let (status, _, body) = dropscope_tests::serve::get(s.port, "/metrics", "text/plain");
        let found = (status == 200)
            .then(|| {
                body.lines()
                    .filter(|l| l.starts_with("dropscope_drops_total{"))
                    .filter(|l| l.contains("NETFILTER_DROP") && l.contains(ns.name.as_str()))
                    .find_map(|l| {
                        let (labels, v) = l.rsplit_once(' ')?;
                        Some((labels.to_string(), v.parse::<u64>().ok()?))
                    })
            })
            .flatten();
        match found {
            // A candidate (the counters read before the drops) until a reading after them is
            // taken in.
            Some((l, n)) if l.contains("culprit=") && !l.contains("culprit=\"maybe: ") => {
                break (l, n);
            }
            _ if std::time::Instant::now() > deadline => panic!("no culprit label: {found:?}"),
            _ => std::thread::sleep(std::time::Duration::from_millis(500)),
        }
    };
    assert_eq!(line.1, 64, "{line:?}");
    assert!(
        line.0.contains(r#"culprit="rule filter INPUT #1""#),
        "{line:?}"
    );
}

/// `--by reason,culprit` splits the drops of two rules (in two namespaces) into two rows, each
/// with exactly the count its rule's counter has, as `nft -j` shows it.
#[test]
fn by_culprit_splits_two_rules_drops_exactly() {
    let _serial = root_test();
    let (a, b) = (Netns::new("culprit-bya"), Netns::new("culprit-byb"));
    for (ns, table) in [(&a, "dsbya"), (&b, "dsbyb")] {
        nft(
            ns,
            &format!(
                "table inet {table} {{ chain input {{ type filter hook input priority 0;
                   udp dport 5011 counter drop comment \"{table}\"\n }}\n}}"
            ),
        );
    }
    let c = Counting::start(&["report", "--format", "json", "--by", "reason,culprit"]);
    a.traffic(&["udp", "5011", "321"]);
    b.traffic(&["udp", "5011", "123"]);
    let report: Value = serde_json::from_str(&c.interrupt()).expect("JSON report");
    for (ns, table, sent) in [(&a, "dsbya", 321), (&b, "dsbyb", 123)] {
        let handle = handle_of(ns, "inet", table, "input", table);
        let counted = nft_packets(ns, "inet", table, "input", handle);
        assert_eq!(counted, sent);
        let rows: Vec<&Value> = (nf_rows(&report).into_iter())
            .filter(|r| r["culprit"]["who"][0]["table"] == table)
            .collect();
        assert_eq!(rows.len(), 1, "{table}: {report:#}");
        let (row, c) = (rows[0], &rows[0]["culprit"]);
        assert_eq!(row["count"], counted, "{row:#}");
        assert_eq!(c["certainty"], "exact", "{row:#}");
        assert_eq!(c["who"].as_array().map(Vec::len), Some(1), "{row:#}");
        assert_eq!(c["who"][0]["counted"], counted, "{row:#}");
        assert_eq!(c["who"][0]["handle"], handle, "{row:#}");
        // Grouped by reason and culprit alone: no namespace, device or location.
        assert!(row.get("netns").is_none_or(Value::is_null), "{row:#}");
        assert_eq!(row["location"], "*", "{row:#}");
    }
}

/// `check --by reason,culprit` (live) judges the rows grouped by who dropped them: it reads
/// the kernel's view as it counts (without it every rule's drops were `unknown`), and the
/// rule's row is keyed by its label with exactly the count its counter has.
#[test]
fn check_groups_by_culprit_live() {
    let _serial = root_test();
    let ns = Netns::new("culprit-check");
    nft(
        &ns,
        "table inet dsck { chain input { type filter hook input priority 0;
           udp dport 5021 counter drop comment \"dsck\"\n }\n}",
    );
    let c = Counting::start(&[
        "check",
        "--by",
        "reason,culprit",
        "--netns",
        &ns.name,
        "--budget",
        "total<1000000/s",
        "--format",
        "json",
    ]);
    ns.traffic(&["udp", "5021", "217"]);
    let out: Value = serde_json::from_str(&c.interrupt()).expect("JSON");
    let handle = handle_of(&ns, "inet", "dsck", "input", "dsck");
    let counted = nft_packets(&ns, "inet", "dsck", "input", handle);
    assert_eq!(counted, 217);
    let label = format!("exact: rule inet dsck input handle {handle}");
    let keys = out["keys"].as_array().expect("keys");
    let rows: Vec<&Value> = (keys.iter())
        .filter(|k| k["reason"] == "NETFILTER_DROP")
        .collect();
    assert_eq!(rows.len(), 1, "{out:#}");
    assert_eq!(rows[0]["culprit"], label.as_str(), "{out:#}");
    assert_eq!(rows[0]["count"], counted, "{out:#}");
    assert_eq!(out["ok"], true, "{out:#}");
}
