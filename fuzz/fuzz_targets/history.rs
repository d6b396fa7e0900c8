//! Fuzzes reading a history directory: segments' bytes, named as the writer names them, through
//! the catalog, windows counted across segments and sessions (with the kernel's counters), the
//! timeline strip, the listing and the comparison of two windows. None may panic, hang or hold
//! more heap than one recording's reader may (`record::budget::MEMORY_BUDGET`): a history is
//! read a segment at a time, each with every limit of a recording.
//!
//! The input is up to four segments, each a length (two bytes) and that many bytes; a segment's
//! first byte picks what it is:
//! - 0: the rest is the file, as is;
//! - 1: the rest is the file, its frame checksums fixed first (to reach the payload decoders);
//! - 2: the rest drives a generated segment (a session's start, its snapshots' times and counts,
//!   kernel readings), encoded, then damaged by a few edits with the checksums fixed;
//!
//! and the same byte divided by 3 gives the segment its index (`SEGMENT.idx`): none, the one the
//! writer writes, that one with a byte changed, or the segment's own bytes as the index.
#![no_main]

use std::{sync::Arc, time::Duration};

use dropscope::{
    history::{
        catalog::Catalog,
        compare::compare_window,
        dir::segment_name,
        index,
        range::{Window, count},
        timeline,
    },
    model::{DropCount, DropKey, KernelReading, Reason, SessionInfo, Snapshot},
    record::encode,
};
use libfuzzer_sys::fuzz_target;

#[path = "common/mod.rs"]
mod common;
use common::{Bytes, FILE_HEADER, fix_checksums, within_budget};

/// Segments in one input, at most.
const SEGMENTS: usize = 4;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let mut rest = data;
    let mut seq = 1u64;
    for _ in 0..SEGMENTS {
        let [a, b, tail @ ..] = rest else { break };
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        let (seg, more) = tail.split_at(len);
        rest = more;
        let Some((&mode, body)) = seg.split_first() else {
            continue;
        };
        let (bytes, opened) = match mode % 3 {
            0 => (body.to_vec(), u64::from(seq as u32) * 60_000),
            1 => {
                let mut b = body.to_vec();
                fix_checksums(&mut b);
                (b, u64::from(seq as u32) * 60_000)
            }
            _ => match generated(body) {
                Some(g) => g,
                None => continue,
            },
        };
        let path = dir.path().join(segment_name(seq, opened));
        if std::fs::write(&path, &bytes).is_err() {
            return;
        }
        with_index(&path, mode / 3, body);
        seq += 1;
    }
    within_budget(|| read(dir.path()));
});

/// Gives the segment at `path` an index as `how` picks: none, the one the writer writes, that
/// one with a byte changed (picked by `body`), or `body` itself as the index's text.
fn with_index(path: &std::path::Path, how: u8, body: &[u8]) {
    let target = index::path_of(path);
    match how % 4 {
        0 => {}
        1 => {
            let _ = index::index_segment(path);
        }
        2 => {
            if index::index_segment(path).is_ok()
                && let Ok(mut text) = std::fs::read(&target)
                && !text.is_empty()
            {
                let at = body.first().map_or(0, |&b| usize::from(b)) * 7 % text.len();
                text[at] = body.get(1).copied().unwrap_or(b'9');
                let _ = std::fs::write(&target, text);
            }
        }
        _ => {
            let _ = std::fs::write(&target, body);
        }
    }
}

/// Everything that reads a history, on `dir`.
fn read(dir: &std::path::Path) {
    let Ok(cat) = Catalog::open(dir) else {
        return;
    };
    let mut listing = Vec::new();
    let _ = dropscope::cmd::history::write_listing(&cat, "dir", &mut listing);
    let _ = timeline::build(&cat, 60).map(|t| t.strip(40, Some(t.from_ms)));
    let spans = cat.spans();
    let (Some(lo), Some(hi)) = (
        spans.iter().map(|s| s.from_ms).min(),
        spans.iter().map(|s| s.to_ms).max(),
    ) else {
        return;
    };
    let mid = lo + (hi - lo) / 2;
    for w in [
        Window {
            from_ms: lo,
            to_ms: hi,
        },
        Window {
            from_ms: mid,
            to_ms: hi,
        },
        Window {
            from_ms: lo.saturating_sub(1),
            to_ms: mid,
        },
    ] {
        if let Ok(c) = count(&cat, w) {
            // A gap is a part of the window, in order.
            for &(a, b, _) in &c.gaps {
                assert!(
                    w.from_ms <= a && a <= b && b <= w.to_ms,
                    "gap {a}..{b} of {w:?}"
                );
            }
            if let Some((r, seen)) = &c.kernel {
                let s = Snapshot {
                    kernel: Some(Arc::new(r.clone())),
                    ..seen.clone()
                };
                let _ = dropscope::model::programs::of_snapshot(&s);
                let _ = dropscope::ledger::view(r, seen, None);
            }
        }
    }
    let vs = Duration::from_millis((hi - lo) / 2 + 1);
    let now = Window {
        from_ms: mid,
        to_ms: hi,
    };
    let budget: Vec<_> = ["total<5/s", "NO_SOCKET<1/s", "ratio<0.1%", "new-reasons=0"]
        .iter()
        .filter_map(|c| dropscope::vocab::budget::parse(c).ok())
        .collect();
    let _ = compare_window(dir, now, vs, (&Default::default(), &[]), 0.001, &budget)
        .map(|c| c.over_budget(None).len());
}

/// A segment generated from `data`: up to 16 snapshots of up to 4 keys, times and counts that
/// may go backwards, readings of the kernel's counters now and then; encoded, then a few
/// edits with the checksums fixed. Returns the bytes and the wall time the name carries.
fn generated(data: &[u8]) -> Option<(Vec<u8>, u64)> {
    let mut src = Bytes(data);
    let info = SessionInfo {
        host: "h".into(),
        kernel: "k".into(),
        started_unix_ms: 1_790_000_000_000 + src.u16() * 60_000,
        probe: "p".into(),
    };
    let keys: Vec<DropKey> = (0..4u32)
        .map(|k| DropKey {
            reason: Reason {
                code: k + 2,
                name: format!("R{k}").into(),
            },
            location: format!("f{k}+0x1").into(),
            attr: Default::default(),
        })
        .collect();
    let mut elapsed = src.u16() * 1000;
    let mut counts = [0u64; 4];
    let mut reading: Option<Arc<KernelReading>> = None;
    let snaps: Vec<Snapshot> = (0..(src.byte() % 16 + 1))
        .map(|_| {
            elapsed = elapsed
                .saturating_add(src.u16())
                .saturating_sub(u64::from(src.byte() / 250) * 5000);
            for c in &mut counts {
                *c = c.saturating_add(src.u16());
            }
            if src.byte() % 4 == 0 {
                let growth = [
                    ("Udp:NoPorts", src.u16()),
                    ("Xdp:v:xdpdrv:p#1:drop", src.u16()),
                ]
                .into_iter()
                .map(|(k, v)| (Arc::from(k), v))
                .collect();
                reading = Some(Arc::new(KernelReading {
                    unix_ms: info.started_unix_ms + elapsed,
                    initial_netns: 1,
                    netns: [(u64::from(src.byte() % 2), growth)].into_iter().collect(),
                    ..Default::default()
                }));
            }
            Snapshot {
                elapsed: Duration::from_millis(elapsed),
                unix_ms: info.started_unix_ms + elapsed,
                total: counts.iter().sum(),
                drops: keys
                    .iter()
                    .zip(counts)
                    .map(|(key, count)| DropCount {
                        key: key.clone(),
                        count,
                    })
                    .collect(),
                kernel: reading.clone(),
                ..Default::default()
            }
        })
        .collect();
    let opened = info.started_unix_ms + snaps[0].elapsed.as_millis() as u64;
    let mut bytes = encode(&info, &snaps).ok()?;
    for _ in 0..(src.byte() % 4) {
        let pos = src.u16() as usize;
        if bytes.len() > FILE_HEADER {
            let at = FILE_HEADER + pos % (bytes.len() - FILE_HEADER);
            bytes[at] ^= src.byte().max(1);
        }
    }
    fix_checksums(&mut bytes);
    Some((bytes, opened))
}
