//! The nftables ruleset of the namespace the calling thread is in, read through netlink
//! (`NETLINK_NETFILTER`, the `nf_tables` subsystem), decoded by hand: the ruleset's generation
//! (`NFT_MSG_GETGEN`), its chains (`NFT_MSG_GETCHAIN`) and its rules (`NFT_MSG_GETRULE`), of
//! every family (iptables with the nft backend, ebtables and arptables make the same objects).
//! Only what can drop is kept (see [`crate::culprit::ruleset`]).
//!
//! Read again only when the generation changed since the last reading of the namespace: while
//! it has not, only the chains holding counted drop rules are dumped again (a dump filtered by
//! table and chain), for their counters. A generation that changes during a reading makes it
//! read once more; if it changes again, the reading is kept with a note.
//!
//! Bounded: a dump reads at most [`MAX_MESSAGES`] messages within
//! [`super::netlink::DUMP_TIME`], a receive waits at most [`super::netlink::RECV_TIMEOUT`],
//! and at most [`MAX_KEPT`] drop rules and chains are kept; each cut is a note (the ruleset is
//! then not `whole`), never a hang.
use std::{collections::BTreeMap, time::Duration};

use netlink_sys::{Socket, SocketAddr};

use super::netlink::{NLM_F_DUMP, NLM_F_REQUEST, RECV_TIMEOUT, answer};
use crate::{
    culprit::ruleset::{Chain, ChainId, MAX_TEXT, Rule, Ruleset, Verdict, hook_name},
    sanitize,
};

/// `NETLINK_NETFILTER`.
const NETLINK_NETFILTER: isize = 12;
/// `NFNL_SUBSYS_NFTABLES`, in a message type's high byte.
const SUBSYS: u16 = 10 << 8;
const NFT_MSG_GETCHAIN: u16 = 4;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_GETRULE: u16 = 7;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_NEWGEN: u16 = 15;
const NFT_MSG_GETGEN: u16 = 16;
const NLM_F_ACK: u16 = 4;
/// `NLM_F_DUMP_INTR`: the ruleset changed while it was dumped.
const NLM_F_DUMP_INTR: u16 = 0x10;
/// The bits of an attribute's type that are its type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// The most messages (chains or rules) one dump reads: a ruleset of 100,000 rules is cut.
pub const MAX_MESSAGES: usize = 200_000;
/// The most drop rules, and drop chains, kept of one namespace.
pub const MAX_KEPT: usize = 4096;
/// The most chains dumped again for their counters while the generation stands; with more, the
/// whole rule set is dumped again.
const MAX_REFRESHED_CHAINS: usize = 64;

/// The last ruleset read of each namespace, by inode: its generation gates the next reading.
pub type Cache = BTreeMap<u64, Ruleset>;

/// Reads the ruleset of the calling thread's namespace (`ns`), again only where its generation
/// changed since `cache` holds it; the result is cached too. `None`: this kernel has no
/// nf_tables (nothing to read).
/// `bounds`: [`HOST`] in the initial namespace, [`OTHER`] in others.
pub fn read(ns: u64, cache: &mut Cache, bounds: Bounds) -> Option<Ruleset> {
    let mut r = match read_with(cache.get(&ns), bounds.time) {
        Ok(r) => r?,
        Err(e) => Ruleset {
            notes: vec![format!("nftables ruleset: {e}")],
            ..Ruleset::default()
        },
    };
    if r.rules.len() > bounds.kept || r.chains.len() > bounds.kept {
        r.rules.truncate(bounds.kept);
        r.chains.truncate(bounds.kept);
        r.whole = false;
        r.notes.push(format!(
            "nftables ruleset: more than {} drop rules or chains, the rest not kept",
            bounds.kept
        ));
    }
    if cache.len() >= MAX_CACHED && !cache.contains_key(&ns) {
        cache.pop_first();
    }
    cache.insert(ns, r.clone());
    Some(r)
}

/// How much of one namespace's ruleset a reading takes.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// How long each dump may take.
    pub time: Duration,
    /// The most drop rules, and drop chains, kept.
    pub kept: usize,
}

/// The initial namespace's bounds.
pub const HOST: Bounds = Bounds {
    time: super::netlink::DUMP_TIME,
    kept: MAX_KEPT,
};

/// Any other namespace's: what a user makes in bulk in namespaces of their own costs their
/// readings a bounded time and dropscope a bounded memory (at most [`MAX_CACHED`] of them are
/// kept), never the host's.
pub const OTHER: Bounds = Bounds {
    time: Duration::from_millis(500),
    kept: 256,
};

/// The most namespaces whose last ruleset is kept between readings.
pub const MAX_CACHED: usize = 256;

fn read_with(last: Option<&Ruleset>, limit: Duration) -> std::io::Result<Option<Ruleset>> {
    let s = match Socket::new(NETLINK_NETFILTER) {
        Ok(s) => s,
        Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => return Ok(None),
        Err(e) => return Err(e),
    };
    socket2::SockRef::from(&s).set_read_timeout(Some(RECV_TIMEOUT))?;
    let mut seq = 0;
    let Some(generation) = generation(&s, &mut seq, limit)? else {
        return Ok(None);
    };
    if let Some(last) = last.filter(|l| l.generation == generation && l.whole) {
        let mut r = last.clone();
        if refresh(&s, &mut seq, &mut r, limit)?
            && self::generation(&s, &mut seq, limit)? == Some(generation)
        {
            return Ok(Some(r));
        }
    }
    let mut r = whole(&s, &mut seq, generation, limit)?;
    let after = self::generation(&s, &mut seq, limit)?;
    if after != Some(generation) {
        r = whole(&s, &mut seq, after.unwrap_or(0), limit)?;
        if self::generation(&s, &mut seq, limit)? != Some(r.generation) {
            r.whole = false;
            r.notes.push(
                "nftables ruleset: changed while it was read twice; read again next time".into(),
            );
        }
    }
    Ok(Some(r))
}

/// A request of `msg` with `flags`, family unspecified, and `attrs` (type, value).
fn request(msg: u16, flags: u16, seq: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&(SUBSYS | msg).to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // struct nfgenmsg: family (unspecified: all), version, resource id.
    b.extend_from_slice(&[0, 0, 0, 0]);
    for (kind, value) in attrs {
        b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        b.resize(b.len().next_multiple_of(4), 0);
    }
    let len = (b.len() as u32).to_ne_bytes();
    b[..4].copy_from_slice(&len);
    b
}

fn send(s: &Socket, b: &[u8]) -> std::io::Result<()> {
    s.send_to(b, &SocketAddr::new(0, 0), 0).map(|_| ())
}

/// The ruleset's generation; `None` where the kernel has no nf_tables.
fn generation(s: &Socket, seq: &mut u32, limit: Duration) -> std::io::Result<Option<u32>> {
    *seq += 1;
    send(s, &request(NFT_MSG_GETGEN, NLM_F_ACK, *seq, &[]))?;
    let mut id = None;
    let got = answer(s, *seq, "nftables generation", limit, |(kind, _, p)| {
        if kind == SUBSYS | NFT_MSG_NEWGEN {
            id = attrs(p.get(4..).unwrap_or_default())
                .find(|(t, _)| *t == 1)
                .and_then(|(_, v)| be32(v));
        }
        true
    });
    match got {
        Ok(_) => Ok(id),
        // No nf_tables module and none loadable.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The whole ruleset: its chains, then its rules.
fn whole(s: &Socket, seq: &mut u32, generation: u32, limit: Duration) -> std::io::Result<Ruleset> {
    let mut r = Ruleset {
        generation,
        whole: true,
        ..Ruleset::default()
    };
    *seq += 1;
    send(s, &request(NFT_MSG_GETCHAIN, NLM_F_DUMP, *seq, &[]))?;
    let (mut seen, mut intr) = (0usize, false);
    let mut all_chains = Vec::new();
    let note = answer(s, *seq, "nftables chains", limit, |(kind, flags, p)| {
        intr |= flags & NLM_F_DUMP_INTR != 0;
        if kind == SUBSYS | NFT_MSG_NEWCHAIN
            && let Some(c) = chain(p)
            && all_chains.len() < MAX_KEPT
        {
            all_chains.push(c);
        }
        seen += 1;
        seen < MAX_MESSAGES
    })?;
    cut(&mut r, note, intr);
    if all_chains.len() >= MAX_KEPT {
        cut(
            &mut r,
            Some(format!(
                "nftables chains: more than {MAX_KEPT}, the rest not read"
            )),
            false,
        );
    }
    *seq += 1;
    send(s, &request(NFT_MSG_GETRULE, NLM_F_DUMP, *seq, &[]))?;
    let note = rules(s, *seq, &mut r, limit)?;
    cut(&mut r, note, false);
    // The chains kept: those whose policy drops, and those holding a drop rule.
    let holding: std::collections::HashSet<&ChainId> = r.rules.iter().map(|x| &x.id).collect();
    r.chains = all_chains
        .into_iter()
        .filter(|c| c.policy_drop || holding.contains(&c.id))
        .collect();
    Ok(r)
}

/// Dumps again the rules of the chains holding counted drop rules, for their counters; false
/// where there are too many such chains or a dump was cut (then the whole ruleset is read).
fn refresh(s: &Socket, seq: &mut u32, r: &mut Ruleset, limit: Duration) -> std::io::Result<bool> {
    let mut chains: Vec<ChainId> = (r.rules.iter())
        .filter(|x| x.packets.is_some())
        .map(|x| x.id.clone())
        .collect();
    chains.dedup();
    if chains.len() > MAX_REFRESHED_CHAINS {
        return Ok(false);
    }
    let mut fresh = Ruleset::default();
    for c in &chains {
        *seq += 1;
        // Names were escaped when read (every escape starts with `\`, and a `\` is
        // doubled): a name that may have been changed so is read whole again.
        if c.table.contains('\\') || c.chain.contains('\\') {
            return Ok(false);
        }
        let table = nul_terminated(&c.table);
        let chain = nul_terminated(&c.chain);
        let mut b = request(
            NFT_MSG_GETRULE,
            NLM_F_DUMP,
            *seq,
            &[(1, &table), (2, &chain)],
        );
        b[16] = c.family;
        send(s, &b)?;
        if rules(s, *seq, &mut fresh, limit)?.is_some() {
            return Ok(false);
        }
    }
    let packets: std::collections::HashMap<(&ChainId, u64), Option<u64>> = fresh
        .rules
        .iter()
        .map(|x| ((&x.id, x.handle), x.packets))
        .collect();
    // Every counted rule must be found again (one deleted and made again under the same
    // generation cannot be, but a name the filter did not match can): else read it whole.
    for rule in r.rules.iter_mut().filter(|x| x.packets.is_some()) {
        match packets.get(&(&rule.id, rule.handle)) {
            Some(p @ Some(_)) => rule.packets = *p,
            _ => return Ok(false),
        }
    }
    Ok(true)
}

fn nul_terminated(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// Marks `r` cut, with `note`, where a dump was cut or interrupted.
fn cut(r: &mut Ruleset, note: Option<String>, interrupted: bool) {
    if let Some(n) = note {
        r.whole = false;
        r.notes.push(n);
    }
    if interrupted {
        r.whole = false;
        r.notes
            .push("nftables ruleset: changed while it was dumped".into());
    }
}

/// Reads a rule dump's answer into `r`'s drop rules; a note where it was cut.
fn rules(
    s: &Socket,
    seq: u32,
    r: &mut Ruleset,
    limit: Duration,
) -> std::io::Result<Option<String>> {
    let (mut seen, mut intr) = (0usize, false);
    let mut position: (Option<ChainId>, u32) = (None, 0);
    let mut full = false;
    let note = answer(s, seq, "nftables rules", limit, |(kind, flags, p)| {
        intr |= flags & NLM_F_DUMP_INTR != 0;
        seen += 1;
        if kind == SUBSYS | NFT_MSG_NEWRULE
            && let Some(mut x) = rule(p)
        {
            // A dump lists each chain's rules in order: a rule's place is its rank in it.
            if position.0.as_ref() != Some(&x.id) {
                position = (Some(x.id.clone()), 0);
            }
            position.1 += 1;
            x.position = position.1;
            if x.exprs.is_empty() {
                return seen < MAX_MESSAGES;
            }
            if r.rules.len() < MAX_KEPT {
                r.rules.push(x);
            } else {
                full = true;
            }
        }
        seen < MAX_MESSAGES
    })?;
    let mut note = note.map(|n| format!("{n} (at most {MAX_MESSAGES} rules in {limit:?})"));
    if full {
        note.get_or_insert_with(|| {
            format!("nftables rules: more than {MAX_KEPT} drop rules, the rest not kept")
        });
    }
    if intr {
        note.get_or_insert_with(|| "nftables ruleset: changed while it was dumped".into());
    }
    Ok(note)
}

/// The attributes in `b`: (type, value), while they are whole.
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let len = u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(b.get(at + 2..at + 4)?.try_into().ok()?);
        let value = b.get(at + 4..at.checked_add(len)?).filter(|_| len >= 4)?;
        at += len.next_multiple_of(4);
        Some((kind & NLA_TYPE_MASK, value))
    })
}

fn attr(b: &[u8], kind: u16) -> Option<&[u8]> {
    attrs(b).find(|(t, _)| *t == kind).map(|(_, v)| v)
}

fn be32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))
}

fn be64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))
}

/// A name from the kernel: up to its NUL, cut to [`MAX_TEXT`] and escaped.
fn text(v: &[u8]) -> String {
    let v = v.split(|b| *b == 0).next().unwrap_or_default();
    let s = String::from_utf8_lossy(&v[..v.len().min(4 * MAX_TEXT)]);
    sanitize::kernel_name(&sanitize::truncate(&s, MAX_TEXT)).into_owned()
}

/// A chain message (`struct nfgenmsg`, then attributes).
fn chain(p: &[u8]) -> Option<Chain> {
    let family = *p.first()?;
    let a = p.get(4..)?;
    let id = ChainId {
        family,
        table: text(attr(a, 1)?),
        chain: text(attr(a, 3)?),
    };
    let hook = attr(a, 4);
    Some(Chain {
        hook: hook
            .and_then(|h| be32(attr(h, 1)?))
            .map(|n| hook_name(family, n).to_string()),
        priority: hook.and_then(|h| be32(attr(h, 2)?)).map(|p| p as i32),
        // NF_DROP is 0: a base chain's policy attribute of 0 drops.
        policy_drop: hook.is_some() && attr(a, 5).and_then(be32) == Some(0),
        id,
    })
}

/// A rule message; `exprs` is left empty where its verdict does not drop.
fn rule(p: &[u8]) -> Option<Rule> {
    let family = *p.first()?;
    let a = p.get(4..)?;
    let id = ChainId {
        family,
        table: text(attr(a, 1)?),
        chain: text(attr(a, 2)?),
    };
    let handle = attr(a, 3).and_then(be64)?;
    let mut x = Rule {
        id,
        handle,
        position: 0,
        verdict: Verdict::Drop,
        packets: None,
        comment: attr(a, 7).and_then(comment),
        exprs: String::new(),
    };
    let mut kinds = Vec::new();
    let mut verdict = None;
    for (_, e) in attrs(attr(a, 4)?).take(256) {
        let name = attr(e, 1).map(text).unwrap_or_default();
        let data = attr(e, 2).unwrap_or_default();
        match name.as_str() {
            "counter" => x.packets = attr(data, 2).and_then(be64),
            // The verdict register is 0; a verdict's code: NF_DROP is 0.
            "immediate" if attr(data, 1).and_then(be32) == Some(0) => {
                let code = attr(data, 2)
                    .and_then(|d| attr(d, 2))
                    .and_then(|v| attr(v, 1))
                    .and_then(be32);
                verdict = code.map(|c| (c == 0).then_some(Verdict::Drop));
            }
            "reject" => verdict = Some(Some(Verdict::Reject)),
            // A verdict map (`vmap`) looked up into the verdict register: it may drop.
            "lookup" if attr(data, 3).and_then(be32) == Some(0) => {
                verdict = Some(Some(Verdict::Map));
            }
            "target" => {
                let t = attr(data, 1).map(text).unwrap_or_default();
                verdict = Some(match t.as_str() {
                    "DROP" => Some(Verdict::Drop),
                    "REJECT" => Some(Verdict::Reject),
                    _ => None,
                });
            }
            "match"
                if attr(data, 1).map(text).as_deref() == Some("comment") && x.comment.is_none() =>
            {
                x.comment = attr(data, 3).map(text).filter(|c| !c.is_empty());
            }
            _ => {}
        }
        if kinds.len() < 32 {
            kinds.push(name);
        }
    }
    if let Some(Some(v)) = verdict {
        x.verdict = v;
        // A verdict map's counter counts every packet it looked up, not its drops.
        if v == Verdict::Map {
            x.packets = None;
        }
        x.exprs = kinds.join(" ");
    }
    Some(x)
}

/// A rule's comment from its user data (`NFTNL_UDATA_RULE_COMMENT`, type 0, as `nft` and
/// iptables write it).
fn comment(u: &[u8]) -> Option<String> {
    let mut at = 0;
    while at + 2 <= u.len() {
        let (kind, len) = (u[at], u[at + 1] as usize);
        let v = u.get(at + 2..at + 2 + len)?;
        if kind == 0 {
            return Some(text(v)).filter(|c| !c.is_empty());
        }
        at += 2 + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        b.resize(b.len().next_multiple_of(4), 0);
        b
    }

    fn expr(name: &str, data: Vec<u8>) -> Vec<u8> {
        let mut e = nla(1, format!("{name}\0").as_bytes());
        e.extend(nla(2 | 0x8000, &data));
        nla(1 | 0x8000, &e)
    }

    /// A rule message: `nfgenmsg` then attributes, as the kernel sends it.
    fn rule_message(table: &str, chain: &str, comment: &[u8], verdict: u32) -> Vec<u8> {
        let mut p = vec![1, 0, 0, 0];
        p.extend(nla(1, format!("{table}\0").as_bytes()));
        p.extend(nla(2, format!("{chain}\0").as_bytes()));
        p.extend(nla(3, &7u64.to_be_bytes()));
        let mut exprs = expr(
            "counter",
            [nla(1, &9u64.to_be_bytes()), nla(2, &42u64.to_be_bytes())].concat(),
        );
        let code = nla(1, &verdict.to_be_bytes());
        let data = nla(2 | 0x8000, &nla(2 | 0x8000, &code));
        exprs.extend(expr(
            "immediate",
            [nla(1, &0u32.to_be_bytes()), data].concat(),
        ));
        p.extend(nla(4 | 0x8000, &exprs));
        let mut udata = vec![0, comment.len() as u8];
        udata.extend_from_slice(comment);
        p.extend(nla(7, &udata));
        p
    }

    #[test]
    fn a_drop_rule_is_read_with_its_counter_and_comment() {
        let r = rule(&rule_message("t", "input", b"kube\0", 0)).expect("a rule");
        assert_eq!(
            (r.handle, r.packets, r.verdict),
            (7, Some(42), Verdict::Drop)
        );
        assert_eq!(r.comment.as_deref(), Some("kube"));
        assert_eq!(r.exprs, "counter immediate");
        assert_eq!(r.id.to_string(), "inet t input");
        // An accept rule is read, but kept as nothing that drops.
        assert!(
            rule(&rule_message("t", "input", b"x", 1))
                .expect("a rule")
                .exprs
                .is_empty()
        );
    }

    #[test]
    fn a_verdict_map_may_drop_and_its_counter_is_not_a_drop_count() {
        let mut p = vec![2, 0, 0, 0];
        p.extend(nla(1, b"t\0"));
        p.extend(nla(2, b"c\0"));
        p.extend(nla(3, &3u64.to_be_bytes()));
        let mut exprs = expr("counter", nla(2, &5u64.to_be_bytes()));
        exprs.extend(expr(
            "lookup",
            [nla(1, b"__map0\0"), nla(3, &0u32.to_be_bytes())].concat(),
        ));
        p.extend(nla(4 | 0x8000, &exprs));
        let r = rule(&p).expect("a rule");
        assert_eq!((r.verdict, r.packets), (Verdict::Map, None));
        // A set lookup (no verdict register) does not make a rule drop.
        let mut p2 = p.clone();
        let at = p2.len() - 4;
        p2[at..].copy_from_slice(&1u32.to_be_bytes());
        assert!(rule(&p2).expect("a rule").exprs.is_empty());
    }

    #[test]
    fn hostile_names_are_escaped_and_cut_and_truncated_messages_never_panic() {
        let long = "\u{1b}[2J".repeat(200);
        let m = rule_message(&long, "c\u{202e}\\", b"\x07bell", 0);
        let r = rule(&m).expect("a rule");
        assert!(r.id.table.chars().count() <= 4 * MAX_TEXT, "{}", r.id.table);
        assert!(!r.id.table.contains('\u{1b}'));
        assert!(!r.id.chain.contains('\u{202e}'));
        assert!(r.id.chain.ends_with("\\\\"), "{}", r.id.chain);
        assert!(!r.comment.expect("comment").contains('\u{7}'));
        for cut in 0..m.len() {
            let _ = rule(&m[..cut]);
            let _ = chain(&m[..cut]);
        }
        // An attribute claiming more bytes than there are ends the read.
        let mut bad = m.clone();
        bad[4] = 0xff;
        bad[5] = 0xff;
        assert!(rule(&bad).is_none());
    }
}
