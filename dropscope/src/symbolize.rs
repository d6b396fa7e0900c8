//! symbolize (placeholder).
