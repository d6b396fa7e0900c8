//! `dropscope check`: real drops at a known rate in a namespace of the test's own, judged
//! against budgets after counting live; a broken budget exits 1 naming it. Needs root.
use std::{
    io::{BufRead, BufReader, Read},
    process::{Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use dropscope_tests::{Netns, dropscope_bin, root_test};

/// What a finished `check` gave.
struct Checked {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// Datagrams sent to a closed port while it counted.
    sent: u64,
}

/// Runs `dropscope check ARGS --netns NS --duration 6` and, once it counts, sends 50
/// datagrams to a closed UDP port in `ns` every 100 ms for 2 s (about 1,000 NO_SOCKET drops,
/// 160 a second over the window; the window is long enough for the last run of sends to end
/// in it on a loaded machine).
fn check(ns: &Netns, args: &[&str]) -> Checked {
    let mut child = Command::new(dropscope_bin())
        .arg("check")
        .args(args)
        .args(["--netns", &ns.name, "--duration", "6"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting dropscope");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let lines = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("counting drops") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut stdout = child.stdout.take().expect("stdout");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let counting = rx.recv_timeout(Duration::from_secs(60)).is_ok();
    let mut sent = 0;
    if counting {
        // Part of what is tested: drops at a rate (about 500/s for 2 s) that budgets judge.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            ns.traffic(&["udp", "9", "50"]);
            sent += 50;
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for dropscope") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dropscope check still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (out.join().expect("stdout"), lines.join().expect("stderr"));
    assert!(counting, "dropscope never started counting: {stderr}");
    Checked {
        status,
        stdout,
        stderr,
        sent,
    }
}

#[test]
fn a_broken_budget_exits_1_naming_it_and_a_generous_one_exits_0() {
    let _serial = root_test();
    let ns = Netns::new("check");

    let c = check(&ns, &["--budget", "NO_SOCKET<1/s", "--format", "json"]);
    assert_eq!(
        c.status.code(),
        Some(1),
        "stdout: {}\nstderr: {}",
        c.stdout,
        c.stderr
    );
    let broken = (c.stderr.lines())
        .find(|l| l.contains("NO_SOCKET<1/s broken"))
        .unwrap_or_else(|| panic!("no line names the broken clause: {}", c.stderr));
    assert!(
        broken.contains("NO_SOCKET at __udp4_lib_rcv+") && broken.contains(&ns.name),
        "the key with the most drops is named: {broken}"
    );
    let v: serde_json::Value = serde_json::from_str(&c.stdout).expect("JSON");
    // Every datagram sent was counted, and the rate is that count over the window.
    assert_eq!(v["run"]["total"].as_u64(), Some(c.sent), "{v:#}");
    let seconds = v["run"]["seconds"].as_f64().expect("seconds");
    assert!((6.0..9.0).contains(&seconds), "{v:#}");
    let value = v["budgets"][0]["value"].as_f64().expect("value");
    assert!(
        (value - c.sent as f64 / seconds).abs() < 1e-6 && value > 100.0,
        "{v:#}"
    );
    assert_eq!(v["ok"], false);

    let c = check(
        &ns,
        &[
            "--budget",
            "NO_SOCKET<100000/s",
            "--budget",
            "total<=100000/s",
        ],
    );
    assert_eq!(
        c.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        c.stdout,
        c.stderr
    );
    assert!(
        c.stdout.contains("ok      NO_SOCKET<100000/s holds"),
        "{}",
        c.stdout
    );
    assert!(!c.stderr.contains("broken"), "{}", c.stderr);
}

#[test]
fn a_ratio_budget_reads_the_packets_the_namespace_received() {
    let _serial = root_test();
    let ns = Netns::new("ratio");
    // Each datagram to a closed port is one packet received and one drop: a ratio of at
    // most 100%, and far above 0.001%.
    let c = check(
        &ns,
        &["--budget", "ratio<=100%,ratio<0.001%", "--format", "json"],
    );
    assert_eq!(c.status.code(), Some(1), "{}\n{}", c.stdout, c.stderr);
    let v: serde_json::Value = serde_json::from_str(&c.stdout).expect("JSON");
    let packets = v["run"]["packets"].as_u64().expect("packets were read");
    assert!(
        packets >= c.sent,
        "{packets} packets for {} datagrams: {v:#}",
        c.sent
    );
    assert_eq!(v["budgets"][0]["ok"], true, "{v:#}");
    assert_eq!(v["budgets"][1]["ok"], false, "{v:#}");
    assert!(c.stderr.contains("ratio<0.001% broken"), "{}", c.stderr);
}
