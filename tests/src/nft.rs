//! nftables rulesets in a test's namespace: loaded with `nft -f`, their rules' handles and
//! counters read back with `nft -j`, as the kernel's own tool shows them.
use serde_json::Value;

use crate::Netns;

/// Loads `ruleset` (nft syntax) into `ns`.
pub fn load(ns: &Netns, ruleset: &str) {
    let path = std::env::temp_dir().join(format!("ds-culprit-{}.nft", std::process::id()));
    std::fs::write(&path, ruleset).expect("ruleset file");
    ns.exec(&["nft", "-f", path.to_str().expect("utf-8")]);
    let _ = std::fs::remove_file(&path);
}

/// The packets of the counter of rule `handle` in chain `family table chain` of `ns`, as
/// `nft -j` shows it.
pub fn packets(ns: &Netns, family: &str, table: &str, chain: &str, handle: u64) -> u64 {
    let out = ns.exec(&["nft", "-j", "list", "chain", family, table, chain]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("nft -j output");
    let rules = v["nftables"].as_array().expect("nftables array");
    let rule = rules
        .iter()
        .find(|r| r["rule"]["handle"] == handle)
        .unwrap_or_else(|| panic!("no rule {handle} in {v}"));
    let exprs = rule["rule"]["expr"].as_array().expect("expr");
    exprs
        .iter()
        .find_map(|e| e["counter"]["packets"].as_u64())
        .unwrap_or_else(|| panic!("rule {handle} has no counter: {rule}"))
}

/// The handle of the rule of chain `family table chain` whose comment is `comment`.
pub fn handle_of(ns: &Netns, family: &str, table: &str, chain: &str, comment: &str) -> u64 {
    let out = ns.exec(&["nft", "-j", "list", "chain", family, table, chain]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("nft -j output");
    (v["nftables"].as_array().expect("array").iter())
        .find(|r| r["rule"]["comment"] == comment)
        .and_then(|r| r["rule"]["handle"].as_u64())
        .unwrap_or_else(|| panic!("no rule commented {comment} in {v}"))
}
