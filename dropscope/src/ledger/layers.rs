//! Which layer each counter of a reading belongs to (the NIC and driver, the qdisc, the
//! per-CPU backlog, the protocols), whether it counts dropped packets, whether its drops are
//! counted elsewhere too, and the `kfree_skb` drops it also counts (read from the kernel
//! source, 6.x; see each entry's `source`).
//!
//! A reason spec is `REASON`, `REASON@function` (only drops at that function), `PREFIX_*` (a
//! family: `QDISC_*`), each on the counter's own device (or namespace, for counters of no
//! device); a leading `~` looks for the drop on any device of any namespace (the counter
//! counts a drop that the kernel frees on another device: a veth counts its peer's backlog
//! drops as its own `tx_dropped`).
use serde::Serialize;

use super::map;
use crate::{
    model::kernel::Direction,
    vocab::counter::{Counter, ProgramLayer},
};

/// A layer that drops packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The NIC and its driver: `ip -s link`, stats64.
    Nic,
    /// XDP programs' drop verdicts (`XDP_DROP`, `XDP_ABORTED`), counted per program.
    Xdp,
    /// tc programs' `TC_ACT_SHOT` verdicts, counted per program.
    Tc,
    /// Queueing disciplines: `tc -s qdisc`.
    Qdisc,
    /// The per-CPU input backlog: `/proc/net/softnet_stat`.
    Softnet,
    /// `kfree_skb`: the probe's own counts, with reason and location.
    KfreeSkb,
    /// Socket and protocol counters: `/proc/net/snmp`, `netstat`, `snmp6`.
    Protocol,
    /// AF_XDP sockets: what an XDP program redirected to a socket that had no room for it.
    AfXdp,
}

impl Layer {
    /// The name reports and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Nic => "nic",
            Layer::Xdp => "xdp",
            Layer::Tc => "tc",
            Layer::Qdisc => "qdisc",
            Layer::Softnet => "softnet",
            Layer::KfreeSkb => "kfree_skb",
            Layer::Protocol => "protocol",
            Layer::AfXdp => "af_xdp",
        }
    }
}

/// What a counter's growth stands for in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Drops of its own: in its layer's total, and what no `kfree_skb` drop matches is
    /// counted once in the headline.
    Primary,
    /// Drops of its layer that a primary counter of another layer counts too (every backlog
    /// drop is also its device's `rx_dropped`): in its layer's total, not in the headline.
    Layer,
    /// Drops that another counter of the same layer also counts (a qdisc inside a hierarchy,
    /// one CPU's backlog drops, `ListenOverflows` within `ListenDrops`): shown, never summed.
    Detail,
    /// `/proc/net/dev`'s drop columns: primary for a device without `Link:` counters (older
    /// recordings), a detail beside them (they are `rx_dropped + rx_missed_errors`).
    Fallback,
    /// Not packets dropped (qdisc `overlimits` and `requeues`, softnet `time_squeeze`).
    Context,
}

impl Role {
    /// What the role means, in a word or two (reports and the TUI).
    pub fn word(self) -> &'static str {
        match self {
            Role::Primary | Role::Fallback => "drops",
            Role::Layer => "drops, also another layer's",
            Role::Detail => "part of another counter",
            Role::Context => "not drops",
        }
    }
}

/// A counter of the ledger: its layer, device and what it counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class<'a> {
    /// Its layer.
    pub layer: Layer,
    /// Its device (`None`: the whole namespace, or the machine).
    pub device: Option<&'a str>,
    /// What its growth stands for.
    pub role: Role,
    /// Counters of one device and group count the same events in different ways: the
    /// headline takes the largest of them (`rx_fifo_errors`, `rx_over_errors`).
    pub group: Option<&'static str>,
    /// The `kfree_skb` drops it also counts (see the module's doc).
    pub reasons: &'static [&'static str],
    /// Whether every drop it counts is freed with one of `reasons` on this kernel line (then
    /// its growth and the matched drops agree exactly); `false`: a part only, or none.
    pub exact: bool,
    /// Its entry in the guide (`dropscope explain`).
    pub guide: &'static str,
}

/// One kind of stats64 counter.
struct LinkStat {
    stat: &'static str,
    group: Option<&'static str>,
    reasons: &'static [&'static str],
    exact: bool,
}

const fn stat(
    stat: &'static str,
    reasons: &'static [&'static str],
    exact: bool,
    group: Option<&'static str>,
) -> LinkStat {
    LinkStat {
        stat,
        group,
        reasons,
        exact,
    }
}

/// The stats64 counters read (see `rtnl::LINK_STATS`), with the drops they also count:
/// core/dev.c enqueue_to_backlog counts `rx_dropped` of `skb->dev` and frees with
/// `CPU_BACKLOG` (or `DEV_READY` for a device that is down), `__netif_receive_skb_core` with
/// `UNHANDLED_PROTO` (`rx_nohandler` for a bond's inactive port); tun's transmit counts
/// `tx_dropped` and frees with `FULL_RING`, `DEV_READY`, `TAP_FILTER` or `TAP_TXFILTER`; a veth
/// counts `tx_dropped` when its peer refused the packet (freed there, `CPU_BACKLOG` on the
/// peer, or `NOT_SPECIFIED` in `veth_xmit`). Hardware counters (missed, FIFO, CRC, frame,
/// length, aborted, carrier) count frames that never became a packet the kernel frees.
const LINK: &[LinkStat] = &[
    stat(
        "rx_dropped",
        &[
            "CPU_BACKLOG",
            "DEV_READY@enqueue_to_backlog",
            "UNHANDLED_PROTO",
        ],
        false,
        None,
    ),
    stat("rx_missed_errors", &[], true, None),
    stat("rx_fifo_errors", &[], false, Some("rx_fifo")),
    stat("rx_over_errors", &[], false, Some("rx_fifo")),
    stat("rx_crc_errors", &[], false, None),
    stat("rx_frame_errors", &[], false, None),
    stat("rx_length_errors", &[], false, None),
    stat("rx_nohandler", &["UNHANDLED_PROTO"], false, None),
    stat(
        "tx_dropped",
        &[
            "FULL_RING",
            "DEV_READY",
            "TAP_FILTER",
            "TAP_TXFILTER",
            "NOT_SPECIFIED@veth_xmit",
            "~NOT_SPECIFIED@netkit_xmit",
            "NOT_SPECIFIED@__dev_queue_xmit",
            "QDISC_DROP@__dev_queue_xmit",
            "~CPU_BACKLOG",
        ],
        false,
        None,
    ),
    stat("tx_aborted_errors", &[], false, None),
    stat("tx_fifo_errors", &[], false, None),
    stat("tx_carrier_errors", &[], false, None),
];

/// What qdisc drops are freed with (net/sched: `qdisc_drop` and `qdisc_drop_reason` put the
/// packet on the `to_free` list that `__dev_xmit_skb` frees with its reason; fq, CAKE and
/// DualPI2 name their own).
pub const QDISC_REASONS: &[&str] = &["QDISC_*", "CAKE_*", "FQ_*", "DUALPI2_*"];
/// What the ingress and clsact qdiscs count as drops: packets a tc filter shot
/// (`sch_handle_ingress` / `sch_handle_egress`: `mini_qdisc_qstats_cpu_drop`, then
/// `kfree_skb_reason(TC_INGRESS / TC_EGRESS)`).
pub const TC_REASONS: &[&str] = &["TC_INGRESS", "TC_EGRESS"];
/// What an XDP program's drops are freed with, when there is a packet to free at all: generic
/// XDP frees the skb (`do_xdp_generic`); native XDP on a veth frees the skb it received from
/// its peer in `veth_xdp_rcv_skb`; a NIC's native XDP frees no skb.
pub const XDP_REASONS: &[&str] = &["XDP", "NOT_SPECIFIED@veth_xdp_rcv_skb"];
/// What a tc program's shot packets are freed with on ingress (`sch_handle_ingress`).
pub const TC_INGRESS_REASONS: &[&str] = &["TC_INGRESS"];
/// What a netkit program's dropped packets are freed with (`netkit_xmit`, which counts them
/// in the sending device's `tx_dropped` too). The packet is already the peer's when it is
/// freed (its device and namespace), so the match is made anywhere: `netkit_xmit` frees
/// nothing else.
pub const NETKIT_REASONS: &[&str] = &["~NOT_SPECIFIED@netkit_xmit"];
/// What a tc program's shot packets are freed with on egress (`sch_handle_egress`).
pub const TC_EGRESS_REASONS: &[&str] = &["TC_EGRESS"];
/// What the backlog's dropped count is freed with (core/dev.c enqueue_to_backlog; before 6.0
/// with no reason there).
pub const BACKLOG_REASONS: &[&str] = &["~CPU_BACKLOG", "~NOT_SPECIFIED@enqueue_to_backlog"];

fn class<'a>(
    layer: Layer,
    device: Option<&'a str>,
    role: Role,
    reasons: &'static [&'static str],
    exact: bool,
    guide: &'static str,
) -> Class<'a> {
    Class {
        layer,
        device,
        role,
        group: None,
        reasons,
        exact,
        guide,
    }
}

/// The class of a counter name of a reading; `None` for packet counters and names of no
/// layer.
pub fn classify(name: &str) -> Option<Class<'_>> {
    let counter = Counter::parse(name)?;
    let dev = counter.device();
    Some(match counter {
        Counter::Link { stat, .. } => {
            let s = LINK.iter().find(|s| s.stat == stat)?;
            let mut c = class(
                Layer::Nic,
                dev,
                Role::Primary,
                s.reasons,
                s.exact,
                link_guide(stat),
            );
            c.group = s.group;
            c
        }
        // Shown beside stats64, never summed (drivers count the same drops in rx_dropped,
        // rx_missed_errors, ... too).
        Counter::Ethtool { stat, .. } => {
            let reasons = if stat.contains("xdp") {
                XDP_REASONS
            } else {
                &[]
            };
            let guide = "Ethtool:*";
            class(Layer::Nic, dev, Role::Detail, reasons, false, guide)
        }
        Counter::Verdict {
            layer: ProgramLayer::Xdp,
            verdict,
            ..
        } => {
            let guide = match verdict {
                "drop" => "Xdp:*:drop",
                "aborted" => "Xdp:*:aborted",
                _ => return None,
            };
            class(Layer::Xdp, dev, Role::Primary, XDP_REASONS, false, guide)
        }
        Counter::Verdict {
            layer: ProgramLayer::Tc,
            hook,
            verdict: "shot",
            ..
        } => {
            let (reasons, exact) = match hook {
                "egress" | "tcx-egress" => (TC_EGRESS_REASONS, true),
                "netkit-primary" | "netkit-peer" => (NETKIT_REASONS, false),
                _ => (TC_INGRESS_REASONS, true),
            };
            class(Layer::Tc, dev, Role::Primary, reasons, exact, "Tc:*:shot")
        }
        Counter::Verdict { .. } => return None,
        Counter::Xsk { stat, .. } => {
            let (role, guide) = match stat {
                "rx_dropped" => (Role::Primary, "Xsk:*:rx_dropped"),
                "rx_ring_full" => (Role::Primary, "Xsk:*:rx_ring_full"),
                "fill_ring_empty" => (Role::Detail, "Xsk:*:fill_ring_empty"),
                "rx_invalid" | "tx_invalid" => (Role::Detail, "Xsk:*:invalid"),
                _ => return None,
            };
            class(Layer::AfXdp, dev, role, XDP_REASONS, false, guide)
        }
        Counter::Qdisc { label, stat, .. } => {
            let kind = label.split(' ').next().unwrap_or_default();
            let child = label.contains(" parent ");
            let (role, reasons, exact, guide) = match stat {
                "drops" if child => (Role::Detail, QDISC_REASONS, true, "Qdisc:*:drops"),
                "drops" if matches!(kind, "ingress" | "clsact") => {
                    (Role::Primary, TC_REASONS, true, "Qdisc:*:drops")
                }
                "drops" => (Role::Primary, QDISC_REASONS, true, "Qdisc:*:drops"),
                "overlimits" => (Role::Context, &[][..], false, "Qdisc:*:overlimits"),
                "requeues" => (Role::Context, &[][..], false, "Qdisc:*:requeues"),
                _ => return None,
            };
            class(Layer::Qdisc, dev, role, reasons, exact, guide)
        }
        Counter::SoftnetDropped => class(
            Layer::Softnet,
            None,
            Role::Layer,
            BACKLOG_REASONS,
            true,
            "Softnet:*:dropped",
        ),
        Counter::Softnet { stat, .. } => {
            let (role, reasons, exact, guide) = match stat {
                "dropped" => (Role::Detail, BACKLOG_REASONS, true, "Softnet:*:dropped"),
                "flow_limit" => (Role::Detail, BACKLOG_REASONS, true, "Softnet:*:flow_limit"),
                "time_squeeze" => (Role::Context, &[][..], false, "Softnet:*:time_squeeze"),
                _ => return None,
            };
            class(Layer::Softnet, None, role, reasons, exact, guide)
        }
        Counter::Dev { stat, .. } => {
            let m = map::lookup(name)?;
            let guide = if stat == "RxDrop" {
                "Dev:*:RxDrop"
            } else {
                "Dev:*:TxDrop"
            };
            class(Layer::Nic, dev, Role::Fallback, m.reasons, false, guide)
        }
        Counter::Mib { group, field } => {
            let m = map::lookup(name)?;
            // Every ListenOverflows event is a ListenDrops event too.
            let role = if (group, field) == ("TcpExt", "ListenOverflows") {
                Role::Detail
            } else {
                Role::Primary
            };
            class(Layer::Protocol, None, role, m.reasons, false, "")
        }
    })
}

fn link_guide(stat: &str) -> &'static str {
    const GUIDES: &[&str] = &[
        "Link:*:rx_dropped",
        "Link:*:rx_missed_errors",
        "Link:*:rx_fifo_errors",
        "Link:*:rx_over_errors",
        "Link:*:rx_crc_errors",
        "Link:*:rx_frame_errors",
        "Link:*:rx_length_errors",
        "Link:*:rx_nohandler",
        "Link:*:tx_dropped",
        "Link:*:tx_aborted_errors",
        "Link:*:tx_fifo_errors",
        "Link:*:tx_carrier_errors",
    ];
    GUIDES
        .iter()
        .find(|g| g.strip_prefix("Link:*:") == Some(stat))
        .copied()
        .unwrap_or("")
}

/// Whether a counter is one of the layer counters read through rtnetlink or per CPU (kept in
/// a reading beside [`map`]'s).
pub fn is_layer_counter(name: &str) -> bool {
    matches!(
        Counter::parse(name),
        Some(
            Counter::Link { .. }
                | Counter::Qdisc { .. }
                | Counter::Softnet { .. }
                | Counter::Verdict { .. }
                | Counter::Ethtool { .. }
                | Counter::Xsk { .. }
        )
    ) && classify(name).is_some()
}

/// Whether a drop of `reason` at `location` matches a spec (`REASON`, `REASON@function`,
/// `PREFIX_*`; a leading `~` is the caller's business).
pub fn matches(spec: &str, reason: &str, location: &str) -> bool {
    let spec = spec.trim_start_matches('~');
    match spec.strip_suffix('*') {
        Some(prefix) => reason.starts_with(prefix),
        None => map::matches(spec, reason, location),
    }
}

/// Which way a `kfree_skb` drop of `reason` at `location` went: transmit-side drops are those
/// the transmit counters count (`tx_dropped`'s own reasons, not its peer's backlog drops),
/// a qdisc's ([`QDISC_REASONS`]), a tc egress program's, and any freed in a transmit function
/// (`…xmit…`: a driver's or the core's); every other drop is on the receive side.
pub fn direction(reason: &str, location: &str) -> Direction {
    let function = location.split(['+', ' ']).next().unwrap_or_default();
    let spec = |s: &&str| matches(s, reason, location);
    let rx = LINK.iter().filter(|s| s.stat.starts_with("rx_"));
    if rx.flat_map(|s| s.reasons).any(spec) {
        return Direction::Rx;
    }
    let tx = (LINK.iter().filter(|s| s.stat.starts_with("tx_")))
        .flat_map(|s| s.reasons.iter())
        .filter(|s| !s.ends_with("CPU_BACKLOG"))
        .chain(QDISC_REASONS)
        .chain(TC_EGRESS_REASONS);
    if tx.into_iter().any(spec) || function.contains("xmit") {
        Direction::Tx
    } else {
        Direction::Rx
    }
}

/// Every guide key of the layer counters (for the guide's test).
pub fn guide_keys() -> impl Iterator<Item = &'static str> {
    [
        "Ethtool:*",
        "Xdp:*:drop",
        "Xdp:*:aborted",
        "Tc:*:shot",
        "Xsk:*:rx_dropped",
        "Xsk:*:rx_ring_full",
        "Xsk:*:fill_ring_empty",
        "Xsk:*:invalid",
        "Qdisc:*:drops",
        "Qdisc:*:overlimits",
        "Qdisc:*:requeues",
        "Softnet:*:dropped",
        "Softnet:*:flow_limit",
        "Softnet:*:time_squeeze",
        "Dev:*:RxDrop",
        "Dev:*:TxDrop",
    ]
    .into_iter()
    .chain(LINK.iter().map(|s| link_guide(s.stat)))
}

/// Whether a counter travels in a reading: a drop counter, a layer counter or a packet counter.
pub fn is_kept(name: &str) -> bool {
    map::lookup(name).is_some()
        || is_layer_counter(name)
        || crate::model::kernel::PACKET_COUNTERS.contains(&name)
        || crate::model::kernel::device_packets(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_find_their_layer_device_and_role() {
        for (name, role) in [
            ("Xsk:vb:q0:sk1234:rx_dropped", Role::Primary),
            ("Xsk:vb:q0:sk1234:rx_ring_full", Role::Primary),
            ("Xsk:vb:q0:sk1234:fill_ring_empty", Role::Detail),
            ("Xsk:vb:q0:sk1234:tx_invalid", Role::Detail),
        ] {
            let c = classify(name).expect(name);
            assert_eq!(
                (c.layer, c.device, c.role),
                (Layer::AfXdp, Some("vb"), role)
            );
            assert_eq!(c.reasons, XDP_REASONS);
        }
        assert!(classify("Xsk:vb:q0:sk1:tx_ring_empty").is_none());
        // Kept by a reading (which keeps layer counters only).
        assert!(is_layer_counter("Xsk:vb:q0:sk1234:rx_dropped"));
        assert!(is_kept("Xsk:vb:q0:sk1234:fill_ring_empty"));
        let c = classify("Link:veth0:rx_dropped").expect("link");
        assert_eq!(
            (c.layer, c.device, c.role),
            (Layer::Nic, Some("veth0"), Role::Primary)
        );
        let c = classify("Qdisc:eth0:tbf 1::drops").expect("root qdisc");
        assert_eq!(
            (c.layer, c.device, c.role),
            (Layer::Qdisc, Some("eth0"), Role::Primary)
        );
        assert_eq!(c.reasons, QDISC_REASONS);
        let c = classify("Qdisc:eth0:pfifo_fast 0: parent :1:drops").expect("child");
        assert_eq!(c.role, Role::Detail);
        let c = classify("Qdisc:eth0:clsact ffff::drops").expect("clsact");
        assert_eq!((c.role, c.reasons), (Role::Primary, TC_REASONS));
        assert_eq!(
            classify("Qdisc:eth0:tbf 1::overlimits").map(|c| c.role),
            Some(Role::Context)
        );
        assert_eq!(
            classify("Softnet:cpu3:dropped").map(|c| (c.layer, c.role)),
            Some((Layer::Softnet, Role::Detail))
        );
        assert_eq!(
            classify("Softnet:Dropped").map(|c| c.role),
            Some(Role::Layer)
        );
        assert_eq!(
            classify("Dev:eth0:RxDrop").map(|c| (c.device, c.role)),
            Some((Some("eth0"), Role::Fallback))
        );
        assert_eq!(
            classify("Udp:NoPorts").map(|c| (c.layer, c.role)),
            Some((Layer::Protocol, Role::Primary))
        );
        assert_eq!(
            classify("TcpExt:ListenOverflows").map(|c| c.role),
            Some(Role::Detail)
        );
        let c = classify("Xdp:veth1:xdpdrv:drop_udp#42:drop").expect("xdp");
        assert_eq!(
            (c.layer, c.device, c.role, c.guide),
            (Layer::Xdp, Some("veth1"), Role::Primary, "Xdp:*:drop")
        );
        let c = classify("Tc:eth0:egress:shoot#7:shot").expect("tc");
        assert_eq!(
            (c.layer, c.device, c.reasons),
            (Layer::Tc, Some("eth0"), TC_EGRESS_REASONS)
        );
        assert!(classify("Xdp:veth1:xdpdrv:p#1:pass").is_none());
        let c = classify("Ethtool:vb:rx_queue_0_xdp_drops").expect("ethtool");
        assert_eq!(
            (c.layer, c.device, c.role, c.reasons),
            (Layer::Nic, Some("vb"), Role::Detail, XDP_REASONS)
        );
        assert!(is_layer_counter("Tc:eth0:ingress:shoot#7:shot"));
        assert!(classify("Dev:eth0:RxPackets").is_none());
        assert!(classify("Link:eth0:rx_packets").is_none());
        assert!(classify("Ip:InReceives").is_none());
        assert!(is_layer_counter("Link:lo:tx_dropped"));
        assert!(!is_layer_counter("Udp:NoPorts"));
    }

    /// The ledger gives a counter's drops out near it first, then anywhere: no drop may be
    /// both, so no list of specs has a spec near and one anywhere for the same reason.
    #[test]
    fn no_spec_list_looks_for_a_reason_both_near_and_anywhere() {
        // A spec's reason (or family) and function, if it names one.
        let parts = |s: &'static str| {
            let s = s.trim_start_matches('~');
            s.split_once('@').map_or((s, None), |(r, f)| (r, Some(f)))
        };
        let overlap = |a: &'static str, b: &'static str| {
            let ((ra, fa), (rb, fb)) = (parts(a), parts(b));
            let reasons = match (ra.strip_suffix('*'), rb.strip_suffix('*')) {
                (Some(p), _) => rb.starts_with(p),
                (_, Some(p)) => ra.starts_with(p),
                _ => ra == rb,
            };
            reasons && (fa.is_none() || fb.is_none() || fa == fb)
        };
        let lists = (LINK.iter().map(|s| s.reasons))
            .chain([
                QDISC_REASONS,
                TC_REASONS,
                XDP_REASONS,
                TC_INGRESS_REASONS,
                NETKIT_REASONS,
                TC_EGRESS_REASONS,
                BACKLOG_REASONS,
            ])
            .chain(map::COUNTERS.iter().map(|m| m.reasons));
        for list in lists {
            let (far, near): (Vec<&str>, Vec<&str>) = list.iter().partition(|s| s.starts_with('~'));
            for f in &far {
                for n in &near {
                    assert!(!overlap(f, n), "{f} and {n} in {list:?}");
                }
            }
        }
    }

    #[test]
    fn drops_go_out_or_in_by_reason_and_function() {
        for (reason, location, dir) in [
            ("QDISC_DROP", "__dev_xmit_skb+0x2f0", Direction::Tx),
            ("FQ_FLOW_LIMIT", "fq_enqueue+0x1", Direction::Tx),
            ("TC_EGRESS", "sch_handle_egress+0x1", Direction::Tx),
            ("FULL_RING", "tun_net_xmit+0x1", Direction::Tx),
            ("NOT_SPECIFIED", "veth_xmit+0x1", Direction::Tx),
            (
                "NOT_SPECIFIED",
                "mlx5e_xmit+0x40 [mlx5_core]",
                Direction::Tx,
            ),
            ("CPU_BACKLOG", "enqueue_to_backlog+0x9", Direction::Rx),
            ("DEV_READY", "enqueue_to_backlog+0x9", Direction::Rx),
            ("NO_SOCKET", "__udp4_lib_rcv+0x1", Direction::Rx),
            ("TC_INGRESS", "sch_handle_ingress+0x1", Direction::Rx),
        ] {
            assert_eq!(direction(reason, location), dir, "{reason}@{location}");
        }
    }

    #[test]
    fn specs_match_families_and_functions() {
        assert!(matches("QDISC_*", "QDISC_DROP", "x"));
        assert!(matches("QDISC_*", "QDISC_OVERLIMIT", "x"));
        assert!(!matches("QDISC_*", "CPU_BACKLOG", "x"));
        assert!(matches(
            "~CPU_BACKLOG",
            "CPU_BACKLOG",
            "enqueue_to_backlog+0x1"
        ));
        assert!(matches(
            "~NOT_SPECIFIED@enqueue_to_backlog",
            "NOT_SPECIFIED",
            "enqueue_to_backlog+0x1"
        ));
        assert!(!matches(
            "NOT_SPECIFIED@veth_xmit",
            "NOT_SPECIFIED",
            "veth_xdp_rcv+0x1"
        ));
    }
}
