//! Recordings of real drops: replayed counts equal the live ones, a SIGKILLed recording still
//! replays, and replay needs no root. Needs root (to record).
use std::{os::unix::fs::PermissionsExt, process::Command};

use dropscope_tests::{Counting, Netns, count, dropscope_bin, root_test};

fn report_of(file: &std::path::Path, as_nobody: bool) -> serde_json::Value {
    let mut cmd = if as_nobody {
        dropscope_tests::dropscope_as_nobody()
    } else {
        Command::new(dropscope_bin())
    };
    dropscope_tests::json_output(
        cmd.args(["report", "--format", "json", "--input"])
            .arg(file),
    )
}

#[test]
fn a_recording_replays_the_exact_live_counts_without_root() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("drops.dsrec");
    let ns = Netns::new("record");
    let live = Counting::start(&["report", "--format", "json"]);
    // A long poll interval: the drops land between polls, so only the last snapshot, taken
    // when recording stops, holds them. It must be in the file.
    let rec = Counting::start(&[
        "record",
        "-o",
        file.to_str().expect("utf-8"),
        "--interval",
        "10s",
    ]);
    ns.traffic(&["udp", "9", "777"]);
    ns.traffic(&["raw", "253", "55"]);
    rec.interrupt();
    let live: serde_json::Value = serde_json::from_str(&live.interrupt()).expect("live JSON");

    let mode = std::fs::metadata(&file)
        .expect("recording")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "recordings are owner-only");

    let replayed = report_of(&file, false);
    for (reason, loc, n) in [
        ("NO_SOCKET", "__udp4_lib_rcv+", 777),
        ("IP_NOPROTO", "", 55),
    ] {
        assert_eq!(count(&live, reason, loc), n, "{live:#}");
        assert_eq!(count(&replayed, reason, loc), n, "{replayed:#}");
    }
    let (keyed, overflow, total) = dropscope_tests::keyed_overflow_total(&replayed);
    assert_eq!(keyed + overflow, total, "{replayed:#}");
    // For a machine of another kind to replay (vmtest's arm64 guests: the x86_64 host).
    dropscope_tests::keep(
        "record.dsrec",
        &std::fs::read(&file).expect("the recording"),
    );
    dropscope_tests::keep("record.json", replayed.to_string().as_bytes());

    // Replay needs no root: hand the file to an unprivileged user and read it as that user.
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).expect("chown");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let as_nobody = report_of(&file, true);
    assert_eq!(count(&as_nobody, "NO_SOCKET", "__udp4_lib_rcv+"), 777);
}

#[test]
fn a_recording_killed_with_sigkill_replays_its_complete_frames() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("killed.dsrec");
    let ns = Netns::new("killed");
    let rec = Counting::start(&[
        "record",
        "-o",
        file.to_str().expect("utf-8"),
        "--interval",
        "100ms",
    ]);
    ns.traffic(&["udp", "9", "500"]);
    // Killed once the drops are in a frame written down (not after a guessed time).
    dropscope_tests::wait::wait_recorded(dir.path(), "the 500 drops recorded", |r| {
        count(r, "NO_SOCKET", "__udp4_lib_rcv+") >= 500
    });
    // SAFETY: kill(2) with a valid signal to the process we started.
    unsafe { libc::kill(rec.pid() as i32, libc::SIGKILL) };
    let _ = std::panic::catch_unwind(|| rec.wait());
    // Killed before finishing: nothing at the name, the frames in the `.part` file beside it.
    assert!(!file.exists());
    let part = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".part"))
        .expect("the temporary recording");
    let replayed = report_of(&part, false);
    assert_eq!(
        count(&replayed, "NO_SOCKET", "__udp4_lib_rcv+"),
        500,
        "{replayed:#}"
    );
}
