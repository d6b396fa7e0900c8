//! The Snapshot: cumulative, self-contained drop counts at one instant, live or replayed.
use std::{sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

pub use crate::vocab::dims::Reason;
use crate::vocab::packet::Sample;

/// What a drop count is keyed by: reason, symbolized kernel location, and which packets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DropKey {
    /// Why the kernel dropped the packet.
    pub reason: Reason,
    /// Where: `function+0xoffset [module]`, symbolized on the machine that counted it.
    pub location: Arc<str>,
    /// Which packets: the dimensions grouped by (the others are `None`).
    #[serde(default)]
    pub attr: Attribution,
}

/// Which packets a count is of. A dimension not grouped by, or not known, is `None`.
///
/// Identity is the kernel's: two attributions are equal (and hash and order alike) when their
/// namespace (its cookie, and its inode), interface index, protocol and port are. The kernel
/// gives a freed namespace inode to a later namespace, never its cookie: two namespaces that
/// had one inode at different times are two keys (recordings made before cookies were kept
/// have none, and tell namespaces apart by inode alone). Names (`netns_name`, and `device`
/// where the index is known) are attributes of that identity, resolved beside it: a process
/// renaming itself or an interface renamed never makes a new key, row, series or recording key.
/// Where no index is known (recordings made before it was kept, or an interface grouped without
/// its namespace), the interface is identified by its name.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Attribution {
    /// Network namespace inode (what `ip netns identify`, `/proc/PID/ns/net` and `--netns`
    /// show), an attribute of the namespace the cookie identifies.
    pub netns: Option<u64>,
    /// Network namespace cookie (`SO_NETNS_COOKIE`): the namespace's identity, never reused
    /// while the kernel runs; `None` where it was not read (recordings before version 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_cookie: Option<u64>,
    /// Its human name (container, pod, unit, `ip netns` name), where one was found.
    pub netns_name: Option<Arc<str>>,
    /// Interface index (within that namespace), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifindex: Option<u32>,
    /// Interface name (within that namespace).
    pub device: Option<Arc<str>>,
    /// L4 protocol: `udp`, `tcp`, `icmp`, `icmpv6`, or its number; `None` when not IP.
    pub protocol: Option<Arc<str>>,
    /// Destination port.
    pub port: Option<u16>,
    /// The socket the drop had reached (its inode), with what was found of it (shared: a key
    /// is cloned often, and most have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<Arc<crate::vocab::socket::Socket>>,
    /// Who dropped them, where the counts are grouped by culprit (`--by culprit`): derived
    /// beside the key from the kernel's view, per snapshot, and part of the grouped row's
    /// identity by its label (see [`crate::culprit::group`]). `None` where not grouped by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Arc<crate::culprit::who::Grouped>>,
}

/// The fields that say which packets an [`Attribution`] is of (its names excluded).
type Identity<'a> = (
    Option<u64>,
    Option<u64>,
    Option<u32>,
    Option<&'a str>,
    Option<&'a str>,
    Option<u16>,
    Option<(crate::vocab::socket::Via, u32)>,
    Option<&'a str>,
);

impl Attribution {
    fn identity(&self) -> Identity<'_> {
        (
            self.netns,
            self.netns_cookie,
            self.ifindex,
            // The name stands for the interface only where its index is unknown.
            self.ifindex
                .is_none()
                .then_some(self.device.as_deref())
                .flatten(),
            self.protocol.as_deref(),
            self.port,
            self.socket.as_ref().map(|s| (s.via, s.inode)),
            self.culprit.as_deref().map(|c| &*c.label),
        )
    }
}

impl PartialEq for Attribution {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Attribution {}

impl std::hash::Hash for Attribution {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl PartialOrd for Attribution {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Attribution {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

/// Exact cumulative count of one key since the session started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCount {
    /// The key.
    pub key: DropKey,
    /// Exact number of drops.
    pub count: u64,
}

/// Estimated cumulative count of drops of one key that came through one kernel call stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCount {
    /// The (reason, location) the stack ended in.
    pub key: DropKey,
    /// Symbolized frames, outermost caller first, the drop site last.
    pub frames: Arc<[Arc<str>]>,
    /// Estimated drops: the sum of the sampling periods of the samples (a sampled estimate).
    pub weight: u64,
    /// Number of stack samples actually captured.
    pub samples: u64,
}

/// The probe's own health: everything that could make a number incomplete, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Keys in the keyed map / its capacity.
    pub keys_used: u64,
    /// Capacity of the keyed map.
    pub keys_capacity: u64,
    /// Stack samples captured.
    pub stack_samples: u64,
    /// Stack captures that failed in the kernel (collision or full stack map).
    pub stack_errors: u64,
    /// Stack samples that did not fit in the stack-count map.
    pub stack_overflow: u64,
    /// Stack samples whose frames could no longer be read (evicted before the collector saw them).
    pub stack_lost: u64,
    /// Current stack sampling period (drops per sample per CPU); 0 when stacks are off.
    pub sample_period: u64,
    /// Probe runs skipped by the kernel because the program was already running on that CPU.
    pub recursion_misses: u64,
    /// Cumulative BPF run time in ns (kernel.bpf_stats_enabled), if available.
    pub bpf_run_ns: Option<u64>,
    /// Cumulative BPF runs, if available.
    pub bpf_run_cnt: Option<u64>,
    /// dropscope's own syscalls so far, if counted.
    pub self_syscalls: Option<u64>,
    /// dropscope's own CPU time (user + system) so far, in microseconds.
    pub self_cpu_us: u64,
    /// Poll interval in force when this snapshot was taken, in milliseconds.
    pub poll_interval_ms: u64,
}

/// Cumulative drop counts at one instant. Self-contained: names travel with the counts.
///
/// Invariant: `drops.iter().map(|d| d.count).sum::<u64>() + overflow == total`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Time since the session started.
    pub elapsed: Duration,
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Every drop counted since the session started.
    pub total: u64,
    /// Drops that could not be keyed because the keyed map was full.
    pub overflow: u64,
    /// Exact counts per key, in no particular order.
    pub drops: Vec<DropCount>,
    /// Estimated counts per stack, in no particular order.
    pub stacks: Vec<StackCount>,
    /// The first few dropped packets of each key (where kept), in no particular order.
    #[serde(default)]
    pub samples: Vec<KeySamples>,
    /// The probe's own health.
    pub health: Health,
    /// The kernel's own counters, read before this snapshot's counts (where read: live when a
    /// consumer asks for them, and in recordings made so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Arc<crate::vocab::reading::KernelReading>>,
}

impl Snapshot {
    /// Sum of the keyed counts.
    pub fn keyed_sum(&self) -> u64 {
        (self.drops.iter()).fold(0, |t: u64, d| t.saturating_add(d.count))
    }

    /// Whether `sum(keyed) + overflow == total` holds.
    pub fn invariant_holds(&self) -> bool {
        self.keyed_sum().checked_add(self.overflow) == Some(self.total)
    }
}

/// Facts about the session a stream of snapshots came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Host name of the machine that counted.
    pub host: String,
    /// Its kernel release (`uname -r`).
    pub kernel: String,
    /// Session start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// The probe in use, e.g. `tp_btf/kfree_skb`.
    pub probe: String,
}

/// The sampled packets of one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySamples {
    /// The key (as the counts are keyed).
    pub key: DropKey,
    /// Its first few dropped packets, oldest first.
    pub packets: Vec<Sample>,
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashSet,
        hash::{BuildHasher, RandomState},
    };

    use super::*;

    fn attr(name: &str, device: &str, ifindex: Option<u32>) -> Attribution {
        Attribution {
            netns: Some(4026532999),
            netns_cookie: None,
            netns_name: Some(Arc::from(name)),
            ifindex,
            device: Some(Arc::from(device)),
            protocol: Some(Arc::from("udp")),
            port: Some(9),
            socket: None,
            culprit: None,
        }
    }

    #[test]
    fn names_are_attributes_not_identity() {
        let h = RandomState::new();
        let (a, b) = (
            attr("sh[100]", "eth0", Some(3)),
            attr("evil[100]", "renamed0", Some(3)),
        );
        assert_eq!(a, b);
        assert_eq!(h.hash_one(&a), h.hash_one(&b));
        assert_eq!(a.cmp(&b), std::cmp::Ordering::Equal);
        // Another interface index, namespace or port is another key.
        assert_ne!(a, attr("sh[100]", "eth0", Some(4)));
        assert_ne!(
            a,
            Attribution {
                netns: Some(1),
                ..a.clone()
            }
        );
        // One inode, given to a second namespace after the first ended: two keys.
        let (first, second) = (
            Attribution {
                netns_cookie: Some(4096),
                ..a.clone()
            },
            Attribution {
                netns_cookie: Some(8192),
                ..a.clone()
            },
        );
        assert_ne!(first, second);
        assert_ne!(h.hash_one(&first), h.hash_one(&second));
        assert_ne!(
            a,
            Attribution {
                port: Some(10),
                ..a.clone()
            }
        );
        // Without an index, the interface's name is all there is to tell it by.
        assert_ne!(attr("x", "eth0", None), attr("x", "eth1", None));
        assert_eq!(attr("x", "eth0", None), attr("y", "eth0", None));
        let set: HashSet<Attribution> = (0..100)
            .map(|i| attr(&format!("p{i}"), "lo", Some(1)))
            .collect();
        assert_eq!(set.len(), 1);
    }
}
