//! `dropscope diff BASE NEW`: two runs' drops compared key by key (rates, ratio, a Poisson rate
//! test of each change), and NEW judged against drop budgets.
mod input;
pub mod output;

#[cfg(test)]
mod tests;

use std::{collections::BTreeSet, io::Write as _};

use self::{
    input::Input,
    output::{DiffOutput, Run},
};
use super::Outcome;
use crate::{
    cli::{DiffArgs, check_reason},
    model::{
        budget::{self, Verdict},
        compare::{self, Comparison, Side},
        group::{Dim, Filter},
        programs,
    },
    record,
    vocab::budget::Clause,
};

/// Runs `diff`.
pub fn diff_cmd(args: DiffArgs) -> anyhow::Result<()> {
    let (mut base, mut new) = match (&args.history, &args.base, &args.new) {
        (Some(dir), _, _) => input::history(dir, &args)?,
        (None, Some(b), Some(n)) if record::is_stdio(b) && record::is_stdio(n) => {
            return Err(Outcome::Usage(
                "BASE and NEW cannot both be read from standard input (`-`): give one as a file"
                    .into(),
            )
            .into());
        }
        (None, Some(b), Some(n)) => (input::load(b)?, input::load(n)?),
        _ => return Err(Outcome::Usage("BASE and NEW, or --history DIR".into()).into()),
    };
    if args.select.derives_culprit()
        && let Some(i) = [&base, &new].into_iter().find(|i| i.json)
    {
        return Err(Outcome::Usage(format!(
            "{}: a JSON report carries no rulesets, programs or sockets to derive culprits \
             from (--by culprit, --culprit): diff the recordings it was made from",
            crate::sanitize::terminal(&i.name)
        ))
        .into());
    }
    let (filter, by) = args.select.recorded_all(&[&base.snapshot, &new.snapshot])?;
    check_budget_reasons(&args.budget, &reasons(&[&base, &new]))?;
    refuse_filtered_programs(&args.budget, &filter)?;
    budget::judgeable(&args.budget, &new.programs_counted)
        .map_err(|e| Outcome::Usage(format!("{}: {e}", new.name)))?;
    let culprit = args.select.culprit.as_deref();
    let sides = (
        side(&base, &filter, &by, culprit),
        side(&new, &filter, &by, culprit),
    );
    // Only the sides are compared from here on: the inputs' keys are not held beside them.
    for i in [&mut base, &mut new] {
        i.snapshot = Default::default();
        i.programs = Vec::new();
    }
    // One side counted the programs' verdicts, the other did not: they are not compared.
    let uncounted = [&base, &new]
        .into_iter()
        .find_map(|i| Some((&i.name, i.programs_counted.as_ref().err()?)));
    if !filter.is_set()
        && sides.0.programs != sides.1.programs
        && let Some((name, why)) = uncounted
    {
        eprintln!(
            "dropscope: warning: the programs' verdicts are not compared: {}: {}",
            crate::sanitize::terminal(name),
            crate::sanitize::terminal(why)
        );
    }
    let judged = judge(&args, sides, &new.name)?;
    let mut out = std::io::stdout().lock();
    output::write_diff(
        &judged.output(&base, &new, &args),
        args.format,
        crate::output::table_width(),
        &mut out,
    )?;
    out.flush()?;
    let mut broken = broken_lines(&judged.verdicts);
    if args.fail_on_regression {
        broken.extend(
            (judged.comparison.regressions()).map(|r| output::regression_message(r, args.alpha)),
        );
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(Outcome::Broken(broken).into())
    }
}

/// The comparison of two runs and the verdicts on NEW.
pub struct Judged {
    /// Key by key.
    pub comparison: Comparison,
    /// One per budget clause.
    pub verdicts: Vec<Verdict>,
    /// The two sides compared.
    pub sides: (Side, Side),
}

impl Judged {
    fn output<'a>(&'a self, base: &'a Input, new: &'a Input, args: &DiffArgs) -> DiffOutput<'a> {
        let run = |i: &'a Input, s: &Side| Run {
            input: &i.name,
            seconds: s.seconds,
            total: s.total,
            rate: s.rate(s.total),
            packets: s.packets,
        };
        let regressions = self.comparison.regressions().count();
        DiffOutput {
            base: run(base, &self.sides.0),
            new: run(new, &self.sides.1),
            alpha: args.alpha,
            total: &self.comparison.total,
            keys: &self.comparison.rows,
            budgets: &self.verdicts,
            regressions,
            ok: self.verdicts.iter().all(|v| v.ok) && !(args.fail_on_regression && regressions > 0),
            fail_on_regression: args.fail_on_regression,
        }
    }
}

/// Compares the sides (BASE, NEW) and judges the budgets on NEW (`new`: its name); a clause
/// the inputs cannot answer is a usage error.
fn judge(args: &DiffArgs, sides: (Side, Side), new: &str) -> anyhow::Result<Judged> {
    let comparison = compare::compare(&sides.0, &sides.1, args.alpha);
    let verdicts = budget::judge(&args.budget, &sides.1, Some(&sides.0), new)
        .map_err(|e| Outcome::Usage(e.to_string()))?;
    Ok(Judged {
        comparison,
        verdicts,
        sides,
    })
}

/// An input's drops, filtered and grouped, as one side of the comparison; unfiltered, with
/// its programs' drop verdicts as keys of their own (a filter on drops knows nothing of them,
/// as in `report`).
fn side(i: &Input, filter: &Filter, by: &[Dim], culprit: Option<&str>) -> Side {
    let mut snap = crate::culprit::group::apply(&i.snapshot, filter, by, culprit);
    // Rows are matched across the runs by their culprit's stable label (see
    // [`crate::culprit::group::stable_label`]).
    if by.contains(&Dim::Culprit) {
        snap = crate::culprit::group::stable(snap);
    }
    let mut side = Side::of(&snap, i.seconds, compare::packets(&i.snapshot, filter));
    side.sent = compare::sent(&i.snapshot, filter);
    if filter.is_set() || culprit.is_some() || i.programs_counted.is_err() {
        side
    } else {
        side.with_programs(&i.programs, by)
    }
}

/// The reason names the inputs have.
fn reasons(inputs: &[&Input]) -> BTreeSet<String> {
    (inputs.iter())
        .flat_map(|i| i.snapshot.drops.iter().chain(&i.programs))
        .map(|d| d.key.reason.name.to_string())
        .collect()
}

/// Refuses a clause on a program's verdicts (`XDP_DROP<1/s`) with drops filtered: the
/// programs' counts cannot be filtered, and the clause would hold on nothing.
pub(crate) fn refuse_filtered_programs(clauses: &[Clause], filter: &Filter) -> anyhow::Result<()> {
    let program = clauses
        .iter()
        .find(|c| c.reason().is_some_and(programs::is_program_reason));
    match program {
        Some(c) if filter.is_set() => Err(Outcome::Usage(format!(
            "--budget {c}: a program's verdicts are counted per program, and a filter on drops \
             cannot apply to them; judge it without the filter"
        ))
        .into()),
        _ => Ok(()),
    }
}

/// Refuses a clause naming a reason that neither `seen` (the names at hand) nor the reason
/// guide has (a typo would hold silently): a usage error.
pub(crate) fn check_budget_reasons(
    clauses: &[Clause],
    seen: &BTreeSet<String>,
) -> anyhow::Result<()> {
    for reason in clauses.iter().filter_map(Clause::reason) {
        if programs::is_program_reason(reason) {
            continue;
        }
        check_reason(reason, seen).map_err(|e| Outcome::Usage(format!("--budget: {e}")))?;
    }
    Ok(())
}

/// The sentences of the broken clauses.
pub(crate) fn broken_lines(verdicts: &[Verdict]) -> Vec<String> {
    (verdicts.iter())
        .filter(|v| !v.ok)
        .map(|v| v.message.clone())
        .collect()
}
