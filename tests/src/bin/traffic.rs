//! Generates an exact number of real packet drops of one kind; run it inside a test namespace.
//!
//! `traffic udp PORT N`: N datagrams to a closed UDP port (NO_SOCKET).
//! `traffic udp-to ADDR PORT N`: N datagrams to ADDR:PORT (e.g. over a veth pair).
//! `traffic udp-gso ADDR PORT SEGMENTS N`: N sends to ADDR:PORT of SEGMENTS datagrams each in
//! one UDP GSO buffer (UDP_SEGMENT, 1,000 bytes a datagram): on a device that cannot take them
//! whole (`gso_max_segs 1`) the kernel cuts each into SEGMENTS packets sent back to back.
//! `traffic udp-sink PORT SECONDS`: receives datagrams on UDP PORT (every address) for
//! SECONDS, reading each at once; prints how many arrived.
//! `traffic udp-spray [FIRST LAST]`: one datagram to each UDP port of 127.0.0.1 from FIRST to
//! LAST (1 to 65535, all closed; its own source port left out), so every drop has a new
//! destination port; prints how many were sent.
//! `traffic tcp PORT N`: N connection attempts to a closed TCP port (NO_SOCKET).
//! `traffic tcp-payload PORT N`: connects to a listener on 127.0.0.1:PORT (made here) and sends
//! N segments of 1,400 `A`s, then waits a second (a firewall rule is expected to drop them: the
//! kernel retransmits, so more than N may be dropped).
//! `traffic raw PROTO N`: N IP packets of an unused protocol (IP_NOPROTO).
//! `traffic rcvbuf N`: N datagrams to a bound socket with a tiny receive buffer that is never
//! read while they arrive; prints how many the kernel dropped (SOCKET_RCVBUFF).
//! `traffic rcvbuf-hold N SECONDS CROWD`: as `rcvbuf`, from a process that first opens CROWD
//! other sockets (its descriptor limit raised to the hard limit), and holds the socket
//! SECONDS after the drops; prints `socket INODE PORT RCVBUF` before sending and
//! `dropped N` after.
//! `traffic udp-slow PORT SECONDS`: a slow reader: binds UDP PORT (every address) with the
//! smallest receive buffer and reads one datagram every 100 ms for SECONDS, so what arrives
//! faster is dropped (SOCKET_RCVBUFF) while its process holds the socket.
//! `traffic mix RUN SECONDS`: for SECONDS, runs of RUN datagrams to closed UDP port 9
//! (NO_SOCKET) alternating with runs of RUN raw packets of protocol 253 (IP_NOPROTO), from one
//! thread, so drops of two keys interleave on one CPU; prints `at UNIX_MS UDP RAW` (cumulative
//! sends) every 100 ms and `total UDP RAW` at the end.
use std::{
    io::Write as _,
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    time::Duration,
};

use dropscope_tests::traffic::{Generator, Pattern, RawSender, Sent};

/// `UDP_SEGMENT` of include/uapi/linux/udp.h (the GSO segment size of a UDP socket; not in
/// the libc crate for every target).
const UDP_SEGMENT: libc::c_int = 103;

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
            let mut udp = Generator::new(Pattern::Udp, port)?;
            udp.send(n);
            no_errors(udp.sent())?;
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
        Some("udp-gso") => {
            let addr: std::net::IpAddr = args
                .get(1)
                .ok_or_else(|| anyhow::anyhow!("usage: traffic udp-gso ADDR PORT SEGMENTS N"))?
                .parse()?;
            let (port, segments, n) = (arg(2)? as u16, arg(3)?.clamp(1, 64), arg(4)?);
            let s = UdpSocket::bind("0.0.0.0:0")?;
            let size: libc::c_int = 1000;
            // SAFETY: setsockopt reads `size` (a valid c_int) for the given length.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_UDP,
                    UDP_SEGMENT,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            anyhow::ensure!(rc == 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
            let buf = vec![0u8; 1000 * segments as usize];
            for _ in 0..n {
                s.send_to(&buf, (addr, port))?;
            }
        }
        Some("udp-spray") => {
            let first = args.get(1).map_or(Ok(1), |a| a.parse::<u16>())?.max(1);
            let last = args.get(2).map_or(Ok(u16::MAX), |a| a.parse::<u16>())?;
            let s = UdpSocket::bind("127.0.0.1:0")?;
            let mine = s.local_addr()?.port();
            let mut sent = 0u64;
            for port in (first..=last).filter(|&p| p != mine) {
                s.send_to(b"dropscope", ("127.0.0.1", port))?;
                sent += 1;
            }
            println!("{sent}");
        }
        Some("udp-sink") => {
            let (port, seconds) = (arg(1)? as u16, arg(2)?);
            let s = UdpSocket::bind(("0.0.0.0", port))?;
            let end = std::time::Instant::now() + Duration::from_secs(seconds);
            let (mut buf, mut received) = ([0u8; 2048], 0u64);
            while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
                s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
                if s.recv(&mut buf).is_ok() {
                    received += 1;
                }
            }
            println!("{received}");
        }
        Some("tcp") => {
            let (port, n) = (arg(1)? as u16, arg(2)?);
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            for _ in 0..n {
                let r = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
                anyhow::ensure!(r.is_err(), "port {port} is open");
            }
        }
        Some("tcp-payload") => {
            let (port, n) = (arg(1)? as u16, arg(2)?);
            let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
            let mut stream = TcpStream::connect(listener.local_addr()?)?;
            stream.set_nodelay(true)?;
            for _ in 0..n {
                stream.write_all(&[b'A'; 1400])?;
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        Some("raw") => {
            let (proto, n) = (arg(1)? as u8, arg(2)?);
            let sender = RawSender::new(proto)?;
            for _ in 0..n {
                sender.send()?;
            }
        }
        Some("rcvbuf") => {
            let n = arg(1)?;
            let rx = UdpSocket::bind("127.0.0.1:0")?;
            smallest_rcvbuf(&rx)?;
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
        Some("rcvbuf-hold") => {
            let (n, seconds, crowd) = (arg(1)?, arg(2)?, arg(3)?);
            rcvbuf_hold(n, Duration::from_secs(seconds), crowd as usize)?;
        }
        Some("udp-slow") => {
            let (port, seconds) = (arg(1)? as u16, arg(2)?);
            udp_slow(port, Duration::from_secs(seconds))?;
        }
        Some("mix") => {
            let (run, seconds) = (arg(1)?.max(1), arg(2)?);
            mix(run, Duration::from_secs(seconds))?;
        }
        _ => anyhow::bail!(
            "usage: traffic udp PORT N | udp-to ADDR PORT N | udp-gso ADDR PORT SEGMENTS N | udp-spray [FIRST LAST] | udp-sink PORT SECONDS | udp-slow PORT SECONDS | tcp PORT N | tcp-payload PORT N | raw PROTO N | rcvbuf N | rcvbuf-hold N SECONDS CROWD | mix RUN SECONDS"
        ),
    }
    Ok(())
}

/// `rcvbuf-hold`: `n` datagrams to a socket with the smallest receive buffer, opened after
/// `crowd` other sockets, then held for `hold`.
fn rcvbuf_hold(n: u64, hold: Duration, crowd: usize) -> anyhow::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one rlimit we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    let others = (0..crowd)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    let got = smallest_rcvbuf(&rx)?;
    use std::os::unix::fs::MetadataExt as _;
    let inode = std::fs::metadata(format!("/proc/self/fd/{}", rx.as_raw_fd()))?.ino();
    let mut out = std::io::stdout().lock();
    writeln!(out, "socket {inode} {} {got}", rx.local_addr()?.port())?;
    out.flush()?;
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
    writeln!(out, "dropped {}", n - received)?;
    out.flush()?;
    std::thread::sleep(hold);
    drop(others);
    Ok(())
}

/// Sets `s`'s receive buffer to the smallest the kernel allows; returns the limit it took.
fn smallest_rcvbuf(s: &UdpSocket) -> anyhow::Result<libc::c_int> {
    let size: libc::c_int = 1;
    let mut got: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt reads `size` and getsockopt writes `got` and `len`, all valid.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            len,
        ) | libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw mut got).cast(),
            &raw mut len,
        )
    };
    anyhow::ensure!(rc == 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
    Ok(got)
}

/// `udp-slow`: reads one datagram every 100 ms from UDP `port` (smallest buffer) for `time`.
fn udp_slow(port: u16, time: Duration) -> anyhow::Result<()> {
    let s = UdpSocket::bind(("0.0.0.0", port))?;
    smallest_rcvbuf(&s)?;
    s.set_nonblocking(true)?;
    let end = std::time::Instant::now() + time;
    let mut buf = [0u8; 2048];
    while std::time::Instant::now() < end {
        let _ = s.recv(&mut buf);
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Interleaves runs of `run` UDP and raw drops for `time`, printing cumulative sends.
fn mix(run: u64, time: Duration) -> anyhow::Result<()> {
    let mut sender = Generator::new(Pattern::Mix { run }, dropscope_tests::traffic::CLOSED_PORT)?;
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
        let sent = sender.sent();
        if elapsed >= next_line {
            writeln!(out, "at {} {} {}", unix_ms(), sent.udp, sent.raw)?;
            next_line += Duration::from_millis(100);
        }
        if elapsed >= time {
            break;
        }
        sender.send(2 * run);
        no_errors(sender.sent())?;
    }
    let sent = sender.sent();
    writeln!(out, "total {} {}", sent.udp, sent.raw)?;
    Ok(())
}

/// Fails if any send failed: the tests need exact numbers.
fn no_errors(sent: Sent) -> anyhow::Result<()> {
    anyhow::ensure!(sent.errors == 0, "{} sends failed", sent.errors);
    Ok(())
}
