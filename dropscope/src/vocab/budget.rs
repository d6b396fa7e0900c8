//! A drop budget's clauses as the command line parses them (`--budget`): `total<5/s`,
//! `NO_SOCKET<1/s`, `ratio<0.1%`, `new-reasons=0`. A rate is drops per second (`/s`, `/m` or
//! `/h` as written), a ratio a fraction (`%` as written), a reason named as everywhere else
//! (any case, with or without `SKB_DROP_REASON_`). Judging them against a run's drops is
//! `model::budget`'s.
use std::fmt;

use super::dims::reason_name;

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
    /// `<`, `<=` or `=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "=",
        }
    }

    /// Whether `value` is within `limit` by this operator.
    pub fn holds(self, value: f64, limit: f64) -> bool {
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

#[cfg(test)]
mod tests {
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
}
