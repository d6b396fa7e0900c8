//! Flamegraph snapshot files: a timestamped name that is never reused, written atomically.
use std::{
    io::Write,
    path::{Path, PathBuf},
    time::SystemTime,
};

use anyhow::Context;

use super::{GraphMeta, write_svg};
use crate::{
    model::snapshot::StackCount,
    outfile::{OutFile, OutFileError},
};

/// How many `-N` suffixes to try before giving up on a name.
const MAX_SUFFIX: u32 = 10_000;

/// Writes a flamegraph of `stacks` to `dir/dropscope-flame-<YYYYmmdd-HHMMSSZ>[-N].svg`, stamped
/// with `now` in UTC as recordings are.
///
/// An existing file is never overwritten: the first free `-N` suffix is used instead. The graph
/// is written to a private temporary file in `dir` and then given its final name, so a reader
/// never sees a partial file. Returns the path written.
pub fn snapshot_svg(
    stacks: &[StackCount],
    meta: &GraphMeta,
    dir: &Path,
    now: SystemTime,
) -> anyhow::Result<PathBuf> {
    let mut svg = Vec::new();
    write_svg(stacks, meta, &mut svg)?;
    let stamp = crate::format::file_stamp(now);
    write_new_file(dir, &format!("dropscope-flame-{stamp}"), "svg", &svg)
}

/// Writes `bytes` to `dir/<stem>[-N].<ext>`, the first such name that nothing has yet.
///
/// The file is written privately next to its name and linked into place (see
/// [`OutFile`]): never through a symlink, never over anything.
pub(super) fn write_new_file(
    dir: &Path,
    stem: &str,
    ext: &str,
    bytes: &[u8],
) -> anyhow::Result<PathBuf> {
    let first = dir.join(format!("{stem}.{ext}"));
    let out = OutFile::create(&dir.join(format!("{stem}.tmp")), false)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    out.file()
        .write_all(bytes)
        .with_context(|| format!("writing {}", first.display()))?;
    let names = (0..MAX_SUFFIX).map(|n| {
        if n == 0 {
            first.clone()
        } else {
            dir.join(format!("{stem}-{n}.{ext}"))
        }
    });
    out.commit_first_free(names).map_err(|e| match e {
        OutFileError::Exists(_) => anyhow::anyhow!(
            "no free file name for {stem}.{ext} in {} (tried {MAX_SUFFIX})",
            dir.display()
        ),
        e => anyhow::Error::new(e),
    })
}
