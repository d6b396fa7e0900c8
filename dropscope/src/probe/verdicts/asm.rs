//! The verdict counter: eBPF instructions, assembled here, that run when a watched XDP or tc
//! program returns (fexit) and count its drop verdicts in a per-CPU array.
//!
//! Hand-assembled rather than compiled: the same instructions are loaded once per watched
//! program, each with that program as its target, which aya's loader cannot do (its fexit
//! attaches to kernel functions only). An XDP program's counter also keeps its first
//! [`SAMPLES_PER_PROGRAM`] dropped frames (at most [`SAMPLE_BYTES`] of each, never past
//! `data_end`): a claim taken atomically, the frame read with `bpf_probe_read_kernel`, the
//! time written last.

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

// Opcodes (uapi/linux/bpf_common.h and bpf.h).
const LDX_DW: u8 = 0x79; // BPF_LDX | BPF_MEM | BPF_DW
const STX_W: u8 = 0x63; // BPF_STX | BPF_MEM | BPF_W
const STX_DW: u8 = 0x7b; // BPF_STX | BPF_MEM | BPF_DW
const ADD_K: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
const MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const MOV_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const JGT_K: u8 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
const JLT_K: u8 = 0xa5; // BPF_JMP | BPF_JLT | BPF_K
const JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const LD_DW: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW (two slots)
const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
const ST_W: u8 = 0x62; // BPF_ST | BPF_MEM | BPF_W
const SUB_X: u8 = 0x1f; // BPF_ALU64 | BPF_SUB | BPF_X
const JGE_K: u8 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JLE_K: u8 = 0xb5; // BPF_JMP | BPF_JLE | BPF_K
const JLT_X: u8 = 0xad; // BPF_JMP | BPF_JLT | BPF_X
const ATOMIC_DW: u8 = 0xdb; // BPF_STX | BPF_ATOMIC | BPF_DW
/// `BPF_ADD | BPF_FETCH`: the source register gets the old value.
const FETCH_ADD: i32 = 0x01;
/// `BPF_PSEUDO_MAP_FD`: the 64-bit immediate is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
/// `BPF_FUNC_map_lookup_elem`.
const MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_FUNC_ktime_get_ns`.
const KTIME_GET_NS: i32 = 5;
/// `BPF_FUNC_probe_read_kernel`.
const PROBE_READ_KERNEL: i32 = 113;

/// Frames kept per XDP program: its first dropped ones.
pub const SAMPLES_PER_PROGRAM: u32 = crate::vocab::packet::PER_KEY as u32;
/// Bytes kept of each, from its MAC header: a VLAN-tagged Ethernet header and 128 more.
pub const SAMPLE_BYTES: usize = 160;

/// One frame an XDP program dropped, as its counter writes it (an array map's value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct FrameSample {
    /// `bpf_ktime_get_ns()` when it was written; 0 while it is not (written last).
    pub ts_ns: u64,
    /// The frame's length (`data_end - data`).
    pub len: u32,
    /// The verdict.
    pub verdict: u32,
    /// Bytes of `data` read: at most [`SAMPLE_BYTES`] and the frame's length.
    pub caplen: u32,
    /// Zero.
    pub _pad: u32,
    /// The frame's first bytes.
    pub data: [u8; SAMPLE_BYTES],
}

// SAFETY: `FrameSample` is `repr(C)`, made of integers and bytes with no implicit padding
// (8 + 4 * 4 + 160 bytes), so any bit pattern is a valid value.
unsafe impl aya::Pod for FrameSample {}

impl Default for FrameSample {
    fn default() -> Self {
        Self {
            ts_ns: 0,
            len: 0,
            verdict: 0,
            caplen: 0,
            _pad: 0,
            data: [0; SAMPLE_BYTES],
        }
    }
}

/// Where an XDP program's counter keeps its frames: the claims (one `u64` per slot: how many
/// were taken) and the frames (an array of [`FrameSample`], [`SAMPLES_PER_PROGRAM`] per slot).
#[derive(Clone, Copy, Debug)]
pub struct Sampler {
    /// The claims array's file descriptor.
    pub claims: i32,
    /// The frames array's file descriptor.
    pub frames: i32,
}

/// A program being assembled, with jumps to labels resolved at the end.
struct Asm {
    code: Vec<Insn>,
    /// (instruction, label) of each jump.
    jumps: Vec<(usize, Label)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    /// The `r0 = 0; exit` at the end.
    Out,
    /// The time's write, the last of a frame's.
    Stamp,
}

impl Asm {
    fn op(&mut self, i: Insn) {
        self.code.push(i);
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.jumps.push((self.code.len(), to));
        self.code.push(insn(code, dst, src, 0, imm));
    }

    /// `r1 = map; r2 = fp - 4; r0 = bpf_map_lookup_elem(r1, r2); if r0 == NULL goto out`.
    fn lookup(&mut self, map_fd: i32) {
        self.op(insn(LD_DW, 1, PSEUDO_MAP_FD, 0, map_fd));
        self.op(insn(0, 0, 0, 0, 0));
        self.op(insn(MOV_X, 2, 10, 0, 0));
        self.op(insn(ADD_K, 2, 0, 0, -4));
        self.op(insn(CALL, 0, 0, 0, MAP_LOOKUP_ELEM));
        self.jump(JEQ_K, 0, 0, 0, Label::Out);
    }

    fn finish(mut self, labels: &[(Label, usize)]) -> Vec<Insn> {
        for (at, to) in self.jumps {
            let target = labels
                .iter()
                .find(|(l, _)| *l == to)
                .map_or(at + 1, |x| x.1);
            self.code[at].off = (target as i64 - at as i64 - 1) as i16;
        }
        self.code
    }
}

/// Cells per watched program in the verdict array: one per verdict value 0..=7.
pub const CELLS: u32 = 8;

/// The counter for one watched program: reads the return value (the fexit context's second
/// word: the target's one argument, then its return value), and for a verdict in `lo..=hi`
/// adds one to cell `slot * CELLS + verdict` of the per-CPU array `map_fd`. Other verdicts cost
/// the load and two compares. With a `sampler` (XDP), a drop then reads the claims' count and,
/// while fewer than [`SAMPLES_PER_PROGRAM`] are taken, takes one (an atomic add) and writes the
/// frame (from the target's `xdp_buff`: `data`, `data_end`) into its place.
pub fn verdict_counter(
    map_fd: i32,
    slot: u32,
    lo: u32,
    hi: u32,
    sampler: Option<Sampler>,
) -> Vec<Insn> {
    debug_assert!(lo <= hi && hi < CELLS);
    let base = (slot * CELLS) as i32;
    let mut a = Asm {
        code: Vec::with_capacity(64),
        jumps: Vec::new(),
    };
    a.op(insn(MOV_X, 6, 1, 0, 0)); // r6 = ctx
    a.op(insn(LDX_DW, 7, 6, 8, 0)); // r7 = ctx[1] (the return value)
    a.jump(JGT_K, 7, 0, hi as i32, Label::Out);
    a.jump(JLT_K, 7, 0, lo as i32, Label::Out);
    a.op(insn(MOV_X, 2, 7, 0, 0)); // r2 = r7 + slot * CELLS
    a.op(insn(ADD_K, 2, 0, 0, base));
    a.op(insn(STX_W, 10, 2, -4, 0)); // *(u32 *)(fp - 4) = r2
    a.lookup(map_fd);
    a.op(insn(LDX_DW, 1, 0, 0, 0)); // *r0 += 1 (per-CPU: one writer)
    a.op(insn(ADD_K, 1, 0, 0, 1));
    a.op(insn(STX_DW, 0, 1, 0, 0));
    let mut stamp = None;
    if let Some(s) = sampler {
        let per = SAMPLES_PER_PROGRAM as i32;
        a.op(insn(ST_W, 10, 0, -4, slot as i32)); // the slot's claims
        a.lookup(s.claims);
        a.op(insn(LDX_DW, 1, 0, 0, 0)); // all taken: nothing more to write
        a.jump(JGE_K, 1, 0, per, Label::Out);
        a.op(insn(MOV_K, 1, 0, 0, 1)); // r1 = fetch_add(*r0, 1)
        a.op(insn(ATOMIC_DW, 0, 1, 0, FETCH_ADD));
        a.jump(JGE_K, 1, 0, per, Label::Out);
        a.op(insn(ADD_K, 1, 0, 0, slot as i32 * per)); // its place
        a.op(insn(STX_W, 10, 1, -4, 0));
        a.lookup(s.frames);
        a.op(insn(MOV_X, 8, 0, 0, 0)); // r8 = the place
        a.op(insn(STX_W, 8, 7, 12, 0)); // verdict
        // r1 = fp - 24, r2 = 16, r3 = ctx[0] (the xdp_buff): its data and data_end.
        a.op(insn(MOV_X, 1, 10, 0, 0));
        a.op(insn(ADD_K, 1, 0, 0, -24));
        a.op(insn(MOV_K, 2, 0, 0, 16));
        a.op(insn(LDX_DW, 3, 6, 0, 0));
        a.op(insn(CALL, 0, 0, 0, PROBE_READ_KERNEL));
        a.jump(JNE_K, 0, 0, 0, Label::Stamp);
        a.op(insn(LDX_DW, 3, 10, -24, 0)); // r3 = data
        a.op(insn(LDX_DW, 2, 10, -16, 0)); // r2 = data_end
        a.jump(JLT_X, 2, 3, 0, Label::Stamp);
        a.op(insn(SUB_X, 2, 3, 0, 0)); // r2 = the frame's length
        a.op(insn(STX_W, 8, 2, 8, 0));
        a.op(insn(JLE_K, 2, 0, 1, SAMPLE_BYTES as i32)); // r2 = min(r2, SAMPLE_BYTES)
        a.op(insn(MOV_K, 2, 0, 0, SAMPLE_BYTES as i32));
        a.op(insn(STX_W, 8, 2, 16, 0)); // caplen
        a.op(insn(MOV_X, 1, 8, 0, 0)); // r1 = the place's data
        a.op(insn(ADD_K, 1, 0, 0, 24));
        a.op(insn(CALL, 0, 0, 0, PROBE_READ_KERNEL));
        a.jump(JEQ_K, 0, 0, 0, Label::Stamp);
        a.op(insn(ST_W, 8, 0, 16, 0)); // not read: no bytes
        stamp = Some(a.code.len());
        a.op(insn(CALL, 0, 0, 0, KTIME_GET_NS));
        a.op(insn(STX_DW, 8, 0, 0, 0)); // the time, last: the place is written
    }
    let out = a.code.len();
    a.op(insn(MOV_K, 0, 0, 0, 0));
    a.op(insn(EXIT, 0, 0, 0, 0));
    let mut labels = vec![(Label::Out, out)];
    labels.extend(stamp.map(|at| (Label::Stamp, at)));
    a.finish(&labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_the_exit_and_the_map_is_a_pseudo_fd() {
        let p = verdict_counter(7, 3, 0, 1, None);
        let out = p.len() - 2;
        for (i, x) in p.iter().enumerate() {
            if matches!(x.code, JGT_K | JLT_K | JEQ_K) {
                assert_eq!(i as i16 + 1 + x.off, out as i16, "jump at {i}");
            }
        }
        assert_eq!(p[out].code, MOV_K);
        assert_eq!(p[out + 1].code, EXIT);
        let ld = p.iter().position(|x| x.code == LD_DW).expect("the map");
        assert_eq!((p[ld].regs >> 4, p[ld].imm), (PSEUDO_MAP_FD, 7));
        assert_eq!(p[5].imm, 24, "slot 3's first cell");
        assert_eq!((p[2].imm, p[3].imm), (1, 0), "verdicts 0..=1");
        // The layout the kernel reads: code, dst | src << 4, off, imm (8 bytes).
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(p[6].regs, 0x2a, "src r2, dst r10");
    }

    #[test]
    fn a_sampler_claims_a_place_and_reads_no_more_than_the_frame() {
        let p = verdict_counter(
            7,
            3,
            0,
            1,
            Some(Sampler {
                claims: 8,
                frames: 9,
            }),
        );
        let (out, stamp) = (p.len() - 2, p.len() - 4);
        assert_eq!((p[stamp].code, p[stamp].imm), (CALL, KTIME_GET_NS));
        for (i, x) in p.iter().enumerate() {
            let to = i as i64 + 1 + i64::from(x.off);
            match x.code {
                JGT_K | JLT_K | JEQ_K | JGE_K | JNE_K | JLT_X => {
                    assert!(
                        to == out as i64 || to == stamp as i64,
                        "jump at {i} to {to}"
                    );
                }
                JLE_K => assert_eq!(x.off, 1, "the clamp skips one"),
                _ => {}
            }
        }
        let fds: Vec<i32> = (p.iter())
            .filter(|x| x.code == LD_DW)
            .map(|x| x.imm)
            .collect();
        assert_eq!(fds, [7, 8, 9]);
        // The claim is an atomic fetch-add of 1, tested against the bound before and after.
        let at = p
            .iter()
            .position(|x| x.code == ATOMIC_DW)
            .expect("the claim");
        assert_eq!((p[at].imm, p[at - 1].imm), (FETCH_ADD, 1));
        assert_eq!((p[at - 2].code, p[at - 2].imm), (JGE_K, 8));
        assert_eq!((p[at + 1].code, p[at + 1].imm), (JGE_K, 8));
        assert_eq!(p[at + 2].imm, 24, "slot 3's first place");
        // The copy's length is data_end - data, clamped to the bytes kept.
        let clamp = p.iter().position(|x| x.code == JLE_K).expect("the clamp");
        assert_eq!(p[clamp].imm, SAMPLE_BYTES as i32);
        assert_eq!(
            (p[clamp + 1].code, p[clamp + 1].imm),
            (MOV_K, SAMPLE_BYTES as i32)
        );
        assert_eq!(p[clamp - 2].code, SUB_X);
        assert_eq!(
            p[clamp - 3].code,
            JLT_X,
            "no copy when data_end is before data"
        );
        assert_eq!(
            (p.iter())
                .filter(|x| x.code == CALL && x.imm == PROBE_READ_KERNEL)
                .count(),
            2
        );
        assert_eq!(std::mem::size_of::<FrameSample>(), 24 + SAMPLE_BYTES);
    }
}
