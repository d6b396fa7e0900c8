//! The guide's "what to check" commands filled in with a row's values, ready to copy: its
//! device for `DEV`/`IFACE`, its port as an `ss` filter, and a way into its network namespace
//! (`ip netns exec NAME` for a namespace `ip netns` names, `nsenter --net=/proc/PID/ns/net`
//! for another one).
//!
//! Every value is shell-quoted ([`quote`]); a value with a control character (a device or
//! namespace name from a hostile recording) is never filled in: its placeholder stays.
//!
//! A recording's rows ([`Origin::Recorded`]) are filled in with what the recording says only:
//! `ip netns exec NAME` where its namespace's recorded name is one `ip netns` could have given,
//! never a way into a namespace of this machine that happens to have the same inode.
use std::{borrow::Cow, fmt::Write as _, os::unix::fs::MetadataExt as _, path::Path};

/// How a shell enters a row's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Way {
    /// It is the initial namespace: commands run as they are.
    Here,
    /// A name under `/run/netns`: `ip netns exec NAME`.
    Named(String),
    /// A process in it: `nsenter --net=/proc/PID/ns/net`.
    Pid(u32),
    /// Not known here (a recording, or a namespace gone): `nsenter` with `PID` to fill in.
    Unknown,
}

/// What a row gives to fill its checks with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// The way into its namespace.
    pub way: Way,
    /// Its interface.
    pub device: Option<&'a str>,
    /// Its (destination) port: the local socket's.
    pub port: Option<u16>,
}

/// Commands that act on the network namespace they run in.
const NETNS_COMMANDS: &[&str] = &[
    "ip",
    "ss",
    "tc",
    "nft",
    "iptables",
    "ip6tables",
    "iptables-save",
    "ethtool",
    "nstat",
    "sysctl",
    "conntrack",
    "tcpdump",
    "bridge",
    "netstat",
    "ping",
    "tracepath",
];

/// Where a report's rows were counted, so how their commands enter a namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    /// On this machine, now: its namespaces are looked up ([`way_in`]).
    #[default]
    Live,
    /// In a recording (made here or elsewhere): only its recorded names are used.
    Recorded,
}

/// How a shell enters each namespace, found once each (see [`way_in`]): the commands of a
/// report's rows (the guide's checks, who dropped it) are filled in with it.
pub struct Ways {
    initial: Option<u64>,
    origin: Origin,
    /// Namespace names beside the keys' own (a recording's, by inode).
    names: std::collections::BTreeMap<u64, String>,
    found: std::collections::BTreeMap<u64, Way>,
}

impl Ways {
    /// The ways of a snapshot whose initial namespace is `initial` (if known), counted where
    /// `origin` says.
    pub fn new(initial: Option<u64>, origin: Origin) -> Self {
        Self {
            initial,
            origin,
            names: Default::default(),
            found: Default::default(),
        }
    }

    /// With the namespace names `names` (by inode) for rows whose key names none.
    pub fn named(mut self, names: &std::collections::BTreeMap<u64, String>) -> Self {
        self.names.clone_from(names);
        self
    }

    /// What `key`'s row fills commands with.
    pub fn target<'k>(&mut self, key: &'k crate::model::DropKey) -> Target<'k> {
        let way = match key.attr.netns {
            None => Way::Here,
            Some(ns) if Some(ns) == self.initial => Way::Here,
            Some(ns) if self.origin == Origin::Recorded => {
                let name = (key.attr.netns_name.as_deref()).or(self.names.get(&ns).map(|n| &**n));
                recorded_way(name)
            }
            Some(ns) => (self.found.entry(ns))
                .or_insert_with(|| {
                    way_in(
                        ns,
                        self.initial.unwrap_or(0),
                        Path::new(crate::vocab::reading::RUN_NETNS),
                        Path::new("/proc"),
                    )
                })
                .clone(),
        };
        Target {
            way,
            device: key.attr.device.as_deref(),
            port: key.attr.port,
        }
    }

    /// The guide's checks for `key`, filled in.
    pub fn checks(&mut self, key: &crate::model::DropKey) -> Vec<String> {
        let check = crate::explain::Guide::builtin()
            .explain(&key.reason.name)
            .check;
        if check.is_empty() {
            return Vec::new();
        }
        let t = self.target(key);
        check.iter().map(|c| fill_line(c, &t)).collect()
    }
}

/// `value` quoted for a POSIX shell (as is where nothing needs quoting); `None` for a value
/// that is empty or holds a control character, which no quoting makes safe to paste.
pub fn quote(value: &str) -> Option<Cow<'_, str>> {
    if value.is_empty() || value.chars().any(char::is_control) {
        return None;
    }
    shlex::try_quote(value).ok()
}

/// The prefix that runs a command in the namespace `way` leads to (empty for [`Way::Here`]).
fn prefix(way: &Way) -> String {
    match way {
        Way::Here => String::new(),
        Way::Named(n) => match quote(n) {
            Some(q) => format!("ip netns exec {q} "),
            None => "nsenter --net=/proc/PID/ns/net ".into(),
        },
        Way::Pid(p) => format!("nsenter --net=/proc/{p}/ns/net "),
        Way::Unknown => "nsenter --net=/proc/PID/ns/net ".into(),
    }
}

/// One command of the guide filled in for `t`.
pub fn fill_command(command: &str, t: &Target<'_>) -> String {
    let device = t.device.filter(|d| *d != "*").and_then(quote);
    let mut out = String::new();
    for (i, word) in command.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match (word, &device) {
            ("DEV" | "IFACE", Some(d)) => out.push_str(d),
            _ => out.push_str(word),
        }
    }
    let first = command.split_whitespace().next().unwrap_or_default();
    if let Some(port) = t.port.filter(|_| first == "ss" && !command.contains('\'')) {
        let _ = write!(out, " 'sport = :{port}'");
    }
    let local = NETNS_COMMANDS.contains(&first) || command.starts_with("bpftool net");
    if local {
        out.insert_str(0, &prefix(&t.way));
    }
    out
}

/// A check line with each of its commands (between backquotes) filled in for `t`.
pub fn fill_line(line: &str, t: &Target<'_>) -> String {
    let mut out = String::with_capacity(line.len());
    for (i, part) in line.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        // Odd parts are between backquotes (an unclosed one is text, as written).
        if i % 2 == 1 && line.matches('`').count() > i {
            out.push_str(&fill_command(part, t));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The first command of `checks` filled in for `t`: what a copy key copies.
pub fn first_command(checks: &[String], t: &Target<'_>) -> Option<String> {
    checks.iter().find_map(|line| {
        let mut parts = line.split('`');
        parts.next();
        let command = parts.next()?;
        parts.next()?;
        Some(fill_command(command, t))
    })
}

/// How a shell enters a recorded namespace whose recorded name is `name`: `ip netns exec
/// NAME` where the name is one `ip netns` could have given (see [`crate::names`]: not `host`, a
/// container's `kind:NAME`, a process's `COMM[PID]`, a service, a user's claim, nor a name cut
/// or escaped), else a placeholder to fill in. Never a lookup on this machine.
pub fn recorded_way(name: Option<&str>) -> Way {
    let ip_netns = |n: &str| {
        !n.is_empty()
            && n != "host"
            && n != "."
            && n != ".."
            && !n.ends_with(".service")
            && !n.contains([':', '[', '/', '\\', '…'])
            && !n.chars().any(char::is_whitespace)
            && quote(n).is_some()
    };
    match name.filter(|n| ip_netns(n)) {
        Some(n) => Way::Named(n.to_owned()),
        None => Way::Unknown,
    }
}

/// How a shell on this machine enters namespace `inode` (`initial`: the initial one's): a name
/// under `run_netns` that is it, else the lowest pid under `proc` in it.
pub fn way_in(inode: u64, initial: u64, run_netns: &Path, proc: &Path) -> Way {
    if inode == initial {
        return Way::Here;
    }
    let mut names: Vec<String> = (std::fs::read_dir(run_netns).into_iter().flatten())
        .flatten()
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.ino() == inode))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    if let Some(name) = names.into_iter().next() {
        return Way::Named(name);
    }
    let want = format!("net:[{inode}]");
    (std::fs::read_dir(proc).into_iter().flatten())
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(proc.join(pid.to_string()).join("ns/net"))
                .is_ok_and(|l| l.as_os_str() == want.as_str())
        })
        .min()
        .map_or(Way::Unknown, Way::Pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(way: Way, device: Option<&str>, port: Option<u16>) -> Target<'_> {
        Target { way, device, port }
    }

    /// A recording's row of a namespace whose inode is one of this machine's (this process's
    /// own, which a lookup here finds through /proc): its commands use the recorded name, or
    /// a placeholder, never this machine's way in.
    #[test]
    fn a_recordings_rows_enter_namespaces_by_their_recorded_names_only() {
        let here = std::fs::metadata("/proc/self/ns/net").map(|m| m.ino());
        let here = here.expect("this process's network namespace");
        let key = |name: Option<&str>| crate::model::DropKey {
            reason: crate::model::Reason {
                code: 2,
                name: "NO_SOCKET".into(),
            },
            location: "__udp4_lib_rcv+0x1".into(),
            attr: crate::model::Attribution {
                netns: Some(here),
                netns_name: name.map(Into::into),
                ..Default::default()
            },
        };
        // Recorded elsewhere: its initial namespace is not this machine's.
        let mut ways = Ways::new(Some(1), Origin::Recorded);
        assert_eq!(
            ways.target(&key(Some("blue"))).way,
            Way::Named("blue".into())
        );
        let checks = ways.checks(&key(Some("blue"))).join(" ");
        assert!(
            !checks.contains("/proc/") || checks.contains("/proc/PID/"),
            "{checks}"
        );
        for other in [
            "docker:web",
            "nginx.service",
            "sh[412]",
            "user 1000: podman:db",
            "host",
        ] {
            assert_eq!(ways.target(&key(Some(other))).way, Way::Unknown, "{other}");
        }
        let mut ways = Ways::new(Some(1), Origin::Recorded);
        assert_eq!(ways.target(&key(None)).way, Way::Unknown);
        let named = [(here, "green".to_string())].into();
        let mut ways = Ways::new(Some(1), Origin::Recorded).named(&named);
        assert_eq!(ways.target(&key(None)).way, Way::Named("green".into()));
        // Live, the same inode is this machine's namespace, entered as it is entered here.
        let mut live = Ways::new(Some(1), Origin::Live);
        assert!(
            matches!(
                live.target(&key(Some("blue"))).way,
                Way::Pid(_) | Way::Named(_)
            ),
            "a namespace of this machine is found"
        );
    }

    #[test]
    fn commands_take_the_rows_namespace_device_and_port() {
        let fw = target(Way::Named("ux3fw".into()), Some("ux3v0"), None);
        assert_eq!(
            fill_command("nft -a list ruleset", &fw),
            "ip netns exec ux3fw nft -a list ruleset"
        );
        assert_eq!(
            fill_command("tc -s qdisc show dev IFACE", &fw),
            "ip netns exec ux3fw tc -s qdisc show dev ux3v0"
        );
        let app = target(Way::Named("ux3app".into()), None, Some(8888));
        assert_eq!(
            fill_line("`ss -uamp` shows rb and Recv-Q", &app),
            "`ip netns exec ux3app ss -uamp 'sport = :8888'` shows rb and Recv-Q"
        );
        // A filter already written is kept as it is; a command not of a namespace is as is.
        assert_eq!(
            fill_command("ss -ltnp 'sport = :80'", &app),
            "ip netns exec ux3app ss -ltnp 'sport = :80'"
        );
        assert_eq!(fill_command("top -H", &app), "top -H");
        // Other namespaces through a process in them; the host's as they are.
        let pid = target(Way::Pid(4242), Some("eth0"), None);
        assert_eq!(
            fill_command("ethtool -S DEV", &pid),
            "nsenter --net=/proc/4242/ns/net ethtool -S eth0"
        );
        let host = target(Way::Here, Some("eth0"), None);
        assert_eq!(
            fill_command("ip -s -s link show DEV", &host),
            "ip -s -s link show eth0"
        );
        // Without a device, the placeholder stays; a word holding it is not a placeholder.
        let bare = target(Way::Unknown, None, None);
        assert_eq!(
            fill_command("sysctl net.ipv6.conf.IFACE.disable_ipv6", &host),
            "sysctl net.ipv6.conf.IFACE.disable_ipv6"
        );
        assert_eq!(
            fill_command("tc -s qdisc show dev IFACE", &bare),
            "nsenter --net=/proc/PID/ns/net tc -s qdisc show dev IFACE"
        );
        let checks = ["is it up?".to_string(), "`ss -lnt` (Recv-Q)".to_string()];
        assert_eq!(
            first_command(&checks, &app).as_deref(),
            Some("ip netns exec ux3app ss -lnt 'sport = :8888'")
        );
    }

    #[test]
    fn hostile_names_are_quoted_or_never_filled_in() {
        let evil = "x';reboot;'";
        let t = target(Way::Named("ns $(id)".into()), Some(evil), None);
        let got = fill_command("ip link show dev DEV", &t);
        // Parsed back as a shell would: the name is one word, the namespace another.
        let words = shlex::split(&got).expect("a shell parses it");
        assert_eq!(
            words,
            [
                "ip", "netns", "exec", "ns $(id)", "ip", "link", "show", "dev", evil
            ]
        );
        // Control characters (a newline, an escape ending a bracketed paste) are not filled.
        for name in ["a\nreboot", "a\u{1b}[201~reboot", ""] {
            let t = target(Way::Named(name.into()), Some(name), None);
            let got = fill_command("ethtool -S DEV", &t);
            assert_eq!(
                got, "nsenter --net=/proc/PID/ns/net ethtool -S DEV",
                "{name:?}"
            );
        }
        assert_eq!(quote("ux3v0").as_deref(), Some("ux3v0"));
    }

    #[test]
    fn the_way_in_is_an_ip_netns_name_else_a_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (run, proc) = (dir.path().join("netns"), dir.path().join("proc"));
        std::fs::create_dir_all(&run).expect("mkdir");
        std::fs::write(run.join("web"), b"").expect("file");
        let ino = std::fs::metadata(run.join("web")).expect("stat").ino();
        for (pid, ns) in [(300, 77u64), (20, 77), (5, 1)] {
            let d = proc.join(pid.to_string()).join("ns");
            std::fs::create_dir_all(&d).expect("mkdir");
            std::os::unix::fs::symlink(format!("net:[{ns}]"), d.join("net")).expect("link");
        }
        assert_eq!(way_in(1, 1, &run, &proc), Way::Here);
        assert_eq!(way_in(ino, 1, &run, &proc), Way::Named("web".into()));
        assert_eq!(way_in(77, 1, &run, &proc), Way::Pid(20));
        assert_eq!(way_in(78, 1, &run, &proc), Way::Unknown);
    }
}
