//! `dropscope serve` as the tests run it: on a free loopback port, attached and serving, ended
//! by a signal the test chooses or (a test that failed first) by SIGTERM when dropped; and one
//! HTTP/1.0 GET to it.
use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Child, Command, ExitStatus, Stdio},
    time::Duration,
};

use crate::dropscope_bin;

/// A free loopback port (closed again at once; the race with other programs is harmless here).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One HTTP/1.0 GET on loopback: the status code, the headers and the body.
pub fn get(port: u16, path_and_query: &str, accept: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n"
    )
    .expect("request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("response");
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (status, head.to_string(), body.to_string())
}

/// `dropscope serve` on a port of its own, attached and counting.
pub struct Serve {
    child: Child,
    pub port: u16,
}

impl Serve {
    /// Starts `dropscope serve --listen 127.0.0.1:PORT <extra>` and waits for its line saying
    /// it serves.
    pub fn start(extra: &[&str]) -> Self {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut child = Command::new(dropscope_bin())
            .args(["serve", "--listen", &listen])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dropscope serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("serving metrics on") => break,
                Some(Ok(_)) => {}
                _ => panic!("dropscope serve exited before serving: {:?}", child.wait()),
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Self { child, port }
    }

    /// Sends `signal` and waits for the exit.
    pub fn signal(mut self, signal: i32) -> ExitStatus {
        // SAFETY: kill(2) on our own child with a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        self.child.wait().expect("wait for dropscope")
    }

    /// The `dropscope_drops_total` samples of one scrape: (labels, count).
    pub fn drops(&self) -> Vec<(String, u64)> {
        let (status, head, body) = get(self.port, "/metrics", "text/plain");
        assert_eq!(status, 200, "{head}");
        body.lines()
            .filter(|l| l.starts_with("dropscope_drops_total{"))
            .map(|l| {
                let (labels, value) = l.rsplit_once(' ').expect("a sample");
                (labels.to_string(), value.parse().expect("a count"))
            })
            .collect()
    }
}

impl Drop for Serve {
    /// A test that failed before ending it leaves no dropscope running (nor a probe attached).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child with a valid signal number.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}
