//! The headless report: a snapshot (or a window of one) printed as a table or as JSON.
use std::io::Write;

use serde::Serialize;
use unicode_width::UnicodeWidthStr;

use crate::{
    explain::Guide,
    kcounters::{CounterDelta, KernelView, Unseen},
    model::Snapshot,
    sanitize,
};

/// One row of the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonDrop<'a> {
    /// Reason name, e.g. `NO_SOCKET`.
    pub reason: &'a str,
    /// The kernel's enum value.
    pub reason_code: u32,
    /// Symbolized kernel location.
    pub location: &'a str,
    /// Network namespace inode (null when not grouped by namespace or unknown).
    pub netns: Option<u64>,
    /// Its human name (container, pod, unit, `ip netns` name), or null.
    pub netns_name: Option<&'a str>,
    /// Interface name, or null.
    pub device: Option<&'a str>,
    /// L4 protocol (`udp`, `tcp`, `icmp`, `icmpv6` or the number), or null when not IP.
    pub protocol: Option<&'a str>,
    /// Destination port: present only when grouped by port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Exact count.
    pub count: u64,
    /// The first few dropped packets of this key (where kept).
    pub samples: Vec<JsonSample>,
    /// What the reason means and what to check: one paragraph of the reason guide.
    pub hint: String,
}

/// A sampled packet in the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonSample {
    /// Source address.
    pub src: Option<String>,
    /// Destination address.
    pub dst: Option<String>,
    /// Source port.
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// L4 protocol name or number.
    pub protocol: Option<String>,
    /// Length as the kernel saw it.
    pub len: u32,
}

fn json_samples(s: &Snapshot, key: &crate::model::DropKey) -> Vec<JsonSample> {
    s.samples
        .iter()
        .filter(|k| k.key == *key)
        .flat_map(|k| &k.packets)
        .map(|p| {
            let h = p.headers();
            JsonSample {
                src: h.src.map(|a| a.to_string()),
                dst: h.dst.map(|a| a.to_string()),
                sport: h.sport,
                dport: h.dport,
                protocol: h.protocol.map(crate::select::protocol_name),
                len: p.len,
            }
        })
        .collect()
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
    /// The kernel's own drop counters that grew over the same window, per network namespace
    /// (`null` when counting from a recording, which holds no kernel counters).
    pub kernel_counters: Option<Vec<CounterDelta>>,
    /// Drops the kernel counted but the probe did not see (`null` as above). Never part of
    /// `drops` or `total`.
    pub unseen: Option<Vec<Unseen>>,
}

impl JsonReport<'_> {
    /// Adds the kernel counters and unseen drops of the same window.
    pub fn with_kernel(mut self, k: &KernelView) -> Self {
        self.kernel_counters = Some(k.counters.clone());
        self.unseen = k.unseen.clone();
        self
    }
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
                netns: d.key.attr.netns,
                netns_name: d.key.attr.netns_name.as_deref(),
                device: d.key.attr.device.as_deref(),
                protocol: d.key.attr.protocol.as_deref(),
                port: d.key.attr.port,
                count: d.count,
                samples: json_samples(s, &d.key),
                hint: Guide::builtin().hint(&d.key.reason.name),
            })
            .collect(),
        seconds,
        kernel_counters: None,
        unseen: None,
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

/// Writes the kernel counters and unseen drops of the window, after the table.
pub fn write_kernel(k: &KernelView, mut out: impl Write) -> std::io::Result<()> {
    let ns = |n: u64| k.netns_label(n);
    writeln!(out)?;
    writeln!(out, "KERNEL COUNTERS (growth over the same window)")?;
    if k.counters.is_empty() {
        writeln!(out, "(no drop counter grew)")?;
    }
    let cw = k
        .counters
        .iter()
        .map(|c| c.counter.len())
        .max()
        .unwrap_or(7)
        .max(7);
    let nw = k
        .counters
        .iter()
        .map(|c| ns(c.netns).len())
        .max()
        .unwrap_or(5)
        .max(5);
    if !k.counters.is_empty() {
        writeln!(
            out,
            "{:<nw$}  {:<cw$}  {:>12}  REASONS",
            "NETNS", "COUNTER", "DELTA"
        )?;
    }
    for c in &k.counters {
        let reasons = if c.reasons.is_empty() {
            "(none: freed without a drop reason)".to_string()
        } else {
            c.reasons.join(" ")
        };
        writeln!(
            out,
            "{:<nw$}  {:<cw$}  {:>12}  {reasons}",
            ns(c.netns),
            c.counter,
            c.delta
        )?;
    }
    if let (None, Some(f)) = (&k.unseen, &k.filter) {
        writeln!(
            out,
            "(unseen drops not computed: only drops of {f} are counted)"
        )?;
    }
    if let Some(unseen) = k.unseen.as_ref().filter(|u| !u.is_empty()) {
        writeln!(out)?;
        writeln!(
            out,
            "UNSEEN: counted by the kernel, not seen by the probe (not in the counts above)"
        )?;
        for u in unseen {
            writeln!(
                out,
                "{:<nw$}  {:<cw$}  {:>12}",
                ns(u.netns),
                u.counter,
                u.count
            )?;
        }
    }
    for e in &k.errors {
        writeln!(out, "(kernel counters not read: {e})")?;
    }
    Ok(())
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
                attr: Default::default(),
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
        assert!(
            v["drops"][1]["hint"]
                .as_str()
                .is_some_and(|h| h.contains("no socket matched")),
            "{v:#}"
        );
        assert!(v["kernel_counters"].is_null() && v["unseen"].is_null());
    }

    fn kernel() -> KernelView {
        KernelView {
            initial_netns: 1,
            counters: vec![CounterDelta {
                netns: 9,
                counter: "TcpExt:ListenDrops".into(),
                delta: 40,
                reasons: vec!["TCP_LISTEN_OVERFLOW"],
            }],
            unseen: Some(vec![Unseen {
                netns: 9,
                counter: "TcpExt:ListenDrops".into(),
                count: 38,
            }]),
            filter: None,
            errors: Vec::new(),
            names: [(9, "web1".to_string())].into(),
        }
    }

    #[test]
    fn json_carries_kernel_counters_and_unseen_apart_from_drops() {
        let s = snap();
        let v = serde_json::to_value(json(&s, 3.0).with_kernel(&kernel())).expect("json");
        assert_eq!(v["kernel_counters"][0]["counter"], "TcpExt:ListenDrops");
        assert_eq!(v["kernel_counters"][0]["netns"], 9);
        assert_eq!(v["kernel_counters"][0]["delta"], 40);
        assert_eq!(v["kernel_counters"][0]["reasons"][0], "TCP_LISTEN_OVERFLOW");
        assert_eq!(v["unseen"][0]["count"], 38);
        assert_eq!(
            v["total"], 17,
            "unseen drops are not added to the exact counts"
        );
        assert_eq!(v["drops"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn table_section_labels_unseen_rows() {
        let mut out = Vec::new();
        write_kernel(&kernel(), &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("TcpExt:ListenDrops"), "{text}");
        assert!(
            text.contains("UNSEEN: counted by the kernel, not seen by the probe"),
            "{text}"
        );
        assert!(text.contains("38"), "{text}");
        assert!(text.contains("9 (web1)"), "{text}");
        let mut out = Vec::new();
        write_kernel(&KernelView::default(), &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("no drop counter grew") && !text.contains("UNSEEN"),
            "{text}"
        );
        let filtered = KernelView {
            unseen: None,
            filter: Some("netns foo".into()),
            ..kernel()
        };
        let mut out = Vec::new();
        write_kernel(&filtered, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("not computed: only drops of netns foo"),
            "{text}"
        );
        assert!(!text.contains("UNSEEN"), "{text}");
        let v = serde_json::to_value(json(&snap(), 3.0).with_kernel(&filtered)).expect("json");
        assert!(
            v["unseen"].is_null() && v["kernel_counters"].is_array(),
            "{v:#}"
        );
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
                    attr: Default::default(),
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
