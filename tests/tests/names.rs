//! Names of real network namespaces and of interfaces inside them: namespaces made with
//! `ip netns add`, a veth pair between two of them whose ends share one index, a process started
//! by `ip netns exec`, and one by `unshare -n`. Needs root; attaches no eBPF.
//!
//! This crate does not link dropscope, so the module is compiled into this test from its source.
#[allow(dead_code)]
#[path = "../../dropscope/src/names/mod.rs"]
mod names;

use std::{
    os::unix::fs::MetadataExt,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use dropscope_tests::{Netns, root_test, run};
use names::Names;

/// A child process killed and reaped when dropped, before the namespaces go.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Killed {
    let child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    Killed(child)
}

fn inode(path: impl AsRef<Path>) -> u64 {
    let path = path.as_ref();
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .ino()
}

/// The index of interface `dev` in namespace `ns`, from `ip -o link`.
fn ifindex(ns: &Netns, dev: &str) -> u32 {
    let out = run(Command::new("ip").args(["-n", &ns.name, "-o", "link", "show", dev]));
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(':')
        .next()
        .and_then(|i| i.trim().parse().ok())
        .unwrap_or_else(|| panic!("no index in {text:?}"))
}

/// Waits until `pid` is in a namespace other than ours (the spawned command has unshared).
fn netns_of(pid: u32) -> u64 {
    let ours = inode("/proc/self/ns/net");
    for _ in 0..200 {
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
fn ip_netns_names_and_interfaces_inside_each_namespace() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test creates network namespaces and enters them with setns(2): it needs root \
         (run `cargo xtask test`: it runs the tests as root through sudo)"
    );
    let _serial = root_test();
    let a = Netns::new("names-a");
    let b = Netns::new("names-b");
    // Both ends get index 42: only the namespace tells them apart.
    run(Command::new("ip").args([
        "-n", &a.name, "link", "add", "veth-a", "index", "42", "type", "veth", "peer", "name",
        "veth-b", "index", "42", "netns", &b.name,
    ]));
    let (ia, ib) = (ifindex(&a, "veth-a"), ifindex(&b, "veth-b"));
    assert_eq!((ia, ib), (42, 42));
    let sleeper = spawn(&["ip", "netns", "exec", &a.name, "sleep", "60"]);
    let loner = spawn(&["unshare", "-n", "sleep", "60"]);
    let (ino_a, ino_b) = (
        inode(format!("/run/netns/{}", a.name)),
        inode(format!("/run/netns/{}", b.name)),
    );
    assert_eq!(netns_of(sleeper.0.id()), ino_a, "sleep runs in {}", a.name);
    let ino_loner = netns_of(loner.0.id());

    let mut names = Names::new();
    // A process from `ip netns exec` lives in a, but the ip-netns name wins.
    assert_eq!(names.netns(ino_a).as_deref(), Some(a.name.as_str()));
    assert_eq!(names.netns(ino_b).as_deref(), Some(b.name.as_str()));
    let loner_name = names
        .netns(ino_loner)
        .expect("a name for the unshared namespace");
    assert!(
        *loner_name == format!("sleep[{}]", loner.0.id()) || loner_name.ends_with(".service"),
        "unshare -n sleep: {loner_name}"
    );
    assert_eq!(names.scans(), 1, "one scan found all three namespaces");
    assert_eq!(
        names.enter_path(ino_a).as_deref(),
        Some(Path::new(&format!("/run/netns/{}", a.name)))
    );

    assert_eq!(names.device(ino_a, ia).as_deref(), Some("veth-a"));
    assert_eq!(names.device(ino_b, ib).as_deref(), Some("veth-b"));
    assert_eq!(names.device(ino_a, 1).as_deref(), Some("lo"));
    assert_eq!(names.device(ino_loner, 1).as_deref(), Some("lo"));
    assert_eq!(names.device(ino_a, ia).as_deref(), Some("veth-a"));
    assert_eq!(
        names.device_reads(),
        3,
        "one read per namespace, then the cache"
    );
    // An index that does not exist: one more read of a, not one per call.
    for _ in 0..50 {
        assert_eq!(names.device(ino_a, 4242), None);
    }
    assert!(names.device_reads() <= 4, "{} reads", names.device_reads());

    // Our own namespace: `host` if it is the initial one.
    let ours = inode("/proc/self/ns/net");
    let initial = std::fs::metadata("/proc/1/ns/net").map(|m| m.ino()).ok();
    if initial == Some(ours) || ours == 0xEFFF_FFF9 {
        assert_eq!(names.netns(ours).as_deref(), Some("host"));
    }

    // A namespace made after the scan is found by the next one, at most once a second.
    let c = Netns::new("names-c");
    let ino_c = inode(format!("/run/netns/{}", c.name));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(names.netns(ino_c).as_deref(), Some(c.name.as_str()));
    assert_eq!(names.scans(), 2);
    assert_eq!(names.netns(ino_c + 1_000_000), None);
    assert_eq!(names.scans(), 2, "no second scan within a second");
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..100 {
        assert_eq!(names.netns(ino_c + 1_000_000), None);
    }
    assert_eq!(
        names.scans(),
        3,
        "an unknown inode is looked for once, not per call"
    );

    drop((sleeper, loner));
    let all = [a.name.clone(), b.name.clone(), c.name.clone()];
    drop((a, b, c));
    for name in all {
        assert!(!Netns::exists(&name), "namespace {name} left behind");
    }
}
