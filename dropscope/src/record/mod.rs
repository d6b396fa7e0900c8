//! Recorded sessions: the snapshot stream written to a compact, crash-safe file, and replayed
//! from it into the same pipeline (see `docs/recording-format.md` for the format).
//!
//! - [`Recorder`] writes one frame per snapshot: the names a snapshot introduces once, then a
//!   full keyframe every 30 s (or 256 frames) and otherwise only the counts that changed.
//! - [`Recording`] opens a file, checks every frame's checksum, keeps the valid prefix of a
//!   damaged file (with a warning naming the byte offset) and seeks from the nearest keyframe.
//! - [`replay_feed`] plays a recording as a [`Feed`](crate::source::Feed) with timeline controls;
//!   [`record_feed`] records a feed to a file: the headless `dropscope record`.
pub mod attribution;
pub mod attribution_delta;
pub mod budget;
mod cookies;
pub mod crafted;
mod decode;
mod encoder;
mod error;
mod format;
mod headless;
mod health;
mod index;
mod kernel;
mod kernel_delta;
mod netns_names;
mod peek;
mod reader;
mod replay;
mod socket;
mod spool;
mod stream;
pub mod synthetic;
mod writer;

#[cfg(test)]
mod tests;

pub use encoder::{KEYFRAME_EVERY, KEYFRAME_MAX_FRAMES};
pub use error::RecordError;
pub use format::{MAGIC, VERSION};
pub use headless::{RecordSummary, record_feed};
pub use index::FrameInfo;
pub use peek::{Peek, Peeked, PeekedKind};
pub use reader::Recording;
pub use replay::replay_feed;
pub use spool::MAX_STREAM_BYTES;
pub use stream::{follow_input, is_stdio, open_input};
pub use writer::{Recorder, encode};
