//! The notes a reading of the kernel's counters carries beside its counts, typed by kind: the
//! readers and the probe write them (each kind's text begins or holds its marker below), the
//! ledger and the commands sort them with [`Note::of`]. The text is what recordings carry.

/// How a reading's note about an attached program starts (the ledger lists these notes;
/// they are not errors of the reading).
pub const PROGRAM_NOTE: &str = "program ";

/// What a reading's note on an attached program whose verdicts were not counted says.
pub const UNCOUNTED: &str = "verdicts not counted";

/// How a recorded window's note begins when the recording read the kernel's counters first
/// after the window's start: they span more than its drops (and no program rows are shown).
pub const SINCE_START: &str = "the kernel's counters are from the session's start, not from ";

/// How a note that the AF_XDP sockets (`kcounters::xsk`) could not be read begins.
pub const NO_DIAG: &str = "AF_XDP sockets' drops not read";

/// The kind of a reading's note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// About an attached program (begins [`PROGRAM_NOTE`]).
    Program,
    /// Programs' verdicts not counted (holds [`UNCOUNTED`]), other than one program's.
    Uncounted,
    /// The AF_XDP sockets could not be read (holds [`NO_DIAG`]).
    NoDiag,
    /// A recorded window's counters span more than it (begins [`SINCE_START`]).
    SinceStart,
    /// Anything else: a counter or layer that could not be read.
    Error,
}

impl Note {
    /// The kind of `note`.
    pub fn of(note: &str) -> Self {
        if note.starts_with(PROGRAM_NOTE) {
            Note::Program
        } else if note.starts_with(SINCE_START) {
            Note::SinceStart
        } else if note.contains(NO_DIAG) {
            Note::NoDiag
        } else if note.contains(UNCOUNTED) {
            Note::Uncounted
        } else {
            Note::Error
        }
    }

    /// Whether the ledger lists it among its notes (it is not an error of the reading).
    pub fn in_ledger(self) -> bool {
        self != Note::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_told_by_its_marker() {
        let cases = [
            (
                format!("{PROGRAM_NOTE}42 \"g\": {UNCOUNTED}: EPERM"),
                Note::Program,
            ),
            (
                format!("XDP and tc programs' {UNCOUNTED}: EPERM"),
                Note::Uncounted,
            ),
            (format!("{NO_DIAG}: EINVAL"), Note::NoDiag),
            (format!("{SINCE_START}--from 5s"), Note::SinceStart),
            ("rtnetlink: EPERM".to_string(), Note::Error),
        ];
        for (text, kind) in cases {
            assert_eq!(Note::of(&text), kind, "{text}");
            assert_eq!(Note::of(&text).in_ledger(), kind != Note::Error, "{text}");
        }
    }
}
