//! Terminal set-up and restoration: raw mode and the alternate screen, undone by a guard on
//! drop and by a panic hook before the panic message is printed.
use std::{
    io::{self, Write},
    panic::{self, PanicHookInfo},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use crossterm::{
    cursor::{Hide, Show},
    execute,
    terminal::{EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode},
};

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// Whether the terminal is in our modes and needs restoring.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Puts the terminal back as it was. Safe to call any number of times.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, LeaveAlternateScreen, Show);
        let _ = out.flush();
    }
}

/// Stops the process the way Ctrl-Z does, with the terminal restored while stopped; returns
/// once continued (`fg`), with raw mode and the alternate screen back (the caller redraws).
pub fn suspend() -> io::Result<()> {
    restore();
    // SAFETY: raise(3) with a valid signal number has no preconditions. SIGSTOP cannot be
    // caught, so the whole process stops here until SIGCONT.
    unsafe { libc::raise(libc::SIGSTOP) };
    resume()
}

/// Puts the terminal back in our modes after the process was stopped and continued (the shell
/// may have reset it meanwhile). The caller redraws the whole screen.
pub fn resume() -> io::Result<()> {
    // Whatever the shell left, start again from its current modes.
    let _ = disable_raw_mode();
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    execute!(io::stdout(), EnterAlternateScreen, Hide)
}

/// Raw mode and the alternate screen for as long as it lives.
///
/// Dropping it restores the terminal and the previous panic hook. While it lives, a panic
/// restores the terminal first, so the message lands on the normal screen.
pub struct TerminalGuard {
    previous_hook: Arc<Hook>,
}

impl TerminalGuard {
    /// Installs the panic hook, enters raw mode and the alternate screen.
    pub fn enter() -> io::Result<Self> {
        let previous_hook: Arc<Hook> = Arc::new(panic::take_hook());
        let chained = previous_hook.clone();
        panic::set_hook(Box::new(move |info| {
            restore();
            chained(info);
        }));
        let guard = Self { previous_hook };
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        execute!(io::stdout(), EnterAlternateScreen, Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
        // The hook cannot be changed while panicking; the chained one restores nothing twice.
        if !std::thread::panicking() {
            let _ = panic::take_hook();
            let previous = self.previous_hook.clone();
            panic::set_hook(Box::new(move |info| previous(info)));
        }
    }
}
