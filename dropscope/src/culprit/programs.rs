//! Who dropped a tc or XDP row: the BPF programs attached where the kernel says the drop
//! happened (the row's namespace, device and direction), named with their ids, and the exact
//! one where its verdict counter ran (`progs`: fexit on the program, which some hosts refuse).
//!
//! - A program's own verdict row (`XDP_DROP`, `XDP_ABORTED`, `TC_SHOT`: its verdict counter)
//!   is exact: the program at its attach point.
//! - A `TC_INGRESS`/`TC_EGRESS` (or other `TC_*`) row, and an `XDP` row (or a veth's XDP
//!   drop: `NOT_SPECIFIED` at `veth_xdp_rcv_skb`, as the ledger matches it), is exact where the
//!   verdict counters of the programs at that device and direction grew by as many as the row
//!   counts; otherwise the programs there are candidates (a tc filter that is not BPF, such as
//!   `u32 ... action drop`, drops likewise, and is not listed); with none there, unknown.
use std::collections::{BTreeMap, HashMap};

pub use super::attached::{Attached, TcFilter};
use super::{Culprit, Who, listed};
use crate::model::{DropKey, KernelReading, Snapshot, programs};

impl Attached {
    fn who(&self) -> Who {
        Who::Program {
            program: self.program(),
            attach: self.attach(),
            pref: self.filter.map(|f| f.pref),
            handle: self.filter.map(TcFilter::handle_text),
        }
    }
}

/// The hooks where a drop of `key`'s reason (and, for a veth's XDP, location) happens: tc's
/// ingress or egress, XDP's.
fn hooks_of(key: &DropKey) -> Option<&'static [&'static str]> {
    const INGRESS: &[&str] = &["ingress", "tcx-ingress"];
    const EGRESS: &[&str] = &["egress", "tcx-egress", "netkit-primary", "netkit-peer"];
    const TC: &[&str] = &[
        "ingress",
        "egress",
        "tcx-ingress",
        "tcx-egress",
        "netkit-primary",
        "netkit-peer",
    ];
    const XDP: &[&str] = &["xdpdrv", "xdpgeneric", "xdpoffload"];
    match &*key.reason.name {
        "TC_INGRESS" => Some(INGRESS),
        "TC_EGRESS" => Some(EGRESS),
        "XDP" => Some(XDP),
        // A veth frees what its XDP program dropped (or failed to redirect) without a reason.
        "NOT_SPECIFIED" if key.location.starts_with(VETH_XDP) => Some(XDP),
        r if r.starts_with("TC_") => Some(TC),
        _ => None,
    }
}

/// Where a veth frees the packets its native XDP program dropped.
const VETH_XDP: &str = "veth_xdp_rcv_skb";

/// Whether a row's drops are a tc or XDP program's (its verdict row, or a `TC_*`, `XDP` row,
/// or a veth's XDP drop).
pub fn attributable(key: &DropKey) -> bool {
    programs::is_program(key) || hooks_of(key).is_some()
}

/// The verdict counter growth of program `prog` in namespace `ns` (drops, aborts and shots).
fn verdicts(reading: &KernelReading, ns: u64, prog: u32) -> Option<u64> {
    let id = prog.to_string();
    let g = reading.netns.get(&ns)?;
    let mut found = None;
    for (name, n) in g {
        if let Some((_, pid, verdict)) = crate::model::verdict_counter::identity(name)
            && pid == id
            && verdict != "pass"
        {
            *found.get_or_insert(0u64) += n;
        }
    }
    found
}

/// Who dropped each tc and XDP row of `snap`.
pub fn culprits(snap: &Snapshot) -> HashMap<DropKey, Culprit> {
    let mut out = HashMap::new();
    let Some(reading) = snap.kernel.as_deref() else {
        return out;
    };
    for d in &snap.drops {
        let key = &d.key;
        if programs::is_program(key) {
            // The program's own verdict counter: `prog NAME#ID (HOOK)` on its device.
            let (program, hook) = key
                .location
                .rsplit_once(" (")
                .unwrap_or((&key.location, ""));
            let device = key.attr.device.as_deref().unwrap_or("?");
            out.insert(
                key.clone(),
                Culprit::Exact {
                    who: vec![Who::Program {
                        program: program.to_string(),
                        attach: format!("{device} {}", hook.trim_end_matches(')')),
                        pref: None,
                        handle: None,
                    }],
                    how: "its own verdict counter counted these".into(),
                },
            );
            continue;
        }
        let Some(hooks) = hooks_of(key) else {
            continue;
        };
        let Some(ns) = key.attr.netns else {
            out.insert(
                key.clone(),
                Culprit::Unknown {
                    why: "not grouped by namespace: group by netns and device to name the \
                          programs attached there"
                        .into(),
                },
            );
            continue;
        };
        let Some(attached) = reading.attached.get(&ns) else {
            out.insert(
                key.clone(),
                Culprit::Unknown {
                    why: "the programs attached in this namespace were not read".into(),
                },
            );
            continue;
        };
        let here: Vec<&Attached> = (attached.iter())
            .filter(|a| hooks.contains(&a.hook.as_str()))
            .filter(|a| key.attr.device.as_deref().is_none_or(|d| d == a.device))
            .collect();
        out.insert(key.clone(), attribute(reading, ns, &here, d.count));
    }
    out
}

fn attribute(reading: &KernelReading, ns: u64, here: &[&Attached], count: u64) -> Culprit {
    if here.is_empty() {
        return Culprit::Unknown {
            why: "no BPF program is attached there as read: a tc filter that is not BPF \
                  (u32, flower, matchall with `action drop`) or a program gone since (`tc \
                  filter show dev DEV ingress`)"
                .into(),
        };
    }
    let counted: BTreeMap<u32, u64> = (here.iter())
        .filter_map(|a| Some((a.prog, verdicts(reading, ns, a.prog)?)))
        .collect();
    let sum: u64 = counted.values().sum();
    if counted.len() == here.len() && sum == count {
        let grew = (here.iter())
            .filter(|a| counted.get(&a.prog).is_some_and(|n| *n > 0))
            .map(|a| a.who())
            .collect();
        return Culprit::Exact {
            who: listed(grew),
            how: format!(
                "their verdict counters counted {sum} drops in the window, as many as this row"
            ),
        };
    }
    let why = if counted.len() < here.len() {
        "the BPF programs attached there; their verdicts were not counted (the verdict \
         counter runs as fexit on the program, which this kernel or its configuration \
         refused, or the program has no BTF), and a tc filter that is not BPF would drop \
         likewise"
            .to_string()
    } else {
        format!(
            "the programs attached there; their verdict counters counted {sum} of these \
             {count} (the rest: a filter that is not BPF, or a program attached or detached in \
             the window)"
        )
    };
    Culprit::Candidates {
        who: listed(here.iter().map(|a| a.who()).collect()),
        why,
    }
}

/// The most program names kept.
const MAX_NAMES: usize = 4096;

/// Program names by id, read once per program (two syscalls) when a reading first finds it
/// attached.
#[derive(Debug, Default)]
pub struct Names(HashMap<u32, String>);

impl Names {
    /// Reads the names of the programs of `hooks` not known yet.
    pub fn learn(&mut self, hooks: &BTreeMap<u64, Vec<crate::kcounters::Hooked>>) {
        for h in hooks.values().flatten() {
            if self.0.len() >= MAX_NAMES {
                return;
            }
            self.0.entry(h.prog).or_insert_with(|| name_of(h.prog));
        }
    }

    /// The programs of `hooks`, named.
    pub fn attached(
        &self,
        hooks: &BTreeMap<u64, Vec<crate::kcounters::Hooked>>,
    ) -> BTreeMap<u64, Vec<Attached>> {
        (hooks.iter())
            .map(|(ns, hs)| {
                let a = (hs.iter())
                    .map(|h| Attached {
                        device: h.device.clone(),
                        hook: h.hook.as_str().into(),
                        prog: h.prog,
                        name: self.0.get(&h.prog).cloned().unwrap_or_default(),
                        filter: h.filter,
                    })
                    .collect();
                (*ns, a)
            })
            .collect()
    }
}

/// Program `id`'s name (escaped), or empty where it cannot be read.
fn name_of(id: u32) -> String {
    #[cfg(feature = "live")]
    {
        use std::os::fd::AsFd as _;
        let info = crate::probe::verdicts::sys::prog_fd(id)
            .and_then(|fd| crate::probe::verdicts::sys::prog_info(fd.as_fd()));
        if let Ok(i) = info {
            return crate::sanitize::kernel_name(&i.name).into_owned();
        }
    }
    let _ = id;
    String::new()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{DropCount, Reason};

    /// A row of `reason` at `location` on device `vb` of namespace 9, where an XDP program
    /// whose verdict counter counted `dropped` is attached.
    fn snap(reason: &str, location: &str, count: u64, dropped: u64) -> (Snapshot, DropKey) {
        let mut key = DropKey {
            reason: Reason {
                code: 2,
                name: reason.into(),
            },
            location: location.into(),
            attr: Default::default(),
        };
        key.attr.netns = Some(9);
        key.attr.device = Some("vb".into());
        let mut r = KernelReading {
            attributed: true,
            ..Default::default()
        };
        r.attached.insert(
            9,
            vec![Attached {
                device: "vb".into(),
                hook: "xdpdrv".into(),
                prog: 12,
                name: "xdp_fw".into(),
                filter: None,
            }],
        );
        let counter = "Xdp:vb:xdpdrv:xdp_fw#12:drop";
        r.netns
            .entry(9)
            .or_default()
            .insert(Arc::from(counter), dropped);
        let s = Snapshot {
            drops: vec![DropCount {
                key: key.clone(),
                count,
            }],
            kernel: Some(Arc::new(r)),
            ..Default::default()
        };
        (s, key)
    }

    #[test]
    fn a_veths_xdp_drop_is_its_xdp_programs() {
        let (s, key) = snap("NOT_SPECIFIED", "veth_xdp_rcv_skb+0x2ca", 500, 500);
        assert!(attributable(&key));
        match culprits(&s).get(&key) {
            Some(Culprit::Exact { who, .. }) => {
                assert_eq!(who.len(), 1, "{who:?}");
                assert!(format!("{who:?}").contains("xdp_fw"), "{who:?}");
            }
            other => panic!("not the XDP program, exactly: {other:?}"),
        }
        // Its counter counted fewer: the program is a candidate.
        let (s, key) = snap("NOT_SPECIFIED", "veth_xdp_rcv_skb+0x2ca", 500, 300);
        assert!(matches!(
            culprits(&s).get(&key),
            Some(Culprit::Candidates { .. })
        ));
        // Elsewhere NOT_SPECIFIED says nothing of a program.
        let (s, key) = snap("NOT_SPECIFIED", "skb_release_data+0x10", 500, 500);
        assert!(!attributable(&key));
        assert!(!culprits(&s).contains_key(&key));
    }
}
