//! Renders the metrics of one snapshot in the Prometheus text format (0.0.4) or in OpenMetrics
//! (1.0.0), with every label value escaped.
use std::fmt::Write as _;

use crate::model::{Health, SessionInfo, Snapshot};

use super::series::{
    Capped, DROP_LABELS, LAYER_LABELS, NETNS_PACKET_LABELS, OTHER, OVERFLOW, PACKET_LABELS,
    Selected,
};

/// The two formats a scraper can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// The Content-Type of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format an `Accept` header prefers: OpenMetrics when the scraper ranks it at least as
    /// high as the text format, else text.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let (mut om, mut text) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "*/*" | "text/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// Everything one scrape shows: a snapshot with the caps applied.
#[derive(Debug)]
pub struct Exposition {
    /// The session the snapshot belongs to.
    pub info: SessionInfo,
    /// The series of every capped family.
    pub selected: Selected,
    /// The probe's health.
    pub health: Health,
    /// When the snapshot was taken, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The `--max-series` in force.
    pub max_series: usize,
    /// The history writer's state, with `--history`.
    pub history: Option<crate::history::StatusView>,
}

impl Exposition {
    /// The exposition of a snapshot whose caps were applied as `selected`.
    pub fn new(info: &SessionInfo, snap: &Snapshot, selected: Selected, max_series: usize) -> Self {
        Self {
            info: info.clone(),
            selected,
            health: snap.health.clone(),
            unix_ms: snap.unix_ms,
            max_series,
            history: None,
        }
    }
}

/// Escapes a label value for both formats: `\`, `"` and line feeds.
fn escape(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes `{name="value",...}` of the non-empty values (nothing if all are empty).
fn labels<'a>(out: &mut String, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut first = true;
    for (name, value) in pairs.into_iter().filter(|(_, v)| !v.is_empty()) {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(name);
        out.push_str("=\"");
        escape(out, value);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
}

/// Writes metric families in one format.
struct Writer {
    out: String,
    format: Format,
}

impl Writer {
    /// `# HELP` and `# TYPE` of a family; `name` is the sample name (counters end in `_total`,
    /// which OpenMetrics leaves out of the family's name).
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let family = match (self.format, kind) {
            (Format::OpenMetrics, "counter") => name.trim_end_matches("_total"),
            (Format::OpenMetrics, "info") => name.trim_end_matches("_info"),
            _ => name,
        };
        let kind = match (self.format, kind) {
            (Format::Text, "info") => "gauge",
            (_, k) => k,
        };
        let _ = writeln!(self.out, "# HELP {family} {help}");
        let _ = writeln!(self.out, "# TYPE {family} {kind}");
    }

    fn sample(&mut self, name: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.out, "{name} {value}");
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, value);
    }

    /// The samples of a capped family, its labels named `names`: its series, then `other`
    /// with the labels `other` (if it has one).
    fn capped(&mut self, name: &str, names: &[&str], c: &Capped, other: &[(&str, &str)]) {
        for s in &c.series {
            self.out.push_str(name);
            labels(
                &mut self.out,
                names.iter().copied().zip(s.labels.iter().map(|v| &**v)),
            );
            let _ = writeln!(self.out, " {}", s.count);
        }
        if let Some(v) = c.other {
            self.out.push_str(name);
            labels(&mut self.out, other.iter().copied());
            let _ = writeln!(self.out, " {v}");
        }
    }
}

/// Renders the exposition in `format`.
pub fn render(e: &Exposition, format: Format) -> String {
    let sel = &e.selected;
    // About 100 bytes per series.
    let mut w = Writer {
        out: String::with_capacity(4096 + 128 * sel.drops.series.len()),
        format,
    };
    w.family(
        "dropscope_drops_total",
        "counter",
        "Packets the kernel dropped, exact, by drop reason and kernel location. \
         reason=other sums the label sets beyond --max-series; reason=overflow counts drops \
         the kernel could not key (its map was full). culprit names who dropped them where \
         known (the rule, chain policy or program; 'maybe: ' before candidates, '?' unknown).",
    );
    let drop_labels: Vec<&str> = (DROP_LABELS.iter().map(|(n, _)| *n))
        .chain([super::series::CULPRIT_LABEL])
        .collect();
    w.capped(
        "dropscope_drops_total",
        &drop_labels,
        &sel.drops,
        &[("reason", OTHER)],
    );
    if sel.overflow > 0 {
        w.out.push_str("dropscope_drops_total");
        labels(&mut w.out, [("reason", OVERFLOW)]);
        let _ = writeln!(w.out, " {}", sel.overflow);
    }
    let h = &e.health;
    w.one(
        "dropscope_overflow_total",
        "counter",
        "Drops counted but not keyed because the kernel's keyed map was full (raise --max-keys).",
        sel.overflow,
    );
    w.one(
        "dropscope_missed_runs_total",
        "counter",
        "Probe runs the kernel skipped because the program was already running on that CPU.",
        h.recursion_misses,
    );
    if let (Some(ns), Some(runs)) = (h.bpf_run_ns, h.bpf_run_cnt) {
        w.one(
            "dropscope_probe_run_seconds_total",
            "counter",
            "Time the probe ran in the kernel (BPF statistics; with --bpf-stats).",
            ns as f64 / 1e9,
        );
        w.one(
            "dropscope_probe_runs_total",
            "counter",
            "Runs of the probe, one per dropped packet (BPF statistics; with --bpf-stats).",
            runs,
        );
    }
    w.one(
        "dropscope_keys_used",
        "gauge",
        "Keys in the kernel's (reason, location) map.",
        h.keys_used,
    );
    w.one(
        "dropscope_keys_capacity",
        "gauge",
        "Capacity of the kernel's (reason, location) map (--max-keys).",
        h.keys_capacity,
    );
    w.one(
        "dropscope_series_max",
        "gauge",
        "Label sets exported as series of their own at most (--max-series).",
        e.max_series,
    );
    w.one(
        "dropscope_series_other",
        "gauge",
        "Label sets of dropscope_drops_total summed into reason=other.",
        sel.drops.other_sets,
    );
    w.one(
        "dropscope_poll_interval_seconds",
        "gauge",
        "The collector's current poll interval (adaptive).",
        h.poll_interval_ms as f64 / 1e3,
    );
    w.one(
        "dropscope_stack_samples_total",
        "counter",
        "Kernel stacks sampled.",
        h.stack_samples,
    );
    w.family(
        "dropscope_stack_problems_total",
        "counter",
        "Stack samples lost: capture failed in the kernel, did not fit in the map, or were \
         evicted before being read.",
    );
    for (kind, n) in [
        ("capture_failed", h.stack_errors),
        ("no_room", h.stack_overflow),
        ("evicted", h.stack_lost),
    ] {
        w.out.push_str("dropscope_stack_problems_total");
        labels(&mut w.out, [("kind", kind)]);
        let _ = writeln!(w.out, " {n}");
    }
    w.one(
        "dropscope_stack_sample_period",
        "gauge",
        "Drops per stack sample per CPU (0: stacks off).",
        h.sample_period,
    );
    w.one(
        "dropscope_cpu_seconds_total",
        "counter",
        "dropscope's own CPU time, user and system.",
        h.self_cpu_us as f64 / 1e6,
    );
    w.one(
        "dropscope_snapshot_timestamp_seconds",
        "gauge",
        "When the snapshot shown was read from the kernel (Unix time).",
        e.unix_ms as f64 / 1e3,
    );
    let shown = |c: &Capped| !c.series.is_empty() || c.other.is_some();
    if shown(&sel.packets) {
        w.family(
            "dropscope_packets_total",
            "counter",
            "Packets a device received (direction=rx) or sent (tx) since dropscope started, per \
             network namespace: the denominator of drop ratios per device. The series without \
             labels sums the devices beyond --max-series.",
        );
        w.capped("dropscope_packets_total", PACKET_LABELS, &sel.packets, &[]);
    }
    if shown(&sel.netns_packets) {
        w.family(
            "dropscope_netns_packets_total",
            "counter",
            "Packets a network namespace received at the IP layer (Ip:InReceives + \
             Ip6:InReceives) since dropscope started: the denominator of drop ratios per \
             namespace. The series without labels sums the namespaces beyond --max-series.",
        );
        w.capped(
            "dropscope_netns_packets_total",
            NETNS_PACKET_LABELS,
            &sel.netns_packets,
            &[],
        );
    }
    if shown(&sel.layer_drops) {
        w.family(
            "dropscope_layer_drops_total",
            "counter",
            "Drops a layer counter of the kernel counted since dropscope started (layer=nic: \
             ip -s link, qdisc: tc -s qdisc, softnet: the per-CPU backlog, protocol: nstat), per \
             network namespace and device; the drop ledger matches them with \
             dropscope_drops_total. Some count the same drops (a backlog drop is also its \
             device's rx_dropped): do not sum across layers. layer=other sums the counters \
             beyond --max-series.",
        );
        w.capped(
            "dropscope_layer_drops_total",
            LAYER_LABELS,
            &sel.layer_drops,
            &[("layer", OTHER)],
        );
    }
    if shown(&sel.counter_only) {
        w.family(
            "dropscope_counter_only_drops",
            "gauge",
            "Drops only a kernel counter saw since dropscope started (reason is the counter, \
             e.g. TcpExt:ListenDrops; location is (counter only)): its growth less the drops \
             of its reasons the probe counted, each drop once. Never in dropscope_drops_total. \
             A lower bound, so it may go down. reason=other sums the label sets beyond \
             --max-series.",
        );
        w.capped(
            "dropscope_counter_only_drops",
            &drop_labels,
            &sel.counter_only,
            &[("reason", OTHER)],
        );
    }
    if let Some(h) = &e.history {
        w.one(
            "dropscope_history_paused",
            "gauge",
            "1 while writing the history is paused (the disk refused a write; retried every 10 s).",
            u8::from(h.paused),
        );
        w.one(
            "dropscope_history_skipped_snapshots_total",
            "counter",
            "Snapshots not written to the history (paused, or the writer behind); counts are \
             cumulative, so this costs resolution, not drops.",
            h.skipped,
        );
        w.one(
            "dropscope_history_bytes",
            "gauge",
            "Bytes the history's segments take on disk.",
            h.bytes,
        );
        w.one(
            "dropscope_history_segments",
            "gauge",
            "Segments in the history directory.",
            h.segments,
        );
    }
    w.family(
        "dropscope_info",
        "info",
        "The kernel hook in use and the running kernel.",
    );
    w.out.push_str("dropscope_info");
    labels(
        &mut w.out,
        [
            ("version", env!("CARGO_PKG_VERSION")),
            ("probe", &*super::series::sanitize(&e.info.probe)),
            ("kernel", &*super::series::sanitize(&e.info.kernel)),
        ],
    );
    w.out.push_str(" 1\n");
    if format == Format::OpenMetrics {
        w.out.push_str("# EOF\n");
    }
    w.out
}
