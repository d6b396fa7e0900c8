//! A generator of hostile recordings: valid frames with correct checksums whose contents attack
//! the reader and every consumer (allocation bombs, deep stacks, long or escaping names, huge
//! weights). Written from the format description (docs/recording-format.md), independently of
//! dropscope's own writer, so it can write what that writer never would.
use std::path::Path;

/// A recording being built, frame by frame.
pub struct HostileRecording {
    bytes: Vec<u8>,
}

/// Frame kinds.
const INFO: u8 = 0;
const DICTIONARY: u8 = 1;
const KEYFRAME: u8 = 2;
const END: u8 = 4;

/// Appends `v` as an unsigned LEB128 varint.
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

impl HostileRecording {
    /// The file header and a session frame naming `host` and `kernel`.
    pub fn new(host: &str, kernel: &str) -> Self {
        let mut r = Self {
            bytes: b"\x89DROPSCOPE\r\n\x1a\n\x01\x00".to_vec(),
        };
        let mut p = Vec::new();
        string(&mut p, host);
        string(&mut p, kernel);
        varint(&mut p, 1_700_000_000_000);
        string(&mut p, "tp_btf/kfree_skb");
        r.frame(INFO, 0, &p, false);
        r
    }

    /// Appends one frame with a correct checksum; `compress`: as an LZ4 block.
    pub fn frame(&mut self, kind: u8, elapsed_ns: u64, raw: &[u8], compress: bool) -> &mut Self {
        let payload = if compress {
            let mut p = Vec::new();
            varint(&mut p, raw.len() as u64);
            p.extend_from_slice(&lz4_flex::block::compress(raw));
            p
        } else {
            raw.to_vec()
        };
        let start = self.bytes.len();
        self.bytes
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.bytes
            .extend_from_slice(&[kind, u8::from(compress), 0, 0]);
        self.bytes.extend_from_slice(&elapsed_ns.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&self.bytes[start..start + 16]);
        h.update(&payload);
        self.bytes.extend_from_slice(&h.finalize().to_le_bytes());
        self.bytes.extend_from_slice(&payload);
        self
    }

    /// A dictionary frame: `strings`, keys as (reason code, name id, location id), stacks as
    /// (key id, frame ids).
    pub fn dictionary(
        &mut self,
        strings: &[&str],
        keys: &[(u32, u64, u64)],
        stacks: &[(u64, Vec<u64>)],
        compress: bool,
    ) -> &mut Self {
        let mut p = Vec::new();
        varint(&mut p, strings.len() as u64);
        for s in strings {
            string(&mut p, s);
        }
        varint(&mut p, keys.len() as u64);
        for &(code, name, location) in keys {
            varint(&mut p, code.into());
            varint(&mut p, name);
            varint(&mut p, location);
        }
        varint(&mut p, stacks.len() as u64);
        for (key, frames) in stacks {
            varint(&mut p, *key);
            varint(&mut p, frames.len() as u64);
            for &f in frames {
                varint(&mut p, f);
            }
        }
        self.frame(DICTIONARY, 0, &p, compress)
    }

    /// A keyframe at 1 s: every key `0..keys` with count 1 (total = keys), and the stacks
    /// given as (stack id, weight), ascending.
    pub fn keyframe(&mut self, keys: u64, stacks: &[(u64, u64)]) -> &mut Self {
        let mut p = Vec::new();
        varint(&mut p, 1_700_000_001_000);
        varint(&mut p, keys);
        varint(&mut p, 0);
        // Health: eight plain fields, three optional ones (none), two plain ones.
        p.extend_from_slice(&[0; 13]);
        varint(&mut p, keys);
        for _ in 0..keys {
            // Ids ascend by one: every gap is 0.
            p.extend_from_slice(&[0, 1]);
        }
        varint(&mut p, stacks.len() as u64);
        let mut last: Option<u64> = None;
        for &(id, weight) in stacks {
            varint(&mut p, last.map_or(id, |l| id - l - 1));
            last = Some(id);
            varint(&mut p, weight);
            varint(&mut p, 1);
        }
        self.frame(KEYFRAME, 1_000_000_000, &p, false)
    }

    /// The end marker.
    pub fn end(&mut self) -> &mut Self {
        self.frame(END, 1_000_000_000, &[], false)
    }

    /// The bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Writes the bytes to `path`.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.bytes).expect("write the hostile recording");
    }
}

/// The allocation bomb: one key, then `frames` LZ4 dictionary frames of 8 M empty stacks each
/// (16 MiB raw, about 64 KiB stored). Once took about 14 GB per MB of file to open.
pub fn empty_stack_bomb(frames: usize) -> HostileRecording {
    let mut r = HostileRecording::new("bomb", "6.18");
    r.dictionary(&["R"], &[(3, 0, 0)], &[], false);
    // No strings, no keys, then as many stacks (key 0, no frames: two zero bytes each) as fit
    // in 16 MiB.
    let stacks = ((16usize << 20) - 8) / 2;
    let mut p = vec![0u8, 0u8];
    varint(&mut p, stacks as u64);
    p.resize(p.len() + 2 * stacks, 0);
    for _ in 0..frames {
        r.frame(DICTIONARY, 0, &p, true);
    }
    r.keyframe(1, &[]).end();
    r
}

/// One stack of `depth` frames, all the same one-letter name, with weight 5.
pub fn deep_stack(depth: usize) -> HostileRecording {
    let mut r = HostileRecording::new("deep", "6.18");
    let frames = vec![1u64; depth];
    r.dictionary(&["R", "f"], &[(3, 0, 1)], &[(0, frames)], true);
    r.keyframe(1, &[(0, 5)]).end();
    r
}

/// One stack of `frames` frames, each the same name of `len` bytes, with weight 5.
pub fn long_name_stack(len: usize, frames: usize) -> HostileRecording {
    let mut r = HostileRecording::new("long", "6.18");
    let name = "x".repeat(len);
    r.dictionary(
        &["R", &name],
        &[(3, 0, 1)],
        &[(0, vec![1u64; frames])],
        true,
    );
    r.keyframe(1, &[(0, 5)]).end();
    r
}

/// A key whose reason and location carry terminal escapes (title, clipboard, clear screen),
/// CR/BS row forgery, C1 controls and a bidi override.
pub fn escaping_names() -> HostileRecording {
    let mut r = HostileRecording::new("h\x1b]0;pwned\x07", "k\u{9b}2J");
    let reason = "NO_SOCKET\x1b]0;TITLE\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J";
    let location = "loc\rFORGED_ROW 999 100.0%\u{8}\u{9b}31m\u{202e}gnp.exe";
    r.dictionary(&[reason, location], &[(3, 0, 1)], &[], false);
    r.keyframe(1, &[]).end();
    r
}

/// A key whose location is `len` bytes long.
pub fn long_location(len: usize) -> HostileRecording {
    let mut r = HostileRecording::new("h", "k");
    let location = "l".repeat(len);
    r.dictionary(&["R", &location], &[(3, 0, 1)], &[], true);
    r.keyframe(1, &[]).end();
    r
}

/// A recording whose flamegraph once was not XML: control characters in host and kernel,
/// U+FFFE in a frame.
pub fn invalid_xml_names() -> HostileRecording {
    let mut r = HostileRecording::new("host\u{1}\u{1b}", "kernel\u{0}\u{b}");
    r.dictionary(
        &["R", "frame\u{fffe}", "site\u{ffff}"],
        &[(3, 0, 2)],
        &[(0, vec![1, 2])],
        false,
    );
    r.keyframe(1, &[(0, 5)]).end();
    r
}

/// Two stacks whose weights add up to more than 2^64.
pub fn huge_weights() -> HostileRecording {
    let mut r = HostileRecording::new("h", "k");
    r.dictionary(
        &["R", "a", "b"],
        &[(3, 0, 1)],
        &[(0, vec![1]), (0, vec![2])],
        false,
    );
    r.keyframe(1, &[(0, u64::MAX - 10), (1, u64::MAX - 10)])
        .end();
    r
}
