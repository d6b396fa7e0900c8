//! Project tasks: set-up of toolchains, test runner, benchmarks.
fn main() {}
