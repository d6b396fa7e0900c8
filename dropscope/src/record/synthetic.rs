//! Synthetic snapshot streams of a chosen shape, for size and seek measurements and tests.
use std::time::Duration;

use crate::model::{DropCount, DropKey, Health, Reason, Snapshot};

/// `frames` snapshots at 1/s of `keys` keys of which `changing` change each second, each by
/// about `rate` drops (varying by up to 10%), with stacks off.
pub fn snapshots(keys: usize, changing: usize, rate: u64, frames: usize) -> Vec<Snapshot> {
    let keys: Vec<DropKey> = (0..keys)
        .map(|k| DropKey {
            reason: Reason {
                code: k as u32 % 90,
                name: format!("REASON_{}", k % 90).into(),
            },
            location: format!("func_{k}+0x{k:x}").into(),
            attr: Default::default(),
        })
        .collect();
    let mut counts = vec![0u64; keys.len()];
    (0..frames)
        .map(|i| {
            for c in 0..changing {
                let k = (i * 7 + c * 13) % counts.len();
                counts[k] += rate + (i as u64 * 7919 + c as u64) % (rate / 10 + 1);
            }
            let drops: Vec<DropCount> = keys
                .iter()
                .zip(&counts)
                .map(|(key, &count)| DropCount {
                    key: key.clone(),
                    count,
                })
                .collect();
            Snapshot {
                elapsed: Duration::from_millis(1000 * i as u64 + 3),
                unix_ms: 1_750_000_000_000 + 1000 * i as u64,
                total: counts.iter().sum(),
                drops,
                health: Health {
                    keys_used: keys.len() as u64,
                    keys_capacity: 10_240,
                    bpf_run_ns: Some(i as u64 * rate * 35),
                    bpf_run_cnt: Some(i as u64 * rate),
                    self_syscalls: Some(i as u64 * 4),
                    self_cpu_us: i as u64 * 900,
                    poll_interval_ms: 250,
                    ..Default::default()
                },
                ..Default::default()
            }
        })
        .collect()
}
