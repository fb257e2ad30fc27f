//! `softroce`: the command-line tool of the softroce userspace RoCEv2 stack.

mod cli;

use clap::{Parser, Subcommand};

/// A userspace Soft-RoCE (RoCEv2) stack: tools that speak the same packets as kernel rxe.
#[derive(Parser, Debug)]
#[command(name = "softroce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print one line per RoCEv2 packet of a pcap/pcapng capture, with its ICRC verdict.
    Dump(cli::dump::DumpArgs),
    /// perftest-compatible bandwidth and latency tests (ib_write_bw, ib_read_lat, ...).
    Perf(cli::perf::PerfArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Dump(a) => cli::dump::run(a),
        Command::Perf(a) => cli::perf::run(a),
    };
    std::process::exit(code);
}
