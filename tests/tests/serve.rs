//! `dropscope serve` scraped by a real Prometheus (Debian's `prometheus` package): exact counts
//! of real drops arrive through Prometheus's query API, also over TLS with basic auth; a scrape
//! is answered while a client holds every connection it can; a web config that others can write
//! is refused. Needs root.
mod common;

use std::{
    io::Write,
    net::{TcpListener, TcpStream},
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use dropscope::serve::connections::MAX_CONNECTIONS;
use dropscope_tests::{
    Counting, Netns, dropscope_bin, root_test,
    serve::{Serve, free_port, get},
    veth_pair,
};

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

/// Ends `serve` with `signal` and asserts a clean exit with the probe detached.
fn stop(serve: Serve, signal: i32) {
    let status = serve.signal(signal);
    assert!(status.success(), "dropscope serve ended with {status:?}");
    assert!(
        common::dropscope_programs().is_empty(),
        "programs left attached"
    );
}

/// Prometheus on loopback scraping one target every second, with its data in `dir`.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target_port: u16) -> Self {
        Self::start_with(
            dir,
            &format!(
                "  - job_name: dropscope\n    static_configs:\n\
                 \x20     - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
    }

    /// Like `start`, with `scrape_configs` (the YAML list of jobs) as its scrape jobs.
    fn start_with(dir: &Path, scrape_configs: &str) -> Self {
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
                 scrape_configs:\n{scrape_configs}"
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
    stop(serve, libc::SIGTERM);
}

#[test]
fn metrics_speak_both_formats_and_hangup_stops_cleanly() {
    let _serial = root_test();
    let ns = Netns::new("servefmt");
    let serve = Serve::start(&["--max-series", "1", "--interval", "100ms"]);
    ns.traffic(&["udp", "9", "10"]);
    ns.traffic(&["raw", "253", "20"]);
    // 503 until the first snapshot is published (a loaded machine took over 500 ms), then the
    // drops of both reasons, the second summed into `other`.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, head, text) = loop {
        let (status, head, text) = get(serve.port, "/metrics", "text/plain");
        if status == 200 && text.contains("dropscope_drops_total{reason=\"other\"} ")
            || Instant::now() > deadline
        {
            break (status, head, text);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
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
    stop(serve, libc::SIGHUP);
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

#[test]
fn a_namespace_made_after_serve_started_is_labelled_with_its_name() {
    let _serial = root_test();
    let serve = Serve::start(&["--interval", "100ms"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(serve.port, "/metrics", "text/plain").0 != 200 {
        assert!(Instant::now() < deadline, "no snapshot within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The namespace and its drops come after serve started: the first snapshot that counts
    // them has no name for either yet.
    let ns = Netns::new("late");
    ns.traffic(&["udp", "9", "50"]);
    let named = format!("netns_name=\"{}\",device=\"lo\",protocol=\"udp\"", ns.name);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut scrapes = Vec::new();
    loop {
        let drops = serve.drops();
        let counted: u64 = (drops.iter())
            .filter(|(l, _)| l.contains("reason=\"NO_SOCKET\"") && l.contains(&named))
            .map(|(_, v)| v)
            .sum();
        if counted == 50 {
            break;
        }
        scrapes.push(drops);
        assert!(
            Instant::now() < deadline,
            "no series of {named} holds the 50 drops within 10 s: {:#?}",
            scrapes.last()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("named after {} scrape(s)", scrapes.len());
    stop(serve, libc::SIGTERM);
}

/// A namespace with packets and no drop (a UDP sink on its own loopback) is named in `serve`'s
/// packet series and in the ratios of `report`, live and recorded, as one with drops is: its
/// name travels with the kernel's reading, not only with drop keys (it was its inode in the
/// series and nameless in the report).
#[test]
fn a_namespace_without_drops_is_named_in_series_and_ratios_live_and_recorded() {
    use std::os::unix::fs::MetadataExt as _;
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let ns = Netns::new("quiet");
    let inode = std::fs::metadata(ns.path()).expect("stat").ino();
    let serve = Serve::start(&["--interval", "100ms"]);
    let rec = dir.path().join("quiet.dsrec");
    let recorder = Counting::start(&["record", "-o", rec.to_str().expect("utf-8")]);
    let live = Counting::start(&["report", "--format", "json"]);
    // 200 datagrams to a socket that reads them: packets, no drop.
    let sink = udp_sink(&ns, 3);
    std::thread::sleep(Duration::from_millis(500));
    ns.traffic(&["udp-to", "127.0.0.1", "5000", "200"]);
    assert_eq!(sink.join().expect("sink"), "200", "the sink lost datagrams");

    // serve: the namespace's packets series carries its name, not its inode.
    let named = format!(
        "dropscope_netns_packets_total{{netns_name=\"{}\"}}",
        ns.name
    );
    let by_inode = format!("netns_name=\"{inode}\"");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // A namespace is labelled by its inode until its name is found (by a worker, never on
        // the poll); then by its name, for good.
        let (status, _, body) = get(serve.port, "/metrics", "text/plain");
        let packets = (body.lines())
            .find_map(|l| l.strip_prefix(&named))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if status == 200 && packets.is_some_and(|p| p >= 200) && !body.contains(&by_inode) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no {named} of 200 packets or more, and no series labelled {by_inode}, within \
             30 s:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let check = |report: &serde_json::Value, how: &str| {
        let r = ratio_of(report, &ns.name, None);
        assert_eq!(r["drops"], 0, "{how}: {r}");
        assert!(
            r["packets"].as_u64().is_some_and(|p| p >= 200),
            "{how}: {r}"
        );
    };
    check_live_and_recorded(live, recorder, &rec, check);
    stop(serve, libc::SIGTERM);
}

/// A keep-alive scrape, to pipeline.
const PIPELINED: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn a_scrape_is_answered_while_a_client_holds_every_connection_it_can() {
    let _serial = root_test();
    let serve = Serve::start(&["--interval", "100ms"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(serve.port, "/metrics", "text/plain").0 != 200 {
        assert!(Instant::now() < deadline, "no snapshot within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Twice the cap: half pipeline requests and never read the answers, half sit idle.
    let mut held = Vec::new();
    for i in 0..2 * MAX_CONNECTIONS {
        let mut s = TcpStream::connect(("127.0.0.1", serve.port)).expect("connect");
        if i % 2 == 0 {
            s.write_all(&PIPELINED.repeat(1000)).expect("pipeline");
        }
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let (status, head, body) = get(serve.port, "/metrics", "text/plain");
        let took = started.elapsed();
        assert_eq!(status, 200, "{head}");
        assert!(
            body.contains("# TYPE dropscope_drops_total counter"),
            "{body}"
        );
        assert!(took < Duration::from_secs(2), "a scrape took {took:?}");
        times.push(took);
    }
    eprintln!(
        "timing: scrapes with {} connections held: {times:?}",
        held.len()
    );
    drop(held);
    stop(serve, libc::SIGTERM);
}

/// A self-signed certificate for 127.0.0.1 and localhost, made with the openssl CLI.
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("dropscope.crt"), dir.join("dropscope.key"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("the openssl CLI makes the test certificate: `apt-get install -y openssl`");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// bcrypt (cost 10) of "scrape-me".
const SCRAPE_ME: &str = "$2b$10$MNSlhezyUORuGOtImlq9zeBSDdkvw1Hs/kj4gSO1xyAghuZDRaiwa";

/// Writes a web config, writable by its owner (root) only.
fn web_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("web.yml");
    std::fs::write(&path, text).expect("write web.yml");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let ns = Netns::new("servetls");
    let (cert, key) = self_signed(dir.path());
    let web = web_config(
        dir.path(),
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  \
             prometheus: '{SCRAPE_ME}'\n",
            cert.display(),
            key.display()
        ),
    );
    let serve = Serve::start(&[
        "--web-config",
        web.to_str().expect("utf-8 path"),
        "--interval",
        "100ms",
        // Only this test's drops, whatever else runs on the machine.
        "--netns",
        &ns.name,
    ]);
    // Plain HTTP on the TLS port gets a 400 and no metrics.
    let (status, _, body) = get(serve.port, "/metrics", "text/plain");
    assert_eq!(status, 400, "{body}");
    assert!(!body.contains("dropscope_"), "{body}");
    let job = |name: &str, password: &str, scheme: &str| {
        format!(
            "  - job_name: {name}\n    scheme: {scheme}\n    tls_config:\n      ca_file: {}\n\
             \x20   basic_auth:\n      username: prometheus\n      password: {password}\n\
             \x20   static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            cert.display(),
            serve.port
        )
    };
    let jobs = [
        job("dropscope", "scrape-me", "https"),
        job("wrong", "scrape-you", "https"),
        job("plain", "scrape-me", "http"),
    ]
    .concat();
    let prom = Prometheus::start_with(dir.path(), &jobs);
    prom.wait_for("up{job=\"dropscope\"}", 1.0);
    ns.traffic(&["udp", "9", "77"]);
    prom.wait_for(
        "sum(dropscope_drops_total{job=\"dropscope\",reason=\"NO_SOCKET\",\
         location=~\"__udp4_lib_rcv\\\\+.*\"})",
        77.0,
    );
    // A wrong password (401) and plain HTTP (400) get nothing.
    prom.wait_for("up{job=\"wrong\"}", 0.0);
    prom.wait_for("up{job=\"plain\"}", 0.0);
    assert_eq!(
        prom.value("count(dropscope_drops_total{job!=\"dropscope\"})"),
        None
    );
    drop(prom);
    stop(serve, libc::SIGTERM);
}

#[test]
fn a_web_config_others_could_change_is_refused_before_attaching() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let web = web_config(
        dir.path(),
        &format!("basic_auth_users:\n  p: '{SCRAPE_ME}'\n"),
    );
    let refused = |why: &str| {
        let out = Command::new(dropscope_bin())
            .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
            .arg("--web-config")
            .arg(&web)
            .output()
            .expect("run dropscope serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{why}: {err}");
        assert!(
            err.contains(why) && err.contains("refusing"),
            "{why}: {err}"
        );
        assert!(common::dropscope_programs().is_empty());
    };
    std::fs::set_permissions(&web, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    refused("world-writable");
    std::fs::set_permissions(&web, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::os::unix::fs::chown(&web, Some(65534), None).expect("chown");
    refused("owned by uid 65534");
    // An unknown key is named.
    std::os::unix::fs::chown(&web, Some(0), None).expect("chown");
    std::fs::write(&web, "basic_auth_user: {}\n").expect("write");
    let out = Command::new(dropscope_bin())
        .args(["serve", "--web-config"])
        .arg(&web)
        .output()
        .expect("run dropscope serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("basic_auth_user"),
        "{err}"
    );
}

/// Ends the live `report --format json` and the recording made beside it, and runs `check` on
/// the live report and on `report --input` of the recording.
fn check_live_and_recorded(
    live: Counting,
    recorder: Counting,
    rec: &Path,
    check: impl Fn(&serde_json::Value, &str),
) {
    let live = serde_json::from_str::<serde_json::Value>(&live.interrupt()).expect("JSON");
    check(&live, "live report");
    recorder.interrupt();
    let recorded = dropscope_tests::json_output(
        Command::new(dropscope_bin())
            .args(["report", "--format", "json", "--input"])
            .arg(rec),
    );
    check(&recorded, "report --input");
}

/// A UDP socket on port 5000 of `ns` that reads for `seconds`; joined, how many datagrams it
/// received.
fn udp_sink(ns: &Netns, seconds: u32) -> std::thread::JoinHandle<String> {
    let (bin, ns) = (dropscope_tests::traffic_bin(), ns.name.clone());
    std::thread::spawn(move || {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(bin)
            .args(["udp-sink", "5000", &seconds.to_string()])
            .output()
            .expect("udp-sink");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
}

/// The ratio entry of a JSON report for a namespace (`device`: `None` for the namespace).
fn ratio_of<'a>(
    report: &'a serde_json::Value,
    netns_name: &str,
    device: Option<&str>,
) -> &'a serde_json::Value {
    report["ratio"]
        .as_array()
        .unwrap_or_else(|| panic!("no ratio in {report:#}"))
        .iter()
        .find(|r| r["netns_name"] == netns_name && r["device"].as_str() == device)
        .unwrap_or_else(|| panic!("no ratio of {netns_name} {device:?} in {report:#}"))
}

#[test]
fn a_tenth_dropped_reads_ten_percent_live_recorded_and_in_prometheus() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (Netns::new("ratio-a"), Netns::new("ratio-b"));
    let (_, vb) = veth_pair(&a, &b, "10.78.0");
    let by = "reason,location,netns,device";
    let serve = Serve::start(&["--interval", "100ms", "--by", by]);
    let prom = Prometheus::start(dir.path(), serve.port);
    prom.wait_for("up{job=\"dropscope\"}", 1.0);
    let rec = dir.path().join("ratio.dsrec");
    let recorder = Counting::start(&["record", "-o", rec.to_str().expect("utf-8"), "--by", by]);
    let live = Counting::start(&["report", "--format", "json", "--by", by]);
    // B receives 1,000 datagrams over the veth: 900 to a socket that reads them, 100 to a
    // closed port (NO_SOCKET). Sent in runs of 100, so no backlog overflows on the way.
    let sink = udp_sink(&b, 6);
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..9 {
        a.traffic(&["udp-to", "10.78.0.2", "5000", "100"]);
        std::thread::sleep(Duration::from_millis(20));
    }
    a.traffic(&["udp-to", "10.78.0.2", "9", "100"]);
    assert_eq!(sink.join().expect("sink"), "900", "the sink lost datagrams");

    let check = |report: &serde_json::Value, how: &str| {
        let ns = ratio_of(report, &b.name, None);
        assert_eq!(ns["drops"], 100, "{how}: {ns}");
        assert_eq!(ns["packets"], 1000, "{how}: {ns}");
        assert_eq!(ns["ratio"], 0.1, "{how}: {ns}");
        // The device received the datagrams and an ARP request or two besides.
        let dev = ratio_of(report, &b.name, Some(&vb));
        assert_eq!(dev["drops"], 100, "{how}: {dev}");
        let packets = dev["packets"].as_u64().expect("packets");
        assert!((1000..1010).contains(&packets), "{how}: {dev}");
        // The drops are explained by the counters: Udp:NoPorts grew by 100, none unseen.
        let counted = report["kernel_counters"]
            .as_array()
            .expect("kernel counters")
            .iter()
            .find(|c| c["counter"] == "Udp:NoPorts" && c["netns_name"] == b.name.as_str())
            .unwrap_or_else(|| panic!("{how}: no Udp:NoPorts of B in {report:#}"));
        assert_eq!(counted["delta"], 100, "{how}");
        let unseen = report["unseen"].as_array().expect("unseen computed");
        assert!(
            !unseen.iter().any(|u| u["netns_name"] == b.name.as_str()),
            "{how}: {unseen:?}"
        );
    };
    check_live_and_recorded(live, recorder, &rec, check);

    // Prometheus computes the same ratio from the exported counters.
    let name = &b.name;
    prom.wait_for(
        &format!("sum(dropscope_drops_total{{netns_name=\"{name}\"}})"),
        100.0,
    );
    prom.wait_for(
        &format!("dropscope_netns_packets_total{{netns_name=\"{name}\"}}"),
        1000.0,
    );
    let q = format!(
        "sum(dropscope_drops_total{{netns_name=\"{name}\"}}) / \
         sum(dropscope_netns_packets_total{{netns_name=\"{name}\"}})"
    );
    assert_eq!(prom.value(&q), Some(0.1));
    drop(prom);
    stop(serve, libc::SIGTERM);
}
