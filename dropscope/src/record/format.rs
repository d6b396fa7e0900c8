//! The recording format's building blocks: file header, frame header, varints and compression.
//!
//! The layout is documented in `docs/recording-format.md`; this module is its single definition.
use super::error::RecordError;

/// First bytes of every recording (PNG-style: a high-bit byte, the name, CR LF, ^Z, LF).
pub const MAGIC: [u8; 14] = *b"\x89DROPSCOPE\r\n\x1a\n";
/// The format version this dropscope writes and the newest it reads.
pub const VERSION: u16 = 10;
/// Bytes in the file header: magic and version.
pub const FILE_HEADER_LEN: usize = MAGIC.len() + 2;
/// Bytes in a frame header: length, kind, flags, reserved, elapsed, CRC32.
pub const FRAME_HEADER_LEN: usize = 20;
/// Largest frame payload, stored or decompressed: a bound on what any input can make us allocate.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// Largest single string (a name, a location or a stack frame).
pub const MAX_STRING: usize = 64 << 10;
/// Flag bit: the payload is LZ4-compressed (a varint of the raw length, then an LZ4 block).
pub const FLAG_LZ4: u8 = 1;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Session metadata; the first frame of every file.
    Info = 0,
    /// New strings, keys and stacks, numbered in order after those already defined.
    Dictionary = 1,
    /// A full snapshot: every present key with its absolute count.
    Keyframe = 2,
    /// The changes since the previous snapshot frame.
    Delta = 3,
    /// The recorder finished cleanly; nothing follows.
    End = 4,
    /// A reading of the kernel's own counters (version 4).
    Kernel = 5,
    /// The kernel counters that changed since the kernel frame before (version 5).
    KernelDelta = 6,
    /// Who could have dropped: rulesets, attached programs and full listeners (version 8).
    Attribution = 7,
    /// The drop rules' counters that changed since the attribution frame before (version 9).
    AttributionDelta = 8,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Info,
            1 => Kind::Dictionary,
            2 => Kind::Keyframe,
            3 => Kind::Delta,
            4 => Kind::End,
            5 => Kind::Kernel,
            6 => Kind::KernelDelta,
            7 => Kind::Attribution,
            8 => Kind::AttributionDelta,
            _ => return None,
        })
    }
}

/// The fixed-size header in front of every frame payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Stored payload length in bytes.
    pub len: u32,
    /// What the frame holds.
    pub kind: Kind,
    /// `FLAG_LZ4` or 0.
    pub flags: u8,
    /// Elapsed time of the snapshot the frame belongs to, in nanoseconds.
    pub elapsed_ns: u64,
    /// CRC32 (IEEE) of header bytes 0..16 followed by the stored payload.
    pub crc: u32,
}

/// Why a frame header could not be parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    /// An unknown kind, unknown flags or non-zero reserved bytes.
    Invalid(&'static str),
    /// The stated length exceeds `MAX_PAYLOAD`.
    TooLong(u32),
}

impl FrameHeader {
    /// Parses the 20 header bytes (does not check the CRC: that needs the payload).
    pub fn parse(b: &[u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, HeaderProblem> {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let kind = Kind::from_u8(b[4]).ok_or(HeaderProblem::Invalid("unknown frame kind"))?;
        let flags = b[5];
        if flags & !FLAG_LZ4 != 0 {
            return Err(HeaderProblem::Invalid("unknown frame flags"));
        }
        if b[6] != 0 || b[7] != 0 {
            return Err(HeaderProblem::Invalid("non-zero reserved bytes"));
        }
        if len as usize > MAX_PAYLOAD {
            return Err(HeaderProblem::TooLong(len));
        }
        let mut e = [0u8; 8];
        e.copy_from_slice(&b[8..16]);
        let elapsed_ns = u64::from_le_bytes(e);
        let crc = u32::from_le_bytes([b[16], b[17], b[18], b[19]]);
        Ok(FrameHeader {
            len,
            kind,
            flags,
            elapsed_ns,
            crc,
        })
    }

    /// Whether `payload` (as stored) matches the header's checksum.
    pub fn crc_matches(&self, header: &[u8; FRAME_HEADER_LEN], payload: &[u8]) -> bool {
        checksum(&header[..16], payload) == self.crc
    }
}

/// The CRC32 of a frame: header bytes 0..16, then the stored payload.
pub fn checksum(head16: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head16);
    h.update(payload);
    h.finalize()
}

/// Appends one complete frame (header and payload, compressed when that makes it smaller).
pub fn push_frame(
    out: &mut Vec<u8>,
    kind: Kind,
    elapsed_ns: u64,
    raw: &[u8],
) -> Result<(), RecordError> {
    if raw.len() > MAX_PAYLOAD {
        return Err(RecordError::FrameTooLarge(raw.len()));
    }
    let mut packed = Vec::new();
    if raw.len() >= 64 {
        put_uvarint(&mut packed, raw.len() as u64);
        packed.extend_from_slice(&lz4_flex::block::compress(raw));
    }
    let (flags, payload) = if !packed.is_empty() && packed.len() < raw.len() {
        (FLAG_LZ4, &packed[..])
    } else {
        (0, raw)
    };
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[kind as u8, flags, 0, 0]);
    out.extend_from_slice(&elapsed_ns.to_le_bytes());
    let crc = checksum(&out[start..start + 16], payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// The raw payload of a frame whose stored payload passed its checksum.
///
/// Never allocates more than `MAX_PAYLOAD`, nor more than 256 times the stored length.
pub fn unpack(flags: u8, stored: &[u8]) -> Result<Vec<u8>, &'static str> {
    if flags & FLAG_LZ4 == 0 {
        return Ok(stored.to_vec());
    }
    let mut r = Reader::new(stored);
    let raw_len = r.uvarint().map_err(|_| "bad compressed length")?;
    let block = r.rest();
    let bound = block.len().saturating_mul(256).min(MAX_PAYLOAD);
    if raw_len > bound as u64 {
        return Err("implausible compressed length");
    }
    let mut out = vec![0u8; raw_len as usize];
    match lz4_flex::block::decompress_into(block, &mut out) {
        Ok(n) if n == out.len() => Ok(out),
        Ok(_) => Err("compressed length mismatch"),
        Err(_) => Err("bad compressed data"),
    }
}

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag-encodes a wrapping difference `new - old`, so that small changes either way are small.
pub fn zigzag_diff(old: u64, new: u64) -> u64 {
    let d = new.wrapping_sub(old) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// Applies a zigzag-encoded wrapping difference to `old`.
pub fn apply_zigzag(old: u64, z: u64) -> u64 {
    let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
    old.wrapping_add(d as u64)
}

/// Appends a length-prefixed UTF-8 string.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked reader over a payload: every read fails cleanly at the end of its input.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The reader ran out of bytes or met an invalid value.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// All bytes not yet read, consuming them.
    pub fn rest(&mut self) -> &'a [u8] {
        let r = &self.buf[self.pos..];
        self.pos = self.buf.len();
        r
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits in a u64.
    pub fn uvarint(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or(Malformed("payload ends inside a number"))?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(Malformed("number too large"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Malformed("number too long"))
    }

    /// A varint that must fit in a u32.
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        u32::try_from(self.uvarint()?).map_err(|_| Malformed("number too large"))
    }

    /// A count of items each taking at least `min_bytes` bytes: bounded by what is left to read.
    pub fn count(&mut self, min_bytes: usize) -> Result<usize, Malformed> {
        let n = self.uvarint()?;
        if n > (self.remaining() / min_bytes.max(1)) as u64 {
            return Err(Malformed("count larger than the payload"));
        }
        Ok(n as usize)
    }

    /// A single byte.
    pub fn byte(&mut self) -> Result<u8, Malformed> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(Malformed("payload ends inside a value"))?;
        self.pos += 1;
        Ok(b)
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, Malformed> {
        let n = self.uvarint()?;
        if n > MAX_STRING as u64 || n > self.remaining() as u64 {
            return Err(Malformed("string longer than the payload"));
        }
        let bytes = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        std::str::from_utf8(bytes).map_err(|_| Malformed("string is not UTF-8"))
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.remaining() {
            return Err(Malformed("bytes beyond the payload"));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// Fails unless every byte has been read.
    pub fn finish(&self) -> Result<(), Malformed> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Malformed("trailing bytes in payload"))
        }
    }
}

/// Most namespaces in one reading.
pub(super) const MAX_NETNS: usize = 4096;

/// Reads a frame's namespaces (kernel, kernel delta, attribution, cookies): at most
/// [`MAX_NETNS`], inodes strictly ascending, each inode followed by what `each` reads.
pub(super) fn each_netns(
    r: &mut Reader,
    mut each: impl FnMut(&mut Reader, u64) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    let n = r.count(2)?;
    if n > MAX_NETNS {
        return Err(Malformed(
            "a frame with more namespaces than a reading holds",
        ));
    }
    let mut last = None;
    for _ in 0..n {
        let ns = r.uvarint()?;
        if last.is_some_and(|l| l >= ns) {
            return Err(Malformed("a frame's namespaces out of order"));
        }
        last = Some(ns);
        each(r, ns)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put_uvarint(&mut b, v);
            let mut r = Reader::new(&b);
            assert_eq!(r.uvarint(), Ok(v));
            assert!(r.finish().is_ok());
        }
        // Eleven continuation bytes, and a tenth byte carrying bits beyond 64.
        assert!(Reader::new(&[0xff; 11]).uvarint().is_err());
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(Reader::new(&over).uvarint().is_err());
    }

    #[test]
    fn zigzag_differences_are_exact_for_all_u64() {
        for (a, b) in [
            (0, u64::MAX),
            (u64::MAX, 0),
            (5, 3),
            (3, 5),
            (7, 7),
            (0, 1 << 63),
        ] {
            assert_eq!(apply_zigzag(a, zigzag_diff(a, b)), b);
        }
        assert_eq!(zigzag_diff(10, 11), 2);
        assert_eq!(zigzag_diff(11, 10), 1);
    }

    #[test]
    fn frames_compress_only_when_it_pays_and_unpack_exactly() {
        let raw = vec![7u8; 4000];
        let mut out = Vec::new();
        push_frame(&mut out, Kind::Keyframe, 42, &raw).expect("frame");
        let mut h = [0u8; FRAME_HEADER_LEN];
        h.copy_from_slice(&out[..FRAME_HEADER_LEN]);
        let head = FrameHeader::parse(&h).expect("header");
        assert_eq!(head.flags, FLAG_LZ4);
        assert_eq!(head.elapsed_ns, 42);
        let stored = &out[FRAME_HEADER_LEN..];
        assert!(head.crc_matches(&h, stored));
        assert_eq!(unpack(head.flags, stored).expect("unpack"), raw);

        let mut small = Vec::new();
        push_frame(&mut small, Kind::Delta, 1, &[1, 2, 3]).expect("frame");
        assert_eq!(small[5], 0);
        assert_eq!(small.len(), FRAME_HEADER_LEN + 3);
    }

    #[test]
    fn unpack_refuses_implausible_sizes() {
        let mut b = Vec::new();
        put_uvarint(&mut b, 1 << 40);
        b.push(0);
        assert!(unpack(FLAG_LZ4, &b).is_err());
    }
}
