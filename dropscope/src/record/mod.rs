//! Recording (placeholder).
