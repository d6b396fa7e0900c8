//! `dropscope check`: counts live for `--duration`, then judges the drops against budgets
//! (exit status 1 when a clause is broken), for a CI job or a health check.
use std::{collections::BTreeSet, io::Write as _, sync::Arc};

use super::{
    Outcome,
    diff::{
        broken_lines, check_budget_reasons,
        output::{self, CheckOutput, Run},
    },
    live,
};
use crate::{
    cli::CheckArgs,
    model::{
        budget::{self, Clause},
        compare::{self, DiffKey, Side},
        group::Dim,
    },
    probe::reasons::ReasonTable,
};

/// Runs `check`.
pub async fn check_cmd(args: CheckArgs) -> anyhow::Result<()> {
    let usage = |m: String| anyhow::Error::new(Outcome::Usage(m));
    // What the run cannot answer is refused before counting.
    if let Some(c) = args.budget.iter().find(|c| c.needs_base()) {
        return Err(usage(format!(
            "--budget {c}: new reasons are reasons a baseline does not have, and `check` has \
             none; compare two runs with `dropscope diff BASE NEW --budget {c}`"
        )));
    }
    if let Some(c) = args.budget.iter().find(|c| c.reason().is_some())
        && !args.live.select.by.contains(&Dim::Reason)
    {
        return Err(usage(format!(
            "--budget {c} needs the drops counted by reason: add reason to --by"
        )));
    }
    check_budget_reasons(&args.budget, &kernel_reasons(&args))?;
    let filter = args.live.select.live_filter()?;
    let packets = args.budget.iter().any(Clause::needs_packets);
    let (_, mut snap, kernel) =
        live::count_live(&args.live, args.duration, "", packets, |_, _| Ok(())).await?;
    if let Some(k) = &kernel {
        snap.kernel = Some(Arc::new(k.reading()));
    }
    let seconds = snap.elapsed.as_secs_f64();
    if seconds <= 0.0 {
        anyhow::bail!("counted for no time: no rate can be computed");
    }
    let side = Side::of(&snap, seconds, compare::packets(&snap, &filter));
    let verdicts = budget::judge(&args.budget, &side, None, "the live count")
        .map_err(|e| usage(e.to_string()))?;
    let mut keys: Vec<(DiffKey, u64)> = side.counts.iter().map(|(k, &n)| (k.clone(), n)).collect();
    keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let result = CheckOutput {
        run: Run {
            input: "live",
            seconds,
            total: side.total,
            rate: side.rate(side.total),
            packets: side.packets,
        },
        keys: &keys,
        budgets: &verdicts,
        ok: verdicts.iter().all(|v| v.ok),
    };
    let mut out = std::io::stdout().lock();
    output::write_check(
        &result,
        args.format,
        super::report::output::table_width(),
        &mut out,
    )?;
    out.flush()?;
    let broken = broken_lines(&verdicts);
    if broken.is_empty() {
        Ok(())
    } else {
        Err(Outcome::Broken(broken).into())
    }
}

/// The drop reasons of the kernel counted on (`--btf`'s, else the running kernel's), to refuse
/// a misspelt reason before counting; none where neither can be read (the guide's still count).
fn kernel_reasons(args: &CheckArgs) -> BTreeSet<String> {
    ReasonTable::from_btf_file(&args.live.btf)
        .or_else(|_| ReasonTable::from_running_kernel())
        .map(|t| t.iter().map(|(_, n)| n.to_string()).collect())
        .unwrap_or_default()
}
