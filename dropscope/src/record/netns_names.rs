//! The namespace names of a kernel reading (format version 10): per namespace inode, the name
//! the collector found for it (see [`crate::names`]), written whole in a kernel frame and as
//! changes in a kernel delta frame, so that a replayed ledger, `serve --history` and its
//! replays name a namespace no drop named (one with only unseen drops) as live does.
use std::{collections::BTreeMap, sync::Arc};

use super::format::{MAX_NETNS, Malformed, Reader, each_netns, put_str, put_uvarint};

/// Longest name written (a name is at most [`crate::names::MAX_NAME`] characters, with a
/// `user UID: ` prefix for what a user could have made up).
pub(super) const MAX_NAME_BYTES: usize = 512;

/// Most a section holds; names beyond it are left out (a note says how many), and the
/// namespaces are then labelled by inode.
pub(super) const ROOM: usize = 64 << 10;

/// Whether `name` is one a reader takes.
fn recordable(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES
}

/// Appends the whole section: names within [`ROOM`], at most [`MAX_NETNS`]; returns how many
/// of `names` are left out.
pub(super) fn put_whole(out: &mut Vec<u8>, names: &BTreeMap<u64, Arc<str>>) -> usize {
    let mut used = 0;
    let kept: Vec<_> = (names.iter())
        .filter(|(_, n)| recordable(n))
        .take(MAX_NETNS)
        .take_while(|(_, n)| {
            used += n.len() + 12;
            used <= ROOM
        })
        .collect();
    put_uvarint(out, kept.len() as u64);
    for (inode, name) in &kept {
        put_uvarint(out, **inode);
        put_str(out, name);
    }
    names.len() - kept.len()
}

/// Reads a whole section: inodes strictly ascending, names not empty and within
/// [`MAX_NAME_BYTES`], at most [`MAX_NETNS`] and [`ROOM`].
pub(super) fn read_whole(r: &mut Reader) -> Result<BTreeMap<u64, Arc<str>>, Malformed> {
    let mut out = BTreeMap::new();
    for (inode, name) in changes(r)? {
        if name.is_empty() {
            return Err(Malformed("an empty namespace name"));
        }
        out.insert(inode, name);
    }
    Ok(out)
}

/// The changes from `before` to `now` (an empty name: the inode's name left the reading), or
/// `None` where only a whole section says it (a name a reader would not take, or beyond the
/// room).
pub(super) fn diff(
    before: &BTreeMap<u64, Arc<str>>,
    now: &BTreeMap<u64, Arc<str>>,
) -> Option<Vec<u8>> {
    if now.len() > MAX_NETNS || now.values().any(|n| !recordable(n)) {
        return None;
    }
    let mut changed: BTreeMap<u64, &str> = (now.iter())
        .filter(|(i, n)| before.get(i) != Some(n))
        .map(|(i, n)| (*i, &**n))
        .collect();
    changed.extend(
        before
            .keys()
            .filter(|i| !now.contains_key(i))
            .map(|i| (*i, "")),
    );
    let mut out = Vec::new();
    put_uvarint(&mut out, changed.len() as u64);
    for (inode, name) in changed {
        put_uvarint(&mut out, inode);
        put_str(&mut out, name);
    }
    (out.len() <= ROOM && now.values().map(|n| n.len() + 12).sum::<usize>() <= ROOM).then_some(out)
}

/// Reads a section of changes (inodes strictly ascending, at most [`MAX_NETNS`], names within
/// [`MAX_NAME_BYTES`], the section within [`ROOM`]).
pub(super) fn changes(r: &mut Reader) -> Result<Vec<(u64, Arc<str>)>, Malformed> {
    let (mut out, mut used) = (Vec::new(), 0usize);
    each_netns(r, |r, inode| {
        let name = r.str()?;
        if name.len() > MAX_NAME_BYTES {
            return Err(Malformed("a namespace name too long"));
        }
        used += name.len() + 12;
        if used > ROOM {
            return Err(Malformed("namespace names beyond their room"));
        }
        out.push((inode, Arc::from(name)));
        Ok(())
    })?;
    Ok(out)
}

/// Applies changes read by [`changes`] to `names`, refusing a result beyond [`MAX_NETNS`] or
/// [`ROOM`].
pub(super) fn apply(
    names: &mut BTreeMap<u64, Arc<str>>,
    changes: &[(u64, Arc<str>)],
) -> Result<(), Malformed> {
    for (inode, name) in changes {
        if name.is_empty() {
            names.remove(inode);
        } else {
            names.insert(*inode, name.clone());
        }
    }
    if names.len() > MAX_NETNS || names.values().map(|n| n.len() + 12).sum::<usize>() > ROOM {
        return Err(Malformed("namespace names beyond their room"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(of: &[(u64, &str)]) -> BTreeMap<u64, Arc<str>> {
        of.iter().map(|(i, n)| (*i, Arc::from(*n))).collect()
    }

    #[test]
    fn changes_rebuild_the_later_names_and_crafted_ones_are_refused() {
        let before = names(&[(1, "web"), (2, "db"), (3, "cache")]);
        let now = names(&[(1, "web"), (3, "docker:cache"), (4, "user 1000: podman:x")]);
        let p = diff(&before, &now).expect("a change section");
        let mut rebuilt = before.clone();
        apply(&mut rebuilt, &changes(&mut Reader::new(&p)).expect("reads")).expect("applies");
        assert_eq!(rebuilt, now);
        // Whole: an empty or overlong name left out (and counted), the rest read back.
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let mut w = Vec::new();
        let odd = names(&[(1, "web"), (2, ""), (3, &long)]);
        assert_eq!(put_whole(&mut w, &odd), 2);
        assert_eq!(read_whole(&mut Reader::new(&w)), Ok(names(&[(1, "web")])));
        assert!(
            diff(&before, &odd).is_none(),
            "only a whole section says it"
        );
        // Crafted: inodes out of order, an empty name in a whole section, an overlong one.
        let mut p = Vec::new();
        put_uvarint(&mut p, 2);
        for (i, n) in [(5, "a"), (4, "b")] {
            put_uvarint(&mut p, i);
            put_str(&mut p, n);
        }
        assert!(read_whole(&mut Reader::new(&p)).is_err());
        for name in ["", long.as_str()] {
            let mut p = Vec::new();
            put_uvarint(&mut p, 1);
            put_uvarint(&mut p, 7);
            put_str(&mut p, name);
            assert!(read_whole(&mut Reader::new(&p)).is_err(), "{name:?}");
        }
        // More names than the room holds: left out whole, refused when crafted.
        let many: BTreeMap<u64, Arc<str>> = (0..MAX_NETNS as u64)
            .map(|i| (i, Arc::from("n".repeat(100))))
            .collect();
        let mut w = Vec::new();
        let left = put_whole(&mut w, &many);
        assert!(left > 0 && left < MAX_NETNS, "{left}");
        assert_eq!(
            read_whole(&mut Reader::new(&w)).expect("reads").len(),
            MAX_NETNS - left
        );
        let mut rebuilt = BTreeMap::new();
        let all: Vec<_> = many.into_iter().collect();
        assert!(apply(&mut rebuilt, &all).is_err());
    }
}
