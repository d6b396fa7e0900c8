//! flamegraph (placeholder).
