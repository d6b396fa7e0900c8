//! The words the readers, the probe, the command line and the model share, below all of them:
//! the dimensions a drop is grouped and filtered by and the names of their values
//! ([`dims`]). Nothing here imports another module of the crate.
pub mod dims;
