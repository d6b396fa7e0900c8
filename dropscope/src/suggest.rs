//! Suggestions for a misspelt reason name: the known names closest to it (`did you mean ...?`).

/// The names among `candidates` closest to `name` (a typo, another case, a part of a name), best
/// first, at most three; none when nothing is close.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    // Normalized as the guide looks names up.
    let name = crate::model::group::reason_name(name)
        .escape_debug()
        .to_string();
    let mut scored: Vec<(f64, &str)> = candidates
        .into_iter()
        .filter(|c| *c != name)
        .filter_map(|c| {
            let score = strsim::jaro_winkler(&name, c);
            // A part of a name (`RCVBUFF`) points at the names holding it.
            let part = name.len() >= 4 && c.contains(name.as_str());
            (score >= 0.85 || part).then_some((if part { score.max(0.9) } else { score }, c))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

/// `; did you mean NO_SOCKET?` (or `... NO_SOCKET or SOCKET_RCVBUFF?`) for an unknown reason
/// name, from [`closest`]; empty when nothing is close.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(name, candidates).as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean {one}?"),
        [init @ .., last] => format!("; did you mean {} or {last}?", init.join(", ")),
    }
}
