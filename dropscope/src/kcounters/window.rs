//! A namespace's window over the counters: its baseline and the growth carried from counters
//! that went back ([`crate::kcounters::resets`]), which say whether a counter grew in it.
use crate::vocab::counter::Counters;

/// A namespace's baseline and carried growth: whether a counter grew in the window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window<'a> {
    baseline: Option<&'a Counters>,
    carried: Option<&'a Counters>,
}

impl<'a> Window<'a> {
    /// The window of a namespace's `baseline` and `carried` growth.
    pub fn new(baseline: Option<&'a Counters>, carried: Option<&'a Counters>) -> Self {
        Self { baseline, carried }
    }

    /// Whether `name`, read as `v`, grew in the window.
    pub fn grew(&self, name: &str, v: u64) -> bool {
        self.baseline.and_then(|b| b.get(name)) != Some(&v)
            || self.carried.is_some_and(|c| c.contains_key(name))
    }
}
