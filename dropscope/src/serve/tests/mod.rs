//! Tests of the exposition formats, content negotiation and the HTTP server on loopback (its
//! connection limits, TLS and basic auth in `server`, `auth` and `webconfig`).

mod auth;
mod server;
mod webconfig;
use std::{
    io::{Read, Write},
    sync::Arc,
};

use tokio::sync::watch;

use super::{
    connections::Limits,
    exposition::{Exposition, Format, render},
    http::{self, Published},
    series::{Capped, Selected, Selection, Series},
    webconfig::WebConfig,
};
use crate::model::{DropCount, DropKey, Health, Reason, SessionInfo, Snapshot};

fn snapshot() -> Snapshot {
    let d = |name: &str, loc: &str, count| DropCount {
        key: crate::fixtures::key(2, name, loc),
        count,
    };
    let drops = vec![
        d("NO_SOCKET", "__udp4_lib_rcv+0x4bc", 1000),
        d("IP_NOPROTO", "ip_local_deliver_finish+0x81", 700),
        d("NETFILTER_DROP", "nft_do_chain+0x3e8 [nf_tables]", 5),
    ];
    Snapshot {
        health: Health {
            keys_used: 3,
            keys_capacity: 10240,
            poll_interval_ms: 500,
            bpf_run_ns: Some(1_500_000_000),
            bpf_run_cnt: Some(1708),
            ..Health::default()
        },
        unix_ms: 1_700_000_000_123,
        ..crate::fixtures::snap(0, drops, 3)
    }
}

fn info() -> SessionInfo {
    SessionInfo {
        host: "h".into(),
        kernel: "6.18.0".into(),
        started_unix_ms: 0,
        probe: "tp_btf/kfree_skb".into(),
    }
}

fn exposition(max: usize) -> Exposition {
    let s = snapshot();
    let sel = Selection::new(max).select(&s);
    Exposition::new(&info(), &s, sel, max)
}

/// The samples of a family in a rendered body, as (labels, value).
fn samples<'a>(body: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let labels = match series.split_once('{') {
                Some((n, rest)) if n == name => rest.trim_end_matches('}'),
                None if series == name => "",
                _ => return None,
            };
            Some((labels, value.parse().expect("a number")))
        })
        .collect()
}

/// Every sample line belongs to a family declared before it, in the format's naming.
fn check_families(body: &str, format: Format) {
    let mut declared: Vec<(String, String)> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            declared.push((name.into(), kind.into()));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name = line.split(['{', ' ']).next().expect("a name");
        let ok = declared
            .iter()
            .any(|(family, kind)| match (format, kind.as_str()) {
                (Format::OpenMetrics, "counter") => name == format!("{family}_total"),
                (Format::OpenMetrics, "info") => name == format!("{family}_info"),
                _ => name == family,
            });
        assert!(ok, "{name} is not declared before use in:\n{body}");
    }
}

#[test]
fn the_text_format_shows_every_series_and_sums_to_the_total() {
    let body = render(&exposition(1000), Format::Text);
    check_families(&body, Format::Text);
    let drops = samples(&body, "dropscope_drops_total");
    assert!(drops.contains(&(
        r#"reason="NO_SOCKET",location="__udp4_lib_rcv+0x4bc""#,
        1000.0
    )));
    assert!(drops.contains(&(r#"reason="overflow""#, 3.0)));
    let sum: f64 = drops.iter().map(|(_, v)| v).sum();
    assert_eq!(sum, snapshot().total as f64);
    assert_eq!(samples(&body, "dropscope_overflow_total"), [("", 3.0)]);
    assert_eq!(
        samples(&body, "dropscope_probe_run_seconds_total"),
        [("", 1.5)]
    );
    assert_eq!(samples(&body, "dropscope_probe_runs_total"), [("", 1708.0)]);
    assert_eq!(
        samples(&body, "dropscope_poll_interval_seconds"),
        [("", 0.5)]
    );
    assert!(body.contains("# TYPE dropscope_drops_total counter\n"));
    assert!(body.contains("# TYPE dropscope_info gauge\n"));
    assert!(!body.contains("# EOF"));
}

#[test]
fn openmetrics_names_families_without_suffixes_and_ends_with_eof() {
    let body = render(&exposition(1000), Format::OpenMetrics);
    check_families(&body, Format::OpenMetrics);
    assert!(body.contains("# TYPE dropscope_drops counter\n"));
    assert!(body.contains("# TYPE dropscope info\n"));
    assert!(body.ends_with("# EOF\n"));
    assert_eq!(body.matches("# EOF").count(), 1);
}

#[test]
fn the_cap_leaves_n_series_and_other_keeps_the_sum() {
    let body = render(&exposition(1), Format::Text);
    let drops = samples(&body, "dropscope_drops_total");
    assert_eq!(drops.len(), 3, "one series, other, overflow: {drops:?}");
    assert!(drops.contains(&(r#"reason="other""#, 705.0)));
    let sum: f64 = drops.iter().map(|(_, v)| v).sum();
    assert_eq!(sum, snapshot().total as f64);
    assert_eq!(samples(&body, "dropscope_series_other"), [("", 2.0)]);
}

#[test]
fn bpf_statistics_are_left_out_when_off() {
    let mut s = snapshot();
    s.health.bpf_run_ns = None;
    s.health.bpf_run_cnt = None;
    let sel = Selection::new(10).select(&s);
    let body = render(&Exposition::new(&info(), &s, sel, 10), Format::Text);
    assert!(!body.contains("dropscope_probe_run"));
}

#[test]
fn hostile_label_values_are_escaped() {
    let selected = Selected {
        drops: Capped {
            series: vec![Series {
                labels: vec!["A\"}\\".into(), "x\ny\"z".into()].into(),
                count: 1,
            }],
            ..Capped::default()
        },
        ..Selected::default()
    };
    let e = Exposition::new(&info(), &snapshot(), selected, 10);
    for format in [Format::Text, Format::OpenMetrics] {
        let body = render(&e, format);
        assert!(
            body.contains(r#"dropscope_drops_total{reason="A\"}\\",location="x\ny\"z"} 1"#),
            "{body}"
        );
        assert!(body.lines().all(|l| !l.starts_with('y')), "{body}");
    }
}

#[test]
fn negotiation_follows_the_scrapers_preference() {
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
    assert_eq!(Format::negotiate(None), Format::Text);
    assert_eq!(
        Format::negotiate(Some("application/openmetrics-text;q=0.2, text/plain")),
        Format::Text
    );
    assert_eq!(
        Format::negotiate(Some("application/openmetrics-text;q=0")),
        Format::Text
    );
}

/// Sends one raw request to the server and returns the whole response.
async fn request(port: u16, raw: String) -> String {
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(raw.as_bytes()).expect("write");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("request task")
}

#[tokio::test]
async fn the_server_serves_the_latest_exposition_within_its_limits() {
    let (port, tx, server) = start(Limits::default(), WebConfig::default()).await;
    let get = |accept: &str| {
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
    };

    let early = request(port, get("text/plain")).await;
    assert!(early.starts_with("HTTP/1.1 503"), "{early}");

    tx.send_replace(Some(Arc::new(Published::new(exposition(1000)))));
    let text = request(port, get("text/plain")).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("content-type: text/plain; version=0.0.4"),
        "{text}"
    );
    assert!(text.contains(r#"reason="IP_NOPROTO""#), "{text}");
    let om = request(port, get("application/openmetrics-text; version=1.0.0")).await;
    assert!(
        om.contains("content-type: application/openmetrics-text"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");

    let big = format!(
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        http::BODY_LIMIT + 1,
        "x".repeat(http::BODY_LIMIT + 1)
    );
    let refused = request(port, big).await;
    assert!(refused.starts_with("HTTP/1.1 413"), "{refused}");
    let missing = request(
        port,
        "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into(),
    )
    .await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    server.abort();
}

#[tokio::test]
async fn a_taken_port_is_named_with_what_to_do() {
    let first = http::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = first.local_addr().expect("addr");
    let err = http::bind(addr).await.expect_err("the port is taken");
    let msg = format!("{err:#}");
    assert!(msg.contains(&format!("cannot listen on {addr}")), "{msg}");
    assert!(msg.contains("--listen"), "{msg}");
}

/// Starts a server on a free loopback port with `limits` and `web`, with nothing published.
pub(super) async fn start(
    limits: Limits,
    web: WebConfig,
) -> (
    u16,
    watch::Sender<Option<Arc<Published>>>,
    tokio::task::JoinHandle<()>,
) {
    let listener = http::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = watch::channel(None);
    let router = http::router(rx, web.users, &limits);
    let tls = web.tls.map(tokio_rustls::TlsAcceptor::from);
    let server = tokio::spawn(http::serve(listener, router, limits, tls));
    (port, tx, server)
}

/// An exposition of `n` series (a body of about 100 bytes a series).
pub(super) fn big_exposition(n: usize) -> Published {
    let mut s = snapshot();
    s.drops = (0..n)
        .map(|i| DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: "NO_SOCKET".into(),
                },
                location: format!("some_kernel_function_{i}+0x{i:x}").into(),
                attr: Default::default(),
            },
            count: 1 + i as u64,
        })
        .collect();
    s.total = s.drops.iter().map(|d| d.count).sum::<u64>() + s.overflow;
    let sel = Selection::new(n).select(&s);
    Published::new(Exposition::new(&info(), &s, sel, n))
}

#[test]
fn packets_per_device_and_namespace_are_exported_as_denominators() {
    let mut s = snapshot();
    let mut r = crate::model::KernelReading {
        initial_netns: 1,
        ..Default::default()
    };
    let g = r.netns.entry(1).or_default();
    g.insert("Ip:InReceives".into(), 900);
    g.insert("Ip6:InReceives".into(), 100);
    g.insert("Dev:eth0:RxPackets".into(), 1000);
    g.insert("Dev:eth0:TxPackets".into(), 20);
    r.netns
        .entry(77)
        .or_default()
        .insert("Dev:ve\"th:RxPackets".into(), 5);
    s.kernel = Some(std::sync::Arc::new(r));
    let sel = Selection::new(100).select(&s);
    for format in [Format::Text, Format::OpenMetrics] {
        let body = render(&Exposition::new(&info(), &s, sel.clone(), 100), format);
        check_families(&body, format);
        let p = samples(&body, "dropscope_packets_total");
        assert!(
            p.contains(&(r#"netns_name="host",device="eth0",direction="rx""#, 1000.0)),
            "{body}"
        );
        assert!(p.contains(&(r#"netns_name="host",device="eth0",direction="tx""#, 20.0)));
        // A namespace no drop named goes by its inode; label values are escaped.
        assert!(p.contains(&(r#"netns_name="77",device="ve\"th",direction="rx""#, 5.0)));
        assert_eq!(
            samples(&body, "dropscope_netns_packets_total"),
            [
                (r#"netns_name="host""#, 1000.0),
                (r#"netns_name="77""#, 0.0)
            ]
        );
    }
    // Without a reading, no packet families.
    let body = render(&exposition(100), Format::Text);
    assert!(!body.contains("dropscope_packets_total"), "{body}");
}

#[test]
fn layer_counters_are_exported_per_layer_namespace_and_device_capped() {
    let mut s = snapshot();
    let mut r = crate::model::KernelReading {
        initial_netns: 1,
        ..Default::default()
    };
    let g = r.netns.entry(1).or_default();
    g.insert("Softnet:Dropped".into(), 7);
    g.insert("Softnet:cpu1:time_squeeze".into(), 3);
    g.insert("Udp:NoPorts".into(), 4);
    g.insert("Dev:eth0:RxPackets".into(), 1000);
    let g = r.netns.entry(77).or_default();
    g.insert("Qdisc:va:tbf 1::drops".into(), 40);
    g.insert("Qdisc:va:tbf 1::overlimits".into(), 90);
    g.insert("Link:va:tx_dropped".into(), 2);
    s.kernel = Some(std::sync::Arc::new(r));
    let sel = Selection::new(100).select(&s);
    for format in [Format::Text, Format::OpenMetrics] {
        let body = render(&Exposition::new(&info(), &s, sel.clone(), 100), format);
        check_families(&body, format);
        let mut l = samples(&body, "dropscope_layer_drops_total");
        l.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(
            l,
            [
                (
                    r#"layer="nic",counter="Link:va:tx_dropped",netns_name="77",device="va""#,
                    2.0
                ),
                (
                    r#"layer="protocol",counter="Udp:NoPorts",netns_name="host""#,
                    4.0
                ),
                (
                    r#"layer="qdisc",counter="Qdisc:va:tbf 1::drops",netns_name="77",device="va""#,
                    40.0
                ),
                (
                    r#"layer="softnet",counter="Softnet:Dropped",netns_name="host""#,
                    7.0
                ),
            ],
            "{body}"
        );
    }
    // Capped at --max-series like the other families, the host's first, the rest in
    // layer="other".
    let sel = Selection::new(2).select(&s);
    let body = render(&Exposition::new(&info(), &s, sel, 2), Format::Text);
    assert_eq!(
        samples(&body, "dropscope_layer_drops_total"),
        [
            (
                r#"layer="softnet",counter="Softnet:Dropped",netns_name="host""#,
                7.0
            ),
            (
                r#"layer="protocol",counter="Udp:NoPorts",netns_name="host""#,
                4.0
            ),
            (r#"layer="other""#, 42.0),
        ],
        "{body}"
    );
}

/// A drop of `reason` in namespace `netns` (named `name`, if resolved) on interface `ifindex`
/// (named `device`), of protocol `protocol`.
fn attributed(
    reason: &str,
    netns: u64,
    name: Option<&str>,
    (ifindex, device): (u32, &str),
    protocol: &str,
    count: u64,
) -> DropCount {
    DropCount {
        key: DropKey {
            reason: Reason {
                code: 2,
                name: reason.into(),
            },
            location: "ip_local_deliver_finish+0x81".into(),
            attr: crate::model::Attribution {
                netns: Some(netns),
                netns_cookie: None,
                netns_name: name.map(Into::into),
                ifindex: Some(ifindex),
                device: Some(device.into()),
                protocol: Some(protocol.into()),
                port: None,
                socket: None,
                culprit: None,
            },
        },
        count,
    }
}

/// A snapshot of `drops` and a kernel reading of (namespace, counter, growth), with the
/// initial namespace `HOST`.
fn attributed_snapshot(drops: Vec<DropCount>, counters: &[(u64, &str, u64)]) -> Snapshot {
    let mut r = crate::model::KernelReading {
        initial_netns: HOST,
        ..Default::default()
    };
    for &(ns, name, v) in counters {
        r.netns.entry(ns).or_default().insert(name.into(), v);
    }
    Snapshot {
        total: drops.iter().map(|d| d.count).sum(),
        drops,
        kernel: Some(Arc::new(r)),
        ..Snapshot::default()
    }
}

/// The initial namespace's inode in the attributed snapshots.
const HOST: u64 = 4026531840;

/// The rendered text of `snap` through `selection`, capped at `max`.
fn scrape(selection: &mut Selection, snap: &Snapshot, max: usize) -> String {
    let sel = selection.select(snap);
    render(&Exposition::new(&info(), snap, sel, max), Format::Text)
}

/// The sum of a family's samples.
fn family_sum(body: &str, name: &str) -> f64 {
    samples(body, name).iter().map(|(_, v)| v).sum()
}

/// Raw packets of every protocol number from unprivileged namespaces (named after a process in
/// them), then the host's and a named namespace's first drops.
fn flood(namespaces: u64) -> Vec<DropCount> {
    (0..namespaces)
        .flat_map(|i| {
            let ns = 4026532000 + i;
            let name = format!("sh[{}]", 1000 + i);
            (0..=255u8).map(move |p| {
                attributed("IP_NOPROTO", ns, Some(&name), (2, "d0"), &p.to_string(), 1)
            })
        })
        .collect()
}

#[test]
fn unprivileged_namespaces_cannot_take_the_series_of_the_host_or_named_namespaces() {
    let max = 1000;
    let mut selection = Selection::new(max);
    let mut drops = flood(4);
    let first = scrape(
        &mut selection,
        &attributed_snapshot(drops.clone(), &[]),
        max,
    );
    assert!(samples(&first, "dropscope_drops_total").len() <= max + 2);
    // Root's own drops come after the flood: a new reason in the host, and a namespace named
    // with `ip netns add`, and more flooding namespaces.
    drops.extend(flood(8).into_iter().skip(4 * 256));
    drops.push(attributed(
        "NO_SOCKET",
        HOST,
        Some("host"),
        (1, "lo"),
        "udp",
        7,
    ));
    drops.push(attributed(
        "TCP_CLOSE",
        4026533000,
        Some("blue"),
        (3, "veth0"),
        "tcp",
        9,
    ));
    let snap = attributed_snapshot(drops, &[]);
    let body = scrape(&mut selection, &snap, max);
    let d = samples(&body, "dropscope_drops_total");
    assert!(
        d.iter().any(|(l, v)| l.starts_with(r#"reason="NO_SOCKET""#)
            && l.contains(r#"netns_name="host""#)
            && *v == 7.0),
        "the host's new reason went to other"
    );
    assert!(
        d.iter()
            .any(|(l, v)| l.contains(r#"netns_name="blue""#) && *v == 9.0),
        "the named namespace went to other"
    );
    // No one unprivileged namespace, nor all of them, has more than its share.
    let per_ns = |n: &str| {
        d.iter()
            .filter(|(l, _)| l.contains(&format!(r#"netns_name="{n}""#)))
            .count()
    };
    assert!(per_ns("sh[1000]") < max / 4, "{}", per_ns("sh[1000]"));
    let unprivileged = d.iter().filter(|(l, _)| l.contains("sh[")).count();
    assert!(unprivileged <= max / 2, "{unprivileged}");
    assert!(d.contains(&(r#"reason="other""#, (8 * 256 - unprivileged) as f64)));
    assert_eq!(
        family_sum(&body, "dropscope_drops_total"),
        snap.total as f64
    );
}

/// A namespace that ended, having filled its share of series, and a later one given its inode
/// (the kernel gives freed inodes again; a cookie never): the later one has a share of its
/// own, so its first drops are a series, never `other`. Keyed by inode, the two were one
/// tenant and the later one's drops went to `other`.
#[test]
fn a_namespace_given_an_ended_ones_inode_has_a_share_of_its_own() {
    let max = 200;
    let inode = 4026532100;
    let with_cookie = |mut d: DropCount, cookie: u64| {
        d.key.attr.netns_cookie = Some(cookie);
        d
    };
    let mut drops: Vec<DropCount> = (0..=255u8)
        .map(|p| {
            let d = attributed(
                "IP_NOPROTO",
                inode,
                Some("sh[1000]"),
                (2, "d0"),
                &p.to_string(),
                1,
            );
            with_cookie(d, 41)
        })
        .collect();
    let mut selection = Selection::new(max);
    scrape(
        &mut selection,
        &attributed_snapshot(drops.clone(), &[]),
        max,
    );
    drops.push(with_cookie(
        attributed("NO_SOCKET", inode, Some("sh[2000]"), (1, "lo"), "udp", 10),
        77,
    ));
    let snap = attributed_snapshot(drops, &[]);
    let body = scrape(&mut selection, &snap, max);
    let d = samples(&body, "dropscope_drops_total");
    assert!(
        d.iter().any(|(l, v)| l.starts_with(r#"reason="NO_SOCKET""#)
            && l.contains(r#"netns_name="sh[2000]""#)
            && *v == 10.0),
        "the later namespace's drops went to other: {d:?}"
    );
    assert_eq!(
        family_sum(&body, "dropscope_drops_total"),
        snap.total as f64
    );
}

/// A reading of `n` unprivileged namespaces with three devices each, and a named namespace's
/// device that a drop names.
fn crowded_reading(n: u64, victim: u64) -> Vec<(u64, String, u64)> {
    let mut counters: Vec<(u64, String, u64)> = (0..n)
        .flat_map(|i| {
            (0..3).flat_map(move |d| {
                [
                    (4026532000 + i, format!("Dev:d{d}:RxPackets"), 10),
                    (4026532000 + i, format!("Link:d{d}:rx_dropped"), 1),
                ]
            })
        })
        .collect();
    counters.push((victim, "Dev:veth0:RxPackets".into(), 1000));
    counters.push((victim, "Link:veth0:rx_dropped".into(), 5));
    counters
}

#[test]
fn every_family_keeps_its_series_and_sums_the_rest_into_other() {
    let max = 40;
    let victim = 4026539999;
    let mut selection = Selection::new(max);
    let named = || attributed("NO_SOCKET", victim, Some("blue"), (3, "veth0"), "udp", 2);
    let snap = |r: &[(u64, String, u64)]| {
        let c: Vec<(u64, &str, u64)> = r.iter().map(|(n, c, v)| (*n, c.as_str(), *v)).collect();
        attributed_snapshot(vec![named()], &c)
    };
    let reading = crowded_reading(40, victim);
    let first = scrape(&mut selection, &snap(&reading), max);
    // Forty namespaces more, with lower inodes: no series exported before goes.
    let mut more = reading.clone();
    more.extend(
        crowded_reading(40, victim)
            .into_iter()
            .filter(|(ns, _, _)| *ns != victim)
            .map(|(ns, c, v)| (ns - 1000, c, v)),
    );
    let second = scrape(&mut selection, &snap(&more), max);
    for (family, prefix, victim_series) in [
        (
            "dropscope_packets_total",
            "Dev:",
            r#"netns_name="blue",device="veth0",direction="rx""#,
        ),
        (
            "dropscope_layer_drops_total",
            "Link:",
            r#"layer="nic",counter="Link:veth0:rx_dropped",netns_name="blue",device="veth0""#,
        ),
    ] {
        for (body, reading) in [(&first, &reading), (&second, &more)] {
            let s = samples(body, family);
            assert!(
                s.iter().any(|(l, _)| *l == victim_series),
                "{family}: the named namespace's series is hidden:\n{body}"
            );
            assert!(s.len() <= max + 1, "{family}: {} series", s.len());
            let total: u64 = (reading.iter())
                .filter(|(_, c, _)| c.starts_with(prefix))
                .map(|(_, _, v)| v)
                .sum();
            assert_eq!(family_sum(body, family), total as f64, "{family}:\n{body}");
        }
        let (before, after) = (samples(&first, family), samples(&second, family));
        for (labels, v) in &before {
            assert!(
                after.iter().any(|(l, w)| l == labels && w >= v),
                "{family}: {labels} went or went down"
            );
        }
    }
    assert!(samples(&second, "dropscope_netns_packets_total").len() <= max + 1);
}

#[test]
fn labels_follow_the_names_as_they_resolve_without_a_second_slot() {
    let ns = 4026532100;
    let early = attributed_snapshot(
        vec![attributed("NO_SOCKET", ns, None, (2, "if2"), "udp", 5)],
        &[(ns, "Dev:if2:RxPackets", 50)],
    );
    let named = attributed_snapshot(
        vec![attributed(
            "NO_SOCKET",
            ns,
            Some("blue"),
            (2, "ux3v1"),
            "udp",
            6,
        )],
        &[(ns, "Dev:if2:RxPackets", 60)],
    );
    let drop_series = |body: &str| {
        let d = samples(body, "dropscope_drops_total");
        d.into_iter()
            .map(|(l, v)| (l.to_string(), v))
            .collect::<Vec<_>>()
    };
    // The namespace may hold one series (a twentieth of 4, rounded up) before and after it is
    // named: the series re-labelled keeps its slot, and nothing goes to other.
    let mut selection = Selection::new(4);
    let body = scrape(&mut selection, &early, 4);
    assert_eq!(
        drop_series(&body),
        [(
            r#"reason="NO_SOCKET",location="ip_local_deliver_finish+0x81",device="if2",protocol="udp""#
                .to_string(),
            5.0
        )],
        "{body}"
    );
    assert_eq!(
        samples(&body, "dropscope_packets_total"),
        [(
            r#"netns_name="4026532100",device="if2",direction="rx""#,
            50.0
        )],
        "{body}"
    );
    let body = scrape(&mut selection, &named, 4);
    assert_eq!(
        drop_series(&body),
        [(
            r#"reason="NO_SOCKET",location="ip_local_deliver_finish+0x81",netns_name="blue",device="ux3v1",protocol="udp""#
                .to_string(),
            6.0
        )],
        "{body}"
    );
    assert_eq!(samples(&body, "dropscope_series_other"), [("", 0.0)]);
    // The packet families follow the namespace's name too, in the same slots.
    assert_eq!(
        samples(&body, "dropscope_packets_total"),
        [(r#"netns_name="blue",device="if2",direction="rx""#, 60.0)],
        "{body}"
    );
    assert_eq!(
        samples(&body, "dropscope_netns_packets_total"),
        [(r#"netns_name="blue""#, 0.0)],
        "{body}"
    );
}

#[tokio::test]
async fn a_name_resolved_while_the_counts_stand_still_is_published() {
    let (snapshots, rx) = tokio::sync::mpsc::channel(4);
    let feed = crate::source::Feed {
        info: info(),
        snapshots: rx,
        replay: None,
        kernel_pace: None,
    };
    let (tx, mut latest) = watch::channel(None);
    let publisher = tokio::spawn(super::publish(feed, tx, 10));
    let ns = 4026532100;
    let drop = |name: Option<&str>| attributed("NO_SOCKET", ns, name, (1, "lo"), "udp", 3);
    for name in [None, Some("blue")] {
        snapshots
            .send(attributed_snapshot(vec![drop(name)], &[]))
            .await
            .expect("send");
        latest.changed().await.expect("published");
    }
    let body = latest
        .borrow()
        .clone()
        .expect("an exposition")
        .body(Format::Text);
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains(r#"netns_name="blue",device="lo""#),
        "the name found after the counts is not shown:\n{body}"
    );
    publisher.abort();
}

/// Who dropped a series is its `culprit` label: one more label, never one more series.
#[test]
fn a_series_names_its_culprit_in_a_label() {
    use crate::culprit::ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict};
    let mut key = DropKey {
        reason: Reason {
            code: 12,
            name: "NETFILTER_DROP".into(),
        },
        location: "nft_do_chain+0x3e8".into(),
        attr: Default::default(),
    };
    key.attr.netns = Some(HOST);
    let id = ChainId {
        family: 2,
        table: "filter".into(),
        chain: "IN\"PUT\n".into(),
    };
    let mut r = crate::model::KernelReading {
        initial_netns: HOST,
        attributed: true,
        ..Default::default()
    };
    r.rules.insert(
        HOST,
        RulesWindow {
            chains: vec![Chain {
                id: id.clone(),
                hook: Some("input".into()),
                priority: None,
                policy_drop: false,
            }],
            rules: vec![Grown {
                rule: Rule {
                    id,
                    handle: 4,
                    position: 2,
                    verdict: Verdict::Drop,
                    packets: Some(9),
                    comment: None,
                    exprs: String::new(),
                },
                grew: Some(9),
            }],
            whole: true,
            ..Default::default()
        },
    );
    let s = Snapshot {
        total: 9,
        drops: vec![DropCount { key, count: 9 }],
        kernel: Some(Arc::new(r)),
        ..Default::default()
    };
    let body = scrape(&mut Selection::new(10), &s, 10);
    let series = samples(&body, "dropscope_drops_total");
    assert_eq!(series.len(), 1, "{body}");
    // A quote of a chain's name is escaped by the exposition, a line feed made `?`.
    assert!(
        series[0].0.contains(r#"culprit="rule filter IN\"PUT? #2""#),
        "{body}"
    );
    // A snapshot of rows without culprits has no culprit label at all.
    let plain = render(&exposition(1000), Format::Text);
    assert!(!plain.contains("culprit=\""), "{plain}");
}

/// The keys of one drop site's sockets are one series (no label shows the socket) and take one
/// place of --max-series: 3 sockets and another site under a cap of 2 are both exported.
#[test]
fn a_drop_sites_sockets_are_one_series_of_one_place() {
    use crate::vocab::socket::{About, Socket, Via};
    let sock = |inode: u32, count: u64| {
        let mut d = attributed(
            "SOCKET_RCVBUFF",
            HOST,
            Some("host"),
            (1, "lo"),
            "udp",
            count,
        );
        d.key.attr.socket = Some(Arc::new(Socket {
            via: Via::Receiving,
            inode,
            about: About::unknown("not looked up yet"),
        }));
        d
    };
    let drops = vec![
        sock(11, 5),
        sock(12, 6),
        sock(13, 7),
        attributed("NO_SOCKET", HOST, Some("host"), (1, "lo"), "udp", 1),
    ];
    let snap = attributed_snapshot(drops, &[]);
    let sel = super::series::Selection::new(2).select(&snap);
    let counts: Vec<u64> = sel.drops.series.iter().map(|s| s.count).collect();
    assert_eq!(counts, [18, 1], "{:?}", sel.drops);
    assert_eq!(sel.drops.other, None);
}

/// A drop site's sockets are one series, and its `culprit` label does not follow whichever
/// socket's key came last: the holders' culprit where every key names the same, `several
/// sockets` where they differ, in any order of the keys.
#[test]
fn a_series_of_several_sockets_has_one_culprit_label_whatever_the_order() {
    use crate::{
        fixtures::{found, with_socket},
        vocab::socket::Via,
    };
    let sock = |comm: &str, count: u64| {
        let mut d = attributed(
            "SOCKET_RCVBUFF",
            HOST,
            Some("host"),
            (1, "lo"),
            "udp",
            count,
        );
        d.key = with_socket(d.key, Via::Receiving, found(comm, "127.0.0.1:5353", 2304));
        if let Some(s) = &mut d.key.attr.socket {
            Arc::make_mut(s).inode = count as u32;
        }
        d
    };
    let culprit = |drops: Vec<DropCount>| {
        let snap = attributed_snapshot(drops, &[]);
        let sel = super::series::Selection::new(10).select(&snap);
        assert_eq!(sel.drops.series.len(), 1, "{:?}", sel.drops);
        sel.drops.series[0]
            .labels
            .last()
            .expect("a culprit")
            .to_string()
    };
    let one = culprit(vec![sock("dns", 5), sock("dns", 6)]);
    assert_eq!(one, "dns[812] udp 127.0.0.1:5353 rcvbuf 2304");
    for drops in [
        vec![sock("dns", 5), sock("cache", 6)],
        vec![sock("cache", 6), sock("dns", 5)],
        vec![sock("cache", 600), sock("dns", 5)],
    ] {
        assert_eq!(culprit(drops), super::series::SEVERAL_SOCKETS);
    }
}
