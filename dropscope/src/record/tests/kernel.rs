//! Kernel readings in recordings: whole frames and deltas read back exactly, forward and by
//! seeks; deltas refused where the writer never puts them.
use std::{sync::Arc, time::Duration};

use crate::model::KernelReading;
use crate::record::{
    Recording,
    decode::Frames,
    encode,
    format::{Kind, push_frame},
    kernel,
    tests::{decode_all, session, story},
};

/// A host's reading: 40 namespaces of 10 device counters, and a program's verdicts.
fn reading(unix_ms: u64, xdp: u64, shift: u64) -> KernelReading {
    let mut r = KernelReading {
        unix_ms,
        initial_netns: 1,
        ..Default::default()
    };
    for ns in 1..=40u64 {
        let g = r.netns.entry(ns).or_default();
        for c in 0..10 {
            g.insert(
                format!("Link:veth{c}:rx_dropped").into(),
                ns * 100 + c + shift,
            );
        }
        r.devices
            .insert(ns, (0..10).map(|c| (c + 2, format!("veth{c}"))).collect());
    }
    let g = r.netns.entry(3).or_default();
    g.insert("Xdp:veth1:xdpdrv:ds_drop#7:drop".into(), xdp);
    r
}

/// `story`, each snapshot carrying a reading whose program count grows every poll, read anew
/// every tenth snapshot, with a namespace gone for a while.
fn with_readings(n: usize) -> Vec<crate::model::Snapshot> {
    let mut snaps = story(n);
    for (i, s) in snaps.iter_mut().enumerate() {
        let i = i as u64;
        let mut r = reading(1_750_000_000_000 + i / 10, 5 * i + 1, i / 10);
        if (40..60).contains(&i) {
            r.netns.remove(&9);
            r.devices.remove(&9);
        }
        r.errors = vec![format!("note {}", i / 7)];
        s.kernel = Some(Arc::new(r));
    }
    snaps
}

#[test]
fn readings_brought_up_to_date_each_poll_are_written_as_deltas_and_read_back_exactly() {
    let snaps = with_readings(150);
    let bytes = encode(&session(), &snaps).expect("encode");
    let rec = Recording::from_bytes(&bytes).expect("open");
    let frames: Vec<_> = (0..).map_while(|i| rec.kernel_frame(i).cloned()).collect();
    let whole = frames.iter().filter(|f| f.keyframe).count();
    assert_eq!(frames.len(), 150, "a kernel frame per changed reading");
    assert!(
        (2..20).contains(&whole),
        "{whole} whole of {}",
        frames.len()
    );
    let full = kernel::encode(snaps[0].kernel.as_deref().expect("a reading"))
        .0
        .len();
    // Kernel frames, whole and deltas, count against the index's limit with the snapshots.
    assert_eq!(rec.indexed_frames(), rec.len() + frames.len());
    assert!(
        bytes.len() < 30 * full,
        "{} bytes, a whole reading is {full}",
        bytes.len()
    );
    // Forward, and by seeks in any order.
    assert_eq!(decode_all(&rec), snaps);
    for i in [149, 3, 77, 76, 0, 148, 45, 60] {
        let at = rec.snapshot_at(snaps[i].elapsed).expect("seek");
        assert_eq!(at.kernel, snaps[i].kernel, "snapshot {i}");
    }
}

#[test]
fn a_whole_reading_at_least_every_minute() {
    let mut snaps = with_readings(40);
    let mut t = snaps[39].elapsed;
    for s in &mut snaps[20..] {
        t += Duration::from_secs(5);
        s.elapsed = t;
    }
    let rec = Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open");
    let frames: Vec<_> = (0..).map_while(|i| rec.kernel_frame(i).cloned()).collect();
    assert!(frames.iter().any(|f| !f.keyframe), "no delta was written");
    for f in &frames {
        let base = &frames[f.base];
        assert!(base.keyframe);
        assert!(f.elapsed - base.elapsed < Duration::from_secs(60), "{f:?}");
    }
    assert_eq!(decode_all(&rec), snaps);
}

#[test]
fn a_kernel_delta_before_any_reading_is_refused() {
    // The first three snapshots of the story carry no reading.
    let snaps = story(3);
    let mut bytes = encode(&session(), &snaps).expect("encode");
    // A delta frame (setting one counter) in the end frame's place: refused, the frames before
    // it replayed.
    let mut p = Vec::new();
    for v in [1u64, 1, 1, 1] {
        crate::record::format::put_uvarint(&mut p, v);
    }
    crate::record::format::put_str(&mut p, "Udp:NoPorts");
    crate::record::format::put_uvarint(&mut p, 1);
    crate::record::format::put_uvarint(&mut p, 0);
    let end = bytes.len() - crate::record::format::FRAME_HEADER_LEN;
    bytes.truncate(end);
    let elapsed = snaps[2].elapsed.as_nanos() as u64;
    push_frame(&mut bytes, Kind::KernelDelta, elapsed, &p).expect("frame");
    let rec = Recording::from_bytes(&bytes).expect("the frames before it replay");
    let w = rec.warnings().join("\n");
    assert!(
        w.contains("(a kernel delta frame before any reading)"),
        "{w}"
    );
    assert_eq!(rec.len(), 3);
    assert!(rec.kernel_frame(0).is_none());
}

/// A device named with an invisible character is recorded, escaped as every sink shows it; a
/// name the writer cannot record is noted in the recorded reading, never left out silently.
#[test]
fn counters_of_oddly_named_devices_are_recorded_or_noted() {
    let mut c = crate::kcounters::parse::Counters::new();
    crate::kcounters::parse::dev("a\nb\n eth0\u{34f}: 1 2 3 4 5 6 7 8 9 10 11 12\n", &mut c);
    let mut r = KernelReading {
        unix_ms: 5,
        initial_netns: 1,
        ..Default::default()
    };
    let g = r.netns.entry(1).or_default();
    for (name, v) in &c {
        g.insert(Arc::from(name.as_str()), *v);
    }
    let (payload, whole) = kernel::encode(&r);
    assert!(whole);
    let back = kernel::decode(&payload, crate::record::VERSION).expect("decoded");
    assert_eq!(back.netns[&1].get("Dev:eth0\\u{34f}:RxDrop"), Some(&4));
    assert_eq!(back, r);
    // A name no reader would take (from a producer that did not escape it, or too long).
    let g = r.netns.entry(1).or_default();
    g.insert(Arc::from("Dev:eth1\u{34f}:RxDrop"), 3);
    g.insert(Arc::from(format!("Ethtool:eth1:{}", "x".repeat(300))), 2);
    let (payload, whole) = kernel::encode(&r);
    assert!(!whole);
    let back = kernel::decode(&payload, crate::record::VERSION).expect("decoded");
    assert_eq!(back.netns[&1].len(), c.len());
    let note = (back.errors.iter())
        .find(|e| e.contains("not recorded"))
        .unwrap_or_else(|| panic!("no note in {:?}", back.errors));
    assert!(note.starts_with("2 counters not recorded"), "{note}");
    assert!(note.contains("Dev:eth1\\u{34f}:RxDrop"), "{note}");
}
