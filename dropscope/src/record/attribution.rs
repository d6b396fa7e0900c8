//! Attribution frames (format version 8; their deltas, version 9, are
//! `attribution_delta`'s): what a kernel reading says of who could have dropped,
//! beside its counters: each namespace's nftables drop rules and chains with their counters'
//! growth ([`RulesWindow`]), the BPF programs attached to its devices ([`Attached`]) and its
//! full TCP listeners ([`Listener`]). Written when they change, before the first snapshot frame
//! that carries them, so that a replay derives the same culprits as live
//! ([`crate::culprit::culprits`]). A recording without them (before version 8) reads as
//! "recorded before attribution".
//!
//! Bounded like kernel frames: at most [`MAX_FRAME`] bytes decompressed, [`MAX_NETNS`]
//! namespaces, [`MAX_RULES`] rules and chains, [`MAX_ATTACHED`] programs and [`MAX_LISTENERS`]
//! listeners a namespace; the writer leaves out what does not fit, with a note. Text is plain
//! (escaped where it was read) and at most [`MAX_TEXT_BYTES`] bytes; anything else is refused.
use std::collections::BTreeMap;

use super::{
    format::{Malformed, Reader, put_str, put_uvarint},
    kernel::{MAX_ERROR, MAX_NETNS},
};
use crate::{
    culprit::{
        programs::{Attached, TcFilter},
        ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict},
    },
    model::KernelReading,
    vocab::{reading::Listener, socket::Holder},
};

/// Largest attribution frame payload, decompressed.
pub const MAX_FRAME: usize = 1 << 20;
/// Most drop rules and chains of one namespace (as many as the ruleset reader keeps).
pub const MAX_RULES: usize = 4096;
/// Most programs attached in one namespace.
pub const MAX_ATTACHED: usize = 1024;
/// Most full listeners of one namespace (as many as the listeners' reader reads).
pub const MAX_LISTENERS: usize = 256;
/// Most notes of one namespace's ruleset.
const MAX_NOTES: usize = 16;
/// Longest text (a table, chain, comment, device, program or process name, an address).
pub const MAX_TEXT_BYTES: usize = 1024;
/// The characters the writer keeps of a text (each at most 4 bytes, the last one `…`).
const TEXT_CHARS: usize = 256;
/// Room kept for the frame's notes.
const NOTES_ROOM: usize = 4 << 10;

/// What an attribution frame holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Whether the reading read rulesets and attached programs.
    pub attributed: bool,
    /// Per namespace, its drop rules and chains over the window.
    pub rules: BTreeMap<u64, RulesWindow>,
    /// Per namespace, the programs attached to its devices.
    pub attached: BTreeMap<u64, Vec<Attached>>,
    /// Per namespace, its full TCP listeners.
    pub listeners: BTreeMap<u64, Vec<Listener>>,
    /// What the writer left out.
    pub notes: Vec<String>,
}

/// What a reading says of who could have dropped, as compared.
type Part<'a> = (
    bool,
    &'a BTreeMap<u64, RulesWindow>,
    &'a BTreeMap<u64, Vec<Attached>>,
    &'a BTreeMap<u64, Vec<Listener>>,
);

fn part(r: &KernelReading) -> Part<'_> {
    (r.attributed, &r.rules, &r.attached, &r.listeners)
}

/// Whether `now` says of who could have dropped other than `last` (the reading whose
/// attribution was written last; none: a reader's, nothing attributed): the writer writes an
/// attribution frame only then.
pub(super) fn changed(last: Option<&KernelReading>, now: &KernelReading) -> bool {
    match last {
        Some(l) => part(l) != part(now),
        None => part(&KernelReading::default()) != part(now),
    }
}

impl Attribution {
    /// Whether `r` says what this says.
    pub fn same_as(&self, r: &KernelReading) -> bool {
        (
            self.attributed,
            &self.rules,
            &self.attached,
            &self.listeners,
        ) == part(r)
    }

    /// Puts this into `r` (in place of what it had), its notes after `r`'s.
    pub fn apply(&self, r: &mut KernelReading) {
        r.attributed = self.attributed;
        r.rules.clone_from(&self.rules);
        r.attached.clone_from(&self.attached);
        r.listeners.clone_from(&self.listeners);
        r.errors.extend(self.notes.iter().cloned());
    }
}

/// Text as a frame holds it: escaped for a terminal (a reader's text already is) and cut.
fn put_text(out: &mut Vec<u8>, s: &str) {
    put_str(out, &crate::sanitize::terminal_cell(s, TEXT_CHARS));
}

/// Text from a frame: refused unless plain and at most [`MAX_TEXT_BYTES`].
fn text(r: &mut Reader) -> Result<String, Malformed> {
    let s = r.str()?;
    if s.len() > MAX_TEXT_BYTES || crate::sanitize::terminal(s) != s {
        return Err(Malformed("an attribution text too long or not plain"));
    }
    Ok(s.to_owned())
}

/// An optional value: a tag (0 none, 1 some), then the value.
fn put_opt<T>(out: &mut Vec<u8>, v: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => put_uvarint(out, 0),
        Some(v) => {
            put_uvarint(out, 1);
            put(out, v);
        }
    }
}

fn opt<T>(
    r: &mut Reader,
    read: impl FnOnce(&mut Reader) -> Result<T, Malformed>,
) -> Result<Option<T>, Malformed> {
    match r.uvarint()? {
        0 => Ok(None),
        1 => read(r).map(Some),
        _ => Err(Malformed("an attribution tag other than 0 or 1")),
    }
}

fn small<T: TryFrom<u64>>(r: &mut Reader) -> Result<T, Malformed> {
    T::try_from(r.uvarint()?).map_err(|_| Malformed("an attribution number too large"))
}

fn put_chain_id(out: &mut Vec<u8>, id: &ChainId) {
    put_uvarint(out, u64::from(id.family));
    put_text(out, &id.table);
    put_text(out, &id.chain);
}

fn chain_id(r: &mut Reader) -> Result<ChainId, Malformed> {
    Ok(ChainId {
        family: small(r)?,
        table: text(r)?,
        chain: text(r)?,
    })
}

/// A window's flags as a frame writes them.
pub(super) fn bits(w: &RulesWindow) -> u64 {
    u64::from(w.whole) | u64::from(w.late) << 1 | u64::from(w.changed) << 2
}

fn put_window(out: &mut Vec<u8>, w: &RulesWindow) {
    put_uvarint(out, u64::from(w.generation));
    put_uvarint(out, bits(w));
    let chains = &w.chains[..w.chains.len().min(MAX_RULES)];
    let rules = &w.rules[..w.rules.len().min(MAX_RULES - chains.len())];
    put_uvarint(out, chains.len() as u64);
    for c in chains {
        put_chain_id(out, &c.id);
        put_opt(out, c.hook.as_deref(), put_text);
        // A priority as a zigzag number: small either way.
        put_opt(out, c.priority, |o, p| {
            put_uvarint(o, super::format::zigzag_diff(0, p as i64 as u64));
        });
        put_uvarint(out, u64::from(c.policy_drop));
    }
    put_uvarint(out, rules.len() as u64);
    for g in rules {
        let r = &g.rule;
        put_chain_id(out, &r.id);
        put_uvarint(out, r.handle);
        put_uvarint(out, u64::from(r.position));
        put_uvarint(
            out,
            match r.verdict {
                Verdict::Drop => 0,
                Verdict::Reject => 1,
                Verdict::Map => 2,
            },
        );
        put_opt(out, r.packets, put_uvarint);
        put_opt(out, r.comment.as_deref(), put_text);
        put_text(out, &r.exprs);
        put_opt(out, g.grew, put_uvarint);
    }
    let mut notes: Vec<String> = (w.notes.iter())
        .filter(|n| n.len() <= MAX_ERROR)
        .take(MAX_NOTES)
        .cloned()
        .collect();
    let left = w.chains.len() + w.rules.len() - chains.len() - rules.len();
    if left > 0 && notes.len() < MAX_NOTES {
        notes.push(format!(
            "{left} drop rules and chains not recorded: a recording holds at most {MAX_RULES} \
             a namespace"
        ));
    }
    put_uvarint(out, notes.len() as u64);
    for n in &notes {
        put_text(out, n);
    }
}

fn window(r: &mut Reader) -> Result<RulesWindow, Malformed> {
    let generation = small(r)?;
    let bits = r.uvarint()?;
    if bits > 7 {
        return Err(Malformed("unknown ruleset bits"));
    }
    let n = r.count(6)?;
    if n > MAX_RULES {
        return Err(Malformed("more drop chains than a recording holds"));
    }
    let mut chains = Vec::with_capacity(n);
    for _ in 0..n {
        chains.push(Chain {
            id: chain_id(r)?,
            hook: opt(r, text)?,
            priority: opt(r, |r| {
                let p = super::format::apply_zigzag(0, r.uvarint()?) as i64;
                i32::try_from(p).map_err(|_| Malformed("a chain priority beyond 32 bits"))
            })?,
            policy_drop: match r.uvarint()? {
                0 => false,
                1 => true,
                _ => return Err(Malformed("a chain policy other than 0 or 1")),
            },
        });
    }
    let m = r.count(10)?;
    if n + m > MAX_RULES {
        return Err(Malformed("more drop rules than a recording holds"));
    }
    let mut rules = Vec::with_capacity(m);
    for _ in 0..m {
        let id = chain_id(r)?;
        let handle = r.uvarint()?;
        let position = small(r)?;
        let verdict = match r.uvarint()? {
            0 => Verdict::Drop,
            1 => Verdict::Reject,
            2 => Verdict::Map,
            _ => return Err(Malformed("an unknown rule verdict")),
        };
        let rule = Rule {
            id,
            handle,
            position,
            verdict,
            packets: opt(r, |r| r.uvarint())?,
            comment: opt(r, text)?,
            exprs: text(r)?,
        };
        rules.push(Grown {
            rule,
            grew: opt(r, |r| r.uvarint())?,
        });
    }
    let k = r.count(1)?;
    if k > MAX_NOTES {
        return Err(Malformed("more ruleset notes than a recording holds"));
    }
    let mut notes = Vec::with_capacity(k);
    for _ in 0..k {
        notes.push(text(r)?);
    }
    Ok(RulesWindow {
        generation,
        chains,
        rules,
        whole: bits & 1 != 0,
        late: bits & 2 != 0,
        changed: bits & 4 != 0,
        notes,
    })
}

fn put_attached(out: &mut Vec<u8>, list: &[Attached]) {
    let list = &list[..list.len().min(MAX_ATTACHED)];
    put_uvarint(out, list.len() as u64);
    for a in list {
        put_text(out, &a.device);
        put_text(out, &a.hook);
        put_uvarint(out, u64::from(a.prog));
        put_text(out, &a.name);
        put_opt(out, a.filter, |out, f| {
            put_uvarint(out, u64::from(f.pref));
            put_uvarint(out, u64::from(f.handle));
        });
    }
}

fn attached(r: &mut Reader) -> Result<Vec<Attached>, Malformed> {
    let n = r.count(4)?;
    if n > MAX_ATTACHED {
        return Err(Malformed("more attached programs than a recording holds"));
    }
    (0..n)
        .map(|_| {
            Ok(Attached {
                device: text(r)?,
                hook: text(r)?,
                prog: small(r)?,
                name: text(r)?,
                filter: opt(r, |r| {
                    Ok(TcFilter {
                        pref: small(r)?,
                        handle: small(r)?,
                    })
                })?,
            })
        })
        .collect()
}

fn put_listeners(out: &mut Vec<u8>, list: &[Listener]) {
    let list = &list[..list.len().min(MAX_LISTENERS)];
    put_uvarint(out, list.len() as u64);
    for l in list {
        put_text(out, &l.addr);
        put_uvarint(out, u64::from(l.port));
        put_uvarint(out, u64::from(l.queue));
        put_uvarint(out, u64::from(l.backlog));
        put_uvarint(out, l.inode);
        put_opt(out, l.process.as_ref(), |o, h| {
            put_uvarint(o, u64::from(h.pid));
            put_text(o, &h.comm);
        });
    }
}

fn listeners(r: &mut Reader) -> Result<Vec<Listener>, Malformed> {
    let n = r.count(6)?;
    if n > MAX_LISTENERS {
        return Err(Malformed("more listeners than a recording holds"));
    }
    (0..n)
        .map(|_| {
            Ok(Listener {
                addr: text(r)?,
                port: small(r)?,
                queue: small(r)?,
                backlog: small(r)?,
                inode: r.uvarint()?,
                process: opt(r, |r| {
                    Ok(Holder {
                        pid: small(r)?,
                        comm: text(r)?,
                    })
                })?,
            })
        })
        .collect()
}

/// The payload of an attribution frame of `r`: at most [`MAX_FRAME`] bytes whatever `r`
/// holds; namespaces beyond [`MAX_NETNS`] or the frame's room are left out, with a note.
pub fn encode(r: &KernelReading) -> Vec<u8> {
    encode_whole(r).0
}

/// [`encode`], and whether the frame holds every namespace of `r` (a delta may follow it).
pub fn encode_whole(r: &KernelReading) -> (Vec<u8>, bool) {
    let namespaces: std::collections::BTreeSet<u64> = (r.rules.keys())
        .chain(r.attached.keys())
        .chain(r.listeners.keys())
        .copied()
        .collect();
    let room = MAX_FRAME - NOTES_ROOM;
    let (mut blocks, mut used, mut left) = (Vec::new(), 0, 0usize);
    for ns in namespaces {
        let mut b = Vec::new();
        put_uvarint(&mut b, ns);
        let (w, a, l) = (r.rules.get(&ns), r.attached.get(&ns), r.listeners.get(&ns));
        put_uvarint(
            &mut b,
            u64::from(w.is_some()) | u64::from(a.is_some()) << 1 | u64::from(l.is_some()) << 2,
        );
        if let Some(w) = w {
            put_window(&mut b, w);
        }
        if let Some(a) = a {
            put_attached(&mut b, a);
        }
        if let Some(l) = l {
            put_listeners(&mut b, l);
        }
        if blocks.len() == MAX_NETNS || used + b.len() > room {
            left += 1;
            continue;
        }
        used += b.len();
        blocks.push(b);
    }
    let mut p = Vec::with_capacity(used + 64);
    put_uvarint(&mut p, u64::from(r.attributed));
    put_uvarint(&mut p, blocks.len() as u64);
    for b in blocks {
        p.extend_from_slice(&b);
    }
    if left > 0 {
        put_uvarint(&mut p, 1);
        put_str(
            &mut p,
            &format!(
                "{left} namespaces' rulesets, attached programs and listeners not recorded: \
                 a recording's attribution holds at most {MAX_NETNS} namespaces and 1 MiB"
            ),
        );
    } else {
        put_uvarint(&mut p, 0);
    }
    (p, left == 0)
}

/// Decodes an attribution frame's payload, refusing anything the writer would not have
/// written.
pub fn decode(payload: &[u8]) -> Result<Attribution, Malformed> {
    if payload.len() > MAX_FRAME {
        return Err(Malformed("an attribution frame beyond 1 MiB"));
    }
    let mut r = Reader::new(payload);
    let attributed = match r.uvarint()? {
        0 => false,
        1 => true,
        _ => return Err(Malformed("unknown attribution flags")),
    };
    let mut out = Attribution {
        attributed,
        ..Default::default()
    };
    super::kernel::each_netns(&mut r, |r, ns| {
        let mask = r.uvarint()?;
        if mask == 0 || mask > 7 {
            return Err(Malformed("an attribution namespace holding nothing known"));
        }
        if mask & 1 != 0 {
            out.rules.insert(ns, window(r)?);
        }
        if mask & 2 != 0 {
            out.attached.insert(ns, attached(r)?);
        }
        if mask & 4 != 0 {
            out.listeners.insert(ns, listeners(r)?);
        }
        Ok(())
    })?;
    out.notes = super::kernel::read_notes(&mut r)?;
    if out.notes.len() > 1 {
        return Err(Malformed("more than one attribution note"));
    }
    r.finish()?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A reading with a drop rule, a drop policy, a tc program and a full listener.
    pub(crate) fn attributed() -> KernelReading {
        let id = ChainId {
            family: 2,
            table: "filter".into(),
            chain: "input".into(),
        };
        let rule = Rule {
            id: id.clone(),
            handle: 4,
            position: 1,
            verdict: Verdict::Drop,
            packets: Some(1200),
            comment: Some("no \\u{1b} udp".into()),
            exprs: "meta cmp counter immediate".into(),
        };
        let window = RulesWindow {
            generation: 7,
            chains: vec![Chain {
                id,
                hook: Some("input".into()),
                priority: Some(-150),
                policy_drop: true,
            }],
            rules: vec![Grown {
                rule,
                grew: Some(1000),
            }],
            whole: true,
            late: false,
            changed: true,
            notes: vec!["cut".into()],
        };
        KernelReading {
            unix_ms: 5,
            initial_netns: 1,
            attributed: true,
            rules: [(4026532999, window)].into(),
            attached: [(
                4026532999,
                vec![Attached {
                    device: "veth0".into(),
                    hook: "ingress".into(),
                    prog: 42,
                    name: "dsdrop".into(),
                    filter: Some(TcFilter {
                        pref: 49152,
                        handle: 1,
                    }),
                }],
            )]
            .into(),
            listeners: [(
                1,
                vec![Listener {
                    addr: "127.0.0.1:8080".into(),
                    port: 8080,
                    queue: 2,
                    backlog: 1,
                    inode: 991,
                    process: Some(Holder {
                        pid: 812,
                        comm: "nginx".into(),
                    }),
                }],
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let r = attributed();
        let p = encode(&r);
        let back = decode(&p).expect("decodes");
        assert!(back.same_as(&r), "{back:?}");
        let mut applied = KernelReading::default();
        back.apply(&mut applied);
        assert_eq!(applied.rules, r.rules);
        assert!(applied.attributed);
        // Truncated anywhere: an error, never a panic.
        for n in 0..p.len() {
            assert!(decode(&p[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn hostile_text_is_written_escaped_and_crafted_frames_are_refused() {
        let mut r = attributed();
        let w = r.rules.get_mut(&4026532999).expect("window");
        w.rules[0].rule.comment = Some("\u{1b}[2J".repeat(400));
        let back = decode(&encode(&r)).expect("what is written decodes");
        let c = back.rules[&4026532999].rules[0].rule.comment.clone();
        let c = c.expect("a comment");
        assert!(
            c.starts_with("\\u{1b}[2J") && c.len() <= MAX_TEXT_BYTES,
            "{c}"
        );
        // A crafted control character, an unknown tag, a namespace with nothing.
        let mut p = Vec::new();
        for v in [1, 1, 9, 2, 1] {
            put_uvarint(&mut p, v);
        }
        put_str(&mut p, "\u{1b}");
        for v in [0, 0, 0] {
            put_uvarint(&mut p, v);
        }
        assert!(decode(&p).is_err());
        assert!(decode(&[2, 0, 0]).is_err());
        assert!(decode(&[1, 1, 9, 0, 0]).is_err());
        // More listeners than a namespace has.
        let mut p = Vec::new();
        for v in [1, 1, 9, 4, 257] {
            put_uvarint(&mut p, v);
        }
        p.extend(std::iter::repeat_n(0, 257 * 6));
        assert!(decode(&p).is_err());
    }

    #[test]
    fn a_reading_too_large_for_a_frame_is_cut_with_a_note() {
        let mut r = attributed();
        let one = r.rules[&4026532999].clone();
        for ns in 0..(MAX_NETNS as u64 + 10) {
            let mut w = one.clone();
            w.rules = vec![w.rules[0].clone(); 40];
            r.rules.insert(10_000 + ns, w);
        }
        let p = encode(&r);
        assert!(p.len() <= MAX_FRAME, "{}", p.len());
        let back = decode(&p).expect("decodes");
        assert!(back.rules.len() > 100 && back.rules.len() < r.rules.len());
        let note = back.notes.first().expect("a note");
        let left = r.rules.len() - back.rules.len();
        assert!(note.starts_with(&format!("{left} namespaces'")), "{note}");
    }
}
