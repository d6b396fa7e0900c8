//! The series of `dropscope_drops_total`: label sets built from drop keys, sanitized, and capped
//! at `--max-series` with the rest summed into one `reason="other"` series.
use std::{collections::HashMap, sync::Arc};

use crate::model::{DropKey, Snapshot};

/// Longest label value exported, in bytes; longer values are cut at a character boundary and
/// end in `…`.
pub const MAX_LABEL_BYTES: usize = 256;

/// The part of a drop key one label shows.
pub type LabelOf = fn(&DropKey) -> &str;

/// The labels of `dropscope_drops_total`, in order, each with the part of a drop key it shows.
/// An attribution dimension of the grouping in use (e.g. `netns_name`, `device`, `protocol`)
/// is one more line here.
pub const DROP_LABELS: &[(&str, LabelOf)] = &[
    ("reason", |k| &k.reason.name),
    ("location", |k| &k.location),
    ("netns_name", |k| k.attr.netns_name.as_deref().unwrap_or("")),
    ("device", |k| k.attr.device.as_deref().unwrap_or("")),
    ("protocol", |k| k.attr.protocol.as_deref().unwrap_or("")),
];

/// The `reason` of the series that sums every label set beyond `--max-series`.
pub const OTHER: &str = "other";
/// The `reason` of the series of drops the kernel counted but could not key (its map was full).
pub const OVERFLOW: &str = "overflow";

/// Sanitized label values, one per [`DROP_LABELS`] entry.
pub type LabelValues = Arc<[Arc<str>]>;

/// One exported series of `dropscope_drops_total`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// Label values in the order of [`DROP_LABELS`]; empty values are left out when rendered.
    pub labels: LabelValues,
    /// Exact cumulative count.
    pub count: u64,
}

/// Makes a kernel-provided string safe as a label value: control, bidi, format and invisible
/// characters become `?` (the renderer escapes `\`, `"` and newlines; none survive here but
/// the first two) and the value is bounded to [`MAX_LABEL_BYTES`] (see
/// [`crate::sanitize::metric_label`]).
pub fn sanitize(value: &str) -> Arc<str> {
    crate::sanitize::metric_label(value, MAX_LABEL_BYTES)
}

/// Chooses which label sets are exported as series of their own, at most `max` of them.
///
/// Every series is a Prometheus counter, so none may ever go down: a label set, once exported,
/// stays exported for the life of the server, and one summed into `reason="other"` stays there.
/// While fewer than `max` are exported, new label sets get the free places largest count first:
/// the first `max` label sets by count. The sum over all series is always the snapshot's total.
/// Label values are sanitized once per key and remembered.
#[derive(Debug)]
pub struct Selection {
    max: usize,
    /// Each drop key's label set, as an index into `sets`.
    keys: HashMap<DropKey, usize>,
    /// The distinct label sets seen, and whether each is exported.
    sets: Vec<(LabelValues, bool)>,
    /// Index of each distinct label set in `sets`.
    index: HashMap<LabelValues, usize>,
    exported: usize,
}

/// What a snapshot looks like once the cap is applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selected {
    /// The exported series, largest count first.
    pub series: Vec<Series>,
    /// The sum of every label set not exported.
    pub other: u64,
    /// How many label sets that sum covers.
    pub other_sets: usize,
    /// Drops counted but not keyed (the kernel's map was full).
    pub overflow: u64,
}

impl Selected {
    /// Sum over every series, including `other` and `overflow`: equal to the snapshot's total.
    pub fn sum(&self) -> u64 {
        self.series.iter().map(|s| s.count).sum::<u64>() + self.other + self.overflow
    }
}

impl Selection {
    /// A selection exporting at most `max` label sets.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            keys: HashMap::new(),
            sets: Vec::new(),
            index: HashMap::new(),
            exported: 0,
        }
    }

    /// The label set of a key, sanitized the first time the key is seen.
    fn set_of(&mut self, key: &DropKey) -> usize {
        if let Some(&i) = self.keys.get(key) {
            return i;
        }
        let labels: LabelValues = DROP_LABELS
            .iter()
            .map(|(_, value)| sanitize(value(key)))
            .collect();
        let i = match self.index.get(&labels) {
            Some(&i) => i,
            None => {
                self.sets.push((Arc::clone(&labels), false));
                self.index.insert(labels, self.sets.len() - 1);
                self.sets.len() - 1
            }
        };
        self.keys.insert(key.clone(), i);
        i
    }

    /// Applies the cap to a snapshot (updating which label sets are exported).
    pub fn select(&mut self, snap: &Snapshot) -> Selected {
        let mut counts: Vec<Option<u64>> = Vec::new();
        for d in &snap.drops {
            let i = self.set_of(&d.key);
            if counts.len() < self.sets.len() {
                counts.resize(self.sets.len(), None);
            }
            *counts[i].get_or_insert(0) += d.count;
        }
        let room = self.max.saturating_sub(self.exported);
        if room > 0 {
            let mut newcomers: Vec<(usize, u64)> = counts
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.map(|c| (i, c)))
                .filter(|(i, _)| !self.sets[*i].1)
                .collect();
            newcomers.sort_unstable_by(|a, b| {
                b.1.cmp(&a.1)
                    .then_with(|| self.sets[a.0].0.cmp(&self.sets[b.0].0))
            });
            for (i, _) in newcomers.into_iter().take(room) {
                self.sets[i].1 = true;
                self.exported += 1;
            }
        }
        let mut out = Selected {
            overflow: snap.overflow,
            ..Selected::default()
        };
        for (i, count) in counts.into_iter().enumerate() {
            let Some(count) = count else { continue };
            let (labels, exported) = &self.sets[i];
            if *exported {
                out.series.push(Series {
                    labels: Arc::clone(labels),
                    count,
                });
            } else {
                out.other += count;
                out.other_sets += 1;
            }
        }
        out.series
            .sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.labels.cmp(&b.labels)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DropCount, Reason};

    fn drop(reason: &str, location: &str, count: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: 1,
                    name: reason.into(),
                },
                location: location.into(),
                attr: Default::default(),
            },
            count,
        }
    }

    fn snap(drops: Vec<DropCount>, overflow: u64) -> Snapshot {
        let total = drops.iter().map(|d| d.count).sum::<u64>() + overflow;
        Snapshot {
            total,
            overflow,
            drops,
            ..Snapshot::default()
        }
    }

    #[test]
    fn keeps_the_top_n_and_sums_the_rest_exactly() {
        let s = snap(
            vec![
                drop("A", "f+0x1", 5),
                drop("B", "f+0x2", 50),
                drop("C", "f+0x3", 7),
                drop("D", "f+0x4", 1),
            ],
            3,
        );
        let sel = Selection::new(2).select(&s);
        let reasons: Vec<_> = sel.series.iter().map(|s| &*s.labels[0]).collect();
        assert_eq!(reasons, ["B", "C"]);
        assert_eq!(sel.other, 6);
        assert_eq!(sel.other_sets, 2);
        assert_eq!(sel.overflow, 3);
        assert_eq!(sel.sum(), s.total);
    }

    #[test]
    fn no_series_ever_decreases_when_the_ranking_changes() {
        let mut sel = Selection::new(1);
        let first = sel.select(&snap(vec![drop("A", "a", 10), drop("B", "b", 1)], 0));
        // B overtakes A: moving it out of `other` would make `other` go down.
        let second = sel.select(&snap(vec![drop("A", "a", 11), drop("B", "b", 100)], 0));
        assert_eq!(&*first.series[0].labels[0], "A");
        assert_eq!(&*second.series[0].labels[0], "A");
        assert_eq!(second.series[0].count, 11);
        assert!(second.other >= first.other);
        assert_eq!(second.other, 100);
        assert_eq!(second.sum(), 111);
    }

    #[test]
    fn free_places_go_to_newcomers_by_count() {
        let mut sel = Selection::new(2);
        sel.select(&snap(vec![drop("A", "a", 1)], 0));
        let s = sel.select(&snap(
            vec![drop("A", "a", 1), drop("B", "b", 2), drop("C", "c", 9)],
            0,
        ));
        let reasons: Vec<_> = s.series.iter().map(|s| &*s.labels[0]).collect();
        assert_eq!(reasons, ["C", "A"]);
        assert_eq!(s.other, 2);
    }

    #[test]
    fn keys_whose_labels_coincide_after_sanitizing_are_merged() {
        let long = "x".repeat(MAX_LABEL_BYTES + 10);
        let longer = "x".repeat(MAX_LABEL_BYTES + 20);
        let s = snap(vec![drop("A", &long, 2), drop("A", &longer, 3)], 0);
        let sel = Selection::new(10).select(&s);
        assert_eq!(sel.series.len(), 1);
        assert_eq!(sel.series[0].count, 5);
        assert_eq!(sel.sum(), s.total);
    }

    #[test]
    fn sanitize_bounds_length_on_a_char_boundary_and_replaces_controls() {
        let v = sanitize(&"é".repeat(MAX_LABEL_BYTES));
        assert!(v.len() <= MAX_LABEL_BYTES, "{}", v.len());
        assert!(v.ends_with('…'));
        assert_eq!(&*sanitize("a\u{1b}[2Jb\r\nc\0"), "a?[2Jb??c?");
        assert_eq!(&*sanitize("plain+0x1 [mod]"), "plain+0x1 [mod]");
    }
}
