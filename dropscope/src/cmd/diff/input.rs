//! The inputs of `diff`: a recording or the output of `report --format json`, told apart by
//! their first bytes (a recording starts with its magic), from a file, a pipe or standard input.
use std::{
    collections::HashMap,
    fmt,
    fs::File,
    io::{self, Read},
    path::Path,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde::{
    Deserialize,
    de::{self, Deserializer, SeqAccess, Visitor},
};

use crate::{
    model::{Attribution, DropCount, DropKey, Reason, Snapshot, programs},
    record::{self, Recording},
};

/// One run's drops, as read.
#[derive(Debug)]
pub struct Input {
    /// How messages name it: its path as given, or `standard input` (not escaped).
    pub name: String,
    /// Its drops over its whole window (a recording's are cumulative from its session's
    /// start), neither filtered nor grouped.
    pub snapshot: Snapshot,
    /// Seconds the window covers (positive).
    pub seconds: f64,
    /// The XDP and tc programs' drop verdicts over the same window (a recording's from its
    /// kernel readings, a JSON report's `programs`), never in the snapshot's total.
    pub programs: Vec<DropCount>,
    /// Whether every attached program's verdicts were counted, or why not (see
    /// [`programs::counted`]).
    pub programs_counted: Result<(), String>,
}

/// What a recording starts with (its magic, less the line-ending checks after it).
const RECORDING: &[u8] = b"\x89DROPSCOPE";

/// Most bytes of JSON read from one input (a report of 10,000 keys is a few MiB).
pub const MAX_JSON_BYTES: u64 = 256 << 20;

/// Most drop keys of one JSON report, as of one recording.
pub const MAX_JSON_KEYS: usize = record::budget::MAX_KEYS;

/// Reads one input: `-` is standard input.
pub fn load(path: &Path) -> anyhow::Result<Input> {
    let stdin = record::is_stdio(path);
    let name = if stdin {
        "standard input".to_string()
    } else {
        path.to_string_lossy().into_owned()
    };
    let (mut src, regular): (Box<dyn Read + Send>, bool) = if stdin {
        (Box::new(io::stdin()), false)
    } else {
        let f = File::open(path).with_context(|| format!("opening {name}"))?;
        let regular = f.metadata().is_ok_and(|m| m.is_file());
        (Box::new(f), regular)
    };
    let mut head = Vec::with_capacity(RECORDING.len());
    (&mut src)
        .take(RECORDING.len() as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {name}"))?;
    let (snapshot, seconds, (programs, programs_counted)) = if head == RECORDING {
        // A pipe (`-`, `<(...)`) is read through as a stream; a file is opened as one.
        let rec = if regular {
            drop(src);
            Recording::open(path)
        } else {
            Recording::read_stream(io::Cursor::new(head).chain(src))
        }
        .with_context(|| format!("reading the recording {name}"))?;
        for warning in rec.warnings() {
            eprintln!(
                "dropscope: warning: {}: {warning}",
                crate::sanitize::terminal(&name)
            );
        }
        let (snapshot, seconds) = whole(&rec).with_context(|| format!("reading {name}"))?;
        let programs = (
            programs::of_snapshot(&snapshot),
            programs::counted(&snapshot),
        );
        (snapshot, seconds, programs)
    } else if !head.is_empty() && RECORDING.starts_with(&head) {
        bail!("{name} is a recording cut short in its header");
    } else {
        let mut text = head;
        src.take(MAX_JSON_BYTES + 1)
            .read_to_end(&mut text)
            .with_context(|| format!("reading {name}"))?;
        if text.len() as u64 > MAX_JSON_BYTES {
            bail!("{name} is larger than the {MAX_JSON_BYTES} bytes read of a JSON report");
        }
        let mut report = last_report(&text).with_context(|| {
            format!("{name} is neither a dropscope recording nor `report --format json` output")
        })?;
        let seconds = report.seconds;
        let counted = report.programs_counted();
        let programs = (report.programs(), counted);
        (report.snapshot(), seconds, programs)
    };
    if !(seconds.is_finite() && seconds > 0.0) {
        bail!("{name} covers no time ({seconds} s): no rate can be computed from it");
    }
    Ok(Input {
        name,
        snapshot,
        seconds,
        programs,
        programs_counted,
    })
}

/// A recording's drops over its whole window: its last snapshot (cumulative from the session's
/// start) and the seconds since that start.
pub fn whole(rec: &Recording) -> anyhow::Result<(Snapshot, f64)> {
    let end = rec.duration();
    Ok((rec.snapshot_at(end)?, end.as_secs_f64()))
}

/// The last report of a `report --format json` output (one object, or JSON Lines from
/// `--every`, whose last line is the final report).
fn last_report(text: &[u8]) -> anyhow::Result<Report> {
    let mut last = None;
    for report in serde_json::Deserializer::from_slice(text).into_iter::<Report>() {
        last = Some(report?);
    }
    last.context("it holds no JSON object")
}

/// A report as `report --format json` writes it (what `diff` needs of it).
#[derive(Debug, Deserialize)]
struct Report {
    total: u64,
    #[serde(default)]
    missed: u64,
    drops: Drops,
    seconds: f64,
    /// `null` where the report's drops were filtered (the programs' counts know no filter).
    #[serde(default)]
    programs: Option<Drops>,
    /// Its ledger's notes, which say which programs' verdicts were not counted.
    #[serde(default)]
    ledger: Option<LedgerNotes>,
    /// The kernel reading's notes, the ledger's among them (there where the report has no
    /// ledger: its counts grouped without the reason).
    #[serde(default)]
    kernel_notes: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct LedgerNotes {
    #[serde(default)]
    notes: Vec<String>,
}

impl Report {
    /// Whether its programs' verdicts were counted (see [`programs::counted`]): `programs` is
    /// `null` where they were not read, and the ledger's notes name a program they could not
    /// be counted for. Called before [`Report::programs`].
    fn programs_counted(&self) -> Result<(), String> {
        if self.programs.is_none() {
            return Err(
                "its `programs` is null (a report of filtered drops, of a window that starts \
                 before the recording's first reading of the kernel's counters, or without them)"
                    .into(),
            );
        }
        programs::uncounted_notes(self.ledger.as_ref().map_or(&[], |l| l.notes.as_slice()))?;
        programs::uncounted_notes(self.kernel_notes.as_deref().unwrap_or_default())
    }

    /// Its `programs` rows, marked as program rows; a row whose reason no program verdict
    /// has is not one, and is left out.
    fn programs(&mut self) -> Vec<DropCount> {
        let mut rows = self.programs.take().map(|p| p.0).unwrap_or_default();
        rows.retain(|d| programs::is_program_reason(&d.key.reason.name));
        for d in &mut rows {
            d.key.reason.code |= programs::PROGRAM_REASON;
        }
        rows
    }

    fn snapshot(self) -> Snapshot {
        let drops = self.drops.0;
        let keyed = drops.iter().fold(0u64, |t, d| t.saturating_add(d.count));
        // The invariant holds whatever the file says: what is not keyed is overflow.
        let total = self.total.max(keyed);
        let mut s = Snapshot {
            elapsed: Duration::try_from_secs_f64(self.seconds).unwrap_or_default(),
            total,
            overflow: total - keyed,
            drops,
            ..Default::default()
        };
        s.health.recursion_misses = self.missed;
        s
    }
}

/// One row of a JSON report.
#[derive(Debug, Deserialize)]
struct Row {
    reason: String,
    #[serde(default)]
    reason_code: u32,
    location: String,
    netns: Option<u64>,
    #[serde(default)]
    netns_cookie: Option<u64>,
    netns_name: Option<String>,
    device: Option<String>,
    protocol: Option<String>,
    port: Option<u16>,
    count: u64,
}

/// The rows, made into counts as they are read, with each distinct name held once (a report's
/// keys share their names, as a recording's do); at most [`MAX_JSON_KEYS`] of them.
#[derive(Debug)]
struct Drops(Vec<DropCount>);

impl<'de> Deserialize<'de> for Drops {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rows;
        impl<'de> Visitor<'de> for Rows {
            type Value = Drops;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of drop counts")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Drops, A::Error> {
                let mut names: HashMap<String, Arc<str>> = HashMap::new();
                let mut name = |s: String| -> Arc<str> {
                    names
                        .entry(s)
                        .or_insert_with_key(|s| Arc::from(s.as_str()))
                        .clone()
                };
                let mut out = Vec::new();
                while let Some(r) = seq.next_element::<Row>()? {
                    if out.len() == MAX_JSON_KEYS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_JSON_KEYS} drop keys"
                        )));
                    }
                    out.push(DropCount {
                        key: DropKey {
                            reason: Reason {
                                code: r.reason_code,
                                name: name(r.reason),
                            },
                            location: name(r.location),
                            attr: Attribution {
                                netns: r.netns,
                                netns_cookie: r.netns_cookie,
                                netns_name: r.netns_name.map(&mut name),
                                ifindex: None,
                                device: r.device.map(&mut name),
                                protocol: r.protocol.map(&mut name),
                                port: r.port,
                            },
                        },
                        count: r.count,
                    });
                }
                Ok(Drops(out))
            }
        }
        d.deserialize_seq(Rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_and_its_json_lines_read_as_the_last_report() {
        let one = r#"{"total": 7, "overflow": 1, "missed": 0, "seconds": 2.0, "drops": [
            {"reason": "NO_SOCKET", "reason_code": 2, "location": "f+0x1", "netns": 9,
             "netns_name": "web", "device": "lo", "protocol": "udp", "count": 6,
             "samples": [], "hint": "..."}], "kernel_counters": null, "unseen": null}"#;
        let r = last_report(one.as_bytes()).expect("report");
        let s = r.snapshot();
        assert_eq!((s.total, s.overflow, s.drops.len()), (7, 1, 1));
        assert!(s.invariant_holds());
        let a = &s.drops[0].key.attr;
        assert_eq!(
            (a.netns, a.netns_name.as_deref(), a.device.as_deref()),
            (Some(9), Some("web"), Some("lo"))
        );
        let lines = format!(
            "{}\n{}\n",
            one.replace('\n', " "),
            one.replace('\n', " ")
                .replace("\"count\": 6", "\"count\": 60")
        );
        let s = last_report(lines.as_bytes()).expect("report").snapshot();
        assert_eq!(
            (s.drops[0].count, s.total),
            (60, 60),
            "the last line, and a total >= keyed"
        );
    }

    #[test]
    fn a_reports_programs_are_program_rows_and_only_program_verdicts_are() {
        let text = r#"{"total": 7, "missed": 0, "seconds": 2.0, "drops": [], "programs": [
            {"reason": "XDP_DROP", "location": "prog g#42 (xdpdrv)", "netns": 9,
             "netns_name": "web", "device": "vb", "count": 500, "hint": "..."},
            {"reason": "NO_SOCKET", "location": "f+0x1", "netns": 9, "count": 3}]}"#;
        let mut r = last_report(text.as_bytes()).expect("report");
        assert_eq!(r.programs_counted(), Ok(()));
        let rows = r.programs();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert!(programs::is_program(&rows[0].key));
        assert_eq!(&*rows[0].key.reason.name, "XDP_DROP");
        assert_eq!(
            (rows[0].key.attr.device.as_deref(), rows[0].count),
            (Some("vb"), 500)
        );
        // A filtered report's `null`, or none at all: no rows.
        for text in [
            r#"{"total": 1, "seconds": 1, "drops": [], "programs": null}"#,
            r#"{"total": 1, "seconds": 1, "drops": []}"#,
        ] {
            let mut r = last_report(text.as_bytes()).expect(text);
            let why = r.programs_counted().expect_err(text);
            assert!(why.contains("`programs` is null"), "{why}");
            assert!(r.programs().is_empty(), "{text}");
        }
        // The ledger's notes say when a program's verdicts were not counted.
        let text = r#"{"total": 1, "seconds": 1, "drops": [], "programs": [],
            "ledger": {"notes": ["program 42 \"g\" (xdp xdpdrv on vb, netns 7): verdicts not counted: EPERM"]}}"#;
        let r = last_report(text.as_bytes()).expect(text);
        let why = r.programs_counted().expect_err(text);
        assert!(why.starts_with("program 42"), "{why}");
        // So do the kernel reading's notes, where there is no ledger (counts grouped without
        // the reason).
        let text = r#"{"total": 1, "seconds": 1, "drops": [], "programs": [], "ledger": null,
            "kernel_notes": ["program 42 \"g\" (xdp xdpdrv on vb, netns 7): verdicts not counted: EPERM"]}"#;
        let r = last_report(text.as_bytes()).expect(text);
        let why = r.programs_counted().expect_err(text);
        assert!(why.starts_with("program 42"), "{why}");
        let text = r#"{"total": 1, "seconds": 1, "drops": [], "programs": [], "kernel_notes": []}"#;
        let r = last_report(text.as_bytes()).expect(text);
        assert_eq!(r.programs_counted(), Ok(()));
    }

    #[test]
    fn what_is_not_a_report_is_refused() {
        for text in [
            "",
            "[1, 2]",
            "{\"total\": 1}",
            "not json",
            "{\"total\": 1, \"drops\": 5, \"seconds\": 1}",
        ] {
            assert!(last_report(text.as_bytes()).is_err(), "{text:?}");
        }
    }
}
