//! The notes a reading of the kernel's counters carries beside its counts: how each kind
//! begins, and which of them the ledger lists (they are not errors of the reading). The
//! readers write them; the ledger and the commands read them.

/// How a reading's note about an attached program starts (the ledger lists these notes;
/// they are not errors of the reading).
pub const PROGRAM_NOTE: &str = "program ";

/// Whether a note of a reading is about an attached program (see [`PROGRAM_NOTE`]).
pub fn is_program_note(note: &str) -> bool {
    note.starts_with(PROGRAM_NOTE)
}

/// Whether a note of a reading belongs in the ledger's notes: one about an attached program,
/// or about a layer that could not be read ([`NO_DIAG`]).
pub fn is_ledger_note(note: &str) -> bool {
    is_program_note(note)
        || note.contains(NO_DIAG)
        || note.contains(super::programs::UNCOUNTED)
        || note.starts_with(SINCE_START)
}

/// How a recorded window's note begins when the recording read the kernel's counters first
/// after the window's start: they span more than its drops (and no program rows are shown).
pub const SINCE_START: &str = "the kernel's counters are from the session's start, not from ";

/// How a note that the AF_XDP sockets (`kcounters::xsk`) could not be read begins.
pub const NO_DIAG: &str = "AF_XDP sockets' drops not read";
