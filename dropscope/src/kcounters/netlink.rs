//! What the kernel-counter readers' netlink dumps share: the bounds every dump keeps
//! (rtnetlink's links, qdiscs and filters; sock_diag's AF_XDP sockets and TCP listeners), and
//! the sock_diag message layout read by hand.
use std::time::Duration;

/// The longest one dump may take.
pub const DUMP_TIME: Duration = Duration::from_secs(2);
/// The longest one receive waits for the kernel.
pub const RECV_TIMEOUT: Duration = Duration::from_millis(500);

/// `SOCK_DIAG_BY_FAMILY`.
pub const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_DUMP`.
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `struct nlmsghdr`.
pub const NLMSG_HDR: usize = 16;

/// The native-endian `u16` at `at`, where `b` holds it.
pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The native-endian `u32` at `at`, where `b` holds it.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
