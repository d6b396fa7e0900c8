//! The collector's cost as its work grows: `dropscope report --no-stacks` started with N synthetic
//! keys (the hidden `--bench-keys N`: each counted once on every CPU) while the single-key flood
//! runs, so every poll reads (N + 1) keys × CPUs counters. Measures CPU time (all threads, from
//! schedstat) and syscalls per poll, and projects the read to a larger host.
use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    child::Proc,
    flood::{Sender, Target},
    interrupt, procfs,
    syscount::{self, Method},
};

/// Live keys measured (plus the flood's own key).
pub const KEYS: [u32; 3] = [10, 1_000, 10_000];
/// The base interval given to dropscope: while drops arrive it polls every half interval.
const INTERVAL_MS: u64 = 200;
/// Time for the first reads (the one batch syscall for the keys, symbolization) to pass.
const WARMUP: Duration = Duration::from_secs(2);
/// dropscope's default base interval: under drops, one poll per half of it.
pub const DEFAULT_POLL_MS: f64 = 500.0;
/// The host the read is projected to.
pub const BIG_HOST_CPUS: usize = 128;

/// One measured key count.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// Synthetic keys (the flood adds one real key).
    pub keys: u32,
    /// Counters read per poll: (keys + 1) × CPUs.
    pub reads: u64,
    /// Polls in the window (nominal: one per half interval, since drops never stop).
    pub polls: f64,
    /// dropscope's CPU time per poll, all threads.
    pub cpu_us: f64,
    /// Syscalls per poll (all, and bpf()), if they could be counted.
    pub syscalls: Option<(f64, f64)>,
}

/// Measures every key count of [`KEYS`] for `window` each.
pub fn measure(
    dropscope: &Path,
    target: &Target,
    method: Option<Method>,
    window: Duration,
    ncpus: usize,
) -> anyhow::Result<Vec<Row>> {
    KEYS.iter()
        .map(|&keys| {
            eprintln!(
                "bench: collector with {keys} live keys: measuring {window:?} under the flood"
            );
            one(dropscope, target, method, window, keys, ncpus)
                .with_context(|| format!("collector cost with {keys} keys"))
        })
        .collect()
}

fn one(
    dropscope: &Path,
    target: &Target,
    method: Option<Method>,
    window: Duration,
    keys: u32,
    ncpus: usize,
) -> anyhow::Result<Row> {
    let interval = format!("{INTERVAL_MS}ms");
    let keys_s = keys.to_string();
    let mut proc = Proc::spawn(
        Command::new(dropscope).args([
            "report",
            "--format",
            "json",
            "--no-stacks",
            "--interval",
            &interval,
            "--bench-keys",
            &keys_s,
        ]),
        "dropscope report --bench-keys",
    )?;
    proc.wait_line(
        |l| l.starts_with("dropscope: counting"),
        Duration::from_secs(30),
    )?;
    let sender = Sender::start(target, None)?;
    let measured = interrupt::sleep(WARMUP).and_then(|()| {
        let calls = method
            .map(|m| syscount::start(m, proc.pid(), window))
            .transpose()?;
        let cpu0 = procfs::cpu_ns(proc.pid())?;
        let counts = match calls {
            Some(c) => Some(c.finish()?),
            None => {
                interrupt::sleep(window)?;
                None
            }
        };
        let cpu1 = procfs::cpu_ns(proc.pid())?;
        Ok((cpu1.saturating_sub(cpu0), counts))
    });
    sender.stop()?;
    let (cpu_ns, counts) = measured?;
    let out = proc.finish(Some(libc::SIGINT), Duration::from_secs(15))?;
    if !out.status.success() {
        bail!("dropscope failed ({}): {}", out.status, out.stderr.trim());
    }
    check_keys(&out.stdout, keys, ncpus)?;
    let polls = window.as_secs_f64() * 1e3 / (INTERVAL_MS as f64 / 2.0);
    Ok(Row {
        keys,
        reads: (u64::from(keys) + 1) * ncpus as u64,
        polls,
        cpu_us: cpu_ns as f64 / 1e3 / polls,
        syscalls: counts.map(|c| (c.all as f64 / polls, c.bpf as f64 / polls)),
    })
}

/// The synthetic keys were really there: their counts (one per CPU each) are in the total.
fn check_keys(json: &str, keys: u32, ncpus: usize) -> anyhow::Result<()> {
    let v: Value = serde_json::from_str(json)
        .with_context(|| format!("parsing dropscope's JSON: {json:.200}"))?;
    let total = v
        .get("total")
        .and_then(Value::as_u64)
        .context("JSON without total")?;
    let synthetic = u64::from(keys) * ncpus as u64;
    if total < synthetic {
        bail!(
            "total {total} is below the {synthetic} synthetic counts: --bench-keys had no effect"
        );
    }
    Ok(())
}

/// A straight line `cpu_us = fixed + per_read × reads`, fitted by least squares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// µs per poll that does not depend on the counters read.
    pub fixed_us: f64,
    /// µs per counter read.
    pub per_read_us: f64,
}

impl Fit {
    /// Fits the rows; `None` with fewer than two distinct read counts.
    pub fn of(rows: &[Row]) -> Option<Self> {
        let n = rows.len() as f64;
        let mx = rows.iter().map(|r| r.reads as f64).sum::<f64>() / n;
        let my = rows.iter().map(|r| r.cpu_us).sum::<f64>() / n;
        let sxx: f64 = rows.iter().map(|r| (r.reads as f64 - mx).powi(2)).sum();
        let sxy: f64 = rows
            .iter()
            .map(|r| (r.reads as f64 - mx) * (r.cpu_us - my))
            .sum();
        if rows.len() < 2 || sxx <= 0.0 {
            return None;
        }
        let per_read_us = (sxy / sxx).max(0.0);
        Some(Self {
            fixed_us: (my - per_read_us * mx).max(0.0),
            per_read_us,
        })
    }

    /// Projected µs per poll with `keys` keys on `cpus` CPUs.
    pub fn poll_us(&self, keys: u64, cpus: usize) -> f64 {
        self.fixed_us + self.per_read_us * (keys * cpus as u64) as f64
    }

    /// Keys at which one poll on `cpus` CPUs would take `budget_us`.
    pub fn keys_for(&self, budget_us: f64, cpus: usize) -> Option<f64> {
        (self.per_read_us > 0.0)
            .then(|| ((budget_us - self.fixed_us) / (self.per_read_us * cpus as f64)).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(reads: u64, cpu_us: f64) -> Row {
        Row {
            keys: 0,
            reads,
            polls: 1.0,
            cpu_us,
            syscalls: None,
        }
    }

    #[test]
    fn fits_a_line_and_projects_it() {
        let rows = [row(22, 102.2), row(2_002, 300.2), row(20_002, 2_100.2)];
        let fit = Fit::of(&rows).expect("a fit");
        assert!((fit.per_read_us - 0.1).abs() < 1e-9, "{fit:?}");
        assert!((fit.fixed_us - 100.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.poll_us(10_000, 128) - 128_100.0).abs() < 1e-3);
        let keys = fit.keys_for(500_000.0, 128).expect("keys");
        assert!((keys - 39_054.687_5).abs() < 1e-3, "{keys}");
    }

    #[test]
    fn no_fit_from_one_point() {
        assert_eq!(Fit::of(&[row(22, 5.0)]), None);
        assert_eq!(Fit::of(&[row(22, 5.0), row(22, 6.0)]), None);
    }
}
