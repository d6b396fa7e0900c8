//! Container and pod names from the engines' metadata on disk, where it is readable: Docker's
//! `config.v2.json`, Podman's `containers.json`, kubelet's `/var/log/pods` directory names, and a
//! process's `HOSTNAME`. Every file is read through [`read_bounded`]: never through a symlink,
//! never blocking on a FIFO or device, only a regular file of bounded size with the owner it
//! should have; a missing or odd file means "no name".

use std::{
    collections::HashMap,
    fs::OpenOptions,
    io::{self, Read},
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use super::cgroup::Engine;

/// Where the engines keep their metadata (the real paths by default; tests point elsewhere).
#[derive(Debug, Clone)]
pub struct Roots {
    /// The proc file system (`/proc`).
    pub proc: PathBuf,
    /// Named network namespaces of `ip netns add` (`/run/netns`).
    pub netns: PathBuf,
    /// Docker's container directories (`/var/lib/docker/containers`).
    pub docker: PathBuf,
    /// Podman's (rootful) container list (`…/overlay-containers/containers.json`); rootless
    /// containers' lists are found under their user's home, from `passwd`.
    pub podman: PathBuf,
    /// The user database, for the home of a rootless container's user (`/etc/passwd`).
    pub passwd: PathBuf,
    /// Kubelet's pod log directories, named `NAMESPACE_NAME_UID` (`/var/log/pods`).
    pub pods: PathBuf,
    /// The unified (v2) cgroup hierarchy (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
    /// hybrid system): who owns a process's cgroup directories.
    pub cgroup: PathBuf,
    /// The user that must own the system's own metadata (Podman's rootful list, Docker's
    /// configs, `passwd`): root (0).
    pub admin: u32,
}

impl Default for Roots {
    fn default() -> Self {
        let cgroup = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/unified"
        };
        Self {
            proc: "/proc".into(),
            netns: "/run/netns".into(),
            docker: "/var/lib/docker/containers".into(),
            podman: "/var/lib/containers/storage/overlay-containers/containers.json".into(),
            pods: "/var/log/pods".into(),
            passwd: "/etc/passwd".into(),
            cgroup: cgroup.into(),
            admin: 0,
        }
    }
}

/// Reads at most `limit` bytes of a regular file owned by `owner` (any owner if None). The
/// file is opened without following a symlink in its last component and without blocking (a
/// FIFO or a device is refused, not waited on); a larger file is an error (never half a JSON).
pub fn read_bounded(path: &Path, limit: u64, owner: Option<u32>) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if let Some(uid) = owner
        && meta.uid() != uid
    {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("owned by uid {}, not {uid}", meta.uid()),
        ));
    }
    // Files of /proc say 0 here: the read below is bounded anyway.
    if meta.len() > limit {
        return Err(io::Error::other("file too large"));
    }
    let mut buf = Vec::new();
    file.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::other("file too large"));
    }
    Ok(buf)
}

/// A container's name from its engine's metadata when readable, and whose claim it is: None
/// for the system's own metadata, `Some(uid)` for a list in that user's home. `user` is the
/// (non-root) user the container belongs to, if any: a rootless Podman keeps its list in that
/// user's home, which must be owned by that user.
pub fn container_name(
    roots: &Roots,
    podman: &mut PodmanNames,
    engine: Engine,
    id: &str,
    user: Option<u32>,
) -> Option<(String, Option<u32>)> {
    match engine {
        Engine::Docker => Some((docker_name(roots, id)?, None)),
        Engine::Podman => match podman.get(&roots.podman, roots.admin, id) {
            Some(name) => Some((name, None)),
            None => {
                let uid = user.filter(|&u| u != 0)?;
                let home = home_of(roots, uid)?;
                Some((podman.get(&home.join(ROOTLESS_PODMAN), uid, id)?, Some(uid)))
            }
        },
        Engine::Cri | Engine::Containerd => None,
    }
}

/// Where a rootless Podman keeps its container list, under its user's home.
const ROOTLESS_PODMAN: &str = ".local/share/containers/storage/overlay-containers/containers.json";

/// The home directory of `uid` in the passwd file (`name:x:uid:gid:gecos:home:shell`).
fn home_of(roots: &Roots, uid: u32) -> Option<PathBuf> {
    let text = read_bounded(&roots.passwd, 4 << 20, Some(roots.admin)).ok()?;
    String::from_utf8_lossy(&text).lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let home = fields.get(5).filter(|h| h.starts_with('/'))?;
        (fields.get(2)?.parse() == Ok(uid)).then(|| PathBuf::from(home))
    })
}

/// Docker's name for a container (`"Name": "/web"` becomes `web`), from its root-owned config.
fn docker_name(roots: &Roots, id: &str) -> Option<String> {
    let path = roots.docker.join(id).join("config.v2.json");
    let bytes = read_bounded(&path, 4 << 20, Some(roots.admin)).ok()?;
    let config: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let name = config.get("Name")?.as_str()?.trim_start_matches('/');
    (!name.is_empty()).then(|| name.to_string())
}

/// Podman's container names, read at most once per scan from each `containers.json`
/// (`[{"id", "names"}]`).
#[derive(Debug, Default)]
pub struct PodmanNames {
    by_file: HashMap<PathBuf, HashMap<String, String>>,
}

impl PodmanNames {
    /// The name of container `id` in the list `file`, which must be owned by `owner`.
    fn get(&mut self, file: &Path, owner: u32, id: &str) -> Option<String> {
        let by_id = self
            .by_file
            .entry(file.to_path_buf())
            .or_insert_with(|| load_podman(file, owner));
        by_id.get(id).cloned()
    }
}

fn load_podman(file: &Path, owner: u32) -> HashMap<String, String> {
    let Ok(bytes) = read_bounded(file, 32 << 20, Some(owner)) else {
        return HashMap::new();
    };
    let Ok(serde_json::Value::Array(list)) = serde_json::from_slice(&bytes) else {
        return HashMap::new();
    };
    list.iter()
        .filter_map(|c| {
            let id = c.get("id")?.as_str()?;
            let name = c.get("names")?.as_array()?.first()?.as_str()?;
            Some((id.to_string(), name.to_string()))
        })
        .collect()
}

/// A pod's `NAMESPACE/NAME` from kubelet's log directory `NAMESPACE_NAME_UID`.
pub fn pod_name(pods: &Path, uid: &str) -> Option<String> {
    let suffix = format!("_{uid}");
    std::fs::read_dir(pods).ok()?.flatten().find_map(|e| {
        let dir = e.file_name().into_string().ok()?;
        let (ns, name) = dir.strip_suffix(&suffix)?.split_once('_')?;
        Some(format!("{ns}/{name}"))
    })
}

/// A variable of a process's environment (`/proc/PID/environ`, of at most 256 KiB).
pub fn environ_var(proc_pid: &Path, var: &str) -> Option<String> {
    let buf = read_bounded(&proc_pid.join("environ"), 256 << 10, None).ok()?;
    buf.split(|&b| b == 0).find_map(|kv| {
        let value = kv.strip_prefix(var.as_bytes())?.strip_prefix(b"=")?;
        (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use std::{ffi::CString, os::unix::ffi::OsStrExt};

    use super::*;

    /// This process's effective uid: the owner of the files tests write.
    fn me() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    fn roots(dir: &Path) -> Roots {
        Roots {
            docker: dir.join("docker"),
            podman: dir.join("containers.json"),
            pods: dir.join("pods"),
            passwd: dir.join("passwd"),
            admin: me(),
            ..Roots::default()
        }
    }

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// A passwd file giving `uid` the home `home`.
    fn passwd(dir: &Path, home: &Path, uid: u32) {
        let line = format!("alice:x:{uid}:{uid}::{}:/bin/sh\n", home.display());
        std::fs::write(
            dir.join("passwd"),
            format!("root:x:0:0::/root:/bin/sh\nbad line\n{line}"),
        )
        .expect("write");
    }

    #[test]
    fn docker_podman_and_pod_names_from_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = "ab".repeat(32);
        let cdir = dir.path().join("docker").join(&id);
        std::fs::create_dir_all(&cdir).expect("mkdir");
        std::fs::write(cdir.join("config.v2.json"), r#"{"ID":"x","Name":"/web-1"}"#)
            .expect("write");
        let roots = roots(dir.path());
        std::fs::write(
            &roots.podman,
            format!(r#"[{{"id":"{id}","names":["db"]}}]"#),
        )
        .expect("write");
        let pods = dir.path().join("pods");
        std::fs::create_dir_all(pods.join("default_nginx-7c9_0c7a1d4e-93b2")).expect("mkdir");
        let mut p = PodmanNames::default();
        assert_eq!(
            container_name(&roots, &mut p, Engine::Docker, &id, None),
            Some(("web-1".into(), None))
        );
        assert_eq!(
            container_name(&roots, &mut p, Engine::Podman, &id, Some(1000)),
            Some(("db".into(), None)),
            "the rootful list is the system's"
        );
        assert_eq!(
            container_name(&roots, &mut p, Engine::Docker, &"cd".repeat(32), None),
            None
        );
        assert_eq!(
            pod_name(&pods, "0c7a1d4e-93b2").as_deref(),
            Some("default/nginx-7c9")
        );
        assert_eq!(pod_name(&pods, "93b2"), None);
    }

    /// A rootless list of container `id` under `home`, owned by a user other than root (the
    /// test's own uid, or 4242 when the test runs as root); returns that user.
    fn rootless_list(home: &Path, id: &str) -> u32 {
        let list = home.join(ROOTLESS_PODMAN);
        std::fs::create_dir_all(list.parent().expect("parent")).expect("mkdir");
        std::fs::write(&list, format!(r#"[{{"id":"{id}","names":["alices-db"]}}]"#))
            .expect("write");
        if me() != 0 {
            return me();
        }
        std::os::unix::fs::chown(&list, Some(4242), Some(4242)).expect("chown");
        4242
    }

    #[test]
    fn rootless_podman_names_from_the_users_home_are_the_users_claim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = "ef".repeat(32);
        let home = dir.path().join("home/alice");
        let user = rootless_list(&home, &id);
        passwd(dir.path(), &home, user);
        let roots = roots(dir.path());
        let name = |uid| {
            container_name(
                &roots,
                &mut PodmanNames::default(),
                Engine::Podman,
                &id,
                uid,
            )
        };
        assert_eq!(name(Some(user)), Some(("alices-db".into(), Some(user))));
        assert_eq!(
            name(Some(user + 1)),
            None,
            "another user's home is not looked in"
        );
        assert_eq!(name(Some(0)), None, "root has no rootless list");
        assert_eq!(name(None), None);
        assert_eq!(home_of(&roots, user), Some(home));
    }

    #[test]
    fn a_rootless_list_not_owned_by_its_user_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = "ef".repeat(32);
        let home = dir.path().join("home/alice");
        let owner = rootless_list(&home, &id);
        // passwd says the home is another user's: the list there is not that user's.
        passwd(dir.path(), &home, owner + 1);
        let roots = roots(dir.path());
        let mut p = PodmanNames::default();
        assert_eq!(
            container_name(&roots, &mut p, Engine::Podman, &id, Some(owner + 1)),
            None
        );
        // And passwd itself must be the admin's.
        passwd(dir.path(), &home, owner);
        let roots = Roots {
            admin: me() + 1,
            ..roots
        };
        assert_eq!(home_of(&roots, owner), None);
    }

    #[test]
    fn bounded_reads_refuse_large_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("big");
        std::fs::write(&f, vec![b'x'; 100]).expect("write");
        assert!(read_bounded(&f, 99, None).is_err());
        assert_eq!(read_bounded(&f, 100, None).expect("read").len(), 100);
        assert_eq!(read_bounded(&f, 100, Some(me())).expect("read").len(), 100);
        let err = read_bounded(&f, 100, Some(me().wrapping_add(1))).expect_err("owner");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn bounded_reads_refuse_fifos_symlinks_and_directories_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let real = dir.path().join("real");
        std::fs::write(&real, "[]").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let r = |p: &str| read_bounded(&d.join(p), 1 << 20, None).map_err(|e| e.kind());
            let _ = tx.send((r("fifo"), r("link"), r("."), r("real")));
        });
        let (fifo, link, dot, real) = rx
            .recv_timeout(std::time::Duration::from_secs(2))
            .expect("a read of a FIFO blocked");
        assert_eq!(fifo, Err(io::ErrorKind::InvalidInput));
        assert!(link.is_err(), "a symlink was followed");
        assert_eq!(dot, Err(io::ErrorKind::InvalidInput));
        assert_eq!(real, Ok(b"[]".to_vec()));
    }

    #[test]
    fn environ_variables() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("environ"),
            b"PATH=/bin\0HOSTNAMEX=no\0HOSTNAME=nginx-7c9\0",
        )
        .expect("write");
        assert_eq!(
            environ_var(dir.path(), "HOSTNAME").as_deref(),
            Some("nginx-7c9")
        );
        assert_eq!(environ_var(dir.path(), "HOME"), None);
    }
}
