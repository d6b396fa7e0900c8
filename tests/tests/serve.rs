//! `dropscope serve` scraped by a real Prometheus (Debian's `prometheus` package): exact counts
//! of real drops arrive through Prometheus's query API. Needs root.
mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{Netns, dropscope_bin, root_test};

/// A free loopback port (closed again at once; the race with other programs is harmless here).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One HTTP/1.0 GET on loopback: the status code, the headers and the body.
fn get(port: u16, path_and_query: &str, accept: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
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

/// Percent-encodes a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `dropscope serve` on a port of its own, attached and counting.
struct Serve {
    child: Child,
    port: u16,
}

impl Serve {
    fn start(extra: &[&str]) -> Self {
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

    /// Sends `signal` and asserts a clean exit with the probe detached.
    fn stop(mut self, signal: i32) {
        // SAFETY: kill(2) on our own child with a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let status = self.child.wait().expect("wait for dropscope");
        assert!(status.success(), "dropscope serve ended with {status:?}");
        assert!(
            common::dropscope_programs().is_empty(),
            "programs left attached"
        );
    }
}

/// Prometheus on loopback scraping one target every second, with its data in `dir`.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target_port: u16) -> Self {
        let bin = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .expect(
                "Prometheus is not installed: `apt-get install -y prometheus` \
                 (`cargo xtask test` installs it)",
            );
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: dropscope\n    static_configs:\n\
                 \x20     - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("log file"))
            .spawn()
            .expect("spawn prometheus");
        let p = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !TcpStream::connect(("127.0.0.1", port)).is_ok_and(|_| p.ready()) {
            assert!(
                Instant::now() < deadline,
                "Prometheus was not ready within 60 s; its log:\n{}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn ready(&self) -> bool {
        get(self.port, "/-/ready", "*/*").0 == 200
    }

    /// The value of an instant query that returns one sample, or None while it returns none.
    fn value(&self, query: &str) -> Option<f64> {
        let (status, _, body) = get(
            self.port,
            &format!("/api/v1/query?query={}", encode(query)),
            "application/json",
        );
        assert_eq!(status, 200, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON answer");
        let result = v["data"]["result"].as_array().expect("a result vector");
        assert!(result.len() <= 1, "{query}: {body}");
        result.first().map(|r| {
            r["value"][1]
                .as_str()
                .expect("a value")
                .parse()
                .expect("a number")
        })
    }

    /// Waits until `query` equals `want` (asserting it never exceeds it), up to 30 s.
    fn wait_for(&self, query: &str, want: f64) -> Duration {
        let start = Instant::now();
        loop {
            let got = self.value(query);
            if let Some(v) = got {
                assert!(v <= want, "{query} = {v}, more than {want}");
                if v == want {
                    return start.elapsed();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{query} is {got:?} after 30 s, not {want}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child with a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_exact_counts_of_real_drops() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let ns = Netns::new("serve");
    let serve = Serve::start(&["--interval", "100ms"]);
    let started = Instant::now();
    let prom = Prometheus::start(dir.path(), serve.port);
    let ready = started.elapsed();
    // The first scrape (no drops yet in this namespace) shows the target up.
    prom.wait_for("up{job=\"dropscope\"}", 1.0);
    let first_scrape = started.elapsed();

    ns.traffic(&["udp", "9", "1234"]);
    ns.traffic(&["raw", "253", "321"]);
    let udp =
        "sum(dropscope_drops_total{reason=\"NO_SOCKET\",location=~\"__udp4_lib_rcv\\\\+.*\"})";
    let waited = prom.wait_for(udp, 1234.0);
    prom.wait_for("sum(dropscope_drops_total{reason=\"IP_NOPROTO\"})", 321.0);
    // Two scrapes later it is still exact (no overshoot from later snapshots).
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(prom.value(udp), Some(1234.0));
    // Nothing is lost between the series and the exporter's own overflow count.
    assert_eq!(prom.value("dropscope_overflow_total"), Some(0.0));
    eprintln!(
        "timing: Prometheus ready {:.2}s, first scrape {:.2}s, drops visible {:.2}s after the \
         traffic, whole test {:.2}s",
        ready.as_secs_f64(),
        first_scrape.as_secs_f64(),
        waited.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(prom);
    serve.stop(libc::SIGTERM);
}

#[test]
fn metrics_speak_both_formats_and_hangup_stops_cleanly() {
    let _serial = root_test();
    let ns = Netns::new("servefmt");
    let serve = Serve::start(&["--max-series", "1", "--interval", "100ms"]);
    ns.traffic(&["udp", "9", "10"]);
    ns.traffic(&["raw", "253", "20"]);
    std::thread::sleep(Duration::from_millis(500));
    let (status, head, text) = get(serve.port, "/metrics", "text/plain");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(
        text.contains("# TYPE dropscope_drops_total counter"),
        "{text}"
    );
    // One label set of its own at most; the rest summed into reason="other".
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("dropscope_drops_total{"))
        .collect();
    assert!(
        series
            .iter()
            .any(|l| l.starts_with("dropscope_drops_total{reason=\"other\"} "))
    );
    assert!(series.len() <= 3, "{text}");
    let (status, head, om) = get(
        serve.port,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    );
    assert_eq!(status, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(om.contains("# TYPE dropscope_drops counter"), "{om}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert_eq!(get(serve.port, "/nothing", "*/*").0, 404);
    serve.stop(libc::SIGHUP);
}

#[test]
fn a_port_in_use_is_a_clear_error_and_attaches_nothing() {
    let _serial = root_test();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(dropscope_bin())
        .args(["serve", "--listen", &addr])
        .output()
        .expect("run dropscope serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.contains("--listen"),
        "{err}"
    );
    assert!(common::dropscope_programs().is_empty());
}
