//! A window of a history as one recording, for `replay DIR`: the snapshots of one span (one
//! session without a gap) between the window's ends, written to a private temporary file as they
//! are read, so memory holds one snapshot at a time whatever the window's length.
use std::path::Path;

use anyhow::{Context as _, bail};

use super::{
    catalog::{Catalog, wall_ms},
    input::window_of,
    timeline::Timeline,
    when::local,
};
use crate::{
    cli::InputWindow,
    record::{Recorder, Recording},
    sanitize::terminal,
};

/// The window `w` of the history in `dir` (by default its last hour), clipped to the span that
/// holds its end, as a recording; what lies outside that span is said on stderr.
pub fn open(dir: &Path, w: &InputWindow) -> anyhow::Result<(Recording, Timeline)> {
    let (cat, (lo, hi)) = Catalog::open_to_read(dir)?;
    let spans = cat.spans();
    let shown = terminal(&dir.to_string_lossy()).into_owned();
    let mut win = window_of(w, lo, hi, super::dir::now_unix_ms())?;
    if w.from.is_none() && w.since.is_none() {
        win.from_ms = win.to_ms.saturating_sub(3_600_000);
    }
    let Some(span) = spans
        .iter()
        .rev()
        .find(|s| s.from_ms <= win.to_ms && s.to_ms >= win.from_ms)
    else {
        bail!(
            "the history {shown} holds no snapshot between {} and {} (`dropscope history \
             {shown}` lists its ranges)",
            local(win.from_ms),
            local(win.to_ms)
        );
    };
    if span.from_ms > win.from_ms || spans.iter().filter(|s| s.to_ms >= win.from_ms).count() > 1 {
        eprintln!(
            "dropscope: note: replaying {} to {}, the one stretch without a gap that holds the \
             window's end; before it: not recorded, or another session (`dropscope history` \
             lists them; `report --input` counts across them)",
            local(span.from_ms.max(win.from_ms)),
            local(span.to_ms.min(win.to_ms)),
        );
    }
    let pieces = &cat.pieces[span.pieces.clone()];
    let info = &pieces[0].info;
    let tmp = tempfile::NamedTempFile::new().context("creating a temporary file for the window")?;
    let mut rec = Recorder::to_stream(Box::new(tmp.reopen()?), info)?;
    let mut written = 0usize;
    let mut first_ms = None;
    for p in pieces
        .iter()
        .filter(|p| p.to_ms() >= win.from_ms && p.from_ms() <= win.to_ms)
    {
        let seg = p.open()?;
        for s in seg.snapshots() {
            let s = s.with_context(|| format!("reading {}", p.file.path.display()))?;
            let at = wall_ms(info, s.elapsed);
            if at > win.to_ms {
                break;
            }
            if at >= win.from_ms {
                first_ms.get_or_insert(at);
                rec.write(&s)?;
                written += 1;
            }
        }
    }
    if written == 0 {
        bail!("the history {shown} holds no snapshot in that window");
    }
    rec.finish()?;
    let mut timeline = super::timeline::build(&cat, super::timeline::BUCKETS)?;
    timeline.replay_started_ms = info.started_unix_ms;
    timeline.replay_from_ms = first_ms.unwrap_or(win.from_ms);
    // The recording keeps its own descriptor; the name goes with `tmp`.
    Ok((Recording::open(tmp.path())?, timeline))
}
