//! Times folding and rendering a flamegraph SVG of 10,000 distinct synthetic stacks.
//!
//! `cargo run --release -p dropscope --example flame_bench [stacks] [runs]` prints each run
//! and the median. Symbolization is not included: the stacks arrive already symbolized.
use std::time::{Duration, Instant};

use dropscope::{
    flamegraph::{GraphMeta, synthetic_stacks, write_svg},
    model::snapshot::SessionInfo,
};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let runs: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5)
        .max(1);
    let stacks = synthetic_stacks(n);
    let frames: usize = stacks.iter().map(|s| s.frames.len()).sum();
    let info = SessionInfo {
        host: "bench".into(),
        kernel: "synthetic".into(),
        started_unix_ms: 0,
        probe: "none".into(),
    };
    let meta = GraphMeta {
        info: &info,
        window: (Duration::ZERO, Duration::from_secs(60)),
        filter: None,
    };
    let mut times = Vec::with_capacity(runs);
    let mut size = 0;
    for run in 1..=runs {
        let mut svg = Vec::new();
        let start = Instant::now();
        write_svg(&stacks, &meta, &mut svg)?;
        let took = start.elapsed();
        size = svg.len();
        println!("run {run}: {:.1} ms", took.as_secs_f64() * 1e3);
        times.push(took);
    }
    times.sort();
    println!(
        "{n} stacks, {frames} frames, SVG {} KiB: median {:.1} ms over {runs} runs",
        size / 1024,
        times[times.len() / 2].as_secs_f64() * 1e3
    );
    Ok(())
}
