//! `dropscope check`: counts live for `--duration`, then judges the drops against budgets
//! (exit status 1 when a clause is broken), for a CI job or a health check.
use std::{collections::BTreeSet, io::Write, time::Duration};

use serde::Serialize;

use super::{
    Outcome,
    diff::{
        broken_lines, check_budget_reasons,
        output::{Cases, Run, run_line, write_json, write_junit, write_verdicts},
        refuse_filtered_programs,
    },
    live,
};
use crate::{
    cli::{CheckArgs, JudgeFormat},
    model::{
        DropKey,
        budget::{self, Verdict},
        compare::{self, DiffKey, Side},
        group::Dim,
        programs::{self, is_program_reason},
    },
    output::{NumberColumn, write_key_table},
    probe::reasons::ReasonTable,
    vocab::budget::Clause,
};

/// How often `check` reads the kernel's counters while it counts (for a ratio budget).
const CHECK_KERNEL_READ: Duration = Duration::from_secs(5);

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
    refuse_filtered_programs(&args.budget, &filter)?;
    let packets = args.budget.iter().any(Clause::needs_packets);
    // A clause on an XDP or tc program's verdicts needs them counted, which they are with the
    // kernel's counters.
    let programs = (args.budget.iter()).any(|c| c.reason().is_some_and(is_program_reason));
    // The packets come with the kernel's counters, read once more right before the last
    // snapshot (the same span as its counts).
    // So is the culprit (grouped or filtered by), from the rulesets and programs read with
    // them.
    let culprit = args.live.select.derives_culprit();
    let counters = (packets || programs || culprit).then_some(CHECK_KERNEL_READ);
    let (_, snap) = live::count_live(&args.live, args.duration, "", counters, |_| Ok(())).await?;
    let seconds = snap.elapsed.as_secs_f64();
    if seconds <= 0.0 {
        anyhow::bail!("counted for no time: no rate can be computed");
    }
    let mut side = Side::of(&snap, seconds, compare::packets(&snap, &filter));
    side.sent = compare::sent(&snap, &filter);
    if !filter.is_set() && args.live.select.culprit.is_none() {
        side = side.with_programs(&programs::of_snapshot(&snap), &args.live.select.by);
    }
    budget::judgeable(&args.budget, &programs::counted(&snap)).map_err(usage)?;
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
    write_check(&result, args.format, crate::output::table_width(), &mut out)?;
    out.flush()?;
    let broken = broken_lines(&verdicts);
    if broken.is_empty() {
        Ok(())
    } else {
        Err(Outcome::Broken(broken).into())
    }
}

/// What `check` found.
#[derive(Debug, Serialize)]
pub struct CheckOutput<'a> {
    /// The run.
    pub run: Run<'a>,
    /// Its drops per key, the largest first: (key, count).
    #[serde(serialize_with = "counts")]
    pub keys: &'a [(DiffKey, u64)],
    /// The budget clauses judged.
    pub budgets: &'a [Verdict],
    /// Whether every clause holds.
    pub ok: bool,
}

fn counts<S: serde::Serializer>(keys: &&[(DiffKey, u64)], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Count<'a> {
        #[serde(flatten)]
        key: &'a DiffKey,
        count: u64,
    }
    s.collect_seq(keys.iter().map(|(key, count)| Count { key, count: *count }))
}

/// Writes what `check` found in `format`.
pub fn write_check(
    c: &CheckOutput<'_>,
    format: JudgeFormat,
    width: usize,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match format {
        JudgeFormat::Table => {
            let keys: Vec<DropKey> = c.keys.iter().map(|(k, _)| k.to_drop_key()).collect();
            let numbers = [
                NumberColumn {
                    title: "COUNT",
                    cells: c
                        .keys
                        .iter()
                        .map(|(_, n)| crate::format::count(*n))
                        .collect(),
                    min: 12,
                },
                NumberColumn {
                    title: "RATE/s",
                    cells: (c.keys.iter())
                        .map(|(_, n)| crate::format::rate(*n as f64 / c.run.seconds))
                        .collect(),
                    min: 8,
                },
            ];
            write_key_table(&keys.iter().collect::<Vec<_>>(), &numbers, width, out)?;
            if c.keys.is_empty() {
                writeln!(out, "(no drops)")?;
            }
            writeln!(out, "{}", run_line("counted", &c.run))?;
            write_verdicts(c.budgets, out)?;
        }
        JudgeFormat::Json => write_json(c, out)?,
        JudgeFormat::Junit => {
            let cases = Cases {
                budgets: c.budgets,
                regressions: &[],
                regressions_fail: false,
            };
            write_junit("dropscope check", c.run.seconds, &cases, out)?;
        }
    }
    Ok(())
}

/// The drop reasons of the kernel counted on (`--btf`'s, else the running kernel's), to refuse
/// a misspelt reason before counting; none where neither can be read (the guide's still count).
fn kernel_reasons(args: &CheckArgs) -> BTreeSet<String> {
    ReasonTable::from_btf_file(&args.live.btf)
        .or_else(|_| ReasonTable::from_running_kernel())
        .map(|t| t.iter().map(|(_, n)| n.to_string()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_junit_name_the_keys_and_verdicts() {
        let key = |reason: &str| DiffKey {
            reason: reason.into(),
            location: "__udp4_lib_rcv+0x1c".into(),
            netns: Some("web<1>".into()),
            device: None,
            protocol: None,
            port: None,
            culprit: None,
        };
        let keys = [
            (key("NO_SOCKET"), 300),
            (key("OTHERHOST\x1b[2J"), 3),
            (key("IP_NOPROTO"), 12_345),
        ];
        let side = Side {
            counts: keys.iter().cloned().collect(),
            total: 303,
            seconds: 3.0,
            packets: None,
            sent: None,
            programs: false,
        };
        let clauses =
            ["NO_SOCKET<1/s", "total<1000/s"].map(|c| crate::vocab::budget::parse(c).expect(c));
        let verdicts = budget::judge(&clauses, &side, None, "live").expect("judged");
        let result = CheckOutput {
            run: Run {
                input: "live",
                seconds: 3.0,
                total: 303,
                rate: 101.0,
                packets: None,
            },
            keys: &keys,
            budgets: &verdicts,
            ok: false,
        };
        let write = |format| {
            let mut out = Vec::new();
            write_check(&result, format, 100, &mut out).expect("write");
            String::from_utf8(out).expect("utf-8")
        };
        let table = write(JudgeFormat::Table);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].starts_with("REASON") && lines[0].ends_with("COUNT    RATE/s"),
            "{table}"
        );
        assert!(
            lines[1].starts_with("NO_SOCKET") && lines[1].ends_with("300       100"),
            "{table}"
        );
        // Counts with thousands separators, as the TUI and `report` show them.
        assert!(
            lines[3].starts_with("IP_NOPROTO") && lines[3].ends_with("12,345     4,115"),
            "{table}"
        );
        assert!(lines[2].contains("OTHERHOST\\u{1b}[2J"), "{table}");
        assert!(
            table.contains("counted: live, 3s, 303 drops (101/s)"),
            "{table}"
        );
        assert!(
            table.contains("BROKEN  NO_SOCKET<1/s broken: 100/s, limit 1/s"),
            "{table}"
        );
        assert!(table.contains("ok      total<1000/s holds"), "{table}");
        let json: serde_json::Value =
            serde_json::from_str(&write(JudgeFormat::Json)).expect("JSON");
        assert_eq!(json["keys"][0]["count"], 300);
        assert_eq!(json["keys"][0]["netns"], "web<1>");
        assert_eq!(json["budgets"][0]["ok"], false);
        let xml = write(JudgeFormat::Junit);
        assert!(
            xml.contains(r#"<testsuite name="dropscope check" tests="2" failures="1""#),
            "{xml}"
        );
        assert!(xml.contains("in netns web&lt;1&gt;"), "{xml}");
    }
}
