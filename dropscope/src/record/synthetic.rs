//! Synthetic snapshot streams of a chosen shape, for size and seek measurements and tests.
use std::time::Duration;

use crate::model::{DropCount, DropKey, Health, Reason, Snapshot};

/// `n` keys of 90 reasons, each at a location of its own.
pub fn keys(n: usize) -> Vec<DropKey> {
    (0..n)
        .map(|k| DropKey {
            reason: Reason {
                code: k as u32 % 90,
                name: format!("REASON_{}", k % 90).into(),
            },
            location: format!("func_{k}+0x{k:x}").into(),
            attr: Default::default(),
        })
        .collect()
}

/// The drops of `keys` with `counts` (in the same order).
pub fn drops(keys: &[DropKey], counts: &[u64]) -> Vec<DropCount> {
    keys.iter()
        .zip(counts)
        .map(|(key, &count)| DropCount {
            key: key.clone(),
            count,
        })
        .collect()
}

/// `frames` snapshots at 1/s of `keys` keys of which `changing` change each second, each by
/// about `rate` drops (varying by up to 10%), with stacks off.
pub fn snapshots(keys: usize, changing: usize, rate: u64, frames: usize) -> Vec<Snapshot> {
    let keys = self::keys(keys);
    let mut counts = vec![0u64; keys.len()];
    (0..frames)
        .map(|i| {
            for c in 0..changing {
                let k = (i * 7 + c * 13) % counts.len();
                counts[k] += rate + (i as u64 * 7919 + c as u64) % (rate / 10 + 1);
            }
            let drops = self::drops(&keys, &counts);
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

/// One snapshot of `keys` keys (each a drop of its own, in one namespace, on one of 64
/// devices) carrying a reading of `counters` grown layer counters (half the stats64
/// `tx_dropped` of a device each, half the `/proc/net/dev` drop column of another): the drop
/// ledger's largest case for its size, every counter matched against every key it could
/// count.
pub fn ledger_heavy(keys: usize, counters: usize) -> Vec<Snapshot> {
    use std::sync::Arc;

    use crate::model::{Attribution, KernelReading};
    const NETNS: u64 = 4026531840;
    let devices: Vec<Arc<str>> = (0..64).map(|d| Arc::from(format!("v{d}"))).collect();
    let drops: Vec<DropCount> = (0..keys)
        .map(|k| DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: "NO_SOCKET".into(),
                },
                location: format!("__udp4_lib_rcv+0x{k:x}").into(),
                attr: Attribution {
                    netns: Some(NETNS),
                    device: Some(devices[k % devices.len()].clone()),
                    ..Default::default()
                },
            },
            count: 1 + k as u64 % 7,
        })
        .collect();
    let mut reading = KernelReading {
        unix_ms: 1_750_000_001_000,
        initial_netns: NETNS,
        ..Default::default()
    };
    let g = reading.netns.entry(NETNS).or_default();
    for c in 0..counters {
        let name = if c % 2 == 0 {
            format!("Link:x{c:x}:tx_dropped")
        } else {
            format!("Dev:x{c:x}:RxDrop")
        };
        g.insert(name.into(), 1000 + c as u64);
    }
    vec![Snapshot {
        elapsed: Duration::from_secs(1),
        unix_ms: 1_750_000_001_000,
        total: drops.iter().map(|d| d.count).sum(),
        drops,
        kernel: Some(std::sync::Arc::new(reading)),
        health: Health {
            keys_used: keys as u64,
            keys_capacity: keys.next_power_of_two() as u64,
            ..Default::default()
        },
        ..Default::default()
    }]
}
