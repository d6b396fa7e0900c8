//! Times `dropscope serve` on a synthetic snapshot of 10,000 (reason, location) keys, through
//! the real server on loopback with an HTTP client, beside the TUI's model work on the same
//! snapshots.
//!
//! `cargo run --release -p dropscope --example serve_bench [series] [rounds]` prints, per new
//! snapshot: the exporter's series selection, the first scrape (rendering included) and a
//! repeated scrape of the same snapshot (served from the rendered body), with the server
//! thread's CPU time per scrape; then the TUI's table update for the same snapshot. The last
//! line is the summary.
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    sync::{Arc, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use dropscope::{
    model::{
        SessionInfo,
        table::{SortKey, Tracker},
    },
    record::synthetic::snapshots,
    serve::{
        exposition::Exposition,
        http::{self, Published},
        series::Selection,
    },
};

/// What Prometheus 2.x sends.
const ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// CPU time of one thread, by its clock id.
fn thread_cpu(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; the clock id names a live thread.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The calling thread's CPU clock.
fn own_clock() -> libc::clockid_t {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self is the calling thread; the id is written into `clock`.
    unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    clock
}

/// One GET of /metrics on a kept-alive connection; the body's length.
fn scrape(conn: &mut BufReader<TcpStream>) -> anyhow::Result<usize> {
    conn.get_mut().write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: bench\r\nAccept: {ACCEPT}\r\n\r\n").as_bytes(),
    )?;
    let mut line = String::new();
    conn.read_line(&mut line)?;
    if !line.starts_with("HTTP/1.1 200") {
        bail!("unexpected status: {line}");
    }
    let mut length = None;
    loop {
        line.clear();
        conn.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = Some(value.trim().parse::<usize>()?);
        }
    }
    let length = length.context("no content-length")?;
    let mut body = vec![0; length];
    conn.read_exact(&mut body)?;
    Ok(length)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let rounds: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20)
        .max(1);
    // One more snapshot than rounds: the first warms up the server and the client.
    let snaps = snapshots(n, 100, 1000, rounds + 1);
    let info = SessionInfo {
        host: "bench".into(),
        kernel: "synthetic".into(),
        started_unix_ms: 0,
        probe: "none".into(),
    };

    let (tx, rx) = tokio::sync::watch::channel(None);
    let (clock_tx, clock_rx) = mpsc::channel();
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    listener.set_nonblocking(true)?;
    // The server runs as in `dropscope serve`: one current-thread runtime, on a thread of its own
    // here so that its CPU time can be read apart from the client's.
    std::thread::spawn(move || -> anyhow::Result<()> {
        clock_tx.send(own_clock())?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            // One keep-alive connection carries every scrape: no request cap here.
            let limits = dropscope::serve::connections::Limits {
                max_requests: u32::MAX,
                ..Default::default()
            };
            http::serve(listener, http::router(rx, None, &limits), limits, None).await;
            anyhow::Ok(())
        })
    });
    let server_clock = clock_rx.recv()?;
    let mut conn = BufReader::new(TcpStream::connect(("127.0.0.1", port))?);

    let mut selection = Selection::new(n);
    let mut tracker = Tracker::new();
    let (mut select, mut fresh, mut repeat, mut fresh_cpu, mut repeat_cpu, mut tui) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut size = 0;
    for (i, snap) in snaps.iter().enumerate() {
        let t = Instant::now();
        let selected = selection.select(snap);
        let series = selected.drops.series.len();
        tx.send_replace(Some(Arc::new(Published::new(Exposition::new(
            &info, snap, selected, n,
        )))));
        let select_took = t.elapsed();

        let (c0, t0) = (thread_cpu(server_clock), Instant::now());
        size = scrape(&mut conn)?;
        let (c1, t1) = (thread_cpu(server_clock), Instant::now());
        scrape(&mut conn)?;
        let (c2, t2) = (thread_cpu(server_clock), Instant::now());

        let t = Instant::now();
        tracker.push(snap.clone());
        let rows = tracker.rows(SortKey::Rate, "").len();
        let tui_took = t.elapsed();
        if i == 0 {
            continue;
        }
        println!(
            "round {i}: {series} series, select {:.2} ms; scrape new {:.2} ms (server CPU {:.2} \
             ms), repeated {:.2} ms (CPU {:.2} ms); TUI table of {rows} rows {:.2} ms",
            ms(select_took),
            ms(t1 - t0),
            ms(c1 - c0),
            ms(t2 - t1),
            ms(c2 - c1),
            ms(tui_took)
        );
        select.push(select_took);
        fresh.push(t1 - t0);
        repeat.push(t2 - t1);
        fresh_cpu.push(c1 - c0);
        repeat_cpu.push(c2 - c1);
        tui.push(tui_took);
    }
    let worst = fresh.iter().max().copied().unwrap_or_default();
    println!(
        "{n} series, OpenMetrics body {} KiB: scrape of a new snapshot median {:.1} ms (max \
         {:.1}), server CPU {:.1} ms; repeated scrape median {:.1} ms, CPU {:.1} ms; selection \
         per snapshot {:.1} ms; TUI table per snapshot {:.1} ms ({rounds} rounds)",
        size / 1024,
        ms(median(fresh)),
        ms(worst),
        ms(median(fresh_cpu)),
        ms(median(repeat)),
        ms(median(repeat_cpu)),
        ms(median(select)),
        ms(median(tui)),
    );
    Ok(())
}
