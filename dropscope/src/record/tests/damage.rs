//! Damaged files: truncation and flipped bytes at every byte, wrong magic and versions, and an
//! interrupted recorder. Each must give the valid prefix and a warning naming the byte offset.
use crate::record::{
    RecordError, Recorder, Recording, encode,
    format::{FILE_HEADER_LEN, FRAME_HEADER_LEN},
    tests::{decode_all, session, story},
};

/// Offsets of every frame header in an encoded recording, and whether each is a snapshot frame.
fn frame_starts(bytes: &[u8]) -> Vec<(usize, bool)> {
    let mut at = FILE_HEADER_LEN;
    let mut out = Vec::new();
    while at + FRAME_HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        out.push((at, matches!(bytes[at + 4], 2 | 3)));
        at += FRAME_HEADER_LEN + len as usize;
    }
    out
}

#[test]
fn truncation_at_every_byte_keeps_the_valid_prefix() {
    let snaps = story(40);
    let bytes = encode(&session(), &snaps).expect("encode");
    let starts = frame_starts(&bytes);
    let header_end = starts[1].0; // after the file header and the session frame
    for cut in 0..bytes.len() {
        let r = Recording::from_bytes(&bytes[..cut]);
        if cut < header_end {
            assert!(matches!(r, Err(RecordError::Truncated { .. })), "cut {cut}");
            continue;
        }
        let rec = r.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        // Frames wholly before the cut; the warning names where the valid part ends.
        let ends: Vec<usize> = starts
            .iter()
            .skip(1)
            .map(|&(s, _)| s)
            .chain([bytes.len()])
            .collect();
        let complete = starts
            .iter()
            .zip(&ends)
            .filter(|&(&(_, snap), &end)| snap && end <= cut)
            .count();
        let valid_end = ends
            .iter()
            .copied()
            .filter(|&e| e <= cut)
            .max()
            .unwrap_or(header_end);
        assert_eq!(rec.len(), complete, "cut {cut}");
        assert_eq!(decode_all(&rec), snaps[..complete], "cut {cut}");
        assert_eq!(rec.warnings().len(), 1, "cut {cut}");
        assert!(
            rec.warnings()[0].contains(&format!("byte {valid_end}")),
            "cut {cut}: {:?}",
            rec.warnings()
        );
    }
}

#[test]
fn flipped_bytes_anywhere_give_the_valid_prefix() {
    let snaps = story(40);
    let bytes = encode(&session(), &snaps).expect("encode");
    let starts = frame_starts(&bytes);
    for pos in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[pos] ^= flip;
            let r = Recording::from_bytes(&b);
            if (14..16).contains(&pos)
                && let Ok(rec) = &r
            {
                // The version field turned into an older, valid version: what reads under it
                // (nothing past the first frame that has a version 3 field) is a prefix of the
                // snapshots, never others.
                let back = decode_all(rec);
                assert!(snaps.starts_with(&back), "byte {pos} ^ {flip:#x}");
                continue;
            }
            if pos < starts[1].0 {
                assert!(
                    r.is_err(),
                    "byte {pos} ^ {flip:#x} in the header was accepted"
                );
                continue;
            }
            let rec = r.unwrap_or_else(|e| panic!("byte {pos}: {e}"));
            let damaged = starts
                .iter()
                .rposition(|&(s, _)| s <= pos)
                .expect("a frame");
            let before = starts[..damaged].iter().filter(|&&(_, snap)| snap).count();
            assert_eq!(rec.len(), before, "byte {pos} ^ {flip:#x}");
            assert_eq!(decode_all(&rec), snaps[..before], "byte {pos}");
            let w = rec.warnings().join("; ");
            assert!(
                w.contains(&format!("byte {}", starts[damaged].0)),
                "byte {pos}: {w}"
            );
        }
    }
}

#[test]
fn bad_magic_and_newer_versions_are_named() {
    let bytes = encode(&session(), &story(3)).expect("encode");
    let e = Recording::from_bytes(b"perf.data is not a recording")
        .err()
        .expect("error");
    assert!(matches!(e, RecordError::NotARecording));
    assert!(e.to_string().contains("not a dropscope recording"));

    let mut newer = bytes.clone();
    newer[FILE_HEADER_LEN - 2..FILE_HEADER_LEN]
        .copy_from_slice(&(crate::record::VERSION + 1).to_le_bytes());
    let e = Recording::from_bytes(&newer).err().expect("error");
    assert!(matches!(
        e,
        RecordError::NewerVersion {
            found,
            supported: crate::record::VERSION
        } if found == crate::record::VERSION + 1
    ));
    let newer = format!("version {} is newer", crate::record::VERSION + 1);
    assert!(e.to_string().contains(&newer), "{e}");

    assert!(matches!(
        Recording::from_bytes(&[]),
        Err(RecordError::Truncated { offset: 0 })
    ));
}

#[test]
fn a_killed_recorder_leaves_a_replayable_temporary_file_and_no_destination() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("killed.dsr");
    let snaps = story(12);
    let mut r = Recorder::create(&path, &session(), false).expect("create");
    for s in &snaps {
        r.write(s).expect("write");
    }
    let temp = r.temp_path().to_path_buf();
    // As if killed between two frames: no finish, and no clean-up either.
    std::mem::forget(r);
    assert!(!path.exists());
    let rec = Recording::open(&temp).expect("open");
    assert_eq!(decode_all(&rec), snaps);
    assert!(!rec.finished());
    assert!(
        rec.warnings()[0].contains("not finished"),
        "{:?}",
        rec.warnings()
    );
}

#[test]
fn an_abandoned_recorder_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("failed.dsr");
    let mut r = Recorder::create(&path, &session(), false).expect("create");
    r.write(&story(1)[0]).expect("write");
    drop(r); // a failed write (a full disk) ends the same way
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}
