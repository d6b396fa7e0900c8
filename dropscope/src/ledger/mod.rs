//! The drop ledger, pure: the kernel's counters as the readers of [`crate::kcounters`] read
//! them, taken over one window and set beside the probe's drops. Which counters count which
//! drops ([`map`]) and which layer each belongs to ([`layers`]); the drops only a
//! counter saw ([`unseen`]), drop ratios ([`ratio`]) and every layer reconciled
//! ([`reconcile`]). No I/O: the TUI, `report` and the exporter import this, never the readers.
mod kernel_view;
pub mod layers;
pub mod map;
pub mod ratio;
pub mod reconcile;
pub mod unseen;

pub use self::{
    kernel_view::{KernelView, view},
    ratio::Ratio,
    reconcile::Ledger,
    unseen::{CounterDelta, SeenDrop, Unseen},
};
