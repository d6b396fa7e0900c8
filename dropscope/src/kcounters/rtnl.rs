//! The device and qdisc counters of the namespace the calling thread is in, through rtnetlink:
//! an `RTM_GETLINK` dump (each link's `IFLA_STATS64`) and an `RTM_GETQDISC` dump (each qdisc's
//! `drops`, `overlimits` and `requeues`), decoded by `netlink-packet-route`.
//!
//! Counters are named `Link:<dev>:<stat>` (the stats64 field names, as `ip -s -s link` shows
//! them) and `Qdisc:<dev>:<kind> <handle>:<stat>` for a root or ingress/clsact qdisc, or
//! `Qdisc:<dev>:<kind> <handle> parent <parent>:<stat>` for one inside a hierarchy (handles
//! written as `tc` writes them: `1:`, `ffff:`, `:1`). Names are escaped as `/proc/net/dev`'s
//! are; counters at zero are left out (a missing counter reads as zero).
//!
//! Bounded: a dump is cut after [`MAX_ENTRIES`] entries or [`DUMP_TIME`], and a receive that
//! waits longer than [`RECV_TIMEOUT`] ends it; each cut is a note, never a hang.
use std::time::Instant;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{LinkAttribute, LinkMessage},
    tc::{TcAttribute, TcHandle, TcMessage, TcStats2},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use super::{
    hooks::Hooked,
    netlink::{DUMP_TIME, RECV_TIMEOUT},
    parse::Counters,
};
use crate::vocab::{counter::Counter, devices::Devices};

/// The most links, or qdiscs, one dump reads in one namespace.
pub const MAX_ENTRIES: usize = 2048;
/// The most tc filters dumped in one namespace per reading, over all its devices and sides
/// (each dump is bounded by [`MAX_ENTRIES`] too): the sides past it are not read, and a note
/// says how many, so filters made in bulk in one namespace cost its own reading a bounded
/// time.
pub const MAX_FILTERS_PER_NAMESPACE: usize = 4096;

/// The stats64 fields read, by name: the drop and error counters of the device.
pub const LINK_STATS: &[&str] = &[
    "rx_dropped",
    "rx_missed_errors",
    "rx_fifo_errors",
    "rx_over_errors",
    "rx_crc_errors",
    "rx_frame_errors",
    "rx_length_errors",
    "rx_nohandler",
    "tx_dropped",
    "tx_aborted_errors",
    "tx_fifo_errors",
    "tx_carrier_errors",
];

/// `TC_H_ROOT`: the parent of a root qdisc.
const TC_H_ROOT: u32 = 0xffff_ffff;
/// `TC_H_INGRESS`: the parent of the ingress and clsact qdiscs.
const TC_H_INGRESS: u32 = 0xffff_fff1;

/// What an rtnetlink reading of one namespace found beside its counters.
#[derive(Debug, Default)]
pub struct Found {
    /// The XDP and tc programs attached to its devices.
    pub hooks: Vec<Hooked>,
    /// Whether `hooks` is whole: every dump that finds programs answered.
    pub hooks_whole: bool,
    /// Its devices' names (escaped) by interface index; empty when the links were not read
    /// whole.
    pub devices: Devices,
    /// What could not be read, or was cut.
    pub notes: Vec<String>,
    /// The TCP listeners whose accept queue is full (see [`super::listeners`]).
    pub listeners: Vec<crate::vocab::reading::Listener>,
    /// The namespace's nftables ruleset (see [`super::nftables`]).
    pub ruleset: Option<crate::culprit::ruleset::Ruleset>,
}

/// An rtnetlink socket of one namespace, kept between reads (the initial namespace's) or made
/// for one read (any other: a socket would keep its namespace alive).
#[derive(Default)]
pub struct Rtnl {
    /// Opened on first use, in the namespace the calling thread is in then; dropped after a
    /// dump that was cut or failed, so no late answer of it is read as part of the next.
    socket: Option<Socket>,
    /// The sequence number of the last request; answers to earlier ones are skipped.
    sequence: u32,
}

impl Rtnl {
    /// Adds the link and qdisc counters of the socket's namespace (opened in the calling
    /// thread's if there is none yet) to `out`; returns the programs attached to its devices,
    /// its devices' names and what could not be read (or was cut).
    pub fn read(&mut self, out: &mut Counters) -> Found {
        let mut found = Found::default();
        let (hooks, notes) = (&mut found.hooks, &mut found.notes);
        let (names, links_whole) = match self.dump(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            "links",
        ) {
            Ok((msgs, note)) => {
                let whole = note.is_none();
                notes.extend(note);
                let names = links(&msgs, out);
                super::hooks::xdp(&msgs, &names, hooks);
                notes.extend(super::hooks::tcx(&names, hooks));
                let primaries = super::hooks::netkit_primaries(&msgs, &names);
                notes.extend(super::hooks::netkit(&primaries, hooks));
                let sock = self.socket.as_ref().map(std::os::fd::AsFd::as_fd);
                notes.extend(super::ethtool::read(sock, &raw_names(&msgs), out));
                // AF_XDP sockets get packets only from an XDP program.
                if hooks.iter().any(|h| h.hook.is_xdp()) {
                    notes.extend(super::xsk::read(&names, out));
                }
                (names, whole)
            }
            Err(e) => {
                notes.push(format!("links not read: {e}"));
                return found;
            }
        };
        found.hooks_whole = match self.dump(
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
            "qdiscs",
        ) {
            Ok((msgs, note)) => {
                notes.extend(note);
                qdiscs(&msgs, &names, out);
                self.filters(&msgs, &names, hooks, notes)
            }
            Err(e) => {
                notes.push(format!("qdiscs not read: {e}"));
                false
            }
        };
        // Only a whole dump says which devices there are.
        if links_whole {
            found.devices = names.into_iter().collect();
        }
        found
    }

    /// The tc `bpf` filters' programs of each ingress and clsact qdisc of `qdiscs`; whether
    /// every side's filters were read.
    fn filters(
        &mut self,
        qdiscs: &[RouteNetlinkMessage],
        names: &std::collections::HashMap<u32, String>,
        hooks: &mut Vec<Hooked>,
        notes: &mut Vec<String>,
    ) -> bool {
        let mut complete = true;
        let (mut dumped, mut skipped) = (0usize, 0usize);
        for (index, hook, parent) in super::hooks::filter_sides(qdiscs) {
            let Some(dev) = names.get(&index) else {
                continue;
            };
            if dumped >= MAX_FILTERS_PER_NAMESPACE {
                skipped += 1;
                continue;
            }
            match self.dump(super::hooks::filter_request(index, parent), "tc filters") {
                Ok((msgs, note)) => {
                    dumped += msgs.len();
                    notes.extend(note);
                    super::hooks::tc(&msgs, dev, hook, hooks);
                }
                // The qdisc went since the qdisc dump.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => {
                    notes.push(format!("tc filters of {dev} not read: {e}"));
                    complete = false;
                }
            }
        }
        if skipped > 0 {
            notes.push(format!(
                "tc filters of {skipped} qdisc sides not read: {dumped} filters were dumped \
                 already (at most {MAX_FILTERS_PER_NAMESPACE} a namespace and reading); programs \
                 attached there are not known"
            ));
            complete = false;
        }
        complete
    }

    /// One dump, on the kept socket; the socket is dropped if the dump did not end cleanly.
    fn dump(
        &mut self,
        request: RouteNetlinkMessage,
        what: &str,
    ) -> std::io::Result<(Vec<RouteNetlinkMessage>, Option<String>)> {
        let socket = match self.socket.take() {
            Some(s) => s,
            None => {
                let s = Socket::new(NETLINK_ROUTE)?;
                socket2::SockRef::from(&s).set_read_timeout(Some(RECV_TIMEOUT))?;
                s
            }
        };
        self.sequence = self.sequence.wrapping_add(1);
        let result = dump(&socket, self.sequence, request, what);
        if matches!(result, Ok((_, None))) {
            self.socket = Some(socket);
        }
        result
    }
}

/// Sends one dump request and collects its answers, bounded; a note when it was cut.
fn dump(
    socket: &Socket,
    sequence: u32,
    request: RouteNetlinkMessage,
    what: &str,
) -> std::io::Result<(Vec<RouteNetlinkMessage>, Option<String>)> {
    let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(request));
    packet.header.flags = NLM_F_DUMP | NLM_F_REQUEST;
    packet.header.sequence_number = sequence;
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    socket.send_to(&buf, &SocketAddr::new(0, 0), 0)?;
    collect(socket, sequence, what)
}

/// Collects the answers to dump `sequence` from `socket`, bounded by [`MAX_ENTRIES`] and
/// [`DUMP_TIME`] whatever the peer sends; a note when it was cut.
fn collect(
    socket: &Socket,
    sequence: u32,
    what: &str,
) -> std::io::Result<(Vec<RouteNetlinkMessage>, Option<String>)> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut note = None;
    let mut undecoded = 0usize;
    let mut recv = vec![0u8; 64 << 10];
    'dump: loop {
        if out.len() >= MAX_ENTRIES || start.elapsed() > DUMP_TIME {
            note = Some(format!(
                "{what}: dump cut after {} entries in {:.1}s (at most {MAX_ENTRIES} in {}s)",
                out.len(),
                start.elapsed().as_secs_f64(),
                DUMP_TIME.as_secs()
            ));
            break;
        }
        let n = match socket.recv(&mut &mut recv[..], 0) {
            Ok(n) => n.min(recv.len()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock) => {
                note = Some(format!(
                    "{what}: the kernel stopped answering after {} entries",
                    out.len()
                ));
                break;
            }
            Err(e) => return Err(e),
        };
        let mut at = 0;
        while at < n {
            let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&recv[at..n]) else {
                // Nothing more can be framed in this datagram.
                undecoded += 1;
                break;
            };
            let len = msg.header.length as usize;
            // An answer to an earlier request (one cut short) is not part of this dump.
            let ours = msg.header.sequence_number == sequence;
            if ours && msg.header.flags & NLM_F_DUMP_INTR != 0 && note.is_none() {
                note = Some(format!(
                    "{what}: changed while dumped (some entries may be missing)"
                ));
            }
            match msg.payload {
                _ if !ours => {}
                NetlinkPayload::Done(_) => break 'dump,
                NetlinkPayload::Error(e) => {
                    return Err(e.to_io());
                }
                NetlinkPayload::InnerMessage(m) => out.push(m),
                _ => {}
            }
            if len == 0 {
                break;
            }
            at += len;
        }
        if n == 0 {
            break;
        }
    }
    if undecoded > 0 && note.is_none() {
        note = Some(format!("{what}: {undecoded} answers could not be decoded"));
    }
    Ok((out, note))
}

/// Escapes a kernel name as `/proc/net/dev`'s names are (see [`crate::sanitize::kernel_name`]).
fn escaped(name: &str) -> String {
    crate::sanitize::kernel_name(name).into_owned()
}

/// Each link's name, as the kernel has it and escaped.
fn raw_names(msgs: &[RouteNetlinkMessage]) -> Vec<(String, String)> {
    msgs.iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => l.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) if !n.is_empty() => Some((n.clone(), escaped(n))),
                _ => None,
            }),
            _ => None,
        })
        .collect()
}

/// Adds each link's drop counters; returns the names by interface index.
fn links(
    msgs: &[RouteNetlinkMessage],
    out: &mut Counters,
) -> std::collections::HashMap<u32, String> {
    let mut names = std::collections::HashMap::new();
    for m in msgs {
        let RouteNetlinkMessage::NewLink(link) = m else {
            continue;
        };
        let mut name = None;
        let mut stats = None;
        for a in &link.attributes {
            match a {
                LinkAttribute::IfName(n) => name = Some(escaped(n)),
                LinkAttribute::Stats64(s) => stats = Some(s),
                _ => {}
            }
        }
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            continue;
        };
        names.insert(link.header.index, name.clone());
        let Some(s) = stats else { continue };
        let values = [
            s.rx_dropped,
            s.rx_missed_errors,
            s.rx_fifo_errors,
            s.rx_over_errors,
            s.rx_crc_errors,
            s.rx_frame_errors,
            s.rx_length_errors,
            s.rx_nohandler,
            s.tx_dropped,
            s.tx_aborted_errors,
            s.tx_fifo_errors,
            s.tx_carrier_errors,
        ];
        for (stat, v) in LINK_STATS.iter().zip(values) {
            if v > 0 {
                out.insert(Counter::Link { dev: &name, stat }.to_string(), v);
            }
        }
    }
    names
}

/// A handle as `tc` writes it: `1:`, `:1`, `1:2`, `root`, `none`.
pub fn handle(h: u32) -> String {
    let (major, minor) = (h >> 16, h & 0xffff);
    match h {
        TC_H_ROOT => "root".into(),
        0 => "none".into(),
        _ if major == 0 => format!(":{minor:x}"),
        _ if minor == 0 => format!("{major:x}:"),
        _ => format!("{major:x}:{minor:x}"),
    }
}

fn raw(h: TcHandle) -> u32 {
    (u32::from(h.major) << 16) | u32::from(h.minor)
}

/// The middle of a qdisc's counter names: `<kind> <handle>` for a root or ingress qdisc,
/// `<kind> <handle> parent <parent>` for one inside a hierarchy.
pub fn qdisc_label(kind: &str, handle_raw: u32, parent_raw: u32) -> String {
    let kind = escaped(kind).replace(':', "_");
    let h = match handle_raw {
        0 => "0:".to_string(),
        h => handle(h),
    };
    match parent_raw {
        TC_H_ROOT | TC_H_INGRESS => format!("{kind} {h}"),
        p => format!("{kind} {h} parent {}", handle(p)),
    }
}

/// Adds each qdisc's drops, overlimits and requeues (from `TCA_STATS2`, else `TCA_STATS`).
fn qdiscs(
    msgs: &[RouteNetlinkMessage],
    names: &std::collections::HashMap<u32, String>,
    out: &mut Counters,
) {
    for m in msgs {
        let RouteNetlinkMessage::NewQueueDiscipline(q) = m else {
            continue;
        };
        let Some(dev) = u32::try_from(q.header.index)
            .ok()
            .and_then(|i| names.get(&i))
        else {
            continue;
        };
        let mut kind = None;
        let mut queue = None;
        let mut compat = None;
        for a in &q.attributes {
            match a {
                TcAttribute::Kind(k) => kind = Some(k.as_str()),
                TcAttribute::Stats2(s) => {
                    for s in s {
                        if let TcStats2::Queue(q) = s {
                            queue = Some((q.drops, q.overlimits, q.requeues));
                        }
                    }
                }
                TcAttribute::Stats(s) => compat = Some((s.drops, s.overlimits, 0)),
                _ => {}
            }
        }
        let (Some(kind), Some((drops, overlimits, requeues))) = (kind, queue.or(compat)) else {
            continue;
        };
        let label = qdisc_label(kind, raw(q.header.handle), raw(q.header.parent));
        for (stat, v) in [
            ("drops", drops),
            ("overlimits", overlimits),
            ("requeues", requeues),
        ] {
            // Kept at zero too: a qdisc made again under the same kind and handle reads 0
            // before it drops, and so is told from one not read (see `resets`).
            let label = &label;
            out.insert(
                Counter::Qdisc { dev, label, stat }.to_string(),
                u64::from(v),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A peer that keeps answering a filter dump and never sends `NLMSG_DONE`: the dump is
    /// cut at its bound of entries, with a note, never a hang.
    #[test]
    fn a_filter_dump_that_never_ends_is_cut_with_a_note() {
        let mut m = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::from(RouteNetlinkMessage::NewTrafficFilter(TcMessage::default())),
        );
        m.header.sequence_number = 5;
        m.header.flags = 2; // NLM_F_MULTI
        m.finalize();
        let mut one = vec![0u8; m.buffer_len()];
        m.serialize(&mut one);
        let datagram = one.repeat(16);
        let (s, sender) = super::super::netlink::endless::peer(datagram);
        let (out, note) = collect(&s, 5, "tc filters").expect("no error");
        drop(s);
        assert!(sender.join().expect("the peer") > 0);
        assert_eq!(out.len(), MAX_ENTRIES);
        let note = note.expect("a note");
        assert!(
            note.starts_with(&format!("tc filters: dump cut after {MAX_ENTRIES} entries")),
            "{note}"
        );
    }

    #[test]
    fn kernel_names_are_escaped_with_the_terminals_rule() {
        assert_eq!(escaped("eth0\u{34f}"), "eth0\\u{34f}");
        assert_eq!(escaped("x\u{1b}[2J"), "x\\u{1b}[2J");
        assert_eq!(
            qdisc_label("fq\u{200b}", 0x10000, TC_H_ROOT),
            "fq\\u{200b} 1:"
        );
    }

    #[test]
    fn handles_are_written_as_tc_writes_them() {
        assert_eq!(handle(0x0001_0000), "1:");
        assert_eq!(handle(0xffff_0000), "ffff:");
        assert_eq!(handle(0x0000_0001), ":1");
        assert_eq!(handle(0x0001_0002), "1:2");
        assert_eq!(handle(TC_H_ROOT), "root");
        assert_eq!(qdisc_label("pfifo", 0x0001_0000, TC_H_ROOT), "pfifo 1:");
        assert_eq!(
            qdisc_label("clsact", 0xffff_0000, TC_H_INGRESS),
            "clsact ffff:"
        );
        assert_eq!(qdisc_label("mq", 0, TC_H_ROOT), "mq 0:");
        assert_eq!(
            qdisc_label("pfifo_fast", 0, 0x0000_0001),
            "pfifo_fast 0: parent :1"
        );
        assert_eq!(qdisc_label("a:b\n", 0x0002_0000, TC_H_ROOT), "a_b\\n 2:");
    }

    #[test]
    fn links_and_qdiscs_become_named_counters() {
        use netlink_packet_route::link::Stats64;
        let mut link = LinkMessage::default();
        link.header.index = 7;
        link.attributes
            .push(LinkAttribute::IfName("veth\u{1b}0".into()));
        let mut stats = Stats64::default();
        stats.rx_dropped = 3;
        stats.tx_carrier_errors = 2;
        link.attributes.push(LinkAttribute::Stats64(stats));
        let mut out = Counters::new();
        let names = links(&[RouteNetlinkMessage::NewLink(link)], &mut out);
        assert_eq!(out["Link:veth\\u{1b}0:rx_dropped"], 3);
        assert_eq!(out["Link:veth\\u{1b}0:tx_carrier_errors"], 2);
        assert_eq!(out.len(), 2, "zeros are left out: {out:?}");

        let mut q = TcMessage::default();
        q.header.index = 7;
        q.header.handle = TcHandle { major: 1, minor: 0 };
        q.header.parent = TcHandle::ROOT;
        q.attributes.push(TcAttribute::Kind("pfifo".into()));
        let mut queue = netlink_packet_route::tc::TcStatsQueue::default();
        queue.drops = 5;
        queue.requeues = 1;
        q.attributes
            .push(TcAttribute::Stats2(vec![TcStats2::Queue(queue)]));
        let mut out = Counters::new();
        qdiscs(
            &[RouteNetlinkMessage::NewQueueDiscipline(q)],
            &names,
            &mut out,
        );
        assert_eq!(out["Qdisc:veth\\u{1b}0:pfifo 1::drops"], 5);
        assert_eq!(out["Qdisc:veth\\u{1b}0:pfifo 1::requeues"], 1);
        // At zero too: a qdisc made again reads 0 before it drops.
        assert_eq!(out["Qdisc:veth\\u{1b}0:pfifo 1::overlimits"], 0);
        assert_eq!(out.len(), 3, "{out:?}");
    }

    #[test]
    fn this_namespace_dumps_without_error_on_a_kept_socket_too() {
        let mut rtnl = Rtnl::default();
        let mut first = Counters::new();
        let found = rtnl.read(&mut first);
        assert!(
            found.notes.is_empty() && found.hooks_whole,
            "{:?}",
            found.notes
        );
        assert!(
            found.devices.values().any(|d| d == "lo"),
            "{:?}",
            found.devices
        );
        assert!(rtnl.socket.is_some(), "a clean dump keeps its socket");
        // The second dump on the same socket reads the same devices (lo at least).
        let mut second = Counters::new();
        let again = rtnl.read(&mut second);
        assert!(
            again.notes.is_empty() && again.hooks_whole,
            "{:?}",
            again.notes
        );
        assert_eq!(found.devices, again.devices);
        let devices = |c: &Counters| -> BTreeSet<String> {
            c.keys()
                .filter_map(|k| match Counter::parse(k)? {
                    Counter::Link { dev, .. } => Some(dev.to_string()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(devices(&first), devices(&second));
    }
}
