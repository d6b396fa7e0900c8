//! Fixture BPF programs for the tests of programs that drop: a tiny XDP or tc program that
//! gives one verdict to every IPv4 UDP packet to one port (and passes the rest), assembled
//! here and loaded with (or without) BTF function info, then pinned in a bpffs mounted for the
//! test, so that `ip link set ... xdpdrv pinned` and `tc filter ... object-pinned` attach it.
use std::{
    ffi::CString,
    io,
    mem::{size_of, zeroed},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    process::Command,
};

use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_type};

/// The kind of fixture program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// XDP (`struct xdp_md`: data at 0, data_end at 4; passes with `XDP_PASS`).
    Xdp,
    /// tc `sched_cls` (`struct __sk_buff`: data at 76, data_end at 80; passes with `TC_ACT_OK`).
    Tc,
}

/// `XDP_ABORTED`.
pub const XDP_ABORTED: i32 = 0;
/// `XDP_DROP`.
pub const XDP_DROP: i32 = 1;
/// `TC_ACT_SHOT`.
pub const TC_ACT_SHOT: i32 = 2;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | dst;
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    u64::from_le_bytes(b)
}

/// The program: `verdict` for IPv4 UDP (no IP options) to `port`, the pass verdict otherwise.
pub fn program(kind: Kind, port: u16, verdict: i32) -> Vec<u64> {
    let (data, end, pass) = match kind {
        Kind::Xdp => (0, 4, 2),
        Kind::Tc => (76, 80, 0),
    };
    // Bytes in network order read as a little-endian u16.
    let be16 = |v: u16| i32::from(u16::from_le_bytes(v.to_be_bytes()));
    const PASS: i16 = 13;
    vec![
        insn(0x61, 2, 1, data, 0),                // 0: r2 = ctx->data
        insn(0x61, 3, 1, end, 0),                 // 1: r3 = ctx->data_end
        insn(0xbf, 4, 2, 0, 0),                   // 2: r4 = r2
        insn(0x07, 4, 0, 0, 14 + 20 + 8),         // 3: r4 += eth + ip + udp
        insn(0x2d, 4, 3, PASS - 5, 0),            // 4: if r4 > r3 goto pass
        insn(0x69, 5, 2, 12, 0),                  // 5: r5 = ethertype
        insn(0x55, 5, 0, PASS - 7, be16(0x0800)), // 6: if r5 != IPv4 goto pass
        insn(0x71, 5, 2, 23, 0),                  // 7: r5 = ip protocol
        insn(0x55, 5, 0, PASS - 9, 17),           // 8: if r5 != UDP goto pass
        insn(0x69, 5, 2, 36, 0),                  // 9: r5 = udp dest port
        insn(0x55, 5, 0, PASS - 11, be16(port)),  // 10: if r5 != port goto pass
        insn(0xb7, 0, 0, 0, verdict),             // 11: r0 = verdict
        insn(0x95, 0, 0, 0, 0),                   // 12: exit
        insn(0xb7, 0, 0, 0, pass),                // 13: pass: r0 = pass
        insn(0x95, 0, 0, 0, 0),                   // 14: exit
    ]
}

/// BTF of one function `int NAME(struct CTX *ctx)`: what a compiler emits for a program's
/// main function (its type id is 5).
pub fn btf(ctx: &str, name: &str) -> Vec<u8> {
    let strings = format!("\0int\0{ctx}\0ctx\0{name}\0");
    let (int, ctx_off) = (1u32, 5u32);
    let arg = ctx_off + ctx.len() as u32 + 1;
    let func = arg + 4;
    let kind = |k: u32, vlen: u32| (k << 24) | vlen;
    let types: Vec<u32> = vec![
        // 1: int (INT, 4 bytes, signed, 32 bits)
        int,
        kind(1, 0),
        4,
        (1 << 24) | 32,
        // 2: struct CTX {} (STRUCT, no members)
        ctx_off,
        kind(4, 0),
        0,
        // 3: struct CTX * (PTR)
        0,
        kind(2, 0),
        2,
        // 4: int (struct CTX *ctx) (FUNC_PROTO, one parameter)
        0,
        kind(13, 1),
        1,
        arg,
        3,
        // 5: NAME (FUNC, global linkage)
        func,
        kind(12, 1),
        4,
    ];
    let type_len = (types.len() * 4) as u32;
    let mut out = Vec::new();
    out.extend_from_slice(&0xeb9fu16.to_le_bytes());
    out.extend_from_slice(&[1, 0]);
    for v in [24u32, 0, type_len, type_len, strings.len() as u32] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for t in types {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out.extend_from_slice(strings.as_bytes());
    out
}

fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<i64> {
    // SAFETY: `attr` is a valid, initialised bpf_attr of the size passed; the buffers it points
    // to outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            size_of::<bpf_attr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

fn bpf_fd(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: a new descriptor the kernel returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Loads the fixture program named `name`, with BTF function info when `with_btf`.
pub fn load(
    kind: Kind,
    name: &str,
    port: u16,
    verdict: i32,
    with_btf: bool,
) -> io::Result<OwnedFd> {
    let insns = program(kind, port, verdict);
    let ctx = match kind {
        Kind::Xdp => "xdp_md",
        Kind::Tc => "__sk_buff",
    };
    let blob = btf(ctx, name);
    let mut log = vec![0u8; 1 << 16];
    let btf_fd = if with_btf {
        // SAFETY: bpf_attr is plain data; zero is its documented initial state.
        let mut attr: bpf_attr = unsafe { zeroed() };
        attr.__bindgen_anon_7.btf = blob.as_ptr() as u64;
        attr.__bindgen_anon_7.btf_size = blob.len() as u32;
        attr.__bindgen_anon_7.btf_log_buf = log.as_mut_ptr() as u64;
        attr.__bindgen_anon_7.btf_log_size = log.len() as u32;
        attr.__bindgen_anon_7.btf_log_level = 1;
        let fd = bpf_fd(bpf_cmd::BPF_BTF_LOAD, &mut attr).map_err(|e| {
            io::Error::other(format!("BTF: {e}: {}", String::from_utf8_lossy(&log)))
        })?;
        Some(fd)
    } else {
        None
    };
    let func_info: [u32; 2] = [0, 5];
    let license = c"GPL";
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    // SAFETY: writing the PROG_LOAD variant of a zeroed union.
    unsafe {
        let a = &mut attr.__bindgen_anon_3;
        a.prog_type = match kind {
            Kind::Xdp => bpf_prog_type::BPF_PROG_TYPE_XDP,
            Kind::Tc => bpf_prog_type::BPF_PROG_TYPE_SCHED_CLS,
        } as u32;
        a.insn_cnt = insns.len() as u32;
        a.insns = insns.as_ptr() as u64;
        a.license = license.as_ptr() as u64;
        a.log_level = 1;
        a.log_size = log.len() as u32;
        a.log_buf = log.as_mut_ptr() as u64;
        for (d, s) in a.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *d = s as _;
        }
        if let Some(btf) = &btf_fd {
            a.prog_btf_fd = btf.as_raw_fd() as u32;
            a.func_info_rec_size = 8;
            a.func_info = func_info.as_ptr() as u64;
            a.func_info_cnt = 1;
        }
    }
    bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr).map_err(|e| {
        let log = String::from_utf8_lossy(&log);
        io::Error::other(format!(
            "loading {name}: {e}: {}",
            log.trim_end_matches('\0')
        ))
    })
}

/// A bpffs mounted on a temporary directory for one test, unmounted when dropped.
pub struct Bpffs {
    dir: tempfile::TempDir,
}

impl Bpffs {
    /// Mounts it.
    pub fn mount() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(dir.path())
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "mount -t bpf: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    /// Pins `prog` as `name` here; returns its path.
    pub fn pin(&self, prog: &OwnedFd, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { zeroed() };
        attr.__bindgen_anon_4.pathname = c.as_ptr() as u64;
        attr.__bindgen_anon_4.bpf_fd = prog.as_raw_fd() as u32;
        if let Err(e) = bpf(bpf_cmd::BPF_OBJ_PIN, &mut attr) {
            panic!("pinning {}: {e}", path.display());
        }
        path
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Whether this kernel lets a tracing program attach to a BPF program: loads an empty fentry
/// program on `target`'s main function (a fixture program: type 5 of its BTF) and drops it.
/// `Err` carries the kernel's answer (some kernels refuse every fentry and fexit).
pub fn fentry_allowed(target: &OwnedFd) -> io::Result<()> {
    use aya_obj::generated::bpf_attach_type;
    // r0 = 0; exit
    let insns = [insn(0xb7, 0, 0, 0, 0), insn(0x95, 0, 0, 0, 0)];
    let license = c"GPL";
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    // SAFETY: writing the PROG_LOAD variant of a zeroed union.
    unsafe {
        let a = &mut attr.__bindgen_anon_3;
        a.prog_type = bpf_prog_type::BPF_PROG_TYPE_TRACING as u32;
        a.expected_attach_type = bpf_attach_type::BPF_TRACE_FENTRY as u32;
        a.insn_cnt = insns.len() as u32;
        a.insns = insns.as_ptr() as u64;
        a.license = license.as_ptr() as u64;
        a.attach_btf_id = 5;
        a.__bindgen_anon_1.attach_prog_fd = target.as_raw_fd() as u32;
    }
    bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr).map(drop)
}

/// The id the kernel gave a loaded program (from its descriptor's fdinfo).
pub fn prog_id(fd: &OwnedFd) -> io::Result<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("prog_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no prog_id in fdinfo"))
}

/// Attaches tc program `prog` to device `dev` of the namespace at `netns` as a tcx link
/// (6.6+), on ingress or egress; the link lives as long as the returned descriptor.
pub fn attach_tcx(prog: &OwnedFd, netns: &Path, dev: &str, egress: bool) -> io::Result<OwnedFd> {
    use aya_obj::generated::bpf_attach_type::{BPF_TCX_EGRESS, BPF_TCX_INGRESS};
    let prog_fd = prog.as_raw_fd();
    let netns = netns.to_path_buf();
    let dev = CString::new(dev).map_err(io::Error::other)?;
    // A thread of its own enters the namespace (the link outlives it: descriptors are the
    // process's).
    std::thread::spawn(move || -> io::Result<OwnedFd> {
        let ns = std::fs::File::open(&netns)?;
        // SAFETY: setns(2) on a namespace file we hold, for this thread only.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(dev.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { zeroed() };
        attr.link_create.__bindgen_anon_1.prog_fd = prog_fd as u32;
        attr.link_create.__bindgen_anon_2.target_ifindex = ifindex;
        attr.link_create.attach_type = if egress {
            BPF_TCX_EGRESS
        } else {
            BPF_TCX_INGRESS
        } as u32;
        bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut attr)
    })
    .join()
    .map_err(|_| io::Error::other("the attaching thread panicked"))?
}
