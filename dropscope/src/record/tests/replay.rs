//! Replay under tokio's paused clock (pace, pause, seek, speed, end), and headless recording.
use std::time::Duration;

use tokio::{
    sync::{mpsc, oneshot},
    time::{Instant, sleep},
};

use crate::record::{
    Recording, encode, record_feed, replay_feed,
    tests::{session, story},
};
use crate::{
    model::Snapshot,
    source::{Feed, ReplayCommand as Cmd, ReplayStatus},
};

/// Snapshots at 1 s, 2 s, ..., 10 s whose total is their second.
fn ten_seconds() -> Recording {
    let snaps: Vec<Snapshot> = (1..=10u64)
        .map(|i| Snapshot {
            elapsed: Duration::from_secs(i),
            total: i,
            overflow: i,
            ..Default::default()
        })
        .collect();
    Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open")
}

async fn next(rx: &mut mpsc::Receiver<Snapshot>) -> u64 {
    rx.recv()
        .await
        .expect("the replay keeps its channel open")
        .total
}

/// Lets the replay task handle what was sent to it.
async fn settle() {
    sleep(Duration::from_micros(10)).await;
}

fn status(feed: &Feed) -> ReplayStatus {
    *feed.replay.as_ref().expect("replay handle").status.borrow()
}

fn send(feed: &Feed, c: Cmd) {
    feed.replay
        .as_ref()
        .expect("replay handle")
        .commands
        .send(c)
        .expect("replay task alive");
}

#[tokio::test(start_paused = true)]
async fn replay_plays_at_the_recorded_pace_times_speed() {
    let mut feed = replay_feed(ten_seconds());
    assert_eq!(feed.info, session());
    assert_eq!(next(&mut feed.snapshots).await, 1);
    let t0 = Instant::now();
    assert_eq!(next(&mut feed.snapshots).await, 2);
    assert_eq!(t0.elapsed(), Duration::from_secs(1));

    send(&feed, Cmd::Speed(4.0));
    let t1 = Instant::now();
    assert_eq!(next(&mut feed.snapshots).await, 3);
    assert_eq!(t1.elapsed(), Duration::from_millis(250));
    assert_eq!(status(&feed).speed, 4.0);

    send(&feed, Cmd::Speed(1000.0));
    settle().await;
    assert_eq!(status(&feed).speed, 16.0);
    send(&feed, Cmd::Speed(0.0));
    settle().await;
    assert_eq!(status(&feed).speed, 0.25);
    let t2 = Instant::now();
    assert_eq!(next(&mut feed.snapshots).await, 4);
    let waited = t2.elapsed();
    assert!(
        waited > Duration::from_secs(3) && waited <= Duration::from_secs(4),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn replay_pauses_seeks_and_stays_at_the_end() {
    let mut feed = replay_feed(ten_seconds());
    assert_eq!(next(&mut feed.snapshots).await, 1);
    assert_eq!(next(&mut feed.snapshots).await, 2);

    send(&feed, Cmd::TogglePause);
    settle().await;
    let s = status(&feed);
    assert!(s.paused);
    assert_eq!(s.duration, Duration::from_secs(10));
    sleep(Duration::from_secs(60)).await;
    assert!(
        feed.snapshots.try_recv().is_err(),
        "nothing is played while paused"
    );

    // Forward and backward seeks send the snapshot at the new position and stay paused.
    send(&feed, Cmd::SeekBy(5.5));
    assert_eq!(next(&mut feed.snapshots).await, 7);
    settle().await;
    assert_eq!(status(&feed).position, Duration::from_millis(7500));
    assert!(status(&feed).paused);
    send(&feed, Cmd::SeekBy(-3.0));
    assert_eq!(next(&mut feed.snapshots).await, 4);
    send(&feed, Cmd::SeekBy(-100.0));
    assert_eq!(next(&mut feed.snapshots).await, 1);
    send(&feed, Cmd::SeekBy(f64::NAN));
    send(&feed, Cmd::End);
    assert_eq!(next(&mut feed.snapshots).await, 10);
    send(&feed, Cmd::Start);
    assert_eq!(next(&mut feed.snapshots).await, 1);

    // Play to the end: it pauses on the last snapshot and keeps the channel open.
    send(&feed, Cmd::TogglePause);
    for want in 2..=10 {
        assert_eq!(next(&mut feed.snapshots).await, want);
    }
    settle().await;
    let s = status(&feed);
    assert!(s.paused);
    assert_eq!(s.position, Duration::from_secs(10));
    sleep(Duration::from_secs(3600)).await;
    assert!(matches!(
        feed.snapshots.try_recv(),
        Err(mpsc::error::TryRecvError::Empty)
    ));

    // Playing again at the end starts over.
    send(&feed, Cmd::TogglePause);
    assert_eq!(next(&mut feed.snapshots).await, 1);
    assert_eq!(next(&mut feed.snapshots).await, 2);

    // Dropping the receiver ends the task, which drops its status sender.
    let mut handle = feed.replay.take().expect("handle");
    drop(feed);
    while handle.status.changed().await.is_ok() {}
}

#[tokio::test(start_paused = true)]
async fn at_high_speed_only_the_latest_due_snapshot_is_sent() {
    let snaps: Vec<Snapshot> = (1..=100u64)
        .map(|i| Snapshot {
            elapsed: Duration::from_millis(10 * i),
            total: i,
            overflow: i,
            ..Default::default()
        })
        .collect();
    let rec = Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open");
    let mut feed = replay_feed(rec);
    assert_eq!(next(&mut feed.snapshots).await, 1);
    send(&feed, Cmd::TogglePause);
    settle().await;
    send(&feed, Cmd::Speed(16.0));
    send(&feed, Cmd::TogglePause);
    let mut seen = vec![];
    while seen.last() != Some(&100) {
        seen.push(next(&mut feed.snapshots).await);
    }
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn record_feed_writes_every_snapshot_and_finishes_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("headless.dsr");
    let snaps = story(30);
    let (tx, rx) = mpsc::channel(64);
    for s in &snaps {
        tx.send(s.clone()).await.expect("send");
    }
    drop(tx);
    let feed = Feed {
        info: session(),
        snapshots: rx,
        replay: None,
        kernel_pace: None,
    };
    let summary = record_feed(feed, &path, false, std::future::pending())
        .await
        .expect("record");
    assert_eq!(summary.frames, 30);
    assert_eq!(summary.total, snaps[29].total);
    assert_eq!(summary.bytes, std::fs::metadata(&path).expect("stat").len());
    let rec = Recording::open(&path).expect("open");
    assert!(rec.finished() && rec.warnings().is_empty());
    let got: Vec<Snapshot> = rec.snapshots().collect::<Result<_, _>>().expect("decode");
    assert_eq!(got, snaps);
}

#[tokio::test]
async fn record_feed_stops_when_asked_and_still_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stopped.dsr");
    let (tx, rx) = mpsc::channel(4);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let feed = Feed {
        info: session(),
        snapshots: rx,
        replay: None,
        kernel_pace: None,
    };
    let task = tokio::spawn({
        let path = path.clone();
        async move {
            record_feed(feed, &path, false, async {
                let _ = stop_rx.await;
            })
            .await
        }
    });
    for s in story(3) {
        tx.send(s).await.expect("send");
    }
    // Wait until the three are written (to the temporary file), then stop with the feed
    // still open.
    let written = || {
        std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| Recording::open(&e.path()).map_or(0, |r| r.len()))
            .max()
            .unwrap_or(0)
    };
    while written() < 3 {
        tokio::task::yield_now().await;
    }
    stop_tx.send(()).expect("stop");
    let summary = task.await.expect("join").expect("record");
    assert_eq!(summary.frames, 3);
    let rec = Recording::open(&path).expect("open");
    assert!(rec.finished());
    assert_eq!(rec.len(), 3);
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn frames_centuries_apart_do_not_overflow_the_clock() {
    let snaps: Vec<Snapshot> = [1, u64::MAX - 1]
        .iter()
        .enumerate()
        .map(|(i, &ns)| Snapshot {
            elapsed: Duration::from_nanos(ns),
            total: i as u64,
            overflow: i as u64,
            ..Default::default()
        })
        .collect();
    let rec = Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open");
    let mut feed = replay_feed(rec);
    assert_eq!(next(&mut feed.snapshots).await, 0);
    send(&feed, Cmd::Speed(0.25));
    sleep(Duration::from_secs(10)).await;
    send(&feed, Cmd::SeekBy(f64::MAX));
    assert_eq!(next(&mut feed.snapshots).await, 1);
    send(&feed, Cmd::SeekBy(-f64::MAX));
    assert_eq!(next(&mut feed.snapshots).await, 0);
}
