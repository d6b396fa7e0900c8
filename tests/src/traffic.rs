//! The traffic generator shared by the tests (the `traffic` binary) and the benchmark: real drops
//! of known kinds, one per packet, sent from the calling thread.
//!
//! - a UDP datagram to a closed port: NO_SOCKET at `__udp4_lib_rcv`;
//! - an IPv4 packet of an unused protocol through an `IPPROTO_RAW` socket: IP_NOPROTO.
use std::{
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::Context as _;

/// A UDP port nothing listens on in a fresh namespace.
pub const CLOSED_PORT: u16 = 9;
/// An IP protocol number no handler is registered for (253 is reserved for experiments).
pub const UNUSED_PROTO: u8 = 253;
/// Every datagram's payload.
const PAYLOAD: &[u8] = b"dropscope";

/// What a [`Generator`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Only UDP datagrams to a closed port: one drop key.
    Udp,
    /// Runs of `run` UDP datagrams to a closed port alternating with runs of `run` raw packets of
    /// [`UNUSED_PROTO`]: two drop keys interleaved on one CPU.
    Mix {
        /// Packets per run (at least 1).
        run: u64,
    },
}

/// Packets sent so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// UDP datagrams the kernel accepted (each one NO_SOCKET drop).
    pub udp: u64,
    /// Raw packets the kernel accepted (each one IP_NOPROTO drop).
    pub raw: u64,
    /// Sends that failed (not counted above).
    pub errors: u64,
}

impl Sent {
    /// Packets accepted, of both kinds.
    pub fn total(&self) -> u64 {
        self.udp + self.raw
    }
}

/// Sends a [`Pattern`] to 127.0.0.1 in the calling thread's network namespace.
pub struct Generator {
    pattern: Pattern,
    udp: UdpSocket,
    dst: SocketAddr,
    raw: Option<RawSender>,
    /// Position in the current run, and whether the run is raw.
    pos: u64,
    raw_turn: bool,
    sent: Sent,
}

impl Generator {
    /// Opens the sockets the pattern needs; UDP goes to `port` (e.g. [`CLOSED_PORT`]).
    pub fn new(pattern: Pattern, port: u16) -> anyhow::Result<Self> {
        let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a UDP socket")?;
        let raw = match pattern {
            Pattern::Udp => None,
            Pattern::Mix { .. } => Some(RawSender::new(UNUSED_PROTO)?),
        };
        Ok(Self {
            pattern,
            udp,
            dst: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            raw,
            pos: 0,
            raw_turn: false,
            sent: Sent::default(),
        })
    }

    /// Sends `n` packets, continuing the pattern where the last call left it. A failed send is
    /// counted in [`Sent::errors`], not returned.
    pub fn send(&mut self, n: u64) {
        for _ in 0..n {
            let ok = match (&self.raw, self.raw_turn) {
                (Some(raw), true) => raw.send().is_ok(),
                _ => self.udp.send_to(PAYLOAD, self.dst).is_ok(),
            };
            match (ok, self.raw_turn) {
                (false, _) => self.sent.errors += 1,
                (true, true) => self.sent.raw += 1,
                (true, false) => self.sent.udp += 1,
            }
            if let Pattern::Mix { run } = self.pattern {
                self.pos += 1;
                if self.pos >= run.max(1) {
                    self.pos = 0;
                    self.raw_turn = !self.raw_turn;
                }
            }
        }
    }

    /// What was sent so far.
    pub fn sent(&self) -> Sent {
        self.sent
    }
}

/// An IPPROTO_RAW socket and a hand-made IPv4 packet of one protocol to 127.0.0.1. The socket
/// receives nothing itself, so the kernel finds no handler and drops each packet.
pub struct RawSender {
    fd: OwnedFd,
    pkt: [u8; 28],
    sa: libc::sockaddr_in,
}

impl RawSender {
    /// Opens the socket (needs CAP_NET_RAW) and builds the packet.
    pub fn new(proto: u8) -> anyhow::Result<Self> {
        // SAFETY: plain socket(2) call; the fd is checked, then owned (closed on drop).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        anyhow::ensure!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut pkt = [0u8; 28];
        pkt[0] = 0x45; // IPv4, 20-byte header
        let len = pkt.len() as u16;
        pkt[2..4].copy_from_slice(&len.to_be_bytes());
        pkt[8] = 64; // TTL
        pkt[9] = proto;
        pkt[12..16].copy_from_slice(&[127, 0, 0, 1]);
        pkt[16..20].copy_from_slice(&[127, 0, 0, 1]);
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        Ok(Self { fd, pkt, sa })
    }

    /// Sends the packet once.
    pub fn send(&self) -> std::io::Result<()> {
        // SAFETY: the buffer and address are valid for the lengths given.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                self.pkt.as_ptr().cast(),
                self.pkt.len(),
                0,
                (&self.sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}
