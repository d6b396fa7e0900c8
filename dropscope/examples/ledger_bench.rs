//! Measures the drop ledger (and the unseen drops) of a window of many keys and many grown
//! layer counters, and writes that window as a recording for `report --input`.
//!
//! `cargo run --release -p dropscope --no-default-features --example ledger_bench -- KEYS
//! COUNTERS [OUT.dsrec]`
use std::time::Instant;

use dropscope::{
    ledger,
    model::SessionInfo,
    record::{encode, synthetic},
};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut number = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let (keys, counters) = (number(100_000), number(40_000));
    let out = std::env::args().nth(3);
    let snaps = synthetic::ledger_heavy(keys, counters);
    if let Some(out) = out {
        let info = SessionInfo {
            host: "bench".into(),
            kernel: "bench".into(),
            started_unix_ms: 1_750_000_000_000,
            probe: "tp_btf/kfree_skb".into(),
        };
        let bytes = encode(&info, &snaps)?;
        std::fs::write(&out, &bytes)?;
        println!("{out}: {} bytes", bytes.len());
    }
    let snap = &snaps[0];
    let reading = snap.kernel.as_ref().expect("a reading");
    let t0 = Instant::now();
    let view = ledger::view(reading, snap, None);
    let took = t0.elapsed();
    let ledger = view.ledger.as_ref().expect("a ledger");
    println!(
        "{keys} keys, {counters} counters: view (ledger, unseen, ratios) in {:.3} s; {} ledger \
         rows, {} unseen rows, headline {:?}",
        took.as_secs_f64(),
        ledger.counters.len(),
        view.unseen.as_ref().map_or(0, Vec::len),
        ledger.headline
    );
    Ok(())
}
