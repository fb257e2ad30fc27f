//! `softroce`: the command-line tool of the softroce userspace RoCEv2 stack.

mod cli;

use clap::{Parser, Subcommand};

/// A userspace Soft-RoCE (RoCEv2) stack: tools that speak the same packets as kernel rxe.
#[derive(Parser, Debug)]
#[command(name = "softroce", version, about, after_help = cli::common::EXIT_CODES)]
struct Cli {
    /// Log what the stack does to stderr: -v warnings and errors (failed connections, retries
    /// exhausted, NAKs), -vv the story (QP states, retransmissions and their causes, RNR, CM
    /// events), -vvv everything. RUST_LOG (an env_logger-style filter, e.g.
    /// `RUST_LOG=softroce=debug`) overrides it. Give it before the tool: `softroce -vv perf ...`.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// Fault injection on every device the tool opens: a comma-separated SPEC such as
    /// `seed=1,loss=2%,dup=1%,reorder=1%`, `blackhole=1s+60s`, `rnr=3`, `mad,loss=30%`
    /// (docs/faults.md; items: seed, dir, loss, dup, corrupt, reorder, depth, delay, jitter,
    /// qp, opcode, mad, blackhole, rnr). Overrides SOFTROCE_FAULTS. A summary line goes to
    /// stderr when the device closes.
    #[arg(long, value_name = "SPEC", global = true, value_parser = cli::common::parse_faults)]
    faults: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print one line per RoCEv2 packet of a pcap/pcapng capture, with its ICRC verdict.
    Dump(cli::dump::DumpArgs),
    /// perftest-compatible bandwidth and latency tests (ib_write_bw, ib_read_lat, ...).
    Perf(cli::perf::PerfArgs),
    /// RC ping-pong, paired with rdma-core's ibv_rc_pingpong in either role.
    RcPingpong(cli::pingpong::PingpongArgs),
    /// UC ping-pong, paired with rdma-core's ibv_uc_pingpong in either role.
    UcPingpong(cli::pingpong::PingpongArgs),
    /// UD ping-pong, paired with rdma-core's ibv_ud_pingpong in either role.
    UdPingpong(cli::pingpong::UdPingpongArgs),
    /// RC ping-pong over many QPs sharing one receive queue, paired with ibv_srq_pingpong.
    SrqPingpong(cli::pingpong::SrqPingpongArgs),
    /// rping over the RDMA CM, paired with librdmacm's rping in either role.
    Rping(cli::rping::RpingArgs),
    /// ucmatose over the RDMA CM (RC; the server disconnects), paired with librdmacm's ucmatose.
    Ucmatose(cli::ucmatose::UcmatoseArgs),
    /// udaddy over the RDMA CM (UD through SIDR), paired with librdmacm's udaddy in either role.
    Udaddy(cli::udaddy::UdaddyArgs),
    /// Device, port, GID table and limits, like ibv_devinfo -v.
    Devinfo(cli::devinfo::DevinfoArgs),
    /// The hw_counters of running softroce devices (from another process).
    Counters(cli::counters::CountersArgs),
    /// The directory of softroce's drop-in libibverbs.so.1: run an unmodified ibverbs program
    /// with LD_LIBRARY_PATH=$(softroce lib-path).
    LibPath(cli::lib_path::LibPathArgs),
    /// As root, once per host: /dev/infiniband/uverbs0.. as /dev/null's character device, the
    /// node UCX insists on before it uses a device (--undo removes them).
    Setup(cli::setup::SetupArgs),
}

/// A reader that stops early (`softroce counters --all | head -3`) ends the tool quietly, as it
/// ends `cat`: std's print macros panic when stdout's reader is gone (Rust ignores SIGPIPE), and
/// this hook turns exactly that panic into a silent exit with status 0; any other panic is
/// reported as before.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout")
            && msg.contains(&format!("(os error {})", libc::EPIPE))
        {
            std::process::exit(0);
        }
        report(info)
    }));
}

fn main() {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    cli::common::init_logging(cli.verbose);
    if let Some(spec) = &cli.faults {
        softroce::faults::set_default(Some(spec.clone()));
    }
    let code = match &cli.command {
        Command::Dump(a) => cli::dump::run(a),
        Command::Perf(a) => cli::perf::run(a),
        Command::RcPingpong(a) => cli::pingpong::run(a),
        Command::UcPingpong(a) => cli::pingpong::run_uc(a),
        Command::UdPingpong(a) => cli::pingpong::run_ud(a),
        Command::SrqPingpong(a) => cli::pingpong::run_srq(a),
        Command::Rping(a) => cli::rping::run(a),
        Command::Ucmatose(a) => cli::ucmatose::run(a),
        Command::Udaddy(a) => cli::udaddy::run(a),
        Command::Devinfo(a) => cli::devinfo::run(a),
        Command::Counters(a) => cli::counters::run(a),
        Command::LibPath(a) => cli::lib_path::run(a),
        Command::Setup(a) => cli::setup::run(a),
    };
    std::process::exit(code);
}
