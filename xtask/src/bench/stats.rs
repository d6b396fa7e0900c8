//! Medians, paired ratios and number formatting for the bench's table.
use super::{
    flood::{Flood, Kind},
    loss::{Config, Run},
};

/// The median (the mean of the middle two for an even count); NaN for none.
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// One configuration's figures over the rounds.
#[derive(Clone, Debug)]
pub struct Summary {
    pub kind: Kind,
    pub config: Config,
    pub median_rate: f64,
    pub min_rate: f64,
    pub max_rate: f64,
    /// Median over rounds of (this rate / nothing attached in the same round).
    pub ratio: f64,
    /// The same for the second half of each flood (once the probe's sampling has adapted).
    pub second_half_ratio: f64,
    /// Runs whose count was exact, of runs that counted.
    pub exact: Option<(usize, usize)>,
    /// Largest |counted - sent| over the runs that counted.
    pub worst_diff: i128,
    pub invariant_ok: bool,
    pub overflow: u64,
    pub ns_per_drop: Option<f64>,
    /// The same over the second half of each flood.
    pub second_half_ns: Option<f64>,
    /// Median probe runs per packet sent (bpf-stats runs).
    pub runs_per_datagram: Option<f64>,
    /// Median over rounds of (ns per drop - the empty program's in the same round and flood).
    pub above_floor: Option<f64>,
    /// The same over the second half of each flood.
    pub second_half_above_floor: Option<f64>,
    /// The program's size, where it was read.
    pub size: Option<super::loss::Size>,
}

/// Summarizes the runs of `config` on the `kind` flood.
pub fn summarize(kind: Kind, config: Config, runs: &[Run]) -> Summary {
    let mine: Vec<&Run> = runs
        .iter()
        .filter(|r| r.config == config && r.kind == kind)
        .collect();
    let rates: Vec<f64> = mine.iter().map(|r| r.flood.rate()).collect();
    let counted: Vec<&Run> = mine.iter().copied().filter(|r| r.count.is_some()).collect();
    let bpf: Vec<(f64, f64, f64)> = mine
        .iter()
        .filter_map(|r| {
            let b = r.bpf?;
            Some((
                b.ns,
                b.second_half_ns,
                b.runs as f64 / r.flood.sent.max(1) as f64,
            ))
        })
        .collect();
    let floor = floor_config(runs);
    let above = |ns: fn(&super::loss::BpfCost) -> f64| -> Option<f64> {
        (config != floor)
            .then(|| paired_diff(runs, kind, config, floor, ns))
            .flatten()
    };
    Summary {
        kind,
        config,
        median_rate: median(rates.clone()),
        min_rate: rates.iter().copied().fold(f64::INFINITY, f64::min),
        max_rate: rates.iter().copied().fold(0.0, f64::max),
        ratio: median(
            mine.iter()
                .filter_map(|r| paired_ratio(r, runs, |f| Some(f.rate())))
                .collect(),
        ),
        second_half_ratio: median(
            mine.iter()
                .filter_map(|r| paired_ratio(r, runs, Flood::second_half_rate))
                .collect(),
        ),
        exact: (!counted.is_empty()).then(|| {
            let ok = counted.iter().filter(|r| r.exact() == Some(true)).count();
            (ok, counted.len())
        }),
        worst_diff: counted
            .iter()
            .filter_map(|r| r.count_diff())
            .max_by_key(|d| d.abs())
            .unwrap_or(0),
        invariant_ok: counted.iter().all(|r| r.count.is_some_and(|c| c.invariant)),
        overflow: counted
            .iter()
            .filter_map(|r| r.count.map(|c| c.overflow))
            .max()
            .unwrap_or(0),
        ns_per_drop: (!bpf.is_empty()).then(|| median(bpf.iter().map(|b| b.0).collect())),
        second_half_ns: (!bpf.is_empty()).then(|| median(bpf.iter().map(|b| b.1).collect())),
        runs_per_datagram: (!bpf.is_empty()).then(|| median(bpf.iter().map(|b| b.2).collect())),
        above_floor: above(|b| b.ns),
        second_half_above_floor: above(|b| b.second_half_ns),
        size: mine.iter().find_map(|r| r.bpf?.size.flatten()),
    }
}

/// The floor the BPF costs are measured against: the bare floor where it ran, else the empty
/// program of dropscope's object.
pub fn floor_config(runs: &[Run]) -> Config {
    if runs.iter().any(|r| r.config == Config::StatsBare) {
        Config::StatsBare
    } else {
        Config::StatsFloor
    }
}

/// The median over rounds of `ns(a) - ns(b)` on the `kind` flood (rounds where both ran).
pub fn paired_diff(
    runs: &[Run],
    kind: Kind,
    a: Config,
    b: Config,
    ns: fn(&super::loss::BpfCost) -> f64,
) -> Option<f64> {
    let diffs: Vec<f64> = runs
        .iter()
        .filter(|r| r.config == a && r.kind == kind)
        .filter_map(|r| {
            let other = runs
                .iter()
                .find(|o| o.round == r.round && o.kind == kind && o.config == b)?;
            Some(ns(&r.bpf?) - ns(&other.bpf?))
        })
        .collect();
    (!diffs.is_empty()).then(|| median(diffs))
}

fn paired_ratio(run: &Run, runs: &[Run], rate: impl Fn(&Flood) -> Option<f64>) -> Option<f64> {
    let base = runs
        .iter()
        .find(|b| b.round == run.round && b.kind == run.kind && b.config == Config::Nothing)?;
    Some(rate(&run.flood)? / rate(&base.flood)?.max(1e-9))
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn groups_thousands() {
        assert_eq!(thousands(1_234_567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
    }
}
