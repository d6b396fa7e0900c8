//! Flamegraphs of sampled drop stacks: folded text, SVG, differential SVG and snapshot files.
//!
//! Every graph is rooted at the drop reason, so it splits first by why the kernel dropped, then
//! by where (the namespace and device, where the counts have them), then by the call path that
//! led there. Stack weights are sampled estimates (the sum of sampling
//! periods), and every graph says so; the exact per-location counts live elsewhere.
mod folded;
mod frames;
pub mod snapshot;
mod synthetic;

use std::{
    io::{BufWriter, Write},
    time::Duration,
};

use anyhow::{Context, bail};
use inferno::flamegraph::{self as inferno_fg, Palette, color::BasicPalette};

pub use self::{
    folded::{MAX_FOLDED_BYTES, MAX_RECTANGLES, folded, read_folded},
    frames::{function_name, without_offsets},
    synthetic::synthetic_stacks,
};
use crate::{
    model::snapshot::{SessionInfo, StackCount},
    sanitize,
};

/// What the counts are called in the graph's tooltips.
const COUNT_NAME: &str = "drops (est.)";

/// Longest filter shown in full in a title.
const MAX_FILTER_CHARS: usize = 60;

/// What a graph shows, for its title.
#[derive(Clone, Copy, Debug)]
pub struct GraphMeta<'a> {
    /// The session the stacks come from.
    pub info: &'a SessionInfo,
    /// The time window shown, `(from, to)`, relative to the session start.
    pub window: (Duration, Duration),
    /// The filter in force, if any.
    pub filter: Option<&'a str>,
}

/// Writes an inferno flamegraph SVG of `stacks` to `out`.
///
/// The root frames are drop reasons; the title carries host, kernel, time window and filter;
/// the subtitle says that stack counts are sampled estimates. The SVG is searchable and
/// zoomable in a browser. Fails without writing anything when no stack has any weight.
pub fn write_svg(stacks: &[StackCount], meta: &GraphMeta, out: impl Write) -> anyhow::Result<()> {
    let checked = folded::check_folded(&folded(stacks), "the sampled stacks")?;
    let text = folded::limit_rectangles(&checked.text, MAX_RECTANGLES);
    if text.is_empty() {
        bail!(
            "no sampled stacks to draw in this view yet (stacks may be off, or no drops were seen)"
        );
    }
    let subtitle = format!(
        "Stack counts are sampled estimates; per-location counts are exact. Root frame: drop reason, then namespace and device.{}",
        started(meta.info)
    );
    let mut opts = options(title(meta, ""), subtitle);
    render(&mut opts, &text, out)
}

/// Writes an inferno differential flamegraph SVG comparing two folded texts to `out`.
///
/// `before_folded` is the baseline and `after_folded` the window being looked at (the one
/// `meta` describes). Widths are the after counts; red frames dropped more than in the baseline,
/// blue ones less. When nothing was dropped after (the change fixed every drop), widths are the
/// baseline's instead, all in blue, and the subtitle says so. Both inputs are checked first:
/// an invalid line is an error naming it. The baseline gets the limits of a recording's stacks,
/// and each side at most half of [`MAX_RECTANGLES`].
pub fn write_diff_svg(
    before_folded: &str,
    after_folded: &str,
    meta: &GraphMeta,
    out: impl Write,
) -> anyhow::Result<()> {
    let before = folded::check_folded(before_folded, "baseline")?;
    let after = folded::check_folded(after_folded, "compared stacks")?;
    if before.total == 0 && after.total == 0 {
        bail!("nothing to compare: neither the baseline nor the compared stacks have any drops");
    }
    // With no drops after, draw the baseline's widths: swap the columns and negate the
    // difference, so colours still mean after minus before.
    let negate = after.total == 0;
    let (first, second) = if negate {
        (&after, &before)
    } else {
        (&before, &after)
    };
    let first = folded::limit_rectangles(&first.text, MAX_RECTANGLES / 2);
    let second = folded::limit_rectangles(&second.text, MAX_RECTANGLES / 2);
    let mut merged = Vec::with_capacity(first.len() + second.len());
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        first.as_bytes(),
        second.as_bytes(),
        &mut merged,
    )
    .context("merging the baseline and compared stacks")?;
    let merged = String::from_utf8(merged).context("merged stacks are not UTF-8")?;
    let widths = if negate {
        "widths: baseline (no drops after)"
    } else {
        "widths: after"
    };
    let subtitle = format!(
        "Change vs baseline, {widths}; red: more drops, blue: fewer. Stack counts are sampled estimates.{}",
        started(meta.info)
    );
    let mut opts = options(title(meta, " vs baseline"), subtitle);
    opts.negate_differentials = negate;
    render(&mut opts, &merged, out)
}

/// Inferno options shared by every graph.
fn options(title: String, subtitle: String) -> inferno_fg::Options<'static> {
    let mut opts = inferno_fg::Options::default();
    opts.title = title;
    opts.subtitle = Some(subtitle);
    opts.count_name = COUNT_NAME.to_string();
    opts.colors = Palette::Basic(BasicPalette::Hot);
    // Colour by a hash of the name, so a frame keeps its colour from one graph to the next.
    opts.hash = true;
    opts
}

/// Renders folded lines (one or two counts each) as SVG into `out`.
fn render(opts: &mut inferno_fg::Options<'_>, text: &str, out: impl Write) -> anyhow::Result<()> {
    let mut out = BufWriter::new(out);
    inferno_fg::from_lines(opts, text.lines(), &mut out).context("rendering the flamegraph")?;
    out.flush().context("writing the flamegraph")?;
    Ok(())
}

/// `Kernel packet drops · host · Linux kernel · window +a → +b[suffix] · filter: f`.
///
/// Host, kernel and filter are escaped for SVG and cut to [`MAX_FILTER_CHARS`].
fn title(meta: &GraphMeta, suffix: &str) -> String {
    let field = |s: &str| sanitize::truncate(&sanitize::svg(s), MAX_FILTER_CHARS).into_owned();
    let host = field(non_empty(&meta.info.host, "unknown host"));
    let kernel = field(non_empty(&meta.info.kernel, "unknown"));
    let (from, to) = meta.window;
    let mut title = format!(
        "Kernel packet drops · {host} · Linux {kernel} · window +{} → +{}{suffix}",
        offset(from),
        offset(to)
    );
    if let Some(filter) = meta.filter.map(str::trim).filter(|f| !f.is_empty()) {
        title.push_str(" · filter: ");
        // Inferno does not wrap the title: keep a long filter from running off the graph.
        title.push_str(&field(filter));
    }
    title
}

/// ` Session start: <local time>.`, or nothing when the start is unknown.
fn started(info: &SessionInfo) -> String {
    if info.started_unix_ms == 0 {
        return String::new();
    }
    match local_datetime(info.started_unix_ms / 1000) {
        Some(when) => format!(" Session start: {when}."),
        None => String::new(),
    }
}

fn non_empty<'a>(s: &'a str, otherwise: &'a str) -> &'a str {
    let s = s.trim();
    if s.is_empty() { otherwise } else { s }
}

/// An offset from the session start: `m:ss` or `h:mm:ss`, with `.mmm` when not whole seconds.
fn offset(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    };
    if d.subsec_millis() != 0 {
        out.push_str(&format!(".{:03}", d.subsec_millis()));
    }
    out
}

/// `YYYY-mm-dd HH:MM:SS +hhmm` in local time, for seconds since the Unix epoch.
fn local_datetime(unix_secs: u64) -> Option<String> {
    let tm = local_tm(unix_secs)?;
    let off = tm.tm_gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    Some(format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} {sign}{:02}{:02}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        off.abs() / 60,
        off.abs() % 60
    ))
}

/// Broken-down local time for seconds since the Unix epoch.
fn local_tm(unix_secs: u64) -> Option<libc::tm> {
    // time_t by inference: musl's libc crate deprecates naming it (it is to become 64-bit).
    let t = unix_secs.try_into().ok()?;
    let mut tm = std::mem::MaybeUninit::<libc::tm>::uninit();
    // SAFETY: both pointers are valid for the call; localtime_r is the reentrant variant and
    // writes only to `tm`, which it fully initializes when it returns non-null.
    let ok = unsafe { !libc::localtime_r(&t, tm.as_mut_ptr()).is_null() };
    // SAFETY: localtime_r returned non-null, so it filled in `tm`.
    ok.then(|| unsafe { tm.assume_init() })
}

#[cfg(test)]
mod tests;
