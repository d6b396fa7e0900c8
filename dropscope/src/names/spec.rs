//! What a user typed to name a namespace or an interface, checked against this machine.
use std::{os::unix::fs::MetadataExt as _, path::Path};

use anyhow::{Context as _, bail};

/// The inode of a network namespace given by `ip netns` name, path, PID or inode number.
pub fn netns_inode(spec: &str) -> anyhow::Result<u64> {
    let named = Path::new("/run/netns").join(spec);
    let path = if !spec.contains('/') && named.exists() {
        named
    } else if spec.contains('/') {
        spec.into()
    } else if let Ok(n) = spec.parse::<u64>() {
        let proc = Path::new("/proc").join(spec).join("ns/net");
        // PIDs are small; namespace inodes are large (4026531840 and up).
        if n < (1 << 22) && proc.exists() {
            proc
        } else {
            return Ok(n);
        }
    } else {
        bail!(
            "--netns {spec:?}: no such namespace (give a name from `ip netns`, a path to a \
             namespace file, a PID or an inode)"
        );
    };
    let meta = std::fs::metadata(&path).with_context(|| format!("--netns {}", path.display()))?;
    Ok(meta.ino())
}

/// Whether an interface named `name` exists in some network namespace of this machine: the
/// initial one, that of any process (`/proc/PID/net/dev` lists its namespace's interfaces), or
/// one named under `/run/netns` (listed from inside it). Each namespace is looked at once.
pub fn device_exists(name: &str) -> bool {
    if Path::new("/sys/class/net").join(name).exists() {
        return true;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    let mut seen = std::collections::HashSet::new();
    for entry in dir.flatten() {
        let pid = entry.path();
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(ns) = std::fs::metadata(pid.join("ns/net")) else {
            continue;
        };
        if !seen.insert(ns.ino()) {
            continue;
        }
        let Ok(dev) = super::meta::read_bounded(&pid.join("net/dev"), 1 << 20, None) else {
            continue;
        };
        let text = String::from_utf8_lossy(&dev);
        if text
            .lines()
            .skip(2)
            .any(|l| l.split(':').next().is_some_and(|n| n.trim() == name))
        {
            return true;
        }
    }
    let Ok(named) = std::fs::read_dir("/run/netns") else {
        return false;
    };
    for entry in named.flatten().take(4096) {
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if seen.insert(meta.ino())
            && super::devices::read(&path, meta.ino())
                .is_ok_and(|devs| devs.values().any(|d| d.as_ref() == name))
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_inode_is_taken_as_is_and_a_pid_is_looked_up() {
        assert_eq!(netns_inode("4026599999").expect("inode"), 4_026_599_999);
        let own = std::fs::metadata("/proc/self/ns/net")
            .expect("own netns")
            .ino();
        let pid = std::process::id().to_string();
        assert_eq!(netns_inode(&pid).expect("pid"), own);
        assert!(netns_inode("no-such-namespace-here").is_err());
    }

    #[test]
    fn loopback_exists_and_a_made_up_interface_does_not() {
        assert!(device_exists("lo"));
        assert!(!device_exists("nosuchdev0"));
    }
}
