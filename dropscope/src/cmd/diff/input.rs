//! The inputs of `diff`: a recording or the output of `report --format json`, told apart by
//! their first bytes (a recording starts with its magic), from a file, a pipe or standard input.
//!
//! A JSON report is parsed as it is read, never held whole: what it leaves is its keys, with
//! each distinct name held once, within the recording reader's budget (see [`record::budget`])
//! and [`MAX_JSON_BYTES`].
use std::{
    collections::HashSet,
    fmt,
    fs::File,
    io::{self, BufReader, Read},
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
    record::{
        self, Recording,
        budget::{Limit, Spent},
    },
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
    /// Whether it was a JSON report (which carries no kernel view to derive culprits from).
    pub json: bool,
}

/// What a recording starts with (its magic, less the line-ending checks after it).
const RECORDING: &[u8] = b"\x89DROPSCOPE";

/// Most bytes of JSON read from one input: a report as `report` writes it (a hint per key) of
/// 10,000 keys is about 4 MiB, of 100,000 about 45 MiB. A run of more keys is compared from its
/// recording.
pub const MAX_JSON_BYTES: u64 = 64 << 20;

/// Reads one input: `-` is standard input.
pub fn load(path: &Path) -> anyhow::Result<Input> {
    let stdin = record::is_stdio(path);
    let name = if stdin {
        "standard input".to_string()
    } else {
        path.to_string_lossy().into_owned()
    };
    // A regular file's size, known before it is read.
    let (mut src, size): (Box<dyn Read + Send>, Option<u64>) = if stdin {
        (Box::new(io::stdin()), None)
    } else {
        let f = File::open(path).with_context(|| format!("opening {name}"))?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(f), size)
    };
    let regular = size.is_some();
    let mut head = Vec::with_capacity(RECORDING.len());
    (&mut src)
        .take(RECORDING.len() as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {name}"))?;
    let (snapshot, seconds, (programs, programs_counted), json) = if head == RECORDING {
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
        (snapshot, seconds, programs, false)
    } else if !head.is_empty() && RECORDING.starts_with(&head) {
        bail!("{name} is a recording cut short in its header");
    } else {
        let too_large = || {
            anyhow::anyhow!(
                "{name} is larger than {} MiB, the most read of a JSON report: diff the \
                 recording it was made from instead",
                MAX_JSON_BYTES >> 20
            )
        };
        // A file known to be too large is refused unread.
        if size.is_some_and(|n| n > MAX_JSON_BYTES) {
            return Err(too_large());
        }
        let mut text = BufReader::new(io::Cursor::new(head).chain(src).take(MAX_JSON_BYTES + 1));
        let report = last_report(&mut text);
        if text.get_ref().limit() == 0 {
            return Err(too_large());
        }
        let mut report = report.with_context(|| {
            format!("{name} is neither a dropscope recording nor `report --format json` output")
        })?;
        let seconds = report.seconds;
        let counted = report.programs_counted();
        let programs = (report.programs(), counted);
        (report.snapshot(), seconds, programs, true)
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
        json,
    })
}

/// BASE and NEW of `diff --history DIR --last D --vs I [--at T]`. A history's windows carry no
/// kernel readings yet, so the programs' verdicts are not compared.
pub fn history(dir: &Path, args: &crate::cli::DiffArgs) -> anyhow::Result<(Input, Input)> {
    use crate::history::when::TimeArg;
    let (Some(last), Some(vs)) = (args.last, args.vs) else {
        bail!("--history needs --last and --vs");
    };
    let at = match args.at {
        Some(TimeArg::Wall(ms)) => Some(ms),
        Some(TimeArg::Session(_)) => bail!("--at is a wall-clock time (03:10, RFC 3339)"),
        None => None,
    };
    let (base, new) = crate::history::compare::sides(dir, last, vs, at)?;
    // The programs' verdicts over each window, from the kernel's counters its segments hold.
    let input = |s: crate::history::compare::Side| Input {
        programs: programs::of_snapshot(&s.snap),
        programs_counted: programs::counted(&s.snap),
        name: s.name,
        snapshot: s.snap,
        seconds: s.seconds,
        json: false,
    };
    Ok((input(base), input(new)))
}

/// A recording's drops over its whole window: its last snapshot (cumulative from the session's
/// start) and the seconds since that start.
pub fn whole(rec: &Recording) -> anyhow::Result<(Snapshot, f64)> {
    let end = rec.duration();
    Ok((rec.snapshot_at(end)?, end.as_secs_f64()))
}

/// The last report of a `report --format json` output (one object, or JSON Lines from
/// `--every`, whose last line is the final report), parsed as it is read.
fn last_report(text: impl Read) -> anyhow::Result<Report> {
    let mut last = None;
    for report in serde_json::Deserializer::from_reader(text).into_iter::<Report>() {
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
/// keys share their names, as a recording's do), within the recording reader's limits: at most
/// [`record::budget::MAX_KEYS`] keys, their names as [`record::budget::MAX_STRINGS`],
/// [`record::budget::MAX_STRING_BYTES`] and [`record::budget::MAX_REFERENCED_BYTES`] bound them.
#[derive(Debug)]
struct Drops(Vec<DropCount>);

/// The distinct names of a list of rows, each held once, and what they spent of the budget.
#[derive(Default)]
struct Names {
    held: HashSet<Arc<str>>,
    spent: Spent,
}

impl Names {
    /// The name `s`, held once; counted as referenced by one more key.
    fn get(&mut self, s: &str) -> Result<Arc<str>, Limit> {
        self.spent.referenced(s.len())?;
        if let Some(n) = self.held.get(s) {
            return Ok(n.clone());
        }
        self.spent.string(s.len())?;
        let n: Arc<str> = Arc::from(s);
        self.held.insert(n.clone());
        Ok(n)
    }

    /// [`Names::get`] of a name that may be absent.
    fn some(&mut self, s: Option<String>) -> Result<Option<Arc<str>>, Limit> {
        s.map(|s| self.get(&s)).transpose()
    }
}

/// A limit of the budget as a parse error.
fn over<E: de::Error>(l: Limit) -> E {
    E::custom(format!(
        "more than {} {} (the limits of a recording, see docs/recording-format.md)",
        l.max, l.what
    ))
}

impl<'de> Deserialize<'de> for Drops {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rows;
        impl<'de> Visitor<'de> for Rows {
            type Value = Drops;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of drop counts")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Drops, A::Error> {
                let mut names = Names::default();
                let mut out = Vec::new();
                while let Some(r) = seq.next_element::<Row>()? {
                    names.spent.key().map_err(over)?;
                    out.push(DropCount {
                        key: DropKey {
                            reason: Reason {
                                code: r.reason_code,
                                name: names.get(&r.reason).map_err(over)?,
                            },
                            location: names.get(&r.location).map_err(over)?,
                            attr: Attribution {
                                netns: r.netns,
                                netns_cookie: r.netns_cookie,
                                netns_name: names.some(r.netns_name).map_err(over)?,
                                ifindex: None,
                                device: names.some(r.device).map_err(over)?,
                                protocol: names.some(r.protocol).map_err(over)?,
                                port: r.port,
                                socket: None,
                                culprit: None,
                            },
                        },
                        count: r.count,
                    });
                }
                out.shrink_to_fit();
                Ok(Drops(out))
            }
        }
        d.deserialize_seq(Rows)
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write as _, path::PathBuf};

    use super::*;

    /// A file of the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, text: &[u8]) -> Self {
            let path = std::env::temp_dir().join(format!(
                "dropscope-diff-input-{}-{name}",
                std::process::id()
            ));
            let mut f = File::create(&path).expect("create");
            f.write_all(text).expect("write");
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A JSON report of `rows` keys, each with its own location: as `report --format json`
    /// writes them (`full`: with a hint and samples), or with only the fields required.
    fn report_text(rows: usize, full: bool) -> Vec<u8> {
        let mut t = String::from(r#"{"total": 1, "overflow": 0, "missed": 0, "drops": ["#);
        for k in 0..rows {
            if k > 0 {
                t.push(',');
            }
            if full {
                t.push_str(&format!(
                    r#"{{"reason": "REASON_{}", "reason_code": {}, "location": "func_{k}+0x{k:x}", "netns": {}, "netns_name": "ns{}", "device": "veth{}", "protocol": "udp", "port": {}, "count": {}, "samples": [{{"src": "10.0.0.1", "dst": "10.0.0.2", "sport": 5353, "dport": 53, "protocol": "udp", "len": 84}}], "hint": "No socket listens on the port: check the service and ss -lunp; a scan or a stale client sends such packets, and so does a service that was stopped."}}"#,
                    k % 90,
                    k % 90,
                    4026531840 + k as u64 % 50,
                    k % 50,
                    k % 200,
                    k % 65536,
                    10 + k
                ));
            } else {
                t.push_str(&format!(r#"{{"reason":"R","location":"f{k}","count":1}}"#));
            }
        }
        t.push_str(r#"], "seconds": 10.0, "kernel_counters": null, "unseen": null}"#);
        t.into_bytes()
    }

    #[test]
    fn a_json_report_past_the_byte_limit_is_refused_with_the_limit() {
        const LIMIT: usize = 64 << 20;
        let mut text = br#"{"total": 1, "seconds": 1, "drops": []}"#.to_vec();
        text.resize(LIMIT + 1, b' ');
        let over = TempFile::new("over.json", &text);
        let e = load(&over.0).expect_err("past the limit");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("larger than 64 MiB") && msg.contains("diff the recording"),
            "{msg}"
        );
        // Read through: the limit holds where the size is not known beforehand.
        let mut through = BufReader::new(io::Cursor::new(&text).take(MAX_JSON_BYTES + 1));
        let _ = last_report(&mut through);
        assert_eq!(through.get_ref().limit(), 0, "read to past the limit");
        text.truncate(LIMIT);
        let at = TempFile::new("at.json", &text);
        let i = load(&at.0).expect("at the limit");
        assert_eq!(i.snapshot.total, 1);
    }

    /// What reading a JSON report holds grows with its keys and distinct names, never with
    /// its text: a report as `report` writes it (a hint and samples per key) holds less than
    /// its text (its text was held whole, and each name twice), and one of keys with nothing
    /// but distinct names a bounded multiple of it.
    #[test]
    fn reading_a_json_report_holds_a_bounded_share_of_its_bytes() {
        let full = report_text(20_000, true);
        let f = TempFile::new("full.json", &full);
        let (peak, i) = crate::heap::peak_during(|| load(&f.0).expect("full"));
        assert_eq!(i.snapshot.drops.len(), 20_000);
        assert!(
            peak < full.len(),
            "{peak} bytes held reading {} bytes",
            full.len()
        );
        let bare = report_text(100_000, false);
        let f = TempFile::new("bare.json", &bare);
        let (peak, i) = crate::heap::peak_during(|| load(&f.0).expect("bare"));
        assert_eq!(i.snapshot.drops.len(), 100_000);
        assert!(
            peak < 6 * bare.len(),
            "{peak} bytes held reading {} bytes",
            bare.len()
        );
    }

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
