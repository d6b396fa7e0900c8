//! Counter-only drops as rows: what a kernel counter counted that the probe never saw (a SYN
//! refused by a full accept queue is freed with `consume_skb`, so only `TcpExt:ListenDrops`
//! counts it), keyed like the probe's drops so that every view lists them beside `kfree_skb`'s,
//! never summed into its total.
//!
//! A row's reason is the counter (`TcpExt:ListenDrops`), its location [`LOCATION`], its
//! namespace the counter's and its interface the counter's device, if any. Its count is what
//! [`unseen::unseen`] leaves once the probe's drops of the counter's reasons are taken away, so
//! a drop is never in a probe row and a counter-only row both; and only the rows
//! [`unseen::summed`] keeps are rows (`ListenOverflows` lies within `ListenDrops`), so the rows
//! add up to [`unseen::total`]. Its reason code has [`COUNTER_REASON`] set, which no kernel
//! reason has: a counter-only row is known by its key alone, live, replayed or regrouped.
//!
//! A `TcpExt:ListenDrops` row names, beside its key, the TCP listeners of its namespace whose
//! accept queue was full when the counters were read, and the process holding each where one
//! was found ([`listeners`]; read by [`crate::kcounters::listeners`]); none where none was full
//! then, and none in a replay of a recording before format 8 (which does not carry them).
use std::{collections::BTreeMap, sync::Arc};

use super::{Attribution, DropCount, DropKey, KernelReading, Reason, Snapshot, programs};
use crate::ledger::{
    layers,
    unseen::{self, Alone},
};
use crate::vocab::reading::Listener;

/// The bit set in a counter-only row's reason code (kernel reasons are small enum values,
/// programs' rows have [`programs::PROGRAM_REASON`]).
pub const COUNTER_REASON: u32 = dropscope_common::reason::COUNTER;

/// The location of every counter-only row: no kernel function freed these packets as drops.
pub const LOCATION: &str = "(counter only)";

/// Whether `key` is a counter-only row (not a `kfree_skb` drop).
pub fn is_counter_only(key: &DropKey) -> bool {
    key.reason.code & COUNTER_REASON != 0 && &*key.location == LOCATION
}

/// Whether `key` is a row beside the probe's: a program's verdicts or a counter's drops, never
/// part of the probe's total nor merged with its rows.
pub fn is_beside(key: &DropKey) -> bool {
    programs::is_program(key) || is_counter_only(key)
}

/// The counters whose drops a full accept queue explains.
pub const LISTEN_COUNTERS: &[&str] = &["TcpExt:ListenDrops", "TcpExt:ListenOverflows"];

/// The listeners of `all` (per namespace, those whose accept queue was full when read) that a
/// counter-only row of a listen counter ([`LISTEN_COUNTERS`]) names: its namespace's; none for
/// any other row.
pub fn listeners<'a>(all: &'a BTreeMap<u64, Vec<Listener>>, key: &DropKey) -> &'a [Listener] {
    if !is_counter_only(key) || !LISTEN_COUNTERS.contains(&&*key.reason.name) {
        return &[];
    }
    (key.attr.netns.and_then(|ns| all.get(&ns))).map_or(&[], Vec::as_slice)
}

/// The protocol a counter's drops are of, where its group says (`TcpExt:` → `tcp`).
fn protocol(counter: &str) -> Option<&'static str> {
    match counter.split_once(':')?.0 {
        "Tcp" | "TcpExt" => Some("tcp"),
        "Udp" | "Udp6" => Some("udp"),
        "UdpLite" | "UdpLite6" => Some("udplite"),
        "Icmp" => Some("icmp"),
        "Icmp6" => Some("icmpv6"),
        _ => None,
    }
}

/// The counter-only rows of `reading` beside the probe's counts in `snap` over the same window
/// (or a longer one that holds it), with the namespaces' names in `names`. None where the
/// probe's counts are grouped without the reason (nothing can then be called unseen).
pub fn rows(
    reading: &KernelReading,
    snap: &Snapshot,
    names: &BTreeMap<u64, Arc<str>>,
) -> Vec<DropCount> {
    if snap.drops.iter().any(|d| &*d.key.reason.name == "*") {
        return Vec::new();
    }
    let initial = reading.initial_netns;
    let deltas = unseen::growth_deltas(reading);
    let found = unseen::unseen(
        &deltas,
        crate::ledger::unseen::seen_drops(snap, reading),
        initial,
    );
    let alone: Vec<Alone<'_>> = found.iter().map(Into::into).collect();
    (found.iter().zip(unseen::summed(&alone)))
        .filter(|(u, summed)| *summed && u.count > 0)
        .map(|(u, _)| DropCount {
            key: key(u.netns, &u.counter, initial, names),
            count: u.count,
        })
        .collect()
}

/// The row key of `counter` in namespace `ns`, named by `names` (`host` for `initial`).
pub fn key(ns: u64, counter: &str, initial: u64, names: &BTreeMap<u64, Arc<str>>) -> DropKey {
    let device = layers::classify(counter).and_then(|c| c.device);
    DropKey {
        reason: Reason {
            code: COUNTER_REASON,
            name: Arc::from(counter),
        },
        location: Arc::from(LOCATION),
        attr: Attribution {
            netns: Some(ns),
            // Kernel readings name a namespace by its inode, as the programs' rows do.
            netns_cookie: None,
            netns_name: (names.get(&ns).cloned())
                .or_else(|| (ns == initial).then(|| Arc::from("host"))),
            ifindex: None,
            device: device.map(Arc::from),
            protocol: protocol(counter).map(Arc::from),
            port: None,
            socket: None,
            culprit: None,
        },
    }
}

/// The counter-only rows of a snapshot's kernel reading (none without one), named as its
/// drops name their namespaces.
pub fn of_snapshot(snap: &Snapshot) -> Vec<DropCount> {
    match &snap.kernel {
        Some(reading) => rows(reading, snap, &programs::netns_names(snap, reading)),
        None => Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::DropCount;

    fn reading(counters: &[(u64, &str, u64)]) -> KernelReading {
        crate::fixtures::reading(0, 1, counters)
    }

    fn probe(reason: &str, location: &str, netns: u64, count: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: 7,
                    name: Arc::from(reason),
                },
                location: Arc::from(location),
                attr: Attribution {
                    netns: Some(netns),
                    netns_name: Some(Arc::from("app")),
                    ..Attribution::default()
                },
            },
            count,
        }
    }

    /// A window where a counter saw drops the probe did not (`ListenDrops`, one `NoPorts`)
    /// and some it did: its reading and the probe's drops.
    pub(crate) fn listen_drops_window() -> (KernelReading, Snapshot) {
        let r = reading(&[
            // 40 refused at the SYN (consumed), 4 at the final ACK (TCP_LISTEN_OVERFLOW).
            (9, "TcpExt:ListenDrops", 44),
            (9, "TcpExt:ListenOverflows", 44),
            // Every NoPorts datagram was seen: no row.
            (9, "Udp:NoPorts", 10),
            (1, "Udp:NoPorts", 3),
            (9, "Ip:InReceives", 1000),
        ]);
        let snap = Snapshot {
            drops: vec![
                probe("TCP_LISTEN_OVERFLOW", "tcp_check_req+0x1", 9, 4),
                probe("NO_SOCKET", "__udp4_lib_rcv+0x2", 9, 10),
            ],
            total: 14,
            kernel: Some(Arc::new(r.clone())),
            ..Snapshot::default()
        };
        (r, snap)
    }

    #[test]
    fn what_only_a_counter_saw_is_a_row_once_and_never_what_the_probe_saw() {
        let (_, snap) = listen_drops_window();
        let rows = of_snapshot(&snap);
        let got: Vec<String> = (rows.iter())
            .map(|d| {
                let a = &d.key.attr;
                format!(
                    "{} {} {:?} {:?} {:?} {} {}",
                    d.key.reason.name,
                    d.key.location,
                    a.netns,
                    a.netns_name.as_deref(),
                    a.protocol.as_deref(),
                    d.count,
                    is_counter_only(&d.key) && is_beside(&d.key) && !programs::is_program(&d.key),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                r#"Udp:NoPorts (counter only) Some(1) Some("host") Some("udp") 3 true"#,
                r#"TcpExt:ListenDrops (counter only) Some(9) Some("app") Some("tcp") 40 true"#,
            ]
        );
        // Counts grouped without the reason cannot be matched with counters: no rows.
        let mut grouped = snap.clone();
        grouped.drops[0].key.reason.name = Arc::from("*");
        assert!(of_snapshot(&grouped).is_empty());
        // A probe's key is never a counter-only one.
        assert!(!is_beside(&snap.drops[0].key));
    }

    #[test]
    fn a_device_counter_row_names_its_device() {
        let r = reading(&[(1, "Dev:eth0:RxDrop", 5)]);
        let snap = Snapshot {
            kernel: Some(Arc::new(r)),
            ..Snapshot::default()
        };
        let rows = of_snapshot(&snap);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].key.attr.device.as_deref(), Some("eth0"));
        assert_eq!(rows[0].key.attr.protocol, None);
    }
}
