//! The bench's output: one table per measurement, medians and ratios beside their targets, then
//! a verdict. Figures that could not be measured say why (or TODO), never a made-up number.
use std::fmt::Write as _;

use super::{
    Outcome,
    collector::{self, Scaling},
    examples::{self, Flame, RecordFigures},
    flood::Kind,
    loss::{Config, Run},
    recording::{self, Recording},
    stats::{Summary, summarize, thousands},
    syscount::Method,
    tui::{TuiCost, Window},
};

/// Targets.
const LOSS_NO_STACKS: f64 = 3.0;
const LOSS_STACKS: f64 = 5.0;
/// BPF ns per drop that attribution (namespace and interface) may add over counting only.
const NS_ATTRIBUTION: f64 = 5.0;
/// BPF ns per drop that protocol may add over namespace and interface.
const NS_PROTOCOL: f64 = 10.0;
/// BPF ns per drop above the empty program for a drop filtered out in the kernel.
const NS_FILTERED: f64 = 5.0;
/// BPF ns per drop of counting (stacks off) above the empty program on the same hook, on the
/// single-key flood.
const NS_ABOVE_FLOOR: f64 = 10.0;
/// The same on the interleaved flood (two keys taking turns on a CPU).
const NS_ABOVE_FLOOR_INTERLEAVED: f64 = 15.0;
/// BPF ns per drop that stacks (default sampling) may add over the default grouping without.
const NS_STACKS: f64 = 15.0;
const TUI_SYSCALLS: f64 = 20.0;
const SVG_MS: f64 = 200.0;
const RECORD_BPS: f64 = 2048.0;
const SEEK_MS: f64 = 100.0;

/// Everything measured.
pub struct Results {
    pub header: Vec<String>,
    pub plan: Vec<(Kind, Config)>,
    pub runs: Vec<Run>,
    pub bpftrace_note: Option<String>,
    pub method: Option<Method>,
    pub collector: Outcome<Scaling>,
    pub tui: Outcome<TuiCost>,
    pub flame: Outcome<Flame>,
    pub record_figures: Outcome<RecordFigures>,
    pub recording: Outcome<Recording>,
    pub warnings: Vec<String>,
}

/// A verdict line.
struct Verdict {
    status: &'static str,
    what: String,
}

fn verdict(ok: bool, what: String) -> Verdict {
    Verdict {
        status: if ok { "PASS" } else { "FAIL" },
        what,
    }
}

/// Renders the whole report.
pub fn render(r: &Results) -> String {
    let mut out = String::new();
    let mut verdicts = Vec::new();
    for line in &r.header {
        let _ = writeln!(out, "{line}");
    }
    let summaries: Vec<Summary> = r
        .plan
        .iter()
        .map(|&(k, c)| summarize(k, c, &r.runs))
        .collect();
    let _ = writeln!(
        out,
        "\n1. Drop-rate loss (median packets/s over the rounds; ratio = median of the per-round \
         ratios to nothing attached on the same flood)"
    );
    for kind in [Kind::Single, Kind::Interleaved] {
        let mine: Vec<Summary> = summaries
            .iter()
            .filter(|s| s.kind == kind)
            .cloned()
            .collect();
        loss_table(&mut out, kind, &mine, r, &mut verdicts);
    }
    let _ = writeln!(
        out,
        "(2nd-half: the loss over the second half of each flood only, after the poller has seen \
         the flood and set the stack sampling period)"
    );
    exact_summary(&mut out, &summaries, &mut verdicts);
    bpf_table(&mut out, &summaries, &mut verdicts);
    collector_section(&mut out, &r.collector, &mut verdicts);
    let baseline = summaries
        .iter()
        .find(|s| s.kind == Kind::Single && s.config == Config::Nothing)
        .map(|s| s.median_rate);
    tui_table(&mut out, r.method, &r.tui, baseline, &mut verdicts);
    flame_section(&mut out, &r.flame, &mut verdicts);
    recording_section(&mut out, r, baseline, &mut verdicts);
    let errors: u64 = r.runs.iter().map(|run| run.flood.errors).sum();
    if errors > 0 {
        let _ = writeln!(
            out,
            "\nwarning: {errors} sendto calls failed (not counted as sent)"
        );
    }
    for w in &r.warnings {
        let _ = writeln!(out, "\nwarning: {w}");
    }
    verdict_section(&mut out, &verdicts);
    out
}

fn loss_table(
    out: &mut String,
    kind: Kind,
    sums: &[Summary],
    r: &Results,
    verdicts: &mut Vec<Verdict>,
) {
    let _ = writeln!(out, "{}:", kind.label());
    let _ = writeln!(
        out,
        "{:<38} {:>12} {:>23} {:>7} {:>7} {:>10}  {:<15} target",
        "configuration", "packets/s", "min - max", "ratio", "loss", "2nd-half", "exact count"
    );
    for s in sums {
        let loss = (1.0 - s.ratio) * 100.0;
        let (loss_s, target) = loss_cell(s, loss, verdicts);
        let (ratio, second_half) = if s.config == Config::Nothing {
            ("1".into(), "-".into())
        } else {
            (
                format!("{:.3}", s.ratio),
                format!("{:.1}%", (1.0 - s.second_half_ratio) * 100.0),
            )
        };
        let _ = writeln!(
            out,
            "{:<38} {:>12} {:>23} {:>7} {:>7} {:>10}  {:<15} {target}",
            s.config.label(),
            thousands(s.median_rate),
            format!("{} - {}", thousands(s.min_rate), thousands(s.max_rate)),
            ratio,
            loss_s,
            second_half,
            exact_cell(s),
        );
    }
    if let (Kind::Single, Some(note)) = (kind, &r.bpftrace_note) {
        for c in [Config::Bpftrace, Config::BpftraceCount] {
            let _ = writeln!(out, "{:<38} {note}", c.label());
        }
    }
}

fn loss_cell(s: &Summary, loss: f64, verdicts: &mut Vec<Verdict>) -> (String, String) {
    let shown = format!("{loss:.1}%");
    match s.config {
        Config::Nothing => ("-".into(), String::new()),
        Config::NoStacks | Config::Stacks => {
            let (limit, what) = if s.config == Config::NoStacks {
                (LOSS_NO_STACKS, "without stacks")
            } else {
                (LOSS_STACKS, "with stacks")
            };
            let ok = loss <= limit;
            let second = (1.0 - s.second_half_ratio) * 100.0;
            verdicts.push(verdict(
                ok,
                format!(
                    "drop-rate loss {what}, {}: {shown} over the flood, {second:.1}% in its 2nd \
                     half (target <= {limit}%)",
                    s.kind.label()
                ),
            ));
            (
                shown,
                format!("<= {limit}%  {}", if ok { "PASS" } else { "FAIL" }),
            )
        }
        Config::Bpftrace => (shown, "(peers' per-drop stacks)".into()),
        Config::BpftraceCount => (shown, "(peers' in-kernel count)".into()),
        Config::Floor => (shown, "(the hook's own cost)".into()),
        _ => (
            shown,
            "(BPF stats on: for ns/drop, not a loss figure)".into(),
        ),
    }
}

fn exact_cell(s: &Summary) -> String {
    match s.exact {
        Some((ok, n)) if ok == n => format!("yes ({ok}/{n})"),
        Some((ok, n)) => format!("NO ({ok}/{n}, {:+})", s.worst_diff),
        None => "-".into(),
    }
}

/// The exact-count line alone (the breakdown's).
pub fn exact_line(plan: &[(Kind, Config)], runs: &[Run]) -> String {
    let sums: Vec<Summary> = plan.iter().map(|&(k, c)| summarize(k, c, runs)).collect();
    let mut out = String::new();
    exact_summary(&mut out, &sums, &mut Vec::new());
    out
}

fn exact_summary(out: &mut String, sums: &[Summary], verdicts: &mut Vec<Verdict>) {
    let counted: Vec<&Summary> = sums.iter().filter(|s| s.exact.is_some()).collect();
    if counted.is_empty() {
        return;
    }
    let (ok, n) = counted
        .iter()
        .filter_map(|s| s.exact)
        .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
    let worst = counted
        .iter()
        .map(|s| s.worst_diff)
        .max_by_key(|d| d.abs())
        .unwrap_or(0);
    let invariant = counted.iter().all(|s| s.invariant_ok);
    let overflow = counted.iter().map(|s| s.overflow).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "exact: NO_SOCKET @ __udp4_lib_rcv == UDP datagrams sent and IP_NOPROTO == raw packets \
         sent in {ok}/{n} dropscope runs (largest difference {worst:+}); sum(keys) + overflow == \
         total: {}; overflow max {overflow}",
        if invariant { "yes" } else { "NO" }
    );
    verdicts.push(verdict(
        ok == n && invariant,
        format!(
            "exact counts: {ok}/{n} runs exact, invariant {}",
            if invariant { "holds" } else { "BROKEN" }
        ),
    ));
}

fn bpf_table(out: &mut String, sums: &[Summary], verdicts: &mut Vec<Verdict>) {
    let _ = writeln!(
        out,
        "\n2. BPF ns per drop (the probe's fdinfo run_time_ns / run_cnt, median over the rounds; \
         above floor = median of the per-round differences to the empty program on the same \
         hook and flood)"
    );
    let _ = writeln!(
        out,
        "{:<17} {:<38} {:>11} {:>11} {:>12} {:>12} {:>9}  target",
        "flood", "configuration", "whole", "2nd half", "above floor", "(2nd half)", "runs/pkt"
    );
    for s in sums {
        let (Some(ns), Some(second), Some(per)) =
            (s.ns_per_drop, s.second_half_ns, s.runs_per_datagram)
        else {
            continue;
        };
        let above = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:+.1} ns"));
        // Counting against the floor; attribution against counting; a filtered-out drop
        // against the floor.
        let counting = sums
            .iter()
            .find(|c| c.kind == s.kind && c.config == Config::StatsCounting)
            .and_then(|c| c.above_floor);
        let target = match (s.config, s.above_floor) {
            (Config::StatsCounting | Config::StatsFiltered, Some(above)) => {
                let (limit, what) = if s.config == Config::StatsCounting {
                    (
                        if s.kind == Kind::Single {
                            NS_ABOVE_FLOOR
                        } else {
                            NS_ABOVE_FLOOR_INTERLEAVED
                        },
                        "counting (stacks off, --by reason,location)",
                    )
                } else {
                    (NS_FILTERED, "a drop filtered out in the kernel")
                };
                let ok = above <= limit;
                verdicts.push(verdict(
                    ok,
                    format!(
                        "BPF cost of {what}, {}: {above:+.1} ns/drop above the empty program \
                         ({ns:.1} ns against {:.1}) (target <= {limit})",
                        s.kind.label(),
                        ns - above
                    ),
                ));
                format!("<= {limit} ns above  {}", if ok { "PASS" } else { "FAIL" })
            }
            (Config::StatsNoStacks, Some(above)) if counting.is_some() => {
                let extra = above - counting.unwrap_or_default();
                let ok = extra <= NS_ATTRIBUTION;
                verdicts.push(verdict(
                    ok,
                    format!(
                        "BPF cost of attribution (namespace, interface), {}: \
                         {extra:+.1} ns/drop over counting only (target <= {NS_ATTRIBUTION})",
                        s.kind.label(),
                    ),
                ));
                format!(
                    "<= {NS_ATTRIBUTION} ns over counting  {}",
                    if ok { "PASS" } else { "FAIL" }
                )
            }
            (Config::StatsProtocol, Some(above)) => {
                let attribution = sums
                    .iter()
                    .find(|c| c.kind == s.kind && c.config == Config::StatsNoStacks)
                    .and_then(|c| c.above_floor);
                match attribution {
                    Some(a) => {
                        let extra = above - a;
                        let ok = extra <= NS_PROTOCOL;
                        verdicts.push(verdict(
                            ok,
                            format!(
                                "BPF cost of protocol, {}: {extra:+.1} ns/drop over namespace \
                                 and interface (target <= {NS_PROTOCOL})",
                                s.kind.label(),
                            ),
                        ));
                        format!(
                            "<= {NS_PROTOCOL} ns over namespace, interface  {}",
                            if ok { "PASS" } else { "FAIL" }
                        )
                    }
                    None => String::new(),
                }
            }
            (Config::StatsStacks, Some(above)) => {
                // Over the same grouping (the default) without stacks.
                let without = sums
                    .iter()
                    .find(|c| c.kind == s.kind && c.config == Config::StatsProtocol)
                    .and_then(|c| c.above_floor);
                match without {
                    Some(w) => {
                        let extra = above - w;
                        let ok = extra <= NS_STACKS;
                        verdicts.push(verdict(
                            ok,
                            format!(
                                "BPF cost of stacks (default sampling), {}: {extra:+.1} ns/drop \
                                 over the default grouping without stacks (target <= \
                                 {NS_STACKS})",
                                s.kind.label(),
                            ),
                        ));
                        format!(
                            "<= {NS_STACKS} ns over the default without stacks  {}",
                            if ok { "PASS" } else { "FAIL" }
                        )
                    }
                    None => String::new(),
                }
            }
            (Config::StatsBare, _) => "(the floor)".into(),
            (Config::StatsFloor, _) if s.above_floor.is_some() => {
                "(dropscope's empty program, above the bare floor)".into()
            }
            (Config::StatsFloor, _) => "(the floor)".into(),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<17} {:<38} {:>8.1} ns {:>8.1} ns {:>12} {:>12} {per:>9.3}  {target}",
            s.kind.label(),
            s.config.label(),
            ns,
            second,
            above(s.above_floor),
            above(s.second_half_above_floor),
        );
    }
}

fn collector_section(out: &mut String, scaling: &Outcome<Scaling>, verdicts: &mut Vec<Verdict>) {
    let _ = writeln!(
        out,
        "\n3. Collector cost per poll (dropscope report --no-stacks --bench-keys N during the \
         single-key flood, so every poll reads the counts; polls nominal: one per half interval)"
    );
    let scaling = match scaling {
        Outcome::Measured(s) => s,
        Outcome::Skipped(why) => {
            let _ = writeln!(out, "SKIPPED: {why}");
            verdicts.push(Verdict {
                status: "SKIP",
                what: format!("collector cost per poll: {why}"),
            });
            return;
        }
    };
    let rows = &scaling.rows;
    let _ = writeln!(
        out,
        "{:>10} {:>16} {:>7} {:>14} {:>15} {:>14}",
        "live keys", "counters/poll", "polls", "CPU us/poll", "syscalls/poll", "bpf()/poll"
    );
    for row in rows {
        let (sc, bpf) = row.syscalls.map_or_else(
            || ("n/a".into(), "n/a".into()),
            |(a, b)| (format!("{a:.2}"), format!("{b:.2}")),
        );
        let _ = writeln!(
            out,
            "{:>10} {:>16} {:>7.0} {:>14.1} {:>15} {:>14}",
            thousands(f64::from(row.keys) + 1.0),
            thousands(row.reads as f64),
            row.polls,
            row.cpu_us,
            sc,
            bpf
        );
    }
    let _ = writeln!(
        out,
        "(the bpf() per poll is the probe's run statistics, read once per poll while drops \
         arrive; the counts themselves are mmap loads)"
    );
    syscall_verdict(rows, verdicts);
    let Some(p) = scaling.projection else {
        let _ = writeln!(out, "(too few points to fit the cost per key)");
        return;
    };
    let cpus = collector::BIG_HOST_CPUS;
    let poll_ms = collector::DEFAULT_POLL_MS;
    let at = |keys: f64| p.poll_us(keys) / 1e3;
    let _ = writeln!(
        out,
        "fit here: {:.1} us per poll + {:.3} us per live key. Reading one key's counters, timed \
         with the reader's access pattern: {:.4} us on {} CPUs, {:.4} us on {cpus}.",
        p.fit.fixed_us,
        p.fit.per_key_us,
        p.read_here_us,
        host_cpus(rows),
        p.read_big_us,
    );
    let _ = writeln!(
        out,
        "projected to {cpus} CPUs: {:.2} ms per poll at 1,000 keys, {:.2} ms at 10,000; with a \
         poll every {poll_ms:.0} ms under drops (default 1 s interval) it takes 10% of a core \
         at {} keys and the whole interval at {} keys",
        at(1_000.0),
        at(10_000.0),
        thousands(p.keys_for(poll_ms * 1e3 / 10.0)),
        thousands(p.keys_for(poll_ms * 1e3)),
    );
}

/// CPUs of this host, from the rows (counters per poll / keys).
fn host_cpus(rows: &[collector::Row]) -> u64 {
    rows.first()
        .map_or(0, |r| r.reads / (u64::from(r.keys) + 1))
}

/// Syscalls per poll must not grow with the keys: the counts are mmap loads, and a batch
/// syscall happens only when keys were added.
fn syscall_verdict(rows: &[collector::Row], verdicts: &mut Vec<Verdict>) {
    let per_poll: Vec<(f64, f64)> = rows.iter().filter_map(|r| r.syscalls).collect();
    let (Some(first), Some(last)) = (per_poll.first(), per_poll.last()) else {
        verdicts.push(Verdict {
            status: "SKIP",
            what: "collector syscalls per poll: no syscall counter".into(),
        });
        return;
    };
    let ok = per_poll.len() == rows.len() && last.1 <= first.1 + 0.25 && last.0 <= first.0 + 1.0;
    verdicts.push(verdict(
        ok,
        format!(
            "collector syscalls per poll do not grow with keys: {:.2} (bpf() {:.2}) at {} keys, \
             {:.2} (bpf() {:.2}) at {} keys",
            first.0,
            first.1,
            thousands(f64::from(rows[0].keys) + 1.0),
            last.0,
            last.1,
            thousands(f64::from(rows[rows.len() - 1].keys) + 1.0),
        ),
    ));
}

/// Only the TUI's cost (`cargo xtask bench --syscalls`), with its verdicts.
pub fn render_tui(method: Option<Method>, tui: &Outcome<TuiCost>) -> String {
    let (mut out, mut verdicts) = (String::new(), Vec::new());
    tui_table(&mut out, method, tui, None, &mut verdicts);
    verdict_section(&mut out, &verdicts);
    out
}

fn verdict_section(out: &mut String, verdicts: &[Verdict]) {
    let _ = writeln!(out, "\nVerdict");
    for v in verdicts {
        let _ = writeln!(out, "  {:<5} {}", v.status, v.what);
    }
}

fn tui_table(
    out: &mut String,
    method: Option<Method>,
    tui: &Outcome<TuiCost>,
    baseline: Option<f64>,
    verdicts: &mut Vec<Verdict>,
) {
    let _ = writeln!(
        out,
        "\n4. Live TUI (tmux, no key pressed): dropscope's own cost"
    );
    let (Some(method), Outcome::Measured(t)) = (method, tui) else {
        let why = match tui {
            Outcome::Skipped(why) => why.clone(),
            Outcome::Measured(_) => "neither perf nor strace works here".into(),
        };
        let _ = writeln!(out, "SKIPPED: {why}");
        verdicts.push(Verdict {
            status: "SKIP",
            what: format!("TUI cost: {why}"),
        });
        return;
    };
    let _ = writeln!(out, "syscalls counted with {}", method.describe());
    let _ = writeln!(
        out,
        "{:<7} {:>9} {:>14} {:>12} {:>12} {:>15} {:>7}  target",
        "phase", "window", "drops/s", "syscalls/s", "bpf() calls", "ctx switches/s", "CPU%"
    );
    first_row(out, &t.first);
    tui_row(out, "idle", &t.idle, true, verdicts);
    tui_row(out, "flood", &t.flood, false, verdicts);
    if let Some(base) = baseline {
        let rate = t.flood.per_sec(t.flood.sent);
        let _ = writeln!(
            out,
            "flood rate while the TUI runs (stacks on): {}/s = {:.3} of nothing attached",
            thousands(rate),
            rate / base
        );
    }
}

fn first_row(out: &mut String, w: &Window) {
    let _ = writeln!(
        out,
        "{:<7} {:>8.1}s {:>14} {:>12.1} {:>12} {:>15.1} {:>6.2}%  (one-time: a burst of {} drops, \
         the first symbolization)",
        "first",
        w.count_secs,
        w.drops
            .map_or_else(|| "n/a".into(), |d| thousands(w.per_sec(d))),
        w.syscalls_per_sec(),
        w.bpf_syscalls,
        w.per_sec(w.ctx_switches),
        w.cpu_percent(),
        thousands(w.sent as f64)
    );
}

fn tui_row(out: &mut String, phase: &str, w: &Window, idle: bool, verdicts: &mut Vec<Verdict>) {
    let drops = w
        .drops
        .map_or_else(|| "n/a".into(), |d| thousands(w.per_sec(d)));
    let sc = w.syscalls_per_sec();
    let ok_sc = sc <= TUI_SYSCALLS;
    let mut target = format!(
        "<= {TUI_SYSCALLS} syscalls/s {}",
        if ok_sc { "PASS" } else { "FAIL" }
    );
    verdicts.push(verdict(
        ok_sc,
        format!("TUI syscalls/s {phase}: {sc:.1} (target <= {TUI_SYSCALLS})"),
    ));
    if idle {
        let ok_bpf = w.bpf_syscalls == 0;
        let _ = write!(
            target,
            "; 0 bpf() idle {}",
            if ok_bpf { "PASS" } else { "FAIL" }
        );
        let during = w.drops.map_or_else(String::new, |d| {
            format!(", {d} drops on the machine meanwhile")
        });
        verdicts.push(verdict(
            ok_bpf,
            format!(
                "bpf() syscalls while idle: {} in {:.1} s (target 0){during}",
                w.bpf_syscalls, w.count_secs
            ),
        ));
    }
    let _ = writeln!(
        out,
        "{:<7} {:>8.1}s {:>14} {:>12.1} {:>12} {:>15.1} {:>6.2}%  {target}",
        phase,
        w.count_secs,
        drops,
        sc,
        w.bpf_syscalls,
        w.per_sec(w.ctx_switches),
        w.cpu_percent()
    );
}

fn flame_section(out: &mut String, flame: &Outcome<Flame>, verdicts: &mut Vec<Verdict>) {
    let _ = writeln!(
        out,
        "\n5. Flamegraph SVG of {} distinct stacks (dropscope example flame_bench)",
        examples::FLAME_STACKS
    );
    match flame {
        Outcome::Measured(f) => {
            let ok = f.median_ms < SVG_MS;
            let _ = writeln!(
                out,
                "{}   target < {SVG_MS} ms  {}",
                f.line,
                if ok { "PASS" } else { "FAIL" }
            );
            verdicts.push(verdict(
                ok,
                format!(
                    "SVG of 10,000 stacks: {:.1} ms (target < {SVG_MS} ms)",
                    f.median_ms
                ),
            ));
        }
        Outcome::Skipped(why) => {
            let _ = writeln!(out, "SKIPPED: {why}");
            verdicts.push(Verdict {
                status: "SKIP",
                what: format!("SVG of 10,000 stacks: {why}"),
            });
        }
    }
}

fn recording_section(
    out: &mut String,
    r: &Results,
    baseline: Option<f64>,
    verdicts: &mut Vec<Verdict>,
) {
    let _ = writeln!(
        out,
        "\n6. Recording: dropscope record for {} s at a steady flood of real drops",
        recording::RECORD_SECS
    );
    match &r.recording {
        Outcome::Measured(rec) => live_recording(out, rec, baseline),
        Outcome::Skipped(why) => {
            let _ = writeln!(out, "TODO: {why}");
            verdicts.push(Verdict {
                status: "TODO",
                what: format!("recording bytes/s at a steady flood: {why}"),
            });
        }
    }
    let _ = writeln!(
        out,
        "synthetic one-hour recordings at 1 frame/s (dropscope example record_bench):"
    );
    match &r.record_figures {
        Outcome::Measured(f) => synthetic_recording(out, f, verdicts),
        Outcome::Skipped(why) => {
            let _ = writeln!(
                out,
                "TODO: bytes/s at 10, 100 and 1,000 keys and the seek time: {why}"
            );
            verdicts.push(Verdict {
                status: "TODO",
                what: format!("recording < 2 KB/s at 100 keys, seek < 100 ms: {why}"),
            });
        }
    }
}

fn live_recording(out: &mut String, rec: &Recording, baseline: Option<f64>) {
    let _ = writeln!(
        out,
        "flood {}/s{}, keys in the recording: {}; {:.0} B/s steady (file {} bytes after {} s)",
        thousands(rec.flood_rate),
        baseline.map_or_else(String::new, |b| format!(
            " ({:.3} of nothing attached)",
            rec.flood_rate / b
        )),
        rec.keys,
        rec.steady_bytes_per_sec,
        thousands(rec.file_bytes as f64),
        recording::RECORD_SECS
    );
    let perf = rec.perf_bytes_per_sec.map_or_else(
        || "perf record unavailable".into(),
        |p| format!("{} B/s", thousands(p)),
    );
    let _ = writeln!(
        out,
        "per-event capture of the same drops (perf record -a -e skb:kfree_skb): {perf}"
    );
}

fn synthetic_recording(out: &mut String, f: &RecordFigures, verdicts: &mut Vec<Verdict>) {
    let _ = writeln!(
        out,
        "{:>7} {:>9} {:>20} {:>10}  target",
        "keys", "changing", "drops/s per key", "B/s"
    );
    for row in &f.sizes {
        let target = if row.keys == 100 {
            let ok = row.bytes < RECORD_BPS;
            format!("< 2 KB/s  {}", if ok { "PASS" } else { "FAIL" })
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:>7} {:>9} {:>20} {:>10.0}  {target}",
            thousands(row.keys as f64),
            thousands(row.changing as f64),
            thousands(row.rate as f64),
            row.bytes
        );
    }
    let worst = f
        .sizes
        .iter()
        .filter(|row| row.keys == 100)
        .map(|row| row.bytes)
        .fold(f64::NAN, f64::max);
    if worst.is_finite() {
        verdicts.push(verdict(
            worst < RECORD_BPS,
            format!(
                "recording at 100 keys, 1 frame/s: at most {worst:.0} B/s over the drop rates \
                 (target < 2 KB/s)"
            ),
        ));
    }
    let seek_ms = f.seek.as_secs_f64() * 1e3;
    let ok = seek_ms < SEEK_MS;
    let _ = writeln!(
        out,
        "{}   seek target < {SEEK_MS} ms  {}",
        f.line,
        if ok { "PASS" } else { "FAIL" }
    );
    verdicts.push(verdict(
        ok,
        format!(
            "seek to the middle of a one-hour recording: {seek_ms:.3} ms (target < {SEEK_MS} ms)"
        ),
    ));
}
