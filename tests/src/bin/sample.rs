//! Makes the sample recording (`assets/sample.dsrec`, `cargo xtask sample`) from a real
//! session, as root: two network namespaces (`dsample-web`, `dsample-db`) joined by a veth
//! pair (`web0`, `db0`), and in them what drops packets, each to a UDP port of its own:
//! on `web0`, an XDP program (port 7001) and a tc program on its ingress (7002); in
//! `dsample-web`'s input an iptables rule (nft backend, 7004) and a chain whose policy drops
//! (7005); in `dsample-db`'s input an nft rule with a counter (7003); and a slow reader in
//! `dsample-db` (7006: the smallest receive buffer, one datagram read every 100 ms). Then
//! about 20 s of `dropscope record` while UDP to a closed port, TCP connection attempts to
//! one, raw IP packets of an unused protocol and datagrams to those ports are sent at rates
//! that change over the session. Everything it made is removed at its end (the namespaces with their rules, the
//! programs, the bpffs, the reader).
//!
//! `sample OUT`: writes the recording to OUT (replacing it; owned by the user who ran sudo).
use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use dropscope_tests::{
    Counting, Netns,
    fixture::{self, Bpffs, Kind, TC_ACT_SHOT, XDP_DROP},
    rules::{iptables_drop, nft},
    tc_ingress, traffic_bin,
};

/// How long the session records.
const SECONDS: u64 = 20;

fn main() -> anyhow::Result<()> {
    let out = std::env::args().nth(1).context("usage: sample OUT.dsrec")?;
    ensure!(
        // SAFETY: geteuid(2) has no arguments and cannot fail.
        unsafe { libc::geteuid() } == 0,
        "the sample is recorded live: run as root (cargo xtask sample does)"
    );
    let web = Netns::create("dsample-web")?;
    let db = Netns::create("dsample-db")?;
    link(&web, &db)?;

    let fs = Bpffs::mount();
    // The XDP program on web0 sees every packet before tc does: veth's XDP copies each into a
    // buffer of its own, so what reaches tc no longer carries its sender's socket (a row per
    // `traffic` run's socket otherwise).
    let xdp = fixture::load(Kind::Xdp, "sample_xdp_drop", 7001, XDP_DROP, true)?;
    let pin = fs.pin(&xdp, "xdp");
    let pin = pin.to_str().context("a UTF-8 path")?;
    web.exec(&["ip", "link", "set", "dev", "web0", "xdpdrv", "pinned", pin]);
    let tc = fixture::load(Kind::Tc, "sample_tc_shot", 7002, TC_ACT_SHOT, true)?;
    tc_ingress(&web, "web0", &fs.pin(&tc, "tc"));
    // The neighbours are resolved before recording.
    web.traffic(&["udp-to", "10.99.0.2", "7999", "1"]);
    db.traffic(&["udp-to", "10.99.0.1", "7999", "1"]);
    // db: an nft rule with a counter.
    nft(
        &db,
        "table inet sample { chain input { type filter hook input priority 0;
           udp dport 7003 counter drop comment \"no 7003 from web\"\n }\n}",
    );
    // web: an iptables rule with a comment, and after it a chain whose policy drops what it
    // does not accept (loopback and ICMP). The rule drops more than the policy in every
    // window, so its call site is told from the policy's and both are exact.
    iptables_drop(&web, 7004, "no 7004 from db");
    nft(
        &web,
        "table ip gate { chain input { type filter hook input priority 10; policy drop;
           iif lo accept\n meta l4proto icmp accept\n }\n}",
    );
    let _reader = Reader::start(&db, 7006, SECONDS + 60)?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("sample.dsrec");
    let rec = Counting::start(&[
        "record",
        "-o",
        file.to_str().context("a UTF-8 path")?,
        // By socket too (the default): the slow reader's drops name its socket; no other
        // drop here reached one.
        "--duration",
        &format!("{SECONDS}s"),
    ]);
    let start = Instant::now();
    for s in 0..SECONDS - 2 {
        let n = |v: u64| v.to_string();
        // UDP to a closed port of db (NO_SOCKET), growing.
        web.traffic(&["udp-to", "10.99.0.2", "9", &n(200 + 40 * s)]);
        // TCP connection attempts to a closed port (NO_SOCKET in tcp_v4_rcv), steady.
        web.traffic(&["tcp", "80", &n(30)]);
        // Raw IP packets of an unused protocol (IP_NOPROTO), a burst in the middle.
        if (6..12).contains(&s) {
            db.traffic(&["raw", "253", &n(150)]);
        }
        // The XDP program's drops (web0), steady; the tc program's (web0), from second 8.
        db.traffic(&["udp-to", "10.99.0.1", "7001", &n(60)]);
        if s >= 8 {
            db.traffic(&["udp-to", "10.99.0.1", "7002", &n(25 * (s - 7))]);
        }
        // The nft rule's (db), a burst early on; the iptables rule's (web), steady.
        if (3..9).contains(&s) {
            web.traffic(&["udp-to", "10.99.0.2", "7003", &n(120)]);
        }
        db.traffic(&["udp-to", "10.99.0.1", "7004", &n(45)]);
        // The chain policy's (web), from second 11.
        if s >= 11 {
            db.traffic(&["udp-to", "10.99.0.1", "7005", &n(30)]);
        }
        // The slow reader's, every other second.
        if s % 2 == 0 {
            web.traffic(&["udp-to", "10.99.0.2", "7006", &n(300)]);
        }
        let next = Duration::from_secs(s + 1);
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    rec.wait_within(Duration::from_secs(SECONDS + 60));
    drop((xdp, tc, fs));
    // Handed to whoever ran sudo, readable as the other assets are.
    std::fs::write(&out, std::fs::read(&file)?).with_context(|| format!("writing {out}"))?;
    let uid = dropscope_tests::invoking_uid();
    std::os::unix::fs::chown(&out, Some(uid), None)?;
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    eprintln!("sample: wrote {out}");
    Ok(())
}

/// A slow reader (`traffic udp-slow`) in a namespace, killed when dropped (before the
/// namespace is removed).
struct Reader(Child);

impl Reader {
    fn start(ns: &Netns, port: u16, seconds: u64) -> anyhow::Result<Self> {
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(traffic_bin())
            .args(["udp-slow", &port.to_string(), &seconds.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .context("starting the slow reader")?;
        Ok(Self(child))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `web0` in `web` (10.99.0.1) and `db0` in `db` (10.99.0.2), up, IPv6 off (its multicast
/// chatter would be drops of its own).
fn link(web: &Netns, db: &Netns) -> anyhow::Result<()> {
    let ok = Command::new("ip")
        .args(["link", "add", "web0", "netns", &web.name, "type", "veth"])
        .args(["peer", "name", "db0", "netns", &db.name])
        .status()?
        .success();
    ensure!(ok, "ip link add web0 ... veth peer db0 failed");
    for (ns, dev, addr) in [(web, "web0", "10.99.0.1/24"), (db, "db0", "10.99.0.2/24")] {
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
        ns.exec(&["ip", "addr", "add", addr, "dev", dev]);
        ns.exec(&["ip", "link", "set", dev, "up"]);
    }
    Ok(())
}
