//! Table rows (placeholder, filled in by the TUI work).
