//! Names of real network namespaces and of interfaces inside them: namespaces made with
//! `ip netns add`, a veth pair between two of them whose ends share one index, a process started
//! by `ip netns exec`, and one by `unshare -n`; and a user's podman-looking cgroup with a FIFO
//! for its container list, which must neither stall `dropscope report` nor name the namespace
//! unlabelled. Needs root.
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

use dropscope_tests::{
    Netns, root_test, run,
    wait::{netns_of, until},
};
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

/// Waits until `pid` runs `comm` (the spawned command has unshared and exec'd it: between the
/// two, its namespace is new and its name still the launcher's, `unshare`).
fn running(pid: u32, comm: &str) {
    until(&format!("process {pid} running {comm}"), || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
    });
}

/// The name of interface `index` in namespace `ino`, once the worker has read them.
fn device(names: &mut Names, ino: u64, index: u32) -> Option<std::sync::Arc<str>> {
    if let Some(name) = names.device(ino, index) {
        return Some(name);
    }
    assert!(
        names.wait_idle(Duration::from_secs(5)),
        "no interfaces in 5 s"
    );
    names.device(ino, index)
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
    running(loner.0.id(), "sleep");

    let mut names = Names::new();
    // Nothing is known at first, and asking does not wait: the first question is answered at
    // once, without a name (the scan it starts may answer the next ones already).
    assert_eq!(names.netns(ino_a), None);
    assert!(
        names.wait_idle(Duration::from_secs(5)),
        "names not found in 5 s"
    );
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

    assert_eq!(device(&mut names, ino_a, ia).as_deref(), Some("veth-a"));
    assert_eq!(device(&mut names, ino_b, ib).as_deref(), Some("veth-b"));
    assert_eq!(device(&mut names, ino_a, 1).as_deref(), Some("lo"));
    assert_eq!(device(&mut names, ino_loner, 1).as_deref(), Some("lo"));
    assert_eq!(device(&mut names, ino_a, ia).as_deref(), Some("veth-a"));
    assert_eq!(
        names.device_reads(),
        3,
        "one read per namespace, then the cache"
    );
    // An index that does not exist: one more read of a, not one per call.
    for _ in 0..50 {
        assert_eq!(device(&mut names, ino_a, 4242), None);
    }
    assert!(names.device_reads() <= 4, "{} reads", names.device_reads());

    // Our own namespace: `host` if it is the initial one.
    let ours = inode("/proc/self/ns/net");
    let initial = std::fs::metadata("/proc/1/ns/net").map(|m| m.ino()).ok();
    if initial == Some(ours) || ours == 0xEFFF_FFF9 {
        names.netns(ours);
        assert!(names.wait_idle(Duration::from_secs(5)));
        assert_eq!(names.netns(ours).as_deref(), Some("host"));
    }

    // A namespace made after the scan is found by the next one, at most once a second.
    let c = Netns::new("names-c");
    let ino_c = inode(format!("/run/netns/{}", c.name));
    let scans = names.scans();
    assert_eq!(names.netns(ino_c), None);
    assert!(names.wait_idle(Duration::from_secs(5)));
    assert_eq!(names.netns(ino_c).as_deref(), Some(c.name.as_str()));
    assert_eq!(names.scans(), scans + 1);
    assert_eq!(names.netns(ino_c + 1_000_000), None);
    assert_eq!(names.scans(), scans + 1, "no second scan within a second");
    assert!(names.wait_idle(Duration::from_secs(5)));
    assert_eq!(
        names.scans(),
        scans + 2,
        "the asked-for inode is looked for"
    );
    for _ in 0..100 {
        assert_eq!(names.netns(ino_c + 1_000_000), None);
    }
    assert!(names.wait_idle(Duration::from_secs(5)));
    assert_eq!(
        names.scans(),
        scans + 2,
        "an unknown inode is looked for once, not per call"
    );

    drop((sleeper, loner));
    let all = [a.name.clone(), b.name.clone(), c.name.clone()];
    drop((a, b, c));
    for name in all {
        assert!(!Netns::exists(&name), "namespace {name} left behind");
    }
}

/// A temporary unprivileged user with a home of its own, removed (with its group) when dropped.
struct TempUser {
    name: String,
    uid: u32,
    gid: u32,
    home: tempfile::TempDir,
}

impl TempUser {
    fn new(name: &str) -> Self {
        // A user left by a killed run goes first.
        let _ = Command::new("userdel")
            .arg(name)
            .stderr(Stdio::null())
            .status();
        let home = tempfile::tempdir().expect("tempdir");
        run(Command::new("useradd")
            .args([
                "--no-create-home",
                "--user-group",
                "--shell",
                "/usr/sbin/nologin",
                "--home-dir",
            ])
            .arg(home.path())
            .arg(name));
        let id = |flag: &str| -> u32 {
            let out = run(Command::new("id").args([flag, name]));
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("a numeric id")
        };
        let (uid, gid) = (id("-u"), id("-g"));
        std::os::unix::fs::chown(home.path(), Some(uid), Some(gid)).expect("chown home");
        Self {
            name: name.to_string(),
            uid,
            gid,
            home,
        }
    }

    /// Creates `rel` under the home, every directory owned by the user.
    fn mkdirs(&self, rel: &str) -> std::path::PathBuf {
        let mut dir = self.home.path().to_path_buf();
        for part in rel.split('/') {
            dir.push(part);
            std::fs::create_dir(&dir).expect("mkdir");
            std::os::unix::fs::chown(&dir, Some(self.uid), Some(self.gid)).expect("chown");
        }
        dir
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        match Command::new("userdel").arg(&self.name).status() {
            Ok(s) if s.success() => {}
            other => eprintln!("could not remove user {}: {other:?}", self.name),
        }
    }
}

/// Cgroup directories made in the unified hierarchy, removed (innermost first) when dropped.
struct Cgroups(Vec<std::path::PathBuf>);

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            // A killed process leaves its cgroup a moment after it is reaped.
            let gone = (0..100).any(|_| {
                std::fs::remove_dir(dir).is_ok() || {
                    std::thread::sleep(Duration::from_millis(20));
                    false
                }
            });
            if !gone {
                eprintln!("could not remove cgroup {}", dir.display());
            }
        }
    }
}

/// Where the unified (v2) cgroup hierarchy is mounted, from mountinfo.
fn cgroup2_mount() -> std::path::PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    info.lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            (right.split(' ').next()? == "cgroup2").then(|| left.split(' ').nth(4))?
        })
        .map(Into::into)
        .expect("a cgroup2 mount")
}

#[test]
fn a_fifo_in_a_users_podman_scope_neither_stalls_report_nor_names_it_unlabelled() {
    let _serial = dropscope_tests::root_test();
    let user = TempUser::new(&format!("dsnames{}", std::process::id() % 100_000));
    let (uid, gid) = (user.uid, user.gid);
    // Where a rootless podman of this user keeps its container list: a FIFO.
    let list = user
        .mkdirs(".local/share/containers/storage/overlay-containers")
        .join("containers.json");
    let c = std::ffi::CString::new(list.to_str().expect("utf-8")).expect("path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
    std::os::unix::fs::chown(&list, Some(uid), Some(gid)).expect("chown fifo");

    // A podman-looking scope in the user's delegated cgroup, as a user session can make.
    let id: String = (0..64)
        .map(|i| char::from(b"0123456789abcdef"[(i * 7 + std::process::id() as usize) % 16]))
        .collect();
    let mut cgroups = Cgroups(Vec::new());
    let mut dir = cgroup2_mount();
    let parts = [
        "user.slice".to_string(),
        format!("user-{uid}.slice"),
        format!("user@{uid}.service"),
        "user.slice".into(),
        format!("libpod-{id}.scope"),
    ];
    for (i, part) in parts.iter().enumerate() {
        dir.push(part);
        if !dir.exists() {
            std::fs::create_dir(&dir).expect("mkdir cgroup");
            cgroups.0.push(dir.clone());
        }
        if i >= 2 {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown cgroup");
        }
    }

    // The user's process, in a network namespace of its own, in that scope.
    let sleeper = spawn(&[
        "unshare",
        "-n",
        "setpriv",
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--clear-groups",
        "--inh-caps=-all",
        "sleep",
        "60",
    ]);
    let pid = sleeper.0.id();
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).expect("join the scope");
    let ino = netns_of(pid);
    until("the process running as the user", || {
        std::fs::metadata(format!("/proc/{pid}"))
            .map(|m| m.uid())
            .ok()
            == Some(uid)
    });
    assert_eq!(
        std::fs::metadata(format!("/proc/{pid}"))
            .map(|m| m.uid())
            .ok(),
        Some(uid),
        "the process runs as the user"
    );
    let ns = format!("--net=/proc/{pid}/ns/net");
    run(Command::new("nsenter").args([&ns, "ip", "link", "set", "lo", "up"]));

    let started = std::time::Instant::now();
    let report = dropscope_tests::Counting::start(&[
        "report",
        "--duration",
        "3",
        "--format",
        "json",
        "--by",
        "reason,location,netns",
        "--netns",
        &ino.to_string(),
    ]);
    let traffic = dropscope_tests::traffic_bin();
    run(Command::new("nsenter")
        .arg(&ns)
        .arg(&traffic)
        .args(["udp", "9", "200"]));
    // A 3 s report: a name lookup that blocked on the user's files would keep it running past
    // the bound (only a defect exceeds 60 s; the time is printed, not asserted).
    let out = report.wait_within(Duration::from_secs(60));
    eprintln!("the report took {:?}", started.elapsed());
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(
        dropscope_tests::keyed_overflow_total(&json),
        (200, 0, 200),
        "{json:#}"
    );
    let drops = json["drops"].as_array().expect("drops");
    assert_eq!(drops.len(), 1, "{json:#}");
    assert_eq!(drops[0]["reason"], "NO_SOCKET");
    assert_eq!(drops[0]["netns"], ino);
    assert_eq!(
        drops[0]["netns_name"],
        format!("user {uid}: podman:{}", &id[..12]),
        "the FIFO is refused and the scope's name is the user's claim"
    );
    drop((sleeper, cgroups, user));
    assert!(
        !std::fs::read_to_string("/etc/passwd")
            .expect("passwd")
            .contains(&format!(":{uid}:{gid}:")),
        "the user is left behind"
    );
}
