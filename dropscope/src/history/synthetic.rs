//! Generated histories (any age, no waiting), for tests and measurements.
use std::path::Path;

use super::{catalog::wall_ms, dir::segment_name};
use crate::model::{SessionInfo, Snapshot};

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
