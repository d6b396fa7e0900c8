//! What `diff` and `check` print: a table fitted as the report's, one JSON object, or JUnit XML
//! for CI. Every name comes from a recording or the kernel, so each is escaped for where it
//! goes: for the terminal (`sanitize::terminal`), in JSON (`sanitize::json`), and in XML
//! (valid XML 1.0 characters only, then XML-escaped).
use crate::format::p_value;
use std::{io::Write, time::Duration};

use quick_xml::{
    Writer,
    events::{BytesDecl, BytesText, Event},
};
use serde::Serialize;

use crate::{
    cli::JudgeFormat,
    model::{
        DropKey,
        budget::Verdict,
        compare::{Change, Rates, Row},
    },
    output::{NumberColumn, write_key_table},
    sanitize,
};

/// One run as the output names it.
#[derive(Clone, Debug, Serialize)]
pub struct Run<'a> {
    /// Its input, as given (`live` when counted live).
    pub input: &'a str,
    /// Seconds its window covers.
    pub seconds: f64,
    /// Every drop in the window (filtered as asked).
    pub total: u64,
    /// Drops per second.
    pub rate: f64,
    /// Packets received over the window (null where the kernel's counters were not read).
    pub packets: Option<u64>,
}

/// What `diff` found.
#[derive(Debug, Serialize)]
pub struct DiffOutput<'a> {
    /// The baseline.
    pub base: Run<'a>,
    /// The run judged.
    pub new: Run<'a>,
    /// The significance level.
    pub alpha: f64,
    /// All drops compared.
    pub total: &'a Rates,
    /// Every key of either run, the largest change of rate first.
    pub keys: &'a [Row],
    /// The budget clauses judged on NEW.
    pub budgets: &'a [Verdict],
    /// Keys whose rate went up significantly.
    pub regressions: usize,
    /// Whether the command passes: no clause broken, and (with `--fail-on-regression`) no
    /// significant regression.
    pub ok: bool,
    /// Whether significant regressions fail the command.
    #[serde(skip)]
    pub fail_on_regression: bool,
}

/// A regression's sentence: the key, its rates, the ratio and the p-value.
pub fn regression_message(row: &Row, alpha: f64) -> String {
    let r = &row.rates;
    format!(
        "regression: {}: {}/s -> {}/s ({}, p = {} < {alpha})",
        row.key.describe(),
        crate::format::rate(r.base_rate),
        crate::format::rate(r.new_rate),
        ratio(r),
        p_value(r.p_value)
    )
}

/// A ratio of rates (see [`crate::format::ratio`]).
fn ratio(r: &Rates) -> String {
    crate::format::ratio(r.ratio, r.new_count)
}

/// Writes what `diff` found in `format`, the table fitted to `width` columns.
pub fn write_diff(
    d: &DiffOutput<'_>,
    format: JudgeFormat,
    width: usize,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match format {
        JudgeFormat::Table => diff_table(d, width, out)?,
        JudgeFormat::Json => write_json(d, out)?,
        JudgeFormat::Junit => {
            let regressions: Vec<(String, String)> = d
                .keys
                .iter()
                .filter(|r| r.rates.change == Some(Change::Regression))
                .map(|r| (r.key.describe(), regression_message(r, d.alpha)))
                .collect();
            let suite = format!("dropscope diff {} {}", d.base.input, d.new.input);
            let cases = Cases {
                budgets: d.budgets,
                regressions: &regressions,
                regressions_fail: d.fail_on_regression,
            };
            write_junit(&suite, d.new.seconds, &cases, out)?;
        }
    }
    Ok(())
}

pub(crate) fn write_json(v: &impl Serialize, out: &mut impl Write) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    // Names from a recording are written with risky characters escaped.
    writeln!(out, "{}", sanitize::json(&text))?;
    Ok(())
}

/// `base: FILE, 10s, 1,234 drops (123.4/s)`.
pub(crate) fn run_line(what: &str, r: &Run<'_>) -> String {
    let mut line = format!(
        "{what}: {}, {}, {} drops ({}/s)",
        sanitize::terminal(r.input),
        crate::format::duration(Duration::try_from_secs_f64(r.seconds).unwrap_or_default()),
        crate::format::count(r.total),
        crate::format::rate(r.rate)
    );
    if let Some(p) = r.packets {
        line.push_str(&format!(", {} packets received", crate::format::count(p)));
    }
    line
}

fn diff_table(d: &DiffOutput<'_>, width: usize, out: &mut impl Write) -> std::io::Result<()> {
    let keys: Vec<DropKey> = d.keys.iter().map(|r| r.key.to_drop_key()).collect();
    let column = |title, min, f: &dyn Fn(&Rates) -> String| NumberColumn {
        title,
        cells: d.keys.iter().map(|r| f(&r.rates)).collect(),
        min,
    };
    let numbers = [
        column("BASE/s", 8, &|r| crate::format::rate(r.base_rate)),
        column("NEW/s", 8, &|r| crate::format::rate(r.new_rate)),
        column("RATIO", 6, &ratio),
        column("P", 7, &|r| p_value(r.p_value)),
        column("CHANGE", 11, &|r| match r.change {
            Some(Change::Regression) => "regression".into(),
            Some(Change::Improvement) => "improvement".into(),
            None => String::new(),
        }),
    ];
    write_key_table(&keys.iter().collect::<Vec<_>>(), &numbers, width, out)?;
    if d.keys.is_empty() {
        writeln!(out, "(no drops in either run)")?;
    }
    writeln!(out, "{}", run_line("base", &d.base))?;
    writeln!(out, "{}", run_line("new", &d.new))?;
    let improvements = (d.keys.iter())
        .filter(|r| r.rates.change == Some(Change::Improvement))
        .count();
    writeln!(
        out,
        "total {} (p = {}); {} of {} keys went up and {} down significantly (p < {})",
        ratio(d.total),
        p_value(d.total.p_value),
        d.regressions,
        d.keys.len(),
        improvements,
        d.alpha
    )?;
    write_verdicts(d.budgets, out)
}

/// One line per budget clause: `ok` or `BROKEN`, and its sentence.
pub(crate) fn write_verdicts(verdicts: &[Verdict], out: &mut impl Write) -> std::io::Result<()> {
    if verdicts.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    for v in verdicts {
        let status = if v.ok { "ok" } else { "BROKEN" };
        writeln!(out, "{status:<6}  {}", sanitize::terminal(&v.message))?;
    }
    Ok(())
}

/// The test cases of a JUnit report.
pub(crate) struct Cases<'a> {
    /// One case per clause.
    pub budgets: &'a [Verdict],
    /// One case per significant regression: its name and its sentence.
    pub regressions: &'a [(String, String)],
    /// Whether a regression is a failure (else its sentence is the case's output).
    pub regressions_fail: bool,
}

/// Writes a JUnit XML report: one suite named `suite`, a case per clause (failing where
/// broken) and per regression. Text is made valid XML 1.0 first (`sanitize::svg`: no control
/// character), then escaped by the XML writer (`<`, `&`, `>` and quotes).
pub(crate) fn write_junit(
    suite: &str,
    seconds: f64,
    cases: &Cases<'_>,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let tests = cases.budgets.len() + cases.regressions.len();
    let failures = cases.budgets.iter().filter(|v| !v.ok).count()
        + if cases.regressions_fail {
            cases.regressions.len()
        } else {
            0
        };
    let (tests, failures, time) = (
        tests.to_string(),
        failures.to_string(),
        format!("{seconds:.3}"),
    );
    let suite = sanitize::svg(suite);
    let mut w = Writer::new_with_indent(&mut *out, b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    w.create_element("testsuites")
        .with_attribute(("name", &*suite))
        .with_attribute(("tests", tests.as_str()))
        .with_attribute(("failures", failures.as_str()))
        .with_attribute(("errors", "0"))
        .with_attribute(("time", time.as_str()))
        .write_inner_content(|w| {
            w.create_element("testsuite")
                .with_attribute(("name", &*suite))
                .with_attribute(("tests", tests.as_str()))
                .with_attribute(("failures", failures.as_str()))
                .with_attribute(("errors", "0"))
                .with_attribute(("skipped", "0"))
                .with_attribute(("time", time.as_str()))
                .write_inner_content(|w| {
                    for v in cases.budgets {
                        let case = w
                            .create_element("testcase")
                            .with_attribute(("classname", "dropscope.budget"))
                            .with_attribute(("name", &*sanitize::svg(&v.clause)));
                        let message = sanitize::svg(&v.message);
                        if v.ok {
                            case.write_inner_content(|w| {
                                w.create_element("system-out")
                                    .write_text_content(BytesText::new(&message))?;
                                Ok(())
                            })?;
                        } else {
                            case.write_inner_content(|w| {
                                w.create_element("failure")
                                    .with_attribute(("type", "budget"))
                                    .with_attribute(("message", &*message))
                                    .write_text_content(BytesText::new(&message))?;
                                Ok(())
                            })?;
                        }
                    }
                    for (name, message) in cases.regressions {
                        let message = sanitize::svg(message);
                        w.create_element("testcase")
                            .with_attribute(("classname", "dropscope.regression"))
                            .with_attribute(("name", &*sanitize::svg(name)))
                            .write_inner_content(|w| {
                                let (tag, inner) = if cases.regressions_fail {
                                    ("failure", true)
                                } else {
                                    ("system-out", false)
                                };
                                let mut e = w.create_element(tag);
                                if inner {
                                    e = e
                                        .with_attribute(("type", "regression"))
                                        .with_attribute(("message", &*message));
                                }
                                e.write_text_content(BytesText::new(&message))?;
                                Ok(())
                            })?;
                    }
                    Ok(())
                })?;
            Ok(())
        })?;
    writeln!(out)
}
