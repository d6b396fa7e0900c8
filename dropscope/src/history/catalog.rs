//! A history directory read back: each segment opened on its own (a damaged or crafted one is
//! refused alone, with a note, while the rest reads), placed on the wall clock, and the spans
//! they cover with the gaps between.
use std::{path::Path, time::Duration};

use super::dir::{self, SegmentFile};
use crate::{model::SessionInfo, record::Recording};

/// Consecutive snapshots of one session further apart than this leave a gap between them (the
/// writer was paused, or behind): at the default interval a snapshot comes every second.
pub const SEAM: Duration = Duration::from_secs(30);

/// Wall-clock time of a snapshot taken `elapsed` into the session `info`, ms since the epoch.
///
/// Derived from the session's start and the monotonic session time, so a clock stepped during
/// a session neither reorders nor moves its snapshots.
pub fn wall_ms(info: &SessionInfo, elapsed: Duration) -> u64 {
    let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    info.started_unix_ms.saturating_add(ms)
}

/// A segment that reads.
#[derive(Debug)]
pub struct Piece {
    /// Its file.
    pub file: SegmentFile,
    /// The session it belongs to (machine, kernel, start, probe).
    pub info: SessionInfo,
    /// Session time of its first and last snapshot.
    pub first: Duration,
    /// See `first`.
    pub last: Duration,
    /// Snapshots it holds.
    pub snapshots: usize,
    /// Whether it ends with the end marker (else it was cut: a kill, a crash, a full disk).
    pub finished: bool,
    /// What the reader found wrong with it (a cut tail), kept.
    pub warnings: Vec<String>,
    /// Its session's cumulative totals a minute apart (session time, total), from its index;
    /// empty when it was read whole.
    pub totals: Vec<(Duration, u64)>,
}

impl Piece {
    /// Wall-clock time of its first snapshot, ms since the epoch.
    pub fn from_ms(&self) -> u64 {
        wall_ms(&self.info, self.first)
    }

    /// Wall-clock time of its last snapshot, ms since the epoch.
    pub fn to_ms(&self) -> u64 {
        wall_ms(&self.info, self.last)
    }

    /// Opens it again, for its snapshots.
    pub fn open(&self) -> anyhow::Result<Recording> {
        Recording::open(&self.file.path)
            .map_err(|e| anyhow::Error::new(e).context(format!("reading {}", shown(&self.file))))
    }
}

/// A segment refused, and why.
#[derive(Debug)]
pub struct Refused {
    /// Its file.
    pub file: SegmentFile,
    /// Why it does not read.
    pub why: String,
}

/// A stretch of wall-clock time the history covers without a gap: pieces of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Wall-clock time of its first and last snapshot, ms since the epoch.
    pub from_ms: u64,
    /// See `from_ms`.
    pub to_ms: u64,
    /// Its pieces, as indices into [`Catalog::pieces`].
    pub pieces: std::ops::Range<usize>,
}

/// Every segment of a history directory, read or refused.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Segments that read, in order of writing.
    pub pieces: Vec<Piece>,
    /// Segments that do not, with why.
    pub refused: Vec<Refused>,
    /// Notes on the directory itself (entries left out).
    pub notes: Vec<String>,
}

/// A segment's file name, for messages.
pub(super) fn shown(f: &SegmentFile) -> String {
    let name = f.path.file_name().unwrap_or(f.path.as_os_str());
    crate::sanitize::terminal(&name.to_string_lossy()).into_owned()
}

impl Catalog {
    /// Opens every segment of `dir`: from its index where one matches the segment, else read
    /// whole (validating it as `replay` validates a recording).
    pub fn open(dir: &Path) -> anyhow::Result<Catalog> {
        let listing = dir::list(dir)?;
        let mut cat = Catalog {
            notes: listing.notes,
            ..Catalog::default()
        };
        for file in listing.segments {
            let idx = match super::index::load(&file.path) {
                super::index::Loaded::Verified(idx) => Some(idx),
                super::index::Loaded::Missing => None,
                super::index::Loaded::Rejected(why) => {
                    cat.notes.push(format!(
                        "segment {}: its index was not used ({}): read in full",
                        shown(&file),
                        crate::sanitize::terminal(&why)
                    ));
                    None
                }
            };
            let piece = match idx {
                Some(idx) => Ok(Piece {
                    first: idx.first(),
                    last: idx.last(),
                    snapshots: usize::try_from(idx.snapshots).unwrap_or(usize::MAX),
                    finished: idx.finished,
                    warnings: idx.warnings,
                    totals: (idx.totals.iter())
                        .map(|t| (Duration::from_millis(t[0]), t[1]))
                        .collect(),
                    info: idx.info,
                    file,
                }),
                None => Self::read_whole(file),
            };
            match piece {
                // Session time only goes forward: a segment of the same session that starts
                // before the one before it ends is a copy or crafted, and would reorder counts.
                Ok(p)
                    if cat
                        .pieces
                        .last()
                        .is_some_and(|b| b.info == p.info && p.first < b.last) =>
                {
                    cat.refused.push(Refused {
                        file: p.file,
                        why: "overlaps the segment before it (same session, earlier session \
                              time): a copy, or crafted"
                            .into(),
                    });
                }
                Ok(p) => cat.pieces.push(p),
                Err(r) => cat.refused.push(r),
            }
        }
        Ok(cat)
    }

    /// Reads segment `file` whole (as `replay` reads a recording).
    fn read_whole(file: SegmentFile) -> Result<Piece, Refused> {
        match Recording::open(&file.path) {
            Ok(rec) if !rec.is_empty() => Ok(Piece {
                info: rec.info().clone(),
                first: rec.start(),
                last: rec.duration(),
                snapshots: rec.len(),
                finished: rec.finished(),
                warnings: rec.warnings().to_vec(),
                totals: Vec::new(),
                file,
            }),
            Ok(_) => Err(Refused {
                file,
                why: "holds no snapshot".into(),
            }),
            Err(e) => Err(Refused {
                why: crate::sanitize::terminal(&e.to_string()).into_owned(),
                file,
            }),
        }
    }

    /// [`Catalog::open`] for a command that reads the history: each refused segment is said on
    /// stderr (the rest reads without it), and the covered range's first and last Unix ms are
    /// given with it; a history without a snapshot is an error.
    pub fn open_to_read(dir: &Path) -> anyhow::Result<(Catalog, (u64, u64))> {
        let cat = Catalog::open(dir)?;
        let where_ = crate::sanitize::terminal(&dir.to_string_lossy()).into_owned();
        for r in &cat.refused {
            eprintln!(
                "dropscope: warning: {where_}: segment {} refused: {} (the rest reads without it)",
                shown(&r.file),
                r.why
            );
        }
        for n in &cat.notes {
            eprintln!("dropscope: note: {where_}: {n}");
        }
        let Some(range) = cat.range() else {
            anyhow::bail!("the history {where_} holds no snapshot yet");
        };
        Ok((cat, range))
    }

    /// The first and last Unix ms the history covers; `None` without a snapshot.
    pub fn range(&self) -> Option<(u64, u64)> {
        let spans = self.spans();
        Some((
            spans.iter().map(|s| s.from_ms).min()?,
            spans.iter().map(|s| s.to_ms).max()?,
        ))
    }

    /// The spans covered: consecutive pieces of one session no more than [`SEAM`] apart; one
    /// that holds its session's first snapshot starts at the session's start.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans: Vec<Span> = Vec::new();
        for (i, p) in self.pieces.iter().enumerate() {
            if let Some(s) = spans.last_mut() {
                let prev = &self.pieces[i - 1];
                if prev.info == p.info && p.first >= prev.last && p.first - prev.last <= SEAM {
                    s.to_ms = s.to_ms.max(p.to_ms());
                    s.pieces.end = i + 1;
                    continue;
                }
            }
            // A session's first snapshot comes a poll after its start, and counts from zero
            // there: a span that holds it covers the session from its start.
            let from_ms = if p.first <= SEAM {
                p.info.started_unix_ms
            } else {
                p.from_ms()
            };
            spans.push(Span {
                from_ms,
                to_ms: p.to_ms(),
                pieces: i..i + 1,
            });
        }
        spans
    }
}
