//! report (placeholder).
