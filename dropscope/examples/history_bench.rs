//! Measures a history's size per day (full resolution and coarse, at 10, 1,000 and 10,000 keys
//! all changing every second), and, on a generated seven-day history, the time to open it,
//! to count a minute of it (a seek) and to count all seven days.
//!
//! `cargo run --release -p dropscope --example history_bench [KEYS_FOR_THE_WEEK]`
use std::time::{Duration, Instant};

use dropscope::{
    history::{
        catalog::Catalog,
        compact::{COARSE_STEP, compact},
        dir,
        range::{Window, count},
        synthetic::{session, write_session},
    },
    record::synthetic,
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

fn main() -> anyhow::Result<()> {
    let week_keys: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(100);
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
    // A week of `week_keys` keys: hourly segments, the first six days coarse.
    let tmp = tempfile::tempdir()?;
    let info = session("bench", T0);
    let hour = synthetic::snapshots(week_keys, week_keys, 1_000_000, HOUR);
    let mut seq = 1;
    // Each hour adds the first hour's counts again.
    let carried = hour[HOUR - 1].clone();
    for h in 0..24 * 7 {
        // Hour h continues the cumulative counts of the hours before it.
        let snaps: Vec<_> = hour
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.elapsed += Duration::from_secs(h as u64 * HOUR as u64);
                for (d, c) in s.drops.iter_mut().zip(&carried.drops) {
                    d.count += c.count * h as u64;
                }
                s.total += carried.total * h as u64;
                s
            })
            .collect();
        seq = write_session(tmp.path(), seq, &info, &snaps, HOUR)?;
        if h < 24 * 6 {
            let l = dir::list(tmp.path())?;
            let last = l
                .segments
                .last()
                .ok_or_else(|| anyhow::anyhow!("no segment"))?;
            compact(tmp.path(), last)?;
        }
    }
    let bytes: u64 = dir::list(tmp.path())?
        .segments
        .iter()
        .map(|s| s.bytes)
        .sum();
    let t = Instant::now();
    let cat = Catalog::open(tmp.path())?;
    let open = t.elapsed();
    let t = Instant::now();
    let minute = T0 + 3 * 86_400_000 + 7_200_000;
    let c = count(
        &cat,
        Window {
            from_ms: minute,
            to_ms: minute + 60_000,
        },
    )?;
    let seek = t.elapsed();
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
        c.snap.total > 0 && all.snap.total > c.snap.total,
        "empty counts"
    );
    println!(
        "a week of {week_keys} keys all changing every second ({} segments, {bytes} B): \
         open {open:?}, count one minute {seek:?}, count all 7 days {whole:?}",
        cat.pieces.len()
    );
    Ok(())
}
