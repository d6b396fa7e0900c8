//! A key's socket in a recording (version 7 on): its identity in the key's definition (one
//! varint, `via << 32 | inode`), and what was found of it (`About`) in a dictionary frame's
//! socket section, written again when it changes (at most [`MAX_RENAMES_PER_KEY`] times a
//! key), as names are. See docs/recording-format.md.
use std::sync::Arc;

use super::{
    budget::MAX_RENAMES_PER_KEY,
    format::{Malformed, Reader, put_uvarint},
};
use crate::vocab::socket::{About, Found, Holder, MAX_HOLDERS, Socket, Via};

/// What a socket's `about` is written as: its bytes with string ids (compared to know when it
/// changed).
pub(super) type AboutRef = Vec<u8>;

/// `via << 32 | inode`: a socket's identity as one varint.
pub(super) fn identity(s: &Socket) -> u64 {
    let via: u64 = match s.via {
        Via::Receiving => 1,
        Via::Owner => 2,
    };
    via << 32 | u64::from(s.inode)
}

/// The socket of identity `v`, not yet described.
pub(super) fn from_identity(v: u64) -> Result<Socket, Malformed> {
    let via = match v >> 32 {
        1 => Via::Receiving,
        2 => Via::Owner,
        _ => return Err(Malformed("unknown socket kind")),
    };
    Ok(Socket {
        via,
        inode: v as u32,
        about: About::unknown("not recorded"),
    })
}

/// `about` as written, its strings interned with `string`: 0 and a reason (unknown), or 1,
/// the holders (count, then pid and command each), the holders beyond them, then protocol,
/// local address and receive buffer, each 0 for none or one more than its value (a string's
/// id).
pub(super) fn encode(about: &About, mut string: impl FnMut(&Arc<str>) -> u32) -> AboutRef {
    let mut p = Vec::new();
    match about {
        About::Unknown { why } => {
            put_uvarint(&mut p, 0);
            put_uvarint(&mut p, string(why).into());
        }
        About::Exact(f) => {
            put_uvarint(&mut p, 1);
            let holders = &f.holders[..f.holders.len().min(MAX_HOLDERS)];
            put_uvarint(&mut p, holders.len() as u64);
            for h in holders {
                put_uvarint(&mut p, h.pid.into());
                put_uvarint(&mut p, string(&Arc::from(h.comm.as_str())).into());
            }
            let more = f.more_holders as usize + (f.holders.len() - holders.len());
            put_uvarint(&mut p, more as u64);
            for s in [&f.protocol, &f.local] {
                put_uvarint(&mut p, s.as_ref().map_or(0, |s| u64::from(string(s)) + 1));
            }
            put_uvarint(&mut p, f.rcvbuf.map_or(0, |r| u64::from(r) + 1));
        }
    }
    p
}

/// Reads an `about` written by [`encode`]; `string` resolves a string id, and `referenced`
/// is told the length of each string it references (the reader's budget).
pub(super) fn decode(
    r: &mut Reader<'_>,
    string: impl Fn(u64) -> Result<Arc<str>, Malformed>,
    referenced: &mut usize,
) -> Result<About, Malformed> {
    let mut take = |id: u64| -> Result<Arc<str>, Malformed> {
        let s = string(id)?;
        *referenced += s.len();
        Ok(s)
    };
    match r.uvarint()? {
        0 => Ok(About::Unknown {
            why: take(r.uvarint()?)?,
        }),
        1 => {
            let n = r.count(2)?;
            if n > MAX_HOLDERS {
                return Err(Malformed("too many holders of a socket"));
            }
            let holders = (0..n)
                .map(|_| {
                    let pid = r.u32()?;
                    let comm = take(r.uvarint()?)?.to_string();
                    Ok(Holder { pid, comm })
                })
                .collect::<Result<Vec<_>, Malformed>>()?;
            let more_holders = r.u32()?;
            let mut opt = |r: &mut Reader<'_>| match r.uvarint()? {
                0 => Ok(None),
                id => take(id - 1).map(Some),
            };
            let protocol = opt(r)?;
            let local = opt(r)?;
            let rcvbuf = match r.uvarint()? {
                0 => None,
                v => Some(u32::try_from(v - 1).map_err(|_| Malformed("buffer too large"))?),
            };
            Ok(About::Exact(Found {
                holders,
                more_holders,
                protocol,
                local,
                rcvbuf,
            }))
        }
        _ => Err(Malformed("unknown socket description")),
    }
}

/// A key's `about` as last written, and how often it was written again.
type Last = Option<(AboutRef, u8)>;

/// How often each key's `about` was written, and as what: the encoder's side of the bound.
#[derive(Default)]
pub(super) struct Written {
    /// By key id.
    by_key: Vec<Last>,
    /// Written in the pending frame: key id, what, and what was there before.
    pending: Vec<(u32, AboutRef, Last)>,
}

impl Written {
    /// Takes `about` of key `id` for the pending frame if it differs from what was written
    /// and the key may be written again.
    pub(super) fn offer(&mut self, id: u32, about: AboutRef) {
        let i = id as usize;
        if self.by_key.len() <= i {
            self.by_key.resize(i + 1, None);
        }
        let before = self.by_key[i].clone();
        let count = match &before {
            Some((w, _)) if *w == about => return,
            Some((_, n)) if *n >= MAX_RENAMES_PER_KEY => return,
            Some((_, n)) => n + 1,
            None => 0,
        };
        self.by_key[i] = Some((about.clone(), count));
        self.pending.push((id, about, before));
    }

    /// Whether the pending frame has any.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Appends the pending section (count, then key id and about each).
    pub(super) fn put(&self, p: &mut Vec<u8>) {
        put_uvarint(p, self.pending.len() as u64);
        for (id, about, _) in &self.pending {
            put_uvarint(p, (*id).into());
            p.extend_from_slice(about);
        }
    }

    /// The pending frame was written.
    pub(super) fn commit(&mut self) {
        self.pending.clear();
    }

    /// The pending frame was not written: forget what it took.
    pub(super) fn roll_back(&mut self) {
        for (id, _, before) in self.pending.drain(..).rev() {
            if let Some(slot) = self.by_key.get_mut(id as usize) {
                *slot = before;
            }
        }
    }
}

/// Reads a dictionary frame's socket section into `keys` (by id), each key at most
/// [`MAX_RENAMES_PER_KEY`] + 1 times (`written` counts them); the strings referenced are
/// added to `referenced`.
pub(super) fn read_section(
    r: &mut Reader<'_>,
    keys: &mut [crate::model::DropKey],
    written: &mut Vec<u8>,
    string: impl Fn(u64) -> Result<Arc<str>, Malformed>,
    referenced: &mut usize,
) -> Result<(), Malformed> {
    let n = r.count(3)?;
    for _ in 0..n {
        let id = usize::try_from(r.uvarint()?).map_err(|_| Malformed("key id too large"))?;
        let about = decode(r, &string, referenced)?;
        if written.len() < keys.len() {
            written.resize(keys.len(), 0);
        }
        let (Some(key), Some(times)) = (keys.get_mut(id), written.get_mut(id)) else {
            return Err(Malformed("socket of an undefined key"));
        };
        let Some(socket) = key.attr.socket.as_mut() else {
            return Err(Malformed("socket description of a key without a socket"));
        };
        if *times > MAX_RENAMES_PER_KEY {
            return Err(Malformed("a socket described too often"));
        }
        *times += 1;
        std::sync::Arc::make_mut(socket).about = about;
    }
    Ok(())
}
