//! The names the views used before grouping and filtering moved into the model
//! (`model::group`) and the kernel encoding into `probe::filter`.
pub use crate::model::group::{Dim, coarser, protocol_name, regroup};
