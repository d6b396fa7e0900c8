//! What a reading of one namespace's nftables ruleset keeps: the chains and rules that can drop
//! a packet (a rule whose verdict is `drop` or `reject`, a base chain whose policy is `drop`),
//! and each counted rule's packets, so that its growth over a window can be matched with the
//! probe's drops. iptables with the nft backend (Debian's `iptables`) makes the same objects.
//!
//! Names and comments come from whoever made the ruleset (an unprivileged user in a namespace
//! of their own can): they are cut to [`MAX_TEXT`] characters and escaped where read
//! ([`crate::sanitize::kernel_name`]).
use serde::{Deserialize, Serialize};

/// The longest table name, chain name or comment kept, in characters.
pub const MAX_TEXT: usize = 128;

/// A netfilter family (`NFPROTO_*`) as `nft` names it.
pub fn family_name(family: u8) -> &'static str {
    match family {
        1 => "inet",
        2 => "ip",
        3 => "arp",
        5 => "netdev",
        7 => "bridge",
        10 => "ip6",
        _ => "unknown",
    }
}

/// A base chain's hook as `nft` names it (the numbers depend on the family).
pub fn hook_name(family: u8, hook: u32) -> &'static str {
    match (family, hook) {
        (3, 0) => "input",
        (3, 1) => "output",
        (3, 2) => "forward",
        (5, 0) => "ingress",
        (5, 1) => "egress",
        (_, 0) => "prerouting",
        (_, 1) => "input",
        (_, 2) => "forward",
        (_, 3) => "output",
        (_, 4) => "postrouting",
        (_, 5) => "ingress",
        _ => "unknown",
    }
}

/// Where a rule or a policy lives: family, table and chain.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChainId {
    /// `NFPROTO_*`.
    pub family: u8,
    /// The table's name (escaped, cut).
    pub table: String,
    /// The chain's name (escaped, cut).
    pub chain: String,
}

impl std::fmt::Display for ChainId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let family = family_name(self.family);
        write!(f, "{family} {} {}", self.table, self.chain)
    }
}

/// A chain that can drop: a base chain (with its hook) whose policy is `drop`, or any chain
/// holding a drop rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    /// Family, table and name.
    pub id: ChainId,
    /// Its hook (`input`, `forward`, ...), for a base chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// Its priority, for a base chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Whether its policy is `drop`.
    pub policy_drop: bool,
}

/// What a rule's verdict does to a packet it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// `drop`.
    Drop,
    /// `reject` (drops, and answers with an ICMP error or a TCP reset).
    Reject,
    /// A verdict map (`vmap`): drops where the packet maps to `drop` (its counter, if any,
    /// counts every packet looked up, so it is never taken as a drop count).
    #[serde(rename = "vmap")]
    Map,
}

/// A rule whose verdict drops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// Its chain.
    pub id: ChainId,
    /// Its handle (`nft -a list ruleset` shows it as `# handle N`).
    pub handle: u64,
    /// Its place in its chain, from 1.
    pub position: u32,
    /// Its verdict.
    pub verdict: Verdict,
    /// Its counter's packets where it has one (`counter`; iptables rules always do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<u64>,
    /// Its comment (escaped, cut), where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Its expressions' kinds in order (`meta cmp payload cmp counter immediate`): what it
    /// matches on, not its full text (`nft -a list chain` prints that; see
    /// [`Rule::list_command`]).
    pub exprs: String,
}

impl Rule {
    /// The `nft` command that prints this rule's chain with handles, to find it by its handle.
    pub fn list_command(&self) -> String {
        let family = family_name(self.id.family);
        format!(
            "nft -a list chain {family} {} {}",
            self.id.table, self.id.chain
        )
    }
}

/// One namespace's ruleset as read: its generation, the chains and rules that can drop, and
/// what could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ruleset {
    /// The ruleset's generation (`NFTA_GEN_ID`): it changes with every change of the ruleset.
    pub generation: u32,
    /// Chains that can drop.
    pub chains: Vec<Chain>,
    /// Rules whose verdict drops, in chain order.
    pub rules: Vec<Rule>,
    /// Whether every rule was read (no dump was cut).
    pub whole: bool,
    /// What was cut or could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A counted rule's growth over a window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grown {
    /// The rule as last read.
    pub rule: Rule,
    /// Packets its counter counted in the window (`None`: no counter).
    pub grew: Option<u64>,
}

/// A namespace's ruleset over a window: its drop chains as last read and each drop rule's
/// counter growth since the window's start (or since the rule was first read).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesWindow {
    /// The generation last read.
    pub generation: u32,
    /// Chains that can drop.
    pub chains: Vec<Chain>,
    /// Rules whose verdict drops, with their growth.
    pub rules: Vec<Grown>,
    /// Whether the last reading read every rule.
    pub whole: bool,
    /// Whether a rule counted here was first read after the window's start (made meanwhile,
    /// or its namespace first read later): its growth then starts at its first reading.
    #[serde(default)]
    pub late: bool,
    /// Whether the ruleset's generation changed in the window (a rule, chain or policy was
    /// made, changed or deleted): what can drop now is not all that could.
    #[serde(default)]
    pub changed: bool,
    /// What was cut or could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl RulesWindow {
    /// The window from `baseline` (packets per rule at its start, by chain and handle) to
    /// `now`. A rule not in the baseline counts from zero: it was made in the window (a rule
    /// read for the first time after the start is put in the baseline by the caller).
    pub fn new(now: &Ruleset, baseline: &std::collections::HashMap<(ChainId, u64), u64>) -> Self {
        let rules = (now.rules.iter())
            .map(|r| Grown {
                grew: r.packets.map(|p| {
                    let base = baseline
                        .get(&(r.id.clone(), r.handle))
                        .copied()
                        .unwrap_or(0);
                    p.saturating_sub(base)
                }),
                rule: r.clone(),
            })
            .collect();
        Self {
            generation: now.generation,
            chains: now.chains.clone(),
            rules,
            whole: now.whole,
            late: false,
            changed: false,
            notes: now.notes.clone(),
        }
    }

    /// The growth between `earlier` and this window (both from the same start): what a window
    /// between two readings counted.
    pub fn since(&self, earlier: &RulesWindow) -> RulesWindow {
        let before: std::collections::HashMap<(&ChainId, u64), u64> = (earlier.rules.iter())
            .filter_map(|g| Some(((&g.rule.id, g.rule.handle), g.grew?)))
            .collect();
        let mut w = self.clone();
        for g in &mut w.rules {
            if let Some(grew) = &mut g.grew {
                let b = before.get(&(&g.rule.id, g.rule.handle)).copied();
                *grew = grew.saturating_sub(b.unwrap_or(0));
            }
        }
        w
    }
}
