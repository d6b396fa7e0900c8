//! What a probe is asked for (its hook, grouping, filters and sizes) and what it reports of
//! itself (its hook and totals).
use std::path::PathBuf;

use crate::vocab::dims::{Dim, Filter};

/// Which hook to attach to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeChoice {
    /// `tp_btf/kfree_skb`, falling back to the classic tracepoint.
    #[default]
    Auto,
    /// Only `tp_btf/kfree_skb` (needs kernel BTF).
    Btf,
    /// Only the classic `skb:kfree_skb` tracepoint (needs tracefs; mounted if absent).
    Tracepoint,
    /// An empty program on `tp_btf/kfree_skb` that counts nothing: the benchmark's floor.
    #[cfg(feature = "bench")]
    #[value(hide = true)]
    Floor,
}

/// The hook in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// BTF-typed raw tracepoint.
    TpBtf,
    /// Classic tracepoint.
    Tracepoint,
    /// The empty program (counts nothing).
    #[cfg(feature = "bench")]
    Floor,
    /// The typed program of the bench build, with steps of its per-drop path taken out.
    #[cfg(feature = "bench")]
    Skip,
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProbeKind::TpBtf => "tp_btf/kfree_skb",
            ProbeKind::Tracepoint => "tracepoint/skb/kfree_skb",
            #[cfg(feature = "bench")]
            ProbeKind::Floor => "tp_btf/kfree_skb (empty program: counts nothing)",
            #[cfg(feature = "bench")]
            ProbeKind::Skip => "tp_btf/kfree_skb (bench program with steps taken out)",
        })
    }
}

/// How to load the probe.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Hook choice.
    pub choice: ProbeChoice,
    /// Capacity of the keyed (reason, location) map.
    pub max_keys: u32,
    /// Kernel BTF file.
    pub btf_path: PathBuf,
    /// Also count dropscope's own syscalls (a `sys_enter` program filtered to this process).
    pub count_self_syscalls: bool,
    /// Benchmark only: synthetic keys to start with (see [`Probe::attach`]).
    #[cfg(feature = "bench")]
    pub bench_keys: u32,
    /// Benchmark only: load the bench program with these steps taken out (bits of
    /// `dropscope_common::skip`; `Some(0)`: the bench program with nothing taken out).
    #[cfg(feature = "bench")]
    pub bench_skip: Option<u32>,
    /// The dimensions the kernel keeps.
    pub by: Vec<Dim>,
    /// The in-kernel filter (its namespace resolved to an inode).
    pub filter: Filter,
    /// Whether stacks may be sampled (false with `--no-stacks`: the program is loaded without
    /// its sampling test).
    pub stacks: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            choice: ProbeChoice::Auto,
            max_keys: dropscope_common::DEFAULT_MAX_KEYS,
            btf_path: PathBuf::from("/sys/kernel/btf/vmlinux"),
            count_self_syscalls: false,
            #[cfg(feature = "bench")]
            bench_keys: 0,
            #[cfg(feature = "bench")]
            bench_skip: None,
            by: vec![Dim::Reason, Dim::Location],
            filter: Filter::default(),
            stacks: true,
        }
    }
}

/// Sum of the per-CPU counters: read through mmap, no syscall.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Every drop seen.
    pub total: u64,
    /// Drops that did not fit in the keyed map.
    pub overflow: u64,
    /// Stack samples captured.
    pub stack_samples: u64,
    /// Stack captures that failed.
    pub stack_errors: u64,
    /// Stack samples that did not fit in the stack-count map.
    pub stack_overflow: u64,
    /// dropscope's own syscalls (if counted).
    pub self_syscalls: u64,
    /// Keys added to the key map (each once, by the CPU that added it).
    pub new_keys: u64,
}

impl Totals {
    /// The drop-related counters only (not dropscope's own syscall count), to detect change.
    pub fn drop_counts(&self) -> [u64; 5] {
        [
            self.total,
            self.overflow,
            self.stack_samples,
            self.stack_errors,
            self.stack_overflow,
        ]
    }
}
