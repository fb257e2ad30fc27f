//! `softroce perf`: perftest-compatible bandwidth and latency tests (being written).
#![allow(dead_code)]

/// Arguments of `softroce perf` (being written).
#[derive(clap::Args, Debug)]
pub struct PerfArgs {}

/// Runs `softroce perf` (being written).
pub fn run(_args: &PerfArgs) -> i32 {
    super::common::report("perf", &super::common::CliError::usage("not implemented yet"))
}
