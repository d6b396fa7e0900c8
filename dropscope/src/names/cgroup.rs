//! Who owns a process, read from its cgroup path: a pod, a container, a systemd service or a
//! login session. Pure parsing of `/proc/PID/cgroup` text; no I/O.

/// What a process's cgroup says about it, most specific first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A Kubernetes pod: its UID with dashes (`kubepods…pod<uid>…`).
    Pod(String),
    /// A container of a known engine, by its hexadecimal id.
    Container(Engine, String),
    /// A container or machine named in the cgroup path itself (LXC, systemd-nspawn).
    Machine(String),
    /// A systemd service (`nginx.service`), the innermost one (user services included).
    Service(String),
    /// A login session, a user manager or the init scope: says nothing useful about a namespace.
    Session,
}

/// The container engine behind a cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Docker (`docker-<id>.scope`, `/docker/<id>`).
    Docker,
    /// Podman (`libpod-<id>.scope`, `/libpod_parent/libpod-<id>`).
    Podman,
    /// A CRI runtime: containerd (`cri-containerd-<id>.scope`) or CRI-O (`crio-<id>.scope`).
    Cri,
    /// containerd without Kubernetes (`nerdctl-<id>.scope`).
    Containerd,
}

impl Engine {
    /// The prefix shown before a container's name.
    pub fn label(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
            Engine::Cri => "cri",
            Engine::Containerd => "containerd",
        }
    }
}

impl Owner {
    /// How specific this owner is: a pod beats a container beats a machine beats a service.
    pub fn rank(&self) -> u8 {
        match self {
            Owner::Pod(_) => 4,
            Owner::Container(..) => 3,
            Owner::Machine(_) => 3,
            Owner::Service(_) => 2,
            Owner::Session => 0,
        }
    }
}

/// The most specific owner named by any line of a `/proc/PID/cgroup` file (v2 `0::/path` and
/// v1 `N:controllers:/path` lines alike), or None if no line says anything.
#[cfg(test)]
pub fn owner(cgroup_file: &str) -> Option<Owner> {
    owner_at(cgroup_file).map(|f| f.owner)
}

/// An owner, with the cgroup path that named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<'a> {
    /// The owner.
    pub owner: Owner,
    /// The path of the line that named it (`/user.slice/…/libpod-<id>.scope`).
    pub path: &'a str,
    /// Whether that line is the unified (v2) hierarchy's (`0::/path`).
    pub unified: bool,
}

/// Like [`owner`], with the path that named the owner (the first line of the highest rank).
pub fn owner_at(cgroup_file: &str) -> Option<Found<'_>> {
    let mut best: Option<Found<'_>> = None;
    for line in cgroup_file.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Some(owner) = owner_of_path(path) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| owner.rank() > b.owner.rank()) {
            let unified = id == "0" && controllers.is_empty();
            best = Some(Found {
                owner,
                path,
                unified,
            });
        }
    }
    best
}

/// The user a cgroup path is delegated to by systemd (`…/user@UID.service/…`): anything below
/// is named by that user.
pub fn delegated_to(path: &str) -> Option<u32> {
    path.split('/')
        .filter_map(|p| {
            p.strip_prefix("user@")?
                .strip_suffix(".service")?
                .parse()
                .ok()
        })
        .next()
}

/// The most specific owner named by one cgroup path.
pub fn owner_of_path(path: &str) -> Option<Owner> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut best: Option<Owner> = None;
    // A higher rank wins; among services, the innermost (the later one).
    let mut offer = |o: Owner| {
        let wins = best.as_ref().is_none_or(|b| {
            o.rank() > b.rank() || (o.rank() == b.rank() && matches!(o, Owner::Service(_)))
        });
        if wins {
            best = Some(o);
        }
    };
    let mut in_kubepods = false;
    for (i, part) in parts.iter().enumerate() {
        let parent = i.checked_sub(1).map(|j| parts[j]);
        if part.starts_with("kubepods") {
            in_kubepods = true;
        }
        if let Some(uid) = pod_uid(part).filter(|_| in_kubepods) {
            offer(Owner::Pod(uid));
        }
        if let Some((engine, id)) = container(part, parent) {
            offer(Owner::Container(engine, id));
        }
        if let Some(name) = machine(part, parent) {
            offer(Owner::Machine(name));
        }
        if let Some(unit) = part.strip_suffix(".service") {
            if unit.starts_with("user@") {
                offer(Owner::Session);
            } else {
                offer(Owner::Service(unescape(part)));
            }
        }
        if part.starts_with("session-") && part.ends_with(".scope") || *part == "init.scope" {
            offer(Owner::Session);
        }
    }
    best
}

/// The pod UID in `kubepods-burstable-pod<uid>.slice` (systemd: `_` for `-`) or `pod<uid>`.
fn pod_uid(part: &str) -> Option<String> {
    let part = part.strip_suffix(".slice").unwrap_or(part);
    let at = part.rfind("pod")?;
    if at > 0 && !part[..at].ends_with('-') {
        return None;
    }
    let uid = &part[at + 3..];
    let ok = uid.len() >= 8
        && uid
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
    ok.then(|| uid.replace('_', "-"))
}

/// A container id from a systemd scope (`docker-<id>.scope`) or a cgroupfs directory
/// (`docker/<id>`). Ids must be 12 to 64 hexadecimal digits, so they are safe in file paths.
fn container(part: &str, parent: Option<&str>) -> Option<(Engine, String)> {
    const SCOPES: [(&str, Engine); 5] = [
        ("docker-", Engine::Docker),
        ("libpod-", Engine::Podman),
        ("cri-containerd-", Engine::Cri),
        ("crio-", Engine::Cri),
        ("nerdctl-", Engine::Containerd),
    ];
    let bare = part.strip_suffix(".scope").unwrap_or(part);
    for (prefix, engine) in SCOPES {
        if let Some(id) = bare.strip_prefix(prefix).filter(|id| is_id(id)) {
            return Some((engine, id.to_string()));
        }
    }
    match parent {
        Some("docker") if is_id(part) => Some((Engine::Docker, part.to_string())),
        Some(p) if p.starts_with("pod") && is_id(part) => Some((Engine::Cri, part.to_string())),
        _ => None,
    }
}

fn is_id(s: &str) -> bool {
    (12..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The name of an LXC container (`lxc.payload.NAME`, `lxc/NAME`) or a systemd-nspawn machine
/// (`machine-NAME.scope`, `systemd-nspawn@NAME.service`).
fn machine(part: &str, parent: Option<&str>) -> Option<String> {
    let name = if let Some(n) = part.strip_prefix("lxc.payload.") {
        format!("lxc:{n}")
    } else if parent == Some("lxc") {
        format!("lxc:{part}")
    } else if let Some(n) = part
        .strip_prefix("machine-")
        .and_then(|n| n.strip_suffix(".scope"))
    {
        format!("machine:{}", unescape(n))
    } else if let Some(n) = part
        .strip_prefix("systemd-nspawn@")
        .and_then(|n| n.strip_suffix(".service"))
    {
        format!("machine:{}", unescape(n))
    } else {
        return None;
    };
    Some(name)
}

/// Undoes systemd's `\xNN` escaping of unit names (`foo\x2dbar` is `foo-bar`).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("\\x") {
        out.push_str(&rest[..at]);
        let hex = rest.get(at + 2..at + 4);
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(b) if b.is_ascii() => {
                out.push(char::from(b));
                rest = &rest[at + 4..];
            }
            _ => {
                out.push_str("\\x");
                rest = &rest[at + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c0e9a5b7d2c4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6";

    fn v2(path: &str) -> String {
        format!("0::{path}\n")
    }

    #[test]
    fn docker_systemd_scope_and_cgroupfs() {
        let want = Some(Owner::Container(Engine::Docker, ID.into()));
        assert_eq!(
            owner(&v2(&format!("/system.slice/docker-{ID}.scope"))),
            want
        );
        assert_eq!(owner(&v2(&format!("/docker/{ID}"))), want);
        // A v1 hybrid file: the named hierarchy carries the path, the v2 line is empty.
        let hybrid = format!("12:pids:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n");
        assert_eq!(owner(&hybrid), want);
    }

    #[test]
    fn podman_rootful_rootless_and_conmon() {
        let want = Some(Owner::Container(Engine::Podman, ID.into()));
        assert_eq!(
            owner(&v2(&format!("/machine.slice/libpod-{ID}.scope/container"))),
            want
        );
        let rootless =
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope");
        assert_eq!(owner(&v2(&rootless)), want);
        assert_eq!(owner(&v2(&format!("/libpod_parent/libpod-{ID}"))), want);
        // conmon runs next to the container, in the host's namespace: not the container.
        assert_eq!(
            owner(&v2(&format!("/machine.slice/libpod-conmon-{ID}.scope"))),
            None
        );
    }

    #[test]
    fn containerd_and_crio() {
        assert_eq!(
            owner(&v2(&format!("/system.slice/nerdctl-{ID}.scope"))),
            Some(Owner::Container(Engine::Containerd, ID.into()))
        );
        assert_eq!(
            owner(&v2(&format!("/crio-{ID}.scope"))),
            Some(Owner::Container(Engine::Cri, ID.into()))
        );
    }

    #[test]
    fn kubernetes_pod_beats_its_container() {
        let uid = "0c7a1d4e-93b2-4f6a-8e1d-5b9c2a7f3e10";
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
            uid.replace('-', "_")
        );
        assert_eq!(owner(&v2(&systemd)), Some(Owner::Pod(uid.into())));
        let cgroupfs = format!("/kubepods/besteffort/pod{uid}/{ID}");
        assert_eq!(owner(&v2(&cgroupfs)), Some(Owner::Pod(uid.into())));
        // Guaranteed pods sit directly under kubepods.
        let guaranteed = format!(
            "/kubepods.slice/kubepods-pod{}.slice",
            uid.replace('-', "_")
        );
        assert_eq!(owner(&v2(&guaranteed)), Some(Owner::Pod(uid.into())));
    }

    #[test]
    fn a_pod_looking_name_outside_kubepods_is_not_a_pod() {
        assert_eq!(
            owner(&v2("/system.slice/ipod12345678.service")),
            Some(Owner::Service("ipod12345678.service".into()))
        );
    }

    #[test]
    fn systemd_services_innermost_wins() {
        assert_eq!(
            owner(&v2("/system.slice/nginx.service")),
            Some(Owner::Service("nginx.service".into()))
        );
        let user = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome\\x2dterminal.service";
        assert_eq!(
            owner(&v2(user)),
            Some(Owner::Service("app-gnome-terminal.service".into()))
        );
        assert_eq!(
            owner(&v2("/system.slice/outer.service/inner.service")),
            Some(Owner::Service("inner.service".into()))
        );
    }

    #[test]
    fn a_container_beats_the_service_around_it() {
        assert_eq!(
            owner(&v2(&format!(
                "/system.slice/containerd.service/docker/{ID}"
            ))),
            Some(Owner::Container(Engine::Docker, ID.into()))
        );
    }

    #[test]
    fn sessions_and_user_managers_say_little() {
        assert_eq!(
            owner(&v2("/user.slice/user-1000.slice/session-3.scope")),
            Some(Owner::Session)
        );
        assert_eq!(
            owner(&v2("/user.slice/user-0.slice/user@0.service/init.scope")),
            Some(Owner::Session)
        );
        assert_eq!(owner(&v2("/init.scope")), Some(Owner::Session));
        assert_eq!(owner(&v2("/")), None);
        assert_eq!(owner(""), None);
    }

    #[test]
    fn machines() {
        assert_eq!(
            owner(&v2("/lxc.payload.web1/system.slice/nginx.service")),
            Some(Owner::Machine("lxc:web1".into()))
        );
        assert_eq!(
            owner(&v2("/machine.slice/machine-db\\x2d1.scope/payload")),
            Some(Owner::Machine("machine:db-1".into()))
        );
    }

    #[test]
    fn hostile_ids_are_rejected() {
        assert_eq!(owner(&v2("/system.slice/docker-../../etc.scope")), None);
        assert_eq!(owner(&v2("/docker/abc")), None);
        assert_eq!(owner(&v2(&format!("/docker/{ID}0"))), None);
    }

    #[test]
    fn the_path_that_named_the_owner_and_its_delegate() {
        let rootless =
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope");
        let file = format!("1:name=systemd:/user.slice\n0::{rootless}\n");
        let found = owner_at(&file).expect("an owner");
        assert_eq!(found.owner, Owner::Container(Engine::Podman, ID.into()));
        assert_eq!((found.path, found.unified), (rootless.as_str(), true));
        assert_eq!(delegated_to(found.path), Some(1000));
        let v1 = format!("12:pids:/docker/{ID}\n");
        let found = owner_at(&v1).expect("an owner");
        assert_eq!((found.path, found.unified), (&v1[8..v1.len() - 1], false));
        assert_eq!(delegated_to(found.path), None);
        assert_eq!(delegated_to("/system.slice/user@x.service"), None);
        assert_eq!(
            delegated_to("/user.slice/user-0.slice/user@0.service"),
            Some(0)
        );
    }

    #[test]
    fn unescape_keeps_malformed_escapes() {
        assert_eq!(unescape("a\\x2db"), "a-b");
        assert_eq!(unescape("a\\xzz"), "a\\xzz");
        assert_eq!(unescape("end\\x"), "end\\x");
        assert_eq!(unescape("\\xff"), "\\xff");
    }
}
