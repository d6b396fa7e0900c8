//! The headless report: a snapshot (or a window of one) printed as a table or as JSON.
use std::io::Write;

use serde::Serialize;
use unicode_width::UnicodeWidthStr;

use crate::{model::Snapshot, sanitize};

/// One row of the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonDrop<'a> {
    /// Reason name, e.g. `NO_SOCKET`.
    pub reason: &'a str,
    /// The kernel's enum value.
    pub reason_code: u32,
    /// Symbolized kernel location.
    pub location: &'a str,
    /// Exact count.
    pub count: u64,
}

/// The JSON report: `total`, `overflow` and `drops`, plus the window length.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// Every drop counted.
    pub total: u64,
    /// Drops that did not fit in the keyed map (counted, not keyed).
    pub overflow: u64,
    /// Probe runs the kernel skipped (nested on a CPU): drops that could not be counted.
    pub missed: u64,
    /// Exact counts per (reason, location), largest first.
    pub drops: Vec<JsonDrop<'a>>,
    /// Seconds covered.
    pub seconds: f64,
}

/// Rows sorted by count (largest first), then reason and location: a stable order.
fn sorted(s: &Snapshot) -> Vec<&crate::model::DropCount> {
    let mut rows: Vec<_> = s.drops.iter().filter(|d| d.count > 0).collect();
    rows.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// Builds the JSON report of a snapshot covering `seconds`.
pub fn json(s: &Snapshot, seconds: f64) -> JsonReport<'_> {
    JsonReport {
        total: s.total,
        overflow: s.overflow,
        missed: s.health.recursion_misses,
        drops: sorted(s)
            .into_iter()
            .map(|d| JsonDrop {
                reason: &d.key.reason.name,
                reason_code: d.key.reason.code,
                location: &d.key.location,
                count: d.count,
            })
            .collect(),
        seconds,
    }
}

/// Longest reason name shown in full in the table (longer ones are cut with `…`).
pub const MAX_REASON_CHARS: usize = 48;
/// Longest location shown in full in the table.
pub const MAX_LOCATION_CHARS: usize = 96;

/// Appends `s` and spaces up to `width` display columns.
fn pad(out: &mut String, s: &str, width: usize) {
    out.push_str(s);
    let w = UnicodeWidthStr::width(s);
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(w)));
}

/// Writes the report as aligned columns.
///
/// Names are escaped for the terminal (no control or bidi character reaches it) and cut to
/// [`MAX_REASON_CHARS`] / [`MAX_LOCATION_CHARS`] with `…`, so no recording can break the table.
pub fn write_table(s: &Snapshot, seconds: f64, mut out: impl Write) -> std::io::Result<()> {
    let rows = sorted(s);
    let cells: Vec<(String, String)> = rows
        .iter()
        .map(|d| {
            (
                sanitize::terminal_cell(&d.key.reason.name, MAX_REASON_CHARS),
                sanitize::terminal_cell(&d.key.location, MAX_LOCATION_CHARS),
            )
        })
        .collect();
    let width = |f: fn(&(String, String)) -> &String, min: usize| {
        cells
            .iter()
            .map(|c| UnicodeWidthStr::width(f(c).as_str()))
            .max()
            .unwrap_or(0)
            .max(min)
    };
    let rw = width(|c| &c.0, 6);
    let lw = width(|c| &c.1, 8);
    let mut line = String::new();
    pad(&mut line, "REASON", rw);
    line.push_str("  ");
    pad(&mut line, "LOCATION", lw);
    writeln!(out, "{line}  {:>12}  {:>6}", "COUNT", "SHARE")?;
    for (d, (reason, location)) in rows.iter().zip(&cells) {
        let share = if s.total > 0 {
            100.0 * d.count as f64 / s.total as f64
        } else {
            0.0
        };
        line.clear();
        pad(&mut line, reason, rw);
        line.push_str("  ");
        pad(&mut line, location, lw);
        writeln!(out, "{line}  {:>12}  {:>5.1}%", d.count, share)?;
    }
    if rows.is_empty() {
        writeln!(out, "(no drops)")?;
    }
    write!(out, "total {} drops in {seconds:.1}s", s.total)?;
    if s.overflow > 0 {
        write!(
            out,
            "; OVERFLOW: {} drops did not fit in the keyed map (raise --max-keys)",
            s.overflow
        )?;
    }
    if s.health.recursion_misses > 0 {
        write!(
            out,
            "; MISSED: the kernel skipped {} probe runs (drops not counted)",
            s.health.recursion_misses
        )?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{DropCount, DropKey, Reason};

    fn snap() -> Snapshot {
        let d = |code, name: &str, loc: &str, count| DropCount {
            key: DropKey {
                reason: Reason {
                    code,
                    name: name.into(),
                },
                location: loc.into(),
            },
            count,
        };
        Snapshot {
            elapsed: Duration::from_secs(3),
            total: 17,
            overflow: 2,
            drops: vec![
                d(3, "NO_SOCKET", "__udp4_lib_rcv+0x1", 5),
                d(7, "IP_NOPROTO", "ip_local_deliver_finish+0x2", 10),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn json_has_total_overflow_and_sorted_drops() {
        let s = snap();
        let v = serde_json::to_value(json(&s, 3.0)).expect("json");
        assert_eq!(v["total"], 17);
        assert_eq!(v["overflow"], 2);
        assert_eq!(v["drops"][0]["reason"], "IP_NOPROTO");
        assert_eq!(v["drops"][0]["reason_code"], 7);
        assert_eq!(v["drops"][0]["count"], 10);
        assert_eq!(v["drops"][1]["location"], "__udp4_lib_rcv+0x1");
    }

    fn one(name: &str, location: &str) -> Snapshot {
        Snapshot {
            total: 1,
            drops: vec![DropCount {
                key: DropKey {
                    reason: Reason {
                        code: 1,
                        name: name.into(),
                    },
                    location: location.into(),
                },
                count: 1,
            }],
            ..Default::default()
        }
    }

    fn table(s: &Snapshot) -> String {
        let mut out = Vec::new();
        write_table(s, 1.0, &mut out).expect("write");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn hostile_names_cannot_reach_the_terminal() {
        let text = table(&one(
            "\x1b]0;pwned\x07\x1b]52;c;aGk=\x07\x1b[2J",
            "a\rFAKE ROW 999\u{8}\u{9b}31m\u{202e}x",
        ));
        for c in text.chars() {
            assert!(
                c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
                "{c:?} reached the table: {text:?}"
            );
        }
        assert!(text.contains("\\u{1b}]0;pwned"), "{text}");
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn long_names_are_cut_and_never_panic() {
        for len in [65_535, 65_536, 1 << 20] {
            let text = table(&one("R", &"x".repeat(len)));
            let row = text.lines().nth(1).expect("row");
            assert!(row.chars().count() < 200, "{}", row.len());
            assert!(row.contains('…'));
        }
    }

    #[test]
    fn table_lists_rows_and_flags_overflow() {
        let mut out = Vec::new();
        write_table(&snap(), 3.0, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<_> = text.lines().collect();
        assert!(lines[0].starts_with("REASON"));
        assert!(lines[1].starts_with("IP_NOPROTO"), "{text}");
        assert!(text.contains("OVERFLOW: 2 drops"), "{text}");
        assert!(text.contains("total 17 drops"), "{text}");
        assert!(!text.contains("MISSED"), "{text}");
        let mut missed = snap();
        missed.health.recursion_misses = 4;
        let mut out = Vec::new();
        write_table(&missed, 3.0, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("MISSED: the kernel skipped 4"), "{text}");
        assert_eq!(json(&missed, 3.0).missed, 4);
    }
}
