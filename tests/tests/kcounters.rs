//! The kernel's drop counters are read in short-lived namespaces while they live, and dropscope
//! keeps none of them alive: 50 namespaces, each with a process that makes drops and exits, and
//! afterwards no descriptor of any of them in dropscope's `/proc/PID/fd`. Needs root.
use std::{
    collections::BTreeSet,
    os::unix::fs::MetadataExt as _,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{Counting, root_test, traffic_bin};

/// How many short-lived namespaces the test makes.
const NAMESPACES: usize = 50;

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

/// Waits until `pid` is in a network namespace other than ours; its inode.
fn netns_of(pid: u32, ours: u64) -> u64 {
    for _ in 0..500 {
        if let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/ns/net"))
            && meta.ino() != ours
        {
            return meta.ino();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("process {pid} never left our network namespace");
}

#[test]
fn short_lived_namespaces_are_read_while_they_live_and_never_kept_alive() {
    let _serial = root_test();
    let ours = std::fs::metadata("/proc/self/ns/net")
        .expect("own netns")
        .ino();
    // report --every reads the kernel counters every second.
    let mut report = Counting::start(&[
        "report",
        "--duration",
        "14",
        "--every",
        "1s",
        "--format",
        "json",
        "--by",
        "reason,location,netns",
    ]);
    // A report a second: its lines are read as they come (a full pipe would stall dropscope).
    report.read_stdout();
    let pid = report.pid();

    // Each process: one drop, 3 s (its namespace is found and read), one more drop, 3 s (read
    // again: the counter grew), exit.
    let traffic = traffic_bin();
    let script = format!(
        "ip link set lo up && {t} udp 9 1 && sleep 3 && {t} udp 9 1 && sleep 3",
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
    let inodes: BTreeSet<u64> = children.0.iter().map(|c| netns_of(c.id(), ours)).collect();
    assert_eq!(inodes.len(), NAMESPACES, "one namespace each");
    for c in &mut children.0 {
        let status = c.wait().expect("wait");
        assert!(status.success(), "a namespace's script failed: {status:?}");
    }

    // Every process has exited: within two polls dropscope holds none of their namespaces.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut held;
    loop {
        held = held_netns(pid);
        if held.is_disjoint(&inodes) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
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

    let out = report.wait_within(Duration::from_secs(30));
    let last: serde_json::Value = out
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("a JSON report line");
    // Each namespace's drops were counted by the probe...
    let seen: u64 = last["drops"]
        .as_array()
        .expect("drops")
        .iter()
        .filter(|d| d["netns"].as_u64().is_some_and(|n| inodes.contains(&n)))
        .map(|d| d["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(seen, 2 * NAMESPACES as u64, "{last:#}");
    // ... and, in most, the kernel's own counter was read growing while it lived.
    let grew: BTreeSet<u64> = last["kernel_counters"]
        .as_array()
        .expect("kernel counters")
        .iter()
        .filter(|c| c["counter"] == "Udp:NoPorts")
        .filter_map(|c| c["netns"].as_u64())
        .filter(|n| inodes.contains(n))
        .collect();
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
