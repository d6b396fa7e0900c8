//! Reading a recording from a stream fed in pieces: frames indexed as they arrive, exact
//! snapshots, and a clean end when the writer finishes, stops or dies mid-frame.
use std::{
    io::{self, Read},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::record::{
    Recording, encode,
    tests::{decode_all, session, story},
};

/// A byte stream fed from a channel: ends when the sender is dropped.
struct Fed {
    rx: mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
}

impl Read for Fed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pending.is_empty() {
            match self.rx.recv() {
                Ok(b) => self.pending = b,
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        Ok(n)
    }
}

fn fed() -> (mpsc::Sender<Vec<u8>>, Fed) {
    let (tx, rx) = mpsc::channel();
    (
        tx,
        Fed {
            rx,
            pending: Vec::new(),
        },
    )
}

/// Refreshes until `rec` holds `want` frames (or fails after a few seconds).
fn until_frames(rec: &mut Recording, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while rec.len() < want {
        assert!(Instant::now() < deadline, "{} of {want} frames", rec.len());
        rec.wait(Duration::from_millis(50));
        rec.refresh().expect("refresh");
    }
}

#[test]
fn a_stream_fed_in_pieces_is_indexed_as_it_arrives_and_reads_back_exactly() {
    let snaps = story(80);
    let bytes = encode(&session(), &snaps).expect("encode");
    let whole = Recording::from_bytes(&bytes).expect("open");
    let (tx, src) = fed();
    // The header and session frame in odd pieces; then the rest 7 bytes at a time.
    let head = whole.frames()[0].offset as usize;
    for piece in bytes[..head].chunks(5) {
        tx.send(piece.to_vec()).expect("send");
    }
    let mut rec = Recording::follow(src).expect("follow");
    assert_eq!(rec.info(), &session());
    assert!(rec.is_growing());
    let mut sent = head;
    for (i, f) in whole.frames().iter().enumerate().skip(1).step_by(9) {
        // Everything up to frame i's start, in 7-byte pieces: frames before it are complete.
        let to = f.offset as usize;
        for piece in bytes[sent..to].chunks(7) {
            tx.send(piece.to_vec()).expect("send");
        }
        sent = to;
        until_frames(&mut rec, i);
        assert_eq!(rec.len(), i, "a frame not yet complete is not indexed");
        assert!(rec.is_growing() && rec.warnings().is_empty());
        assert_eq!(
            rec.snapshot_at(rec.duration()).expect("latest"),
            snaps[i - 1]
        );
    }
    tx.send(bytes[sent..].to_vec()).expect("send");
    until_frames(&mut rec, snaps.len());
    // The end marker ends the stream even while the writer keeps it open.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rec.is_growing() {
        assert!(Instant::now() < deadline);
        rec.wait(Duration::from_millis(50));
        rec.refresh().expect("refresh");
    }
    assert!(
        rec.finished() && rec.warnings().is_empty(),
        "{:?}",
        rec.warnings()
    );
    assert_eq!(decode_all(&rec), snaps);
    drop(tx);
}

#[test]
fn a_writer_that_dies_mid_frame_ends_the_stream_with_a_warning() {
    let snaps = story(40);
    let bytes = encode(&session(), &snaps).expect("encode");
    let whole = Recording::from_bytes(&bytes).expect("open");
    let cut = whole.frames()[30].offset as usize + 9;
    let (tx, src) = fed();
    for piece in bytes[..cut].chunks(100) {
        tx.send(piece.to_vec()).expect("send");
    }
    drop(tx);
    let rec = Recording::read_stream(src).expect("read");
    assert!(!rec.is_growing() && !rec.finished());
    assert_eq!(rec.len(), 30);
    assert_eq!(decode_all(&rec), snaps[..30]);
    let w = rec.warnings().join("\n");
    assert!(
        w.contains(&format!(
            "stream ended inside the frame at byte {}",
            cut - 9
        )),
        "{w}"
    );
}

#[test]
fn a_stream_that_ends_between_frames_or_before_its_header() {
    let snaps = story(10);
    let bytes = encode(&session(), &snaps).expect("encode");
    let whole = Recording::from_bytes(&bytes).expect("open");
    let at = whole.frames()[6].offset as usize;
    let (tx, src) = fed();
    tx.send(bytes[..at].to_vec()).expect("send");
    drop(tx);
    let rec = Recording::read_stream(src).expect("read");
    assert_eq!(rec.len(), 6);
    assert!(
        rec.warnings()[0].contains("without its end marker"),
        "{:?}",
        rec.warnings()
    );

    let (tx, src) = fed();
    tx.send(bytes[..10].to_vec()).expect("send");
    drop(tx);
    assert!(Recording::read_stream(src).is_err());
    let (tx, src) = fed();
    tx.send(b"not a recording at all".to_vec()).expect("send");
    drop(tx);
    assert!(matches!(
        Recording::read_stream(src),
        Err(crate::record::RecordError::NotARecording)
    ));
}

async fn recv(
    rx: &mut tokio::sync::mpsc::Receiver<crate::model::Snapshot>,
) -> crate::model::Snapshot {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a snapshot in time")
        .expect("feed open")
}

#[tokio::test]
async fn replay_follows_a_growing_stream_live_and_stops_following_at_its_end() {
    let snaps = story(20);
    let bytes = encode(&session(), &snaps).expect("encode");
    let whole = Recording::from_bytes(&bytes).expect("open");
    let at = |i: usize| whole.frames()[i].offset as usize;
    let (tx, src) = fed();
    tx.send(bytes[..at(4)].to_vec()).expect("send");
    let rec = Recording::follow(src).expect("follow");
    let mut feed = crate::record::replay_feed(rec);
    let status = feed.replay.as_ref().expect("replay").status.clone();
    // The latest snapshot that has arrived, not the first: it is live.
    let mut s = recv(&mut feed.snapshots).await;
    while s != snaps[3] {
        s = recv(&mut feed.snapshots).await;
    }
    assert!(status.borrow().live);
    // New frames are shown as they arrive.
    tx.send(bytes[at(4)..at(12)].to_vec()).expect("send");
    while s != snaps[11] {
        s = recv(&mut feed.snapshots).await;
        assert!(s.elapsed <= snaps[11].elapsed);
    }
    assert!(status.borrow().live);
    assert_eq!(status.borrow().duration, snaps[11].elapsed);
    // The rest, with the end marker: the last snapshot, then no longer live.
    tx.send(bytes[at(12)..].to_vec()).expect("send");
    while s != snaps[19] {
        s = recv(&mut feed.snapshots).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while status.borrow().live {
        assert!(Instant::now() < deadline, "still live after the end marker");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(status.borrow().paused);
    assert_eq!(status.borrow().duration, snaps[19].elapsed);
}
