//! The eBPF probe (placeholder).
