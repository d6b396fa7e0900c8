//! A namespace inode given again: the kernel hands a freed namespace inode to the next
//! namespace made, so the drops of a namespace that ended and those of the one that took its
//! inode are two rows (told apart by the namespace cookie), live and recorded, never one row
//! of their sum. Needs root.
use std::{
    os::unix::fs::MetadataExt,
    process::Command,
    time::{Duration, Instant},
};

use dropscope_tests::{Counting, Netns, dropscope_bin, json_output, root_test};

/// How many namespaces the search for the freed inode may make (each holding a lower free
/// inode, or waiting for the ended namespace's to be freed) before it gives up.
const MAX_TRIES: usize = 2000;
/// How long the search may take.
const SEARCH: Duration = Duration::from_secs(60);

fn inode(ns: &Netns) -> u64 {
    std::fs::metadata(ns.path())
        .unwrap_or_else(|e| panic!("{}: {e}", ns.path().display()))
        .ino()
}

/// `ip netns add name` alone (no `ip -n`, which makes a mount namespace and so takes an inode
/// of the same allocator for a while).
fn add(name: &str) -> Netns {
    let out = Command::new("ip")
        .args(["netns", "add", name])
        .output()
        .expect("ip netns add");
    assert!(
        out.status.success(),
        "ip netns add {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Netns {
        name: name.to_string(),
    }
}

/// A new namespace with inode `wanted` (freed by a namespace that ended): the kernel gives the
/// lowest free inode, so namespaces that get a lower one are kept (they fill the holes below
/// it) and those that get a higher one (the ended namespace not yet freed: its cleanup runs
/// later) are removed again. The namespaces kept are returned with it, to be removed after.
/// Fails, saying why, when another process takes the inode first or the search runs out.
fn namespace_with_inode(wanted: u64, tag: &str) -> (Netns, Vec<Netns>) {
    let deadline = Instant::now() + SEARCH;
    let mut fillers = Vec::new();
    for i in 0..MAX_TRIES {
        let ns = add(&format!("ds-{tag}-{}-{i}", std::process::id()));
        let got = inode(&ns);
        if got == wanted {
            return (ns, fillers);
        }
        if got < wanted {
            fillers.push(ns);
        } else {
            drop(ns);
            // The ended namespace is freed by a kernel worker, after an RCU grace period.
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            Instant::now() < deadline,
            "the kernel did not give inode {wanted} again within {SEARCH:?} ({i} namespaces \
             made, {} holding lower inodes): another process may have taken it",
            fillers.len()
        );
    }
    panic!(
        "the kernel did not give inode {wanted} again in {MAX_TRIES} namespaces ({} holding \
         lower inodes): another process may have taken it",
        fillers.len()
    );
}

/// The NO_SOCKET rows of UDP to port 9 in namespace `inode`: (count, cookie, name).
fn rows_of(report: &serde_json::Value, inode: u64) -> Vec<(u64, Option<u64>, Option<String>)> {
    let mut rows: Vec<_> = (report["drops"].as_array().expect("drops").iter())
        .filter(|d| {
            d["netns"].as_u64() == Some(inode)
                && d["reason"] == "NO_SOCKET"
                && d["location"]
                    .as_str()
                    .is_some_and(|l| l.starts_with("__udp4_lib_rcv+"))
        })
        .map(|d| {
            (
                d["count"].as_u64().expect("count"),
                d["netns_cookie"].as_u64(),
                d["netns_name"].as_str().map(str::to_string),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Two rows of `first` and `second` drops (the ended namespace's and the new one's), with two
/// cookies, the new namespace's name never on the ended one's row.
fn assert_two_rows(report: &serde_json::Value, inode: u64, counts: (u64, u64), victim: &str) {
    let rows = rows_of(report, inode);
    let (first, second) = counts;
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        [second, first],
        "two namespaces that had inode {inode} one after the other must be two rows: \
         {rows:?}\n{report:#}"
    );
    let (new, ended) = (&rows[0], &rows[1]);
    assert!(
        new.1.is_some() && ended.1.is_some() && new.1 != ended.1,
        "two cookies: {rows:?}"
    );
    assert_ne!(
        ended.2.as_deref(),
        Some(victim),
        "the ended namespace's drops named after the new one: {rows:?}"
    );
}

#[test]
fn a_namespace_inode_given_again_is_another_row() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("reuse.dsrec");
    let live = Counting::start(&["report", "--format", "json"]);
    let rec = Counting::start(&["record", "-o", file.to_str().expect("utf-8 path")]);

    let (first, second) = (700, 30);
    let ended = Netns::new("reuse-ended");
    let wanted = inode(&ended);
    ended.traffic(&["udp", "9", &first.to_string()]);
    drop(ended);
    let (victim, fillers) = namespace_with_inode(wanted, "reuse");
    victim.exec(&["ip", "link", "set", "lo", "up"]);
    victim.traffic(&["udp", "9", &second.to_string()]);
    let victim_name = victim.name.clone();

    let report: serde_json::Value = serde_json::from_str(&live.interrupt()).expect("JSON report");
    rec.interrupt();
    drop((victim, fillers));

    assert_two_rows(&report, wanted, (first, second), &victim_name);
    let replayed = json_output(
        Command::new(dropscope_bin())
            .args(["report", "--format", "json", "--input"])
            .arg(&file),
    );
    assert_two_rows(&replayed, wanted, (first, second), &victim_name);
}
