//! Program verdicts as drop rows: the XDP and tc programs' drop verdicts a kernel reading
//! carries (`Xdp:` and `Tc:` counters), keyed like the probe's drops so that every view lists
//! them beside `kfree_skb`'s, never summed into its total.
//!
//! A row's reason is the verdict (`XDP_DROP`, `XDP_ABORTED`, `TC_SHOT`), its location the
//! program (`prog <name>#<id> (<hook>)`), its namespace and interface where the program is
//! attached. Its reason code has [`PROGRAM_REASON`] set, which no kernel reason has: a
//! program row is known by its key alone, live, replayed or regrouped. A drop a program counted
//! may also be freed through `kfree_skb` (a tc shot always is; generic XDP and a veth's XDP
//! too): it is then in both lists, and the ledger counts it once.
use std::{collections::BTreeMap, sync::Arc};

use super::{
    snapshot::{Attribution, DropCount, DropKey, Reason, Snapshot},
    verdict_counter::parse,
};
use crate::vocab::reading::KernelReading;

/// The bit set in a program row's reason code (kernel reasons are small enum values).
pub const PROGRAM_REASON: u32 = dropscope_common::reason::PROGRAM;

/// The verdicts counted, by their name in a counter: reason name and code.
const VERDICTS: &[(&str, &str, u32, &str)] = &[
    ("Xdp", "aborted", 0, "XDP_ABORTED"),
    ("Xdp", "drop", 1, "XDP_DROP"),
    ("Tc", "shot", 2, "TC_SHOT"),
];

/// Whether `key` is a program's verdict row (not a `kfree_skb` drop).
pub fn is_program(key: &DropKey) -> bool {
    key.reason.code & PROGRAM_REASON != 0
}

/// The reasons of program rows, by name: no kernel drop reason is named so (the kernel's are
/// `XDP`, `TC_INGRESS`, ...), so a name alone tells them apart where no code is kept (`diff`'s
/// keys, a JSON report).
pub const REASONS: [&str; 3] = ["XDP_ABORTED", "XDP_DROP", "TC_SHOT"];

/// Whether `reason` (a canonical name) is a program verdict's.
pub fn is_program_reason(reason: &str) -> bool {
    REASONS.contains(&reason)
}

/// The reason guide's entry for a program row's reason (`XDP_DROP` → `Xdp:*:drop`).
pub fn guide_entry(reason: &str) -> Option<&'static str> {
    match reason {
        "XDP_DROP" => Some("Xdp:*:drop"),
        "XDP_ABORTED" => Some("Xdp:*:aborted"),
        "TC_SHOT" => Some("Tc:*:shot"),
        _ => None,
    }
}

/// Whether every attached program's verdicts were counted over `snap`'s window: `Err` says
/// why not (no reading of the kernel's counters, where they are; or the reading's notes on
/// programs the kernel would not let them be counted for, the first and how many).
pub fn counted(snap: &Snapshot) -> Result<(), String> {
    let Some(k) = &snap.kernel else {
        return Err("no reading of the kernel's counters, where the programs' verdicts are".into());
    };
    uncounted_notes(&k.errors)
}

/// `Err` naming the first of `notes` that says a program's verdicts were not counted (and how
/// many more do), if any does.
pub fn uncounted_notes(notes: &[String]) -> Result<(), String> {
    let found: Vec<&String> = notes.iter().filter(|e| e.contains(UNCOUNTED)).collect();
    match found.as_slice() {
        [] => Ok(()),
        [one] => Err(one.to_string()),
        [first, rest @ ..] => Err(format!("{first} (and {} more)", rest.len())),
    }
}

/// A program row's location as two runs share it: without the program's id, which changes
/// with every load (`prog guard#42 (xdpdrv)` → `prog guard (xdpdrv)`).
pub fn without_id(location: &str) -> std::borrow::Cow<'_, str> {
    let Some((head, hook)) =
        (location.strip_prefix("prog ")).and_then(|r| r.find(" (").map(|i| r.split_at(i)))
    else {
        return location.into();
    };
    match head.rsplit_once('#') {
        Some((name, id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
            format!("prog {name}{hook}").into()
        }
        _ => location.into(),
    }
}

pub use crate::vocab::note::UNCOUNTED;

/// The program rows of `reading`: one per (program, verdict) that counted, keyed by namespace
/// and interface, with the namespaces' names in `names`.
pub fn rows(reading: &KernelReading, names: &BTreeMap<u64, Arc<str>>) -> Vec<DropCount> {
    let mut out = Vec::new();
    for (&ns, growth) in &reading.netns {
        for (name, &count) in growth {
            if count == 0 {
                continue;
            }
            if let Some(key) = counter_key(ns, name, reading.initial_netns, Some(names)) {
                out.push(DropCount { key, count });
            }
        }
    }
    out
}

/// The row key of verdict counter `name` in namespace `ns` (`None` for any other counter),
/// named by `names` where given (`host` for the `initial` namespace).
pub fn counter_key(
    ns: u64,
    name: &str,
    initial: u64,
    names: Option<&BTreeMap<u64, Arc<str>>>,
) -> Option<DropKey> {
    let (layer, dev, hook, prog, verdict) = parse(name)?;
    let &(_, _, code, reason) = VERDICTS.iter().find(|v| v.0 == layer && v.1 == verdict)?;
    // `xdpdrv`, `tcx-ingress`, `netkit-peer` say their layer; tc's `ingress` does not.
    let tc = if layer == "Tc" && matches!(hook, "ingress" | "egress") {
        "tc "
    } else {
        ""
    };
    Some(DropKey {
        reason: Reason {
            code: PROGRAM_REASON | code,
            name: Arc::from(reason),
        },
        location: Arc::from(format!("prog {prog} ({tc}{hook})")),
        attr: Attribution {
            netns: Some(ns),
            netns_cookie: None,
            netns_name: (names.and_then(|n| n.get(&ns)).cloned())
                .or_else(|| (ns == initial).then(|| Arc::from("host"))),
            ifindex: None,
            device: Some(Arc::from(dev)),
            protocol: None,
            port: None,
            socket: None,
            culprit: None,
        },
    })
}

/// The program rows of a snapshot's kernel reading (none without one), named as its drops
/// name their namespaces.
pub fn of_snapshot(snap: &Snapshot) -> Vec<DropCount> {
    let Some(reading) = &snap.kernel else {
        return Vec::new();
    };
    // The names are looked up through every key only where there is a program row to name.
    let any = (reading.netns.values()).any(|g| {
        g.keys()
            .any(|k| k.starts_with("Xdp:") || k.starts_with("Tc:"))
    });
    if !any {
        return Vec::new();
    }
    rows(reading, &netns_names(snap, reading))
}

/// The namespaces' names as the snapshot's drops give them, and where none does, as
/// `reading` names them (a namespace with no drop: see [`KernelReading::names`]).
pub fn netns_names(snap: &Snapshot, reading: &KernelReading) -> BTreeMap<u64, Arc<str>> {
    let mut names = reading.names.clone();
    names.extend(
        (snap.drops.iter())
            .filter_map(|d| Some((d.key.attr.netns?, d.key.attr.netns_name.clone()?))),
    );
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(counters: &[(u64, &str, u64)]) -> KernelReading {
        crate::fixtures::reading(0, 0, counters)
    }

    #[test]
    fn verdict_counters_become_rows_of_their_program_device_and_namespace() {
        let r = reading(&[
            (7, "Xdp:vb:xdpdrv:ds_drop#42:drop", 500),
            (7, "Xdp:vb:xdpdrv:ds_drop#42:aborted", 3),
            (9, "Tc:va:tcx-ingress:ds_shot#43:shot", 40),
            (9, "Tc:va:ingress:?#44:shot", 0),
            (9, "Tc:vc:ingress:cls#45:shot", 2),
            (9, "Tc:nk0:netkit-peer:pod_fw#46:shot", 6),
            (9, "Udp:NoPorts", 12),
            (9, "Link:va:rx_dropped", 8),
            (9, "Xdp:va:xdpdrv:odd#1:pass", 8),
        ]);
        let names = BTreeMap::from([(9, Arc::from("web"))]);
        let mut rows = rows(&r, &names);
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        let got: Vec<String> = (rows.iter())
            .map(|d| {
                let a = &d.key.attr;
                format!(
                    "{} {} {:?} {:?} {:?} {} {}",
                    d.key.reason.name,
                    d.key.location,
                    a.netns,
                    a.netns_name.as_deref(),
                    a.device.as_deref(),
                    d.count,
                    is_program(&d.key)
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                r#"XDP_ABORTED prog ds_drop#42 (xdpdrv) Some(7) None Some("vb") 3 true"#,
                r#"XDP_DROP prog ds_drop#42 (xdpdrv) Some(7) None Some("vb") 500 true"#,
                r#"TC_SHOT prog cls#45 (tc ingress) Some(9) Some("web") Some("vc") 2 true"#,
                r#"TC_SHOT prog ds_shot#43 (tcx-ingress) Some(9) Some("web") Some("va") 40 true"#,
                r#"TC_SHOT prog pod_fw#46 (netkit-peer) Some(9) Some("web") Some("nk0") 6 true"#,
            ]
        );
        // The initial namespace is `host`, named by a drop there or not (as in `report`).
        let mut host = reading(&[(7, "Xdp:vb:xdpdrv:ds_drop#42:drop", 5)]);
        host.initial_netns = 7;
        let named = super::rows(&host, &BTreeMap::new());
        assert_eq!(named[0].key.attr.netns_name.as_deref(), Some("host"));
        assert_eq!(guide_entry("TC_SHOT"), Some("Tc:*:shot"));
        assert_eq!(guide_entry("NO_SOCKET"), None);
    }

    #[test]
    fn a_programs_location_without_its_id_is_the_same_across_loads() {
        for (given, want) in [
            ("prog guard#42 (xdpdrv)", "prog guard (xdpdrv)"),
            ("prog ?#44 (tc ingress)", "prog ? (tc ingress)"),
            ("prog a#b#7 (tcx-egress)", "prog a#b (tcx-egress)"),
            ("prog guard# (xdpdrv)", "prog guard# (xdpdrv)"),
            ("prog guard#x1 (xdpdrv)", "prog guard#x1 (xdpdrv)"),
            ("__udp4_lib_rcv+0x1c", "__udp4_lib_rcv+0x1c"),
            ("prog guard#42", "prog guard#42"),
        ] {
            assert_eq!(without_id(given), want, "{given}");
        }
    }

    #[test]
    fn hostile_counter_names_make_no_row_or_a_bounded_one() {
        let long = format!("Xdp:{}:xdpdrv:p#1:drop", "d".repeat(10_000));
        let r = reading(&[
            (1, "Xdp:", 1),
            (1, "Xdp::::", 1),
            (1, "Tc:a:b:c", 1),
            (1, "Xdp:a:b:c:\u{1b}[2J", 1),
            (1, &long, 1),
        ]);
        let rows = rows(&r, &BTreeMap::new());
        // Only the well-formed (if long) one; views cut and escape names as for any key.
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            rows[0].key.attr.device.as_deref().map(str::len),
            Some(10_000)
        );
    }
}
