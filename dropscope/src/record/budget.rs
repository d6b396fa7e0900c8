//! The reader's memory budget: fixed limits on what one recording may define, checked as the
//! dictionaries are read, so a crafted file is refused quickly with the limit it exceeds.
//!
//! The limits are generous for anything dropscope records (a session with `--max-keys
//! 1000000`, kernel stacks of at most 127 frames) and bound what any input can make the
//! reader hold: about [`MEMORY_BUDGET`] bytes for a recording at every limit at once.
use super::format::MAX_PAYLOAD;

/// Names (strings) a recording may define.
pub const MAX_STRINGS: usize = 2 << 20;
/// Bytes of all names together.
pub const MAX_STRING_BYTES: usize = 64 << 20;
/// Drop keys a recording may define (`--max-keys` goes up to 1,000,000).
pub const MAX_KEYS: usize = 1 << 20;
/// Distinct stacks a recording may define.
pub const MAX_STACKS: usize = 256 << 10;
/// Frames in one stack (the kernel records at most 127).
pub const MAX_STACK_DEPTH: usize = 1024;
/// Frames in all stacks together.
pub const MAX_STACK_FRAMES: usize = 4 << 20;
/// Bytes of names as referenced: each key counts the bytes of every name it uses (reason,
/// location, namespace, device, protocol), each stack the bytes of its frames, however often a
/// name is shared. What is printed or drawn per key or frame grows with this, not with the
/// distinct names, so this bounds the output of every consumer.
pub const MAX_REFERENCED_BYTES: u64 = 256 << 20;
/// Decompressed bytes of all dictionary frames together (they are held while the file is open).
pub const MAX_DICTIONARY_BYTES: usize = 128 << 20;
/// Decompressed bytes of all frames together: bounds the work of reading a recording through.
pub const MAX_TOTAL_BYTES: u64 = 16 << 30;
/// Decompressed bytes of one frame.
pub const MAX_FRAME_BYTES: usize = MAX_PAYLOAD;
/// Frames in the index, snapshot and kernel frames together (48 days at one snapshot frame per
/// second; 24 with a kernel frame beside each).
pub const MAX_FRAMES: usize = 4 << 20;
/// Delta frames after one keyframe (the writer puts a keyframe every 256 frames): a seek
/// decodes at most this many frames after the keyframe.
pub const MAX_DELTAS: usize = 255;
/// Decompressed bytes of a keyframe and the deltas after it: a seek decodes at most this much.
pub const MAX_CHAIN_BYTES: u64 = 256 << 20;

/// Sampled packets a recording may define (the kernel samples 1,024 keys at a time, 8 each).
pub const MAX_SAMPLES: usize = 64 << 10;
/// Sampled packets of one key (the first few drops of a key are kept, never more).
pub const MAX_SAMPLES_PER_KEY: usize = crate::vocab::packet::PER_KEY;
/// Times a key's names (namespace, device) may be written again after its definition: a
/// name that keeps changing (a process renaming itself) is recorded this often, then kept.
pub const MAX_RENAMES_PER_KEY: u8 = 8;
/// Bytes of one sampled packet (its first bytes from the network header on).
pub const MAX_SAMPLE_BYTES: usize = 128;

/// Heap bytes the reader may hold for a recording at every limit at once, with one snapshot
/// decoded: names (with their allocation overhead), keys, stacks, the frame index, the decoded
/// counts and one snapshot, and two frame payloads (about 850 MiB at worst, rounded up). The
/// fuzz target checks that no input makes the reader hold more.
pub const MEMORY_BUDGET: usize = 1 << 30;

/// What a report or graph of one snapshot writes, at most, per byte of names referenced
/// ([`MAX_REFERENCED_BYTES`] bounds those): JSON writes a key's names and its reason again in
/// its hint, each byte escaped to at most 6 (`\u0001`).
pub const OUTPUT_PER_NAME_BYTE: u64 = 16;
/// ... and per key or sampled key (the fixed fields, a hint, up to 8 sampled packets).
pub const OUTPUT_PER_ROW: u64 = 8 << 10;
/// ... and per rectangle of an SVG (`flamegraph::MAX_RECTANGLES` of them at most): a frame of
/// at most 257 characters, each escaped to at most 10 bytes, in its text and its tooltip.
pub const OUTPUT_PER_RECTANGLE: u64 = 8 << 10;

/// The most bytes a report (table or JSON) of a snapshot of `rows` keys and sampled keys
/// writes, when its keys reference `referenced` bytes of names. The fuzz target checks it.
pub fn report_bound(referenced: u64, rows: usize) -> u64 {
    OUTPUT_PER_NAME_BYTE
        .saturating_mul(referenced)
        .saturating_add(OUTPUT_PER_ROW.saturating_mul(rows as u64))
        .saturating_add(64 << 10)
}

/// A limit of the budget, named in the error that refuses a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// What is counted, e.g. "stacks".
    pub what: &'static str,
    /// The most allowed.
    pub max: u64,
}

/// What the dictionaries of a recording have defined so far.
#[derive(Default, Debug)]
pub(crate) struct Spent {
    pub(super) strings: usize,
    pub(super) string_bytes: usize,
    pub(super) keys: usize,
    pub(super) stacks: usize,
    pub(super) stack_frames: usize,
    pub(super) dictionary_bytes: usize,
    pub(super) total_bytes: u64,
    pub(super) frames: usize,
    pub(super) samples: usize,
    pub(super) referenced_bytes: u64,
}

fn check(used: u64, max: u64, what: &'static str) -> Result<(), Limit> {
    if used > max {
        Err(Limit { what, max })
    } else {
        Ok(())
    }
}

impl Spent {
    /// Counts one more frame of `raw` decompressed bytes (`dictionary`: held in memory).
    pub(super) fn frame(&mut self, raw: usize, dictionary: bool) -> Result<(), Limit> {
        check(
            raw as u64,
            MAX_FRAME_BYTES as u64,
            "decompressed bytes in one frame",
        )?;
        self.total_bytes = self.total_bytes.saturating_add(raw as u64);
        check(
            self.total_bytes,
            MAX_TOTAL_BYTES,
            "decompressed bytes in all frames",
        )?;
        if dictionary {
            self.dictionary_bytes = self.dictionary_bytes.saturating_add(raw);
            check(
                self.dictionary_bytes as u64,
                MAX_DICTIONARY_BYTES as u64,
                "decompressed dictionary bytes",
            )?;
        }
        Ok(())
    }

    /// Counts one more frame in the index (a snapshot or a kernel frame).
    pub(super) fn indexed_frame(&mut self) -> Result<(), Limit> {
        self.frames += 1;
        check(self.frames as u64, MAX_FRAMES as u64, "frames in the index")
    }

    /// Counts one more name of `len` bytes.
    pub(crate) fn string(&mut self, len: usize) -> Result<(), Limit> {
        self.strings += 1;
        self.string_bytes = self.string_bytes.saturating_add(len);
        check(self.strings as u64, MAX_STRINGS as u64, "names")?;
        check(
            self.string_bytes as u64,
            MAX_STRING_BYTES as u64,
            "bytes of names",
        )
    }

    /// Counts `len` more bytes of names referenced by a key or a stack.
    pub(crate) fn referenced(&mut self, len: usize) -> Result<(), Limit> {
        self.referenced_bytes = self.referenced_bytes.saturating_add(len as u64);
        check(
            self.referenced_bytes,
            MAX_REFERENCED_BYTES,
            "bytes of names as referenced by keys and stacks",
        )
    }

    /// Bytes of names referenced by the keys and stacks defined so far.
    pub(super) fn referenced_bytes(&self) -> u64 {
        self.referenced_bytes
    }

    /// Counts one more key.
    pub(crate) fn key(&mut self) -> Result<(), Limit> {
        self.keys += 1;
        check(self.keys as u64, MAX_KEYS as u64, "drop keys")
    }

    /// Counts one more sampled packet of `len` bytes, the `nth` (from 1) of its key.
    pub(super) fn sample(&mut self, nth: usize, len: usize) -> Result<(), Limit> {
        self.samples += 1;
        check(self.samples as u64, MAX_SAMPLES as u64, "sampled packets")?;
        check(
            nth as u64,
            MAX_SAMPLES_PER_KEY as u64,
            "sampled packets of one key",
        )?;
        check(
            len as u64,
            MAX_SAMPLE_BYTES as u64,
            "bytes in one sampled packet",
        )
    }

    /// Counts one more stack of `depth` frames (before they are read).
    pub(super) fn stack(&mut self, depth: usize) -> Result<(), Limit> {
        self.stacks += 1;
        check(self.stacks as u64, MAX_STACKS as u64, "stacks")?;
        check(depth as u64, MAX_STACK_DEPTH as u64, "frames in one stack")?;
        self.stack_frames = self.stack_frames.saturating_add(depth);
        check(
            self.stack_frames as u64,
            MAX_STACK_FRAMES as u64,
            "frames in all stacks",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_named_when_exceeded() {
        let mut s = Spent::default();
        assert!(s.stack(MAX_STACK_DEPTH).is_ok());
        assert_eq!(
            s.stack(MAX_STACK_DEPTH + 1),
            Err(Limit {
                what: "frames in one stack",
                max: MAX_STACK_DEPTH as u64
            })
        );
        let mut s = Spent {
            stacks: MAX_STACKS,
            ..Default::default()
        };
        assert_eq!(s.stack(0).map_err(|l| l.what), Err("stacks"));
        let mut s = Spent::default();
        assert_eq!(
            s.frame(MAX_FRAME_BYTES + 1, false).map_err(|l| l.what),
            Err("decompressed bytes in one frame")
        );
        for _ in 0..MAX_DICTIONARY_BYTES / MAX_FRAME_BYTES {
            s.frame(MAX_FRAME_BYTES, true).expect("within");
        }
        assert_eq!(
            s.frame(1, true).map_err(|l| l.what),
            Err("decompressed dictionary bytes")
        );
        let mut s = Spent {
            keys: MAX_KEYS,
            ..Default::default()
        };
        assert_eq!(s.key().map_err(|l| l.what), Err("drop keys"));
        let mut s = Spent::default();
        assert_eq!(
            s.string(MAX_STRING_BYTES + 1).map_err(|l| l.what),
            Err("bytes of names")
        );
        let mut s = Spent {
            frames: MAX_FRAMES,
            ..Default::default()
        };
        assert_eq!(
            s.indexed_frame().map_err(|l| l.what),
            Err("frames in the index")
        );
        let mut s = Spent::default();
        assert!(s.sample(MAX_SAMPLES_PER_KEY, MAX_SAMPLE_BYTES).is_ok());
        assert_eq!(
            s.sample(MAX_SAMPLES_PER_KEY + 1, 1).map_err(|l| l.what),
            Err("sampled packets of one key")
        );
        assert_eq!(
            s.sample(1, MAX_SAMPLE_BYTES + 1).map_err(|l| l.what),
            Err("bytes in one sampled packet")
        );
        let mut s = Spent {
            samples: MAX_SAMPLES,
            ..Default::default()
        };
        assert_eq!(s.sample(1, 1).map_err(|l| l.what), Err("sampled packets"));
        let mut s = Spent::default();
        assert!(s.referenced(MAX_REFERENCED_BYTES as usize).is_ok());
        assert_eq!(
            s.referenced(1).map_err(|l| l.what),
            Err("bytes of names as referenced by keys and stacks")
        );
    }
}
