//! The notes a reading of the kernel's counters carries beside its counts (their kinds and
//! markers are [`crate::vocab::note`]'s): which of them the ledger lists (they are not errors
//! of the reading). The readers write them; the ledger and the commands read them.
pub use crate::vocab::note::{NO_DIAG, Note, PROGRAM_NOTE, SINCE_START};

/// Whether a note of a reading belongs in the ledger's notes: one about an attached program,
/// about programs' verdicts not counted, about a layer that could not be read ([`NO_DIAG`]),
/// or a window's counters spanning more than it ([`SINCE_START`]).
pub fn is_ledger_note(note: &str) -> bool {
    Note::of(note).in_ledger()
}
