//! Who dropped a `NETFILTER_DROP` row: its namespace's drop rules and drop policies, matched
//! with their counters' growth over the same window.
//!
//! Where the kernel's nftables drops inside `nft_do_chain` (6.7 on, and older kernels that
//! have the change, such as Debian's 6.1), a rule's verdict and a chain's policy are at two
//! different call sites. Which site is which is learned from the running kernel, never
//! from an offset written here: the site whose drops the counted drop rules' growth accounts
//! for exactly is the rules' site, and the other one of `nft_do_chain` is then the policies'.
//! - Exact, rules: every drop of the scope (the row's namespace, or every namespace where rows
//!   are not grouped by it) at the rules' site is counted by the counted drop rules: they are
//!   named with their counts (an exact split where several grew).
//! - Exact, policy: the row is at the other site of `nft_do_chain`, and one base chain of
//!   the scope has a drop policy.
//! - Candidates otherwise: the rules that grew (with their counts), the drop rules without a
//!   counter, and the chains whose policy drops. Where the drops are read elsewhere (every
//!   netfilter drop in `nf_hook_slow`, on kernels without that change), a rule, a policy and
//!   conntrack look alike: only counters that account for every drop of the scope make it
//!   exact. Which it is is read from the drops' call site, never from the kernel's version.
//! - Unknown where the namespace's ruleset was not read, or it holds nothing that drops.
use std::collections::{BTreeMap, HashMap};

use super::{
    Culprit, Who, listed,
    ruleset::{Chain, ChainId, RulesWindow},
};
use crate::model::{DropKey, Snapshot};

/// The drop reason attributed here.
pub const REASON: &str = "NETFILTER_DROP";
/// The function nftables evaluates chains in (and drops in, where the kernel has that change).
const NFT_DO_CHAIN: &str = "nft_do_chain+";

/// Who dropped each `NETFILTER_DROP` row of `snap`, where the kernel's reading it carries holds
/// rulesets.
pub fn culprits(snap: &Snapshot) -> HashMap<DropKey, Culprit> {
    let mut out = HashMap::new();
    let Some(reading) = snap.kernel.as_deref() else {
        return out;
    };
    let rows: Vec<_> = (snap.drops.iter())
        .filter(|d| &*d.key.reason.name == REASON)
        .collect();
    if rows.is_empty() {
        return out;
    }
    // Rows grouped by namespace are attributed within it; others over every namespace read.
    let mut scopes: BTreeMap<Option<u64>, Vec<&crate::model::DropCount>> = BTreeMap::new();
    for d in rows {
        scopes.entry(d.key.attr.netns).or_default().push(d);
    }
    for (ns, rows) in scopes {
        let windows: Vec<&RulesWindow> = match ns {
            Some(ns) => reading.rules.get(&ns).into_iter().collect(),
            None => reading.rules.values().collect(),
        };
        let scope = Scope::new(&windows);
        let mut at: BTreeMap<&str, u64> = BTreeMap::new();
        for d in &rows {
            *at.entry(&d.key.location).or_default() += d.count;
        }
        let all: u64 = at.values().sum();
        for d in rows {
            let c = if windows.is_empty() {
                Culprit::Unknown {
                    why: format!(
                        "the ruleset of this namespace was not read (no reading yet, it could \
                         not be entered, or more than {} namespaces have drop rules)",
                        super::window::MAX_NAMESPACES
                    ),
                }
            } else {
                scope.attribute(&d.key.location, &at, all, hook_of(snap, &d.key))
            };
            out.insert(d.key.clone(), c);
        }
    }
    out
}

/// What can drop in one scope (a namespace, or all of them).
struct Scope<'a> {
    /// Counted drop rules that grew, with their growth and hook.
    grew: Vec<Who>,
    /// Their growth, summed.
    counted: u64,
    /// Drop rules without a counter.
    uncounted: Vec<Who>,
    /// Counted drop rules that did not grow by the last reading (they may have since).
    idle: Vec<Who>,
    /// Chains whose policy drops.
    policies: Vec<&'a Chain>,
    /// Whether every ruleset of the scope was read whole, from the window's start.
    whole: bool,
    /// Whether a ruleset of the scope changed in the window.
    changed: bool,
    /// Whether a counted rule was first read after the window began.
    late: bool,
    notes: Vec<&'a str>,
}

impl<'a> Scope<'a> {
    fn new(windows: &[&'a RulesWindow]) -> Self {
        let mut s = Scope {
            grew: Vec::new(),
            counted: 0,
            uncounted: Vec::new(),
            idle: Vec::new(),
            policies: Vec::new(),
            whole: windows.iter().all(|w| w.whole && !w.late),
            changed: windows.iter().any(|w| w.changed),
            late: windows.iter().any(|w| w.late),
            notes: windows
                .iter()
                .flat_map(|w| w.notes.iter().map(String::as_str))
                .collect(),
        };
        for w in windows {
            let hooks: HashMap<&ChainId, &str> = (w.chains.iter())
                .filter_map(|c| Some((&c.id, c.hook.as_deref()?)))
                .collect();
            for g in &w.rules {
                let hook = hooks.get(&g.rule.id).copied();
                match g.grew {
                    Some(0) => s.idle.push(Who::rule(&g.rule, hook, Some(0))),
                    Some(n) => {
                        s.counted = s.counted.saturating_add(n);
                        s.grew.push(Who::rule(&g.rule, hook, Some(n)));
                    }
                    None => s.uncounted.push(Who::rule(&g.rule, hook, None)),
                }
            }
            s.policies.extend(w.chains.iter().filter(|c| c.policy_drop));
        }
        s
    }

    /// The chains whose policy drops, on `hook` where it is known.
    fn policy_who(&self, hook: Option<&str>) -> Vec<Who> {
        (self.policies.iter())
            .filter(|c| hook.is_none() || c.hook.as_deref() == hook)
            .map(|c| Who::policy(&c.id, c.hook.as_deref()))
            .collect()
    }

    /// Who dropped the drops of a row at `location`; `at`: the scope's netfilter drops by
    /// location, `all` their sum.
    /// `hook`: the hook the row's stacks show, where they do.
    fn attribute(
        &self,
        location: &str,
        at: &BTreeMap<&str, u64>,
        all: u64,
        hook: Option<&str>,
    ) -> Culprit {
        let here = at.get(location).copied().unwrap_or(0);
        let caveat = match (self.whole, self.notes.first()) {
            (true, _) if self.changed => " (the ruleset changed in the window)".to_string(),
            (true, _) => String::new(),
            (false, Some(n)) => format!(" (the ruleset was read in part: {n})"),
            (false, None) => " (a rule was first read after the window began)".into(),
        };
        let counted = self.counted;
        // The counted rules' growth is every netfilter drop of the scope (whether or not every
        // rule was read: those read account for all of them).
        if !self.late && counted > 0 && counted == all {
            return Culprit::Exact {
                who: listed(self.grew.clone()),
                how: format!(
                    "the counters of these drop rules grew by {counted} in the window, as many \
                     as the netfilter drops counted here"
                ),
            };
        }
        let nft = location.starts_with(NFT_DO_CHAIN);
        // The rules' call site: the only one of nft_do_chain with at least as many drops as
        // the counted rules' growth (the rules' site holds those and the uncounted rules').
        let rules_site = (self.whole && counted > 0)
            .then(|| {
                let mut sites =
                    (at.iter()).filter(|(l, n)| l.starts_with(NFT_DO_CHAIN) && **n >= counted);
                match (sites.next(), sites.next()) {
                    (Some((l, _)), None) => Some(*l),
                    _ => None,
                }
            })
            .flatten();
        let rules = || {
            let mut who = self.grew.clone();
            who.extend(self.uncounted.iter().cloned());
            who
        };
        // Two call sites of nft_do_chain seen in the window: the rules' one holds no policy
        // drop. With one, the rules' verdicts and the policies' may share it (one call on some
        // builds, such as Debian's arm64 6.1), or no policy dropped: which, nothing tells.
        let two_sites = (at.keys()).filter(|l| l.starts_with(NFT_DO_CHAIN)).count() >= 2;
        let policies_here = !two_sites && !self.policies.is_empty();
        if nft && rules_site == Some(location) && policies_here && here != counted {
            let mut who = rules();
            who.extend(self.policy_who(hook));
            return Culprit::Candidates {
                who: listed(who),
                why: format!(
                    "counted drop rules account for {counted} of the {here} drops at this call \
                     site of nft_do_chain; the other {} were dropped by a rule without a \
                     counter or by a chain's policy, which no second call site in this window \
                     tells apart (some kernels drop both at one site){caveat}",
                    here.saturating_sub(counted)
                ),
            };
        }
        if nft && rules_site == Some(location) {
            if here == counted && self.uncounted.is_empty() {
                return Culprit::Exact {
                    who: listed(self.grew.clone()),
                    how: format!(
                        "the counters of these drop rules grew by {counted} in the window, as \
                         many as the drops at this call site (the rules' verdict site of \
                         nft_do_chain)"
                    ),
                };
            }
            // Every drop rule has a counter: each drop here is one of theirs, those after the
            // counters were read (drops going on) included.
            if self.uncounted.is_empty() && caveat.is_empty() {
                return Culprit::Exact {
                    who: listed(self.grew.clone()),
                    how: format!(
                        "at the rules' verdict site of nft_do_chain, and every drop rule here \
                         has a counter: these counted {counted} of the {here} drops here by \
                         the last reading of the counters (the rest came after it)"
                    ),
                };
            }
            return Culprit::Candidates {
                who: listed(rules()),
                why: format!(
                    "at the rules' verdict site of nft_do_chain: counted rules account for \
                     {counted} of the {here} drops here, the other {} were dropped by a rule \
                     without a counter (add `counter` to tell them apart){caveat}",
                    here.saturating_sub(counted)
                ),
            };
        }
        if nft && rules_site.is_some() {
            // The other call site: chain policies.
            let policies = self.policy_who(hook);
            return match policies.len() {
                1 if caveat.is_empty() => Culprit::Exact {
                    who: policies,
                    how: "dropped at nft_do_chain's other call site than the rules' verdicts \
                          (learned from the counted rules' drops in this window): a chain's \
                          policy, and one base chain here has policy drop"
                        .into(),
                },
                0 => Culprit::Unknown {
                    why: format!(
                        "dropped by a chain's policy (not at the rules' verdict site), but no \
                         base chain here has policy drop now{caveat}"
                    ),
                },
                _ => Culprit::Candidates {
                    who: listed(policies),
                    why: format!(
                        "dropped by a chain's policy (not at the rules' verdict site); which \
                         of these chains' cannot be told (nothing counts policy drops){caveat}"
                    ),
                },
            };
        }
        let mut who = rules();
        who.extend(self.policy_who(None));
        // Drops the counters had not counted by their reading may be a counted rule's too.
        if here > counted {
            who.extend(self.idle.iter().cloned());
        }
        // Where the stacks show the hook, only its base chains and the chains they may jump to
        // (chains without a hook) are candidates.
        let mut narrowed = String::new();
        if let Some(h) = hook {
            let on: Vec<Who> = (who.iter())
                .filter(|w| match w {
                    Who::Rule { hook, .. } | Who::Policy { hook, .. } => {
                        hook.as_deref().is_none_or(|x| x == h)
                    }
                    _ => true,
                })
                .cloned()
                .collect();
            if !on.is_empty() {
                who = on;
                narrowed = format!("; the stacks show the {h} hook: its chains are listed");
            }
        }
        if who.is_empty() {
            return Culprit::Unknown {
                why: format!(
                    "no rule here drops and no chain has policy drop now (a module such as \
                     conntrack, or a ruleset changed since){caveat}"
                ),
            };
        }
        let why = if nft && who.len() == 1 {
            format!(
                "the only rule or chain policy of this ruleset that drops, as read (nothing \
                 counted these drops){caveat}"
            )
        } else if nft {
            format!(
                "counted drop rules grew by {counted} in the window, the drops at nftables' \
                 call sites were {all} ({here} here): a rule without a counter and a chain's \
                 policy cannot be told apart{caveat}"
            )
        } else {
            format!(
                "these drops are at {}, outside nftables' own `nft_do_chain` (the call site read \
                 from the drops), where a rule's verdict, a chain's policy and other netfilter \
                 modules (conntrack) look alike; counted drop rules grew by {counted} of \
                 {all}{caveat}",
                location.split('+').next().unwrap_or(location),
            )
        };
        Culprit::Candidates {
            who: listed(who),
            why: why + &narrowed,
        }
    }
}

/// The netfilter hook a row's sampled stacks show (the caller of the hook nearest the drop),
/// where every stack of the row that shows one shows the same; `None` without stacks.
pub fn hook_of(snap: &Snapshot, key: &DropKey) -> Option<&'static str> {
    const CALLERS: &[(&str, &str)] = &[
        ("ip_local_deliver", "input"),
        ("ip6_input", "input"),
        ("arp_rcv", "input"),
        ("ip_forward", "forward"),
        ("ip6_forward", "forward"),
        ("__ip_local_out", "output"),
        ("__ip6_local_out", "output"),
        ("arp_xmit", "output"),
        ("ip_output", "postrouting"),
        ("ip6_output", "postrouting"),
        ("ip_rcv", "prerouting"),
        ("ipv6_rcv", "prerouting"),
    ];
    let mut found = None;
    for s in snap.stacks.iter().filter(|s| &s.key == key) {
        let hook = s.frames.iter().rev().find_map(|f| {
            let func = f.split('+').next().unwrap_or(f);
            CALLERS.iter().find(|(c, _)| *c == func).map(|(_, h)| *h)
        });
        match (found, hook) {
            (_, None) => {}
            (None, Some(h)) => found = Some(h),
            (Some(a), Some(b)) if a != b => return None,
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests;
