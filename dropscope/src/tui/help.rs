//! Every key the TUI understands, for the `?` overlay: the rows of the key table
//! ([`super::keys`]), general keys and the replay timeline's.

pub use super::keys::{GENERAL, Key as KeyHelp, REPLAY};

/// Width of the keys column in the overlay.
pub const KEYS_WIDTH: usize = 16;
