//! A netkit pair (6.7+) for the tests of programs that drop: made with rtnetlink (no iproute2
//! that knows netkit is needed), the primary in one namespace and the peer in another, in L2
//! mode (frames keep their Ethernet header, as the fixture programs expect).
use std::{io, os::fd::AsRawFd, path::Path};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{InfoData, InfoKind, InfoNetkit, LinkAttribute, LinkInfo, LinkMessage, NetkitMode},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// Makes `primary` in the namespace at `netns` and `peer` in the one at `peer_netns`.
pub fn create(netns: &Path, primary: &str, peer_netns: &Path, peer: &str) -> io::Result<()> {
    let (netns, peer_netns) = (netns.to_path_buf(), peer_netns.to_path_buf());
    let (primary, peer) = (primary.to_string(), peer.to_string());
    // A thread of its own enters the primary's namespace.
    std::thread::spawn(move || -> io::Result<()> {
        let ns = std::fs::File::open(&netns)?;
        let target = std::fs::File::open(&peer_netns)?;
        // SAFETY: setns(2) on a namespace file we hold, for this thread only.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut peer_msg = LinkMessage::default();
        peer_msg.attributes.push(LinkAttribute::IfName(peer));
        peer_msg
            .attributes
            .push(LinkAttribute::NetNsFd(target.as_raw_fd()));
        let mut link = LinkMessage::default();
        link.attributes.push(LinkAttribute::IfName(primary));
        link.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Netkit),
            LinkInfo::Data(InfoData::Netkit(vec![
                InfoNetkit::Mode(NetkitMode::L2),
                InfoNetkit::Peer(peer_msg),
            ])),
        ]));
        request(RouteNetlinkMessage::NewLink(link))
    })
    .join()
    .map_err(|_| io::Error::other("the netkit thread panicked"))?
}

/// Sends one request and waits for its acknowledgement.
fn request(msg: RouteNetlinkMessage) -> io::Result<()> {
    let mut packet = NetlinkMessage::from(msg);
    packet.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    packet.header.sequence_number = 1;
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    let socket = Socket::new(NETLINK_ROUTE)?;
    socket.send_to(&buf, &SocketAddr::new(0, 0), 0)?;
    let mut recv = vec![0u8; 8192];
    let n = socket.recv(&mut &mut recv[..], 0)?;
    let answer = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&recv[..n.min(recv.len())])
        .map_err(io::Error::other)?;
    match answer.payload {
        NetlinkPayload::Error(e) if e.code.is_some() => Err(e.to_io()),
        _ => Ok(()),
    }
}
