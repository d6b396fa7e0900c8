//! The recording size at a steady flood of real drops (`dropscope record`), next to what a
//! per-event capture of the same drops takes (`perf record -e skb:kfree_skb`).
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    Outcome,
    child::Proc,
    flood::{Sender, Target},
    guards::run_quiet,
    interrupt,
};

/// How long `dropscope record` records.
pub const RECORD_SECS: u64 = 10;

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
    // The recording is written to a temporary file and appears under its name when it ends:
    // its rate is its whole size over the time it covers.
    let t = Instant::now();
    let out = proc.finish(None, Duration::from_secs(RECORD_SECS + 20))?;
    if !out.status.success() {
        bail!(
            "dropscope record failed ({}): {}",
            out.status,
            out.stderr.trim()
        );
    }
    let steady = size(&file)? as f64 / t.elapsed().as_secs_f64().max(1.0);
    let perf = perf_record_rate(scratch).ok();
    Ok((file.clone(), steady, size(&file)?, perf))
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
