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
pub const KEYS: [u32; 4] = [10, 1_000, 10_000, 100_000];
/// The base interval given to dropscope: while drops arrive it polls every half interval.
const INTERVAL_MS: u64 = 200;
/// Time for the first reads (the one batch syscall for the keys, symbolization) to pass.
const WARMUP: Duration = Duration::from_secs(2);
/// dropscope's default base interval: under drops, one poll per half of it.
pub const DEFAULT_POLL_MS: f64 = 500.0;
/// The host the read is projected to.
pub const BIG_HOST_CPUS: usize = 128;
/// The key map's capacity given to dropscope (its default): the stride of the per-CPU arrays.
const MAX_KEYS: usize = 10_240;

/// The key map's capacity for `keys` live keys: the default where they fit, else the next power
/// of two (100,000 keys need `--max-keys` raised).
fn max_keys_for(keys: u32) -> usize {
    let needed = keys as usize + 1;
    if needed <= MAX_KEYS {
        MAX_KEYS
    } else {
        needed.next_power_of_two()
    }
}

/// The measured rows and their projection to [`BIG_HOST_CPUS`].
#[derive(Clone, Debug)]
pub struct Scaling {
    pub rows: Vec<Row>,
    /// `None` when the rows give no fit.
    pub projection: Option<Projection>,
}

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

/// Measures every key count of [`KEYS`] for `window` each, then projects them.
pub fn measure(
    dropscope: &Path,
    target: &Target,
    method: Option<Method>,
    window: Duration,
    ncpus: usize,
) -> anyhow::Result<Scaling> {
    let rows = KEYS
        .iter()
        .map(|&keys| {
            eprintln!(
                "bench: collector with {keys} live keys: measuring {window:?} under the flood"
            );
            one(dropscope, target, method, window, keys, ncpus)
                .with_context(|| format!("collector cost with {keys} keys"))
        })
        .collect::<anyhow::Result<Vec<Row>>>()?;
    let projection = Fit::of(&rows).map(|fit| {
        let keys = KEYS[KEYS.len() - 1] as usize;
        let stride = max_keys_for(keys as u32);
        Projection {
            fit,
            read_here_us: read_pattern_us(keys, ncpus, stride),
            read_big_us: read_pattern_us(keys, BIG_HOST_CPUS, stride),
        }
    });
    Ok(Scaling { rows, projection })
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
    let max_keys = max_keys_for(keys).to_string();
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
            "--max-keys",
            &max_keys,
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

/// A straight line `cpu_us = fixed + per_key × keys`, fitted by least squares over the live
/// keys (the flood's one included) on this host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// µs per poll that does not depend on the keys.
    pub fixed_us: f64,
    /// µs per live key and poll on this host (reading its counters on every CPU, merging it).
    pub per_key_us: f64,
}

impl Fit {
    /// Fits the rows; `None` with fewer than two distinct key counts.
    pub fn of(rows: &[Row]) -> Option<Self> {
        let x = |r: &Row| f64::from(r.keys) + 1.0;
        let n = rows.len() as f64;
        let mx = rows.iter().map(x).sum::<f64>() / n;
        let my = rows.iter().map(|r| r.cpu_us).sum::<f64>() / n;
        let sxx: f64 = rows.iter().map(|r| (x(r) - mx).powi(2)).sum();
        let sxy: f64 = rows.iter().map(|r| (x(r) - mx) * (r.cpu_us - my)).sum();
        if rows.len() < 2 || sxx <= 0.0 {
            return None;
        }
        let per_key_us = (sxy / sxx).max(0.0);
        Some(Self {
            fixed_us: (my - per_key_us * mx).max(0.0),
            per_key_us,
        })
    }
}

/// The collector projected to a host with more CPUs: this host's measured cost per key, plus
/// the extra counter reads, timed here with the count reader's own access pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Projection {
    pub fit: Fit,
    /// µs to read one key's counters on this host's CPUs, and on the big host's.
    pub read_here_us: f64,
    pub read_big_us: f64,
}

impl Projection {
    /// µs per poll with `keys` live keys on the big host.
    pub fn poll_us(&self, keys: f64) -> f64 {
        self.fit.fixed_us + keys * self.per_key_big_us()
    }

    /// Live keys at which a poll on the big host takes `budget_us`.
    pub fn keys_for(&self, budget_us: f64) -> f64 {
        ((budget_us - self.fit.fixed_us) / self.per_key_big_us().max(1e-9)).max(0.0)
    }

    fn per_key_big_us(&self) -> f64 {
        self.fit.per_key_us + (self.read_big_us - self.read_here_us).max(0.0)
    }
}

/// µs per key to read its counters on `cpus` CPUs, as the count reader does: one mmap'd array of
/// `max_keys` slots per CPU, each key summed over the CPUs (a stride of `max_keys` × 8 bytes).
/// Timed on an ordinary array of the same layout; the median of a few passes over `keys` keys.
pub fn read_pattern_us(keys: usize, cpus: usize, max_keys: usize) -> f64 {
    let counters = vec![1u64; cpus * max_keys];
    let mut passes: Vec<f64> = (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            let mut sum = 0u64;
            for slot in 0..keys.min(max_keys) {
                for cpu in 0..cpus {
                    sum += std::hint::black_box(counters[cpu * max_keys + slot]);
                }
            }
            std::hint::black_box(sum);
            start.elapsed().as_secs_f64() * 1e6 / keys.max(1) as f64
        })
        .collect();
    passes.sort_by(f64::total_cmp);
    passes[passes.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(keys: u32, cpu_us: f64) -> Row {
        Row {
            keys,
            reads: 0,
            polls: 1.0,
            cpu_us,
            syscalls: None,
        }
    }

    #[test]
    fn fits_a_line_and_projects_it() {
        let rows = [row(10, 101.1), row(1_000, 200.1), row(10_000, 1_100.1)];
        let fit = Fit::of(&rows).expect("a fit");
        assert!((fit.per_key_us - 0.1).abs() < 1e-9, "{fit:?}");
        assert!((fit.fixed_us - 100.0).abs() < 1e-6, "{fit:?}");
        let p = Projection {
            fit,
            read_here_us: 0.01,
            read_big_us: 0.51,
        };
        assert!((p.poll_us(10_000.0) - 6_100.0).abs() < 1e-6);
        assert!((p.keys_for(500_000.0) - 833_166.666).abs() < 1e-2);
    }

    #[test]
    fn no_fit_from_one_key_count() {
        assert_eq!(Fit::of(&[row(10, 5.0)]), None);
        assert_eq!(Fit::of(&[row(10, 5.0), row(10, 6.0)]), None);
    }

    #[test]
    fn times_the_read_pattern() {
        let us = read_pattern_us(100, 4, 128);
        assert!(us.is_finite() && us > 0.0, "{us}");
    }
}
