//! The pure model: snapshots and the plain functions over them (rates, deltas, top-N, filter,
//! stack tree). No aya, no terminal.
pub mod budget;
pub mod compare;
pub mod counter_only;
pub mod group;
pub mod kernel;
pub mod notes;
pub mod poisson;
pub mod programs;
pub mod snapshot;
pub mod socket;
pub mod stacks;
pub mod table;
pub mod verdict_counter;
pub mod window;

pub use crate::vocab::packet::Sample;
pub use crate::vocab::reading::KernelReading;
pub use snapshot::{
    Attribution, DropCount, DropKey, Health, KeySamples, Reason, SessionInfo, Snapshot, StackCount,
};
