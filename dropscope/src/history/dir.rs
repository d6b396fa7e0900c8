//! The history directory: created owner-only and never through a symbolic link, locked by one
//! writer at a time, and holding segments named `seg-SEQ-START.dsrec`.
use std::{
    fs::File,
    io,
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};

/// Prefix of a segment's file name.
const PREFIX: &str = "seg-";
/// Suffix of a segment's file name (a segment is a recording).
const SUFFIX: &str = ".dsrec";
/// What a coarse segment's name has before [`SUFFIX`]: it keeps one snapshot a minute.
const COARSE: &str = "-c60";
/// Name of the writer's lock file in the directory.
const LOCK: &str = ".lock";
/// Segments a directory may hold for the readers; further ones are left out with a note, so a
/// directory of a million planted files costs a bounded listing.
pub const MAX_SEGMENTS: usize = 10_000;

/// One segment file, as its name and size describe it (nothing read from inside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentFile {
    /// Its place in the order of writing (a counter, never the clock).
    pub seq: u64,
    /// When the writer opened it, ms since the Unix epoch (by the wall clock then).
    pub opened_unix_ms: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Whether it was made coarse (one snapshot a minute; exact totals all the same).
    pub coarse: bool,
    /// Its path.
    pub path: PathBuf,
}

/// The file name of segment `seq` opened at `unix_ms`, e.g.
/// `seg-00000042-20261127T210641Z.dsrec`.
pub fn segment_name(seq: u64, unix_ms: u64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(unix_ms);
    let stamp: String = humantime::format_rfc3339_seconds(t)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    format!("{PREFIX}{seq:08}-{stamp}{SUFFIX}")
}

/// The name of segment `seq` opened at `unix_ms` once made coarse.
pub fn coarse_name(seq: u64, unix_ms: u64) -> String {
    let full = segment_name(seq, unix_ms);
    format!("{}{COARSE}{SUFFIX}", &full[..full.len() - SUFFIX.len()])
}

/// The sequence number, opening time and coarseness in a segment's file name, if it is one.
pub fn parse_segment(name: &str) -> Option<(u64, u64, bool)> {
    let rest = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (rest, coarse) = match rest.strip_suffix(COARSE) {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let (seq, opened) = parse_stamp(rest)?;
    Some((seq, opened, coarse))
}

/// The sequence number and opening time in a segment's file name, if it is one.
pub fn parse_name(name: &str) -> Option<(u64, u64)> {
    parse_segment(name).map(|(seq, opened, _)| (seq, opened))
}

/// `SEQ-STAMP` as numbers.
fn parse_stamp(rest: &str) -> Option<(u64, u64)> {
    let (seq, stamp) = rest.split_once('-')?;
    if seq.len() < 8 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = seq.parse().ok()?;
    // 20261127T210641Z -> 2026-11-27T21:06:41Z
    let s = stamp.as_bytes();
    if s.len() != 16 || s[8] != b'T' || s[15] != b'Z' {
        return None;
    }
    let rfc = format!(
        "{}-{}-{}T{}:{}:{}Z",
        stamp.get(0..4)?,
        stamp.get(4..6)?,
        stamp.get(6..8)?,
        stamp.get(9..11)?,
        stamp.get(11..13)?,
        stamp.get(13..15)?
    );
    let t = humantime::parse_rfc3339(&rfc).ok()?;
    let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis();
    Some((seq, u64::try_from(ms).ok()?))
}

/// Now, ms since the Unix epoch (0 before it).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Checks that `dir` is a directory itself (not a symbolic link to one), owned by this user and
/// writable by no one else.
fn check_dir(dir: &Path) -> anyhow::Result<()> {
    let m = std::fs::symlink_metadata(dir)
        .with_context(|| format!("reading the history directory {}", dir.display()))?;
    if m.file_type().is_symlink() {
        bail!(
            "the history directory {} is a symbolic link: refusing to follow it (name the \
             directory itself)",
            dir.display()
        );
    }
    if !m.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        bail!(
            "the history directory {} belongs to uid {}, not to the user dropscope runs as \
             ({me}): refusing to write into it",
            dir.display(),
            m.uid()
        );
    }
    if m.mode() & 0o022 != 0 {
        bail!(
            "the history directory {} is writable by others (mode {:o}): refusing to write into \
             it (chmod 700 it)",
            dir.display(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

/// Creates `dir` (mode 0700, its parents as needed) unless it exists, then checks it as
/// [`check_dir`] does.
pub fn create_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("creating the history directory {}", dir.display())
                    });
                }
            }
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("reading the history directory {}", dir.display()));
        }
    }
    check_dir(dir)
}

/// The writer's exclusive hold on a history directory, released when dropped (or when the
/// process dies, however it dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of `dir`, or says which process has it.
    pub fn take(dir: &Path) -> anyhow::Result<DirLock> {
        let path = dir.join(LOCK);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = crate::sanitize::terminal(holder.trim());
                bail!(
                    "another dropscope is writing the history in {} (process {}): one writer \
                     per directory",
                    dir.display(),
                    if holder.is_empty() {
                        "unknown"
                    } else {
                        &holder
                    }
                );
            }
            Err(e) => {
                return Err(io::Error::from(e))
                    .with_context(|| format!("locking {}", path.display()));
            }
        }
        // Who holds it, for the next one refused (best effort).
        let _ = file.set_len(0);
        let _ = std::os::unix::fs::FileExt::write_at(
            &file,
            format!("{}\n", std::process::id()).as_bytes(),
            0,
        );
        Ok(DirLock { _file: file })
    }
}

/// What a directory listing found: the segments in order of writing, and what was left out.
#[derive(Debug, Default)]
pub struct Listing {
    /// Segments, oldest (lowest sequence number) first.
    pub segments: Vec<SegmentFile>,
    /// Notes on entries left out (beyond [`MAX_SEGMENTS`], not regular files).
    pub notes: Vec<String>,
}

/// Lists the segments of `dir` (entries whose name is not a segment's are ignored).
pub fn list(dir: &Path) -> anyhow::Result<Listing> {
    let mut out = Listing::default();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading the history directory {}", dir.display()))?;
    let mut over = 0u64;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name();
        let Some((seq, opened, coarse)) = name.to_str().and_then(parse_segment) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.is_file() {
            out.notes.push(format!(
                "{}: not a regular file, left out",
                crate::sanitize::terminal(&name.to_string_lossy())
            ));
            continue;
        }
        if out.segments.len() >= MAX_SEGMENTS {
            over += 1;
            continue;
        }
        out.segments.push(SegmentFile {
            seq,
            opened_unix_ms: opened,
            bytes: meta.len(),
            coarse,
            path: entry.path(),
        });
    }
    out.notes.truncate(100);
    if over > 0 {
        out.notes.push(format!(
            "{over} segments beyond the limit of {MAX_SEGMENTS} were left out"
        ));
    }
    // Equal numbers (only a crafted directory has them) in a stable order.
    out.segments
        .sort_by(|a, b| (a.seq, &a.path).cmp(&(b.seq, &b.path)));
    Ok(out)
}

/// Creates segment file `name` in `dir`: new (never an existing name), owner-only, never
/// through a symbolic link.
pub fn create_segment(dir: &Path, name: &str) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strangers_are_ignored() {
        let name = segment_name(42, 1_795_900_001_999);
        assert_eq!(name, "seg-00000042-20261128T210641Z.dsrec");
        assert_eq!(parse_name(&name), Some((42, 1_795_900_001_000)));
        let coarse = coarse_name(42, 1_795_900_001_999);
        assert_eq!(coarse, "seg-00000042-20261128T210641Z-c60.dsrec");
        assert_eq!(parse_segment(&coarse), Some((42, 1_795_900_001_000, true)));
        assert_eq!(parse_segment(&name), Some((42, 1_795_900_001_000, false)));
        for bad in [
            "seg-42-20261128T210641Z.dsrec",
            "seg-00000042-20261128T210641Z.dsrec.part",
            "seg-00000042-2026112XT184001Z.dsrec",
            "seg-0000004a-20261128T210641Z.dsrec",
            "seg-00000042-20261322T184001Z.dsrec",
            "notes.txt",
            ".lock",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_directory_is_created_owner_only_and_never_through_a_symlink() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/history");
        create_dir(&dir).expect("created");
        let mode = std::fs::metadata(&dir).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o700);
        create_dir(&dir).expect("an existing private directory is fine");

        let target = tmp.path().join("elsewhere");
        std::fs::create_dir(&target).expect("mkdir");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let e = create_dir(&link).expect_err("a symlink is refused");
        assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");

        let open = tmp.path().join("open");
        std::fs::DirBuilder::new()
            .mode(0o777)
            .create(&open)
            .expect("mkdir");
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        let e = create_dir(&open).expect_err("a world-writable directory is refused");
        assert!(format!("{e:#}").contains("writable by others"), "{e:#}");
    }

    #[test]
    fn a_second_writer_is_refused_and_a_planted_link_is_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let first = DirLock::take(tmp.path()).expect("first writer");
        let e = DirLock::take(tmp.path()).expect_err("second writer");
        assert!(format!("{e:#}").contains("another dropscope"), "{e:#}");
        drop(first);
        DirLock::take(tmp.path()).expect("free again");

        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"keep").expect("write");
        let name = segment_name(1, 0);
        std::os::unix::fs::symlink(&victim, tmp.path().join(&name)).expect("symlink");
        create_segment(tmp.path(), &name).expect_err("a planted link is refused");
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep");
    }
}
