//! `report --culprit PATTERN`: only the rows whose culprit matches.
use super::culprits;
use crate::model::Snapshot;

/// Whether a culprit, as the report prints it (its certainty and who it names, one line),
/// contains `pattern` in any case.
pub fn matches(line: &str, pattern: &str) -> bool {
    line.to_lowercase().contains(&pattern.to_lowercase())
}

/// `snap` with only the rows whose culprit contains `pattern` (rows without one never do), their
/// stacks and samples; its total is then theirs (no overflow: a drop not keyed has no culprit).
pub fn only(mut snap: Snapshot, pattern: &str) -> Snapshot {
    let c = culprits(&snap);
    snap.drops
        .retain(|d| c.get(&d.key).is_some_and(|c| matches(&c.line(), pattern)));
    let kept: std::collections::HashSet<_> = snap.drops.iter().map(|d| d.key.clone()).collect();
    snap.stacks.retain(|s| kept.contains(&s.key));
    snap.samples.retain(|s| kept.contains(&s.key));
    snap.total = snap.keyed_sum();
    snap.overflow = 0;
    snap
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
