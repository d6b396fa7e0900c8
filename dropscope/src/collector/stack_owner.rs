//! Whose drops a sampled stack belongs to, as the collector keys its stacks.

/// Whose drops a stack was sampled from: the kernel's key of its row, or for a drop that got
/// no key slot, its reason and location only.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Owner {
    Key(dropscope_common::DropKey),
    Unslotted { reason: u32, location: u64 },
}
