//! Builders the unit tests share: drop keys, snapshots and kernel readings. A test names what
//! it varies (a reason's code, the namespace that is the initial one) and takes the rest here.
use std::{sync::Arc, time::Duration};

use crate::{
    model::{
        DropCount, DropKey, KernelReading, Reason, Snapshot,
        compare::{DiffKey, Side},
    },
    vocab::socket::{About, Found, Holder, Socket, Via},
};

/// A key of reason `name` (code `code`) at `location`, with no attribution.
pub fn key(code: u32, name: &str, location: &str) -> DropKey {
    DropKey {
        reason: Reason {
            code,
            name: name.into(),
        },
        location: location.into(),
        attr: Default::default(),
    }
}

/// `k` with a socket (inode 4242) found `via` the receiving socket or the skb's owner, known
/// as `about`.
pub fn with_socket(mut k: DropKey, via: Via, about: About) -> DropKey {
    k.attr.socket = Some(Arc::new(Socket {
        via,
        inode: 4242,
        about,
    }));
    k
}

/// A socket found held by `comm` (pid 812) alone: UDP, bound to `local`, its receive buffer
/// `rcvbuf` bytes.
pub fn found(comm: &str, local: &str, rcvbuf: u32) -> About {
    About::Exact(Found {
        holders: vec![Holder {
            pid: 812,
            comm: comm.into(),
        }],
        more_holders: 0,
        protocol: Some("udp".into()),
        local: Some(local.into()),
        rcvbuf: Some(rcvbuf),
    })
}

/// A snapshot at `secs` of `drops` and `overflow` (drops no key kept), its total their sum.
pub fn snap(secs: u64, drops: Vec<DropCount>, overflow: u64) -> Snapshot {
    let total = drops.iter().map(|d| d.count).sum::<u64>() + overflow;
    Snapshot {
        elapsed: Duration::from_secs(secs),
        total,
        overflow,
        drops,
        ..Default::default()
    }
}

/// A reading at `unix_ms` whose initial namespace is `initial`, of (namespace, counter,
/// growth).
pub fn reading(unix_ms: u64, initial: u64, counters: &[(u64, &str, u64)]) -> KernelReading {
    let mut r = KernelReading {
        unix_ms,
        initial_netns: initial,
        ..Default::default()
    };
    for &(ns, name, v) in counters {
        r.netns.entry(ns).or_default().insert(name.into(), v);
    }
    r
}

/// A key as two runs share it: reason `name` at `f+0x1` in the namespace named `netns`.
pub fn diff_key(name: &str, netns: &str) -> DiffKey {
    let mut k = key(0, name, "f+0x1");
    k.attr.netns_name = Some(netns.into());
    DiffKey::of(&k)
}

/// A run's side of (reason, namespace name, drops) ([`diff_key`]) over `seconds`, its total
/// their sum, `packets` received where read (none sent, no programs' verdicts).
pub fn side(counts: &[(&str, &str, u64)], seconds: f64, packets: Option<u64>) -> Side {
    let counts: std::collections::BTreeMap<DiffKey, u64> = (counts.iter())
        .map(|&(r, n, c)| (diff_key(r, n), c))
        .collect();
    Side {
        total: counts.values().sum(),
        counts,
        seconds,
        packets,
        sent: None,
        programs: false,
    }
}
