//! The words the readers, the probe, the command line and the model share, below all of them:
//! the dimensions a drop is grouped and filtered by and the names of their values ([`dims`]),
//! the kernel counters' names and a reading's notes, typed ([`counter`], [`note`]), a
//! namespace's devices by interface index and a per-device counter followed across a rename
//! ([`devices`]), a sampled packet and what its headers say ([`packet`]), a socket a drop had
//! reached and the processes holding one ([`socket`]), a reading of the kernel's own counters
//! as the readers make it and a snapshot carries it ([`reading`]), a drop budget's clauses as
//! `--budget` parses them ([`budget`]), and the significance level changes are tested at.
//! Nothing here imports another module of the crate but the culprit's two data types a reading
//! carries (`culprit::ruleset`, `culprit::attached`), which import nothing themselves.
pub mod budget;
pub mod counter;
pub mod devices;
pub mod dims;
pub mod note;
pub mod packet;
pub mod reading;
pub mod socket;

/// The significance level a change is tested at unless told otherwise (`diff --alpha`, the
/// TUI's comparison).
pub const DEFAULT_ALPHA: f64 = 0.001;
