//! The verdict counter: eBPF instructions, assembled here, that run when a watched XDP or tc
//! program returns (fexit) and count its drop verdicts in a per-CPU array.
//!
//! Hand-assembled rather than compiled: the same 16 instructions are loaded once per watched
//! program, each with that program as its target, which aya's loader cannot do (its fexit
//! attaches to kernel functions only).

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
/// `BPF_PSEUDO_MAP_FD`: the 64-bit immediate is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
/// `BPF_FUNC_map_lookup_elem`.
const MAP_LOOKUP_ELEM: i32 = 1;

/// Cells per watched program in the verdict array: one per verdict value 0..=7.
pub const CELLS: u32 = 8;

/// The counter for one watched program: reads the return value (the fexit context's second
/// word: the target's one argument, then its return value), and for a verdict in `lo..=hi`
/// adds one to cell `slot * CELLS + verdict` of the per-CPU array `map_fd`. Other verdicts cost
/// the load and two compares.
pub fn verdict_counter(map_fd: i32, slot: u32, lo: u32, hi: u32) -> Vec<Insn> {
    debug_assert!(lo <= hi && hi < CELLS);
    let base = (slot * CELLS) as i32;
    // Jumps are relative to the next instruction; EXIT_AT is the `r0 = 0` before `exit`.
    const EXIT_AT: i16 = 14;
    vec![
        insn(LDX_DW, 2, 1, 8, 0), // 0: r2 = ctx[1] (the return value)
        insn(JGT_K, 2, 0, EXIT_AT - 2, hi as i32), // 1: if r2 > hi goto out
        insn(JLT_K, 2, 0, EXIT_AT - 3, lo as i32), // 2: if r2 < lo goto out
        insn(ADD_K, 2, 0, 0, base), // 3: r2 += slot * CELLS
        insn(STX_W, 10, 2, -4, 0), // 4: *(u32 *)(fp - 4) = r2
        insn(LD_DW, 1, PSEUDO_MAP_FD, 0, map_fd), // 5: r1 = the map
        insn(0, 0, 0, 0, 0),      // 6: (its upper half)
        insn(MOV_X, 2, 10, 0, 0), // 7: r2 = fp
        insn(ADD_K, 2, 0, 0, -4), // 8: r2 -= 4
        insn(CALL, 0, 0, 0, MAP_LOOKUP_ELEM), // 9: r0 = lookup(r1, r2)
        insn(JEQ_K, 0, 0, EXIT_AT - 11, 0), // 10: if r0 == NULL goto out
        insn(LDX_DW, 1, 0, 0, 0), // 11: r1 = *r0
        insn(ADD_K, 1, 0, 0, 1),  // 12: r1 += 1
        insn(STX_DW, 0, 1, 0, 0), // 13: *r0 = r1 (per-CPU: one writer)
        insn(MOV_K, 0, 0, 0, 0),  // 14: out: r0 = 0
        insn(EXIT, 0, 0, 0, 0),   // 15: exit
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_the_exit_and_the_map_is_a_pseudo_fd() {
        let p = verdict_counter(7, 3, 0, 1);
        assert_eq!(p.len(), 16);
        for (i, x) in p.iter().enumerate() {
            if matches!(x.code, JGT_K | JLT_K | JEQ_K) {
                assert_eq!(i as i16 + 1 + x.off, 14, "jump at {i}");
            }
        }
        assert_eq!(p[14].code, MOV_K);
        assert_eq!(p[15].code, EXIT);
        assert_eq!((p[5].regs >> 4, p[5].imm), (PSEUDO_MAP_FD, 7));
        assert_eq!(p[3].imm, 24, "slot 3's first cell");
        assert_eq!((p[1].imm, p[2].imm), (1, 0), "verdicts 0..=1");
        // The layout the kernel reads: code, dst | src << 4, off, imm (8 bytes).
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(p[4].regs, 0x2a, "src r2, dst r10");
    }
}
