//! Hand-made recordings that no recorder writes (one name shared by every key, long chains of
//! deltas, many sampled keys): hostile input for the tests of the reader's and the consumers'
//! limits, and for the fuzz target. Each is a valid recording, checksums included.
use super::{
    encoder::header,
    format::{Kind, push_frame, put_str, put_uvarint},
    health,
};
use crate::model::{Health, SessionInfo};

/// What one dictionary frame of a crafted recording defines.
#[derive(Clone, Debug, Default)]
pub struct Dict {
    /// Names, ids in order.
    pub strings: Vec<String>,
    /// Keys as (reason code, reason name id, location id), no attribution.
    pub keys: Vec<(u32, u64, u64)>,
    /// Stacks as (key id, frame string ids, outermost first).
    pub stacks: Vec<(u64, Vec<u64>)>,
    /// Key ids with one sampled packet each (a 28-byte IPv4/UDP header to port 53).
    pub samples: Vec<u64>,
}

/// The 28 bytes of an IPv4/UDP packet from 10.0.0.1:4000 to 10.0.0.2:53.
const PACKET: [u8; 28] = [
    0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x0f, 0xa0, 0, 53, 0, 8,
    0, 0,
];

fn session() -> SessionInfo {
    SessionInfo {
        host: "crafted".into(),
        kernel: "6.12.0".into(),
        started_unix_ms: 1_750_000_000_000,
        probe: "tp_btf/kfree_skb".into(),
    }
}

fn dictionary(d: &Dict) -> Vec<u8> {
    let mut p = Vec::new();
    put_uvarint(&mut p, d.strings.len() as u64);
    for s in &d.strings {
        put_str(&mut p, s);
    }
    put_uvarint(&mut p, d.keys.len() as u64);
    for &(code, name, location) in &d.keys {
        for v in [u64::from(code), name, location, 0] {
            put_uvarint(&mut p, v);
        }
    }
    put_uvarint(&mut p, d.stacks.len() as u64);
    for (key, frames) in &d.stacks {
        put_uvarint(&mut p, *key);
        put_uvarint(&mut p, frames.len() as u64);
        for &f in frames {
            put_uvarint(&mut p, f);
        }
    }
    put_uvarint(&mut p, d.samples.len() as u64);
    for (i, &key) in d.samples.iter().enumerate() {
        let fields = [key, 1_750_000_000_000 + i as u64, 28, 0x0800, 28];
        for v in fields {
            put_uvarint(&mut p, v);
        }
        p.extend_from_slice(&PACKET);
    }
    // No key renamed (version 3 on).
    put_uvarint(&mut p, 0);
    p
}

/// A recording of `d`'s definitions, a keyframe in which every key counts one drop and every
/// stack weighs 1, then `deltas` delta frames (one a second) each adding a drop to key 0.
pub fn recording(d: &Dict, deltas: usize) -> Vec<u8> {
    const SEC: u64 = 1_000_000_000;
    let mut out = header(&session()).expect("a fixed session fits a recording");
    let push = |out: &mut Vec<u8>, kind, at, p: &[u8]| {
        push_frame(out, kind, at, p).expect("crafted frames stay within 16 MiB")
    };
    push(&mut out, Kind::Dictionary, 0, &dictionary(d));
    let mut k = Vec::new();
    let n = d.keys.len() as u64;
    for v in [1_750_000_000_000, n, 0] {
        put_uvarint(&mut k, v);
    }
    health::put_full(&mut k, &Health::default());
    put_uvarint(&mut k, n);
    for _ in 0..n {
        // Ids as gaps: the first is 0, each next one follows at once.
        put_uvarint(&mut k, 0);
        put_uvarint(&mut k, 1);
    }
    put_uvarint(&mut k, d.stacks.len() as u64);
    for _ in &d.stacks {
        for v in [0, 1, 1] {
            put_uvarint(&mut k, v);
        }
    }
    push(&mut out, Kind::Keyframe, 0, &k);
    for i in 0..deltas {
        let mut p = Vec::new();
        // unix_ms + 1000, total + 1, overflow unchanged, health unchanged.
        for v in [2000, 2, 0, 0] {
            put_uvarint(&mut p, v);
        }
        // No key removed, key 0 changed by +1, no stack removed or changed.
        for v in [0, 1, 0, 2, 0, 0] {
            put_uvarint(&mut p, v);
        }
        push(&mut out, Kind::Delta, (i as u64 + 1) * SEC, &p);
    }
    let end = (deltas as u64) * SEC;
    push(&mut out, Kind::End, end, &[]);
    out
}

/// `keys` identical keys whose location is one name of `name_len` bytes (`x`s), of reason `R`.
pub fn shared_name(keys: usize, name_len: usize) -> Vec<u8> {
    let d = Dict {
        strings: vec!["R".into(), "x".repeat(name_len)],
        keys: vec![(2, 0, 1); keys],
        ..Default::default()
    };
    recording(&d, 0)
}

/// `keys` keys of distinct short names, each with one sampled packet.
pub fn sampled_keys(keys: usize) -> Vec<u8> {
    let d = Dict {
        strings: (0..keys)
            .map(|i| format!("f{i}"))
            .chain(["R".into()])
            .collect(),
        keys: (0..keys as u64).map(|i| (2, keys as u64, i)).collect(),
        samples: (0..keys as u64).collect(),
        ..Default::default()
    };
    recording(&d, 0)
}
