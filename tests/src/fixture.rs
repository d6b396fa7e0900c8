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
    let mut p = udp_test(kind, port, 13);
    p.extend([
        insn(0xb7, 0, 0, 0, verdict), // 11: r0 = verdict
        insn(0x95, 0, 0, 0, 0),       // 12: exit
    ]);
    p.extend(pass(kind));
    p
}

/// An XDP program that redirects IPv4 UDP to `port` to the socket at key 0 of the XSKMAP
/// `map` (`bpf_redirect_map`), and passes the rest.
pub fn redirect_program(port: u16, map: i32) -> Vec<u64> {
    let mut p = udp_test(Kind::Xdp, port, 17);
    p.extend([
        insn(0x18, 1, 1, 0, map), // 11: r1 = map (BPF_PSEUDO_MAP_FD)
        insn(0, 0, 0, 0, 0),      // 12: (its upper half)
        insn(0xb7, 2, 0, 0, 0),   // 13: r2 = 0 (the key)
        insn(0xb7, 3, 0, 0, 0),   // 14: r3 = 0 (flags: XDP_ABORTED if no socket there)
        insn(0x85, 0, 0, 0, 51),  // 15: call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),   // 16: exit
    ]);
    p.extend(pass(Kind::Xdp));
    p
}

/// `r0 = pass; exit`.
fn pass(kind: Kind) -> [u64; 2] {
    let pass = match kind {
        Kind::Xdp => 2,
        Kind::Tc => 0,
    };
    [insn(0xb7, 0, 0, 0, pass), insn(0x95, 0, 0, 0, 0)]
}

/// The first 11 instructions: to instruction `pass_at` unless the packet is IPv4 UDP (no IP
/// options) to `port`.
fn udp_test(kind: Kind, port: u16, pass_at: i16) -> Vec<u64> {
    let (data, end) = match kind {
        Kind::Xdp => (0, 4),
        Kind::Tc => (76, 80),
    };
    // Bytes in network order read as a little-endian u16.
    let be16 = |v: u16| i32::from(u16::from_le_bytes(v.to_be_bytes()));
    vec![
        insn(0x61, 2, 1, data, 0),                   // 0: r2 = ctx->data
        insn(0x61, 3, 1, end, 0),                    // 1: r3 = ctx->data_end
        insn(0xbf, 4, 2, 0, 0),                      // 2: r4 = r2
        insn(0x07, 4, 0, 0, 14 + 20 + 8),            // 3: r4 += eth + ip + udp
        insn(0x2d, 4, 3, pass_at - 5, 0),            // 4: if r4 > r3 goto pass
        insn(0x69, 5, 2, 12, 0),                     // 5: r5 = ethertype
        insn(0x55, 5, 0, pass_at - 7, be16(0x0800)), // 6: if r5 != IPv4 goto pass
        insn(0x71, 5, 2, 23, 0),                     // 7: r5 = ip protocol
        insn(0x55, 5, 0, pass_at - 9, 17),           // 8: if r5 != UDP goto pass
        insn(0x69, 5, 2, 36, 0),                     // 9: r5 = udp dest port
        insn(0x55, 5, 0, pass_at - 11, be16(port)),  // 10: if r5 != port goto pass
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
    load_insns(kind, name, &program(kind, port, verdict), with_btf)
}

/// Loads program `insns` named `name`, with BTF function info when `with_btf`.
pub fn load_insns(kind: Kind, name: &str, insns: &[u64], with_btf: bool) -> io::Result<OwnedFd> {
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

/// Creates an XSKMAP of one entry (AF_XDP sockets by queue).
pub fn xskmap() -> io::Result<OwnedFd> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.__bindgen_anon_1.map_type = aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_XSKMAP as u32;
    attr.__bindgen_anon_1.key_size = 4;
    attr.__bindgen_anon_1.value_size = 4;
    attr.__bindgen_anon_1.max_entries = 1;
    bpf_fd(bpf_cmd::BPF_MAP_CREATE, &mut attr)
}

/// Sets `key` of map `map` to `value` (for an XSKMAP: a socket's descriptor).
pub fn map_set(map: &OwnedFd, key: u32, value: u32) -> io::Result<()> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.__bindgen_anon_2.map_fd = map.as_raw_fd() as u32;
    attr.__bindgen_anon_2.key = (&key as *const u32) as u64;
    attr.__bindgen_anon_2.__bindgen_anon_1.value = (&value as *const u32) as u64;
    bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
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

/// Calls `f` with a descriptor of each BPF object of one kind loaded on the host, in id order:
/// programs (`BPF_PROG_GET_NEXT_ID`, `BPF_PROG_GET_FD_BY_ID`) or links. Objects that go while
/// they are walked are skipped.
fn each_object(
    next: bpf_cmd,
    get_fd: bpf_cmd,
    mut f: impl FnMut(&OwnedFd) -> io::Result<()>,
) -> io::Result<()> {
    let mut id = 0u32;
    loop {
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { zeroed() };
        attr.__bindgen_anon_6.__bindgen_anon_1.start_id = id;
        match bpf(next, &mut attr) {
            // SAFETY: the kernel wrote next_id into the variant it was given.
            Ok(_) => id = unsafe { attr.__bindgen_anon_6.next_id },
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { zeroed() };
        attr.__bindgen_anon_6.__bindgen_anon_1.start_id = id;
        match bpf_fd(get_fd, &mut attr) {
            Ok(fd) => f(&fd)?,
            // Gone meanwhile, or a link still being made (its id not yet settled: EAGAIN,
            // seen while dropscope attached its watchers); the callers look again.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EAGAIN)) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Fills `info` (a `bpf_prog_info` or `bpf_link_info`) for the object `fd`.
fn object_info<T>(fd: &OwnedFd, info: &mut T) -> io::Result<()> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = size_of::<T>() as u32;
    attr.info.info = info as *mut T as u64;
    bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

/// How many programs loaded on the host are named `name` (at most 15 bytes, as the kernel
/// keeps it); programs that go while they are looked at are not counted.
pub fn programs_named(name: &str) -> io::Result<usize> {
    let mut n = 0;
    each_object(
        bpf_cmd::BPF_PROG_GET_NEXT_ID,
        bpf_cmd::BPF_PROG_GET_FD_BY_ID,
        |fd| {
            // SAFETY: bpf_prog_info is plain data; zero is a valid initial state.
            let mut info: aya_obj::generated::bpf_prog_info = unsafe { zeroed() };
            object_info(fd, &mut info)?;
            let got: Vec<u8> = (info.name.iter())
                .take_while(|c| **c != 0)
                .map(|c| c.to_ne_bytes()[0])
                .collect();
            n += usize::from(got == name.as_bytes());
            Ok(())
        },
    )?;
    Ok(n)
}

/// How many tracing links (fentry or fexit) are attached to program `id`: each dropscope running
/// watches an XDP or tc program's verdicts through one, and counts its drops from then on.
pub fn tracing_links(id: u32) -> io::Result<usize> {
    use aya_obj::generated::{bpf_link_info, bpf_link_type::BPF_LINK_TYPE_TRACING};
    let mut found = 0;
    each_object(
        bpf_cmd::BPF_LINK_GET_NEXT_ID,
        bpf_cmd::BPF_LINK_GET_FD_BY_ID,
        |fd| {
            // SAFETY: bpf_link_info is plain data; zero is a valid initial state.
            let mut info: bpf_link_info = unsafe { zeroed() };
            object_info(fd, &mut info)?;
            // SAFETY: the union is plain integers, zeroed and then filled by the kernel: any
            // variant reads; the `tracing` one is used only for a link of that type.
            let target = unsafe { info.__bindgen_anon_1.tracing.target_obj_id };
            found += usize::from(info.type_ == BPF_LINK_TYPE_TRACING as u32 && target == id);
            Ok(())
        },
    )?;
    Ok(found)
}

/// The id the kernel gave a loaded program (from its descriptor's fdinfo).
pub fn prog_id(fd: &OwnedFd) -> io::Result<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("prog_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no prog_id in fdinfo"))
}

/// Attaches XDP program `prog` to device `dev` of the namespace at `netns` as an XDP link
/// (5.9+; generic XDP, `XDP_FLAGS_SKB_MODE`), with no `ip` needed; the link lives as long as
/// the returned descriptor.
pub fn attach_xdp_link(prog: &OwnedFd, netns: &Path, dev: &str) -> io::Result<OwnedFd> {
    link(prog, netns, dev, |attr, ifindex| {
        attr.link_create.__bindgen_anon_2.target_ifindex = ifindex;
        attr.link_create.attach_type = aya_obj::generated::bpf_attach_type::BPF_XDP as u32;
        attr.link_create.flags = 1 << 1;
    })
}

/// Attaches tc program `prog` to the netkit pair whose primary is `primary` in the namespace at
/// `netns`, run on what the primary sends (or, with `peer`, on what its peer sends).
pub fn attach_netkit(
    prog: &OwnedFd,
    netns: &Path,
    primary: &str,
    peer: bool,
) -> io::Result<OwnedFd> {
    use aya_obj::generated::bpf_attach_type::{BPF_NETKIT_PEER, BPF_NETKIT_PRIMARY};
    link(prog, netns, primary, move |attr, ifindex| {
        attr.link_create.__bindgen_anon_2.target_ifindex = ifindex;
        attr.link_create.attach_type = if peer {
            BPF_NETKIT_PEER
        } else {
            BPF_NETKIT_PRIMARY
        } as u32;
    })
}

/// Attaches tc program `prog` to device `dev` of the namespace at `netns` as a tcx link
/// (6.6+), on ingress or egress; the link lives as long as the returned descriptor.
pub fn attach_tcx(prog: &OwnedFd, netns: &Path, dev: &str, egress: bool) -> io::Result<OwnedFd> {
    use aya_obj::generated::bpf_attach_type::{BPF_TCX_EGRESS, BPF_TCX_INGRESS};
    link(prog, netns, dev, move |attr, ifindex| {
        attr.link_create.__bindgen_anon_2.target_ifindex = ifindex;
        attr.link_create.attach_type = if egress {
            BPF_TCX_EGRESS
        } else {
            BPF_TCX_INGRESS
        } as u32;
    })
}

/// Creates a link of `prog` on device `dev` of the namespace at `netns`, `set` filling in the
/// target and type.
fn link(
    prog: &OwnedFd,
    netns: &Path,
    dev: &str,
    set: impl FnOnce(&mut bpf_attr, u32) + Send + 'static,
) -> io::Result<OwnedFd> {
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
        set(&mut attr, ifindex);
        bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut attr)
    })
    .join()
    .map_err(|_| io::Error::other("the attaching thread panicked"))?
}
