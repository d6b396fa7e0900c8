//! Stack aggregation (placeholder, filled in by the stacks work).
