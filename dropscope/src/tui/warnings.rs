//! Warnings raised while the TUI owns the screen: a tracing layer keeps the last few (they
//! would garble the screen on stderr, and no other subscriber is installed then), the footer
//! says how many there are, and `?` lists them.
use std::{
    collections::VecDeque,
    fmt::Write as _,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use tracing::{Event, Level, Subscriber, field::Field};
use tracing_subscriber::{Layer, layer::Context};

/// The most warnings kept (the oldest go first).
pub const KEPT: usize = 8;
/// The most characters kept of one warning.
pub const MAX_LEN: usize = 300;

/// Warnings kept, and how many were raised in all.
static KEPT_WARNINGS: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
static RAISED: AtomicU64 = AtomicU64::new(0);

/// The layer that keeps warnings and errors (whatever the filter lets through).
pub struct Keep;

impl<S: Subscriber> Layer<S> for Keep {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() > Level::WARN {
            return;
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        keep(&text.0);
    }
}

/// Keeps `text` as the newest warning.
pub fn keep(text: &str) {
    let text: String = text.chars().take(MAX_LEN).collect();
    RAISED.fetch_add(1, Ordering::Relaxed);
    let mut kept = KEPT_WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() == KEPT {
        kept.pop_front();
    }
    kept.push_back(text);
}

/// How many warnings were raised so far.
pub fn raised() -> u64 {
    RAISED.load(Ordering::Relaxed)
}

/// The warnings kept, oldest first (raw: sanitize before showing them).
pub fn kept() -> Vec<String> {
    let kept = KEPT_WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
    kept.iter().cloned().collect()
}

/// An event's message and fields as one line.
struct Text(String);

impl tracing::field::Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            if !self.0.is_empty() {
                self.0.push(' ');
            }
            self.0.push_str(value);
        } else {
            self.record_debug(field, &value);
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[test]
    fn warnings_are_kept_bounded_and_infos_are_not() {
        let subscriber = tracing_subscriber::registry().with(Keep);
        let before = raised();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not kept");
            for i in 0..(KEPT + 3) {
                tracing::warn!(device = "eth0", "reading {i} failed");
            }
            tracing::error!("{}", "x".repeat(2 * MAX_LEN));
        });
        assert_eq!(raised() - before, KEPT as u64 + 4);
        let kept = kept();
        assert_eq!(kept.len(), KEPT);
        assert!(!kept.iter().any(|w| w.contains("not kept")), "{kept:?}");
        assert!(
            kept.iter()
                .any(|w| w == "reading 10 failed device=\"eth0\""),
            "{kept:?}"
        );
        assert_eq!(kept.last().map(|w| w.chars().count()), Some(MAX_LEN));
    }
}
