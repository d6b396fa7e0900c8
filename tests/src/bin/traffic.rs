//! Generates an exact number of real packet drops of one kind; run it inside a test namespace.
//!
//! `traffic udp PORT N`: N datagrams to a closed UDP port (NO_SOCKET).
//! `traffic udp-to ADDR PORT N`: N datagrams to ADDR:PORT (e.g. over a veth pair).
//! `traffic tcp PORT N`: N connection attempts to a closed TCP port (NO_SOCKET).
//! `traffic raw PROTO N`: N IP packets of an unused protocol (IP_NOPROTO).
//! `traffic rcvbuf N`: N datagrams to a bound socket with a tiny receive buffer that is never
//! read while they arrive; prints how many the kernel dropped (SOCKET_RCVBUFF).
//! `traffic mix RUN SECONDS`: for SECONDS, runs of RUN datagrams to closed UDP port 9
//! (NO_SOCKET) alternating with runs of RUN raw packets of protocol 253 (IP_NOPROTO), from one
//! thread, so drops of two keys interleave on one CPU; prints `at UNIX_MS UDP RAW` (cumulative
//! sends) every 100 ms and `total UDP RAW` at the end.
use std::{
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    time::Duration,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| -> anyhow::Result<u64> {
        Ok(args
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("usage: traffic udp|tcp|raw|rcvbuf ..."))?
            .parse()?)
    };
    match args.first().map(String::as_str) {
        Some("udp") => {
            let (port, n) = (arg(1)? as u16, arg(2)?);
            let s = UdpSocket::bind("127.0.0.1:0")?;
            for _ in 0..n {
                s.send_to(b"dropscope", ("127.0.0.1", port))?;
            }
        }
        Some("udp-to") => {
            let addr: std::net::IpAddr = args
                .get(1)
                .ok_or_else(|| anyhow::anyhow!("usage: traffic udp-to ADDR PORT N"))?
                .parse()?;
            let (port, n) = (arg(2)? as u16, arg(3)?);
            let s = UdpSocket::bind("0.0.0.0:0")?;
            for _ in 0..n {
                s.send_to(b"dropscope", (addr, port))?;
            }
        }
        Some("tcp") => {
            let (port, n) = (arg(1)? as u16, arg(2)?);
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            for _ in 0..n {
                let r = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
                anyhow::ensure!(r.is_err(), "port {port} is open");
            }
        }
        Some("raw") => {
            let (proto, n) = (arg(1)? as u8, arg(2)?);
            raw(proto, n)?;
        }
        Some("rcvbuf") => {
            let n = arg(1)?;
            let rx = UdpSocket::bind("127.0.0.1:0")?;
            let size: libc::c_int = 1;
            // SAFETY: setsockopt reads `size` (a valid c_int) for the given length.
            let rc = unsafe {
                libc::setsockopt(
                    rx.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            anyhow::ensure!(rc == 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
            let tx = UdpSocket::bind("127.0.0.1:0")?;
            for _ in 0..n {
                tx.send_to(&[0u8; 512], rx.local_addr()?)?;
            }
            rx.set_nonblocking(true)?;
            let mut buf = [0u8; 1024];
            let mut received = 0;
            while rx.recv(&mut buf).is_ok() {
                received += 1;
            }
            println!("{}", n - received);
        }
        Some("mix") => {
            let (run, seconds) = (arg(1)?.max(1), arg(2)?);
            mix(run, Duration::from_secs(seconds))?;
        }
        _ => anyhow::bail!(
            "usage: traffic udp PORT N | udp-to ADDR PORT N | tcp PORT N | raw PROTO N | rcvbuf N | mix RUN SECONDS"
        ),
    }
    Ok(())
}

/// Interleaves runs of `run` UDP and raw drops for `time`, printing cumulative sends.
fn mix(run: u64, time: Duration) -> anyhow::Result<()> {
    let udp = UdpSocket::bind("127.0.0.1:0")?;
    let raw = RawSender::new(253)?;
    let (mut sent_udp, mut sent_raw) = (0u64, 0u64);
    let start = std::time::Instant::now();
    let mut next_line = Duration::ZERO;
    let unix_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    };
    let mut out = std::io::stdout().lock();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= next_line {
            use std::io::Write as _;
            writeln!(out, "at {} {sent_udp} {sent_raw}", unix_ms())?;
            next_line += Duration::from_millis(100);
        }
        if elapsed >= time {
            break;
        }
        for _ in 0..run {
            udp.send_to(b"dropscope", ("127.0.0.1", 9))?;
        }
        sent_udp += run;
        for _ in 0..run {
            raw.send()?;
        }
        sent_raw += run;
    }
    use std::io::Write as _;
    writeln!(out, "total {sent_udp} {sent_raw}")?;
    Ok(())
}

/// Sends N IPv4 packets with protocol `proto` to 127.0.0.1 through an IPPROTO_RAW socket
/// (which receives nothing itself, so the kernel finds no handler and drops each one).
fn raw(proto: u8, n: u64) -> anyhow::Result<()> {
    let sender = RawSender::new(proto)?;
    for _ in 0..n {
        sender.send()?;
    }
    Ok(())
}

/// An IPPROTO_RAW socket and a hand-made IPv4 packet of one protocol to 127.0.0.1.
struct RawSender {
    fd: std::os::fd::OwnedFd,
    pkt: [u8; 28],
    sa: libc::sockaddr_in,
}

impl RawSender {
    fn new(proto: u8) -> anyhow::Result<Self> {
        use std::os::fd::FromRawFd as _;
        // SAFETY: plain socket(2) call; the fd is checked, then owned (closed on drop).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        anyhow::ensure!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
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

    fn send(&self) -> anyhow::Result<()> {
        use std::os::fd::AsRawFd as _;
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
        anyhow::ensure!(rc >= 0, "sendto: {}", std::io::Error::last_os_error());
        Ok(())
    }
}
