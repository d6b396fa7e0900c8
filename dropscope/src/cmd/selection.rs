//! What a command's `--by` and filters do to counts: checked against a recording (a filter or
//! grouping it cannot answer refused, a namespace, interface or reason it does not know
//! named), and the culprit derived where it is grouped or filtered by. The command line
//! parses them ([`crate::cli::Selection`]); the model groups and filters by them.
use crate::{
    cli::{Selection, check_reason},
    model::{
        Snapshot,
        group::{self, Dim, Filter, MissingDim},
    },
};

impl Selection {
    /// Counts of the dimensions of [`Self::counted_by`] filtered by the culprit and grouped by
    /// `--by` (the other filters applied by the kernel, or by `filter`).
    pub fn by_culprit(&self, s: &Snapshot, filter: &Filter, by: &[Dim]) -> Snapshot {
        crate::culprit::group::apply(s, filter, by, self.culprit.as_deref())
    }

    /// The filter and grouping for counts read from a recording: refused if the recording
    /// lacks a dimension they need, or names no namespace or interface given.
    pub fn recorded(&self, s: &Snapshot) -> anyhow::Result<(Filter, Vec<Dim>)> {
        self.recorded_all(&[s])
    }

    /// [`Selection::recorded`] for counts read from several inputs that are shown side by
    /// side: an unchanged `--by` groups them by the dimensions they all have; a filter or
    /// grouping is refused if one lacks a dimension it needs, and a namespace, interface or
    /// reason given must be known to one of them.
    pub fn recorded_all(&self, snaps: &[&Snapshot]) -> anyhow::Result<(Filter, Vec<Dim>)> {
        let f = self.filter();
        // An unchanged --by shows the recordings as they were counted.
        let by = if self.default_by() {
            let had: Vec<Vec<Dim>> = snaps.iter().filter_map(|s| group::dims_of(s)).collect();
            if had.is_empty() {
                Dim::ALL.to_vec()
            } else {
                (Dim::ALL.into_iter())
                    .filter(|d| had.iter().all(|h| h.contains(d)))
                    .collect()
            }
        } else {
            self.by.clone()
        };
        for s in snaps {
            group::check(s, &f, &by).map_err(|e: MissingDim| anyhow::anyhow!("{e}"))?;
        }
        let drops = || snaps.iter().flat_map(|s| s.drops.iter());
        let empty = drops().next().is_none();
        if let Some(ns) = &f.netns {
            let known = drops().any(|d| {
                d.key.attr.netns_name.as_deref() == Some(ns.text.as_str())
                    || d.key.attr.netns == ns.inode
            });
            if !known && !empty {
                anyhow::bail!(
                    "--netns {:?}: no namespace of this name in the recording",
                    ns.text
                );
            }
        }
        // A reason no kernel has (a typo) would match nothing, silently.
        let seen: std::collections::BTreeSet<String> =
            drops().map(|d| d.key.reason.name.to_string()).collect();
        for name in f.reasons.iter().chain(&f.exclude_reasons) {
            check_reason(name, &seen)?;
        }
        if let Some(dev) = &f.device
            && !empty
            && !drops().any(|d| d.key.attr.device.as_deref() == Some(dev.as_str()))
        {
            anyhow::bail!("--device {dev:?}: no interface of this name in the recording");
        }
        Ok((f, by))
    }
}
