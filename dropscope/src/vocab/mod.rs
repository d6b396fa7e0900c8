//! The words the readers, the probe, the command line and the model share, below all of them:
//! the dimensions a drop is grouped and filtered by and the names of their values
//! ([`dims`]), the kernel counters' names and a reading's notes, typed ([`counter`], [`note`]). Nothing here imports another
//! module of the crate.
pub mod counter;
pub mod dims;
pub mod note;
