//! The bounds every netlink dump of the kernel-counter readers keeps (rtnetlink's links, qdiscs
//! and filters; sock_diag's AF_XDP sockets).
use std::time::Duration;

/// The longest one dump may take.
pub const DUMP_TIME: Duration = Duration::from_secs(2);
/// The longest one receive waits for the kernel.
pub const RECV_TIMEOUT: Duration = Duration::from_millis(500);
