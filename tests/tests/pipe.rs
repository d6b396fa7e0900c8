//! A recording streamed through a pipe: `dropscope record -o - | dropscope report --input -`
//! counts exactly the drops generated, and the reader ends cleanly when the writer stops or is
//! killed. Needs root (to record).
use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{Netns, count, dropscope_bin, keyed_overflow_total, root_test};

/// `dropscope record -o - | dropscope report --input - --format json`, once the writer is
/// attached and recording.
fn pipeline(extra: &[&str]) -> (Child, Child) {
    let mut writer = Command::new(dropscope_bin())
        .args(["record", "-o", "-"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the writer");
    let stream = writer.stdout.take().expect("stdout");
    let reader = Command::new(dropscope_bin())
        .args(["report", "--format", "json", "--input", "-"])
        .stdin(Stdio::from(stream))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the reader");
    let mut lines = BufReader::new(writer.stderr.take().expect("stderr")).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("recording drops") => break,
            Some(Ok(_)) => {}
            _ => panic!("the writer exited before recording"),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (writer, reader)
}

/// Waits for `child` to end, at most `limit`; kills it and fails if it does not.
fn ends_within(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the reader did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) with the pid of a child we own and a valid signal.
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn a_piped_recording_reports_exact_counts() {
    let _serial = root_test();
    let ns = Netns::new("pipe");
    let (mut writer, reader) = pipeline(&[]);
    ns.traffic(&["udp", "9", "1000"]);
    ns.traffic(&["raw", "253", "300"]);
    signal(&writer, libc::SIGINT);
    assert!(writer.wait().expect("writer").success());
    let out = ends_within(reader, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "a finished stream: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv+"),
        1000,
        "{report:#}"
    );
    assert_eq!(count(&report, "IP_NOPROTO", ""), 300, "{report:#}");
    let (keyed, overflow, total) = keyed_overflow_total(&report);
    assert_eq!(keyed + overflow, total, "{report:#}");
}

#[test]
fn the_reader_ends_cleanly_when_the_writer_is_killed() {
    let _serial = root_test();
    let ns = Netns::new("pipekill");
    let (mut writer, reader) = pipeline(&["--interval", "200ms"]);
    ns.traffic(&["udp", "9", "500"]);
    // Several polls later the drops are in a frame that has gone down the pipe.
    std::thread::sleep(Duration::from_secs(2));
    signal(&writer, libc::SIGKILL);
    let _ = writer.wait();
    let out = ends_within(reader, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning"),
        "an unfinished stream is named: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(
        count(&report, "NO_SOCKET", "__udp4_lib_rcv+"),
        500,
        "{report:#}"
    );
}
