//! The command line of `softroce perf`: one subcommand per perftest tool, all sharing
//! perftest's flags (short and long names as in perftest 4.5-0.17).
//!
//! Every subcommand accepts every flag, like perftest's single parser; flags that make no sense
//! for a test are hidden from its `--help` and rejected with perftest's reason when given.

use clap::{Arg, Args, Subcommand};

use crate::cli::oob::perftest::PerftestTest;

const AFTER_HELP: &str = concat!(
    "\
Run the server (no host argument), then the client (with the server's address); the client \
retries for --connect-timeout seconds while the server is not listening yet, so `server & \
client` on one line works. Nothing but the MTU and the buffer geometry is negotiated: give \
both sides the same -s, -n, -q, -a, -c, -D, -t, -b and -R, exactly as with perftest. Pairs with \
perftest 6.06 (Debian 12's perftest 4.5-0.17) in both directions and with another softroce. \
With -R the client retries a connection refused because the server is not listening yet for \
--connect-timeout seconds, every 100 ms.

",
    crate::exit_codes!()
);

/// Arguments of `softroce perf`.
#[derive(Args, Debug)]
pub struct PerfArgs {
    /// The test to run.
    #[command(subcommand)]
    pub test: TestCmd,
}

/// The eight tests, named after the perftest tools.
#[derive(Subcommand, Debug)]
pub enum TestCmd {
    /// RDMA WRITE bandwidth (ib_write_bw).
    #[command(name = "write-bw", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::WriteBw, a)))]
    WriteBw(TestOpts),
    /// RDMA WRITE latency, ping-pong through memory (ib_write_lat).
    #[command(name = "write-lat", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::WriteLat, a)))]
    WriteLat(TestOpts),
    /// RDMA READ bandwidth (ib_read_bw).
    #[command(name = "read-bw", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::ReadBw, a)))]
    ReadBw(TestOpts),
    /// RDMA READ latency (ib_read_lat).
    #[command(name = "read-lat", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::ReadLat, a)))]
    ReadLat(TestOpts),
    /// SEND bandwidth (ib_send_bw).
    #[command(name = "send-bw", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::SendBw, a)))]
    SendBw(TestOpts),
    /// SEND latency, ping-pong (ib_send_lat).
    #[command(name = "send-lat", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::SendLat, a)))]
    SendLat(TestOpts),
    /// Atomic (fetch-and-add or compare-and-swap) bandwidth (ib_atomic_bw).
    #[command(name = "atomic-bw", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::AtomicBw, a)))]
    AtomicBw(TestOpts),
    /// Atomic latency (ib_atomic_lat).
    #[command(name = "atomic-lat", after_help = AFTER_HELP, mut_args(|a| hide_for(PerftestTest::AtomicLat, a)))]
    AtomicLat(TestOpts),
}

impl TestCmd {
    /// The perftest tool and its options.
    pub fn split(&self) -> (PerftestTest, &TestOpts) {
        match self {
            TestCmd::WriteBw(o) => (PerftestTest::WriteBw, o),
            TestCmd::WriteLat(o) => (PerftestTest::WriteLat, o),
            TestCmd::ReadBw(o) => (PerftestTest::ReadBw, o),
            TestCmd::ReadLat(o) => (PerftestTest::ReadLat, o),
            TestCmd::SendBw(o) => (PerftestTest::SendBw, o),
            TestCmd::SendLat(o) => (PerftestTest::SendLat, o),
            TestCmd::AtomicBw(o) => (PerftestTest::AtomicBw, o),
            TestCmd::AtomicLat(o) => (PerftestTest::AtomicLat, o),
        }
    }
}

/// Hides the flags that do not apply to `test` from its `--help` (they are still parsed, and
/// then refused with perftest's reason).
fn hide_for(test: PerftestTest, a: Arg) -> Arg {
    use PerftestTest::*;
    let bw = test.is_bw();
    let read_atomic = matches!(test, ReadBw | ReadLat | AtomicBw | AtomicLat);
    let atomic = matches!(test, AtomicBw | AtomicLat);
    let send = matches!(test, SendBw | SendLat);
    let write = matches!(test, WriteBw | WriteLat);
    let hidden = match a.get_id().as_str() {
        "qp" | "bidirectional" | "no_peak" | "report_gbits" => !bw,
        "atomic_type" => !atomic,
        "size" | "all" => atomic,
        "outs" => !read_atomic,
        "inline_size" => read_atomic,
        "rx_depth" => !send,
        "events" => write,
        _ => false,
    };
    a.hide(hidden)
}

/// The options every test accepts (perftest's flags).
#[derive(Args, Debug, Clone, Default)]
pub struct TestOpts {
    /// Server to connect to: runs as the client. Without it, runs as the server and waits for
    /// one client [perftest: the server name argument]
    #[arg(value_name = "HOST")]
    pub host: Option<String>,

    /// Local IP address or network interface of the softroce device; default: the route to
    /// HOST (client) or the first interface address (server) [perftest -d/--ib-dev]
    #[arg(short = 'd', long = "ib-dev", value_name = "ADDR|IFACE")]
    pub ib_dev: Option<String>,
    /// Packet I/O: `udp` (a UDP socket, unprivileged) or `raw` (an AF_PACKET socket on the
    /// interface: full-strength ICRC checks, needs CAP_NET_RAW) [softroce only]
    #[arg(long, value_enum, default_value_t = crate::cli::common::BackendArg::Udp)]
    pub backend: crate::cli::common::BackendArg,

    /// Device port; softroce devices have one port, so only 1 is accepted [perftest -i/--ib-port]
    #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
    pub ib_port: Option<u32>,

    /// Source GID index; default: the device's own address (index 1, as perftest picks on
    /// rxe) [perftest -x/--gid-index]
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX")]
    pub gid_index: Option<u32>,

    /// Message size in bytes, K and M suffixes allowed; default 65536 (BW), 2 (latency), 8
    /// and fixed (atomic) [perftest -s/--size]
    #[arg(short = 's', long = "size", value_name = "SIZE", allow_hyphen_values = true)]
    pub size: Option<String>,

    /// Run every size 2, 4, ..., 8M (buffers sized for 8 MiB; both sides must pass it)
    /// [perftest -a/--all]
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Iterations (5..100000000); default 5000 (write-bw), 1000 (others) [perftest -n/--iters]
    #[arg(short = 'n', long = "iters", value_name = "N")]
    pub iters: Option<u64>,

    /// Run for SECONDS instead of a number of iterations, measuring the middle part
    /// (see --margin) [perftest -D/--duration]
    #[arg(short = 'D', long = "duration", value_name = "SECONDS")]
    pub duration: Option<u64>,

    /// With -D: seconds left out of the measurement at the start and at the end; default
    /// duration/4 [perftest -f/--margin]
    #[arg(short = 'f', long = "margin", value_name = "SECONDS")]
    pub margin: Option<u64>,

    /// Send queue depth (1..15000); default 128 (BW), 1 (latency) [perftest -t/--tx-depth]
    #[arg(short = 't', long = "tx-depth", value_name = "N")]
    pub tx_depth: Option<u32>,

    /// Number of QPs (1..16384), BW tests only [perftest -q/--qp]
    #[arg(short = 'q', long = "qp", value_name = "N")]
    pub qp: Option<u32>,

    /// Path MTU (256..4096, clamped to the port's active MTU); default: the active MTU; the
    /// smaller of both sides' values is used [perftest -m/--mtu]
    #[arg(short = 'm', long = "mtu", value_name = "BYTES")]
    pub mtu: Option<u32>,

    /// TCP port of the side channel [perftest -p/--port]
    #[arg(short = 'p', long = "port", value_name = "PORT", default_value_t = crate::cli::oob::perftest::DEFAULT_PORT)]
    pub port: u16,

    /// Send messages of up to N bytes inline (0..912, capped at the device's 512); default 0,
    /// as perftest on rxe [perftest -I/--inline_size]
    #[arg(short = 'I', long = "inline_size", value_name = "N")]
    pub inline_size: Option<u32>,

    /// Accepted for compatibility; softroce times with the OS clock, so it has no effect
    /// [perftest -F/--CPU-freq]
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,

    /// Report bandwidth in Gb/s instead of MiB/s [perftest --report_gbits]
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,

    /// Atomic operation: CMP_AND_SWAP or FETCH_AND_ADD (default) [perftest -A/--atomic_type]
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE")]
    pub atomic_type: Option<String>,

    /// Connection type: RC (default), UC for the write and send tests, UD for the send tests
    /// (messages up to the MTU; receive buffers get 40 bytes of GRH room) [perftest -c/--connection]
    #[arg(short = 'c', long = "connection", value_name = "TYPE")]
    pub connection: Option<String>,

    /// Outstanding READs/atomics this side accepts as responder; default and maximum: the
    /// device's 128 [perftest -o/--outs]
    #[arg(short = 'o', long = "outs", value_name = "N")]
    pub outs: Option<u32>,

    /// Receive queue depth (1..16384), send tests only; default 512 [perftest -r/--rx-depth]
    #[arg(short = 'r', long = "rx-depth", value_name = "N")]
    pub rx_depth: Option<u32>,

    /// Request a completion every N sends (1..1024); default 100, 1 for messages over 8 KiB
    /// [perftest -Q/--cq-mod]
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    pub cq_mod: Option<u32>,

    /// Local ACK timeout exponent (4.096 us * 2^N); default 14 [perftest -u/--qp-timeout]
    #[arg(short = 'u', long = "qp-timeout", value_name = "N")]
    pub qp_timeout: Option<u8>,

    /// Service level (0..15) [perftest -S/--sl]
    #[arg(short = 'S', long = "sl", value_name = "SL")]
    pub sl: Option<u8>,

    /// Both sides send at once; BW tests only [perftest -b/--bidirectional]
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,

    /// Skip the peak bandwidth (shown as 0.00); BW tests only [perftest -N/--noPeak]
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,

    /// Sleep on the completion queue whenever it is empty (without -e softroce polls, spinning
    /// briefly before it sleeps); not for WRITE tests [perftest -e/--events]
    #[arg(short = 'e', long = "events")]
    pub events: bool,

    /// GRH traffic class (DSCP << 2 | ECN) [perftest --tclass]
    #[arg(long = "tclass", value_name = "TC")]
    pub tclass: Option<u8>,

    /// Connect through rdma_cm instead of TCP: the parameter exchange runs over an RC QP that
    /// the RDMA CM connects to port -p, then the test QPs connect through the CM too (RC, or
    /// UD through SIDR with -c UD); pairs with perftest's -R [perftest -R/--rdma_cm]
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,

    /// Print the result as one JSON object on stdout (the test, its parameters, both sides'
    /// QP records, the result rows and this side's CPU time); the usual perftest report then
    /// goes to stderr [softroce only; perftest's --out_json writes a file]
    #[arg(long = "json")]
    pub json: bool,

    #[command(flatten)]
    pub wait: crate::cli::common::WaitArgs,
}
