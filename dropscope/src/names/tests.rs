//! The naming rule and the scan's rate limit, against a fake `/proc` and `/run/netns` tree.

use std::{os::unix::fs::symlink, path::Path};

use super::*;

const DOCKER_ID: &str = "3f1c0e9a5b7d2c4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6";
const SESSION: &str = "0::/user.slice/user-0.slice/session-3.scope\n";

struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["proc", "netns", "docker", "pods"] {
            fs::create_dir(dir.path().join(d)).expect("mkdir");
        }
        let fake = Self { dir };
        fake.process(1, 100, "0::/init.scope\n", "systemd");
        fake
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// A process `pid` in namespace `inode` with a cgroup file and a command name.
    fn process(&self, pid: u32, inode: u64, cgroup: &str, comm: &str) {
        let dir = self.path(&format!("proc/{pid}"));
        fs::create_dir_all(dir.join("ns")).expect("mkdir");
        symlink(format!("net:[{inode}]"), dir.join("ns/net")).expect("symlink");
        fs::write(dir.join("cgroup"), cgroup).expect("write");
        fs::write(dir.join("comm"), format!("{comm}\n")).expect("write");
    }

    /// A `/run/netns` entry; returns its inode (a plain file stands in for the nsfs mount).
    fn named(&self, name: &str) -> u64 {
        let p = self.path(&format!("netns/{name}"));
        fs::write(&p, "").expect("write");
        fs::metadata(&p).expect("stat").ino()
    }

    fn names(&self) -> Names {
        Names::with_roots(Roots {
            proc: self.path("proc"),
            netns: self.path("netns"),
            docker: self.path("docker"),
            podman: self.path("containers.json"),
            pods: self.path("pods"),
            passwd: self.path("passwd"),
        })
    }
}

fn name(names: &mut Names, inode: u64) -> Option<String> {
    names.netns(inode).map(|n| n.to_string())
}

#[test]
fn the_naming_rule() {
    let f = Fake::new();
    f.process(2, 100, SESSION, "bash");
    // A docker container, joined by a debugging shell from a login session.
    f.process(10, 200, SESSION, "nsenter");
    f.process(
        11,
        200,
        &format!("0::/system.slice/docker-{DOCKER_ID}.scope\n"),
        "nginx",
    );
    let cdir = f.path(&format!("docker/{DOCKER_ID}"));
    fs::create_dir(&cdir).expect("mkdir");
    fs::write(cdir.join("config.v2.json"), r#"{"Name":"/web"}"#).expect("write");
    // An ip-netns namespace with a service that ran `ip netns exec` in it.
    let blue = f.named("blue");
    f.process(12, blue, "0::/system.slice/vpn.service\n", "openvpn");
    // A service with PrivateNetwork=yes.
    f.process(13, 300, "0::/system.slice/isolated.service\n", "isolated");
    f.process(14, 300, SESSION, "bash");
    // `unshare -n` from a login shell.
    f.process(16, 400, SESSION, "sleep");
    f.process(15, 400, SESSION, "unshare");
    // A pod whose containers carry HOSTNAME; kubelet's log directory is absent.
    let pod = "/kubepods.slice/kubepods-pod0c7a1d4e_93b2_4f6a.slice";
    f.process(20, 500, &format!("0::{pod}\n"), "pause");
    f.process(
        21,
        500,
        &format!("0::{pod}/cri-containerd-{DOCKER_ID}.scope\n"),
        "app",
    );
    fs::write(f.path("proc/21/environ"), "HOSTNAME=shop-0\0").expect("write");
    // A docker container whose metadata is unreadable, also named by ip netns.
    let alias = f.named("alias");
    f.process(
        30,
        alias,
        &format!("0::/docker/{}\n", "ab".repeat(32)),
        "redis",
    );

    let mut n = f.names();
    assert_eq!(name(&mut n, 100).as_deref(), Some("host"));
    assert_eq!(name(&mut n, 200).as_deref(), Some("docker:web"));
    assert_eq!(name(&mut n, blue).as_deref(), Some("blue"));
    assert_eq!(name(&mut n, 300).as_deref(), Some("isolated.service"));
    assert_eq!(name(&mut n, 400).as_deref(), Some("unshare[15]"));
    assert_eq!(name(&mut n, 500).as_deref(), Some("pod:shop-0"));
    assert_eq!(name(&mut n, alias).as_deref(), Some("docker:abababababab"));
    assert_eq!(n.scans(), 1, "one scan named them all");
    assert_eq!(n.enter_path(blue), Some(f.path("netns/blue")));
    assert_eq!(n.enter_path(200), Some(f.path("proc/10/ns/net")));

    // Kubelet's directory gives the pod's namespace and name.
    fs::create_dir(f.path("pods/shop_shop-0_0c7a1d4e-93b2-4f6a")).expect("mkdir");
    let mut n = f.names();
    assert_eq!(name(&mut n, 500).as_deref(), Some("pod:shop/shop-0"));
}

#[test]
fn hostile_names_are_bounded_not_altered() {
    let f = Fake::new();
    let long = format!("\u{1b}[2J{}", "é".repeat(100));
    let ino = f.named(&long);
    let mut n = f.names();
    let got = n.netns(ino).expect("named");
    assert_eq!(got.chars().count(), MAX_NAME);
    assert!(long.starts_with(&*got));
}

#[test]
fn scans_only_for_unknown_inodes_and_at_most_once_a_second() {
    let f = Fake::new();
    f.process(2, 200, SESSION, "a");
    let mut n = f.names();
    n.min_interval = Duration::from_millis(200);
    assert_eq!(name(&mut n, 200).as_deref(), Some("a[2]"));
    assert_eq!(name(&mut n, 200).as_deref(), Some("a[2]"));
    assert_eq!(n.scans(), 1);

    // A new namespace appears: not found until the interval has passed.
    f.process(3, 300, SESSION, "b");
    assert_eq!(name(&mut n, 300), None);
    assert_eq!(n.scans(), 1, "rate-limited");
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(name(&mut n, 300).as_deref(), Some("b[3]"));
    assert_eq!(n.scans(), 2);

    // An inode no scan finds is not looked for on every call.
    std::thread::sleep(Duration::from_millis(250));
    for _ in 0..100 {
        assert_eq!(name(&mut n, 999), None);
    }
    assert_eq!(n.scans(), 3);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(name(&mut n, 999), None);
    assert_eq!(n.scans(), 3, "a missed inode waits for miss_retry");
    // ... unless another unknown inode triggers a scan that finds it.
    f.process(4, 999, "0::/system.slice/late.service\n", "late");
    f.process(5, 555, SESSION, "c");
    assert_eq!(name(&mut n, 555).as_deref(), Some("c[5]"));
    assert_eq!(name(&mut n, 999).as_deref(), Some("late.service"));
    assert_eq!(n.scans(), 4);
}

#[test]
fn devices_of_a_fake_namespace_are_none_and_rate_limited() {
    let f = Fake::new();
    f.process(2, 200, SESSION, "a");
    let mut n = f.names();
    // The fake link cannot be opened as a namespace: no interfaces, and no storm of retries.
    for _ in 0..10 {
        assert_eq!(n.device(200, 1), None);
    }
    assert!(n.device_reads() <= 2, "{} reads", n.device_reads());
    assert_eq!(n.scans(), 1);
    assert!(!Path::new(&f.path("proc/2/ns/net")).exists());
}
