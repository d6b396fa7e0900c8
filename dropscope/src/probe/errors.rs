//! Probe errors a user can hit, each with what to do about it.
use std::path::PathBuf;

use thiserror::Error;

/// Why the probe could not be loaded or attached.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// Not root and missing capabilities.
    #[error(
        "dropscope needs root (or the CAP_BPF and CAP_PERFMON capabilities) to load its eBPF probe; \
         run it with sudo, e.g. `sudo dropscope`{0}"
    )]
    Privileges(String),
    /// No kernel BTF where the typed tracepoint needs it.
    #[error(
        "no kernel BTF at {0} ({1}): tp_btf needs a kernel built with CONFIG_DEBUG_INFO_BTF; \
         use `--probe tracepoint` for the classic tracepoint"
    )]
    NoBtf(PathBuf, String),
    /// The drop-reason table could not be read.
    #[error("cannot read this kernel's drop reasons: {0}")]
    Reasons(String),
    /// tracefs is missing or lacks the tracepoint.
    #[error("the classic kfree_skb tracepoint is unavailable: {0}")]
    Tracefs(String),
    /// CPU count unreadable.
    #[error("cannot read {0}: {1}")]
    Cpus(&'static str, std::io::Error),
    /// The object failed to load (verifier, maps).
    #[error("loading the eBPF program failed: {0}")]
    Load(String),
    /// Attaching failed.
    #[error("attaching to {0} failed: {1}")]
    Attach(&'static str, String),
    /// The kernel lacks a struct field attribution reads.
    #[error("cannot attribute drops on this kernel: {0}")]
    Layout(String),
    /// `--by` or a filter cannot be applied.
    #[error("{0}")]
    Selection(String),
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Fails with [`ProbeError::Privileges`] unless the effective capabilities allow loading.
pub fn check_privileges() -> Result<(), ProbeError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .iter()
        .filter(|(c, _)| !has(*c))
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    Err(ProbeError::Privileges(format!(" (missing: {missing})")))
}
