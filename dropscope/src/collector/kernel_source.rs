//! The kernel's counters and the programs' verdicts as the collector reads them, beside the
//! probe's maps.
use std::{sync::Arc, time::Instant};

use crate::{kcounters::KernelCounters, model::Snapshot, source::KernelPace};

/// The kernel's counters as the collector reads them: before the maps, on their own pace.
pub struct KernelSource {
    pub(super) counters: KernelCounters,
    pub(super) pace: KernelPace,
    /// When they were last read (`None`: read with the next poll).
    pub(super) read_at: Option<Instant>,
    /// The latest reading, carried by every snapshot taken after it.
    pub(super) reading: Option<Arc<crate::model::KernelReading>>,
    /// The XDP and tc programs' drop verdicts, counted in the kernel (`None`: this kernel
    /// cannot, and the reading's notes say why).
    pub(super) programs: Result<crate::probe::verdicts::Programs, String>,
    /// When the programs' verdict counts were last brought up to date in the reading.
    pub(super) programs_at: Instant,
    /// Whether the reading asked for looks in every namespace (a search for programs).
    pub(super) searching: bool,
}

impl KernelSource {
    /// Reads the counters' baseline now; `None` (with a warning) if they cannot be read.
    /// Called once the probe counts, so drops between the two are counted by the probe only
    /// and none can read as unseen.
    pub(super) fn start(pace: KernelPace) -> Option<Self> {
        match KernelCounters::start(crate::ledger::layers::is_kept) {
            Ok(counters) => Some(Self {
                // The baseline is the first reading (nothing grew yet): every snapshot has one.
                reading: Some(Arc::new(counters.reading())),
                counters,
                pace,
                read_at: Some(Instant::now()),
                programs: crate::probe::verdicts::Programs::start().map_err(|e| format!("{e:#}")),
                programs_at: Instant::now(),
                searching: false,
            }),
            Err(e) => {
                tracing::warn!("not reading the kernel's drop counters: {e:#}");
                None
            }
        }
    }
}

/// The namespaces where drops were seen (inode numbers), to read their counters too.
pub(super) fn drop_netns(snap: &Snapshot) -> Vec<u64> {
    let mut v: Vec<u64> = snap.drops.iter().filter_map(|d| d.key.attr.netns).collect();
    v.sort_unstable();
    v.dedup();
    v
}
