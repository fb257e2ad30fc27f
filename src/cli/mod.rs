//! The command-line tools.

pub mod capture;
pub mod common;
pub mod counters;
pub mod devinfo;
pub mod dump;
pub mod lib_path;
pub mod oob;
pub mod perf;
pub mod pingpong;
pub mod report;
pub mod rping;
pub mod setup;
pub mod ucmatose;
pub mod udaddy;
