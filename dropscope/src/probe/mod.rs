//! The eBPF probe: loads the program, attaches it to `kfree_skb`, and reads its maps.
//!
//! Attaching prefers the BTF-typed `tp_btf/kfree_skb`; the classic tracepoint is the fallback.
//! Everything is detached when the [`Probe`] is dropped (and by the kernel if the process dies).
//!
//! Without the `live` feature only what needs no eBPF object is built: the hook choice, the
//! drop-reason table (from BTF) and the errors.
pub mod btf;
pub mod errors;
pub mod filter;
#[cfg(feature = "live")]
pub mod kfunc;
pub mod layout;
mod options;
pub mod reasons;
#[cfg(feature = "live")]
pub mod sys;
pub mod tracefs;
#[cfg(feature = "live")]
pub mod verdicts;

#[cfg(feature = "live")]
mod attach;

#[cfg(feature = "live")]
pub use attach::{Probe, embedded_object};
pub use errors::ProbeError;
pub use options::{ProbeChoice, ProbeKind, ProbeOptions, Totals};
