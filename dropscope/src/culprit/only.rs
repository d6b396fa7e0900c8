//! `--culprit PATTERN`: only the rows whose culprit matches (see [`super::group`], which
//! filters and groups by culprit wherever rows are filtered).
use super::culprits;
use crate::model::Snapshot;

pub use super::group::matches;

/// `snap` with only the rows whose culprit contains `pattern` (rows without one never do), their
/// stacks and samples; its total is then theirs (no overflow: a drop not keyed has no culprit).
pub fn only(snap: Snapshot, pattern: &str) -> Snapshot {
    let c = culprits(&snap);
    super::group::only_with(snap, &c, pattern)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pattern_matches_in_any_case() {
        assert!(super::matches(
            "exact: rule ip filter INPUT handle 4 \"cali:X\"",
            "CALI:x"
        ));
        assert!(!super::matches("unknown: not read", "exact"));
    }
}
