//! Flamegraph snapshot files: a timestamped name that is never reused, written atomically.
use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};

use super::{GraphMeta, write_svg};
use crate::model::snapshot::StackCount;

/// How many `-N` suffixes to try before giving up on a name.
const MAX_SUFFIX: u32 = 10_000;

/// Writes a flamegraph of `stacks` to `dir/dropscope-flame-<YYYYmmdd-HHMMSS>[-N].svg`.
///
/// The timestamp is local time. An existing file is never overwritten: the first free `-N`
/// suffix is used instead. The graph is written to a hidden temporary file in `dir` and then
/// linked to its final name, so a reader never sees a partial file. Returns the path written.
pub fn snapshot_svg(
    stacks: &[StackCount],
    meta: &GraphMeta,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let mut svg = Vec::new();
    write_svg(stacks, meta, &mut svg)?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let stamp = local_tm(secs)
        .map(|tm| {
            format!(
                "{:04}{:02}{:02}-{:02}{:02}{:02}",
                i64::from(tm.tm_year) + 1900,
                tm.tm_mon + 1,
                tm.tm_mday,
                tm.tm_hour,
                tm.tm_min,
                tm.tm_sec
            )
        })
        .context("cannot convert the current time to local time")?;
    write_new_file(dir, &format!("dropscope-flame-{stamp}"), "svg", &svg)
}

/// Writes `bytes` to `dir/<stem>[-N].<ext>`, the first such name that does not exist yet.
pub(super) fn write_new_file(
    dir: &Path,
    stem: &str,
    ext: &str,
    bytes: &[u8],
) -> anyhow::Result<PathBuf> {
    let tmp = TempFile::create(dir, stem)?;
    let mut file = &tmp.file;
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .with_context(|| format!("writing {}", tmp.path.display()))?;
    for n in 0..MAX_SUFFIX {
        let name = if n == 0 {
            format!("{stem}.{ext}")
        } else {
            format!("{stem}-{n}.{ext}")
        };
        let path = dir.join(name);
        if publish(&tmp.path, &path).with_context(|| format!("writing {}", path.display()))? {
            return Ok(path);
        }
    }
    bail!(
        "no free file name for {stem}.{ext} in {} (tried {MAX_SUFFIX})",
        dir.display()
    )
}

/// Gives the complete file at `tmp` the name `path` unless `path` exists. `Ok(false)`: taken.
fn publish(tmp: &Path, path: &Path) -> io::Result<bool> {
    // A hard link is atomic and never replaces an existing file.
    match fs::hard_link(tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        // Some file systems have no hard links: rename instead, after checking the name is free.
        Err(_) => match fs::symlink_metadata(path) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::rename(tmp, path).map(|()| true),
            Err(e) => Err(e),
        },
    }
}

/// A hidden temporary file next to the final one, removed when dropped.
struct TempFile {
    path: PathBuf,
    file: fs::File,
}

impl TempFile {
    fn create(dir: &Path, stem: &str) -> anyhow::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!(".{stem}.{}.{n}.tmp", std::process::id()));
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => return Ok(Self { path, file }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("creating a file in {}", dir.display()));
                }
            }
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        // Already gone when it was renamed into place.
        let _ = fs::remove_file(&self.path);
    }
}

/// `YYYY-mm-dd HH:MM:SS +hhmm` in local time, for seconds since the Unix epoch.
pub(super) fn local_datetime(unix_secs: u64) -> Option<String> {
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
    let t = libc::time_t::try_from(unix_secs).ok()?;
    let mut tm = std::mem::MaybeUninit::<libc::tm>::uninit();
    // SAFETY: both pointers are valid for the call; localtime_r is the reentrant variant and
    // writes only to `tm`, which it fully initializes when it returns non-null.
    let ok = unsafe { !libc::localtime_r(&t, tm.as_mut_ptr()).is_null() };
    // SAFETY: localtime_r returned non-null, so it filled in `tm`.
    ok.then(|| unsafe { tm.assume_init() })
}
