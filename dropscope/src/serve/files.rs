//! Opening the web config and the files it names as sshd and sudo open theirs: the web config
//! never through a symbolic link, and every file, with each directory above it up to /, owned by
//! root or by the user dropscope runs as and writable by no one else.
use std::{
    ffi::OsString,
    fs::File,
    io::Read as _,
    os::unix::{ffi::OsStringExt as _, fs::MetadataExt as _},
    path::Path,
};

use anyhow::{Context as _, bail};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Symbolic links followed at most on the way to one file.
const MAX_LINKS: usize = 40;
/// The sticky bit: in such a directory owned by root (`/tmp`), only an entry's owner may
/// rename or remove it, so others writing there cannot replace a file or directory of ours.
const STICKY: u32 = 0o1000;

/// What a file is to the server, for its checks and its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `--web-config` itself.
    WebConfig,
    /// `tls_server_config.cert_file`.
    Cert,
    /// `tls_server_config.key_file`: also readable by its owner (and group) only.
    Key,
    /// `tls_server_config.client_ca_file`.
    ClientCa,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Self::WebConfig => "the web config",
            Self::Cert => "cert_file",
            Self::Key => "key_file",
            Self::ClientCa => "client_ca_file",
        }
    }

    fn why(self) -> &'static str {
        match self {
            Self::WebConfig => "it holds secrets (who may log in, which key the server uses)",
            Self::Cert => "it is the certificate the server presents",
            Self::Key => "it holds the server's private key",
            Self::ClientCa => "it decides which client certificates may connect",
        }
    }
}

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Reads `path` as `role` (see [`open`]), refusing more than `max` bytes.
pub fn read(path: &Path, role: Role, max: u64) -> anyhow::Result<Vec<u8>> {
    let file = open(path, role, geteuid())?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {} {}", role.name(), path.display()))?;
    if bytes.len() as u64 > max {
        bail!(
            "{} {} is larger than {max} bytes",
            role.name(),
            path.display()
        );
    }
    Ok(bytes)
}

/// Opens `path` for reading as `role`, for a process whose effective user id is `euid`. Each
/// directory is checked by its real path (symbolic links resolved), then opened, and the file
/// is opened from it without following a link; the file's own checks are made on what was
/// opened. A link named as a file other than the web config is followed, and both where it is
/// and where it points are checked (certbot's `live/` is made of links).
pub fn open(path: &Path, role: Role, euid: u32) -> anyhow::Result<File> {
    let shown = path.display();
    let what = role.name();
    let mut path = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        let Some(name) = path.file_name().map(ToOwned::to_owned) else {
            bail!("{what} {shown} names no file");
        };
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let real_dir = std::fs::canonicalize(parent)
            .with_context(|| format!("opening {what} {shown}: {}", parent.display()))?;
        check_dirs(&real_dir, role, path.as_path(), euid)?;
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let dir = rustix::fs::open(&real_dir, flags | OFlags::DIRECTORY, Mode::empty())
            .with_context(|| format!("opening {what} {shown}: {}", real_dir.display()))?;
        let here = real_dir.join(&name);
        let st = rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            .with_context(|| format!("opening {what} {}", here.display()))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            if role == Role::WebConfig {
                bail!(
                    "refusing the web config {shown}: it is a symbolic link, which dropscope does \
                     not follow for it; name the file it points to"
                );
            }
            let target = rustix::fs::readlinkat(&dir, name.as_os_str(), Vec::new())
                .with_context(|| format!("reading the link {}", here.display()))?;
            path = real_dir.join(OsString::from_vec(target.into_bytes()));
            continue;
        }
        // Not blocking: a FIFO put there would otherwise hold the start up.
        let fd = rustix::fs::openat(
            &dir,
            name.as_os_str(),
            flags | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .with_context(|| format!("opening {what} {}", here.display()))?;
        let file = File::from(fd);
        let meta = file
            .metadata()
            .with_context(|| format!("reading {what} {}", here.display()))?;
        check_file(&meta, &here, role, euid)?;
        return Ok(file);
    }
    bail!("opening {what} {shown}: more than {MAX_LINKS} symbolic links on the way")
}

/// Refuses a file that is not regular, that another user owns, or that its group or others can
/// write (or, for the key, read): whoever can change it chooses who gets in or which key the
/// server presents.
pub fn check_file(
    meta: &std::fs::Metadata,
    path: &Path,
    role: Role,
    euid: u32,
) -> anyhow::Result<()> {
    let (shown, what, why) = (path.display(), role.name(), role.why());
    if !meta.is_file() {
        bail!("refusing {what} {shown}: it is not a regular file");
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        bail!(
            "refusing {what} {shown}: it is {} (mode {mode:04o}), and {why}; make it writable \
             by its owner only: `chmod go-w {shown}`",
            if mode & 0o002 != 0 {
                "world-writable"
            } else {
                "group-writable"
            }
        );
    }
    if meta.uid() != 0 && meta.uid() != euid {
        bail!(
            "refusing {what} {shown}: it is owned by uid {}, who could change it, and {why}; \
             make root its owner: `chown root {shown}`",
            meta.uid()
        );
    }
    if role == Role::Key && mode & 0o004 != 0 {
        bail!(
            "refusing {what} {shown}: it is world-readable (mode {mode:04o}), and {why}; \
             `chmod o-r {shown}`, and replace the key if others may have read it"
        );
    }
    Ok(())
}

/// Refuses `file` when `dir` (a real path) or a directory above it is owned by another user,
/// or writable by its group or others without being a sticky directory of root's.
fn check_dirs(dir: &Path, role: Role, file: &Path, euid: u32) -> anyhow::Result<()> {
    for d in dir.ancestors() {
        let shown = d.display();
        let meta = std::fs::metadata(d).with_context(|| format!("checking {shown}"))?;
        let mode = meta.mode() & 0o7777;
        let replaceable = |what: &str, fix: String| {
            anyhow::anyhow!(
                "refusing {} {}: the directory {shown} is {what}, and whoever can write there can \
                 replace the file; `{fix}`",
                role.name(),
                file.display()
            )
        };
        if meta.uid() != 0 && meta.uid() != euid {
            return Err(replaceable(
                &format!("owned by uid {}", meta.uid()),
                format!("chown root {shown}"),
            ));
        }
        let sticky_roots = mode & STICKY != 0 && meta.uid() == 0;
        if mode & 0o022 != 0 && !sticky_roots {
            let who = if mode & 0o002 != 0 { "world" } else { "group" };
            return Err(replaceable(
                &format!("{who}-writable (mode {mode:04o})"),
                format!("chmod go-w {shown}"),
            ));
        }
    }
    Ok(())
}
