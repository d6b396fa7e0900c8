//! The flamegraph render time (dropscope's `flame_bench` example) and the recording size at a
//! steady flood (`dropscope record`), next to a per-event capture of the same drops (`perf record`).
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    child::Proc,
    flood::{Sender, Target},
    guards::run_quiet,
    interrupt,
};

/// Distinct stacks in the flamegraph benchmark, and its runs.
pub const FLAME_STACKS: usize = 10_000;
const FLAME_RUNS: usize = 5;
/// How long `dropscope record` records.
pub const RECORD_SECS: u64 = 10;

/// A figure, or why there is none.
pub enum Outcome<T> {
    Measured(T),
    Skipped(String),
}

/// The flamegraph example's result.
pub struct Flame {
    pub median_ms: f64,
    /// Its summary line.
    pub line: String,
}

/// Whether dropscope has the flamegraph example.
fn has_flame_example(root: &Path) -> bool {
    root.join("dropscope/examples/flame_bench.rs").is_file()
}

/// Builds the example (with the rest of the release build, so that every figure of a run comes
/// from one build).
pub fn build_flame(root: &Path) -> anyhow::Result<()> {
    if !has_flame_example(root) {
        return Ok(());
    }
    crate::cargo(&[
        "build",
        "--release",
        "--package",
        "dropscope",
        "--example",
        "flame_bench",
    ])
}

/// Runs `flame_bench` if the example exists and was built.
pub fn flame(root: &Path, target_dir: &Path, build_error: Option<String>) -> Outcome<Flame> {
    if !has_flame_example(root) {
        return Outcome::Skipped("dropscope/examples/flame_bench.rs does not exist".into());
    }
    if let Some(e) = build_error {
        return Outcome::Skipped(format!("building flame_bench failed: {e}"));
    }
    let bin = target_dir.join("release/examples/flame_bench");
    if !bin.is_file() {
        return Outcome::Skipped(format!("{} is not built", bin.display()));
    }
    match run_flame(&bin) {
        Ok(f) => Outcome::Measured(f),
        Err(e) => Outcome::Skipped(format!("flame_bench failed: {e:#}")),
    }
}

fn run_flame(bin: &Path) -> anyhow::Result<Flame> {
    let out =
        run_quiet(Command::new(bin).args([FLAME_STACKS.to_string(), FLAME_RUNS.to_string()]))?;
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

/// The recording's figures.
pub struct Recording {
    /// Growth of the file per second once recording (header written).
    pub steady_bytes_per_sec: f64,
    pub file_bytes: u64,
    /// Distinct (reason, location) keys in the recording.
    pub keys: usize,
    pub flood_rate: f64,
    /// `perf record -e skb:kfree_skb` bytes per second for the same flood.
    pub perf_bytes_per_sec: Option<f64>,
}

/// Records a steady flood with `dropscope record`, if that command exists.
pub fn recording(
    dropscope: &Path,
    target: &Target,
    scratch: &Path,
) -> anyhow::Result<Outcome<Recording>> {
    let has_record = Command::new(dropscope)
        .args(["record", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_record {
        return Ok(Outcome::Skipped(
            "`dropscope record` does not exist yet".into(),
        ));
    }
    let sender = Sender::start(target, None)?;
    let measured =
        interrupt::sleep(Duration::from_secs(1)).and_then(|()| record_flood(dropscope, scratch));
    let sent = sender.stop()?;
    let (file, steady, file_bytes, perf) = measured?;
    Ok(Outcome::Measured(Recording {
        steady_bytes_per_sec: steady,
        file_bytes,
        keys: keys_in(dropscope, &file)?,
        flood_rate: sent.rate(),
        perf_bytes_per_sec: perf,
    }))
}

type Recorded = (std::path::PathBuf, f64, u64, Option<f64>);

fn record_flood(dropscope: &Path, scratch: &Path) -> anyhow::Result<Recorded> {
    let file = scratch.join("flood.dsrec");
    let duration = format!("{RECORD_SECS}s");
    let mut proc = Proc::spawn(
        Command::new(dropscope)
            .args(["record", "--duration", &duration, "-o"])
            .arg(&file),
        "dropscope record",
    )?;
    wait_for_file(&mut proc, &file)?;
    interrupt::sleep(Duration::from_secs(2))?;
    let (s1, t1) = (size(&file)?, Instant::now());
    interrupt::sleep(Duration::from_secs(RECORD_SECS - 5))?;
    let (s2, t2) = (size(&file)?, Instant::now());
    let out = proc.finish(None, Duration::from_secs(RECORD_SECS + 20))?;
    if !out.status.success() {
        bail!(
            "dropscope record failed ({}): {}",
            out.status,
            out.stderr.trim()
        );
    }
    let steady = s2.saturating_sub(s1) as f64 / t2.duration_since(t1).as_secs_f64();
    let perf = perf_record_rate(scratch).ok();
    Ok((file.clone(), steady, size(&file)?, perf))
}

fn wait_for_file(proc: &mut Proc, file: &Path) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    while !file.exists() {
        interrupt::sleep(Duration::from_millis(50))?;
        if proc.exited()? || Instant::now() >= until {
            let out = proc.finish(None, Duration::from_secs(1))?;
            bail!("dropscope record wrote no file: {}", out.stderr.trim());
        }
    }
    Ok(())
}

/// Bytes per second of a per-event capture of the drops (run while the flood goes on).
fn perf_record_rate(scratch: &Path) -> anyhow::Result<f64> {
    const SECS: u64 = 2;
    let data = scratch.join("perf.data");
    run_quiet(
        Command::new("perf")
            .args(["record", "-q", "-a", "-e", "skb:kfree_skb", "-o"])
            .arg(&data)
            .args(["--", "sleep", &SECS.to_string()]),
    )?;
    let bytes = size(&data)?;
    let _ = std::fs::remove_file(&data);
    Ok(bytes as f64 / SECS as f64)
}

fn size(file: &Path) -> anyhow::Result<u64> {
    Ok(std::fs::metadata(file)
        .with_context(|| format!("reading the size of {}", file.display()))?
        .len())
}

fn keys_in(dropscope: &Path, file: &Path) -> anyhow::Result<usize> {
    let out = run_quiet(
        Command::new(dropscope)
            .args(["report", "--format", "json", "--input"])
            .arg(file),
    )?;
    let v: Value = serde_json::from_str(&out).context("parsing the replayed report")?;
    Ok(v.get("drops").and_then(Value::as_array).map_or(0, Vec::len))
}
