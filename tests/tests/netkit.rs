//! A netkit pair (6.7+, made with rtnetlink) whose primary runs a program that drops UDP to one
//! port: its verdicts are counted per program on the primary device, a row of the report, and
//! one drop each, freed in `netkit_xmit`, in the ledger. A kernel that refuses tracing programs
//! on BPF programs lists the program with its refusal instead. Needs root and a kernel with
//! netkit (6.7+, `CONFIG_NETKIT`), which not every host has: ignored here, run by
//! `cargo xtask vmtest` in the 6.12 guests.
use std::{os::unix::fs::MetadataExt as _, time::Duration};

use dropscope_tests::{
    Counting, Netns,
    fixture::{self, Kind, TC_ACT_SHOT},
    netkit, root_test,
};
use serde_json::Value;

const SENT: u64 = 250;

#[test]
#[ignore = "needs netkit (6.7+, CONFIG_NETKIT): `cargo xtask vmtest` runs it in the 6.12 guests"]
fn a_netkit_program_s_drops_are_counted_per_program_and_matched_with_their_frees() {
    let _serial = root_test();
    let (a, b) = (Netns::new("nk-a"), Netns::new("nk-b"));
    netkit::create(&a.path(), "nk0", &b.path(), "nk1")
        .unwrap_or_else(|e| panic!("a netkit pair (netkit came with 6.7): {e}"));
    for (ns, dev, ip) in [(&a, "nk0", "10.87.0.1/24"), (&b, "nk1", "10.87.0.2/24")] {
        ns.exec(&["ip", "addr", "add", ip, "dev", dev]);
        ns.exec(&["ip", "link", "set", dev, "up"]);
    }
    let prog = fixture::load(Kind::Tc, "ds_fx_nk", 7006, TC_ACT_SHOT, true).expect("load");
    let id = fixture::prog_id(&prog).expect("program id");
    let traced = fixture::fentry_allowed(&prog);
    let _link = fixture::attach_netkit(&prog, &a.path(), "nk0", false).expect("a netkit link");
    // The neighbour is known before counting: only the program's drops are counted below.
    a.traffic(&["udp-to", "10.87.0.2", "7999", "1"]);
    let inode = std::fs::metadata(a.path()).expect("netns file").ino();

    let c = Counting::start(&[
        "report",
        "--format",
        "json",
        "--no-stacks",
        "--by",
        "reason,location,netns,device",
    ]);
    a.traffic(&["udp-to", "10.87.0.2", "7006", &SENT.to_string()]);
    std::thread::sleep(Duration::from_millis(500));
    let report: Value = serde_json::from_str(&c.interrupt()).expect("JSON report");

    let counter = format!("Tc:nk0:netkit-primary:ds_fx_nk#{id}:shot");
    let row = (report["ledger"]["counters"]
        .as_array()
        .into_iter()
        .flatten())
    .find(|r| r["netns"] == inode && r["counter"] == counter.as_str());
    match traced {
        Ok(()) => {
            let n = |f: &str| row.and_then(|r| r[f].as_u64());
            assert_eq!(
                (n("delta"), n("matched")),
                (Some(SENT), Some(SENT)),
                "{SENT} dropped by the netkit program, matched: {:#}",
                report["ledger"]
            );
            let location = format!("prog ds_fx_nk#{id} (netkit-primary)");
            let listed = (report["programs"].as_array().into_iter().flatten()).any(|r| {
                r["reason"] == "TC_SHOT"
                    && r["location"] == location.as_str()
                    && r["device"] == "nk0"
                    && r["count"] == SENT
            });
            assert!(
                listed,
                "no {location} row of {SENT}: {:#}",
                report["programs"]
            );
        }
        Err(e) => {
            let notes = report["ledger"]["notes"].to_string();
            assert!(
                row.is_none() && notes.contains(&format!("program {id} ")),
                "this kernel refuses fentry on programs ({e}), but the ledger does not say so \
                 for program {id}: {:#}",
                report["ledger"]
            );
        }
    }
}
