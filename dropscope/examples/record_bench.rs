//! Measures recording size per frame and the time to open and seek a one-hour recording.
//!
//! `cargo run --release -p dropscope --example record_bench`
use std::time::{Duration, Instant};

use dropscope::{
    model::SessionInfo,
    record::{Recorder, Recording, encode, synthetic},
};

fn main() -> anyhow::Result<()> {
    let info = SessionInfo {
        host: "bench".into(),
        kernel: "bench".into(),
        started_unix_ms: 1_750_000_000_000,
        probe: "tp_btf/kfree_skb".into(),
    };
    println!("bytes per 1 s frame (one hour, names and keyframes included):");
    for (keys, changing) in [(10, 10), (100, 10), (100, 100), (1000, 1000)] {
        for rate in [100, 1_000_000] {
            let snaps = synthetic::snapshots(keys, changing, rate, 3600);
            let bytes = encode(&info, &snaps)?.len() as f64 / 3600.0;
            println!(
                "  {keys:>5} keys, {changing:>5} changing, {rate:>9} drops/s per key: {bytes:>7.0} B/frame"
            );
        }
    }
    let snaps = synthetic::snapshots(100, 100, 1_000_000, 3600);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("hour.dsrec");
    let mut rec = Recorder::create(&path, &info, true)?;
    for s in &snaps {
        rec.write(s)?;
    }
    rec.finish()?;
    let size = std::fs::metadata(&path)?.len();
    let mut opens = Vec::new();
    let mut seeks = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        let r = Recording::open(&path)?;
        opens.push(t0.elapsed());
        let t1 = Instant::now();
        let mid = r.snapshot_at(Duration::from_millis(1_799_500))?;
        seeks.push(t1.elapsed());
        anyhow::ensure!(mid == snaps[1799], "seek landed on the wrong snapshot");
    }
    opens.sort();
    seeks.sort();
    println!(
        "one hour at 1 frame/s, 100 keys all changing by ~1M/s: {size} B; median of 5: open {:?}, seek to the middle {:?}",
        opens[2], seeks[2]
    );
    Ok(())
}
