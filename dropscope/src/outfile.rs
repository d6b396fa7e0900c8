//! Output files created safely, even as root in a directory other users can write to.
//!
//! Every file dropscope writes (recordings, SVGs, folded stacks) is written to a new temporary
//! file in the destination's directory (created with `O_EXCL` under a random name, owner-only
//! 0600) and only given its name once complete, by an atomic rename that never follows a
//! symbolic link: without `--force` the rename refuses any existing name (a file, a dangling
//! symlink, a FIFO), with it the name is replaced, never written through. Under `sudo` the file
//! belongs to the invoking user (`SUDO_UID`/`SUDO_GID`). A write that fails (a full disk) or is
//! interrupted removes the temporary file: the destination is never left partial.
use std::{
    fs::File,
    io,
    path::{Path, PathBuf},
};

use tempfile::NamedTempFile;

/// Why an output file could not be created or published.
#[derive(thiserror::Error, Debug)]
pub enum OutFileError {
    /// Something already has the destination's name, and overwriting was not asked for.
    #[error("{} already exists: refusing to replace it (--force replaces it)", .0.display())]
    Exists(PathBuf),
    /// The complete file could not be given its name (it appeared meanwhile, say); the data
    /// was kept under its temporary name.
    #[error("{why}; the complete data is kept in {}", .kept.display())]
    KeptAs {
        /// The destination.
        dest: PathBuf,
        /// Where the complete file was kept.
        kept: PathBuf,
        /// Why it could not be published.
        why: String,
    },
    /// The destination's directory does not exist or is not a directory.
    #[error("cannot write {}: {} is not a directory", .path.display(), .dir.display())]
    NoDirectory {
        /// The destination.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// Creating, writing or renaming failed.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
}

/// The directory `path` is to be created in.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Checks, before any work is done, that `path` can be created: its directory exists and,
/// unless `force`, nothing has its name (not even a dangling symlink).
pub fn check_destination(path: &Path, force: bool) -> Result<(), OutFileError> {
    let dir = parent(path);
    if !dir.is_dir() {
        return Err(OutFileError::NoDirectory {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        });
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(OutFileError::Io {
            what: "cannot replace",
            path: path.to_path_buf(),
            source: io::Error::from(io::ErrorKind::IsADirectory),
        }),
        Ok(_) if !force => Err(OutFileError::Exists(path.to_path_buf())),
        _ => Ok(()),
    }
}

/// The invoking user's ids when running as root under sudo.
fn sudo_owner() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |var| std::env::var(var).ok()?.parse::<u32>().ok();
    Some((id("SUDO_UID")?, id("SUDO_GID")?))
}

/// A file being written: a temporary file next to its destination until [`OutFile::commit`].
pub struct OutFile {
    tmp: NamedTempFile,
    dest: PathBuf,
    force: bool,
}

impl OutFile {
    /// Creates the temporary file for `dest` (0600, owned by the sudo user if any). Fails early
    /// when `dest` exists and `force` is not set.
    pub fn create(dest: &Path, force: bool) -> Result<OutFile, OutFileError> {
        check_destination(dest, force)?;
        let dir = parent(dest);
        let name = dest
            .file_name()
            .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
        let io_err = |what, source| OutFileError::Io {
            what,
            path: dir.to_path_buf(),
            source,
        };
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".part")
            .tempfile_in(dir)
            .map_err(|e| io_err("creating a temporary file in", e))?;
        if let Some((uid, gid)) = sudo_owner() {
            std::os::unix::fs::fchown(tmp.as_file(), Some(uid), Some(gid))
                .map_err(|e| io_err("giving the invoking user a file in", e))?;
        }
        Ok(OutFile {
            tmp,
            dest: dest.to_path_buf(),
            force,
        })
    }

    /// The open temporary file, to write to.
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// Where the file will be published.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Where the data is until published (a hidden `.NAME.XXXXXX.part` next to the destination).
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// Syncs the data and gives the file its name; returns the name.
    ///
    /// When the name was taken meanwhile, the complete file is kept under its temporary name
    /// and the error says where ([`OutFileError::KeptAs`]).
    pub fn commit(self) -> Result<PathBuf, OutFileError> {
        let dest = self.dest.clone();
        match self.commit_as(&dest).map_err(|b| *b) {
            Ok(p) => Ok(p),
            // Complete and synced, but the name could not be given: keep the data.
            Err((
                e @ (OutFileError::Exists(_)
                | OutFileError::Io {
                    what: "publishing", ..
                }),
                back,
            )) => match back.tmp.keep() {
                Ok((_, kept)) => Err(OutFileError::KeptAs {
                    dest,
                    kept,
                    why: e.to_string(),
                }),
                Err(_) => Err(e),
            },
            Err((e, _)) => Err(e),
        }
    }

    /// Syncs the data and gives the file the name `dest`; on failure, hands itself back.
    fn commit_as(self, dest: &Path) -> Result<PathBuf, Box<(OutFileError, OutFile)>> {
        if let Err(source) = self.tmp.as_file().sync_all() {
            let e = OutFileError::Io {
                what: "writing",
                path: dest.to_path_buf(),
                source,
            };
            return Err(Box::new((e, self)));
        }
        let OutFile { tmp, force, .. } = self;
        let res = if force {
            tmp.persist(dest)
        } else {
            tmp.persist_noclobber(dest)
        };
        match res {
            Ok(_) => Ok(dest.to_path_buf()),
            Err(e) => {
                let err = if e.error.kind() == io::ErrorKind::AlreadyExists {
                    OutFileError::Exists(dest.to_path_buf())
                } else {
                    OutFileError::Io {
                        what: "publishing",
                        path: dest.to_path_buf(),
                        source: e.error,
                    }
                };
                let back = OutFile {
                    tmp: e.file,
                    dest: dest.to_path_buf(),
                    force,
                };
                Err(Box::new((err, back)))
            }
        }
    }

    /// Publishes under the first of `names` that is free (never replacing anything).
    pub fn commit_first_free(
        mut self,
        names: impl IntoIterator<Item = PathBuf>,
    ) -> Result<PathBuf, OutFileError> {
        self.force = false;
        let mut last = OutFileError::Exists(self.dest.clone());
        for name in names {
            match self.commit_as(&name).map_err(|b| *b) {
                Ok(p) => return Ok(p),
                Err((e @ OutFileError::Exists(_), back)) => {
                    last = e;
                    self = back;
                }
                Err((e, _)) => return Err(e),
            }
        }
        Err(last)
    }
}

/// Writes `bytes` to a new file `dest` (replacing what is there only with `force`).
pub fn write_file(dest: &Path, force: bool, bytes: &[u8]) -> Result<PathBuf, OutFileError> {
    use std::io::Write;
    let out = OutFile::create(dest, force)?;
    out.file()
        .write_all(bytes)
        .map_err(|source| OutFileError::Io {
            what: "writing",
            path: dest.to_path_buf(),
            source,
        })?;
    out.commit()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

    use super::*;

    #[test]
    fn a_symlink_at_the_destination_is_never_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        let link = dir.path().join("out.svg");
        symlink(&victim, &link).expect("symlink");
        // Dangling: the victim does not exist.
        let err = write_file(&link, false, b"data").expect_err("refused");
        assert!(matches!(err, OutFileError::Exists(_)), "{err}");
        assert!(!victim.exists());
        // Pointing at an existing file, with --force: the link is replaced, the file untouched.
        std::fs::write(&victim, b"precious").expect("victim");
        write_file(&link, true, b"data").expect("forced");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
        assert!(!std::fs::symlink_metadata(&link).expect("out").is_symlink());
        assert_eq!(std::fs::read(&link).expect("out"), b"data");
    }

    #[test]
    fn an_existing_file_is_kept_unless_forced_and_new_files_are_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out");
        std::fs::write(&path, b"").expect("pre-created");
        assert!(matches!(
            write_file(&path, false, b"x"),
            Err(OutFileError::Exists(_))
        ));
        let before = std::fs::metadata(&path).expect("meta").ino();
        write_file(&path, true, b"x").expect("forced");
        let meta = std::fs::metadata(&path).expect("meta");
        assert_ne!(
            meta.ino(),
            before,
            "a new file, not the old one written into"
        );
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn an_abandoned_file_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec");
        let out = OutFile::create(&path, false).expect("create");
        assert!(out.temp_path().exists());
        drop(out);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }

    #[test]
    fn first_free_name_skips_taken_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        symlink("/nonexistent", &a).expect("symlink");
        let out = OutFile::create(&dir.path().join("tmp"), false).expect("create");
        let got = out
            .commit_first_free([a.clone(), dir.path().join("b")])
            .expect("commit");
        assert_eq!(got, dir.path().join("b"));
        assert!(std::fs::symlink_metadata(&a).expect("a").is_symlink());
    }

    #[test]
    fn a_name_taken_meanwhile_keeps_the_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec");
        let out = OutFile::create(&path, false).expect("create");
        std::io::Write::write_all(&mut out.file(), b"hours of data").expect("write");
        std::fs::write(&path, b"planted").expect("plant");
        match out.commit() {
            Err(OutFileError::KeptAs { kept, .. }) => {
                assert_eq!(std::fs::read(&kept).expect("kept"), b"hours of data");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read(&path).expect("planted"), b"planted");
        let err = check_destination(dir.path(), true).expect_err("a directory");
        assert!(err.to_string().contains("directory"), "{err}");
    }

    #[test]
    fn a_missing_directory_is_named() {
        let err = check_destination(Path::new("/nonexistent-dir/x"), false).expect_err("no dir");
        assert!(
            err.to_string()
                .contains("/nonexistent-dir is not a directory")
        );
    }
}
