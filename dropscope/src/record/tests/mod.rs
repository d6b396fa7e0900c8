//! Round trips, seeking, ordering, file permissions and size bounds; shared test fixtures.

mod attribution;
mod budget;
mod damage;
mod kernel;
mod replay;
mod socket;
mod stream;
mod v2;
use std::{
    os::unix::fs::{FileExt, PermissionsExt},
    sync::Arc,
    time::Duration,
};

use super::{
    KEYFRAME_EVERY, KEYFRAME_MAX_FRAMES, RecordError, Recorder, Recording, encode,
    format::FRAME_HEADER_LEN,
};
use crate::model::{
    DropCount, DropKey, Health, KernelReading, Reason, SessionInfo, Snapshot, StackCount,
};

pub(super) fn key(code: u32, name: &str, loc: &str) -> DropKey {
    DropKey {
        reason: Reason {
            code,
            name: name.into(),
        },
        location: loc.into(),
        attr: Default::default(),
    }
}

pub(super) fn session() -> SessionInfo {
    SessionInfo {
        host: "edge-7".into(),
        kernel: "6.12.0-test".into(),
        started_unix_ms: 1_750_000_000_000,
        probe: "tp_btf/kfree_skb".into(),
    }
}

fn frames(names: &[&str]) -> Arc<[Arc<str>]> {
    names.iter().map(|&n| Arc::from(n)).collect()
}

/// A session of `n` snapshots at irregular intervals that exercises every part of the format:
/// keys appearing later (one with a zero count), counts unchanged for a while, overflow, stacks
/// sharing frames, health fields coming and going, and a gap longer than a keyframe interval.
pub(super) fn story(n: usize) -> Vec<Snapshot> {
    let keys = [
        key(2, "NO_SOCKET", "__udp4_lib_rcv+0x8a4"),
        key(5, "NETFILTER_DROP", "nf_hook_slow+0xa1 [nf_tables]"),
        key(3, "SOCKET_RCVBUFF", "sock_queue_rcv_skb_reason+0x3c"),
        key(2, "NO_SOCKET", "tcp_v4_rcv+0x1c2"),
        key(77, "UNKNOWN(77)", "ip_rcv_finish_core+0x12"),
    ];
    let udp = frames(&[
        "do_syscall_64",
        "udp_sendmsg",
        "ip_finish_output2",
        "__udp4_lib_rcv",
    ]);
    let nf = frames(&["do_syscall_64", "ip_finish_output2", "nf_hook_slow"]);
    let mut out = Vec::new();
    let mut t = Duration::from_millis(250);
    let mut counts = [0u64; 5];
    let mut overflow = 0;
    for i in 0..n {
        let quiet = (20..30).contains(&i);
        if !quiet {
            counts[0] += 3 * i as u64 + 1;
            counts[1] += if i % 3 == 0 { 1_000_003 } else { 0 };
            if i >= 8 {
                counts[2] += i as u64 % 5;
            }
            if i >= 40 {
                counts[4] += u64::from(i % 7 == 0) << 40;
            }
            overflow += u64::from(i % 11 == 5) * 17;
        }
        let present = 2 + usize::from(i >= 8) + usize::from(i >= 12) + usize::from(i >= 40);
        let mut drops: Vec<DropCount> = (0..5)
            .filter(|&k| k < 2 || (k == 2 && i >= 8) || (k == 3 && i >= 12) || (k == 4 && i >= 40))
            .map(|k| DropCount {
                key: keys[k].clone(),
                count: counts[k],
            })
            .collect();
        assert_eq!(drops.len(), present);
        drops.truncate(present);
        let mut stacks = Vec::new();
        if i >= 5 {
            stacks.push(StackCount {
                key: keys[0].clone(),
                frames: udp.clone(),
                weight: 64 * i as u64,
                samples: i as u64,
            });
        }
        if i >= 15 {
            stacks.push(StackCount {
                key: keys[1].clone(),
                frames: nf.clone(),
                weight: 128 * (i as u64 / 4),
                samples: i as u64 / 4,
            });
        }
        let total = drops.iter().map(|d| d.count).sum::<u64>() + overflow;
        out.push(Snapshot {
            elapsed: t,
            unix_ms: 1_750_000_000_000 + t.as_millis() as u64,
            total,
            overflow,
            drops,
            stacks,
            samples: Vec::new(),
            health: Health {
                keys_used: present as u64,
                keys_capacity: 10_240,
                stack_samples: i as u64 * 2,
                stack_errors: u64::from(i > 50),
                sample_period: if i < 30 { 64 } else { 128 },
                bpf_run_ns: (i % 10 != 3).then_some(i as u64 * 91_000),
                bpf_run_cnt: (i > 4).then_some(i as u64 * 1000),
                self_syscalls: Some(i as u64 * 6),
                self_cpu_us: i as u64 * 1_500,
                poll_interval_ms: if quiet { 1000 } else { 250 },
                ..Default::default()
            },
            // A reading of the kernel's counters from the fourth snapshot on, new every fifth
            // (the snapshots in between carry the same one, or one with newer program
            // counts), as a live source makes them.
            kernel: (i >= 3).then(|| {
                let n = i as u64 / 5;
                let mut r = KernelReading {
                    unix_ms: 1_750_000_000_000 + n,
                    initial_netns: 4026531840,
                    ..Default::default()
                };
                let g = r.netns.entry(4026531840).or_default();
                g.insert("Udp:NoPorts".into(), 10 * n + 1);
                g.insert("Dev:lo:RxPackets".into(), 1000 * n + 7);
                // Programs' verdict counts are brought up to date between readings: the same
                // reading's time, new counts.
                if n.is_multiple_of(2) {
                    g.insert("Xdp:veth0:xdpdrv:ds_drop#7:drop".into(), 3 * i as u64);
                }
                if n % 3 == 1 {
                    r.netns
                        .entry(4026532999)
                        .or_default()
                        .insert("TcpExt:ListenDrops".into(), n);
                    r.errors.push(format!("namespace {n}: gone"));
                }
                Arc::new(r)
            }),
        });
        t += match i {
            33 => Duration::from_secs(45),
            _ => Duration::from_millis(400 + (i as u64 * 37) % 900),
        };
    }
    out
}

pub(super) fn decode_all(rec: &Recording) -> Vec<Snapshot> {
    rec.snapshots()
        .collect::<Result<_, _>>()
        .expect("every valid frame decodes")
}

#[test]
fn snapshots_round_trip_exactly() {
    let snaps = story(80);
    let bytes = encode(&session(), &snaps).expect("encode");
    let rec = Recording::from_bytes(&bytes).expect("open");
    assert_eq!(rec.info(), &session());
    assert_eq!(rec.len(), snaps.len());
    assert_eq!(rec.duration(), snaps[snaps.len() - 1].elapsed);
    assert!(rec.warnings().is_empty(), "{:?}", rec.warnings());
    assert!(rec.finished());
    assert_eq!(decode_all(&rec), snaps);
    for s in &snaps {
        assert!(s.invariant_holds());
    }
}

#[test]
fn snapshot_at_returns_the_last_snapshot_at_or_before_t() {
    let snaps = story(80);
    let rec = Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open");
    assert_eq!(rec.snapshot_at(Duration::ZERO).expect("before"), snaps[0]);
    for (i, s) in snaps.iter().enumerate() {
        assert_eq!(rec.snapshot_at(s.elapsed).expect("at"), *s, "frame {i}");
        let between = s.elapsed + Duration::from_millis(1);
        assert_eq!(rec.snapshot_at(between).expect("between"), *s, "after {i}");
    }
    assert_eq!(
        rec.snapshot_at(Duration::MAX).expect("after end"),
        snaps[79]
    );
}

#[test]
fn seeks_start_from_a_recent_keyframe() {
    let snaps = story(120);
    let rec = Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open");
    let f = rec.frames();
    assert!(f[0].keyframe);
    assert!(f.iter().filter(|f| f.keyframe).count() >= 3);
    for (i, fr) in f.iter().enumerate() {
        assert!(f[fr.base].keyframe && fr.base <= i);
        assert!(i - fr.base < KEYFRAME_MAX_FRAMES as usize);
        // The keyframe is at most one keyframe interval (plus one frame gap) before.
        let prev_gap = if i > 0 {
            fr.elapsed - f[i - 1].elapsed
        } else {
            Duration::ZERO
        };
        assert!(fr.elapsed - f[fr.base].elapsed <= KEYFRAME_EVERY + prev_gap);
    }
}

#[test]
fn a_seek_never_reads_the_frames_before_its_keyframe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seek.dsr");
    let snaps = story(120);
    std::fs::write(&path, encode(&session(), &snaps).expect("encode")).expect("write");
    let rec = Recording::open(&path).expect("open");
    // Damage the first keyframe after opening: seeks past the next keyframe must not notice.
    let first = rec.frames()[0].clone();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("reopen");
    file.write_all_at(&[0x55; 4], first.offset + FRAME_HEADER_LEN as u64)
        .expect("damage");
    let late = rec
        .frames()
        .iter()
        .rposition(|f| f.keyframe)
        .expect("a later keyframe");
    assert!(late > 0);
    let t = rec.frames()[late].elapsed;
    assert_eq!(rec.snapshot_at(t).expect("seek"), snaps[late]);
    assert!(matches!(
        rec.snapshot_at(Duration::ZERO),
        Err(RecordError::Corrupt { offset, .. }) if offset == first.offset
    ));
}

#[test]
fn order_is_first_appearance_and_duplicates_are_merged() {
    let a = key(2, "NO_SOCKET", "a+0x1");
    let b = key(3, "OTHER", "b+0x2");
    let s1 = Snapshot {
        elapsed: Duration::from_secs(1),
        total: 3,
        drops: vec![
            DropCount {
                key: b.clone(),
                count: 1,
            },
            DropCount {
                key: a.clone(),
                count: 2,
            },
        ],
        ..Default::default()
    };
    let mut s2 = s1.clone();
    s2.elapsed = Duration::from_secs(2);
    s2.total = 10;
    s2.drops = vec![
        DropCount {
            key: a.clone(),
            count: 4,
        },
        DropCount {
            key: b.clone(),
            count: 3,
        },
        DropCount {
            key: a.clone(),
            count: 3,
        },
    ];
    let rec = Recording::from_bytes(&encode(&session(), &[s1, s2]).expect("encode")).expect("open");
    let got = decode_all(&rec);
    let pairs: Vec<_> = got[1]
        .drops
        .iter()
        .map(|d| (d.key.clone(), d.count))
        .collect();
    assert_eq!(pairs, vec![(b, 3), (a, 7)]);
    assert!(got[1].invariant_holds());
}

#[test]
fn snapshots_out_of_order_are_refused_and_change_nothing() {
    let snaps = story(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("order.dsr");
    let mut r = Recorder::create(&path, &session(), false).expect("create");
    r.write(&snaps[1]).expect("write");
    let size = r.bytes_written();
    assert!(matches!(
        r.write(&snaps[0]),
        Err(RecordError::OutOfOrder { .. })
    ));
    assert_eq!(r.bytes_written(), size);
    r.write(&snaps[2]).expect("write");
    r.finish().expect("finish");
    let rec = Recording::open(&path).expect("open");
    assert_eq!(decode_all(&rec), vec![snaps[1].clone(), snaps[2].clone()]);
}

#[test]
fn files_are_owner_only_named_when_finished_and_never_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mode.dsr");
    let mut r = Recorder::create(&path, &session(), false).expect("create");
    r.write(&story(1)[0]).expect("write");
    assert!(!path.exists(), "the name is given only when finished");
    assert_eq!(
        r.bytes_written(),
        std::fs::metadata(r.temp_path()).expect("stat").len()
    );
    r.finish().expect("finish");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(matches!(
        Recorder::create(&path, &session(), false),
        Err(RecordError::Output(crate::outfile::OutFileError::Exists(_)))
    ));
    assert_eq!(Recording::open(&path).expect("still intact").len(), 1);

    // A pre-created empty file (someone else's, say) is not written into without --force ...
    let empty = dir.path().join("empty.dsr");
    std::fs::write(&empty, b"").expect("touch");
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(Recorder::create(&empty, &session(), false).is_err());
    // ... and with it, replaced by a new private file.
    let r = Recorder::create(&empty, &session(), true).expect("forced");
    r.finish().expect("finish");
    let mode = std::fs::metadata(&empty)
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(Recording::open(&empty).expect("a recording").finished());
}

/// Bytes per frame of [`synthetic`], file header and dictionary included.
pub(super) fn bytes_per_frame(keys: usize, changing: usize, rate: u64, frames: usize) -> f64 {
    let snaps = super::synthetic::snapshots(keys, changing, rate, frames);
    encode(&session(), &snaps).expect("encode").len() as f64 / frames as f64
}

#[test]
fn size_grows_with_changing_keys_not_with_the_drop_rate() {
    // Bound, per 1 s frame with 100 keys of which 10 change: a delta frame is a 20-byte header,
    // ~20 bytes of totals and health, and 10 × (1-2 byte id gap + up to 10-byte count change)
    // ≤ 160 bytes; a keyframe (100 × ≤ 11 bytes, often compressed) every 30 frames adds ≤ 40;
    // the names, written once, add a few bytes per frame over 10 minutes.
    let slow = bytes_per_frame(100, 10, 10, 600);
    let flood = bytes_per_frame(100, 10, 10_000_000, 600);
    assert!(slow < 120.0, "{slow} bytes per frame at 10 drops/s");
    assert!(flood < 250.0, "{flood} bytes per frame at 10M drops/s");
    // The rate costs bytes only through the width of the numbers (about 3x for 6 more digits).
    assert!(flood < 3.0 * slow, "{slow} vs {flood}");
}

#[test]
fn the_sample_recording_in_assets_replays_cleanly() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/sample.dsrec");
    let rec = Recording::open(&path).expect("open the sample");
    assert!(rec.warnings().is_empty(), "{:?}", rec.warnings());
    assert!(!rec.is_empty());
    let all = decode_all(&rec);
    for s in &all {
        assert!(s.invariant_holds(), "at {:?}", s.elapsed);
    }
    // A session of its generator (`cargo xtask sample`): drops in its two namespaces, named,
    // on their devices, and the kernel's counters read beside them.
    let last = all.last().expect("snapshots");
    for ns in ["dsample-web", "dsample-db"] {
        assert!(
            (last.drops.iter()).any(|d| d.key.attr.netns_name.as_deref() == Some(ns)),
            "{ns}"
        );
    }
    assert!(last.drops.iter().all(|d| d.key.attr.device.is_some()));
    // Its readings name their namespaces too (format 10).
    let r = last.kernel.as_ref().expect("a reading");
    for ns in ["dsample-web", "dsample-db"] {
        assert!(r.names.values().any(|n| &**n == ns), "{ns}: {:?}", r.names);
    }
    // Who dropped it, as the replay and `report --input` name them: each culprit of the
    // session (the tc program a candidate where its verdicts are not counted), and no row
    // whose culprit cannot be told.
    let culprits = crate::culprit::culprits(last);
    let lines: Vec<String> = culprits.values().map(|c| c.line()).collect();
    for want in [
        "exact: rule inet sample input (input) handle",
        "exact: rule ip filter INPUT (input) handle",
        "exact: policy drop of chain ip gate input",
        "prog sample_tc_shot#",
        "exact: socket traffic[",
    ] {
        assert!(lines.iter().any(|l| l.contains(want)), "{want}: {lines:#?}");
    }
    assert!(
        culprits.values().all(|c| c.certainty() != "unknown"),
        "{lines:#?}"
    );
}

#[test]
fn opening_a_file_publishes_how_far_it_is_indexed() {
    let bytes = encode(&session(), &story(40)).expect("encode");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.dsrec");
    std::fs::write(&path, &bytes).expect("write");
    let indexed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rec = Recording::open_counting(&path, Some(indexed.clone())).expect("open");
    assert_eq!(rec.len(), 40);
    // Up to the end marker, the last frame indexed before the file's end.
    let at = indexed.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        at > bytes.len() as u64 / 2 && at <= bytes.len() as u64,
        "{at}"
    );
}
