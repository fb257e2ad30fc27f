//! The command-line tools.

pub mod capture;
pub mod common;
pub mod dump;
pub mod oob;
pub mod perf;
pub mod report;
