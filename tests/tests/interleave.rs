//! Counts stay exact *and fresh* while drops of two keys interleave on one CPU: a recording
//! made during the flood, and a live report's intermediate reports, count in every window what
//! was sent in it, and the totals are exact per key. Needs root.
use std::{
    process::Command,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use dropscope_tests::{Counting, Netns, count, dropscope_bin, root_test};

const UDP: (&str, &str) = ("NO_SOCKET", "__udp4_lib_rcv+");
const RAW: (&str, &str) = ("IP_NOPROTO", "");
/// Seconds of interleaved flood per run length.
const FLOOD: u64 = 8;
/// Windows are 2 s: four polls at the half-second poll interval of a flood, so that where a
/// window's ends fall between polls moves its count by far less than the tolerance.
const WINDOW: f64 = 2.0;

/// What the generator had sent, by wall-clock time.
struct Sent {
    /// (unix ms, udp, raw), cumulative, every 100 ms.
    at: Vec<(u64, u64, u64)>,
    udp: u64,
    raw: u64,
}

impl Sent {
    fn parse(out: &str) -> Self {
        let mut at = Vec::new();
        let (mut udp, mut raw) = (0, 0);
        for line in out.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["at", ms, u, r] => at.push((num(ms), num(u), num(r))),
                ["total", u, r] => (udp, raw) = (num(u), num(r)),
                _ => panic!("unexpected generator line {line:?}"),
            }
        }
        assert!(udp > 0 && raw > 0 && at.len() > 10, "{out}");
        Self { at, udp, raw }
    }

    /// Cumulative (udp, raw) sent by `unix_ms` (the last line at or before it).
    fn by(&self, unix_ms: u64) -> (u64, u64) {
        self.at
            .iter()
            .take_while(|(t, _, _)| *t <= unix_ms)
            .last()
            .map_or((0, 0), |&(_, u, r)| (u, r))
    }

    fn start_ms(&self) -> u64 {
        self.at[0].0
    }
}

fn num(s: &str) -> u64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn within(what: &str, got: u64, sent: u64) {
    let (lo, hi) = (sent as f64 * 0.8, sent as f64 * 1.2);
    assert!(
        sent > 0 && (got as f64) >= lo && (got as f64) <= hi,
        "{what}: counted {got}, but {sent} were sent in that window (±20% allowed)"
    );
}

fn report_window(file: &std::path::Path, from: f64, to: f64) -> serde_json::Value {
    dropscope_tests::json_output(
        Command::new(dropscope_bin())
            .args(["report", "--format", "json", "--input"])
            .arg(file)
            .args([
                "--from",
                &format!("{from:.3}s"),
                "--to",
                &format!("{to:.3}s"),
            ]),
    )
}

#[test]
fn interleaved_runs_are_counted_exactly_and_freshly_in_every_window() {
    let _serial = root_test();
    for run in [1u64, 2, 4, 32] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("mix.dsrec");
        let ns = Netns::new("mix");
        // The recorder polls every 100 ms while drops arrive (a 200 ms base interval): a
        // window's ends are its snapshots, at most one poll before the times asked for, so at
        // the default 500 ms either end of a 2-s window could be a quarter of it off.
        let rec = Counting::start(&[
            "record",
            "--interval",
            "200ms",
            "-o",
            file.to_str().expect("utf-8"),
        ]);
        // Session times are measured from here (the recorder has just attached); an error in
        // this estimate shifts both ends of every window alike.
        let rec_start = unix_ms();
        let live = Counting::start(&["report", "--format", "json", "--every", "2s"]);
        let live_start = unix_ms();
        let sent = Sent::parse(&ns.traffic(&["mix", &run.to_string(), &FLOOD.to_string()]));
        std::thread::sleep(Duration::from_millis(300));
        rec.interrupt();
        let lines = live.interrupt();

        // Totals: exact per key, in the recording and in the live report's last line.
        let reports: Vec<serde_json::Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON report per line"))
            .collect();
        let last = reports.last().expect("a final report");
        let whole = report_window(&file, 0.0, 1e6);
        for (what, r) in [("live", last), ("recording", &whole)] {
            assert_eq!(count(r, UDP.0, UDP.1), sent.udp, "{what}, runs of {run}");
            assert_eq!(count(r, RAW.0, RAW.1), sent.raw, "{what}, runs of {run}");
        }

        // Every 2-s window inside the flood (its first and last second left out: the flood
        // starts and stops there) counts what was sent in it.
        let flood_from = (sent.start_ms() - rec_start) as f64 / 1000.0 + 1.0;
        let flood_to = flood_from + FLOOD as f64 - 2.0;
        let mut from = flood_from;
        while from + WINDOW <= flood_to + 1e-9 {
            let to = from + WINDOW;
            let r = report_window(&file, from, to);
            let at = |t: f64| sent.by(rec_start + (t * 1000.0) as u64);
            let (u0, r0) = at(from);
            let (u1, r1) = at(to);
            let what = format!("recording, runs of {run}, window {from:.1}-{to:.1}s");
            within(&format!("{what}, UDP"), count(&r, UDP.0, UDP.1), u1 - u0);
            within(&format!("{what}, raw"), count(&r, RAW.0, RAW.1), r1 - r0);
            from = to;
        }

        // The live report's intermediate reports advance with the flood: between two of them
        // inside the flood, each key grew by what was sent meanwhile.
        let inside: Vec<&serde_json::Value> = reports[..reports.len() - 1]
            .iter()
            .filter(|r| {
                let t = live_start + (r["seconds"].as_f64().expect("seconds") * 1000.0) as u64;
                t >= sent.start_ms() + 1000 && t + 1000 <= sent.at.last().expect("lines").0
            })
            .collect();
        assert!(
            inside.len() >= 2,
            "too few intermediate reports inside the flood: {lines}"
        );
        for pair in inside.windows(2) {
            let t = |r: &serde_json::Value| {
                live_start + (r["seconds"].as_f64().expect("seconds") * 1000.0) as u64
            };
            let (u0, r0) = sent.by(t(pair[0]));
            let (u1, r1) = sent.by(t(pair[1]));
            let what = format!("live report, runs of {run}, at {}", pair[1]["seconds"]);
            within(
                &format!("{what}, UDP"),
                count(pair[1], UDP.0, UDP.1) - count(pair[0], UDP.0, UDP.1),
                u1 - u0,
            );
            within(
                &format!("{what}, raw"),
                count(pair[1], RAW.0, RAW.1) - count(pair[0], RAW.0, RAW.1),
                r1 - r0,
            );
        }
    }
}

/// Seconds of the flood read from another CPU, unless `DROPSCOPE_TESTS_FLOOD_SECONDS` says
/// otherwise (vmtest floods its arm64 guests longer).
fn flood_seconds() -> u64 {
    std::env::var("DROPSCOPE_TESTS_FLOOD_SECONDS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("DROPSCOPE_TESTS_FLOOD_SECONDS: a number of seconds")
        })
        .unwrap_or(FLOOD)
}

/// `args` run pinned to `cpu` with taskset where there are two CPUs or more, else as they are.
fn pinned<'a>(cpus: usize, cpu: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = match cpus {
        0 | 1 => Vec::new(),
        _ => vec!["taskset", "-c", cpu],
    };
    all.extend_from_slice(args);
    all
}

/// Runs of one datagram to a closed port and one raw packet of an unused protocol, two keys
/// interleaved on one CPU, while `report --every 1s` reads them from the other CPU (pinned
/// with taskset where there are two, so that the reads cross CPUs as the counting protocol's
/// weakly ordered case needs; on one CPU the same runs unpinned). Every report keeps keyed +
/// overflow = total (a MISMATCH, a settled read disagreeing twice at the same totals, would
/// show the kernel's total instead) and no total goes back. The last report counts exactly
/// what was sent, unless a slow machine's loopback backlog overflowed (`CPU_BACKLOG`, which
/// also takes ICMP errors the UDP drops send back): then no sum of sends pins the counts, and
/// each key is checked to be at most what was sent of it.
#[test]
fn an_interleaved_flood_read_live_from_another_cpu_keeps_every_report_whole() {
    let _serial = root_test();
    let seconds = flood_seconds();
    let ns = Netns::new("flood");
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let dropscope = dropscope_bin();
    let traffic = dropscope_tests::traffic_bin();
    let (dropscope, traffic) = (
        dropscope.to_str().expect("utf-8 path"),
        traffic.to_str().expect("utf-8 path"),
    );
    let secs = seconds.to_string();
    let report = [
        dropscope,
        "report",
        "--format",
        "json",
        "--no-stacks",
        "--netns",
        &ns.name,
        "--every",
        "1s",
    ];
    let reader = pinned(cpus, "0", &report);
    let mut live = Counting::try_start(
        std::path::Path::new(reader[0]),
        &reader[1..],
        dropscope_tests::wait::LIMIT,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    live.read_stdout();
    let sent = ns.exec(&pinned(cpus, "1", &[traffic, "mix", "1", &secs]));
    let sent = Sent::parse(String::from_utf8_lossy(&sent.stdout).trim());
    let out = live
        .try_interrupt(dropscope_tests::wait::LIMIT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let reports: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON report per line"))
        .collect();
    // At least one report read while the flood ran (one a second for 8 s or more), and the
    // final one.
    assert!(
        reports.len() >= 2,
        "{} report(s) in a {seconds}-s flood",
        reports.len()
    );
    let mut last_total = 0;
    for (i, r) in reports.iter().enumerate() {
        let (keyed, overflow, total) = dropscope_tests::keyed_overflow_total(r);
        assert_eq!(
            keyed + overflow,
            total,
            "report {i} of {}: MISMATCH: {r:#}",
            reports.len()
        );
        assert!(
            total >= last_total,
            "report {i}: the total went back: {r:#}"
        );
        last_total = total;
    }
    let last = reports.last().expect("a final report");
    let (udp, raw) = (count(last, UDP.0, UDP.1), count(last, RAW.0, RAW.1));
    match count(last, "CPU_BACKLOG", "") {
        0 => assert_eq!(
            (udp, raw),
            (sent.udp, sent.raw),
            "counted (NO_SOCKET, IP_NOPROTO), sent (UDP, raw): {last:#}"
        ),
        backlog => assert!(
            udp <= sent.udp && raw <= sent.raw && udp + raw + backlog >= sent.udp.min(sent.raw),
            "counted NO_SOCKET {udp} IP_NOPROTO {raw} CPU_BACKLOG {backlog}, sent {} UDP and {} \
             raw: {last:#}",
            sent.udp,
            sent.raw
        ),
    }
}
