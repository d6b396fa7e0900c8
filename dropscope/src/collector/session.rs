//! What a live session says of itself: its host, kernel, start and probe.
use crate::{clock::unix_ms, model::SessionInfo, probe::Probe};

/// Host, kernel, start time and probe kind of a live session starting now.
pub fn session_info(probe: &Probe) -> SessionInfo {
    SessionInfo {
        host: uname_field(|u| &u.nodename),
        kernel: uname_field(|u| &u.release),
        started_unix_ms: unix_ms(),
        probe: probe.kind().to_string(),
    }
}

fn uname_field(f: impl Fn(&libc::utsname) -> &[libc::c_char; 65]) -> String {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated C strings.
    let u = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        libc::uname(&mut u);
        u
    };
    let bytes: Vec<u8> = f(&u)
        .iter()
        .take_while(|c| **c != 0)
        // c_char is i8 on x86_64 and u8 on aarch64: its byte either way.
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
