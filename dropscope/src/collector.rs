//! collector (placeholder).
