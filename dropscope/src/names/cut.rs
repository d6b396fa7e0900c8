//! Names cut to a bound: what a name of the kernel or of a file may cost to keep and show.
use std::sync::Arc;

/// The longest name returned, in characters.
pub const MAX_NAME: usize = 64;

/// A name cut to [`MAX_NAME`] characters.
pub(super) fn bound(name: &str) -> Arc<str> {
    match name.char_indices().nth(MAX_NAME) {
        Some((end, _)) => Arc::from(&name[..end]),
        None => Arc::from(name),
    }
}
