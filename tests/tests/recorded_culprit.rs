//! A recording carries what live attribution and matching use: `report --input` of a session
//! recorded while an nft rule and a tc program drop real traffic names the same culprits
//! (table, chain and handle; program name and id) with the same counts, the same commands and
//! the same ledger as the live `report` of the same drops. Needs root, nft and tc.
use std::{os::unix::fs::MetadataExt as _, process::Command};

use dropscope_tests::{
    Counting, Netns,
    fixture::{self, Bpffs, Kind, TC_ACT_SHOT},
    root_test,
    rules::{handle_of, nft, nft_packets},
};
use serde_json::Value;

const BY: &str = "reason,location,netns,device";

/// The one row of `report` of `reason` counting `count` drops.
fn row<'a>(report: &'a Value, reason: &str, count: u64) -> &'a Value {
    let rows: Vec<&Value> = (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["reason"] == reason && d["count"] == count)
        .collect();
    match rows[..] {
        [r] => r,
        _ => panic!("no single {reason} row of {count}: {report:#}"),
    }
}

/// The entries of `list` (ledger rows, layers, ratios) of namespaces `ns`, in order.
fn of_namespaces<'a>(list: &'a Value, ns: &[u64]) -> Vec<&'a Value> {
    (list.as_array().into_iter().flatten())
        .filter(|e| e["netns"].as_u64().is_some_and(|n| ns.contains(&n)))
        .collect()
}

#[test]
fn a_recorded_session_names_the_same_culprits_and_ledger_as_live() {
    let _serial = root_test();
    let (a, b) = (Netns::new("reccul-a"), Netns::new("reccul-b"));
    let (_, vb) = dropscope_tests::veth_pair(&a, &b, "10.87.0");
    nft(
        &b,
        "table inet dsrec {\n chain input { type filter hook input priority 0;\n  \
         udp dport 5001 counter drop comment \"recorded\"\n }\n}",
    );
    let fs = Bpffs::mount();
    let shoot = fixture::load(Kind::Tc, "ds_rec_shoot", 7105, TC_ACT_SHOT, true).expect("load");
    let id = fixture::prog_id(&shoot).expect("program id");
    dropscope_tests::tc_ingress(&b, &vb, &fs.pin(&shoot, "rec_shoot"));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("culprits.dsrec");
    let path = file.to_str().expect("utf-8");

    let live = Counting::start(&["report", "--format", "json", "--by", BY]);
    let rec = Counting::start(&["record", "-o", path, "--by", BY]);
    a.traffic(&["udp-to", "10.87.0.2", "5001", "300"]);
    a.traffic(&["udp-to", "10.87.0.2", "7105", "200"]);
    rec.interrupt();
    let live: Value = serde_json::from_str(&live.interrupt()).expect("live JSON");
    let replayed = dropscope_tests::json_output(
        Command::new(dropscope_tests::dropscope_bin())
            .args(["report", "--format", "json", "--by", BY, "--input", path]),
    );

    // The rule, as nft shows it, named with its count, live and replayed alike.
    let handle = handle_of(&b, "inet", "dsrec", "input", "recorded");
    assert_eq!(nft_packets(&b, "inet", "dsrec", "input", handle), 300);
    let (l, r) = (
        row(&live, "NETFILTER_DROP", 300),
        row(&replayed, "NETFILTER_DROP", 300),
    );
    let c = &l["culprit"];
    assert_eq!(c["certainty"], "exact", "{l:#}");
    let who = &c["who"][0];
    assert_eq!(
        (&who["kind"], &who["table"], &who["chain"]),
        (&"rule".into(), &"dsrec".into(), &"input".into()),
        "{c:#}"
    );
    assert_eq!(
        (&who["handle"], &who["counted"]),
        (&handle.into(), &300.into())
    );
    assert_eq!(r["culprit"], l["culprit"], "replayed {r:#}");
    assert_eq!(r["check"], l["check"], "replayed {r:#}");

    // The program at its attach point, by name and id.
    let (l, r) = (
        row(&live, "TC_INGRESS", 200),
        row(&replayed, "TC_INGRESS", 200),
    );
    let program = format!("prog ds_rec_shoot#{id}");
    assert_eq!(l["culprit"]["who"][0]["program"], program.as_str(), "{l:#}");
    assert_eq!(r["culprit"], l["culprit"], "replayed {r:#}");

    // The ledger of the test's namespaces: the same rows, layers and ratios.
    let inode = |ns: &Netns| std::fs::metadata(ns.path()).expect("netns").ino();
    let ns = [inode(&a), inode(&b)];
    for (what, l, r) in [
        (
            "ledger rows",
            &live["ledger"]["counters"],
            &replayed["ledger"]["counters"],
        ),
        (
            "layers",
            &live["ledger"]["layers"],
            &replayed["ledger"]["layers"],
        ),
        ("ratios", &live["ratio"], &replayed["ratio"]),
    ] {
        let (l, r) = (of_namespaces(l, &ns), of_namespaces(r, &ns));
        assert!(
            !l.is_empty() || what == "ratios",
            "no {what} live: {live:#}"
        );
        assert_eq!(r, l, "{what}");
    }

    // The text report names them the same way.
    let out = dropscope_tests::run(
        Command::new(dropscope_tests::dropscope_bin())
            .args(["report", "--by", BY, "--input", path]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "rule inet dsrec input (input) handle {handle} #1 drop"
        )) && text.contains("[counted 300]"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{program} at {vb} tc ingress")),
        "{text}"
    );
    assert!(!text.contains("recorded before attribution"), "{text}");
}
