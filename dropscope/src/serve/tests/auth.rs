//! Tests of basic auth under attack on loopback: wrong passwords answered from the cache, the
//! per-peer failure budget and its 429, and a right password let in while a flood of wrong ones
//! goes on from the same address.
use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpSocket, TcpStream},
    sync::watch,
};

use crate::serve::{
    auth::{FAILURE_BUDGET, FAILURE_INTERVAL, Users},
    connections::{Limits, MAX_CONNECTIONS_PER_PEER},
    tests::{big_exposition, server::scrape, start},
    webconfig::WebConfig,
};

/// The `Authorization` header line for `user` and `password`.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A server with one user, `prometheus`, whose password is `s3cret` hashed at `cost`.
async fn server_with_user(cost: u32) -> (u16, Arc<Users>, tokio::task::JoinHandle<()>) {
    let hash = bcrypt::hash("s3cret", cost).expect("hash");
    let web = WebConfig::parse(
        &format!("basic_auth_users:\n  prometheus: '{hash}'\n"),
        ".".as_ref(),
    )
    .expect("parse");
    let users = Arc::clone(web.users.as_ref().expect("users"));
    let (port, tx, server) = start(Limits::default(), web).await;
    tx.send_replace(Some(Arc::new(big_exposition(3))));
    (port, users, server)
}

/// A request with `headers` from the loopback address `from`: the whole answer.
async fn scrape_from(from: &str, port: u16, headers: &str) -> String {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{from}:0").parse().expect("addr"))
        .expect("bind a loopback address");
    let to: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut s = socket.connect(to).await.expect("connect");
    let req = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("answered in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_wrong_password_sent_again_is_refused_without_bcrypt() {
    let (port, users, server) = server_with_user(4).await;
    // Unknown names are verified against a decoy of cost 12, slow in a debug build.
    let second = Duration::from_secs(10);
    for (user, i) in [
        ("prometheus", 0),
        ("prometheus", 1),
        ("nobody", 0),
        ("nobody", 1),
    ] {
        let r = scrape(port, second, &basic(user, "wrong")).await;
        assert!(r.starts_with("HTTP/1.1 401"), "{user} #{i}: {r}");
    }
    assert_eq!(
        users.bcrypt_runs(),
        2,
        "one bcrypt per user and wrong password"
    );
    // The right password is not taken for a wrong one.
    let ok = scrape(port, second, &basic("prometheus", "s3cret")).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    server.abort();
}

#[tokio::test]
async fn past_its_failure_budget_a_peer_gets_429_with_retry_after() {
    let (port, _users, server) = server_with_user(4).await;
    let mut refused = 0;
    let throttled = loop {
        let r = scrape_from(
            "127.0.0.1",
            port,
            &basic("prometheus", &format!("guess{refused}")),
        )
        .await;
        if !r.starts_with("HTTP/1.1 401") {
            break r;
        }
        refused += 1;
        assert!(refused < 50, "{refused} wrong passwords and no 429");
    };
    assert!(throttled.starts_with("HTTP/1.1 429"), "{throttled}");
    assert_eq!(refused, FAILURE_BUDGET as usize, "401s before the 429");
    let retry_after = throttled
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no Retry-After: {throttled}"));
    let seconds: u64 = retry_after.trim().parse().expect("Retry-After in seconds");
    assert!(
        (1..=FAILURE_INTERVAL.as_secs()).contains(&seconds),
        "{seconds}"
    );
    assert!(!throttled.contains("dropscope_drops"), "{throttled}");
    // Another peer has a budget of its own.
    let other = scrape_from("127.0.0.2", port, &basic("prometheus", "wrong")).await;
    assert!(other.starts_with("HTTP/1.1 401"), "{other}");
    // The right password still gets in from the peer that spent its budget: it may be another
    // local user's.
    let ok = scrape_from("127.0.0.1", port, &basic("prometheus", "s3cret")).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    server.abort();
}

/// What the flood has done so far.
#[derive(Clone, Copy, Debug, Default)]
struct Flooded {
    opened: usize,
    refused: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_right_password_gets_in_while_a_local_flood_sends_wrong_ones() {
    // The cost that `htpasswd -nBC 10` gives: tens of milliseconds a verification.
    let (port, _users, server) = server_with_user(10).await;
    let (progress, mut seen) = watch::channel(Flooded::default());
    // 100 new connections a second from 127.0.0.1, each with the same wrong password, each
    // kept until answered; for 20 s at most.
    let flood = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut conns = tokio::task::JoinSet::new();
        for _ in 0..2000 {
            tick.tick().await;
            let progress = progress.clone();
            conns.spawn(async move {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
                    return;
                };
                progress.send_modify(|f| f.opened += 1);
                let req = format!(
                    "GET /metrics HTTP/1.1\r\nHost: x\r\n{}Connection: close\r\n\r\n",
                    basic("prometheus", "wrong")
                );
                if s.write_all(req.as_bytes()).await.is_err() {
                    return;
                }
                let mut out = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
                if out.starts_with(b"HTTP/1.1 4") {
                    progress.send_modify(|f| f.refused += 1);
                }
            });
            while conns.try_join_next().is_some() {}
        }
    });
    // The flood is on: more connections than a peer may hold, and wrong passwords answered.
    tokio::time::timeout(
        Duration::from_secs(20),
        seen.wait_for(|f| f.opened >= 2 * MAX_CONNECTIONS_PER_PEER && f.refused >= 1),
    )
    .await
    .expect("the flood got going")
    .expect("the flood runs");
    // A connection the server refused at the peer's cap (every connection of the peer waiting
    // on it, the flood's among them) is closed unanswered: the scraper asks again, as it does at
    // its next interval, within the same 5 s.
    let started = Instant::now();
    let within = Duration::from_secs(5);
    let mut tries = 0;
    let ok = loop {
        tries += 1;
        let left = within.saturating_sub(started.elapsed());
        let answer = scrape(port, left, &basic("prometheus", "s3cret")).await;
        if !answer.is_empty() || started.elapsed() >= within {
            break answer;
        }
    };
    let took = started.elapsed();
    let during = *seen.borrow();
    flood.abort();
    eprintln!("the right password got in after {took:?} and {tries} tries, flood at {during:?}");
    assert!(
        ok.starts_with("HTTP/1.1 200"),
        "after {took:?}, flood at {during:?}: {ok:?}"
    );
    assert!(ok.contains("dropscope_drops_total"), "{ok}");
    server.abort();
}

#[test]
fn an_unknown_users_check_costs_what_a_known_ones_does() {
    let cheap = bcrypt::hash("s3cret", 4).expect("hash");
    let dear = bcrypt::hash("s3cret", 5).expect("hash");
    let users = Users::new([("a".to_string(), cheap.clone())].into()).expect("users");
    assert_eq!(
        users.decoy_cost(),
        Some(4),
        "no dearer than the users' hashes"
    );
    let users =
        Users::new([("a".to_string(), cheap), ("b".to_string(), dear)].into()).expect("users");
    assert_eq!(users.decoy_cost(), Some(5), "as dear as the dearest");
}
