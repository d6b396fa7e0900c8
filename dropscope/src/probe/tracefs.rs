//! tracefs: the classic tracepoint's format file, mounting tracefs if needed (and unmounting it).
use std::{
    ffi::CString,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
const FORMAT: &str = "events/skb/kfree_skb/format";

/// The first mounted tracefs directory that has the kfree_skb tracepoint.
pub fn tracing_dir() -> Option<PathBuf> {
    CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join(FORMAT).exists())
}

/// The `skb:kfree_skb` format file of the running kernel (tracefs must be mounted).
pub fn kfree_skb_format() -> anyhow::Result<String> {
    let dir = tracing_dir().context("tracefs is not mounted (no events/skb/kfree_skb/format)")?;
    let path = dir.join(FORMAT);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// The byte offset of a field in a tracepoint format file.
pub fn field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let line = line.trim();
        let decl = line.strip_prefix("field:")?.split(';').next()?;
        let name = decl.rsplit([' ', '*']).next()?;
        if name != field {
            return None;
        }
        let off = line.split("offset:").nth(1)?.split(';').next()?;
        off.trim().parse().ok()
    })
}

/// tracefs mounted by dropscope, unmounted again when dropped.
#[derive(Debug)]
pub struct TracefsMount {
    mounted: Option<PathBuf>,
}

impl TracefsMount {
    /// Mounts tracefs at /sys/kernel/tracing unless a tracefs with kfree_skb is already there.
    pub fn ensure() -> anyhow::Result<Self> {
        if tracing_dir().is_some() {
            return Ok(Self { mounted: None });
        }
        let target = Path::new(CANDIDATES[0]);
        if !target.is_dir() {
            bail!(
                "{} does not exist: this kernel has no tracefs",
                target.display()
            );
        }
        let c = |s: &str| CString::new(s).context("path with NUL");
        let (src, dst, fs) = (c("nodev")?, c(CANDIDATES[0])?, c("tracefs")?);
        // SAFETY: all pointers are valid NUL-terminated strings that outlive the call; a null
        // data pointer is allowed.
        let rc =
            unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            bail!("mounting tracefs at {}: {err}", target.display());
        }
        Ok(Self {
            mounted: Some(target.to_path_buf()),
        })
    }
}

impl Drop for TracefsMount {
    fn drop(&mut self) {
        if let Some(path) = self.mounted.take()
            && let Ok(p) = CString::new(path.as_os_str().as_encoded_bytes())
        {
            // SAFETY: `p` is a valid NUL-terminated path for the duration of the call.
            unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_field_offsets() {
        let f = "format:\n\tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;\n\
                 \tfield:enum skb_drop_reason reason;\toffset:36;\tsize:4;\tsigned:0;\n";
        assert_eq!(field_offset(f, "location"), Some(16));
        assert_eq!(field_offset(f, "reason"), Some(36));
        assert_eq!(field_offset(f, "protocol"), None);
    }
}
