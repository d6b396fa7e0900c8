//! `dropscope serve`'s own cost, to report beside the live TUI's: the live exporter's CPU,
//! syscalls and bpf() calls with no drops and under the flood while scraped once a second (with
//! each scrape's latency), and scrape latency and CPU with 10,000 series (the `serve_bench`
//! example: a synthetic snapshot rendered through the real server, read by an HTTP client).
use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{
    Outcome,
    child::Proc,
    flood::{Sender, Target},
    guards::run_quiet,
    interrupt, procfs,
    syscount::{self, Method},
    tui::{TuiCost, Window},
};

/// The example that renders many series through the real server.
pub const EXAMPLE: &str = "serve_bench";
/// Series in the example's snapshot.
pub const SERIES: usize = 10_000;
/// New snapshots (each scraped twice) in the example.
const ROUNDS: usize = 20;
/// Startup work (BTF, symbolizer, first polls) to let pass before measuring.
const STARTUP: Duration = Duration::from_secs(3);
/// Scraping before the first window, and the wait after it: the warm-up's closed connection
/// frees a packet (a drop), and the first drop's one-time work (the symbolizer reading the
/// kernel's symbols) is not what an idle `serve` costs.
const WARM: Duration = Duration::from_secs(3);
/// Time for the poller to adapt to the flood before measuring.
const ADAPT: Duration = Duration::from_secs(2);
/// How often the scraper asks, as a Prometheus with a 1 s scrape interval would.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// Latency of the scrapes of one window.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    pub scrapes: usize,
    pub median_ms: f64,
    pub max_ms: f64,
    /// Bytes of the last body.
    pub body_bytes: usize,
}

/// The live exporter's cost, and the example's figures.
pub struct ServeCost {
    pub idle: Window,
    pub idle_scrapes: Latency,
    pub flood: Window,
    pub flood_scrapes: Latency,
    /// The example's summary line for 10,000 series.
    pub series: Outcome<String>,
}

/// Builds the example (release, like the rest of the bench's build); the error text if that
/// failed.
pub fn build_example(root: &Path) -> Option<String> {
    if !root.join("dropscope/examples/serve_bench.rs").is_file() {
        return Some("dropscope/examples/serve_bench.rs does not exist".into());
    }
    crate::cargo(&[
        "build",
        "--release",
        "--package",
        "dropscope",
        "--example",
        EXAMPLE,
    ])
    .err()
    .map(|e| format!("{e:#}"))
}

/// Runs the built example for [`SERIES`] series; its summary line.
pub fn series_example(target_dir: &Path, build_error: Option<&String>) -> Outcome<String> {
    if let Some(e) = build_error {
        return Outcome::Skipped(format!("building {EXAMPLE} failed: {e}"));
    }
    let bin = target_dir.join("release/examples").join(EXAMPLE);
    if !bin.is_file() {
        return Outcome::Skipped(format!("{} is not built", bin.display()));
    }
    match run_quiet(Command::new(&bin).args([SERIES.to_string(), ROUNDS.to_string()])) {
        Ok(out) => match out.lines().last() {
            Some(line) if line.contains("series") => Outcome::Measured(line.to_string()),
            _ => Outcome::Skipped(format!("{EXAMPLE} printed no summary: {out}")),
        },
        Err(e) => Outcome::Skipped(format!("{EXAMPLE} failed: {e:#}")),
    }
}

/// Runs `dropscope serve` on a free loopback port and measures it, scraped once a second,
/// with no drops and then under the flood; `series` is the example's outcome, carried along.
pub fn measure(
    dropscope: &Path,
    target: &Target,
    method: Method,
    window: Duration,
    series: Outcome<String>,
) -> anyhow::Result<ServeCost> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free loopback port")?
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut proc = Proc::spawn(
        Command::new(dropscope).args(["serve", "--listen", &listen]),
        "dropscope serve",
    )?;
    proc.wait_line(|l| l.contains("serving metrics"), Duration::from_secs(30))?;
    let pid = proc.pid();
    interrupt::sleep(STARTUP)?;
    // The warm-up's connection ends with it (a drop); the symbolizer's start follows within
    // a poll, before the window.
    let warm = Scraper::start(port);
    let warmed = interrupt::sleep(WARM);
    warm.stop()?;
    warmed?;
    interrupt::sleep(WARM)?;
    eprintln!("bench: serve (pid {pid}): measuring {window:?} with no drops, scraped every 1 s");
    let (idle, idle_scrapes) = measure_window(pid, port, method, window, None)?;
    eprintln!("bench: serve: measuring {window:?} under the flood, scraped every 1 s");
    let sender = Sender::start(target, None)?;
    let flood = interrupt::sleep(ADAPT)
        .and_then(|()| measure_window(pid, port, method, window, Some(&sender)));
    sender.stop()?;
    let (flood, flood_scrapes) = flood?;
    let out = proc.finish(Some(libc::SIGTERM), Duration::from_secs(10))?;
    if !out.status.success() {
        bail!(
            "dropscope serve ended with {}: {}",
            out.status,
            out.stderr.trim()
        );
    }
    Ok(ServeCost {
        idle,
        idle_scrapes,
        flood,
        flood_scrapes,
        series,
    })
}

fn measure_window(
    pid: u32,
    port: u16,
    method: Method,
    window: Duration,
    sender: Option<&Sender>,
) -> anyhow::Result<(Window, Latency)> {
    let calls = syscount::start(method, pid, window)?;
    let u0 = procfs::Usage::read(pid)?;
    let sent0 = sender.map_or(0, Sender::sent_so_far);
    let scraper = Scraper::start(port);
    let counts = calls.finish()?;
    let u1 = procfs::Usage::read(pid)?;
    let sent = sender.map_or(0, |s| s.sent_so_far() - sent0);
    let latency = scraper.stop()?;
    let win = Window {
        secs: u1.at.duration_since(u0.at).as_secs_f64(),
        count_secs: window.as_secs_f64(),
        syscalls: counts.all,
        bpf_syscalls: counts.bpf,
        ctx_switches: u1.ctx_switches.saturating_sub(u0.ctx_switches),
        cpu_ticks: u1.cpu_ticks.saturating_sub(u0.cpu_ticks),
        drops: None,
        sent,
    };
    Ok((win, latency))
}

/// Scrapes /metrics every [`SCRAPE_EVERY`] on a thread until stopped.
struct Scraper {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<anyhow::Result<Latency>>,
}

impl Scraper {
    fn start(port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut times = Vec::new();
            let mut body_bytes = 0;
            // One connection kept open, as Prometheus keeps its connections (a new one per
            // scrape costs serve about ten more syscalls, and its close is a drop).
            let mut conn: Option<TcpStream> = None;
            while !flag.load(Ordering::Relaxed) {
                let start = Instant::now();
                body_bytes = match conn.as_mut().map(scrape_on) {
                    Some(Ok(n)) => n,
                    // Closed by serve since (or never opened): a new connection.
                    _ => {
                        let mut c = TcpStream::connect(("127.0.0.1", port))
                            .context("connecting to serve")?;
                        c.set_read_timeout(Some(Duration::from_secs(10)))?;
                        let n = scrape_on(&mut c)?;
                        conn = Some(c);
                        n
                    }
                };
                times.push(start.elapsed().as_secs_f64() * 1e3);
                let next = start + SCRAPE_EVERY;
                while Instant::now() < next && !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            times.sort_by(f64::total_cmp);
            Ok(Latency {
                scrapes: times.len(),
                median_ms: times.get(times.len() / 2).copied().unwrap_or_default(),
                max_ms: times.last().copied().unwrap_or_default(),
                body_bytes,
            })
        });
        Self { stop, handle }
    }

    fn stop(self) -> anyhow::Result<Latency> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("the scraper thread panicked"))?
    }
}

/// One scrape as Prometheus asks for it; the body's length.
/// One scrape on a kept HTTP/1.1 connection; the body's length.
fn scrape_on(s: &mut TcpStream) -> anyhow::Result<usize> {
    s.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: bench\r\nAccept: application/openmetrics-text;\
          version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
    )?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        anyhow::ensure!(s.read(&mut byte)? == 1, "the connection closed");
        head.push(byte[0]);
        anyhow::ensure!(head.len() < 65536, "a header block without an end");
    }
    let head = String::from_utf8_lossy(&head);
    if !head.starts_with("HTTP/1.1 200") {
        bail!("/metrics answered {}", head.trim());
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .context("a response without content-length")?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(len)
}

/// The serve figures beside the TUI's, as lines for the bench's report.
pub fn render(serve: &ServeCost, tui: Option<&TuiCost>) -> String {
    let mut out = String::from(
        "dropscope's own cost: the live TUI beside `dropscope serve` scraped every 1 s\n\
         phase    consumer   syscalls/s  bpf() calls  ctx switches/s    CPU%  scrape median/max\n",
    );
    let row = |phase: &str, who: &str, w: &Window, lat: Option<&Latency>| {
        let scrape = lat.map_or("-".to_string(), |l| {
            format!(
                "{:.2}/{:.2} ms ({} scrapes, {} B)",
                l.median_ms, l.max_ms, l.scrapes, l.body_bytes
            )
        });
        format!(
            "{phase:<8} {who:<10} {:>10.1} {:>12} {:>15.1} {:>6.2}%  {scrape}\n",
            w.syscalls_per_sec(),
            w.bpf_syscalls,
            w.per_sec(w.ctx_switches),
            w.cpu_percent()
        )
    };
    for (phase, t, s, lat) in [
        (
            "idle",
            tui.map(|t| &t.idle),
            &serve.idle,
            &serve.idle_scrapes,
        ),
        (
            "flood",
            tui.map(|t| &t.flood),
            &serve.flood,
            &serve.flood_scrapes,
        ),
    ] {
        if let Some(t) = t {
            out.push_str(&row(phase, "TUI", t, None));
        }
        out.push_str(&row(phase, "serve", s, Some(lat)));
    }
    match &serve.series {
        Outcome::Measured(line) => {
            out.push_str(&format!("{SERIES} series ({EXAMPLE}): {line}\n"));
        }
        Outcome::Skipped(why) => out.push_str(&format!("{SERIES} series: SKIPPED: {why}\n")),
    }
    out
}
