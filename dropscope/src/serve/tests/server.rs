//! Tests of the server's defences on loopback: a scrape answered while a client holds every
//! connection it can, the shedding policy, the idle and write timeouts, the request cap, TLS,
//! basic auth, and the web config's errors; and that the help text and README state the limits.
use std::{
    net::IpAddr,
    os::unix::fs::PermissionsExt as _,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::FutureExt as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

use crate::serve::{
    auth::{CHALLENGE, FAILURE_BUDGET, FAILURE_INTERVAL},
    connections::{
        IDLE_TIMEOUT, Limits, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER,
        MAX_REQUESTS_PER_CONNECTION, RESPONSE_TIMEOUT, Registry, Tracked, WRITE_TIMEOUT, peer_of,
    },
    files::{self, Role},
    tests::{big_exposition, start},
    webconfig::WebConfig,
};

/// A keep-alive scrape, to pipeline.
const PIPELINED: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

/// Reads until the server closes (EOF or a reset), at most `within`; panics if it does not.
pub(super) async fn read_until_closed(s: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Ok(Err(e)) => panic!("reading: {e}"),
            Err(_) => panic!("the server kept the connection open for {within:?}"),
        }
    }
}

/// A scrape on a fresh connection: the whole response, which must come within `within`.
pub(super) async fn scrape(port: u16, within: Duration, extra_headers: &str) -> String {
    let started = Instant::now();
    let mut s = tokio::time::timeout(within, TcpStream::connect(("127.0.0.1", port)))
        .await
        .expect("connected in time")
        .expect("connect");
    let req =
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{extra_headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let out = read_until_closed(&mut s, within.saturating_sub(started.elapsed())).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The idle and write timeouts of a test whose connections must not time out.
const HELD: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_is_answered_while_a_client_holds_every_connection_it_can() {
    // Timeouts far longer than the test: the held connections cannot have timed out meanwhile,
    // so the scrapes are answered by shedding. (With the 5 s defaults the test asserted the
    // whole took under 5 s, and a loaded machine took 5.6 s to open the connections.)
    let limits = Limits {
        idle_timeout: HELD,
        write_timeout: HELD,
        ..Limits::default()
    };
    let (port, tx, server) = start(limits, WebConfig::default()).await;
    // About 200 kB a response: a few fill the socket buffers of a client that does not read.
    tx.send_replace(Some(Arc::new(big_exposition(2000))));
    let held = Instant::now();
    let mut hostile = Vec::new();
    for i in 0..2 * MAX_CONNECTIONS {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        if i % 2 == 0 {
            // Pipelines requests and never reads an answer.
            s.write_all(&PIPELINED.repeat(MAX_REQUESTS_PER_CONNECTION as usize - 1))
                .await
                .expect("pipeline");
        }
        hostile.push(s);
    }
    // Let the server take them all in and stall writing to the pipeliners.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..5 {
        let started = Instant::now();
        let answer = scrape(port, Duration::from_secs(2), "").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{:.200}", answer);
        assert!(
            answer.contains("some_kernel_function_1999"),
            "a whole body: {} bytes",
            answer.len()
        );
        eprintln!("scrape answered in {:?}", started.elapsed());
    }
    // Answered by shedding, not because the held connections timed out meanwhile.
    assert!(held.elapsed() < HELD, "{:?}", held.elapsed());
    drop(hostile);
    server.abort();
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (port, tx, server) = start(limits, WebConfig::default()).await;
    tx.send_replace(Some(Arc::new(big_exposition(3))));
    // A connection that never sends anything.
    let mut silent = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let started = Instant::now();
    assert!(
        read_until_closed(&mut silent, Duration::from_secs(3))
            .await
            .is_empty()
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    // One that is answered, then stays idle.
    let mut kept = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    kept.write_all(PIPELINED).await.expect("write");
    let started = Instant::now();
    let out = read_until_closed(&mut kept, Duration::from_secs(3)).await;
    let waited = started.elapsed();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    server.abort();
}

#[tokio::test]
async fn a_connection_is_closed_after_its_request_cap() {
    let limits = Limits {
        max_requests: 3,
        ..Limits::default()
    };
    let (port, tx, server) = start(limits, WebConfig::default()).await;
    tx.send_replace(Some(Arc::new(big_exposition(3))));
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(&PIPELINED.repeat(5)).await.expect("write");
    let out = read_until_closed(&mut s, Duration::from_secs(3)).await;
    let out = String::from_utf8_lossy(&out);
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3, "{out}");
    assert_eq!(out.matches("connection: close").count(), 1, "{out}");
    let last = out.rfind("HTTP/1.1 200 OK").expect("a response");
    assert!(out[last..].contains("connection: close"), "{out}");
    server.abort();
}

#[tokio::test]
async fn a_write_that_makes_no_progress_times_out() {
    let registry = Registry::new(Limits::default());
    let (slot, _) = registry
        .admit("127.0.0.1".parse().expect("ip"), None)
        .expect("admitted");
    let (ours, _theirs) = tokio::io::duplex(64);
    let mut io = Tracked::new(
        ours,
        Arc::clone(slot.activity()),
        Duration::from_millis(200),
    );
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(3), io.write_all(&[0; 1024]))
        .await
        .expect("the write ends")
        .expect_err("nobody reads");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(started.elapsed() >= Duration::from_millis(190));
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected() {
    let limits = Limits {
        write_timeout: Duration::from_millis(300),
        max_requests: u32::MAX,
        ..Limits::default()
    };
    let (port, tx, server) = start(limits, WebConfig::default()).await;
    tx.send_replace(Some(Arc::new(big_exposition(2000))));
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let n = 500;
    s.write_all(&PIPELINED.repeat(n)).await.expect("pipeline");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // What the buffers held arrives, then the end: not every answer.
    let out = read_until_closed(&mut s, Duration::from_secs(5)).await;
    let answers = String::from_utf8_lossy(&out)
        .matches("HTTP/1.1 200")
        .count();
    assert!(answers < n, "{answers} answers");
    server.abort();
}

#[test]
fn at_the_per_peer_cap_the_peers_least_recently_active_connection_is_shed() {
    let limits = Limits {
        max_connections: 10,
        per_peer: 2,
        ..Limits::default()
    };
    let registry = Registry::new(limits);
    let a: IpAddr = "10.0.0.1".parse().expect("ip");
    let b: IpAddr = "10.0.0.2".parse().expect("ip");
    let (first, shed) = registry.admit(a, None).expect("admitted");
    assert!(!shed);
    let (second, _) = registry.admit(a, None).expect("admitted");
    let (other, _) = registry.admit(b, None).expect("admitted");
    std::thread::sleep(Duration::from_millis(5));
    first.activity().touch();
    let (third, shed) = registry.admit(a, None).expect("admitted");
    assert!(shed);
    assert!(
        second.activity().shed().now_or_never().is_some(),
        "the idle one goes"
    );
    assert!(first.activity().shed().now_or_never().is_none());
    assert!(other.activity().shed().now_or_never().is_none());
    assert!(third.activity().shed().now_or_never().is_none());
    assert_eq!(registry.open(), 3);
    drop(second);
    assert_eq!(registry.open(), 3, "a shed slot is not counted twice");
    drop((first, third));
    assert_eq!(registry.open(), 1);
}

#[test]
fn at_the_total_cap_the_busiest_peer_loses_one() {
    let limits = Limits {
        max_connections: 4,
        per_peer: 3,
        ..Limits::default()
    };
    let registry = Registry::new(limits);
    let scraper: IpAddr = "192.0.2.7".parse().expect("ip");
    let (prometheus, _) = registry.admit(scraper, None).expect("admitted");
    let busy: Vec<_> = ["2001:db8::1", "2001:db8::2", "2001:db8::3"]
        .into_iter()
        .map(|ip| {
            registry
                .admit(ip.parse().expect("ip"), None)
                .expect("admitted")
                .0
        })
        .collect();
    std::thread::sleep(Duration::from_millis(5));
    prometheus.activity().touch();
    let (_new, shed) = registry
        .admit("198.51.100.1".parse().expect("ip"), None)
        .expect("admitted");
    assert!(shed);
    assert!(prometheus.activity().shed().now_or_never().is_none());
    assert_eq!(
        busy.iter()
            .filter(|s| s.activity().shed().now_or_never().is_some())
            .count(),
        1
    );
    assert_eq!(registry.open(), 4);
}

#[test]
fn peers_are_ipv4_addresses_and_ipv6_64s() {
    let p = |s: &str| peer_of(s.parse().expect("ip"));
    assert_eq!(p("2001:db8:1:2::5"), p("2001:db8:1:2:ffff::9"));
    assert_ne!(p("2001:db8:1:2::5"), p("2001:db8:1:3::5"));
    assert_eq!(p("::ffff:10.1.2.3"), p("10.1.2.3"));
    assert_ne!(p("10.1.2.3"), p("10.1.2.4"));
}

/// Writes `text` as web.yml in `dir`, owner-only writable.
fn web_yml(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("web.yml");
    std::fs::write(&path, text).expect("write web.yml");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

#[tokio::test]
async fn tls_serves_scrapes_and_refuses_plain_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    std::fs::write(dir.path().join("cert.pem"), ck.cert.pem()).expect("cert");
    let key = dir.path().join("key.pem");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("key");
    // A world-readable key is refused.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let path = web_yml(
        dir.path(),
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n",
    );
    let web = WebConfig::load(&path).expect("load the web config");
    let (port, tx, server) = start(Limits::default(), web).await;
    tx.send_replace(Some(Arc::new(big_exposition(3))));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).expect("a root");
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), tls.read_to_end(&mut out))
        .await
        .expect("answered");
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("some_kernel_function_2"), "{out}");

    let plain = scrape(port, Duration::from_secs(3), "").await;
    assert!(plain.starts_with("HTTP/1.0 400"), "{plain}");
    assert!(plain.contains("HTTPS server"), "{plain}");
    assert!(!plain.contains("dropscope_"), "{plain}");
    server.abort();
}

#[tokio::test]
async fn basic_auth_lets_in_only_the_right_password_and_remembers_it() {
    let hash = bcrypt::hash("s3cret", 4).expect("hash");
    let web = WebConfig::parse(
        &format!("basic_auth_users:\n  prometheus: '{hash}'\n  other: '{hash}'\n"),
        Path::new("."),
    )
    .expect("parse");
    let users = Arc::clone(web.users.as_ref().expect("users"));
    let (port, tx, server) = start(Limits::default(), web).await;
    tx.send_replace(Some(Arc::new(big_exposition(3))));
    let auth = |user: &str, pass: &str| {
        use base64::Engine as _;
        format!(
            "Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
    };
    let second = Duration::from_secs(3);
    for (headers, why) in [
        (String::new(), "no credentials"),
        (auth("prometheus", "wrong"), "a wrong password"),
        (auth("nobody", "s3cret"), "an unknown user"),
        ("Authorization: Bearer s3cret\r\n".into(), "another scheme"),
    ] {
        let r = scrape(port, second, &headers).await;
        assert!(r.starts_with("HTTP/1.1 401"), "{why}: {r}");
        assert!(
            r.to_ascii_lowercase().contains(&format!(
                "www-authenticate: {}",
                CHALLENGE.to_ascii_lowercase()
            )),
            "{why}: {r}"
        );
        assert!(!r.contains("dropscope_drops"), "{why}: {r}");
    }
    assert!(!users.remembers("prometheus"));
    let ok = scrape(port, second, &auth("prometheus", "s3cret")).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("dropscope_drops_total"), "{ok}");
    assert!(users.remembers("prometheus"));
    assert!(!users.remembers("other"));
    // Remembered: the right password is let in again, a wrong one still not.
    assert!(users.check("prometheus", b"s3cret").await);
    assert!(!users.check("prometheus", b"s3cret!").await);
    assert!(!users.check("other", b"wrong").await);
    let again = scrape(port, second, &auth("prometheus", "s3cret")).await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    server.abort();
}

#[test]
fn malformed_web_configs_are_errors_that_name_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let parse = |text: &str| {
        let e = WebConfig::parse(text, dir.path()).expect_err(text);
        format!("{e:#}")
    };
    let cases: [(&str, &[&str]); 9] = [
        ("basic_auth_user:\n  a: b\n", &["basic_auth_user"]),
        (
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  kye_file: k\n",
            &["line 4", "key_file"],
        ),
        (
            "basic_auth_users:\n  prom: plaintext\n",
            &["prom", "bcrypt"],
        ),
        ("tls_server_config:\n  cert_file: c.pem\n", &["key_file"]),
        (
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  cipher_suites: [x]\n",
            &["cipher_suites", "not supported"],
        ),
        (
            "http_server_config:\n  http2: false\n",
            &["http_server_config"],
        ),
        ("tls_server_config: [1\n", &["line"]),
        (
            "tls_server_config:\n  cert_file: missing.pem\n  key_file: k\n",
            &["missing.pem"],
        ),
        (
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: TLS10\n",
            &["min_version", "TLS10"],
        ),
    ];
    for (text, wanted) in cases {
        let msg = parse(text);
        for w in wanted {
            assert!(msg.contains(w), "{text:?}: {msg}");
        }
    }
    // An empty file asks for nothing.
    let empty = WebConfig::parse("", dir.path()).expect("empty");
    assert!(empty.tls.is_none() && empty.users.is_none());
}

#[test]
fn a_web_config_others_can_write_or_not_owned_by_root_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = web_yml(dir.path(), "");
    WebConfig::load(&path).expect("owner-only is fine");
    for (mode, what) in [(0o666, "world-writable"), (0o620, "group-writable")] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let msg = format!("{:#}", WebConfig::load(&path).expect_err(what));
        assert!(msg.contains(what) && msg.contains("secrets"), "{msg}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // Owned by someone else while running as root.
    let meta = if nix_is_root() {
        std::os::unix::fs::chown(&path, Some(65534), None).expect("chown");
        std::fs::metadata(&path).expect("stat")
    } else {
        std::fs::metadata(&path).expect("stat")
    };
    let msg = format!(
        "{:#}",
        files::check_file(&meta, &path, Role::WebConfig, 0).expect_err("not root's")
    );
    assert!(
        msg.contains("owned by uid") && msg.contains("chown root"),
        "{msg}"
    );
    assert!(files::check_file(&meta, &path, Role::WebConfig, meta_uid(&meta)).is_ok());
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn meta_uid(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::MetadataExt::uid(meta)
}

#[test]
fn the_help_and_the_prometheus_page_state_the_limits() {
    use clap::CommandFactory as _;
    let mut cli = crate::cli::Cli::command();
    let help = cli
        .find_subcommand_mut("serve")
        .expect("serve")
        .render_long_help()
        .to_string();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let page = include_str!("../../../../docs/prometheus.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let limits = [
        format!(
            "{MAX_CONNECTIONS} open connections in all and {MAX_CONNECTIONS_PER_PEER} per peer"
        ),
        format!("within {} s of opening", IDLE_TIMEOUT.as_secs()),
        format!("no progress for {} s", WRITE_TIMEOUT.as_secs()),
        format!("after {MAX_REQUESTS_PER_CONNECTION} requests"),
        format!("ready within {} s", RESPONSE_TIMEOUT.as_secs()),
        "--web-config".to_string(),
        format!(
            "may fail {FAILURE_BUDGET} logins at once, then one every {} s",
            FAILURE_INTERVAL.as_secs()
        ),
        "429".to_string(),
    ];
    for l in &limits {
        assert!(help.contains(l.as_str()), "help lacks {l:?}:\n{help}");
        assert!(page.contains(l.as_str()), "docs/prometheus.md lacks {l:?}");
    }
}

/// A login whose password is being verified (bcrypt, slow on a busy machine) is not pushed out
/// by a flood's newer connections from the same peer: at the per-peer cap, a connection not
/// waiting on the server goes first, though the login was idle longer. (Shedding the least
/// recently active alone, a local flood shed the login it was verifying: an empty answer.)
#[test]
fn at_the_per_peer_cap_a_login_being_verified_is_shed_last() {
    let limits = Limits {
        max_connections: 8,
        per_peer: 2,
        ..Limits::default()
    };
    let registry = Registry::new(limits);
    let local: IpAddr = "127.0.0.1".parse().expect("ip");
    let (login, _) = registry.admit(local, None).expect("admitted");
    login.activity().set_verifying(true);
    std::thread::sleep(Duration::from_millis(5));
    let (flood, _) = registry.admit(local, None).expect("admitted");
    let (_next, shed) = registry.admit(local, None).expect("admitted");
    assert!(shed);
    assert!(
        login.activity().shed().now_or_never().is_none(),
        "the login being verified stays"
    );
    assert!(flood.activity().shed().now_or_never().is_some());
}

/// A login the busy server has not read yet (its request waiting in its socket, nothing
/// written to it) is not pushed out by a flood's newer connections of the same peer: at the
/// per-peer cap, while all of the peer's connections wait on the server, the new one is
/// refused. (Shedding the least recently active one not being verified, a loaded machine's
/// flood shed such a login: an empty answer, once in about 30 runs of the flood test.) A
/// connection that sent nothing is idle and goes first, as before.
#[test]
fn at_the_per_peer_cap_a_login_not_read_yet_stays_and_the_newcomer_is_refused() {
    use std::io::Write as _;
    let limits = Limits {
        max_connections: 8,
        per_peer: 2,
        ..Limits::default()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    // A connection as the server holds it: accepted, non-blocking; `asked` has sent a request.
    let accept = |asked: bool| {
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        if asked {
            client
                .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
                .expect("write");
        }
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        // The request has reached the server's socket.
        let deadline = Instant::now() + Duration::from_secs(10);
        while asked && !server.peek(&mut [0u8]).is_ok_and(|n| n > 0) {
            assert!(Instant::now() < deadline, "the request never arrived");
            std::thread::sleep(Duration::from_millis(5));
        }
        (client, server)
    };
    let registry = Registry::new(limits);
    let local: IpAddr = "127.0.0.1".parse().expect("ip");
    let (_c1, login) = accept(true);
    let (login, _) = registry.admit(local, Some(login)).expect("admitted");
    std::thread::sleep(Duration::from_millis(5));
    let (_c2, queued) = accept(false);
    let (queued, _) = registry.admit(local, Some(queued)).expect("admitted");
    queued.activity().set_verifying(true);
    let (_c3, newcomer) = accept(true);
    assert!(
        registry.admit(local, Some(newcomer)).is_none(),
        "the newcomer is refused"
    );
    assert!(login.activity().shed().now_or_never().is_none());
    assert!(queued.activity().shed().now_or_never().is_none());
    assert_eq!(registry.open(), 2);
    // Another peer is not refused for it.
    let (_other, shed) = registry
        .admit("10.0.0.9".parse().expect("ip"), None)
        .expect("admitted");
    assert!(!shed);
    // Once verified and answered, the queued one is idle: the next one takes its place, and
    // the login still waits.
    queued.activity().set_verifying(false);
    let (_next, shed) = registry.admit(local, None).expect("admitted");
    assert!(shed);
    assert!(queued.activity().shed().now_or_never().is_some());
    assert!(login.activity().shed().now_or_never().is_none());
    // A connection that sent nothing does not wait on the server: it goes before the login.
    let (_c4, silent) = accept(false);
    let registry = Registry::new(limits);
    let (silent, _) = registry.admit(local, Some(silent)).expect("admitted");
    let (_c5, login) = accept(true);
    let (login, _) = registry.admit(local, Some(login)).expect("admitted");
    let (_new, shed) = registry.admit(local, None).expect("admitted");
    assert!(shed);
    assert!(silent.activity().shed().now_or_never().is_some());
    assert!(login.activity().shed().now_or_never().is_none());
}

#[test]
fn at_a_cap_a_connection_that_failed_auth_is_shed_first() {
    let limits = Limits {
        max_connections: 4,
        per_peer: 2,
        ..Limits::default()
    };
    let registry = Registry::new(limits);
    let local: IpAddr = "127.0.0.1".parse().expect("ip");
    // At the per-peer cap: the one that failed goes, though the other was idle longer.
    let (idle, _) = registry.admit(local, None).expect("admitted");
    std::thread::sleep(Duration::from_millis(5));
    let (failed, _) = registry.admit(local, None).expect("admitted");
    failed.activity().set_auth_failed(true);
    let (_third, shed) = registry.admit(local, None).expect("admitted");
    assert!(shed);
    assert!(
        failed.activity().shed().now_or_never().is_some(),
        "the failed one goes"
    );
    assert!(idle.activity().shed().now_or_never().is_none());
    // At the total cap: the one that failed goes, though another peer holds more.
    let registry = Registry::new(limits);
    let (busy_a, _) = registry
        .admit("192.0.2.1".parse().expect("ip"), None)
        .expect("admitted");
    let (busy_b, _) = registry
        .admit("192.0.2.1".parse().expect("ip"), None)
        .expect("admitted");
    std::thread::sleep(Duration::from_millis(5));
    let (quiet, _) = registry
        .admit("192.0.2.2".parse().expect("ip"), None)
        .expect("admitted");
    let (failed, _) = registry
        .admit("192.0.2.3".parse().expect("ip"), None)
        .expect("admitted");
    failed.activity().set_auth_failed(true);
    let (_new, shed) = registry
        .admit("192.0.2.4".parse().expect("ip"), None)
        .expect("admitted");
    assert!(shed);
    assert!(
        failed.activity().shed().now_or_never().is_some(),
        "the failed one goes"
    );
    for s in [&busy_a, &busy_b, &quiet] {
        assert!(s.activity().shed().now_or_never().is_none());
    }
}
