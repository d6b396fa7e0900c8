//! The namespace cookies of a kernel reading (format version 8): per namespace inode, the
//! cookie of the namespace read under it, written whole in a kernel frame and as changes in a
//! kernel delta frame, so that a replayed reading matches drops by cookie as a live one does
//! (see [`crate::model::KernelReading::reads`]).
use std::collections::BTreeMap;

use super::format::{MAX_NETNS, Malformed, Reader, each_netns, put_uvarint};

/// Most a section holds: 20 bytes per cookie, at most [`MAX_NETNS`] of them.
pub(super) const ROOM: usize = MAX_NETNS * 20 + 10;

/// Appends the whole section: at most [`MAX_NETNS`] cookies (never 0, which no namespace has);
/// returns whether every cookie of `cookies` is in it.
pub(super) fn put_whole(out: &mut Vec<u8>, cookies: &BTreeMap<u64, u64>) -> bool {
    let kept: Vec<_> = (cookies.iter())
        .filter(|(_, c)| **c != 0)
        .take(MAX_NETNS)
        .collect();
    put_uvarint(out, kept.len() as u64);
    for (inode, cookie) in &kept {
        put_uvarint(out, **inode);
        put_uvarint(out, **cookie);
    }
    kept.len() == cookies.len()
}

/// Reads a whole section: inodes strictly ascending, cookies not 0, at most [`MAX_NETNS`].
pub(super) fn read_whole(r: &mut Reader) -> Result<BTreeMap<u64, u64>, Malformed> {
    let mut out = BTreeMap::new();
    for (inode, cookie) in changes(r)? {
        if cookie == 0 {
            return Err(Malformed("a namespace cookie of 0"));
        }
        out.insert(inode, cookie);
    }
    Ok(out)
}

/// The changes from `before` to `now` (0: the inode's cookie left the reading), or `None`
/// where only a whole section says it (a cookie of 0, or more than [`MAX_NETNS`]).
pub(super) fn diff(before: &BTreeMap<u64, u64>, now: &BTreeMap<u64, u64>) -> Option<Vec<u8>> {
    if now.len() > MAX_NETNS || now.values().any(|c| *c == 0) {
        return None;
    }
    let mut changed: BTreeMap<u64, u64> = (now.iter())
        .filter(|(i, c)| before.get(i) != Some(c))
        .map(|(i, c)| (*i, *c))
        .collect();
    changed.extend(
        before
            .keys()
            .filter(|i| !now.contains_key(i))
            .map(|i| (*i, 0)),
    );
    if changed.len() > MAX_NETNS {
        return None;
    }
    let mut out = Vec::new();
    put_uvarint(&mut out, changed.len() as u64);
    for (inode, cookie) in changed {
        put_uvarint(&mut out, inode);
        put_uvarint(&mut out, cookie);
    }
    Some(out)
}

/// Reads a section of changes (inodes strictly ascending, at most [`MAX_NETNS`]).
pub(super) fn changes(r: &mut Reader) -> Result<Vec<(u64, u64)>, Malformed> {
    let mut out = Vec::new();
    each_netns(r, |r, inode| {
        out.push((inode, r.uvarint()?));
        Ok(())
    })?;
    Ok(out)
}

/// Applies changes read by [`changes`] to `cookies`, refusing a result beyond [`MAX_NETNS`].
pub(super) fn apply(
    cookies: &mut BTreeMap<u64, u64>,
    changes: &[(u64, u64)],
) -> Result<(), Malformed> {
    for (inode, cookie) in changes {
        match cookie {
            0 => cookies.remove(inode),
            c => cookies.insert(*inode, *c),
        };
    }
    if cookies.len() > MAX_NETNS {
        return Err(Malformed("more namespace cookies than namespaces"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_rebuild_the_later_cookies_and_crafted_ones_are_refused() {
        let before: BTreeMap<u64, u64> = [(1, 10), (2, 20), (3, 30)].into();
        let now: BTreeMap<u64, u64> = [(1, 10), (3, 31), (4, 40)].into();
        let p = diff(&before, &now).expect("a change section");
        let mut rebuilt = before.clone();
        apply(&mut rebuilt, &changes(&mut Reader::new(&p)).expect("reads")).expect("applies");
        assert_eq!(rebuilt, now);
        assert!(diff(&before, &[(5, 0)].into()).is_none(), "0 is no cookie");
        // Whole: a 0 left out (and said), a 0 or an inode out of order refused.
        let mut w = Vec::new();
        assert!(!put_whole(&mut w, &[(1, 10), (2, 0)].into()));
        assert_eq!(read_whole(&mut Reader::new(&w)), Ok([(1, 10)].into()));
        for crafted in [[1u8, 5, 0], [2, 5, 1]] {
            let mut p = crafted.to_vec();
            p.extend([4, 1]);
            assert!(read_whole(&mut Reader::new(&p)).is_err(), "{crafted:?}");
        }
    }
}
