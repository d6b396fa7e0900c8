//! `serve --history`: real drops kept through a `kill -9` and a restart, counted exactly across
//! both runs by `report --input DIR --since` and replayed across the gap by `replay DIR`, with
//! the gap between them shown; one writer per directory; a full disk pauses history while
//! /metrics goes on.
use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{
    Netns, count, dropscope_bin, json_output, root_test, run,
    serve::{Serve, free_port, get},
};

/// Waits until /metrics counts `want` NO_SOCKET drops in namespace `ns` (then a snapshot with
/// them has been taken, and handed to the history writer).
fn wait_for_drops(serve: &Serve, ns: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // 503 until the first snapshot is published.
        let (status, _, body) = get(serve.port, "/metrics", "text/plain");
        let got: u64 = body
            .lines()
            .filter(|l| l.starts_with("dropscope_drops_total{"))
            .filter(|l| l.contains("NO_SOCKET") && l.contains(ns))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum();
        if status != 200 {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{got} of {want} drops in {ns}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `report --format json --since 10m --netns NS --input DIR`.
fn report_of(dir: &Path, ns: &str) -> serde_json::Value {
    let mut cmd = Command::new(dropscope_bin());
    cmd.args([
        "report", "--format", "json", "--since", "10m", "--netns", ns,
    ])
    .arg("--input")
    .arg(dir);
    json_output(&mut cmd)
}

/// A history listing.
fn listing(dir: &Path) -> String {
    let out = run(Command::new(dropscope_bin()).arg("history").arg(dir));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_history_survives_kill_9_and_report_since_spans_both_runs_with_the_gap() {
    let _serial = root_test();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("history");
    let d = dir.to_str().expect("utf-8");
    let ns = Netns::new("hist");
    let args = [
        "--interval",
        "100ms",
        "--history",
        d,
        "--segment-length",
        "2s",
    ];

    let first = Serve::start(&args);
    ns.traffic(&["udp", "9", "300"]);
    wait_for_drops(&first, &ns.name, 300);
    // A second writer on the same directory is refused, before attaching anything.
    let listen = format!("127.0.0.1:{}", free_port());
    let second = Command::new(dropscope_bin())
        .args(["serve", "--listen", &listen, "--history", d])
        .stdin(Stdio::null())
        .output()
        .expect("run a second serve");
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("another dropscope is writing the history"),
        "{err}"
    );
    // Another segment starts (2 s), then the writer is killed mid-segment.
    std::thread::sleep(Duration::from_millis(2500));
    let killed = first.signal(libc::SIGKILL);
    assert!(!killed.success());
    std::thread::sleep(Duration::from_secs(2));

    let second = Serve::start(&args);
    ns.traffic(&["udp", "9", "200"]);
    wait_for_drops(&second, &ns.name, 200);
    // The history's metrics are served beside the drops.
    let (_, _, body) = get(second.port, "/metrics", "text/plain");
    assert!(body.contains("\ndropscope_history_paused 0\n"), "{body}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(second.signal(libc::SIGTERM).success());

    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&dir).expect("stat").permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    let list = listing(&dir);
    assert!(list.contains("(cut: kill, crash or full disk)"), "{list}");
    assert!(list.contains("gap: not recorded"), "{list}");
    assert!(list.contains("in 2 spans"), "{list}");

    let report = report_of(&dir, &ns.name);
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv"),
        500,
        "{report}"
    );
    let out = Command::new(dropscope_bin())
        .args(["report", "--since", "10m", "--input", d])
        .output()
        .expect("report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("counted in 2 sessions"), "{err}");
    // Exactly one gap between the runs (the window's start, before the first run, is one too).
    let gaps: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(": not recorded"))
        .collect();
    assert_eq!(gaps.len(), 2, "{err}");

    // The replay runs across the kill -9 gap: both runs' drops, on one clock, counts carried
    // on (the replay of one stretch showed the second run's 200 alone).
    let t = dropscope_tests::tmux::Tmux::start(
        "histkill",
        &format!("replay {d} --since 10m --netns {}", ns.name),
    );
    t.wait_for("REPLAY");
    t.keys("$");
    let screen = t.wait("the end of both runs", |s| {
        s.lines()
            .any(|l| l.contains("__udp4_lib_rcv") && l.contains("500"))
    });
    assert!(screen.contains("history "), "the strip: {screen}");
    t.keys("q");
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
}

/// Needs root. The kernel's counters a real history keeps: `report --input DIR` over its window
/// shows the test namespace's `Udp:NoPorts` grown by exactly the datagrams sent, beside the
/// probe's count of them, as a recording's report does (a filter on drops leaves the unseen
/// drops and the ledger out, as it does for a recording).
#[test]
fn report_over_a_real_history_shows_the_kernel_counters_of_the_window() {
    let _serial = root_test();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("history");
    let d = dir.to_str().expect("utf-8");
    let ns = Netns::new("histk");
    let serve = Serve::start(&["--interval", "100ms", "--history", d]);
    ns.traffic(&["udp", "9", "300"]);
    wait_for_drops(&serve, &ns.name, 300);
    // A reading of the counters after the traffic (serve reads them every 10 s), published with
    // a snapshot that carries it, which the history writer was handed too.
    let label = format!("netns_name=\"{}\"", ns.name);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (_, _, body) = get(serve.port, "/metrics", "text/plain");
        let read = body.lines().any(|l| {
            l.starts_with("dropscope_layer_drops_total{")
                && l.contains("counter=\"Udp:NoPorts\"")
                && l.contains(&label)
                && l.ends_with(" 300")
        });
        if read {
            break;
        }
        assert!(Instant::now() < deadline, "no reading of 300: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(serve.signal(libc::SIGTERM).success());
    let report = report_of(&dir, &ns.name);
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv"),
        300,
        "{report}"
    );
    let noports = (report["kernel_counters"].as_array())
        .unwrap_or_else(|| panic!("no kernel_counters: {report}"))
        .iter()
        .find(|c| {
            c["counter"].as_str() == Some("Udp:NoPorts")
                && c["netns_name"].as_str() == Some(ns.name.as_str())
        })
        .and_then(|c| c["delta"].as_u64());
    assert_eq!(noports, Some(300), "{report}");
}

#[test]
fn a_full_disk_pauses_history_while_metrics_go_on() {
    let _serial = root_test();
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = tmp.path().join("small");
    std::fs::create_dir(&mnt).expect("mkdir");
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt));
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    let dir = mnt.join("history");
    let d = dir.to_str().expect("utf-8");
    // Fill the disk but for a few KiB.
    let filler = mnt.join("filler");
    let _ = std::fs::write(&filler, vec![0u8; 60 * 1024]);
    let ns = Netns::new("histfull");
    let serve = Serve::start(&["--interval", "100ms", "--history", d]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sent = 0;
    let paused = loop {
        ns.traffic(&["udp", "9", "50"]);
        sent += 50;
        let (_, _, body) = get(serve.port, "/metrics", "text/plain");
        if body.contains("\ndropscope_history_paused 1\n") {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    assert!(paused, "history never paused on a full disk");
    // Counting goes on: every drop is in /metrics.
    wait_for_drops(&serve, &ns.name, sent);
    // Room again: history resumes by itself (retried every 10 s).
    std::fs::remove_file(&filler).expect("rm filler");
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let (_, _, body) = get(serve.port, "/metrics", "text/plain");
        if body.contains("\ndropscope_history_paused 0\n") {
            break;
        }
        assert!(Instant::now() < deadline, "history did not resume: {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(serve.signal(libc::SIGTERM).success());
    let mut cmd = Command::new(dropscope_bin());
    cmd.args([
        "report", "--format", "json", "--netns", &ns.name, "--input", d,
    ]);
    let report = json_output(&mut cmd);
    // One session: its cumulative counts are exact across the pause.
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv"),
        sent,
        "{report}"
    );
}

#[test]
fn replaying_a_history_shows_its_timeline_with_the_gap_in_tmux() {
    use dropscope::history::synthetic::{session, write_session};
    let _serial = root_test();
    let tmp = tempfile::tempdir().expect("tempdir");
    // Two minutes dropping, two not recorded, two more: a strip with a hole in its middle.
    let t0 = 1_790_000_000_000;
    let a = dropscope::record::synthetic::snapshots(4, 4, 100, 120);
    let seq = write_session(tmp.path(), 1, &session("a", t0), &a, 60).expect("a");
    write_session(tmp.path(), seq, &session("a", t0 + 240_000), &a, 60).expect("b");
    let t =
        dropscope_tests::tmux::Tmux::start("histtl", &format!("replay {}", tmp.path().display()));
    let screen = t.wait_for("REPLAY");
    let line = screen
        .lines()
        .find(|l| l.starts_with("history "))
        .unwrap_or_else(|| panic!("no timeline:\n{screen}"));
    let strip = line["history ".len()..]
        .split(" 2026-")
        .next()
        .expect("a strip");
    let cells: Vec<char> = strip.chars().collect();
    let bars = |c: &[char]| c.iter().filter(|c| "▁▂▃▄▅▆▇█|".contains(**c)).count();
    let third = cells.len() / 3;
    // Both sessions drop; the middle third (the gap) is blank.
    assert!(bars(&cells[..third]) * 10 >= third * 8, "{line}");
    assert!(bars(&cells[2 * third + 2..]) > 0, "{line}");
    let middle = &cells[third + 2..2 * third - 2];
    assert!(
        middle.iter().all(|&c| c == ' ' || c == '|'),
        "the gap: {line}"
    );
    t.keys("q");
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
}

/// Needs root (as the other tests of this crate). `t` to a time hours before the window
/// replayed (the last hour, by default): the window around it is read from the history and
/// replayed, the strip's position moves there, and the table shows that session's drops.
#[test]
fn t_jumps_to_a_time_hours_before_the_window_replayed_in_tmux() {
    use dropscope::history::synthetic::{session, write_session};
    let _serial = root_test();
    let tmp = tempfile::tempdir().expect("tempdir");
    // Two minutes dropping from t0 (2026-09-21T14:13:20Z), then, three hours on, two minutes
    // without drops: the last hour holds no drop.
    let t0 = 1_790_000_000_000;
    let a = dropscope::record::synthetic::snapshots(4, 4, 100, 120);
    let mut b = dropscope::record::synthetic::snapshots(4, 0, 1, 120);
    for s in &mut b {
        s.drops.clear();
        s.total = 0;
    }
    let seq = write_session(tmp.path(), 1, &session("a", t0), &a, 60).expect("a");
    write_session(tmp.path(), seq, &session("a", t0 + 3 * 3_600_000), &b, 60).expect("b");
    let hot = a[60].drops[0].key.location.to_string();
    let t =
        dropscope_tests::tmux::Tmux::start("histjump", &format!("replay {}", tmp.path().display()));
    let before = t.wait_for("REPLAY");
    assert!(
        !before.contains(&hot),
        "no drop in the last hour:\n{before}"
    );
    t.keys("t");
    t.wait_for("go to _");
    t.keys("2026-09-21T14:14:20Z");
    t.keys("Enter");
    let screen = t.wait_for("jumped to");
    let screen = if screen.contains(&hot) {
        screen
    } else {
        t.wait_for(&hot)
    };
    let line = screen
        .lines()
        .find(|l| l.starts_with("history "))
        .unwrap_or_else(|| panic!("no timeline:\n{screen}"));
    let strip: Vec<char> = line["history ".len()..]
        .split(" 2026-")
        .next()
        .expect("a strip")
        .chars()
        .collect();
    let cursor = strip.iter().position(|&c| c == '|');
    assert!(
        cursor.is_some_and(|c| c < strip.len() / 10),
        "the position near the history's start: {line}"
    );
    assert!(!screen.contains("outside"), "{screen}");
    t.keys("q");
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
}

/// Needs root (as the other tests of this crate: tmux runs the binary through the runner's
/// environment). `v` in the replay of a generated history: the last hour against the hour
/// before, one key ten times more, said as a significant change with then/now per row; Esc
/// leaves it.
#[test]
fn v_compares_a_replayed_window_with_an_hour_earlier_in_tmux() {
    use dropscope::history::synthetic::{session, write_session};
    let _serial = root_test();
    let tmp = tempfile::tempdir().expect("tempdir");
    // Two hours of two keys at about 10/s; in the second hour the first key drops 100/s more.
    let t0 = 1_790_000_000_000;
    let mut snaps = dropscope::record::synthetic::snapshots(2, 2, 10, 7200);
    for (i, s) in snaps.iter_mut().enumerate().skip(3600) {
        s.drops[0].count += (i as u64 - 3599) * 100;
        s.total = s.drops.iter().map(|d| d.count).sum();
    }
    write_session(tmp.path(), 1, &session("cmp", t0), &snaps, 1800).expect("history");
    let hot = snaps[0].drops[0].key.location.to_string();
    let t =
        dropscope_tests::tmux::Tmux::start("histcmp", &format!("replay {}", tmp.path().display()));
    t.wait_for("REPLAY");
    // To the replay's end: the window shown is its whole hour.
    t.keys("$");
    t.wait_for("1:59:59 / 1:59:59");
    t.keys("v");
    t.wait_for("compare with _");
    t.keys("1h");
    t.keys("Enter");
    let screen = t.wait_for("(1h earlier, p < 0.001)");
    let row = screen
        .lines()
        .find(|l| l.contains(&hot))
        .unwrap_or_else(|| panic!("no row of {hot}:\n{screen}"));
    assert!(row.contains("▲ more"), "{row}");
    let all = screen
        .lines()
        .find(|l| l.contains("all drops"))
        .unwrap_or_else(|| panic!("no total:\n{screen}"));
    assert!(all.contains("▲ more"), "{all}");
    t.keys("Escape");
    t.wait("the table again", |s| {
        !s.contains("(1h earlier") && s.contains("COUNT")
    });
    t.keys("q");
    let s = t.wait_for("EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
}
