//! Container and pod names from the engines' metadata on disk, where it is readable: Docker's
//! `config.v2.json`, Podman's `containers.json`, kubelet's `/var/log/pods` directory names, and a
//! process's `HOSTNAME`. Every read is bounded; a missing or odd file means "no name".

use std::{
    collections::HashMap,
    fs::File,
    io::{self, Read},
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
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            proc: "/proc".into(),
            netns: "/run/netns".into(),
            docker: "/var/lib/docker/containers".into(),
            podman: "/var/lib/containers/storage/overlay-containers/containers.json".into(),
            pods: "/var/log/pods".into(),
            passwd: "/etc/passwd".into(),
        }
    }
}

/// Reads at most `limit` bytes of a file; a longer file is an error (never half a JSON).
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    File::open(path)?.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::other("file too large"));
    }
    Ok(buf)
}

/// The name of a container, from the engine's metadata when readable. `uid` owns the
/// container's process: a rootless Podman keeps its list in that user's home.
pub fn container_name(
    roots: &Roots,
    podman: &mut PodmanNames,
    engine: Engine,
    id: &str,
    uid: Option<u32>,
) -> Option<String> {
    match engine {
        Engine::Docker => docker_name(&roots.docker, id),
        Engine::Podman => podman.get(&roots.podman, id).or_else(|| {
            let home = home_of(&roots.passwd, uid.filter(|&u| u != 0)?)?;
            podman.get(&home.join(ROOTLESS_PODMAN), id)
        }),
        Engine::Cri | Engine::Containerd => None,
    }
}

/// Where a rootless Podman keeps its container list, under its user's home.
const ROOTLESS_PODMAN: &str = ".local/share/containers/storage/overlay-containers/containers.json";

/// The home directory of `uid` in a passwd file (`name:x:uid:gid:gecos:home:shell`).
fn home_of(passwd: &Path, uid: u32) -> Option<PathBuf> {
    let text = read_bounded(passwd, 4 << 20).ok()?;
    String::from_utf8_lossy(&text).lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let home = fields.get(5).filter(|h| h.starts_with('/'))?;
        (fields.get(2)?.parse() == Ok(uid)).then(|| PathBuf::from(home))
    })
}

/// Docker's name for a container (`"Name": "/web"` becomes `web`).
fn docker_name(dir: &Path, id: &str) -> Option<String> {
    let bytes = read_bounded(&dir.join(id).join("config.v2.json"), 4 << 20).ok()?;
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
    fn get(&mut self, file: &Path, id: &str) -> Option<String> {
        let by_id = self
            .by_file
            .entry(file.to_path_buf())
            .or_insert_with(|| load_podman(file));
        by_id.get(id).cloned()
    }
}

fn load_podman(file: &Path) -> HashMap<String, String> {
    let Ok(bytes) = read_bounded(file, 32 << 20) else {
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

/// A variable of a process's environment (`/proc/PID/environ`, read up to 256 KiB).
pub fn environ_var(proc_pid: &Path, var: &str) -> Option<String> {
    let mut buf = Vec::new();
    File::open(proc_pid.join("environ"))
        .ok()?
        .take(256 << 10)
        .read_to_end(&mut buf)
        .ok()?;
    buf.split(|&b| b == 0).find_map(|kv| {
        let value = kv.strip_prefix(var.as_bytes())?.strip_prefix(b"=")?;
        (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_podman_and_pod_names_from_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = "ab".repeat(32);
        let cdir = dir.path().join("docker").join(&id);
        std::fs::create_dir_all(&cdir).expect("mkdir");
        std::fs::write(cdir.join("config.v2.json"), r#"{"ID":"x","Name":"/web-1"}"#)
            .expect("write");
        let podman = dir.path().join("containers.json");
        std::fs::write(&podman, format!(r#"[{{"id":"{id}","names":["db"]}}]"#)).expect("write");
        let pods = dir.path().join("pods");
        std::fs::create_dir_all(pods.join("default_nginx-7c9_0c7a1d4e-93b2")).expect("mkdir");
        let roots = Roots {
            docker: dir.path().join("docker"),
            podman,
            pods: pods.clone(),
            ..Roots::default()
        };
        let mut p = PodmanNames::default();
        assert_eq!(
            container_name(&roots, &mut p, Engine::Docker, &id, None).as_deref(),
            Some("web-1")
        );
        assert_eq!(
            container_name(&roots, &mut p, Engine::Podman, &id, None).as_deref(),
            Some("db")
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

    #[test]
    fn rootless_podman_names_from_the_users_home() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = "ef".repeat(32);
        let home = dir.path().join("home/alice");
        let list = home.join(ROOTLESS_PODMAN);
        std::fs::create_dir_all(list.parent().expect("parent")).expect("mkdir");
        std::fs::write(&list, format!(r#"[{{"id":"{id}","names":["alices-db"]}}]"#))
            .expect("write");
        let passwd = dir.path().join("passwd");
        let line = format!("alice:x:1000:1000::{}:/bin/sh\n", home.display());
        std::fs::write(
            &passwd,
            format!("root:x:0:0::/root:/bin/sh\nbad line\n{line}"),
        )
        .expect("write");
        let roots = Roots {
            podman: dir.path().join("none.json"),
            passwd,
            ..Roots::default()
        };
        let mut p = PodmanNames::default();
        let name = |p: &mut PodmanNames, uid| container_name(&roots, p, Engine::Podman, &id, uid);
        assert_eq!(name(&mut p, Some(1000)).as_deref(), Some("alices-db"));
        assert_eq!(name(&mut p, Some(1001)), None);
        assert_eq!(name(&mut p, None), None);
        assert_eq!(home_of(&roots.passwd, 1000), Some(home));
    }

    #[test]
    fn bounded_reads_refuse_large_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("big");
        std::fs::write(&f, vec![b'x'; 100]).expect("write");
        assert!(read_bounded(&f, 99).is_err());
        assert_eq!(read_bounded(&f, 100).expect("read").len(), 100);
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
