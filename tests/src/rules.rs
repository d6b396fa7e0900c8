//! Firewall rules in a namespace of a test's own, and the counts the kernel's own tools show
//! for them (`nft -j`, `iptables-save -c`).
use serde_json::Value;

use crate::Netns;

/// Loads `ruleset` (nft syntax) into `ns`.
pub fn nft(ns: &Netns, ruleset: &str) {
    let path = std::env::temp_dir().join(format!("ds-rules-{}.nft", std::process::id()));
    std::fs::write(&path, ruleset).expect("ruleset file");
    ns.exec(&["nft", "-f", path.to_str().expect("utf-8")]);
    let _ = std::fs::remove_file(&path);
}

/// Appends to `ns`'s iptables INPUT chain a rule dropping UDP to `port`, commented `comment`.
pub fn iptables_drop(ns: &Netns, port: u16, comment: &str) {
    let port = port.to_string();
    ns.exec(&[
        "iptables",
        "-A",
        "INPUT",
        "-p",
        "udp",
        "--dport",
        &port,
        "-m",
        "comment",
        "--comment",
        comment,
        "-j",
        "DROP",
    ]);
}

/// The packets of the iptables rule commented `comment` in `ns` (`iptables-save -c`:
/// `[packets:bytes] -A INPUT ...`).
pub fn iptables_packets(ns: &Netns, comment: &str) -> u64 {
    let save = ns.exec(&["iptables-save", "-c", "-t", "filter"]);
    let save = String::from_utf8_lossy(&save.stdout).into_owned();
    let line = (save.lines())
        .find(|l| l.contains(comment))
        .unwrap_or_else(|| panic!("no rule in {save}"));
    (line.trim_start_matches('[').split(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {line}"))
}

/// The rules of chain `family table chain` of `ns`, as `nft -j` shows them.
fn rules(ns: &Netns, family: &str, table: &str, chain: &str) -> Vec<Value> {
    let out = ns.exec(&["nft", "-j", "list", "chain", family, table, chain]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("nft -j output");
    (v["nftables"].as_array().expect("nftables array").iter())
        .filter(|r| r.get("rule").is_some())
        .cloned()
        .collect()
}

/// The packets of the counter of rule `handle` in chain `family table chain` of `ns`.
pub fn nft_packets(ns: &Netns, family: &str, table: &str, chain: &str, handle: u64) -> u64 {
    let rules = rules(ns, family, table, chain);
    let rule = (rules.iter())
        .find(|r| r["rule"]["handle"] == handle)
        .unwrap_or_else(|| panic!("no rule {handle} in {rules:?}"));
    (rule["rule"]["expr"].as_array().expect("expr").iter())
        .find_map(|e| e["counter"]["packets"].as_u64())
        .unwrap_or_else(|| panic!("rule {handle} has no counter: {rule}"))
}

/// The handle of the rule of chain `family table chain` whose comment is `comment`.
pub fn handle_of(ns: &Netns, family: &str, table: &str, chain: &str, comment: &str) -> u64 {
    let rules = rules(ns, family, table, chain);
    (rules.iter())
        .find(|r| r["rule"]["comment"] == comment)
        .and_then(|r| r["rule"]["handle"].as_u64())
        .unwrap_or_else(|| panic!("no rule commented {comment} in {rules:?}"))
}
