//! TUI (placeholder).
