//! Sampled packets: the headers of a few real dropped packets per key, and what they say
//! (addresses, ports, protocol, TCP flags), parsed from their bytes.
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::Arc,
};

use serde::{Deserialize, Serialize};

/// Most packets kept per key.
pub const PER_KEY: usize = 8;

/// One dropped packet, kept as an example of its key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was dropped, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Its length as the kernel saw it (`skb->len`).
    pub len: u32,
    /// `ETH_P_*` of the packet (0x0800 IPv4, 0x86DD IPv6).
    pub l3proto: u16,
    /// Its first bytes from the network header on (at most 128).
    pub bytes: Arc<[u8]>,
}

/// What a sampled packet's headers say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    /// Source address.
    pub src: Option<IpAddr>,
    /// Destination address.
    pub dst: Option<IpAddr>,
    /// L4 protocol number.
    pub protocol: Option<u8>,
    /// Source port (TCP, UDP, SCTP, UDP-Lite).
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// TCP flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20).
    pub tcp_flags: Option<u8>,
}

impl Sample {
    /// Parses the IPv4 or IPv6 header and the ports; what the bytes do not hold is `None`.
    pub fn headers(&self) -> Headers {
        let b = &self.bytes[..];
        let mut h = Headers::default();
        let (l4, at) = match (self.l3proto, b.first().map(|v| v >> 4)) {
            (0x0800, Some(4)) if b.len() >= 20 => {
                h.src = Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15])));
                h.dst = Some(IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19])));
                (b[9], usize::from(b[0] & 0xf) * 4)
            }
            (0x86DD, Some(6)) if b.len() >= 40 => {
                let addr = |at: usize| {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&b[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(a))
                };
                h.src = Some(addr(8));
                h.dst = Some(addr(24));
                (b[6], 40)
            }
            _ => return h,
        };
        h.protocol = Some(l4);
        let port = |off: usize| {
            b.get(at + off..at + off + 2)
                .map(|p| u16::from_be_bytes([p[0], p[1]]))
        };
        if matches!(l4, 6 | 17 | 132 | 136) {
            h.sport = port(0);
            h.dport = port(2);
        }
        if l4 == 6 {
            h.tcp_flags = b.get(at + 13).copied();
        }
        h
    }
}

/// Most bytes of a packet kept, from its network header on.
pub const MAX_BYTES: usize = 128;

impl Sample {
    /// A packet from its network header on (what an XDP program sees from `data` on a device
    /// without a MAC header: a tun device, wireguard), IPv4 or IPv6 by its version, at most
    /// [`MAX_BYTES`]; anything else keeps no bytes and `l3proto` 0.
    pub fn from_network(unix_ms: u64, len: u32, packet: &[u8]) -> Sample {
        let l3proto = match packet.first().map(|b| b >> 4) {
            Some(4) => 0x0800,
            Some(6) => 0x86DD,
            _ => 0,
        };
        let n = if l3proto == 0 {
            0
        } else {
            packet.len().min(MAX_BYTES)
        };
        Sample {
            unix_ms,
            len,
            l3proto,
            bytes: packet[..n].into(),
        }
    }

    /// A frame from its MAC header on (what an XDP program sees from `data`; `len`: its
    /// length), kept as the probe keeps a packet: from the network header past the Ethernet
    /// header (and up to two VLAN tags), at most [`MAX_BYTES`], with the length from there.
    /// A frame too short for its headers keeps no bytes and `l3proto` 0.
    pub fn from_frame(unix_ms: u64, len: u32, frame: &[u8]) -> Sample {
        let ethertype = |at: usize| {
            frame
                .get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
        };
        let mut at = 12;
        let mut l3proto = ethertype(at);
        // 802.1Q and 802.1ad tags.
        while let Some(0x8100 | 0x88a8) = l3proto
            && at < 20
        {
            at += 4;
            l3proto = ethertype(at);
        }
        let start = at + 2;
        match l3proto {
            Some(p) if frame.len() >= start => Sample {
                unix_ms,
                len: len.saturating_sub(start as u32),
                l3proto: p,
                bytes: frame[start..frame.len().min(start + MAX_BYTES)].into(),
            },
            _ => Sample {
                unix_ms,
                len,
                l3proto: 0,
                bytes: Arc::from(&[][..]),
            },
        }
    }
}

/// `SYN,ACK`-style names of TCP flags.
pub fn tcp_flag_names(flags: u8) -> String {
    let names = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
    let set: Vec<&str> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| flags & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(l3proto: u16, bytes: &[u8]) -> Sample {
        Sample {
            unix_ms: 1,
            len: bytes.len() as u32,
            l3proto,
            bytes: bytes.into(),
        }
    }

    #[test]
    fn ipv4_udp_and_tcp_headers_parse() {
        let mut udp = vec![
            0x45, 0, 0, 37, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        udp.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 17, 0, 0]);
        let h = sample(0x0800, &udp).headers();
        assert_eq!(h.src, Some("10.0.0.1".parse().expect("ip")));
        assert_eq!(h.dst, Some("10.0.0.2".parse().expect("ip")));
        assert_eq!(
            (h.protocol, h.sport, h.dport),
            (Some(17), Some(12345), Some(9))
        );
        assert_eq!(h.tcp_flags, None);
        let mut tcp = udp[..20].to_vec();
        tcp[9] = 6;
        tcp.extend_from_slice(&[0, 80, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x02]);
        let h = sample(0x0800, &tcp).headers();
        assert_eq!(
            (h.sport, h.dport, h.tcp_flags),
            (Some(80), Some(1), Some(2))
        );
        assert_eq!(tcp_flag_names(0x12), "SYN,ACK");
    }

    #[test]
    fn a_frame_is_kept_from_its_network_header() {
        let mut ip = vec![
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip.extend_from_slice(&[0x30, 0x39, 0x1b, 0x59, 0, 8, 0, 0]);
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&ip);
        let s = Sample::from_frame(5, frame.len() as u32 + 100, &frame);
        assert_eq!((s.unix_ms, s.l3proto, s.len), (5, 0x0800, 28 + 100));
        assert_eq!(&s.bytes[..], &ip[..]);
        assert_eq!(s.headers().dport, Some(7001));
        // Behind two VLAN tags.
        let mut tagged = vec![0u8; 12];
        tagged.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00]);
        tagged.extend_from_slice(&ip);
        let s = Sample::from_frame(5, tagged.len() as u32, &tagged);
        assert_eq!((s.l3proto, s.len), (0x0800, 28));
        assert_eq!(s.headers().dport, Some(7001));
        // At most MAX_BYTES kept; too short for a header: nothing kept.
        let mut long = frame.clone();
        long.resize(14 + 400, 0);
        assert_eq!(Sample::from_frame(5, 414, &long).bytes.len(), MAX_BYTES);
        for short in [&frame[..10], &frame[..13], &[][..]] {
            let s = Sample::from_frame(5, 99, short);
            assert_eq!((s.l3proto, s.bytes.len()), (0, 0), "{short:?}");
        }
        // Hostile lengths: no underflow.
        assert_eq!(Sample::from_frame(5, 3, &frame).len, 0);
        // Without a MAC header: by the IP version.
        let s = Sample::from_network(5, 28, &ip);
        assert_eq!(
            (s.l3proto, s.len, s.headers().dport),
            (0x0800, 28, Some(7001))
        );
        let s = Sample::from_network(5, 28, &frame);
        assert_eq!((s.l3proto, s.bytes.len()), (0, 0), "not IP");
    }

    #[test]
    fn short_or_foreign_bytes_say_nothing_wrong() {
        assert_eq!(sample(0x0800, &[0x45, 0, 0]).headers(), Headers::default());
        assert_eq!(sample(0x0806, &[0; 40]).headers(), Headers::default());
        // Ports cut off: addresses known, ports not.
        let mut v = vec![
            0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
        ];
        v.push(0);
        let h = sample(0x0800, &v).headers();
        assert!(h.src.is_some() && h.sport.is_none());
    }
}
