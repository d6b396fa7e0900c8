//! Ctrl-C and SIGTERM set a flag that the bench checks between steps, so that it unwinds through
//! its guards (namespace, tmux session, mounts, child processes) instead of dying mid-way.
use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::bail;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handlers for SIGINT and SIGTERM.
pub fn install() -> anyhow::Result<()> {
    let handler = on_signal as extern "C" fn(libc::c_int);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let prev = unsafe { libc::signal(sig, handler as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            bail!(
                "installing a handler for signal {sig}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Whether Ctrl-C or SIGTERM arrived.
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Fails once Ctrl-C or SIGTERM arrived.
pub fn check() -> anyhow::Result<()> {
    if requested() {
        bail!("interrupted; cleaned up");
    }
    Ok(())
}

/// Sleeps for `d`, failing early on Ctrl-C or SIGTERM.
pub fn sleep(d: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + d;
    loop {
        check()?;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}
