//! The command-line tools.

pub mod capture;
pub mod dump;
