//! Crafted recordings that amplify: a few bytes that name a long name from many keys, long
//! chains of deltas. Each is refused (or cut) at open, before its output or its work is spent.
use std::time::Duration;

use crate::record::{
    RecordError, Recording,
    budget::{MAX_CHAIN_BYTES, MAX_DELTAS, MAX_REFERENCED_BYTES},
    crafted,
    format::MAX_STRING,
};

#[test]
fn one_long_name_shared_by_many_keys_is_counted_per_reference() {
    // 16,384 keys naming one 64 KiB location: under 1 KB of file, 1 GiB of names to print.
    let bytes = crafted::shared_name(16 << 10, MAX_STRING);
    assert!(bytes.len() < 1000, "{} bytes", bytes.len());
    match Recording::from_bytes(&bytes) {
        Err(RecordError::OverBudget { what, max, .. }) => {
            assert_eq!(what, "bytes of names as referenced by keys and stacks");
            assert_eq!(max, MAX_REFERENCED_BYTES);
        }
        Err(e) => panic!("{e}"),
        Ok(r) => panic!(
            "accepted, {} bytes of names referenced",
            r.referenced_bytes()
        ),
    }
    // As many keys as the budget allows still read, and say what they reference.
    let keys = (MAX_REFERENCED_BYTES as usize / (MAX_STRING + 1)) as u64;
    let rec = Recording::from_bytes(&crafted::shared_name(keys as usize, MAX_STRING))
        .expect("within the budget");
    assert_eq!(rec.referenced_bytes(), keys * (MAX_STRING as u64 + 1));
}

#[test]
fn shared_frames_count_once_per_stack_that_uses_them() {
    let d = crafted::Dict {
        strings: vec!["R".into(), "f".repeat(MAX_STRING)],
        keys: vec![(2, 0, 0)],
        stacks: (0..5000).map(|_| (0, vec![1; 1000])).collect(),
        ..Default::default()
    };
    match Recording::from_bytes(&crafted::recording(&d, 0)) {
        Err(RecordError::OverBudget { what, .. }) => {
            assert_eq!(what, "bytes of names as referenced by keys and stacks")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("5,000 stacks of 1,000 64 KiB frames were accepted"),
    }
}

#[test]
fn deltas_per_keyframe_are_enforced_at_open() {
    let d = crafted::Dict {
        strings: vec!["R".into(), "f".into()],
        keys: vec![(2, 0, 1)],
        ..Default::default()
    };
    let ok = Recording::from_bytes(&crafted::recording(&d, MAX_DELTAS)).expect("open");
    assert_eq!(ok.len(), MAX_DELTAS + 1);
    assert!(ok.warnings().is_empty(), "{:?}", ok.warnings());
    let last = ok.snapshot_at(Duration::MAX).expect("last");
    assert_eq!(last.drops[0].count, 1 + MAX_DELTAS as u64);

    // 10,000 deltas after one keyframe: a seek to the end once decoded all of them.
    let rec = Recording::from_bytes(&crafted::recording(&d, 10_000)).expect("open");
    assert_eq!(rec.len(), MAX_DELTAS + 1, "frames kept");
    let w = rec.warnings();
    assert!(
        w.len() == 1 && w[0].contains("more than 255 delta frames after a keyframe"),
        "{w:?}"
    );
    let f = rec.frames();
    assert!(f.iter().all(|f| f.base == 0));
    assert_eq!(
        rec.snapshot_at(Duration::MAX).expect("last").drops[0].count,
        1 + MAX_DELTAS as u64
    );
    assert_eq!(MAX_CHAIN_BYTES, 256 << 20);
}
