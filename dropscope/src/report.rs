//! The headless report: a snapshot (or a window of one) printed as a table or as JSON.
use std::io::Write;

use serde::Serialize;

use crate::model::Snapshot;

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
            })
            .collect(),
        seconds,
    }
}

/// Writes the report as aligned columns.
pub fn write_table(s: &Snapshot, seconds: f64, mut out: impl Write) -> std::io::Result<()> {
    let rows = sorted(s);
    let rw = rows
        .iter()
        .map(|d| d.key.reason.name.len())
        .max()
        .unwrap_or(0)
        .max(6);
    let lw = rows
        .iter()
        .map(|d| d.key.location.len())
        .max()
        .unwrap_or(0)
        .max(8);
    writeln!(
        out,
        "{:<rw$}  {:<lw$}  {:>12}  {:>6}",
        "REASON", "LOCATION", "COUNT", "SHARE"
    )?;
    for d in &rows {
        let share = if s.total > 0 {
            100.0 * d.count as f64 / s.total as f64
        } else {
            0.0
        };
        writeln!(
            out,
            "{:<rw$}  {:<lw$}  {:>12}  {:>5.1}%",
            d.key.reason.name, d.key.location, d.count, share
        )?;
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
