//! The report's writers, which the commands call: its JSON schema ([`json`]), the table
//! (also `diff`'s and `check`'s: [`table`]) and the text of the kernel counters and the ledger
//! ([`kernel_text`]), in the order [`rows`] gives. Pure functions of a snapshot and its
//! [`crate::ledger::KernelView`], writing to any [`std::io::Write`].
pub mod json;
pub mod kernel_text;
mod rows;
pub mod table;

#[cfg(test)]
mod views_agree;

pub use self::{
    json::{JsonReport, json, json_from},
    kernel_text::{write_counter_only, write_kernel, write_programs},
    table::{NumberColumn, PIPE_WIDTH, table_width, write_key_table, write_table_fitted},
};
