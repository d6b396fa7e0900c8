//! The BPF syscalls of the verdict counters: finding programs by id, their main function's
//! BTF, loading a counter with a program as its target, and attaching it.
use std::{
    ffi::CStr,
    io,
    mem::{size_of, zeroed},
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd, bpf_prog_info, bpf_prog_type};

use super::asm::Insn;
use crate::probe::sys::bpf;

/// The next program id after `start`, `None` past the last.
pub fn next_prog_id(start: u32) -> io::Result<Option<u32>> {
    // SAFETY: bpf_attr is plain data; zero is its documented initial state.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.__bindgen_anon_6.__bindgen_anon_1.start_id = start;
    match bpf(bpf_cmd::BPF_PROG_GET_NEXT_ID, &mut attr) {
        // SAFETY: the kernel wrote next_id into the variant it was given.
        Ok(()) => Ok(Some(unsafe { attr.__bindgen_anon_6.next_id })),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A file descriptor of program `id` (`ENOENT`: it is gone).
pub fn prog_fd(id: u32) -> io::Result<OwnedFd> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.__bindgen_anon_6.__bindgen_anon_1.start_id = id;
    fd_of(bpf_cmd::BPF_PROG_GET_FD_BY_ID, &mut attr)
}

/// What the watcher needs to know of a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgInfo {
    /// Its id.
    pub id: u32,
    /// Its type (`bpf_prog_type`).
    pub kind: u32,
    /// Its name (at most 15 bytes, as loaded).
    pub name: String,
    /// The BTF type id of its main function, when it was loaded with BTF function info.
    pub main_func: Option<u32>,
}

/// Reads a program's id, type, name and main function's BTF id: one syscall.
pub fn prog_info(fd: BorrowedFd<'_>) -> io::Result<ProgInfo> {
    // bpf_func_info: insn_off, type_id.
    let mut func = [0u32; 2];
    // SAFETY: bpf_prog_info is plain data; zero is a valid initial state.
    let mut info: bpf_prog_info = unsafe { zeroed() };
    info.nr_func_info = 1;
    info.func_info_rec_size = size_of::<[u32; 2]>() as u32;
    info.func_info = func.as_mut_ptr() as u64;
    // SAFETY: as above for bpf_attr.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = size_of::<bpf_prog_info>() as u32;
    attr.info.info = &mut info as *mut bpf_prog_info as u64;
    bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|c| **c != 0)
        // c_char is i8 on x86_64 and u8 on aarch64: its byte either way.
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    Ok(ProgInfo {
        id: info.id,
        kind: info.type_,
        name: String::from_utf8_lossy(&name).into_owned(),
        // The kernel writes back how many records the program has; the first is its main
        // function (instruction 0).
        main_func: (info.btf_id != 0 && info.nr_func_info > 0 && func[0] == 0 && func[1] != 0)
            .then_some(func[1]),
    })
}

/// Loads `insns` as an fexit program of `target`'s main function (`btf_id` in the target's
/// BTF); on refusal the error carries the verifier's last line.
pub fn load_fexit(insns: &[Insn], target: BorrowedFd<'_>, btf_id: u32) -> io::Result<OwnedFd> {
    const LICENSE: &CStr = c"GPL";
    let mut log = vec![0u8; 4096];
    let load = |log: Option<&mut [u8]>| {
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { zeroed() };
        let mut a = aya_obj::generated::bpf_attr__bindgen_ty_4 {
            prog_type: bpf_prog_type::BPF_PROG_TYPE_TRACING as u32,
            expected_attach_type: bpf_attach_type::BPF_TRACE_FEXIT as u32,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            attach_btf_id: btf_id,
            // SAFETY: as above.
            ..unsafe { zeroed() }
        };
        a.__bindgen_anon_1.attach_prog_fd = target.as_raw_fd() as u32;
        for (d, s) in a.prog_name.iter_mut().zip(b"ds_verdicts") {
            *d = *s as _;
        }
        if let Some(log) = log {
            a.log_level = 1;
            a.log_size = log.len() as u32;
            a.log_buf = log.as_mut_ptr() as u64;
        }
        attr.__bindgen_anon_3 = a;
        fd_of(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    match load(None) {
        Ok(fd) => Ok(fd),
        // Load again with the verifier's log to say why.
        Err(e) => match load(Some(&mut log)) {
            Ok(fd) => Ok(fd),
            Err(_) => {
                let text = String::from_utf8_lossy(&log);
                let last = text
                    .trim_end_matches('\0')
                    .lines()
                    .rfind(|l| !l.trim().is_empty())
                    .map(|l| crate::sanitize::terminal_cell(l.trim(), 200))
                    .unwrap_or_default();
                Err(if last.is_empty() {
                    e
                } else {
                    io::Error::new(e.kind(), format!("{e}: {last}"))
                })
            }
        },
    }
}

/// Attaches a loaded tracing program (`BPF_RAW_TRACEPOINT_OPEN` with no name): the link lives
/// as long as the returned descriptor.
pub fn attach_tracing(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.raw_tracepoint.prog_fd = prog.as_raw_fd() as u32;
    fd_of(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// A command that returns a new file descriptor.
fn fd_of(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let fd = crate::probe::sys::bpf_ret(cmd, attr)?;
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
