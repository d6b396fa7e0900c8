//! A process holding a UDP socket with the smallest receive buffer that it never reads while
//! datagrams arrive (`traffic rcvbuf-hold`), and the namespace's own count of what that socket
//! dropped.
use std::{
    io::{BufRead, BufReader, Lines},
    process::{Child, ChildStdout, Command, Stdio},
};

use crate::{Netns, traffic_bin};

/// Datagrams sent to each socket.
pub const SENT: u64 = 500;

/// A `traffic rcvbuf-hold` process in a namespace, killed when dropped.
pub struct Holder {
    /// The process.
    pub child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// Its socket's inode.
    pub inode: u64,
    /// Its socket's port.
    pub port: u16,
    /// Its socket's receive buffer limit.
    pub rcvbuf: u64,
}

impl Holder {
    /// Starts one that opens `crowd` other sockets first and holds its socket `hold_secs`.
    pub fn start(ns: &Netns, hold_secs: u64, crowd: usize) -> Self {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(traffic_bin())
            .args(["rcvbuf-hold", &SENT.to_string(), &hold_secs.to_string()])
            .arg(crowd.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("traffic");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines.next().expect("a line").expect("read");
        let f: Vec<&str> = first.split_whitespace().collect();
        assert_eq!(f.first(), Some(&"socket"), "{first}");
        Self {
            inode: f[1].parse().expect("inode"),
            port: f[2].parse().expect("port"),
            rcvbuf: f[3].parse().expect("rcvbuf"),
            child,
            lines,
        }
    }

    /// Waits for the drops; how many the socket did not take.
    pub fn dropped(&mut self) -> u64 {
        let line = self.lines.next().expect("a line").expect("read");
        line.strip_prefix("dropped ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a count: {line}"))
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The namespace's `Udp:RcvbufErrors`, as the kernel counts it (`/proc/net/snmp` read inside).
pub fn rcvbuf_errors(ns: &Netns) -> u64 {
    let snmp = String::from_utf8_lossy(&ns.exec(&["cat", "/proc/net/snmp"]).stdout).into_owned();
    let udp: Vec<Vec<&str>> = (snmp.lines())
        .filter(|l| l.starts_with("Udp: "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let at = udp[0]
        .iter()
        .position(|h| *h == "RcvbufErrors")
        .expect("column");
    udp[1][at].parse().expect("a number")
}
