//! Where BPF programs are attached: each device's XDP programs (`IFLA_XDP` of the link dump),
//! tc `bpf` filters (an `RTM_GETTFILTER` dump of each ingress or clsact qdisc's ingress
//! and egress), tcx links and the programs of each netkit pair (`BPF_PROG_QUERY` on its
//! primary device), as the namespace's reading finds them. The verdict counters (`probe::verdicts`) turn
//! them into the ledger's `Xdp:` and `Tc:` counters.
use std::collections::HashMap;

use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{InfoData, InfoNetkit, LinkAttribute, LinkInfo, LinkLayerType, LinkXdp},
    tc::{TcAttribute, TcFilterBpfOption, TcHandle, TcMessage, TcOption},
};

/// A hook a program is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    /// Native XDP, in the driver.
    XdpDrv,
    /// Generic XDP, on the packet's skb.
    XdpGeneric,
    /// XDP offloaded to the NIC.
    XdpOffload,
    /// A tc `bpf` filter on ingress.
    TcIngress,
    /// A tc `bpf` filter on egress.
    TcEgress,
    /// A tcx program on ingress (6.6+: a link, no qdisc).
    TcxIngress,
    /// A tcx program on egress.
    TcxEgress,
    /// A netkit program run on what the primary device sends (6.7+).
    NetkitPrimary,
    /// A netkit program run on what the peer device sends (the container's egress).
    NetkitPeer,
}

impl Hook {
    /// Whether it is an XDP hook.
    pub fn is_xdp(self) -> bool {
        matches!(self, Hook::XdpDrv | Hook::XdpGeneric | Hook::XdpOffload)
    }

    /// Its name in counter names (as `ip link` and `tc filter` say it).
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::XdpDrv => "xdpdrv",
            Hook::XdpGeneric => "xdpgeneric",
            Hook::XdpOffload => "xdpoffload",
            Hook::TcIngress => "ingress",
            Hook::TcEgress => "egress",
            Hook::TcxIngress => "tcx-ingress",
            Hook::TcxEgress => "tcx-egress",
            Hook::NetkitPrimary => "netkit-primary",
            Hook::NetkitPeer => "netkit-peer",
        }
    }

    /// The kind of program that attaches here.
    pub fn kind_name(self) -> &'static str {
        match self {
            Hook::XdpDrv | Hook::XdpGeneric | Hook::XdpOffload => "xdp",
            Hook::TcIngress | Hook::TcEgress | Hook::TcxIngress | Hook::TcxEgress => "tc",
            Hook::NetkitPrimary | Hook::NetkitPeer => "netkit",
        }
    }
}

/// A program attached to a device of the namespace read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hooked {
    /// The device (escaped as counter names are).
    pub device: String,
    /// Where on it.
    pub hook: Hook,
    /// The program's id.
    pub prog: u32,
    /// Whether the device's frames begin with an Ethernet header (`ARPHRD_ETHER`, and
    /// loopback's); an XDP program's `data` is then its MAC header, else its network header.
    pub ethernet: bool,
    /// A tc `bpf` filter's priority and handle (`None` for the other hooks).
    pub filter: Option<crate::culprit::programs::TcFilter>,
}

/// The XDP programs of a link dump's messages.
pub fn xdp(msgs: &[RouteNetlinkMessage], names: &HashMap<u32, String>, out: &mut Vec<Hooked>) {
    for m in msgs {
        let RouteNetlinkMessage::NewLink(link) = m else {
            continue;
        };
        let Some(device) = names.get(&link.header.index) else {
            continue;
        };
        for a in &link.attributes {
            let LinkAttribute::Xdp(xdp) = a else { continue };
            for x in xdp {
                let (hook, prog) = match *x {
                    LinkXdp::DrvProgId(p) => (Hook::XdpDrv, p),
                    LinkXdp::SkbProgId(p) => (Hook::XdpGeneric, p),
                    LinkXdp::HwProgId(p) => (Hook::XdpOffload, p),
                    _ => continue,
                };
                if prog != 0 {
                    out.push(Hooked {
                        device: device.clone(),
                        hook,
                        prog,
                        ethernet: matches!(
                            link.header.link_layer_type,
                            LinkLayerType::Ether | LinkLayerType::Loopback
                        ),
                        filter: None,
                    });
                }
            }
        }
    }
}

/// The most programs read of one tcx hook.
pub const MAX_TCX: usize = 64;

/// What a walk of the loaded programs told about tc programs: not yet known, none loaded, or
/// one seen (remembered for good: it may be attached anywhere, and later).
#[derive(Debug, Default)]
pub struct TcPrograms(std::sync::atomic::AtomicU8);

impl TcPrograms {
    const UNKNOWN: u8 = 0;
    const NONE: u8 = 1;
    const SEEN: u8 = 2;

    /// Takes in a walk's finding: `seen`, a `sched_cls` or `sched_act` program; otherwise,
    /// with `complete` (the walk reached the last id and looked at every program), none.
    pub fn found(&self, seen: bool, complete: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if seen {
            self.0.store(Self::SEEN, Relaxed);
        } else if complete {
            let _ = self
                .0
                .compare_exchange(Self::UNKNOWN, Self::NONE, Relaxed, Relaxed);
        }
    }

    /// Whether devices are to be asked for tcx programs: unless a walk found that no tc
    /// program is loaded (with no walk at all, every device is asked).
    pub fn worth_asking(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) != Self::NONE
    }
}

/// This process's: the program watch (`probe::verdicts`) walks, the tcx reading asks. With no tc
/// program loaded, no device can have a tcx program, and its two `BPF_PROG_QUERY` calls per
/// device and reading are spared.
pub static TC_PROGRAMS: TcPrograms = TcPrograms(std::sync::atomic::AtomicU8::new(0));

/// The tcx programs of each device of `names` (this thread's namespace), by `BPF_PROG_QUERY`:
/// two calls per device; none after the first answers that this kernel has no tcx (before
/// 6.6), and none when no tc program is loaded ([`TC_PROGRAMS`]). Without the live feature
/// there is no BPF here: nothing.
pub fn tcx(names: &HashMap<u32, String>, out: &mut Vec<Hooked>) -> Vec<String> {
    #[cfg(feature = "live")]
    {
        if !TC_PROGRAMS.worth_asking() {
            return Vec::new();
        }
        use aya_obj::generated::bpf_attach_type::{BPF_TCX_EGRESS, BPF_TCX_INGRESS};
        let mut notes = Vec::new();
        let mut devices: Vec<_> = names.iter().collect();
        devices.sort();
        for (index, device) in devices {
            for (hook, at) in [
                (Hook::TcxIngress, BPF_TCX_INGRESS),
                (Hook::TcxEgress, BPF_TCX_EGRESS),
            ] {
                match crate::probe::sys::query_device(*index, at as u32, MAX_TCX) {
                    Ok(ids) => out.extend(ids.into_iter().map(|prog| Hooked {
                        device: device.clone(),
                        hook,
                        prog,
                        ethernet: true,
                        filter: None,
                    })),
                    // No tcx on this kernel: nothing more to ask.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return notes,
                    // Gone since the link dump.
                    Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
                    Err(e) => notes.push(format!("tcx programs of {device} not read: {e}")),
                }
            }
        }
        notes
    }
    #[cfg(not(feature = "live"))]
    {
        let _ = (names, out);
        Vec::new()
    }
}

/// The primary devices of the netkit pairs of a link dump's messages (index, name): their
/// programs, primary's and peer's, are asked of the primary.
pub fn netkit_primaries<'a>(
    msgs: &[RouteNetlinkMessage],
    names: &'a HashMap<u32, String>,
) -> Vec<(u32, &'a String)> {
    let mut out = Vec::new();
    for m in msgs {
        let RouteNetlinkMessage::NewLink(link) = m else {
            continue;
        };
        let primary = (link.attributes.iter())
            .filter_map(|a| match a {
                LinkAttribute::LinkInfo(infos) => Some(infos),
                _ => None,
            })
            .flatten()
            .any(|i| {
                matches!(i, LinkInfo::Data(InfoData::Netkit(d))
                    if d.iter().any(|x| matches!(x, InfoNetkit::Primary(true))))
            });
        if let (true, Some(name)) = (primary, names.get(&link.header.index)) {
            out.push((link.header.index, name));
        }
    }
    out.sort();
    out
}

/// The programs of each netkit pair whose primary is in `primaries` (`BPF_PROG_QUERY`: two
/// calls per pair, and none on a host without netkit devices), named by the primary device.
pub fn netkit(primaries: &[(u32, &String)], out: &mut Vec<Hooked>) -> Vec<String> {
    #[cfg(feature = "live")]
    {
        use aya_obj::generated::bpf_attach_type::{BPF_NETKIT_PEER, BPF_NETKIT_PRIMARY};
        let mut notes = Vec::new();
        for (index, device) in primaries {
            for (hook, at) in [
                (Hook::NetkitPrimary, BPF_NETKIT_PRIMARY),
                (Hook::NetkitPeer, BPF_NETKIT_PEER),
            ] {
                match crate::probe::sys::query_device(*index, at as u32, MAX_TCX) {
                    Ok(ids) => out.extend(ids.into_iter().map(|prog| Hooked {
                        device: (*device).clone(),
                        hook,
                        prog,
                        ethernet: true,
                        filter: None,
                    })),
                    // Gone since the link dump, or its peer is.
                    Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
                    Err(e) => notes.push(format!("netkit programs of {device} not read: {e}")),
                }
            }
        }
        notes
    }
    #[cfg(not(feature = "live"))]
    {
        let _ = (primaries, out);
        Vec::new()
    }
}

/// `TC_H_MIN_INGRESS` and `TC_H_MIN_EGRESS` under `TC_H_CLSACT` (`ffff:fff2`, `ffff:fff3`).
pub const INGRESS_PARENT: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0xfff2,
};
/// See [`INGRESS_PARENT`].
pub const EGRESS_PARENT: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0xfff3,
};

/// The dump request of the filters of device `index` under `parent`.
pub fn filter_request(index: u32, parent: TcHandle) -> RouteNetlinkMessage {
    let mut m = TcMessage::default();
    m.header.index = index as i32;
    m.header.parent = parent;
    RouteNetlinkMessage::GetTrafficFilter(m)
}

/// The sides whose filters to dump: each ingress qdisc's ingress, each clsact's both.
pub fn filter_sides(msgs: &[RouteNetlinkMessage]) -> Vec<(u32, Hook, TcHandle)> {
    let mut out = Vec::new();
    for m in msgs {
        let RouteNetlinkMessage::NewQueueDiscipline(q) = m else {
            continue;
        };
        let Ok(index) = u32::try_from(q.header.index) else {
            continue;
        };
        let kind = q.attributes.iter().find_map(|a| match a {
            TcAttribute::Kind(k) => Some(k.as_str()),
            _ => None,
        });
        match kind {
            Some("ingress") => out.push((index, Hook::TcIngress, INGRESS_PARENT)),
            Some("clsact") => {
                out.push((index, Hook::TcIngress, INGRESS_PARENT));
                out.push((index, Hook::TcEgress, EGRESS_PARENT));
            }
            _ => {}
        }
    }
    out
}

/// The `bpf` filters' programs of a filter dump of `device` (`hook`: the side dumped).
pub fn tc(msgs: &[RouteNetlinkMessage], device: &str, hook: Hook, out: &mut Vec<Hooked>) {
    for m in msgs {
        let RouteNetlinkMessage::NewTrafficFilter(f) = m else {
            continue;
        };
        for a in &f.attributes {
            let TcAttribute::Options(opts) = a else {
                continue;
            };
            for o in opts {
                if let TcOption::Bpf(TcFilterBpfOption::ProgId(prog)) = o
                    && *prog != 0
                {
                    // `tcm_info`: the priority (`pref`) above the protocol.
                    let h = Hooked {
                        device: device.to_string(),
                        hook,
                        prog: *prog,
                        ethernet: true,
                        filter: Some(crate::culprit::programs::TcFilter {
                            pref: (f.header.info >> 16) as u16,
                            handle: u32::from(f.header.handle.major) << 16
                                | u32::from(f.header.handle.minor),
                        }),
                    };
                    // Each filter comes once per priority and handle: a program once per side.
                    if !out.contains(&h) {
                        out.push(h);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::link::LinkMessage;

    use super::*;

    #[test]
    fn xdp_ids_name_their_mode_and_device() {
        let mut link = LinkMessage::default();
        link.header.index = 4;
        link.header.link_layer_type = LinkLayerType::Ether;
        link.attributes.push(LinkAttribute::Xdp(vec![
            LinkXdp::ProgId(9),
            LinkXdp::DrvProgId(9),
            LinkXdp::SkbProgId(0),
        ]));
        let names = HashMap::from([(4, "veth1".to_string())]);
        let mut out = Vec::new();
        // A device without a MAC header (a tun device, wireguard) says so.
        let mut l3 = link.clone();
        l3.header.link_layer_type = LinkLayerType::None;
        xdp(&[RouteNetlinkMessage::NewLink(l3)], &names, &mut out);
        assert!(out.len() == 1 && !out[0].ethernet, "{out:?}");
        out.clear();
        xdp(&[RouteNetlinkMessage::NewLink(link)], &names, &mut out);
        assert_eq!(
            out,
            [Hooked {
                device: "veth1".into(),
                hook: Hook::XdpDrv,
                prog: 9,
                ethernet: true,
                filter: None,
            }]
        );
    }

    #[test]
    fn netkit_pairs_are_asked_on_their_primary_only() {
        use netlink_packet_route::link::InfoKind;
        let netkit = |index: u32, primary: bool| {
            let mut link = LinkMessage::default();
            link.header.index = index;
            link.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Netkit),
                LinkInfo::Data(InfoData::Netkit(vec![InfoNetkit::Primary(primary)])),
            ]));
            RouteNetlinkMessage::NewLink(link)
        };
        let mut veth = LinkMessage::default();
        veth.header.index = 3;
        let names = HashMap::from([
            (3, "veth0".to_string()),
            (7, "nk0".to_string()),
            (8, "nk1".to_string()),
        ]);
        let msgs = [
            RouteNetlinkMessage::NewLink(veth),
            netkit(8, false),
            netkit(7, true),
        ];
        let found = netkit_primaries(&msgs, &names);
        assert_eq!(found, [(7, &"nk0".to_string())]);
        assert_eq!(
            (Hook::NetkitPeer.as_str(), Hook::NetkitPeer.kind_name()),
            ("netkit-peer", "netkit")
        );
    }

    #[test]
    fn bpf_filters_give_their_program_once() {
        let mut f = TcMessage::default();
        f.attributes.push(TcAttribute::Kind("bpf".into()));
        f.attributes.push(TcAttribute::Options(vec![
            TcOption::Bpf(TcFilterBpfOption::ProgName("shoot".into())),
            TcOption::Bpf(TcFilterBpfOption::ProgId(17)),
        ]));
        let msgs = [
            RouteNetlinkMessage::NewTrafficFilter(f.clone()),
            RouteNetlinkMessage::NewTrafficFilter(f),
        ];
        let mut out = Vec::new();
        tc(&msgs, "eth0", Hook::TcIngress, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].prog, out[0].hook.as_str()), (17, "ingress"));
    }

    /// A filter is named by its priority (`tcm_info`'s upper half) and handle, as `tc filter
    /// show` prints them: the same program in two filters is two filters.
    #[test]
    fn a_bpf_filter_keeps_its_priority_and_handle() {
        let filter = |pref: u32, minor: u16| {
            let mut f = TcMessage::default();
            f.header.info = pref << 16 | 0x0003; // ETH_P_ALL below
            f.header.handle = TcHandle { major: 0, minor };
            f.attributes.push(TcAttribute::Kind("bpf".into()));
            f.attributes.push(TcAttribute::Options(vec![TcOption::Bpf(
                TcFilterBpfOption::ProgId(17),
            )]));
            RouteNetlinkMessage::NewTrafficFilter(f)
        };
        let mut out = Vec::new();
        tc(
            &[filter(49152, 1), filter(7, 0x2a)],
            "eth0",
            Hook::TcEgress,
            &mut out,
        );
        let named: Vec<_> = (out.iter())
            .map(|h| h.filter.map(|f| (f.pref, f.handle_text())))
            .collect();
        assert_eq!(
            named,
            [Some((49152, "0x1".into())), Some((7, "0x2a".into()))]
        );
    }

    #[test]
    fn tcx_is_asked_until_a_complete_walk_finds_no_tc_program_and_again_once_one_is_seen() {
        let tc = TcPrograms::default();
        assert!(tc.worth_asking(), "no walk yet: ask");
        tc.found(false, false);
        assert!(tc.worth_asking(), "a walk cut short proves nothing");
        tc.found(false, true);
        assert!(!tc.worth_asking(), "every program looked at, none tc");
        tc.found(true, false);
        assert!(tc.worth_asking(), "a tc program loaded since");
        tc.found(false, true);
        assert!(
            tc.worth_asking(),
            "a later walk of new ids only does not forget it"
        );
    }
}
