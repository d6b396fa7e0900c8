//! The kernel's drop counters are read in short-lived namespaces while they live, and dropscope
//! keeps none of them alive: 50 namespaces, each with a process that makes drops and exits, and
//! afterwards no descriptor of any of them in dropscope's `/proc/PID/fd`; what a reading
//! dumps and how long it reads stay bounded whatever the namespaces hold. Needs root.
use std::{
    collections::BTreeSet,
    os::unix::fs::MetadataExt as _,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{
    Counting, root_test, traffic_bin,
    wait::{netns_of, wait_line, wait_report},
};

/// How many short-lived namespaces the test makes.
const NAMESPACES: usize = 50;

/// The namespaces of `inodes` where a report shows `Udp:NoPorts` read growing.
fn grew_in(report: &serde_json::Value, inodes: &BTreeSet<u64>) -> BTreeSet<u64> {
    report["kernel_counters"]
        .as_array()
        .expect("kernel counters")
        .iter()
        .filter(|c| c["counter"] == "Udp:NoPorts")
        .filter_map(|c| c["netns"].as_u64())
        .filter(|n| inodes.contains(n))
        .collect()
}

/// Children killed and reaped when dropped (a failed assertion leaves none behind).
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The namespace inodes dropscope (`pid`) holds a descriptor of (links `net:[INODE]`).
fn held_netns(pid: u32) -> BTreeSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("dropscope's fd directory")
        .flatten()
        .filter_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            link.to_str()?
                .strip_prefix("net:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn short_lived_namespaces_are_read_while_they_live_and_never_kept_alive() {
    let _serial = root_test();
    // report --every reads the kernel counters every second; it runs until interrupted, so
    // however slowly the namespaces come and go, it is still running when they are gone.
    let mut report = Counting::start(&[
        "report",
        "--every",
        "1s",
        "--format",
        "json",
        "--by",
        "reason,location,netns",
    ]);
    // A report a second: its lines are read as they come (a full pipe would stall dropscope),
    // and waited on below.
    let lines = report.stdout_lines();
    let pid = report.pid();

    // Each process: a drop a second, each written down, until the test has seen the kernel's
    // counter read growing (its namespace found and read twice with a drop between), then exit.
    let dir = tempfile::tempdir().expect("tempdir");
    let end = dir.path().join("end");
    let traffic = traffic_bin();
    let script = format!(
        "ip link set lo up && while [ ! -e {end} ]; do {t} udp 9 1 && echo >> {dir}/sent.$$; \
         sleep 1; done",
        end = end.display(),
        dir = dir.path().display(),
        t = traffic.display()
    );
    let mut children = Children(Vec::new());
    for _ in 0..NAMESPACES {
        let child = Command::new("unshare")
            .args(["-n", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        children.0.push(child);
    }
    let inodes: BTreeSet<u64> = children.0.iter().map(|c| netns_of(c.id())).collect();
    assert_eq!(inodes.len(), NAMESPACES, "one namespace each");
    // In most, the kernel's own counter read growing while they live.
    wait_report(
        &lines,
        "Udp:NoPorts read growing in half the namespaces",
        |r| grew_in(r, &inodes).len() >= NAMESPACES / 2,
    );
    std::fs::write(&end, b"").expect("the end");
    for c in &mut children.0 {
        let status = c.wait().expect("wait");
        assert!(status.success(), "a namespace's script failed: {status:?}");
    }

    // Every process has exited: within two polls dropscope holds none of their namespaces.
    // Counted in reports (one a second, each after a reading), not in time: the one under way
    // at the exits, then two more.
    while lines.try_recv().is_ok() {}
    let mut held = held_netns(pid);
    for _ in 0..3 {
        if held.is_disjoint(&inodes) {
            break;
        }
        wait_line(&lines, "a report after the exits", |l| l.starts_with('{'));
        held = held_netns(pid);
    }
    let kept: Vec<_> = held.intersection(&inodes).collect();
    assert!(
        kept.is_empty(),
        "dropscope still holds {} of the {NAMESPACES} gone namespaces",
        kept.len()
    );
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "dropscope is still running"
    );

    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let last: serde_json::Value = out
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("a JSON report line");
    // Each namespace's drops were counted by the probe, exactly...
    let sent: u64 = std::fs::read_dir(dir.path())
        .expect("the drops written down")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sent."))
        .map(|e| std::fs::read(e.path()).expect("sent").len() as u64)
        .sum();
    assert!(sent >= NAMESPACES as u64, "{sent} drops sent");
    let seen: u64 = last["drops"]
        .as_array()
        .expect("drops")
        .iter()
        .filter(|d| d["netns"].as_u64().is_some_and(|n| inodes.contains(&n)))
        .map(|d| d["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(seen, sent, "{last:#}");
    // ... and, in most, the kernel's own counter read growing while it lived stays in the
    // whole session's report.
    let grew = grew_in(&last, &inodes);
    assert!(
        grew.len() >= NAMESPACES / 2,
        "Udp:NoPorts read growing in {} of {NAMESPACES} namespaces: {}",
        grew.len(),
        last["kernel_counters"]
    );
}

/// Steady drops the probe counts (UDP to a closed port, `Udp:NoPorts`) for 60 s are never
/// reported as unseen in any periodic report: the counters and the probe's counts cover the same span.
#[test]
fn steady_counted_drops_are_never_unseen() {
    let _serial = root_test();
    let ns = dropscope_tests::Netns::new("kc-steady");
    let inode = std::fs::metadata(ns.path()).expect("namespace").ino();
    let mut counting = Counting::start(&[
        "report",
        "--every",
        "1",
        "--duration",
        "62",
        "--format",
        "json",
        "--by",
        "reason,location,netns",
    ]);
    counting.read_stdout();
    let traffic = traffic_bin();
    let traffic = traffic.to_str().expect("utf-8 path");
    // About 400 drops a second for 60 s, in bursts that fall across the reads.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        ns.exec(&[traffic, "udp", "9", "40"]);
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = counting.wait_within(Duration::from_secs(60));
    let mut reports = 0;
    let mut counted = 0;
    for line in out.lines().filter(|l| l.starts_with('{')) {
        let r: serde_json::Value = serde_json::from_str(line).expect("a JSON report");
        reports += 1;
        let ours = |v: &serde_json::Value| v["netns"].as_u64() == Some(inode);
        let unseen: Vec<_> = (r["unseen"].as_array().expect("unseen computed").iter())
            .filter(|u| ours(u))
            .collect();
        assert!(
            unseen.is_empty(),
            "counted drops read as unseen: {unseen:?} in {line}"
        );
        counted = (r["drops"].as_array().expect("drops").iter())
            .filter(|d| ours(d))
            .map(|d| d["count"].as_u64().expect("count"))
            .sum();
    }
    assert!(reports >= 50, "{reports} reports: {out}");
    assert!(counted > 10_000, "the drops were counted: {counted}");
}

/// A device whose driver statistics outnumber what a reading was sized for (they grew between
/// the ioctl that counted them and the one that reads them: a veth whose queues the owner of
/// its namespace changes, each queue with statistics of its own) never makes the kernel write
/// past dropscope's buffers: the read is refused, by the kernel where it checks the count, else
/// at the guard page (`EFAULT`), and noted.
#[test]
fn driver_statistics_that_grew_since_counted_are_never_written_past_the_buffer() {
    use std::os::fd::AsRawFd as _;
    let _serial = root_test();
    let ns = dropscope_tests::Netns::new("kc-ethgrow");
    let queues = ["numtxqueues", "8", "numrxqueues", "8"];
    let mut add = vec!["ip", "link", "add", "grow0"];
    add.extend(queues);
    add.extend(["type", "veth", "peer", "name", "grow1"]);
    add.extend(queues);
    ns.exec(&add);
    let channels = |n: &str| {
        ns.exec(&["ethtool", "-L", "grow0", "rx", n, "tx", n]);
    };
    let netns = std::fs::File::open(ns.path()).expect("the namespace");
    let enter = move || {
        // SAFETY: setns(2) of the calling thread only, into the namespace file opened above.
        let rc = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    };
    use dropscope::kcounters::ethtool::device_stats;
    let (tx, rx) = std::sync::mpsc::channel::<Option<usize>>();
    let (back, answers) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        enter();
        for asked in rx {
            back.send(device_stats("grow0", asked).map_err(|e| e.raw_os_error()))
                .expect("the test waits");
        }
    });
    let ask = |asked: Option<usize>| {
        tx.send(asked).expect("the reader");
        answers.recv().expect("an answer")
    };
    channels("1");
    let few = ask(None).expect("the statistics of one queue").len();
    channels("8");
    let many = ask(None).expect("the statistics of eight queues").len();
    assert!(
        many > few,
        "eight queues have {many} statistics, one has {few}"
    );
    // Sized for one queue's statistics, while the driver has eight's: refused, by the kernel
    // (a kernel with the check answers none: EAGAIN here) or at the guard page (EFAULT).
    let refused = ask(Some(few));
    assert!(
        matches!(refused, Err(Some(libc::EAGAIN | libc::EFAULT))),
        "{refused:?}"
    );
    eprintln!("sized for {few} of {many} statistics: {refused:?}");
    // And then read whole again.
    assert_eq!(ask(None).map(|s| s.len()), Ok(many));
    drop(tx);
    reader.join().expect("the reading thread");
}

/// `count` u32 filters on one side of `dev`'s clsact qdisc in `ns` (made by the test), in one
/// `tc -batch`: what an unprivileged user can make in bulk inside a namespace of its own.
fn tc_filters(ns: &dropscope_tests::Netns, dev: &str, side: &str, count: u32) {
    use std::io::Write as _;
    let mut batch = tempfile::NamedTempFile::new().expect("batch file");
    for i in 1..=count {
        writeln!(
            batch,
            "filter add dev {dev} {side} prio {i} protocol ip u32 match ip dst 10.{}.{}.{}/32",
            i >> 16,
            (i >> 8) & 0xff,
            i & 0xff
        )
        .expect("batch line");
    }
    ns.exec(&["tc", "qdisc", "replace", "dev", dev, "clsact"]);
    let path = batch.path().to_str().expect("utf-8 path");
    ns.exec(&["tc", "-batch", path]);
}

/// The probe's NO_SOCKET drops at `__udp4_lib_rcv` in namespace `netns`, and that namespace's
/// `Udp:NoPorts` growth, in one report.
fn noports(report: &serde_json::Value, netns: u64) -> (u64, u64) {
    let seen = (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["netns"].as_u64() == Some(netns) && d["reason"] == "NO_SOCKET")
        .filter(|d| (d["location"].as_str()).is_some_and(|l| l.starts_with("__udp4_lib_rcv")))
        .map(|d| d["count"].as_u64().expect("count"))
        .sum();
    let counted = (report["kernel_counters"].as_array().into_iter().flatten())
        .filter(|c| c["netns"].as_u64() == Some(netns) && c["counter"] == "Udp:NoPorts")
        .map(|c| c["delta"].as_u64().expect("delta"))
        .sum();
    (seen, counted)
}

/// A namespace whose tc filters outnumber what a reading dumps (4,096 a namespace) is read up
/// to that bound: the qdisc sides beyond it are not dumped, and a note says so.
#[test]
fn tc_filters_beyond_the_bound_of_a_namespace_are_not_dumped_and_noted() {
    let _serial = root_test();
    let ns = dropscope_tests::Netns::new("kc-filters");
    let inode = std::fs::metadata(ns.path()).expect("namespace").ino();
    ns.exec(&[
        "ip", "link", "add", "fa", "type", "veth", "peer", "name", "fb",
    ]);
    // Three ingress sides of 2,047 filters each: the sides after the second are past the bound.
    for dev in ["lo", "fa", "fb"] {
        tc_filters(&ns, dev, "ingress", 2047);
    }
    let c = Counting::start(&["report", "--duration", "2", "--format", "json"]);
    let report: serde_json::Value =
        serde_json::from_str(&c.wait_within(Duration::from_secs(30))).expect("a JSON report");
    let notes: Vec<&str> = (report["kernel_notes"]
        .as_array()
        .expect("kernel notes")
        .iter())
    .filter_map(|n| n.as_str())
    .filter(|n| n.starts_with(&format!("netns {inode}:")))
    .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("qdisc sides not read") && n.contains("at most 4096 a namespace")),
        "no note of the sides left out in {notes:?}"
    );
}

/// 100 namespaces of 2,047 tc filters each (their reading takes several times the reading's
/// 1 s budget here) never make the host's own counters stale: the initial namespace is read
/// first and handed over on its own, so every periodic report after the one in which the
/// probe first counts the host's drops has the host's `Udp:NoPorts` growth too, while the other
/// namespaces are read in turn (noted).
#[test]
fn the_hosts_counters_stay_fresh_while_many_namespaces_wait_their_turn() {
    const NAMESPACES: usize = 100;
    const SENT: u64 = 300;
    let _serial = root_test();
    let crowd: Vec<_> = (0..NAMESPACES)
        .map(|i| {
            let ns = dropscope_tests::Netns::new(&format!("kc-crowd{i}"));
            tc_filters(&ns, "lo", "ingress", 2047);
            ns
        })
        .collect();
    let host = std::fs::metadata("/proc/self/ns/net")
        .expect("our namespace")
        .ino();
    // Runs until interrupted, once enough reports have followed the drops.
    let mut counting = Counting::start(&[
        "report",
        "--every",
        "1",
        "--format",
        "json",
        "--by",
        "reason,location,netns",
    ]);
    let lines = counting.stdout_lines();
    // The drops come while the crowd waits its turn: once a report has said so.
    wait_line(&lines, "a report with namespaces left for later", |l| {
        l.contains("namespaces not read this time")
    });
    // UDP to a closed port on the host's own loopback: Udp:NoPorts of the initial namespace.
    let traffic = traffic_bin();
    let out = Command::new(&traffic)
        .args(["udp", "9", &SENT.to_string()])
        .output()
        .expect("traffic generator");
    assert!(out.status.success(), "traffic: {out:?}");
    // The report in which the probe has them all, and three more.
    wait_report(&lines, "the probe's count of the drops", |r| {
        noports(r, host).0 >= SENT
    });
    for _ in 0..3 {
        wait_line(&lines, "a report after the drops", |l| l.starts_with('{'));
    }
    let out = counting
        .try_interrupt(Duration::from_secs(60))
        .expect("report ends");
    drop(crowd);
    let reports: Vec<serde_json::Value> = (out.lines().filter(|l| l.starts_with('{')))
        .map(|l| serde_json::from_str(l).expect("a JSON report"))
        .collect();
    let after: Vec<(u64, u64)> = (reports.iter().map(|r| noports(r, host)))
        .skip_while(|&(seen, _)| seen < SENT)
        .collect();
    assert!(after.len() >= 3, "too few reports after the drops: {out}");
    // The reading under way when the drops came may end before them: the first report may lag.
    for (i, &(seen, counted)) in after.iter().enumerate().skip(1) {
        assert!(
            counted >= SENT,
            "report {i} after the drops: the probe saw {seen}, the host's Udp:NoPorts grew {counted}"
        );
    }
    let deferred = reports.iter().any(|r| {
        (r["kernel_notes"].as_array().into_iter().flatten())
            .filter_map(|n| n.as_str())
            .any(|n| n.contains("namespaces not read this time"))
    });
    assert!(
        deferred,
        "the crowd never outlasted a reading's budget, so this proves nothing: {out}"
    );
}
