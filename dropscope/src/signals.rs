//! The one way a command learns it is to end: SIGINT, SIGTERM, SIGHUP and SIGQUIT, caught from
//! the moment an [`Interrupt`] is made (so that one arriving right after a "counting" line still
//! ends the command cleanly: terminal restored, recording finished, probe detached).
use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The four signals that end a command.
pub struct Interrupt {
    int: Signal,
    term: Signal,
    hup: Signal,
    quit: Signal,
}

impl Interrupt {
    /// Installs the handlers (the default action, ending the process, no longer applies).
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("installing a SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing a SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("installing a SIGHUP handler")?,
            quit: signal(SignalKind::quit()).context("installing a SIGQUIT handler")?,
        })
    }

    /// Resolves on the next of the four signals (cancel-safe).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
            _ = self.quit.recv() => {}
        }
    }

    /// Resolves after `duration` (never without one) or on one of the four signals.
    pub async fn until(mut self, duration: Option<Duration>) {
        let timer = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = timer => {}
            _ = self.recv() => {}
        }
    }
}
