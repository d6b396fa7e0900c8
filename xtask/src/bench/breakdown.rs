//! `cargo xtask bench --breakdown`: where the per-drop cost goes. The bench build's program
//! takes steps of its per-drop path out by a read-only setting (the verifier removes the step's
//! code), one at a time; each step's cost is the median over rounds of the per-round difference
//! to the same program with nothing taken out, and its size the instructions it removes.
use std::fmt::Write as _;

use super::{
    flood::Kind,
    loss::{Base, Config, Run, Size},
    stats::{floor_config, paired_diff, summarize},
};

/// Steps taken out, per base configuration (names of `dropscope_common::skip`).
pub const STEPS: [(Base, &[&str]); 3] = [
    (
        Base::Counting,
        &[
            "non-drop",
            "key",
            "compare",
            "slot",
            "increments",
            "packet-sample",
            "sampling",
            "all",
        ],
    ),
    (Base::Default, &["attribution"]),
    (Base::Filtered, &["non-drop", "reason-lookup"]),
];

/// The (flood, configuration) pairs of a breakdown run.
pub fn plan() -> Vec<(Kind, Config)> {
    let mut single = vec![
        Config::StatsBare,
        Config::StatsClock,
        Config::StatsFloor,
        Config::StatsCounting,
        Config::StatsNoStacks,
        Config::StatsProtocol,
        Config::StatsFiltered,
        Config::StatsHeaders,
        Config::StatsStacks,
    ];
    for (base, steps) in STEPS {
        single.push(Config::Skip(base, None));
        single.extend(steps.iter().map(|s| Config::Skip(base, Some(*s))));
    }
    let interleaved = [
        Config::StatsBare,
        Config::StatsFloor,
        Config::StatsCounting,
        Config::StatsNoStacks,
    ];
    single
        .into_iter()
        .map(|c| (Kind::Single, c))
        .chain(interleaved.into_iter().map(|c| (Kind::Interleaved, c)))
        .collect()
}

/// The (flood, configuration) pairs of a run `--against` another binary: each configuration
/// of this build beside the same of the other, on both floods, with the floors.
pub fn against_plan() -> Vec<(Kind, Config)> {
    let pairs = [
        (Config::StatsCounting, Base::Counting),
        (Config::StatsNoStacks, Base::Default),
        (Config::StatsFiltered, Base::Filtered),
        (Config::StatsDefaults, Base::Defaults),
    ];
    let mut plan = Vec::new();
    for kind in [Kind::Single, Kind::Interleaved] {
        plan.push((kind, Config::StatsBare));
        plan.push((kind, Config::StatsFloor));
        for (ours, base) in pairs {
            // A filtered-out drop is the same on either flood.
            if base == Base::Filtered && kind == Kind::Interleaved {
                continue;
            }
            plan.push((kind, ours));
            plan.push((kind, Config::Against(base)));
        }
    }
    plan
}

/// Renders a run `--against` another binary: each configuration's ns per drop and size in
/// both builds, and the median of the per-round differences (this build minus the other).
pub fn render_against(plan: &[(Kind, Config)], runs: &[Run]) -> String {
    let mut out = String::new();
    let ns = |b: &super::loss::BpfCost| b.ns;
    let _ = writeln!(
        out,
        "\nBPF ns per drop (fdinfo run_time_ns / run_cnt, median over rounds); change = median \
         of per-round differences, this build minus the --against binary (negative: cheaper); \
         sizes: this / against"
    );
    let _ = writeln!(
        out,
        "{:<17} {:<40} {:>9} {:>9} {:>8} {:>14} {:>14}",
        "flood", "configuration", "this", "against", "change", "xlated", "x86"
    );
    for &(kind, config) in plan {
        let Config::Against(base) = config else {
            if matches!(config, Config::StatsBare | Config::StatsFloor) {
                let s = summarize(kind, config, runs);
                let _ = writeln!(
                    out,
                    "{:<17} {:<40} {:>9}",
                    kind.label(),
                    config.label(),
                    s.ns_per_drop
                        .map_or_else(|| "-".into(), |n| format!("{n:.1}")),
                );
            }
            continue;
        };
        let (a, b) = (
            summarize(kind, base.real(), runs),
            summarize(kind, config, runs),
        );
        let n = |s: &super::stats::Summary| {
            s.ns_per_drop
                .map_or_else(|| "-".into(), |n| format!("{n:.1}"))
        };
        let (xa, ja) = size_cells(a.size);
        let (xb, jb) = size_cells(b.size);
        let _ = writeln!(
            out,
            "{:<17} {:<40} {:>9} {:>9} {:>8} {:>14} {:>14}",
            kind.label(),
            base.label(),
            n(&a),
            n(&b),
            diff_cell(paired_diff(runs, kind, base.real(), config, ns)),
            format!("{xa} / {xb}"),
            format!("{ja} / {jb}"),
        );
    }
    out
}

fn size_cells(size: Option<Size>) -> (String, String) {
    match size {
        Some(s) => (
            s.xlated.to_string(),
            s.jited
                .map_or_else(|| format!("{} B", s.jited_bytes), |n| n.to_string()),
        ),
        None => ("-".into(), "-".into()),
    }
}

fn diff_cell(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:+.1}"))
}

/// Renders the breakdown: the floors, each configuration above the floor, then each step.
pub fn render(plan: &[(Kind, Config)], runs: &[Run]) -> String {
    let mut out = String::new();
    let floor = floor_config(runs);
    let ns = |b: &super::loss::BpfCost| b.ns;
    let _ = writeln!(
        out,
        "\nBPF ns per drop (fdinfo run_time_ns / run_cnt, median over rounds; above = median of \
         per-round differences to {} on the same flood; insns: translated / x86-64 JIT-ed)",
        floor.label()
    );
    let _ = writeln!(
        out,
        "{:<17} {:<46} {:>9} {:>8} {:>8} {:>8}",
        "flood", "configuration", "ns", "above", "xlated", "x86"
    );
    for &(kind, config) in plan {
        if matches!(config, Config::Skip(..)) {
            continue;
        }
        let s = summarize(kind, config, runs);
        let (xl, x86) = size_cells(s.size);
        let _ = writeln!(
            out,
            "{:<17} {:<46} {:>9} {:>8} {:>8} {:>8}",
            kind.label(),
            config.label(),
            s.ns_per_drop
                .map_or_else(|| "-".into(), |n| format!("{n:.1}")),
            diff_cell(s.above_floor),
            xl,
            x86
        );
    }
    let _ = writeln!(
        out,
        "\nPer step, single-key flood: the bench program (dropscope's, with a read-only setting \
         per step) with one step taken out; saved = median of per-round differences to the \
         bench program with nothing taken out (same flags); removed = instructions the step's \
         absence removes"
    );
    let _ = writeln!(
        out,
        "{:<14} {:<16} {:>9} {:>9} {:>15} {:>11}",
        "base", "taken out", "ns", "saved ns", "removed xlated", "removed x86"
    );
    for (base, steps) in STEPS {
        let all = Config::Skip(base, None);
        let whole = summarize(Kind::Single, all, runs);
        let vs_real = paired_diff(runs, Kind::Single, all, base.real(), ns);
        let (xl, x86) = size_cells(whole.size);
        let _ = writeln!(
            out,
            "{:<14} {:<16} {:>9} {:>9} {:>15} {:>11}   ({} / {} insns; {} ns against the real \
             program)",
            base.label(),
            "nothing",
            whole
                .ns_per_drop
                .map_or_else(|| "-".into(), |n| format!("{n:.1}")),
            "-",
            "-",
            "-",
            xl,
            x86,
            diff_cell(vs_real)
        );
        for step in steps {
            let config = Config::Skip(base, Some(step));
            let s = summarize(Kind::Single, config, runs);
            let saved = paired_diff(runs, Kind::Single, all, config, ns);
            let removed =
                |f: fn(Size) -> Option<usize>| match (whole.size.and_then(f), s.size.and_then(f)) {
                    (Some(a), Some(b)) => format!("{}", a as i64 - b as i64),
                    _ => "-".into(),
                };
            let _ = writeln!(
                out,
                "{:<14} {:<16} {:>9} {:>9} {:>15} {:>11}",
                base.label(),
                step,
                s.ns_per_drop
                    .map_or_else(|| "-".into(), |n| format!("{n:.1}")),
                diff_cell(saved),
                removed(|z| Some(z.xlated)),
                removed(|z| z.jited),
            );
        }
    }
    out
}
