//! A window of a history as one recording, for `replay DIR`: the snapshots of every span (each
//! session's stretches without a gap) between the window's ends, on one clock (the wall clock
//! from the first session's start), each later session's counts carried on from where the one
//! before ended so no count goes back; the gaps between them kept for the strip and the status
//! line. Written to a private temporary file as they are read, so memory holds one snapshot
//! (and the counts carried) at a time whatever the window's length.
use std::path::Path;

use anyhow::Context as _;

use super::{
    catalog::{Catalog, wall_ms},
    input::window_of,
    range::{self, Window},
    timeline::Timeline,
    when::local,
};
use crate::{
    cli::InputWindow,
    model::Snapshot,
    record::{Recorder, Recording},
    sanitize::terminal,
};

/// The window `w` of the history in `dir` (by default its last hour) across its sessions and
/// gaps, as a recording; notes on stderr where the window reaches past the history.
pub fn open(dir: &Path, w: &InputWindow) -> anyhow::Result<Opened> {
    let (cat, (lo, hi)) = Catalog::open_to_read(dir)?;
    let mut win = window_of(w, lo, hi, super::dir::now_unix_ms())?;
    if w.from.is_none() && w.since.is_none() {
        win.from_ms = win.to_ms.saturating_sub(DEFAULT_LENGTH_MS);
    }
    let opened = open_window(dir, &cat, hi, win)?;
    for n in &opened.notes {
        eprintln!("dropscope: note: {n}");
    }
    Ok(opened)
}

/// The window of `len_ms` around wall time `at_ms` (a jump to a time outside the window
/// replayed: `t` in the TUI), within the history's range, as a recording; the catalog read
/// again, so a history still written to has grown. Nothing goes to stderr (the screen is up):
/// refused segments and notes come back in [`Opened::notes`].
pub fn open_around(dir: &Path, at_ms: u64, len_ms: u64) -> anyhow::Result<Opened> {
    let cat = Catalog::open(dir)?;
    let Some((lo, hi)) = cat.range() else {
        anyhow::bail!("the history holds no snapshot any more");
    };
    if at_ms < lo || at_ms > hi {
        anyhow::bail!(
            "{} is outside the history ({} – {})",
            local(at_ms),
            local(lo),
            local(hi)
        );
    }
    let win = around(at_ms, len_ms, lo, hi);
    let mut opened = open_window(dir, &cat, hi, win)?;
    let mut notes: Vec<String> = (cat.refused.iter())
        .map(|r| {
            format!(
                "segment {} refused: {}",
                super::catalog::shown(&r.file),
                r.why
            )
        })
        .chain(cat.notes.iter().cloned())
        .collect();
    notes.append(&mut opened.notes);
    opened.notes = notes;
    Ok(opened)
}

/// What `replay DIR` shows when no window is given: the last hour.
pub const DEFAULT_LENGTH_MS: u64 = 3_600_000;

/// The window of `len_ms` centred on `at_ms`, moved (not cut) to lie within `lo..=hi` where
/// the range is long enough.
pub fn around(at_ms: u64, len_ms: u64, lo: u64, hi: u64) -> Window {
    let len = len_ms.min(hi.saturating_sub(lo));
    let from_ms = at_ms
        .saturating_sub(len / 2)
        .clamp(lo, hi.saturating_sub(len));
    Window {
        from_ms,
        to_ms: from_ms + len,
    }
}

/// A window of a history opened for replay: its recording, the timeline of the whole history
/// placed on the recording's clock, the window asked, and notes.
pub struct Opened {
    /// The window's snapshots, one clock, counts carried across sessions.
    pub recording: Recording,
    /// The strip of the whole history, with the window's start, clock and gaps.
    pub timeline: Timeline,
    /// The window asked for (wall clock).
    pub window: Window,
    /// Where the window reaches past the history, and the like.
    pub notes: Vec<String>,
}

/// The window `win` of `cat` (the history in `dir`, its last snapshot at `hi`) as a recording.
fn open_window(dir: &Path, cat: &Catalog, hi: u64, win: Window) -> anyhow::Result<Opened> {
    let shown = terminal(&dir.to_string_lossy()).into_owned();
    let (tmp, origin, first_ms, notes) = write_window(cat, win)?.ok_or_else(|| {
        anyhow::anyhow!(
            "the history {shown} holds no snapshot between {} and {} (`dropscope history \
                 {shown}` lists its ranges)",
            local(win.from_ms),
            local(win.to_ms)
        )
    })?;
    let mut timeline = super::timeline::build(cat, super::timeline::BUCKETS)?;
    timeline.replay_started_ms = origin;
    timeline.replay_from_ms = first_ms;
    let (_, gaps) = range::coverage(
        &cat.spans(),
        Window {
            from_ms: first_ms,
            to_ms: win.to_ms.min(hi),
        },
    );
    timeline.gaps = gaps;
    // The recording keeps its own descriptor; the name goes with `tmp`.
    Ok(Opened {
        recording: Recording::open(tmp.path())?,
        timeline,
        window: win,
        notes,
    })
}

/// A replay's temporary recording, where its clock starts (ms since the epoch), the wall time
/// of its first snapshot, and notes.
type Written = (tempfile::NamedTempFile, u64, u64, Vec<String>);

/// Writes the snapshots of `cat` within `win` to a temporary recording, on one clock from the
/// first session's start, counts carried across sessions; `None` if none is in the window.
pub fn write_window(cat: &Catalog, win: Window) -> anyhow::Result<Option<Written>> {
    let pieces: Vec<_> = (cat.pieces.iter())
        .filter(|p| p.to_ms() >= win.from_ms && p.from_ms() <= win.to_ms)
        .collect();
    let Some(first) = pieces.first() else {
        return Ok(None);
    };
    let origin = first.info.started_unix_ms;
    let mut info = first.info.clone();
    info.started_unix_ms = origin;
    let tmp = tempfile::NamedTempFile::new().context("creating a temporary file for the window")?;
    let mut rec = Recorder::to_stream(Box::new(tmp.reopen()?), &info)?;
    let mut notes = Vec::new();
    // The counts of the sessions before (their last snapshot's), carried onto later ones.
    let mut carried: Option<Snapshot> = None;
    let mut last: Option<(usize, Snapshot)> = None;
    let mut session = 0usize;
    let mut prev_info = &first.info;
    let (mut written, mut first_ms, mut last_elapsed) = (0usize, None, None);
    for p in pieces {
        if p.info != *prev_info {
            session += 1;
            prev_info = &p.info;
        }
        let seg = p.open()?;
        for s in seg.snapshots() {
            let mut s = s.with_context(|| format!("reading {}", p.file.path.display()))?;
            let at = wall_ms(&p.info, s.elapsed);
            if at > win.to_ms {
                break;
            }
            if at < win.from_ms {
                continue;
            }
            if let Some((_, end)) = last.take_if(|(n, _)| *n != session) {
                let ended = Snapshot {
                    drops: end.drops,
                    stacks: end.stacks,
                    total: end.total,
                    overflow: end.overflow,
                    ..Default::default()
                };
                carried = Some(match carried.take() {
                    Some(c) => range::sum(vec![c, ended]),
                    None => ended,
                });
            }
            let elapsed = std::time::Duration::from_millis(at.saturating_sub(origin));
            // A clock set back between sessions: what would go back in time is left out.
            if last_elapsed.is_some_and(|l| elapsed <= l) {
                if notes.is_empty() {
                    notes.push(format!(
                        "snapshots at {} and after overlap the session before on the wall \
                         clock (a clock set back): left out of the replay",
                        local(at)
                    ));
                }
                continue;
            }
            last = Some((session, s.clone()));
            if let Some(c) = &carried {
                let kernel = s.kernel.take();
                s = range::sum(vec![c.clone(), s]);
                s.kernel = kernel;
            }
            s.elapsed = elapsed;
            first_ms.get_or_insert(at);
            last_elapsed = Some(elapsed);
            rec.write(&s)?;
            written += 1;
        }
    }
    if written == 0 {
        return Ok(None);
    }
    rec.finish()?;
    Ok(Some((tmp, origin, first_ms.unwrap_or(win.from_ms), notes)))
}
