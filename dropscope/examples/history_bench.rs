//! Measures a history's size per day (full resolution and coarse, at 10, 1,000 and 10,000 keys
//! all changing every second), and, on a generated seven-day history (1,000 keys by default),
//! the time to open it, to count a minute of it (a seek) and to count all seven days, with its
//! segments' indexes and without, and the reader's peak memory.
//!
//! `cargo run --release -p dropscope --example history_bench [KEYS_FOR_THE_WEEK]`; with
//! `--generate DIR [KEYS]`, only writes the week into `DIR` (for timing the commands on it);
//! with `--jump DIR`, times what `replay DIR` does on such a week at its start (the last hour
//! copied into a recording) and at a `t` (the hour around a time of the full day, and of a
//! coarse day).
use std::{
    path::Path,
    time::{Duration, Instant},
};

use dropscope::{
    history::{
        catalog::Catalog,
        compact::{COARSE_STEP, compact},
        dir, index,
        range::{Window, count},
        synthetic::{session, write_session},
    },
    model::Snapshot,
    record::{Recorder, synthetic},
};

const HOUR: usize = 3600;
const T0: u64 = 1_790_000_000_000;

/// Bytes of a segment of `frames` snapshots at 1/s, full and coarse, scaled to a day.
fn day_sizes(keys: usize, frames: usize) -> anyhow::Result<(u64, u64)> {
    let tmp = tempfile::tempdir()?;
    let snaps = synthetic::snapshots(keys, keys, 1_000_000, frames);
    write_session(tmp.path(), 1, &session("bench", T0), &snaps, frames)?;
    let listing = dir::list(tmp.path())?;
    let (full, coarse) = compact(tmp.path(), &listing.segments[0])?;
    let per_day = 86_400 / frames as u64;
    Ok((full * per_day, coarse * per_day))
}

/// Interleaved rounds of reading the generated week (with its indexes, then without).
const ROUNDS: usize = 5;
/// Drops a key gains each second in the generated week.
const RATE: u64 = 1_000_000;

/// A week of `n` keys all changing every second, as `serve --history` leaves it with the
/// default policy: hourly segments, the last day at full resolution and the six before it
/// coarse (one snapshot a minute, as `compact` keeps them), one session a day (restarted
/// 10 minutes before midnight: a gap). Every closed segment indexed, the newest not (it is
/// the one being written). Returns the wall-clock end.
fn generate_week(dir: &Path, n: usize) -> anyhow::Result<u64> {
    let keys = synthetic::keys(n);
    let mut seq = 1;
    let mut end = T0;
    for day in 0..7u64 {
        let started = T0 + day * 86_400_000;
        let info = session("bench", started);
        let full = day == 6;
        let mut counts = vec![0u64; n];
        let seconds = 86_400 - 600;
        let mut s = 1;
        while s <= seconds {
            let hour_end = (s + HOUR as u64 - 1).min(seconds);
            let opened = started + s * 1000;
            let name = if full {
                dir::segment_name(seq, opened)
            } else {
                dir::coarse_name(seq, opened)
            };
            let path = dir.join(&name);
            let file = dir::create_segment(dir, &name)?;
            let mut rec = Recorder::to_stream(Box::new(std::io::BufWriter::new(file)), &info)?;
            let first = s;
            while s <= hour_end {
                for (k, c) in counts.iter_mut().enumerate() {
                    *c += RATE + (s * 7919 + k as u64) % (RATE / 10);
                }
                if full || (s - first).is_multiple_of(60) || s == hour_end {
                    let drops = synthetic::drops(&keys, &counts);
                    rec.write(&Snapshot {
                        elapsed: Duration::from_secs(s),
                        unix_ms: started + s * 1000,
                        total: counts.iter().sum(),
                        drops,
                        ..Default::default()
                    })?;
                }
                s += 1;
            }
            end = started + hour_end * 1000;
            let newest = day == 6 && s > seconds;
            if newest {
                // Being written: no end marker, no index.
                drop(rec);
            } else {
                rec.finish()?;
                index::index_segment(&path)?;
            }
            seq += 1;
        }
    }
    Ok(end)
}

/// What one reading of the week measured.
struct Read {
    open: Duration,
    seek_full: Duration,
    seek_coarse: Duration,
    all: Duration,
    max_rss_kib: u64,
}

/// The process's peak resident memory since it started (`VmHWM`, which an exec resets), KiB.
fn max_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Opens the history in `dir` and counts a minute of its full-resolution day, a minute of a
/// coarse day and all of it (run in a process of its own, for its peak memory).
fn read_week(dir: &Path, end: u64) -> anyhow::Result<()> {
    let t = Instant::now();
    let cat = Catalog::open(dir)?;
    let open = t.elapsed();
    let minute = |at: u64| Window {
        from_ms: at,
        to_ms: at + 60_000,
    };
    let t = Instant::now();
    let full = count(&cat, minute(end - 5 * 3_600_000 - 1_234_567))?;
    let seek_full = t.elapsed();
    let t = Instant::now();
    let coarse = count(&cat, minute(T0 + 3 * 86_400_000 + 7_654_321))?;
    let seek_coarse = t.elapsed();
    let t = Instant::now();
    let all = count(
        &cat,
        Window {
            from_ms: 0,
            to_ms: u64::MAX,
        },
    )?;
    let whole = t.elapsed();
    anyhow::ensure!(
        full.snap.total > 0 && coarse.snap.total > 0 && all.snap.total > full.snap.total,
        "empty counts"
    );
    anyhow::ensure!(all.sessions == 7, "{} sessions", all.sessions);
    println!(
        "read {} {} {} {} {}",
        open.as_micros(),
        seek_full.as_micros(),
        seek_coarse.as_micros(),
        whole.as_micros(),
        max_rss_kib()
    );
    Ok(())
}

/// Runs [`read_week`] in a child process.
fn read_in_child(dir: &Path, end: u64) -> anyhow::Result<Read> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("--read")
        .arg(dir)
        .arg(end.to_string())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "reading the week failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let v: Vec<u64> = text
        .trim()
        .strip_prefix("read ")
        .ok_or_else(|| anyhow::anyhow!("unexpected output {text:?}"))?
        .split(' ')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(v.len() == 5, "unexpected output {text:?}");
    let us = Duration::from_micros;
    Ok(Read {
        open: us(v[0]),
        seek_full: us(v[1]),
        seek_coarse: us(v[2]),
        all: us(v[3]),
        max_rss_kib: v[4],
    })
}

/// `replay DIR`'s start and jumps on the week in `dir`: medians of [`ROUNDS`] runs of each.
fn time_jumps(dir: &Path) -> anyhow::Result<()> {
    use dropscope::history::replay::{DEFAULT_LENGTH_MS, open, open_around};
    let Some((lo, hi)) = Catalog::open(dir)?.range() else {
        anyhow::bail!("an empty history");
    };
    let timed = |f: &dyn Fn() -> anyhow::Result<usize>| -> anyhow::Result<(Duration, usize)> {
        let mut times = Vec::new();
        let mut frames = 0;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            frames = f()?;
            times.push(t.elapsed());
        }
        Ok((median(times), frames))
    };
    let window = dropscope::cli::InputWindow {
        input: Some(dir.to_path_buf()),
        from: None,
        to: None,
        since: None,
    };
    let start = timed(&|| Ok(open(dir, &window)?.recording.len()))?;
    let full = timed(&|| {
        Ok(open_around(dir, hi - 5 * 3_600_000, DEFAULT_LENGTH_MS)?
            .recording
            .len())
    })?;
    let coarse = timed(&|| {
        Ok(open_around(dir, lo + 3 * 86_400_000, DEFAULT_LENGTH_MS)?
            .recording
            .len())
    })?;
    println!("replay of the week, medians of {ROUNDS} runs:");
    for (what, (t, frames)) in [
        ("start (the last hour)", start),
        ("t to the full day", full),
        ("t to a coarse day", coarse),
    ] {
        println!("  {what:<22} {t:>9.1?}  ({frames} snapshots copied)");
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--read") {
        let (Some(dir), Some(end)) = (args.get(1), args.get(2)) else {
            anyhow::bail!("--read DIR END");
        };
        return read_week(Path::new(dir), end.parse()?);
    }
    if args.first().map(String::as_str) == Some("--jump") {
        let Some(dir) = args.get(1) else {
            anyhow::bail!("--jump DIR");
        };
        return time_jumps(Path::new(dir));
    }
    // A week kept for timing the commands themselves (`dropscope report --input DIR`).
    if args.first().map(String::as_str) == Some("--generate") {
        let Some(dir) = args.get(1) else {
            anyhow::bail!("--generate DIR [KEYS]");
        };
        let keys = args.get(2).map(|a| a.parse()).transpose()?.unwrap_or(1_000);
        let dir = Path::new(dir);
        dir::create_dir(dir)?;
        let t = Instant::now();
        generate_week(dir, keys)?;
        let bytes: u64 = dir::list(dir)?.segments.iter().map(|s| s.bytes).sum();
        println!(
            "{keys} keys: {bytes} B ({:.0} MiB) in {}, generated in {:.1?}",
            bytes as f64 / (1 << 20) as f64,
            dir.display(),
            t.elapsed()
        );
        return Ok(());
    }
    let week_keys: usize = args
        .first()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000);
    println!(
        "history bytes per day, every key changing by ~1M drops every second (one hour \
         measured, 10,000 keys: 4 minutes; coarse: one snapshot per {} s):",
        COARSE_STEP.as_secs()
    );
    println!("   keys    full B/day  coarse B/day  week (1 day full, 6 coarse)");
    for (keys, frames) in [(10, HOUR), (1_000, HOUR), (10_000, 240)] {
        let (full_day, coarse_day) = day_sizes(keys, frames)?;
        println!(
            "  {keys:>5}  {full_day:>12}  {coarse_day:>12}  {:>12}",
            full_day + 6 * coarse_day
        );
    }
    let tmp = tempfile::tempdir()?;
    let indexed = tmp.path().join("indexed");
    let bare = tmp.path().join("without-indexes");
    dir::create_dir(&indexed)?;
    dir::create_dir(&bare)?;
    let t = Instant::now();
    let end = generate_week(&indexed, week_keys)?;
    let generated = t.elapsed();
    let listing = dir::list(&indexed)?;
    let bytes: u64 = listing.segments.iter().map(|s| s.bytes).sum();
    for s in &listing.segments {
        let name = s
            .path
            .file_name()
            .ok_or_else(|| anyhow::anyhow!("a name"))?;
        std::fs::hard_link(&s.path, bare.join(name))?;
    }
    println!(
        "a generated week: {week_keys} keys all changing every second, 7 sessions (a restart \
         a day), {} segments, the last day full, six coarse: {bytes} B ({:.0} MiB), generated \
         in {generated:.1?}",
        listing.segments.len(),
        bytes as f64 / (1 << 20) as f64
    );
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..ROUNDS {
        with.push(read_in_child(&indexed, end)?);
        without.push(read_in_child(&bare, end)?);
    }
    println!("reading it, medians of {ROUNDS} interleaved runs (each in a process of its own):");
    println!(
        "                     open   a minute (full day)  a minute (coarse day)  all 7 days  \
         peak memory"
    );
    for (what, runs) in [("indexed", &with), ("without indexes", &without)] {
        let m = |f: fn(&Read) -> Duration| median(runs.iter().map(f).collect());
        let rss = runs.iter().map(|r| r.max_rss_kib).max().unwrap_or(0);
        println!(
            "  {what:<16} {:>9.1?}  {:>19.1?}  {:>21.1?}  {:>10.1?}  {:>8} KiB",
            m(|r| r.open),
            m(|r| r.seek_full),
            m(|r| r.seek_coarse),
            m(|r| r.all),
            rss
        );
    }
    Ok(())
}
