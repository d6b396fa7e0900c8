//! Who dropped it: the rule, chain policy, program or socket a user would change, derived
//! beside a drop's key (like names, never part of it), each attribution saying how sure it is:
//! [`Culprit::Exact`] (a counter or the kernel said so), [`Culprit::Candidates`] (those that
//! could have, listed) or [`Culprit::Unknown`] (and why). A guess is never shown as a fact.
//!
//! Netfilter ([`netfilter`]): each namespace's nftables ruleset is read beside the kernel's
//! counters ([`crate::kcounters::nftables`]), and the growth of its counted drop rules over
//! the same window is matched with the probe's `NETFILTER_DROP` counts.
pub mod attached;
pub mod group;
pub mod netfilter;
pub mod only;
pub mod programs;
pub mod ruleset;
pub mod sockets;
pub mod text;
pub mod tui;
pub mod who;
pub mod window;

use std::collections::HashMap;

use self::ruleset::{ChainId, Rule, Verdict, family_name};
pub use self::who::{Culprit, Who};

/// The most culprits listed in one attribution; a note says how many more there were.
pub const MAX_LISTED: usize = 16;

impl Who {
    /// A rule as a culprit, with its growth.
    pub fn rule(r: &Rule, hook: Option<&str>, counted: Option<u64>) -> Who {
        Who::Rule {
            family: family_name(r.id.family).into(),
            table: r.id.table.clone(),
            chain: r.id.chain.clone(),
            hook: hook.map(Into::into),
            handle: r.handle,
            position: r.position,
            verdict: r.verdict,
            comment: r.comment.clone(),
            counted,
            exprs: r.exprs.clone(),
        }
    }

    /// A chain's drop policy as a culprit.
    pub fn policy(id: &ChainId, hook: Option<&str>) -> Who {
        Who::Policy {
            family: family_name(id.family).into(),
            table: id.table.clone(),
            chain: id.chain.clone(),
            hook: hook.map(Into::into),
        }
    }

    /// Who it is, without counts: what rows grouped by culprit group by (see [`group`]).
    pub fn identity(&self) -> String {
        match self {
            Who::Rule {
                family,
                table,
                chain,
                handle,
                ..
            } => format!("rule {family} {table} {chain} handle {handle}"),
            Who::Policy { .. } | Who::Program { .. } | Who::More { .. } => self.to_string(),
            Who::Socket {
                local,
                protocol,
                processes,
                ..
            } => format!("socket {} {protocol} {local}", processes.join(",")),
        }
    }

    /// Who it is as two runs share it (what `diff` matches rows by): [`Who::identity`] less
    /// what changes from run to run for the same culprit: a program's id (a new one at every
    /// load) and its tc filter's pref and handle, the holders' process ids.
    pub fn stable_identity(&self) -> String {
        match self {
            Who::Program {
                program, attach, ..
            } => {
                let name = match program.rsplit_once('#') {
                    Some((n, id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => n,
                    _ => program,
                };
                format!("{name} at {attach}")
            }
            Who::Socket {
                local,
                protocol,
                processes,
                ..
            } => {
                let comms: Vec<&str> = (processes.iter())
                    .map(
                        |p| match p.strip_suffix(']').and_then(|r| r.rsplit_once('[')) {
                            Some((comm, pid)) if pid.bytes().all(|b| b.is_ascii_digit()) => comm,
                            _ => p,
                        },
                    )
                    .collect();
                format!("socket {} {protocol} {local}", comms.join(","))
            }
            _ => self.identity(),
        }
    }

    /// A socket as its table cell names it: `traffic[4242] udp 127.0.0.1:5353 rcvbuf 2304`
    /// (the buffer where it was full); `None` for the others.
    pub fn socket_text(&self) -> Option<String> {
        let Who::Socket {
            local,
            protocol,
            processes,
            rcvbuf,
            buffer,
            ..
        } = self
        else {
            return None;
        };
        let mut s = format!("{} {protocol} {local}", processes.join(","));
        if let (true, Some(b)) = (buffer, rcvbuf) {
            s.push_str(&format!(" rcvbuf {b}"));
        }
        Some(s)
    }

    /// What to change about it: a sentence with the command that shows or changes it (names
    /// shell-quoted; one no quoting makes safe to paste, with a control character, is `NAME`).
    pub fn change(&self) -> String {
        let q = |s: &str| {
            crate::explain::fill::quote(s).map_or_else(|| "NAME".to_string(), |c| c.into_owned())
        };
        match self {
            Who::Rule {
                family,
                table,
                chain,
                handle,
                ..
            } => {
                let (table, chain) = (q(table), q(chain));
                format!(
                    "change or delete the rule: `nft -a list chain {family} {table} {chain}` shows \
                 it as `# handle {handle}`; `nft delete rule {family} {table} {chain} handle \
                 {handle}` removes it"
                )
            }
            Who::Policy {
                family,
                table,
                chain,
                ..
            } => {
                let (table, chain) = (q(table), q(chain));
                format!(
                    "accept what should pass before the chain ends, or change its policy: `nft \
                     chain {family} {table} {chain} '{{ policy accept; }}'`"
                )
            }
            Who::Program {
                program,
                attach,
                pref,
                handle,
            } => {
                let id = program.rsplit_once('#').map_or("", |(_, id)| id);
                let dev = q(attach.split(' ').next().unwrap_or(""));
                let dir = if attach.contains("egress") {
                    "egress"
                } else {
                    "ingress"
                };
                let list = if let (Some(p), Some(h)) = (pref, handle) {
                    // The handle is ours (`0x..`), never the kernel's text.
                    let h = q(h);
                    format!(
                        "`tc filter show dev {dev} {dir}` lists it as `pref {p} ... handle {h}`; \
                         `tc filter del dev {dev} {dir} pref {p} handle {h} bpf` removes it; "
                    )
                } else if attach.contains("clsact") {
                    format!("`tc filter show dev {dev} {dir}` lists it; ")
                } else if attach.contains("xdp") {
                    format!("`ip link show dev {dev}` shows it; ")
                } else {
                    String::new()
                };
                format!(
                    "change what {program} returns at {attach}, or detach it: {list}`bpftool \
                     prog show id {id}` shows it"
                )
            }
            Who::Socket {
                local,
                protocol,
                processes,
                rcvbuf,
                buffer,
                ..
            } => {
                let procs = if processes.is_empty() {
                    "the process".to_string()
                } else {
                    processes.join(", ")
                };
                let port = local.rsplit_once(':').map_or("", |(_, p)| p);
                let ss = if port.chars().all(|c| c.is_ascii_digit()) && !port.is_empty() {
                    format!("; `ss -uatnmp 'sport = :{port}'` shows its queue")
                } else {
                    String::new()
                };
                if *buffer {
                    let now = rcvbuf.map_or(String::new(), |b| format!(" (now {b} bytes)"));
                    format!(
                        "{procs} reads {protocol} {local} too slowly for what arrives: make it \
                         read faster, or raise its receive buffer{now} with SO_RCVBUF in the \
                         program, up to net.core.rmem_max (`sysctl -w net.core.rmem_max=N` \
                         raises that cap){ss}"
                    )
                } else {
                    format!(
                        "see what {procs} does with its socket {protocol} {local} (a socket \
                         filter it attached, its queue, the connection's state){ss}"
                    )
                }
            }
            Who::More { .. } => String::new(),
        }
    }
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Rule {
                family,
                table,
                chain,
                hook,
                handle,
                position,
                verdict,
                comment,
                counted,
                ..
            } => {
                write!(f, "rule {family} {table} {chain}")?;
                if let Some(h) = hook {
                    write!(f, " ({h})")?;
                }
                let v = match verdict {
                    Verdict::Drop => "drop",
                    Verdict::Reject => "reject",
                    Verdict::Map => "vmap",
                };
                write!(f, " handle {handle} #{position} {v}")?;
                if let Some(c) = comment {
                    write!(f, " \"{c}\"")?;
                }
                match (counted, verdict) {
                    (Some(n), _) => write!(f, " [counted {n}]"),
                    (None, Verdict::Map) => write!(f, " [drops where its map says drop]"),
                    (None, _) => write!(f, " [no counter]"),
                }
            }
            Who::Policy {
                family,
                table,
                chain,
                hook,
            } => {
                write!(f, "policy drop of chain {family} {table} {chain}")?;
                match hook {
                    Some(h) => write!(f, " ({h})"),
                    None => Ok(()),
                }
            }
            Who::Program {
                program,
                attach,
                pref,
                handle,
            } => {
                write!(f, "{program} at {attach}")?;
                match (pref, handle) {
                    (Some(p), Some(h)) => write!(f, " pref {p} handle {h}"),
                    _ => Ok(()),
                }
            }
            Who::Socket { inode, .. } => {
                write!(f, "socket {}", self.socket_text().unwrap_or_default())?;
                match inode {
                    Some(i) => write!(f, " (inode {i})"),
                    None => Ok(()),
                }
            }
            Who::More { count } => write!(f, "and {count} more"),
        }
    }
}

impl Culprit {
    /// Its certainty as a word: `exact`, `candidates`, `unknown`.
    pub fn certainty(&self) -> &'static str {
        match self {
            Culprit::Exact { .. } => "exact",
            Culprit::Candidates { .. } => "candidates",
            Culprit::Unknown { .. } => "unknown",
        }
    }

    /// Who is named (none where unknown).
    pub fn who(&self) -> &[Who] {
        match self {
            Culprit::Exact { who, .. } | Culprit::Candidates { who, .. } => who,
            Culprit::Unknown { .. } => &[],
        }
    }

    /// One line: `exact: rule ...; rule ...`, `candidates: ...`, `unknown: why`.
    pub fn line(&self) -> String {
        match self {
            Culprit::Unknown { why } => format!("unknown: {why}"),
            c => {
                let who: Vec<String> = c.who().iter().map(ToString::to_string).collect();
                format!("{}: {}", c.certainty(), who.join("; "))
            }
        }
    }

    /// Why it is as sure as it is.
    pub fn because(&self) -> &str {
        match self {
            Culprit::Exact { how, .. } => how,
            Culprit::Candidates { why, .. } | Culprit::Unknown { why } => why,
        }
    }

    /// What to change, one line per culprit named.
    pub fn changes(&self) -> Vec<String> {
        (self.who().iter())
            .map(Who::change)
            .filter(|c| !c.is_empty())
            .collect()
    }

    /// [`Culprit::changes`] with their commands run where the row's drops are: in its network
    /// namespace (`ip netns exec NAME`, `nsenter`), as the guide's checks are filled in.
    pub fn changes_for(&self, row: &crate::explain::fill::Target<'_>) -> Vec<String> {
        (self.changes().iter())
            .map(|c| crate::explain::fill::fill_line(c, row))
            .collect()
    }
}

/// `who` cut to [`MAX_LISTED`], with a [`Who::More`] saying how many were left out.
pub fn listed(mut who: Vec<Who>) -> Vec<Who> {
    if who.len() > MAX_LISTED {
        let more = who.len() - (MAX_LISTED - 1);
        who.truncate(MAX_LISTED - 1);
        who.push(Who::More { count: more });
    }
    who
}

/// Who dropped each row of `snap` that can be attributed (netfilter, tc and XDP rows); rows
/// left out have no culprit to name. Rows grouped by culprit keep the one they carry.
pub fn culprits(snap: &crate::model::Snapshot) -> HashMap<crate::model::DropKey, Culprit> {
    // Rows grouped by culprit carry theirs (derived before they were grouped).
    if snap.drops.iter().any(|d| d.key.attr.culprit.is_some()) {
        return (snap.drops.iter())
            .filter_map(|d| {
                let c = d.key.attr.culprit.as_ref()?.culprit.clone()?;
                Some((d.key.clone(), c))
            })
            .collect();
    }
    let mut all = netfilter::culprits(snap);
    all.extend(programs::culprits(snap));
    if snap.kernel.as_ref().is_some_and(|k| !k.attributed) {
        for c in all.values_mut() {
            *c = Culprit::Unknown {
                why: RECORDED_BEFORE.into(),
            };
        }
    }
    // A socket's holders travel with its key, recorded or not.
    all.extend(sockets::culprits(snap));
    all
}

/// Where rows are grouped by culprit: why the rows [`culprits`] leaves out although their
/// reason is a rule's, a program's or a socket's cannot be attributed (the kernel's view was
/// not read; no socket was keyed), so that they group as unknown, never as nobody's.
pub fn unattributed(snap: &crate::model::Snapshot) -> HashMap<crate::model::DropKey, Culprit> {
    let keyed = snap.drops.iter().any(|d| d.key.attr.socket.is_some());
    let mut out = HashMap::new();
    for d in &snap.drops {
        let k = &d.key;
        let why = if snap.kernel.is_none()
            && (&*k.reason.name == netfilter::REASON || programs::attributable(k))
        {
            NOT_READ
        } else if k.attr.socket.is_none() && sockets::socket_reason(&k.reason.name) {
            if keyed {
                "the kernel named no socket for these drops"
            } else {
                "not counted by socket (`--by ...,socket`, the default, names the process \
                 holding it)"
            }
        } else {
            continue;
        };
        out.insert(k.clone(), Culprit::Unknown { why: why.into() });
    }
    out
}

/// Why a row of a rule's or program's drops names no culprit before the kernel's view is read.
pub const NOT_READ: &str = "the kernel's view (rulesets, attached programs) was not read: no \
     reading yet, or counts recorded without one";

/// Why a recorded row names no culprit: recordings before format 8 do not carry rulesets and
/// programs.
pub const RECORDED_BEFORE: &str = "recorded before attribution (a recording before format 8 does not \
     carry rulesets and attached programs)";
