//! The driver's own drop statistics of each device (what `ethtool -S` shows), through the
//! `SIOCETHTOOL` ioctl on a socket of the calling thread's namespace (the reading's rtnetlink
//! socket: the ioctl goes to the device whatever the socket's family): the statistics' names
//! (`ETHTOOL_GSTRINGS`), then their values (`ETHTOOL_GSTATS`), keeping those whose names say
//! drops (see [`is_drop_stat`]) as `Ethtool:<dev>:<stat>`.
//!
//! Bounded: at most [`MAX_STATS`] statistics per device (a driver with more is cut, with a
//! note; one with more than [`MAX_ANSWER`] is not read, with a note), names cut at their 32
//! bytes and escaped; a device without statistics (`lo`) costs one ioctl. The kernel's answers land in guarded buffers ([`super::guarded`]): a driver whose
//! statistics change between the ioctls cannot make the kernel write past them.
use std::{
    cell::RefCell,
    ffi::c_void,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

use super::{guarded::Guarded, parse::Counters};
use crate::vocab::counter::Counter;

/// The most statistics read of one device.
pub const MAX_STATS: usize = 8192;
/// The most statistics a device may have for any of them to be read: the kernel answers with
/// all of them or none, so this bounds the buffers (2 MB of names); a device with more is
/// skipped, with a note.
pub const MAX_ANSWER: usize = 65536;
/// `ETH_GSTRING_LEN`.
const GSTRING: usize = 32;
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;

/// Whether a driver statistic's name says it counts dropped or lost packets.
pub fn is_drop_stat(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "drop",
        "discard",
        "miss",
        "no_buf",
        "nobuf",
        "alloc_fail",
        "fifo",
        "overrun",
        "over_err",
    ]
    .iter()
    .any(|w| n.contains(w))
        && !n.contains("bytes")
}

/// `struct ifreq` with `ifr_data`.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: *mut c_void,
    _pad: [u8; 16],
}

/// The ioctl of `cmd_buf` (an ethtool command struct) on device `dev`.
fn ethtool(sock: BorrowedFd<'_>, dev: &str, cmd_buf: &mut [u8]) -> std::io::Result<()> {
    let mut req = IfReq {
        name: [0; 16],
        data: cmd_buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    let n = dev.len().min(15);
    req.name[..n].copy_from_slice(&dev.as_bytes()[..n]);
    // SAFETY: SIOCETHTOOL reads `req` and the command buffer it points to, which holds the
    // command and room for what it returns (sized by the caller from the count asked first).
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req as *mut IfReq) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

/// How many statistics a device has (`ETHTOOL_GSSET_INFO`); 0 without any.
fn count(sock: BorrowedFd<'_>, dev: &str) -> std::io::Result<usize> {
    // cmd, reserved, sset_mask (u64), data[1]
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    b[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
    ethtool(sock, dev, &mut b)?;
    let mask = u64::from_ne_bytes(b[8..16].try_into().unwrap_or_default());
    Ok(if mask & (1 << ETH_SS_STATS) != 0 {
        u32_at(&b, 16) as usize
    } else {
        0
    })
}

/// Adds the drop statistics of each device of `devices` (raw name, escaped name) to `out`,
/// asked through `sock` (any socket of the calling thread's namespace; one is made for the
/// call without); returns notes.
pub fn read(
    sock: Option<BorrowedFd<'_>>,
    devices: &[(String, String)],
    out: &mut Counters,
) -> Vec<String> {
    let mut notes = Vec::new();
    let made;
    let sock = match sock {
        Some(s) => s,
        None => {
            // SAFETY: socket(2) with constant arguments; the result is checked.
            let fd =
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                notes.push(format!(
                    "driver statistics not read: {}",
                    std::io::Error::last_os_error()
                ));
                return notes;
            }
            // SAFETY: a new descriptor nothing else owns.
            made = unsafe { OwnedFd::from_raw_fd(fd) };
            made.as_fd()
        }
    };
    for (raw, name) in devices {
        match stats(sock, raw) {
            Ok((stats, cut)) => {
                if cut {
                    notes.push(format!(
                        "driver statistics of {name}: more than {MAX_STATS}, the rest not read"
                    ));
                }
                for (stat, v) in stats {
                    if v > 0 && is_drop_stat(&stat) {
                        let stat = crate::sanitize::kernel_name(&stat);
                        let c = Counter::Ethtool {
                            dev: name,
                            stat: &stat,
                        };
                        out.insert(c.to_string(), v);
                    }
                }
            }
            // No ethtool support, or gone since the link dump.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENODEV)) => {}
            // The statistics changed between the ioctls (see [`changed`]).
            Err(e) if matches!(e.raw_os_error(), Some(libc::EFAULT | libc::EAGAIN)) => notes.push(
                format!("driver statistics of {name} changed while read: not read this time"),
            ),
            Err(e) => notes.push(format!("driver statistics of {name} not read: {e}")),
        }
    }
    notes
}

/// The statistics of device `dev` in the calling thread's namespace, reading `asked` of them
/// (as many as the driver has, when `None`): for the tests of what happens when the driver has
/// more than the count the reading was sized for.
#[doc(hidden)]
pub fn device_stats(dev: &str, asked: Option<usize>) -> std::io::Result<Vec<(String, u64)>> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let all = match asked {
        Some(n) => n,
        None => count(sock.as_fd(), dev)?,
    };
    stats_counted(sock.as_fd(), dev, all).map(|(stats, _)| stats)
}

/// The statistics changed between the ioctl that counted them and one that read them: a
/// kernel that checks the count answered none, or the guard page stopped a longer answer.
fn changed() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EAGAIN)
}

thread_local! {
    /// The reading thread's buffers for the names and the values, reused from device to
    /// device and reading to reading.
    static BUFFERS: RefCell<Option<(Guarded, Guarded)>> = const { RefCell::new(None) };
}

/// A device's statistics by name, and whether there were more than [`MAX_STATS`].
///
/// Kernels before the fix of 2024 write as many names and values as the driver has when
/// asked, not as many as the count asked just before: both answers go into buffers that end at
/// a guard page, so a driver whose statistics grew in between fails the ioctl (`EFAULT`)
/// instead of overwriting memory. Later kernels answer none when the counts differ. Either
/// way the device is left out of this reading, with a note.
fn stats(sock: BorrowedFd<'_>, dev: &str) -> std::io::Result<(Vec<(String, u64)>, bool)> {
    let all = count(sock, dev)?;
    stats_counted(sock, dev, all)
}

/// [`stats`] with the count already asked: `all` statistics.
fn stats_counted(
    sock: BorrowedFd<'_>,
    dev: &str,
    all: usize,
) -> std::io::Result<(Vec<(String, u64)>, bool)> {
    if all == 0 {
        return Ok((Vec::new(), false));
    }
    if all > MAX_ANSWER {
        return Err(std::io::Error::other(format!(
            "{all} statistics, more than {MAX_ANSWER}"
        )));
    }
    let n = all.min(MAX_STATS);
    BUFFERS.with_borrow_mut(|buffers| {
        if buffers.is_none() {
            *buffers = Some((Guarded::new(4096)?, Guarded::new(4096)?));
        }
        let Some((names_buf, values_buf)) = buffers.as_mut() else {
            unreachable!("set above");
        };
        // cmd, string_set, len, then the names; room for all, the first n read.
        let names = names_buf.tail(12 + all * GSTRING)?;
        names[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        names[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        names[8..12].copy_from_slice(&(all as u32).to_ne_bytes());
        ethtool(sock, dev, names)?;
        // Kernels that check the count asked answer none when it is not the driver's.
        if u32_at(names, 8) as usize != all {
            return Err(changed());
        }
        // cmd, n_stats, then the values.
        let values = values_buf.tail(8 + all * 8)?;
        values[..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
        values[4..8].copy_from_slice(&(all as u32).to_ne_bytes());
        ethtool(sock, dev, values)?;
        if u32_at(values, 4) as usize != all {
            return Err(changed());
        }
        let got = n;
        let out = (0..got)
            .map(|i| {
                let raw = &names[12 + i * GSTRING..12 + (i + 1) * GSTRING];
                let end = raw.iter().position(|b| *b == 0).unwrap_or(GSTRING);
                let name = String::from_utf8_lossy(&raw[..end]).into_owned();
                let at = 8 + i * 8;
                let v = u64::from_ne_bytes(values[at..at + 8].try_into().unwrap_or_default());
                (name, v)
            })
            .collect();
        Ok((out, all > n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_statistics_are_told_by_their_names() {
        for name in [
            "rx_queue_0_xdp_drops",
            "rx_dropped",
            "rx_missed_errors",
            "rx_fifo_errors",
            "rx_no_buffer_count",
            "alloc_rx_buff_failed",
            "tx_discards",
            "rx_over_errors",
        ] {
            let expect = !name.starts_with("alloc_rx_buff");
            assert_eq!(is_drop_stat(name), expect, "{name}");
        }
        assert!(!is_drop_stat("rx_queue_0_xdp_packets"));
        assert!(!is_drop_stat("rx_dropped_bytes"));
        assert!(!is_drop_stat("peer_ifindex"));
    }

    #[test]
    fn a_device_with_too_many_statistics_is_not_read() {
        // SAFETY: socket(2) with constant arguments; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // Refused before any ioctl or buffer: the device need not exist.
        let e = stats_counted(sock.as_fd(), "nosuchdev0", MAX_ANSWER + 1).expect_err("too many");
        assert!(e.to_string().contains("more than 65536"), "{e}");
    }

    #[test]
    fn loopback_has_no_driver_statistics_and_costs_no_note() {
        let lo = [("lo".to_string(), "lo".to_string())];
        let mut out = Counters::new();
        let notes = read(None, &lo, &mut out);
        assert!(notes.is_empty() && out.is_empty(), "{notes:?} {out:?}");
        // The same through an rtnetlink socket, as the reading asks (an ioctl the socket's
        // family did not pass on to the device would be a note).
        let nl = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE).expect("socket");
        let notes = read(Some(nl.as_fd()), &lo, &mut out);
        assert!(notes.is_empty() && out.is_empty(), "{notes:?} {out:?}");
    }
}
