//! Keys as the model knows them: the kernel's key with its attribution (namespace and its
//! name, interface, protocol, port) and the packets sampled for it.
use super::*;
use crate::{
    clock::{monotonic_ms, unix_ms},
    vocab::socket::{About, Socket, Via},
};

impl Collector {
    /// The model's key for a kernel key: reason and location named, packets attributed.
    pub(super) fn model_key(&mut self, k: &dropscope_common::DropKey) -> DropKey {
        DropKey {
            reason: self.probe.reasons().reason(k.reason),
            location: self.symbolizer.name(k.location),
            attr: self.attribution(k),
        }
    }

    /// The sampled packets of `slot`: those its sampling CPU has counted and finished writing
    /// (the program sets a sample's time last). Read until a key has all it will get.
    pub(super) fn samples_of(&mut self, slot: u32) -> Vec<Sample> {
        let Some(owner) = self.probe.sample_owner(slot) else {
            return Vec::new();
        };
        let counted = self.probe.slot_count(owner, slot);
        let want = counted.min(dropscope_common::SAMPLES_PER_KEY as u64) as usize;
        let cached = self.sample_cache.entry(slot).or_default();
        if cached.len() < want {
            let offset = unix_ms() as i128 - monotonic_ms() as i128;
            *cached = self
                .probe
                .samples(slot, want as u64)
                .into_iter()
                .map(|s| Sample {
                    unix_ms: (s.ts_ns as i128 / 1_000_000 + offset).max(0) as u64,
                    len: s.len,
                    l3proto: s.l3proto,
                    bytes: s.data[..usize::from(s.caplen).min(s.data.len())].into(),
                })
                .collect();
        }
        cached.clone()
    }

    /// The name of namespace `inode` (the one of `cookie`, where known): the latest found,
    /// or the last one known once it is gone (its drops keep the name they had). The names are
    /// found by inode, which the kernel gives again to a later namespace: a name found is
    /// taken only while the namespace holding the inode is the key's own (same cookie), so a
    /// namespace that ended never takes the name of the one that got its inode.
    pub(super) fn netns_name(&mut self, inode: u64, cookie: Option<u64>) -> Option<Arc<str>> {
        let id = cookie.unwrap_or(inode);
        match self.names.netns(inode) {
            Some(name) if self.known_names.get(&id) == Some(&name) => Some(name),
            Some(name) if self.holds(inode, cookie) => {
                self.known_names.insert(id, name.clone());
                Some(name)
            }
            _ => self.known_names.get(&id).cloned(),
        }
    }

    /// The names of the namespaces reading `r` holds (the initial one aside), found as the
    /// drops' are ([`Self::netns_name`]: a name is taken only while the namespace holding the
    /// inode is the one read, by cookie), without keeping a name for each namespace ever read
    /// (what keeps names of ended namespaces is their drops').
    pub(super) fn reading_names(
        &mut self,
        r: &crate::model::KernelReading,
    ) -> std::collections::BTreeMap<u64, Arc<str>> {
        let mut out = std::collections::BTreeMap::new();
        let before = std::mem::take(&mut self.reading_named);
        let inodes: std::collections::BTreeSet<u64> = (r.netns.keys())
            .chain(r.listeners.keys())
            .chain(r.rules.keys())
            .chain(r.attached.keys())
            .copied()
            .collect();
        for inode in inodes {
            if inode == r.initial_netns {
                continue;
            }
            let cookie = r.cookies.get(&inode).copied();
            let known = self.known_names.get(&cookie.unwrap_or(inode)).cloned();
            let kept = before
                .get(&inode)
                .filter(|(c, _)| *c == cookie)
                .map(|(_, n)| n.clone());
            let name = match self.names.netns(inode) {
                Some(name)
                    if kept.as_ref() == Some(&name)
                        || known.as_ref() == Some(&name)
                        || self.holds(inode, cookie) =>
                {
                    Some(name)
                }
                _ => known.or(kept),
            };
            if let Some(name) = name {
                self.reading_named.insert(inode, (cookie, name.clone()));
                out.insert(inode, name);
            }
        }
        out
    }

    /// Whether the namespace holding `inode` now is the one of `cookie` (always, where the
    /// cookie is unknown): read through the names' way into it, once per inode and names'
    /// generation (a scan may have found another namespace there).
    fn holds(&mut self, inode: u64, cookie: Option<u64>) -> bool {
        let Some(cookie) = cookie else {
            return true;
        };
        let generation = self.names.generation();
        let holder = match self.holders.get(&inode) {
            Some(&(g, holder)) if g == generation => holder,
            _ => {
                // No way in known yet: the names do not know the namespace either, so nothing
                // could be named wrongly; its names are asked for at once (not a round later),
                // and checked once the way in is known.
                let Some(path) = self.names.enter_path(inode) else {
                    return true;
                };
                let holder = crate::names::cookie::of_path(&path)
                    .ok()
                    .filter(|&(i, _)| i == inode)
                    .map(|(_, c)| c);
                // One entry per inode with drops: bounded like the keys.
                self.holders.insert(inode, (generation, holder));
                holder
            }
        };
        holder == Some(cookie)
    }

    /// What a kernel key says of its packets, as the model shows it.
    pub(super) fn attribution(&mut self, k: &dropscope_common::DropKey) -> Attribution {
        let ip = matches!(k.l3proto, 0x0800 | 0x86DD);
        let netns = (k.netns != 0).then_some(u64::from(k.netns));
        let cookie = (netns.is_some() && k.netns_cookie != 0).then_some(k.netns_cookie);
        // A namespace that ended, its inode given again, has no device names to read.
        let live = k.ifindex != 0 && netns.is_some_and(|n| self.holds(n, cookie));
        Attribution {
            netns,
            netns_cookie: cookie,
            netns_name: netns.and_then(|n| self.netns_name(n, cookie)),
            ifindex: (k.ifindex != 0).then_some(k.ifindex),
            // An interface whose name cannot be read (gone, or no right to enter its
            // namespace) is shown by index.
            device: (k.ifindex != 0).then(|| {
                netns
                    .filter(|_| live)
                    .and_then(|n| self.names.device(n, k.ifindex))
                    .unwrap_or_else(|| Arc::from(format!("if{}", k.ifindex)))
            }),
            protocol: ip.then(|| Arc::from(group::protocol_name(k.l4proto))),
            port: (k.port != 0).then_some(k.port),
            socket: Via::from_kernel(k.sock_via).map(|via| {
                Arc::new(Socket {
                    via,
                    inode: k.sock_ino,
                    about: if k.sock_ino == 0 {
                        About::unknown("a time-wait or request socket, or one with no file")
                    } else if k.sock_ino == dropscope_common::SOCK_INO_OVER {
                        About::unknown(
                            "one of the sockets beyond the quarter of the keyed map sockets may \
                         take: their drops are counted here together",
                        )
                    } else {
                        self.sockets.about(k.sock_ino)
                    },
                })
            }),
            culprit: None,
        }
    }
}
