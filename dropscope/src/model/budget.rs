//! Drop budgets: clauses such as `total<5/s`, `NO_SOCKET<1/s`, `ratio<0.1%` and
//! `new-reasons=0`, parsed from the command line and judged against a run's drops (and, for
//! `new-reasons`, a baseline's).
//!
//! A rate is drops per second over the run's window (`/s`, `/m` or `/h` as written); a ratio is
//! taken per direction, as everywhere: receive-side drops over the packets the kernel received
//! in the same window, transmit-side drops (qdiscs, `tx_*`) over the packets its devices sent,
//! in percent, and the clause judges the larger; a direction without packets has no ratio, and
//! where neither has one the clause neither holds nor breaks ([`Unanswerable::NoRatio`]). A reason is named as everywhere else (any case, with or without
//! `SKB_DROP_REASON_`).
use std::fmt;

use serde::Serialize;

use super::{
    compare::{DiffKey, Side},
    group::reason_name,
    programs,
};

/// What a clause limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// Every drop, per second.
    Total,
    /// Drops of one reason (its canonical name), per second.
    Reason(String),
    /// Drops per packet received.
    Ratio,
    /// Reasons in the run that its baseline does not have.
    NewReasons,
}

/// How the value compares with the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Below.
    Lt,
    /// At most.
    Le,
    /// Exactly (only `new-reasons=0`).
    Eq,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "=",
        }
    }

    fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Op::Lt => value < limit,
            Op::Le => value <= limit,
            Op::Eq => value == limit,
        }
    }
}

/// One budget clause.
#[derive(Clone, Debug, PartialEq)]
pub struct Clause {
    /// What it limits.
    pub subject: Subject,
    /// How.
    pub op: Op,
    /// The limit: drops per second, a fraction (0.001 for `0.1%`), or a number of reasons.
    pub limit: f64,
    /// The limit as written (`5/s`, `0.1%`, `0`), for messages.
    written: String,
}

/// A clause that does not parse, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing to parse.
    #[error("an empty budget clause (examples: {EXAMPLES})")]
    Empty,
    /// No `<`, `<=` or `=`.
    #[error("{0:?}: no limit; write SUBJECT<LIMIT (examples: {EXAMPLES})")]
    NoOperator(String),
    /// A lower bound.
    #[error("{0:?}: a budget is an upper limit; write it with < or <=")]
    LowerBound(String),
    /// Not `total`, `ratio`, `new-reasons` or a reason's name.
    #[error(
        "{0:?}: not total, ratio, new-reasons or a drop reason's name (`dropscope reasons` lists \
         them)"
    )]
    Subject(String),
    /// The limit is not a number with the unit its subject takes.
    #[error("{clause:?}: {why}")]
    Limit {
        /// The clause.
        clause: String,
        /// What is wrong with its limit.
        why: String,
    },
}

/// Clauses that show the grammar.
const EXAMPLES: &str = "total<5/s, NO_SOCKET<1/s, ratio<0.1%, new-reasons=0";

/// Parses one clause: `SUBJECT<LIMIT`, `SUBJECT<=LIMIT`, or `new-reasons=N`.
pub fn parse(text: &str) -> Result<Clause, ParseError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ParseError::Empty);
    }
    if text.contains('>') {
        return Err(ParseError::LowerBound(text.into()));
    }
    let (subject, op, limit) = if let Some((s, l)) = text.split_once("<=") {
        (s, Op::Le, l)
    } else if let Some((s, l)) = text.split_once('<') {
        (s, Op::Lt, l)
    } else if let Some((s, l)) = text.split_once('=') {
        (s, Op::Eq, l)
    } else {
        return Err(ParseError::NoOperator(text.into()));
    };
    let (subject, limit) = (subject.trim(), limit.trim());
    let bad = |why: String| ParseError::Limit {
        clause: text.into(),
        why,
    };
    let subject = match subject.to_ascii_lowercase().as_str() {
        "total" => Subject::Total,
        "ratio" => Subject::Ratio,
        "new-reasons" | "new_reasons" => Subject::NewReasons,
        _ if is_reason_name(subject) => Subject::Reason(reason_name(subject)),
        _ => return Err(ParseError::Subject(subject.into())),
    };
    if op == Op::Eq && subject != Subject::NewReasons {
        return Err(bad(
            "= is only for new-reasons=0; limit a rate or ratio with < or <=".into(),
        ));
    }
    let number = |s: &str| -> Result<f64, ParseError> {
        match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(bad(format!("{s:?} is not a number of 0 or more"))),
        }
    };
    let value = match &subject {
        Subject::Total | Subject::Reason(_) => {
            let Some((n, unit)) = limit.split_once('/') else {
                return Err(bad(format!(
                    "give a rate with its unit, e.g. {limit}/s (or /m, /h)"
                )));
            };
            let per_second = match unit.trim() {
                "s" | "sec" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3600.0,
                u => return Err(bad(format!("{u:?} is not a unit of time: /s, /m or /h"))),
            };
            number(n)? / per_second
        }
        Subject::Ratio => {
            let Some(n) = limit.strip_suffix('%') else {
                return Err(bad(format!("give a percentage, e.g. {limit}%")));
            };
            let v = number(n)?;
            if v > 100.0 {
                return Err(bad("a ratio is at most 100%".into()));
            }
            v / 100.0
        }
        Subject::NewReasons => {
            let v = number(limit)?;
            if v.fract() != 0.0 {
                return Err(bad(format!("{limit:?} is not a whole number of reasons")));
            }
            if op == Op::Eq && v != 0.0 {
                return Err(bad(
                    "= takes only 0 (new-reasons=0); write new-reasons<=N for at most N".into(),
                ));
            }
            v
        }
    };
    if op == Op::Lt && value == 0.0 {
        return Err(bad(
            "nothing is below 0; write <=0 (or new-reasons=0) for none".into(),
        ));
    }
    Ok(Clause {
        subject,
        op,
        limit: value,
        written: limit.to_string(),
    })
}

/// Letters, digits and `_` (and `UNKNOWN(n)`): what a reason's name is made of.
fn is_reason_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '(' | ')'))
        && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
}

impl fmt::Display for Clause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subject = match &self.subject {
            Subject::Total => "total",
            Subject::Reason(r) => r,
            Subject::Ratio => "ratio",
            Subject::NewReasons => "new-reasons",
        };
        write!(f, "{subject}{}{}", self.op.as_str(), self.written)
    }
}

impl Clause {
    /// Whether judging it needs a baseline (`new-reasons`).
    pub fn needs_base(&self) -> bool {
        self.subject == Subject::NewReasons
    }

    /// Whether judging it needs the packets received (`ratio`).
    pub fn needs_packets(&self) -> bool {
        self.subject == Subject::Ratio
    }

    /// The reason it names, if any.
    pub fn reason(&self) -> Option<&str> {
        match &self.subject {
            Subject::Reason(r) => Some(r),
            _ => None,
        }
    }

    /// The limit as written with its unit.
    pub fn limit_text(&self) -> &str {
        &self.written
    }
}

/// A clause the runs cannot answer (never passed silently).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unanswerable {
    /// `ratio` without packet counters.
    #[error(
        "{clause}: {input} has no packet counters (the kernel's Ip:InReceives), so no drop ratio \
         can be computed"
    )]
    NoPackets {
        /// The clause.
        clause: String,
        /// Which run.
        input: String,
    },
    /// `ratio` over a window in which no packet was received: there is no ratio, so the
    /// clause neither holds nor breaks.
    #[error(
        "{clause}: {input} received no packets in its window, so there is no drop ratio: the \
         clause neither holds nor breaks"
    )]
    NoRatio {
        /// The clause.
        clause: String,
        /// Which run.
        input: String,
    },
    /// `new-reasons` without a baseline.
    #[error("{0}: new reasons are reasons the baseline does not have, and there is no baseline")]
    NoBase(String),
    /// A clause about reasons on counts grouped without them.
    #[error(
        "{0}: the drops were grouped without their reason (--by without reason), so no reason \
         can be told"
    )]
    NoReasons(String),
}

/// A clause judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// The clause, as written.
    pub clause: String,
    /// Whether it holds.
    pub ok: bool,
    /// Its value in the run: drops per second, a fraction, or a number of reasons.
    pub value: f64,
    /// Its limit, in the same unit.
    pub limit: f64,
    /// The key with the most drops of what the clause counts (for `new-reasons`, the new
    /// reasons' largest keys, largest first).
    pub keys: Vec<DiffKey>,
    /// One sentence: the value against the limit, and what contributes most.
    pub message: String,
}

/// Judges `clauses` on `new`'s drops (`base`: the baseline, for `new-reasons`); `input` names
/// the run in errors.
pub fn judge(
    clauses: &[Clause],
    new: &Side,
    base: Option<&Side>,
    input: &str,
) -> Result<Vec<Verdict>, Unanswerable> {
    clauses
        .iter()
        .map(|c| judge_one(c, new, base, input))
        .collect()
}

/// The probe's drops of `side` on the receive side and on the transmit side (see
/// [`crate::ledger::layers::direction`]); those without a key (overflow) are on the receive
/// side, where most drops are.
fn by_direction(side: &Side) -> (u64, u64) {
    use super::kernel::Direction;
    let mut tx = 0u64;
    for (k, n) in &side.counts {
        if programs::is_program_reason(&k.reason) {
            continue;
        }
        if crate::ledger::layers::direction(&k.reason, &k.location) == Direction::Tx {
            tx = tx.saturating_add(*n);
        }
    }
    (side.total.saturating_sub(tx), tx)
}

fn judge_one(
    c: &Clause,
    new: &Side,
    base: Option<&Side>,
    input: &str,
) -> Result<Verdict, Unanswerable> {
    let by_reason = |s: &Side| s.counts.keys().all(|k| &*k.reason != "*");
    let largest = |f: &dyn Fn(&DiffKey) -> bool| {
        (new.counts.iter())
            .filter(|(k, _)| f(k))
            .max_by_key(|(k, n)| (**n, std::cmp::Reverse(*k)))
            .map(|(k, &n)| (k.clone(), n))
    };
    let rate = |r: f64| format!("{}/s", crate::format::rate(r));
    let (value, keys, shown, top) = match &c.subject {
        Subject::Total => {
            // The total is the probe's; a program's verdicts are not in it.
            let top = largest(&|k| !programs::is_program_reason(&k.reason));
            (
                new.rate(new.total),
                top.clone(),
                rate(new.rate(new.total)),
                top,
            )
        }
        Subject::Reason(r) => {
            if !by_reason(new) {
                return Err(Unanswerable::NoReasons(c.to_string()));
            }
            let sum: u64 = (new.counts.iter())
                .filter(|(k, _)| *k.reason == **r)
                .map(|(_, n)| n)
                .sum();
            let top = largest(&|k| *k.reason == **r);
            (new.rate(sum), top.clone(), rate(new.rate(sum)), top)
        }
        Subject::Ratio => {
            let received = new.packets.ok_or_else(|| Unanswerable::NoPackets {
                clause: c.to_string(),
                input: input.to_string(),
            })?;
            let (rx, tx) = by_direction(new);
            let ratio = |drops: u64, packets: u64| {
                (packets > 0).then(|| (drops as f64 / packets as f64, drops, packets))
            };
            let sides = [
                ("received", ratio(rx, received)),
                ("sent", ratio(tx, new.sent.unwrap_or(0))),
            ];
            let Some((v, _, _)) = (sides.iter())
                .filter_map(|(_, r)| *r)
                .max_by(|a, b| a.0.total_cmp(&b.0))
            else {
                return Err(Unanswerable::NoRatio {
                    clause: c.to_string(),
                    input: input.to_string(),
                });
            };
            let top = largest(&|k| !programs::is_program_reason(&k.reason));
            let shown = (sides.iter())
                .filter_map(|(side, r)| match r {
                    Some((v, d, p)) => Some(format!(
                        "{} ({} drops / {} packets {side})",
                        percent(*v),
                        crate::format::count(*d),
                        crate::format::count(*p)
                    )),
                    None if *side == "sent" && tx == 0 => None,
                    None => Some(format!("no ratio on the {side} side (no packets {side})")),
                })
                .collect::<Vec<_>>()
                .join(", ");
            (v, top.clone(), shown, top)
        }
        Subject::NewReasons => {
            let base = base.ok_or_else(|| Unanswerable::NoBase(c.to_string()))?;
            if !by_reason(new) || !by_reason(base) {
                return Err(Unanswerable::NoReasons(c.to_string()));
            }
            let old: std::collections::BTreeSet<&str> =
                base.counts.keys().map(|k| &*k.reason).collect();
            let mut fresh: Vec<(DiffKey, u64)> = Vec::new();
            for (k, &n) in &new.counts {
                // A verdict is new only against a baseline that counted verdicts.
                let unknown = !base.programs && programs::is_program_reason(&k.reason);
                if old.contains(&*k.reason) || unknown {
                    continue;
                }
                match fresh.iter_mut().find(|(f, _)| f.reason == k.reason) {
                    Some(f) if n > f.1 => *f = (k.clone(), n),
                    Some(_) => {}
                    None => fresh.push((k.clone(), n)),
                }
            }
            fresh.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let v = fresh.len() as f64;
            let names: Vec<&str> = fresh.iter().map(|(k, _)| &*k.reason).collect();
            let shown = if names.is_empty() {
                "no new reason".to_string()
            } else {
                format!("{} new ({})", names.len(), names.join(", "))
            };
            let verdict = |ok: bool| Verdict {
                clause: c.to_string(),
                ok,
                value: v,
                limit: c.limit,
                message: match (ok, fresh.first()) {
                    (false, Some((k, n))) => format!(
                        "{c} broken: {shown}; the largest: {} ({}/s)",
                        k.describe(),
                        crate::format::rate(new.rate(*n))
                    ),
                    _ => format!("{c} holds: {shown}"),
                },
                keys: fresh.iter().map(|(k, _)| k.clone()).collect(),
            };
            return Ok(verdict(c.op.holds(v, c.limit)));
        }
    };
    let ok = c.op.holds(value, c.limit);
    let message = match (&top, ok) {
        (Some((k, n)), false) => format!(
            "{c} broken: {shown}, limit {}; most from {} ({}/s)",
            c.written,
            k.describe(),
            crate::format::rate(new.rate(*n))
        ),
        (None, false) => format!("{c} broken: {shown}, limit {}", c.written),
        (_, true) => format!("{c} holds: {shown}, limit {}", c.written),
    };
    Ok(Verdict {
        clause: c.to_string(),
        ok,
        value,
        limit: c.limit,
        keys: keys.map(|(k, _)| k).into_iter().collect(),
        message,
    })
}

/// A fraction as a percentage: `0.12%`, `0.0004%`, `2.5%`.
pub fn percent(v: f64) -> String {
    if !v.is_finite() {
        return "∞%".into();
    }
    let p = v * 100.0;
    if p == 0.0 || p >= 10.0 {
        format!("{p:.1}%")
    } else {
        // Two significant digits.
        let digits = (1 - p.log10().floor() as i32).max(0) as usize;
        format!("{p:.digits$}%")
    }
}

/// Refuses the first clause of `clauses` on a program's verdicts where they were not
/// `counted` (see [`programs::counted`]): the clause would hold on nothing.
pub fn judgeable(clauses: &[Clause], counted: &Result<(), String>) -> Result<(), String> {
    let Some(c) = (clauses.iter()).find(|c| c.reason().is_some_and(programs::is_program_reason))
    else {
        return Ok(());
    };
    (counted.as_ref().map(|_| ())).map_err(|why| format!("--budget {c} cannot be judged: {why}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn clauses_parse_with_their_units() {
        let c = parse("total<5/s").expect("total");
        assert_eq!(
            (c.subject.clone(), c.op, c.limit),
            (Subject::Total, Op::Lt, 5.0)
        );
        assert_eq!(c.to_string(), "total<5/s");
        let c = parse(" skb_drop_reason_no_socket <= 120/m ").expect("reason");
        assert_eq!(c.subject, Subject::Reason("NO_SOCKET".into()));
        assert_eq!((c.op, c.limit), (Op::Le, 2.0));
        assert_eq!(c.to_string(), "NO_SOCKET<=120/m");
        assert_eq!(parse("NO_SOCKET<36/h").expect("per hour").limit, 0.01);
        let c = parse("ratio<0.1%").expect("ratio");
        assert_eq!((c.subject.clone(), c.limit), (Subject::Ratio, 0.001));
        let c = parse("new-reasons=0").expect("new reasons");
        assert_eq!(
            (c.subject.clone(), c.op, c.limit),
            (Subject::NewReasons, Op::Eq, 0.0)
        );
        assert_eq!(parse("New-Reasons<=2").expect("at most 2").limit, 2.0);
        assert_eq!(parse("TOTAL<=0/s").expect("none").op, Op::Le);
        assert!(parse("UNKNOWN(77)<1/s").is_ok());
    }

    #[test]
    fn bad_clauses_say_what_is_wrong() {
        let err = |s: &str| parse(s).expect_err(s).to_string();
        assert!(err("").contains("empty"));
        assert!(err("total").contains("no limit"), "{}", err("total"));
        assert!(err("total>5/s").contains("upper limit"));
        assert!(err("total<5").contains("5/s"), "{}", err("total<5"));
        assert!(err("total<5/d").contains("not a unit"));
        assert!(err("total<-1/s").contains("not a number"));
        assert!(err("total<NaN/s").contains("not a number"));
        assert!(err("total<inf/s").contains("not a number"));
        assert!(err("total<0/s").contains("<=0"));
        assert!(err("ratio<0.1").contains("0.1%"), "{}", err("ratio<0.1"));
        assert!(err("ratio<101%").contains("at most 100%"));
        assert!(err("total=5/s").contains("only for new-reasons"));
        assert!(err("new-reasons=2").contains("new-reasons<=N"));
        assert!(err("new-reasons<1.5").contains("whole number"));
        assert!(err("no such<1/s").contains("not total, ratio"));
        assert!(err("<1/s").contains("not total, ratio"));
        assert!(err("9LIVES<1/s").contains("not total, ratio"));
    }

    fn key(reason: &str, netns: &str) -> DiffKey {
        DiffKey {
            reason: Arc::from(reason),
            location: Arc::from("f+0x1"),
            netns: Some(Arc::from(netns)),
            device: None,
            protocol: None,
            port: None,
            culprit: None,
        }
    }

    fn side(counts: &[(&str, &str, u64)], seconds: f64, packets: Option<u64>) -> Side {
        let counts: std::collections::BTreeMap<DiffKey, u64> =
            counts.iter().map(|&(r, n, c)| (key(r, n), c)).collect();
        Side {
            total: counts.values().sum(),
            counts,
            seconds,
            packets,
            sent: None,
            programs: false,
        }
    }

    #[test]
    fn a_ratio_divides_transmit_side_drops_by_the_packets_sent() {
        // 406 drops of a shaper on a device that received 1 packet and sent 50,000: 0.8%,
        // never 40,600%.
        let mut s = side(&[("QDISC_DROP", "web", 406)], 10.0, Some(1));
        s.sent = Some(50_000);
        let ratio = [parse("ratio<1%").expect("ratio")];
        let v = &judge(&ratio, &s, None, "NEW").expect("judged")[0];
        assert!(v.ok, "{}", v.message);
        assert!((v.value - 406.0 / 50_000.0).abs() < 1e-12, "{}", v.value);
        assert!(
            v.message.contains("406 drops / 50,000 packets sent"),
            "{}",
            v.message
        );
        // Receive-side drops still over what was received: the larger of the two is judged.
        let mut s = side(
            &[("QDISC_DROP", "web", 406), ("NO_SOCKET", "web", 50)],
            10.0,
            Some(1_000),
        );
        s.sent = Some(50_000);
        let v = &judge(&ratio, &s, None, "NEW").expect("judged")[0];
        assert!(!v.ok, "5% received breaks 1%: {}", v.message);
        assert!((v.value - 0.05).abs() < 1e-12, "{}", v.value);
    }

    #[test]
    fn verdicts_name_the_value_the_limit_and_the_key() {
        let new = side(
            &[
                ("NO_SOCKET", "web", 70),
                ("NO_SOCKET", "db", 20),
                ("OTHERHOST", "web", 10),
            ],
            10.0,
            Some(50_000),
        );
        let base = side(&[("NO_SOCKET", "web", 5)], 10.0, None);
        let clauses: Vec<Clause> = ["total<5/s", "no_socket<1/s", "OTHERHOST<2/s", "ratio<0.1%"]
            .iter()
            .chain(&["new-reasons=0", "IP_NOPROTO<=0/s"])
            .map(|s| parse(s).expect(s))
            .collect();
        let v = judge(&clauses, &new, Some(&base), "NEW").expect("judged");
        assert!(!v[0].ok && v[0].value == 10.0, "{:?}", v[0]);
        assert!(
            v[0].message.contains("10.0/s") && v[0].message.contains("limit 5/s"),
            "{}",
            v[0].message
        );
        assert!(!v[1].ok && v[1].value == 9.0);
        assert!(
            v[1].message
                .contains("NO_SOCKET at f+0x1 in netns web (7.0/s)"),
            "{}",
            v[1].message
        );
        assert!(v[2].ok && v[2].value == 1.0, "{:?}", v[2]);
        assert!(!v[3].ok && v[3].value == 0.002, "{:?}", v[3]);
        assert!(v[3].message.contains("0.20%"), "{}", v[3].message);
        assert!(!v[4].ok && v[4].value == 1.0);
        assert_eq!(v[4].keys, [key("OTHERHOST", "web")]);
        assert!(v[4].message.contains("OTHERHOST"), "{}", v[4].message);
        assert!(v[5].ok && v[5].value == 0.0, "a reason absent is none");
    }

    #[test]
    fn what_the_runs_cannot_answer_is_an_error_never_a_pass() {
        let new = side(&[("NO_SOCKET", "web", 1)], 10.0, None);
        let ratio = [parse("ratio<50%").expect("ratio")];
        assert!(matches!(
            judge(&ratio, &new, None, "NEW"),
            Err(Unanswerable::NoPackets { .. })
        ));
        let fresh = [parse("new-reasons=0").expect("new-reasons")];
        assert!(matches!(
            judge(&fresh, &new, None, "NEW"),
            Err(Unanswerable::NoBase(_))
        ));
        let merged = side(&[("*", "web", 1)], 10.0, None);
        let reason = [parse("NO_SOCKET<1/s").expect("reason")];
        assert!(matches!(
            judge(&reason, &merged, None, "NEW"),
            Err(Unanswerable::NoReasons(_))
        ));
        // No packets: no ratio, with drops or without; the clause neither holds nor breaks.
        for drops in [&[][..], &[("NO_SOCKET", "web", 1)]] {
            let none = side(drops, 10.0, Some(0));
            let e = judge(&ratio, &none, None, "NEW").expect_err("no ratio");
            assert!(matches!(e, Unanswerable::NoRatio { .. }), "{e:?}");
            assert!(e.to_string().contains("no drop ratio"), "{e}");
        }
    }

    #[test]
    fn percentages_keep_two_significant_digits() {
        assert_eq!(percent(0.002), "0.20%");
        assert_eq!(percent(0.000_012_34), "0.0012%");
        assert_eq!(percent(0.025), "2.5%");
        assert_eq!(percent(0.5), "50.0%");
        assert_eq!(percent(0.0), "0.0%");
    }

    #[test]
    fn a_clause_on_verdicts_is_refused_where_an_attached_program_was_not_counted() {
        use crate::model::{
            KernelReading, Snapshot,
            programs::{UNCOUNTED, counted},
        };
        let clauses = ["NO_SOCKET<1/s", "xdp_drop<5/s"].map(|c| parse(c).expect(c));
        let judged = |snap: &Snapshot| judgeable(&clauses, &counted(snap));
        // No reading at all: nothing says the verdicts were counted.
        let mut snap = Snapshot::default();
        let e = judged(&snap).expect_err("no reading");
        assert!(
            e.starts_with("--budget XDP_DROP<5/s cannot be judged: no reading"),
            "{e}"
        );
        // A reading with every program counted: judged.
        let mut r = KernelReading::default();
        (r.netns.entry(7).or_default()).insert(Arc::from("Xdp:vb:xdpdrv:ds_drop#42:drop"), 500);
        snap.kernel = Some(Arc::new(r.clone()));
        assert_eq!(judged(&snap), Ok(()));
        // The collector's notes when the kernel refuses.
        r.errors = vec![
            format!("program 42 \"g\" (XDP xdpdrv on vb, netns 7): {UNCOUNTED}: EPERM"),
            format!("program 43 \"s\" (tc ingress on vb, netns 7): {UNCOUNTED}: EPERM"),
        ];
        snap.kernel = Some(Arc::new(r));
        let e = judged(&snap).expect_err("refused");
        assert!(
            e.starts_with("--budget XDP_DROP<5/s cannot be judged: program 42"),
            "{e}"
        );
        assert!(e.ends_with("(and 1 more)"), "{e}");
        // A budget naming no verdict is judged as ever.
        assert_eq!(judgeable(&clauses[..1], &counted(&snap)), Ok(()));
    }
}
