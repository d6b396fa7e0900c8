//! Figures from dropscope's own example programs, run as they are (xtask does not link
//! dropscope, so it builds without the eBPF toolchain): `flame_bench` (time to render an SVG of
//! 10,000 distinct stacks) and `record_bench` (bytes per frame of synthetic one-hour recordings,
//! and the time to seek to the middle of one) and `history_bench` (a history's bytes per day,
//! full and coarse, and the time to open, seek and count a generated week).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context as _;

use super::{Outcome, guards::run_quiet};

/// The examples the bench runs.
pub const EXAMPLES: [&str; 3] = ["flame_bench", "record_bench", "history_bench"];
/// Distinct stacks in the flamegraph benchmark, and its runs.
pub const FLAME_STACKS: usize = 10_000;
const FLAME_RUNS: usize = 5;

fn source(root: &Path, name: &str) -> PathBuf {
    root.join("dropscope/examples").join(format!("{name}.rs"))
}

/// Builds `name` if dropscope has it (with the rest of the release build, so that every figure
/// of a run comes from one build); the error text if the build failed.
pub fn build(root: &Path, name: &str) -> Option<String> {
    if !source(root, name).is_file() {
        return None;
    }
    crate::cargo(&[
        "build",
        "--release",
        "--package",
        "dropscope",
        "--example",
        name,
    ])
    .err()
    .map(|e| format!("{e:#}"))
}

/// Runs the built example `name` with `args`; its stdout, or why it could not run.
fn run(
    root: &Path,
    target_dir: &Path,
    name: &str,
    build_error: Option<&String>,
    args: &[String],
) -> Result<String, String> {
    if !source(root, name).is_file() {
        return Err(format!("dropscope/examples/{name}.rs does not exist yet"));
    }
    if let Some(e) = build_error {
        return Err(format!("building {name} failed: {e}"));
    }
    let bin = target_dir.join("release/examples").join(name);
    if !bin.is_file() {
        return Err(format!("{} is not built", bin.display()));
    }
    run_quiet(Command::new(&bin).args(args)).map_err(|e| format!("{name} failed: {e:#}"))
}

/// Runs `history_bench`: its figures as it prints them, or why they are missing.
pub fn history(root: &Path, target_dir: &Path, build_error: Option<&String>) -> String {
    match run(root, target_dir, "history_bench", build_error, &[]) {
        Ok(out) => format!("\nHistory (dropscope example history_bench)\n{out}"),
        Err(why) => format!("\nHistory: skipped: {why}\n"),
    }
}

/// The flamegraph example's result.
pub struct Flame {
    pub median_ms: f64,
    /// Its summary line.
    pub line: String,
}

/// Runs `flame_bench` for 10,000 stacks.
pub fn flame(root: &Path, target_dir: &Path, build_error: Option<&String>) -> Outcome<Flame> {
    let args = [FLAME_STACKS.to_string(), FLAME_RUNS.to_string()];
    let parsed = run(root, target_dir, "flame_bench", build_error, &args)
        .and_then(|out| parse_flame(&out).map_err(|e| format!("{e:#}")));
    match parsed {
        Ok(f) => Outcome::Measured(f),
        Err(why) => Outcome::Skipped(why),
    }
}

fn parse_flame(out: &str) -> anyhow::Result<Flame> {
    let line = out
        .lines()
        .find(|l| l.contains("median"))
        .with_context(|| format!("no median in flame_bench's output: {out}"))?
        .trim()
        .to_string();
    let median_ms = line
        .split("median")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("parsing {line:?}"))?;
    Ok(Flame { median_ms, line })
}

/// One row of `record_bench`'s size table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameSize {
    pub keys: u64,
    pub changing: u64,
    /// Drops per second per key.
    pub rate: u64,
    /// Bytes per 1-s frame, i.e. bytes per second at 1 frame/s.
    pub bytes: f64,
}

/// `record_bench`'s figures.
pub struct RecordFigures {
    pub sizes: Vec<FrameSize>,
    /// Median time to seek to the middle of a one-hour recording.
    pub seek: Duration,
    /// Its summary line.
    pub line: String,
}

/// Runs `record_bench`.
pub fn record(
    root: &Path,
    target_dir: &Path,
    build_error: Option<&String>,
) -> Outcome<RecordFigures> {
    let parsed = run(root, target_dir, "record_bench", build_error, &[])
        .and_then(|out| parse_record(&out).map_err(|e| format!("{e:#}")));
    match parsed {
        Ok(r) => Outcome::Measured(r),
        Err(why) => Outcome::Skipped(why),
    }
}

fn parse_record(out: &str) -> anyhow::Result<RecordFigures> {
    let sizes: Vec<FrameSize> = out.lines().filter_map(parse_size_row).collect();
    let line = out
        .lines()
        .find(|l| l.contains("seek to the middle"))
        .with_context(|| format!("no seek time in record_bench's output: {out}"))?
        .trim()
        .to_string();
    let seek = line
        .rsplit("seek to the middle")
        .next()
        .and_then(|v| parse_debug_duration(v.trim()))
        .with_context(|| format!("parsing the seek time in {line:?}"))?;
    Ok(RecordFigures { sizes, seek, line })
}

/// `  100 keys,   100 changing,   1000000 drops/s per key:     452 B/frame`.
fn parse_size_row(line: &str) -> Option<FrameSize> {
    let (head, bytes) = line.split_once(':')?;
    let bytes = bytes.trim().strip_suffix("B/frame")?.trim().parse().ok()?;
    let nums: Vec<u64> = head
        .split(',')
        .filter_map(|part| part.split_whitespace().next()?.parse().ok())
        .collect();
    match nums[..] {
        [keys, changing, rate] => Some(FrameSize {
            keys,
            changing,
            rate,
            bytes,
        }),
        _ => None,
    }
}

/// A `Duration`'s `{:?}` text (`52.338µs`, `1.75ms`, `2s`, `900ns`).
fn parse_debug_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "ns" => v / 1e9,
        "µs" | "us" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_record_bench() {
        let out = "bytes per 1 s frame (one hour, names and keyframes included):\n\
                   \x20   100 keys,   100 changing,   1000000 drops/s per key:     452 B/frame\n\
                   one hour at 1 frame/s, 100 keys all changing by ~1M/s: 1627888 B; median of 5: \
                   open 1.755548ms, seek to the middle 52.338µs\n";
        let r = parse_record(out).ok();
        let sizes = r.as_ref().map(|r| r.sizes.clone());
        assert_eq!(
            sizes,
            Some(vec![FrameSize {
                keys: 100,
                changing: 100,
                rate: 1_000_000,
                bytes: 452.0
            }])
        );
        assert_eq!(r.map(|r| r.seek), Some(Duration::from_nanos(52_338)));
    }

    #[test]
    fn parses_flame_bench() {
        let out = "run 1: 50.0 ms\n10000 stacks, 247224 frames, SVG 1343 KiB: median 49.7 ms over 5 runs\n";
        assert_eq!(parse_flame(out).ok().map(|f| f.median_ms), Some(49.7));
    }
}
