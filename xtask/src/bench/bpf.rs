//! The bench's own use of the bpf() syscall: the bare floor (the emptiest program the kernel
//! takes on `tp_btf/kfree_skb`: `r0 = 0; exit`, no object, no map, no BTF of its own), run-time
//! statistics switched on, and a loaded program's instructions (translated and JIT-ed) for the
//! per-step breakdown.
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

use anyhow::{Context as _, bail};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_ENABLE_STATS: libc::c_long = 32;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_RAW_TP: u32 = 23;
const BTF_KIND_TYPEDEF: u32 = 8;

/// `bpf(cmd, attr, size)` with `attr` zero-padded to 128 bytes; the new fd, or an error.
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a valid, writable 128-byte buffer, the size passed; every pointer the
    // callers put in it points to memory that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn put_u32(attr: &mut [u8; 128], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(attr: &mut [u8; 128], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// BPF run-time statistics, on while this lives (the kernel counts holders).
pub struct StatsOn(#[allow(dead_code)] OwnedFd);

/// Switches BPF run-time statistics on (`BPF_ENABLE_STATS`).
pub fn stats_on() -> anyhow::Result<StatsOn> {
    let mut attr = [0u8; 128];
    // type = BPF_STATS_RUN_TIME (0)
    let fd = bpf(BPF_ENABLE_STATS, &mut attr).context("BPF_ENABLE_STATS")?;
    Ok(StatsOn(owned(fd)))
}

/// The bare floor, loaded and attached; detached when dropped.
pub struct BareFloor {
    prog: OwnedFd,
    _link: OwnedFd,
}

impl BareFloor {
    /// Loads `clock_reads` calls of `bpf_ktime_get_ns` (none: the bare floor), then
    /// `r0 = 0; exit`, as a `tp_btf/kfree_skb` program and attaches it.
    pub fn attach(clock_reads: usize) -> anyhow::Result<Self> {
        let btf_id = typedef_id(Path::new("/sys/kernel/btf/vmlinux"), "btf_trace_kfree_skb")?;
        // call bpf_ktime_get_ns (helper 5)
        let call: [u8; 8] = [0x85, 0, 0, 0, 5, 0, 0, 0];
        // mov64 r0, 0; exit
        let end: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
        let insns: Vec<u8> = std::iter::repeat_n(call, clock_reads)
            .flatten()
            .chain(end)
            .collect();
        let license = b"GPL\0";
        let mut attr = [0u8; 128];
        put_u32(&mut attr, 0, BPF_PROG_TYPE_TRACING);
        put_u32(&mut attr, 4, (insns.len() / 8) as u32);
        put_u64(&mut attr, 8, insns.as_ptr() as u64);
        put_u64(&mut attr, 16, license.as_ptr() as u64);
        attr[48..58].copy_from_slice(b"bare_floor");
        put_u32(&mut attr, 68, BPF_TRACE_RAW_TP);
        put_u32(&mut attr, 108, btf_id);
        let prog = owned(bpf(BPF_PROG_LOAD, &mut attr).context("loading the bare floor")?);
        let mut attr = [0u8; 128];
        // name = NULL: a tracing program attaches where its BTF id says.
        put_u32(&mut attr, 8, prog.as_raw_fd() as u32);
        let link =
            owned(bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr).context("attaching the bare floor")?);
        Ok(Self { prog, _link: link })
    }

    /// Its program fd (its fdinfo holds the run statistics).
    pub fn fd(&self) -> i32 {
        self.prog.as_raw_fd()
    }
}

/// The id of the BTF `typedef` named `name` in the BTF file at `path`.
fn typedef_id(path: &Path, name: &str) -> anyhow::Result<u32> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let u32_at = |at: usize| -> anyhow::Result<u32> {
        let b = data.get(at..at + 4).context("BTF cut short")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if data.get(0..2) != Some(&[0x9f, 0xeb]) {
        bail!("{} is not little-endian BTF", path.display());
    }
    let hdr = u32_at(4)? as usize;
    let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
    let str_off = u32_at(16)? as usize;
    let strings = hdr + str_off;
    let (mut at, end) = (hdr + type_off, hdr + type_off + type_len);
    let mut id = 1;
    while at < end {
        let (name_off, info) = (u32_at(at)? as usize, u32_at(at + 4)?);
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        if kind == BTF_KIND_TYPEDEF {
            let s = data.get(strings + name_off..).unwrap_or_default();
            let n = s.iter().position(|&b| b == 0).unwrap_or(s.len());
            if &s[..n] == name.as_bytes() {
                return Ok(id);
            }
        }
        // What follows each kind's 12-byte header.
        at += 12
            + match kind {
                1 | 14 | 17 => 4,
                3 => 12,
                4 | 5 | 15 | 19 => vlen * 12,
                6 | 13 => vlen * 8,
                _ => 0,
            };
        id += 1;
    }
    bail!("no typedef {name} in {}", path.display())
}

/// A loaded program's instructions, as the kernel runs them.
pub struct Image {
    /// Translated (verified) instructions, 8 bytes each (a 64-bit load takes two).
    pub xlated: Vec<u8>,
    /// The JIT's machine code.
    pub jited: Vec<u8>,
}

/// The instructions of the program with id `id`.
pub fn image(id: u32) -> anyhow::Result<Image> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, id);
    let fd = owned(bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).context("BPF_PROG_GET_FD_BY_ID")?);
    // struct bpf_prog_info: jited_prog_len at 16, xlated_prog_len at 20, their buffers at 24
    // and 32.
    let mut info = [0u8; 256];
    let lens = info_by_fd(&fd, &mut info)?;
    let (jited_len, xlated_len) = (lens.0 as usize, lens.1 as usize);
    let mut jited = vec![0u8; jited_len];
    let mut xlated = vec![0u8; xlated_len];
    let mut info = [0u8; 256];
    info[16..20].copy_from_slice(&(jited_len as u32).to_ne_bytes());
    info[20..24].copy_from_slice(&(xlated_len as u32).to_ne_bytes());
    info[24..32].copy_from_slice(&(jited.as_mut_ptr() as u64).to_ne_bytes());
    info[32..40].copy_from_slice(&(xlated.as_mut_ptr() as u64).to_ne_bytes());
    info_by_fd(&fd, &mut info)?;
    Ok(Image { xlated, jited })
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `info`; returns (jited_prog_len, xlated_prog_len).
fn info_by_fd(fd: &OwnedFd, info: &mut [u8; 256]) -> anyhow::Result<(u32, u32)> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, fd.as_raw_fd() as u32);
    put_u32(&mut attr, 4, info.len() as u32);
    put_u64(&mut attr, 8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).context("BPF_OBJ_GET_INFO_BY_FD")?;
    let word = |at: usize| u32::from_ne_bytes([info[at], info[at + 1], info[at + 2], info[at + 3]]);
    Ok((word(16), word(20)))
}

impl Image {
    /// Translated instructions (a 64-bit immediate load counts once).
    pub fn xlated_insns(&self) -> usize {
        let mut n = 0;
        let mut at = 0;
        while at + 8 <= self.xlated.len() {
            // BPF_LD | BPF_IMM | BPF_DW takes two slots.
            at += if self.xlated[at] == 0x18 { 16 } else { 8 };
            n += 1;
        }
        n
    }

    /// x86-64 instructions of the JIT's code, disassembled with binutils' objdump (Debian's
    /// bpftool is built without libbfd and cannot); `None` where objdump is missing.
    pub fn jited_listing(&self, scratch: &Path) -> Option<Vec<String>> {
        let file = scratch.join("jited.bin");
        std::fs::write(&file, &self.jited).ok()?;
        let out = std::process::Command::new("objdump")
            .args(["-D", "-b", "binary", "-m", "i386:x86-64"])
            .arg(&file)
            .output()
            .ok()?;
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| {
                    l.trim_start().split(':').next().is_some_and(is_hex)
                        && l.matches('\t').count() >= 2
                })
                .map(str::to_string)
                .collect()
        })
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit())
}
