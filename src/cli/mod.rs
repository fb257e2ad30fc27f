//! The command-line tools.

pub mod capture;
pub mod dump;
pub mod oob;
pub mod report;
