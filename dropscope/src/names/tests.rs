//! The naming rule, the scan's rate limit, and hostile metadata (FIFOs, symlinks, files of the
//! wrong owner) against a fake `/proc`, `/run/netns` and home tree.

use std::{
    ffi::CString,
    os::unix::{ffi::OsStrExt, fs::symlink},
    path::Path,
    sync::mpsc,
};

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
            cgroup: self.path("cgroup"),
            admin: me(),
        })
    }

    /// A passwd file giving `uid` the home `home` (under the fake tree); returns the rootless
    /// Podman list's path there, its directory made.
    fn home(&self, uid: u32) -> PathBuf {
        let home = self.path(&format!("home/u{uid}"));
        fs::write(
            self.path("passwd"),
            format!(
                "root:x:0:0::/root:/bin/sh\nu:x:{uid}:{uid}::{}:/bin/sh\n",
                home.display()
            ),
        )
        .expect("write");
        let list = home.join(".local/share/containers/storage/overlay-containers/containers.json");
        fs::create_dir_all(list.parent().expect("parent")).expect("mkdir");
        list
    }
}

/// This process's effective uid: the owner of the files tests write.
fn me() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// The cgroup file of a rootless Podman container of `uid`, in a scope its session created.
fn rootless_cgroup(uid: u32) -> String {
    format!(
        "0::/user.slice/user-{uid}.slice/user@{uid}.service/user.slice/libpod-{DOCKER_ID}.scope\n"
    )
}

/// The name of `inode` once the worker has looked (None if it found none).
fn name(names: &mut Names, inode: u64) -> Option<String> {
    if let Some(n) = names.netns(inode) {
        return Some(n.to_string());
    }
    assert!(
        names.wait_idle(Duration::from_secs(5)),
        "the lookup took over 5 s"
    );
    names.netns(inode).map(|n| n.to_string())
}

/// Asks for `inode` on another thread and fails unless the answer comes within 100 ms.
fn answers_at_once(names: Names, inode: u64) -> (Names, Option<Arc<str>>) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut names = names;
        let got = names.netns(inode);
        let _ = tx.send((names, got));
    });
    rx.recv_timeout(Duration::from_millis(100))
        .expect("netns() did not answer within 100 ms")
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
fn only_names_root_gave_are_given_by_root() {
    for name in [
        "host",
        "docker:web",
        "blue",
        "isolated.service",
        "pod:shop/shop-0",
        "a[b]",
    ] {
        assert!(given_by_root(name), "{name}");
    }
    // Any user can start a process named anything in a namespace of their own, and claim a
    // container or service in a cgroup delegated to them.
    for name in [
        "unshare[15]",
        "docker:web[4242]",
        "user 1000: podman:web",
        "[1]",
    ] {
        assert!(!given_by_root(name), "{name}");
    }
}

#[test]
fn hostile_names_are_bounded_not_altered() {
    let f = Fake::new();
    let long = format!("\u{1b}[2J{}", "é".repeat(100));
    let ino = f.named(&long);
    let mut n = f.names();
    let got = name(&mut n, ino).expect("named");
    assert_eq!(got.chars().count(), MAX_NAME);
    assert!(long.starts_with(&*got));
}

#[test]
fn scans_only_for_unknown_inodes_and_at_most_once_a_second() {
    let f = Fake::new();
    f.process(2, 200, SESSION, "a");
    let mut n = f.names();
    n.shared.lock().min_interval = Duration::from_millis(300);
    let generation = n.generation();
    assert_eq!(
        n.netns(200),
        None,
        "the first answer does not wait for the scan"
    );
    assert_eq!(name(&mut n, 200).as_deref(), Some("a[2]"));
    assert_ne!(n.generation(), generation, "news for callers that got None");
    assert_eq!(name(&mut n, 200).as_deref(), Some("a[2]"));
    assert_eq!(n.scans(), 1);

    // A new namespace appears: the next scan waits for the interval, then finds it.
    f.process(3, 300, SESSION, "b");
    let asked = Instant::now();
    assert_eq!(n.netns(300), None);
    assert_eq!(name(&mut n, 300).as_deref(), Some("b[3]"));
    assert!(
        asked.elapsed() >= Duration::from_millis(200),
        "rate-limited"
    );
    assert_eq!(n.scans(), 2);

    // An inode no scan finds is not looked for on every call.
    assert_eq!(name(&mut n, 999), None);
    assert_eq!(n.scans(), 3);
    for _ in 0..100 {
        assert_eq!(n.netns(999), None);
    }
    std::thread::sleep(Duration::from_millis(400));
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
fn a_scan_that_learns_nothing_new_is_no_news() {
    let f = Fake::new();
    f.process(2, 200, SESSION, "a");
    let mut n = f.names();
    n.shared.lock().min_interval = Duration::from_millis(50);
    assert_eq!(name(&mut n, 200).as_deref(), Some("a[2]"));
    let learnt = n.generation();
    // An inode no scan finds: a scan runs, finds the same names, and says nothing changed (a
    // caller would otherwise read everything again for nothing).
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(name(&mut n, 999), None);
    assert_eq!(n.scans(), 2);
    assert_eq!(n.generation(), learnt, "nothing new");
    // A namespace that comes is news.
    f.process(3, 300, SESSION, "b");
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(name(&mut n, 300).as_deref(), Some("b[3]"));
    assert_ne!(n.generation(), learnt);
}

#[test]
fn devices_of_a_fake_namespace_are_none_and_rate_limited() {
    let f = Fake::new();
    f.process(2, 200, SESSION, "a");
    let mut n = f.names();
    // The fake link cannot be opened as a namespace: no interfaces, and no storm of retries.
    for _ in 0..10 {
        assert_eq!(n.device(200, 1), None);
        assert!(n.wait_idle(Duration::from_secs(5)));
    }
    assert!(n.device_reads() <= 2, "{} reads", n.device_reads());
    assert_eq!(n.scans(), 1);
    assert!(!Path::new(&f.path("proc/2/ns/net")).exists());
}

#[test]
fn a_fifo_as_containers_json_does_not_block() {
    let f = Fake::new();
    // A user (not the admin) whose session made a podman-looking scope, with FIFOs where the
    // rootful and the rootless lists would be.
    let user = me() + 1000;
    f.process(2, 600, &rootless_cgroup(user), "sleep");
    mkfifo(&f.home(user));
    mkfifo(&f.path("containers.json"));
    let (n, got) = answers_at_once(f.names(), 600);
    assert_eq!(got, None);
    assert!(
        n.wait_idle(Duration::from_secs(2)),
        "the lookup is stuck on a FIFO"
    );
    let (_, got) = answers_at_once(n, 600);
    assert_eq!(
        got.as_deref(),
        Some(format!("user {user}: podman:{}", &DOCKER_ID[..12]).as_str()),
        "the FIFOs are refused; the cgroup's name is its user's claim"
    );
}

#[test]
fn a_symlinked_list_is_not_followed() {
    let f = Fake::new();
    f.process(
        2,
        600,
        &format!("0::/machine.slice/libpod-{DOCKER_ID}.scope\n"),
        "db",
    );
    let real = f.path("real.json");
    fs::write(&real, format!(r#"[{{"id":"{DOCKER_ID}","names":["db"]}}]"#)).expect("write");
    symlink(&real, f.path("containers.json")).expect("symlink");
    let short = format!("podman:{}", &DOCKER_ID[..12]);
    assert_eq!(name(&mut f.names(), 600), Some(short));
    // The same list, not through a symlink, names it.
    fs::remove_file(f.path("containers.json")).expect("rm");
    fs::rename(&real, f.path("containers.json")).expect("mv");
    assert_eq!(name(&mut f.names(), 600).as_deref(), Some("podman:db"));
}

/// Writes a rootless list naming the container `db` at `list`, owned by a user other than the
/// admin (4242 as root, else the test's own uid, which then stands for the user); returns it.
fn users_list(list: &Path) -> u32 {
    fs::write(list, format!(r#"[{{"id":"{DOCKER_ID}","names":["db"]}}]"#)).expect("write");
    if me() != 0 {
        return me();
    }
    std::os::unix::fs::chown(list, Some(4242), Some(4242)).expect("chown");
    4242
}

#[test]
fn a_rootless_name_is_labelled_as_its_users_claim() {
    let f = Fake::new();
    let uid = if me() == 0 { 4242 } else { me() };
    let owner = users_list(&f.home(uid));
    assert_eq!(owner, uid);
    f.process(2, 600, &rootless_cgroup(uid), "db");
    assert_eq!(
        name(&mut f.names(), 600),
        Some(format!("user {uid}: podman:db"))
    );
}

#[test]
fn a_list_owned_by_another_user_is_refused() {
    let f = Fake::new();
    // uid `other`'s home holds a list that someone else owns.
    let other = if me() == 0 { 4243 } else { me() + 1 };
    let owner = users_list(&f.home(other));
    assert_ne!(owner, other);
    f.process(2, 600, &rootless_cgroup(other), "db");
    assert_eq!(
        name(&mut f.names(), 600),
        Some(format!("user {other}: podman:{}", &DOCKER_ID[..12]))
    );
}

#[test]
fn cgroups_in_a_directory_a_user_owns_are_that_users_claim() {
    let f = Fake::new();
    let path = format!("/delegated/docker-{DOCKER_ID}.scope");
    fs::create_dir_all(f.path(&format!("cgroup{path}"))).expect("mkdir");
    f.process(2, 600, &format!("0::{path}\n"), "x");
    // The admin stands in for root: the directories are someone else's.
    let mut roots = f.names().shared.roots.clone();
    roots.admin = me() + 1;
    assert_eq!(
        name(&mut Names::with_roots(roots), 600),
        Some(format!("user {}: docker:{}", me(), &DOCKER_ID[..12]))
    );
    // The same as the admin's: no claim.
    assert_eq!(
        name(&mut f.names(), 600),
        Some(format!("docker:{}", &DOCKER_ID[..12]))
    );
}
