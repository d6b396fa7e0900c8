//! Generated histories (any age, no waiting), for tests and measurements.
use std::path::Path;

use std::{sync::Arc, time::Duration};

use super::{catalog::wall_ms, dir::segment_name};
use crate::model::{DropCount, DropKey, KernelReading, Reason, SessionInfo, Snapshot};

/// Writes the snapshots of the session `info` into `dir` as segments of `per_segment`
/// snapshots each, numbered from `seq` on, each named by the wall time of its first snapshot;
/// returns the next free number.
pub fn write_session(
    dir: &Path,
    mut seq: u64,
    info: &SessionInfo,
    snaps: &[Snapshot],
    per_segment: usize,
) -> anyhow::Result<u64> {
    for chunk in snaps.chunks(per_segment.max(1)) {
        let opened = wall_ms(info, chunk[0].elapsed);
        let bytes = crate::record::encode(info, chunk)?;
        std::fs::write(dir.join(segment_name(seq, opened)), bytes)?;
        seq += 1;
    }
    Ok(seq)
}

/// A session of `host` started at `started_unix_ms`.
pub fn session(host: &str, started_unix_ms: u64) -> SessionInfo {
    SessionInfo {
        host: host.into(),
        kernel: "6.18.0-test".into(),
        started_unix_ms,
        probe: "tp_btf/kfree_skb".into(),
    }
}

/// The initial namespace's inode in [`with_counters`]' readings.
pub const INITIAL_NETNS: u64 = 4_026_531_840;

/// `n` snapshots at 1/s (session times 1 s to `n` s) of a session started at
/// `started_unix_ms`, one key (`NO_SOCKET` at `__udp4_lib_rcv+0x1c`) counting `per_s` drops a
/// second, and a reading of the kernel's counters every 5 s (at 5 s, 10 s, ...; the snapshots
/// until the next carry it): `Udp:NoPorts` grown by `per_s` and `Ip:InReceives` by `10 *
/// per_s` a second, and an XDP program's drop verdicts by `per_s / 2` a second.
pub fn with_counters(started_unix_ms: u64, per_s: u64, n: u64) -> Vec<Snapshot> {
    let key = DropKey {
        reason: Reason {
            code: 2,
            name: "NO_SOCKET".into(),
        },
        location: "__udp4_lib_rcv+0x1c".into(),
        attr: Default::default(),
    };
    let mut reading: Option<Arc<KernelReading>> = None;
    (1..=n)
        .map(|i| {
            let unix_ms = started_unix_ms + i * 1000;
            if i % 5 == 0 {
                let growth = [
                    ("Udp:NoPorts", per_s * i),
                    ("Ip:InReceives", 10 * per_s * i),
                    ("Xdp:veth0:xdpdrv:ds_drop#42:drop", per_s / 2 * i),
                ]
                .into_iter()
                .map(|(k, v)| (Arc::from(k), v))
                .collect();
                reading = Some(Arc::new(KernelReading {
                    unix_ms: unix_ms - 1,
                    initial_netns: INITIAL_NETNS,
                    netns: [(INITIAL_NETNS, growth)].into_iter().collect(),
                    ..Default::default()
                }));
            }
            Snapshot {
                elapsed: Duration::from_secs(i),
                unix_ms,
                total: per_s * i,
                drops: vec![DropCount {
                    key: key.clone(),
                    count: per_s * i,
                }],
                kernel: reading.clone(),
                ..Default::default()
            }
        })
        .collect()
}
