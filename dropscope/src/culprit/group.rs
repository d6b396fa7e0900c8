//! Grouping and filtering by culprit (`--by ...,culprit`, `--culprit PATTERN`): the culprit is
//! derived per snapshot from the kernel's view and the finer keys it needs (reason, location,
//! namespace, interface, socket), then the rows are filtered by it and grouped by it, as
//! [`crate::model::group::apply`] groups by the other dimensions. A row's culprit groups by its
//! label: its certainty and who it names (`exact: rule ip filter INPUT handle 4`), `unknown`
//! for every row whose culprit is unknown (their reasons listed), `none` for rows nobody is
//! named for (a drop no rule, program or socket is known to make).
use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

pub use super::who::Grouped;
use super::{Culprit, Who};
use crate::model::{
    DropKey, Snapshot,
    group::{self, Dim, Filter},
};

/// The label of a row nobody is named for.
pub const NONE: &str = "none";
/// The label of every row whose culprit is unknown.
pub const UNKNOWN: &str = "unknown";
/// The most distinct reasons a merged row's culprit lists.
const MAX_BECAUSE: usize = 4;

/// The label rows with `culprit` group by.
pub fn label(culprit: Option<&Culprit>) -> String {
    match culprit {
        None => NONE.into(),
        Some(Culprit::Unknown { .. }) => UNKNOWN.into(),
        Some(c) => {
            let who: Vec<String> = c.who().iter().map(Who::identity).collect();
            format!("{}: {}", c.certainty(), who.join("; "))
        }
    }
}

/// The label rows with `culprit` are matched by across two runs (`diff`): its certainty and
/// who it names by [`Who::stable_identity`] (a program without its id, a socket's holders
/// without their process ids), `unknown` and `none` as in [`label`]. Rows whose culprits differ
/// in either (another rule, or the same rule exact in one run and a candidate in the other)
/// never match.
pub fn stable_label(culprit: Option<&Culprit>) -> String {
    match culprit {
        None | Some(Culprit::Unknown { .. }) => label(culprit),
        Some(c) => {
            let who: Vec<String> = c.who().iter().map(Who::stable_identity).collect();
            format!("{}: {}", c.certainty(), who.join("; "))
        }
    }
}

/// `s`, grouped by culprit (by [`apply`]), with each row's label made [`stable_label`]: rows of
/// one stable label are then one key where keys are compared by their names.
pub fn stable(mut s: Snapshot) -> Snapshot {
    let relabel = |k: &mut DropKey| {
        if let Some(g) = &k.attr.culprit
            && g.culprit.is_some()
        {
            let label = stable_label(g.culprit.as_ref());
            k.attr.culprit = Some(Arc::new(Grouped {
                label: label.into(),
                culprit: g.culprit.clone(),
            }));
        }
    };
    s.drops.iter_mut().for_each(|d| relabel(&mut d.key));
    s.stacks.iter_mut().for_each(|st| relabel(&mut st.key));
    s.samples.iter_mut().for_each(|k| relabel(&mut k.key));
    s
}

/// Whether a culprit, as the report prints it (its certainty and who it names, one line),
/// contains `pattern` in any case.
pub fn matches(line: &str, pattern: &str) -> bool {
    line.to_lowercase().contains(&pattern.to_lowercase())
}

/// `s` filtered by `filter`, by `pattern` (only the rows whose culprit's line contains it: see
/// [`matches`]) and grouped by `by`, the culprit derived first where either asks for it. Kept
/// rows' total is then theirs (no overflow: a drop not keyed has no culprit).
pub fn apply(s: &Snapshot, filter: &Filter, by: &[Dim], pattern: Option<&str>) -> Snapshot {
    if !by.contains(&Dim::Culprit) && pattern.is_none() {
        return group::apply(s, filter, by);
    }
    let mut derived = super::culprits(s);
    for (k, c) in super::unattributed(s) {
        derived.entry(k).or_insert(c);
    }
    let mut s = match pattern {
        Some(p) => only_with(s.clone(), &derived, p),
        None => s.clone(),
    };
    if by.contains(&Dim::Culprit) {
        stamp(&mut s, &derived, by);
    }
    let mut out = group::apply(&s, filter, by);
    if pattern.is_some() {
        out.total = out.keyed_sum();
        out.overflow = 0;
    }
    out
}

/// `snap` with only the rows whose culprit in `derived` contains `pattern`, their stacks and
/// samples; its total is then theirs.
pub fn only_with(
    mut snap: Snapshot,
    derived: &HashMap<DropKey, Culprit>,
    pattern: &str,
) -> Snapshot {
    snap.drops
        .retain(|d| (derived.get(&d.key)).is_some_and(|c| matches(&c.line(), pattern)));
    let kept: std::collections::HashSet<_> = snap.drops.iter().map(|d| d.key.clone()).collect();
    snap.stacks.retain(|s| kept.contains(&s.key));
    snap.samples.retain(|s| kept.contains(&s.key));
    snap.total = snap.keyed_sum();
    snap.overflow = 0;
    snap
}

/// Sets each key's culprit (see [`Grouped`]): the rows that `by` merges into one carry the
/// culprit of them all, merged by [`merge`].
fn stamp(s: &mut Snapshot, derived: &HashMap<DropKey, Culprit>, by: &[Dim]) {
    let labelled = |k: &DropKey| {
        let c = derived.get(k);
        let mut k = k.clone();
        k.attr.culprit = Some(Arc::new(Grouped {
            label: label(c).into(),
            culprit: None,
        }));
        k
    };
    let mut members: HashMap<DropKey, Vec<(Option<u64>, &Culprit)>> = HashMap::new();
    for d in &s.drops {
        let row = members
            .entry(group::coarser(&labelled(&d.key), by))
            .or_default();
        if let Some(c) = derived.get(&d.key) {
            row.push((d.key.attr.netns, c));
        }
    }
    let merged: HashMap<DropKey, Arc<Grouped>> = (members.into_iter())
        .map(|(k, parts)| {
            let label = (k.attr.culprit.as_ref()).map_or_else(|| NONE.into(), |g| g.label.clone());
            let culprit = merge(&parts);
            (k, Arc::new(Grouped { label, culprit }))
        })
        .collect();
    let restamp = |k: &mut DropKey| {
        let l = labelled(k);
        let coarse = group::coarser(&l, by);
        *k = l;
        if let Some(m) = merged.get(&coarse) {
            k.attr.culprit = Some(m.clone());
        }
    };
    s.drops.iter_mut().for_each(|d| restamp(&mut d.key));
    s.stacks.iter_mut().for_each(|st| restamp(&mut st.key));
    s.samples.iter_mut().for_each(|k| restamp(&mut k.key));
}

/// The culprit of rows merged into one, whose culprits (with their rows' namespaces) are
/// `parts`, all of one label: the first's, each rule's count summed over the namespaces (rows of
/// one namespace name its rules with the same counts), its reasons those of them all.
pub fn merge(parts: &[(Option<u64>, &Culprit)]) -> Option<Culprit> {
    let (_, first) = parts.first()?;
    let mut out = (*first).clone();
    if parts.len() == 1 {
        return Some(out);
    }
    let mut because: Vec<&str> = Vec::new();
    for (_, c) in parts {
        if !because.contains(&c.because()) {
            because.push(c.because());
        }
    }
    let text = if because.len() == 1 {
        because[0].to_string()
    } else {
        let mut t = format!(
            "{} rows merged: {}",
            parts.len(),
            because[..because.len().min(MAX_BECAUSE)].join("; ")
        );
        if because.len() > MAX_BECAUSE {
            t.push_str(&format!(" (and {} more)", because.len() - MAX_BECAUSE));
        }
        t
    };
    match &mut out {
        Culprit::Exact { who, how } => {
            sum_counted(who, parts);
            *how = text;
        }
        Culprit::Candidates { who, why } => {
            sum_counted(who, parts);
            *why = text;
        }
        Culprit::Unknown { why } => *why = text,
    }
    Some(out)
}

/// Each rule's count in `who`: its counts in `parts` summed over their namespaces.
fn sum_counted(who: &mut [Who], parts: &[(Option<u64>, &Culprit)]) {
    for (i, w) in who.iter_mut().enumerate() {
        let Who::Rule { counted, .. } = w else {
            continue;
        };
        let mut per_ns: BTreeMap<Option<u64>, u64> = BTreeMap::new();
        for (ns, c) in parts {
            if let Some(Who::Rule {
                counted: Some(n), ..
            }) = c.who().get(i)
            {
                per_ns.insert(*ns, *n);
            }
        }
        if !per_ns.is_empty() {
            *counted = Some(per_ns.values().sum());
        }
    }
}

#[cfg(test)]
mod tests;
