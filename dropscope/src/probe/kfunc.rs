//! The `bpf_rdonly_cast` kfunc in the program: aya 0.14 resolves no kfunc calls, so the
//! program calls a helper id no kernel has ([`RDONLY_CAST_MARK`]) and the object is rewritten
//! before it is loaded: each marked call becomes the kfunc's call (`BPF_PSEUDO_KFUNC_CALL`, its
//! BTF id in the running kernel's BTF), or `r0 = 0` on a kernel without it, where the settings
//! hold no header type ids and so the program never takes that path.
use anyhow::Context as _;
use btf_rs::{Btf, Type};
use dropscope_common::RDONLY_CAST_MARK;
use object::{Object as _, ObjectSection as _, SectionKind};

/// `BPF_JMP | BPF_CALL`.
const CALL: u8 = 0x85;
/// `BPF_ALU64 | BPF_MOV | BPF_K`.
const MOV64_IMM: u8 = 0xb7;
/// `BPF_PSEUDO_KFUNC_CALL`, in the source-register nibble.
const PSEUDO_KFUNC_CALL: u8 = 2 << 4;

/// What the header reads need of the kernel's BTF: the kfunc and the types it casts to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderTypes {
    /// `bpf_rdonly_cast`'s BTF id.
    pub rdonly_cast: u32,
    /// `struct iphdr`, `struct ipv6hdr`, `struct udphdr`.
    pub iphdr: u32,
    /// See above.
    pub ipv6hdr: u32,
    /// See above.
    pub udphdr: u32,
}

impl HeaderTypes {
    /// The ids in `btf`, or `None` where the kernel lacks the kfunc (before 6.2) or a type.
    pub fn find(btf: &Btf) -> Option<Self> {
        let func = btf
            .resolve_ids_by_name("bpf_rdonly_cast")
            .ok()?
            .into_iter()
            .find(|&id| matches!(btf.resolve_type_by_id(id), Ok(Type::Func(_))))?;
        let by_name = |name: &str| {
            btf.resolve_ids_by_name(name).ok()?.into_iter().find(|&id| {
                matches!(btf.resolve_type_by_id(id), Ok(Type::Struct(s)) if !s.members.is_empty())
            })
        };
        Some(Self {
            rdonly_cast: func,
            iphdr: by_name("iphdr")?,
            ipv6hdr: by_name("ipv6hdr")?,
            udphdr: by_name("udphdr")?,
        })
    }
}

/// Whether the kernel compiles BPF programs (`net.core.bpf_jit_enable`): the verifier refuses
/// kfunc calls in an interpreted program, which then keeps `bpf_probe_read_kernel`.
pub fn jit_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable")
        .map(|s| s.trim() != "0")
        .unwrap_or(true)
}

/// An eBPF object, 8-byte aligned as the ELF reader wants it.
pub struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    /// The object's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialized bytes (see `patch`), and u8 has no
        // alignment or validity requirements.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// `object` with every marked call rewritten for `cast` (the kfunc's BTF id, or `None`), and
/// how many were.
pub fn patch(object: &[u8], cast: Option<u32>) -> anyhow::Result<(Aligned, usize)> {
    let mut bytes = object.to_vec();
    let file = object::File::parse(object).context("the eBPF object")?;
    let mut patched = 0;
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let Some((start, size)) = section.file_range() else {
            continue;
        };
        let (start, size) = (usize::try_from(start)?, usize::try_from(size)?);
        let code = bytes
            .get_mut(start..start.saturating_add(size))
            .context("a section past the object's end")?;
        for insn in code.chunks_exact_mut(8) {
            let imm = u32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
            if insn[0] != CALL || insn[1] != 0 || imm != RDONLY_CAST_MARK {
                continue;
            }
            let (op, regs, imm) = match cast {
                Some(id) => (CALL, PSEUDO_KFUNC_CALL, id),
                None => (MOV64_IMM, 0, 0),
            };
            insn[0] = op;
            insn[1] = regs;
            insn[2..4].fill(0);
            insn[4..8].copy_from_slice(&imm.to_le_bytes());
            patched += 1;
        }
    }
    let len = bytes.len();
    let mut words = vec![0u64; len.div_ceil(8)];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut b = [0; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_ne_bytes(b);
    }
    Ok((Aligned { words, len }, patched))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 object with one text section of `code`.
    fn object_with(code: &[u8]) -> Vec<u8> {
        use object::write::{Object, StandardSection};
        let mut o = Object::new(
            object::BinaryFormat::Elf,
            object::Architecture::Bpf,
            object::Endianness::Little,
        );
        let text = o.section_id(StandardSection::Text);
        o.append_section_data(text, code, 8);
        o.write().expect("an object")
    }

    fn insn(op: u8, regs: u8, imm: u32) -> [u8; 8] {
        let mut i = [op, regs, 0, 0, 0, 0, 0, 0];
        i[4..].copy_from_slice(&imm.to_le_bytes());
        i
    }

    #[test]
    fn marked_calls_become_the_kfunc_or_a_move_and_nothing_else_changes() {
        let helper = insn(CALL, 0, 6);
        let mark = insn(CALL, 0, RDONLY_CAST_MARK);
        let code: Vec<u8> = [helper, mark, helper, mark].concat();
        let obj = object_with(&code);
        let text = |bytes: &[u8]| {
            let f = object::File::parse(bytes).expect("parse");
            let s = f.sections().find(|s| s.kind() == SectionKind::Text);
            s.expect("text").data().expect("data").to_vec()
        };
        let (kfunc, n) = patch(&obj, Some(1234)).expect("patch");
        assert_eq!(n, 2);
        let want: Vec<u8> = [helper, insn(CALL, 0x20, 1234)].concat().repeat(2);
        assert_eq!(text(kfunc.bytes()), want);
        let (none, n) = patch(&obj, None).expect("patch");
        assert_eq!(n, 2);
        let want: Vec<u8> = [helper, insn(MOV64_IMM, 0, 0)].concat().repeat(2);
        assert_eq!(text(none.bytes()), want);
        assert_eq!(kfunc.bytes().len(), obj.len());
        assert_eq!(kfunc.bytes().as_ptr() as usize % 8, 0);
    }

    #[test]
    fn the_running_kernel_has_the_kfunc_and_its_types_from_6_2() {
        let btf = Btf::from_file("/sys/kernel/btf/vmlinux").expect("this kernel has BTF");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("release");
        let mut v = (release.trim().split(['.', '-'])).map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        let found = HeaderTypes::find(&btf);
        assert_eq!(
            found.is_some(),
            (major, minor) >= (6, 2),
            "{release}: {found:?}"
        );
        if let Some(t) = found {
            let ids = [t.rdonly_cast, t.iphdr, t.ipv6hdr, t.udphdr];
            assert!(ids.iter().all(|&i| i > 0), "{t:?}");
        }
    }
}
