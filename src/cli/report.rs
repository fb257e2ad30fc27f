//! Output formats and statistics of perftest (4.5-0.17, "6.06") and the pingpong examples.
//!
//! Spec: `docs/interop/oob-exchange.md`, B10 (perftest output and computations) and A6
//! (pingpong final lines). Every format reproduces the C `printf` output byte for byte.
//!
//! Conventions: functions named `format_*` return one line **without** its trailing newline;
//! multi-line blocks ([`format_test_info`], [`format_lat_samples`]) end every line with `\n`.
//!
//! Time inputs are integer "ticks" with a caller-given rate, standing for perftest's CPU cycles
//! and `get_cpu_mhz()`. For nanosecond timestamps use [`NS_PER_SEC`] / [`NS_PER_USEC`]. All
//! integer truncations of the C code (median and peak in integer cycles, the `int` casts in the
//! standard deviation) are reproduced in tick units.
// The UC/UD rows and the per-sample latency dump wait for the tools that print them.
#![allow(dead_code)]

use crate::cli::oob::perftest::PerftestDest;

/// Ticks per second for nanosecond timestamps.
pub const NS_PER_SEC: f64 = 1e9;
/// Ticks per microsecond for nanosecond timestamps.
pub const NS_PER_USEC: f64 = 1e3;

/// perftest's `RESULT_LINE`: 87 dashes.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// The server's banner before `accept()` (full verbosity only), each line ending in `\n`; it
/// starts with an empty line.
pub const WAITING_BANNER: &str = "\n************************************\n\
                                  * Waiting for client to connect... *\n\
                                  ************************************\n";

/// BW column header (`RESULT_FMT`).
pub const BW_HEADER_MB: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
/// BW column header with `--report_gbits` (`RESULT_FMT_G`).
pub const BW_HEADER_GB: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// Latency column header (`RESULT_FMT_LAT`), including its trailing space.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
                              t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
/// Latency column header in duration (`-D`) mode (`RESULT_FMT_LAT_DUR`).
pub const LAT_DURATION_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// Why statistics could not be computed (local input errors; never peer input).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatsError {
    /// Fewer samples than the computation needs.
    #[error("not enough samples: {got}, need at least {need}")]
    NotEnoughSamples {
        /// Samples given.
        got: usize,
        /// Samples needed.
        need: usize,
    },
    /// A zero divisor parameter (cq_mod, post_list).
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
}

// ---------------------------------------------------------------------------------------------
// printf helpers
// ---------------------------------------------------------------------------------------------

/// C `%.Nf`: Rust's fixed formatting rounds exactly like glibc for finite values; infinities
/// and NaNs get glibc's `inf` / `-inf` / `nan` / `-nan`.
pub fn c_fixed(x: f64, prec: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    format!("{x:.prec$}")
}

/// C `%-W.Nf`.
fn c_fixed_left(x: f64, width: usize, prec: usize) -> String {
    format!("{:<width$}", c_fixed(x, prec))
}

/// C `%g` (precision 6).
pub fn c_general(x: f64) -> String {
    const P: i32 = 6;
    if !x.is_finite() {
        return c_fixed(x, 0);
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{:.*e}", (P - 1) as usize, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..P).contains(&exp) {
        strip(&format!("{:.*}", (P - 1 - exp) as usize, x))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mantissa), exp.abs())
    }
}

/// C `%#0Wx`: zero gets no `0x` prefix, and the width includes the prefix.
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        return format!("{:0width$}", 0);
    }
    let digits = format!("{v:x}");
    format!("0x{}{digits}", "0".repeat(width.saturating_sub(2 + digits.len())))
}

/// A NaN as x86-64 hardware produces it (0/0 gives the negative "default NaN", printed
/// `-nan`), whatever the host.
fn x86_nan(x: f64) -> f64 {
    if x.is_nan() { -f64::NAN } else { x }
}

/// The x86-64 result of C's `(int)` conversion of a double: truncation, and `INT_MIN` when
/// out of range or NaN (`cvttsd2si`).
fn c_double_to_int(v: f64) -> i32 {
    if v > -2_147_483_649.0 && v < 2_147_483_648.0 { v.trunc() as i32 } else { i32::MIN }
}

// ---------------------------------------------------------------------------------------------
// Test-information block and address lines
// ---------------------------------------------------------------------------------------------

/// The verb under test (perftest's `testsStr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `ib_send_*`.
    Send,
    /// `ib_write_*`.
    Write,
    /// `ib_read_*`.
    Read,
    /// `ib_atomic_*`.
    Atomic,
}

impl Verb {
    /// Name in the title line: `Send`, `RDMA_Write`, `RDMA_Read`, `Atomic`.
    pub fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }

    /// Latency divisor: 2 for write/send (a sample is a round trip), 1 for read/atomic.
    pub fn rtt_factor(self) -> u32 {
        match self {
            Verb::Send | Verb::Write => 2,
            Verb::Read | Verb::Atomic => 1,
        }
    }
}

/// Atomic operation (`-A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AtomicType {
    /// `CMP_AND_SWAP`.
    CmpAndSwap,
    /// `FETCH_AND_ADD` (the default).
    #[default]
    FetchAndAdd,
}

impl AtomicType {
    /// perftest's name for it.
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// Bandwidth or latency test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestType {
    /// `ib_*_bw`.
    Bw,
    /// `ib_*_lat`.
    Lat,
}

/// Connection type (`-c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ConnectionType {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl ConnectionType {
    /// `RC`, `UC` or `UD`.
    pub fn name(self) -> &'static str {
        match self {
            ConnectionType::Rc => "RC",
            ConnectionType::Uc => "UC",
            ConnectionType::Ud => "UD",
        }
    }
}

/// Everything `ctx_print_test_info()` prints.
#[derive(Clone, Debug, PartialEq)]
pub struct TestInfo {
    /// Verb under test.
    pub verb: Verb,
    /// Atomic type, shown only for [`Verb::Atomic`].
    pub atomic_type: AtomicType,
    /// BW or latency.
    pub test: TestType,
    /// `-b` (BW only): adds "Bidirectional " to the title and shows TX/RX depth on both sides.
    pub duplex: bool,
    /// `-l`; "Post List " in the title and a `Post List` line when > 1 (BW).
    pub post_list: u32,
    /// `--recv_post_list`; a line when > 1.
    pub recv_post_list: u32,
    /// `-e`: the completion-vector number shown in ` Test with events. Using <dev>_comp<n>`.
    pub events_eq_num: Option<u32>,
    /// `-O`.
    pub dual_port: bool,
    /// Device name (`rxe0`).
    pub device: String,
    /// `-q`.
    pub num_qps: u32,
    /// Transport type: `IB` on rxe.
    pub transport: String,
    /// `-c`.
    pub connection: ConnectionType,
    /// `--use-srq`.
    pub use_srq: bool,
    /// PCIe relaxed ordering: `ON` unless `--disable_pcie_relaxed` (and always `OFF` for
    /// write_lat) in the Debian build.
    pub pcie_relaxed: bool,
    /// Print the two "CPU is not PCIe relaxed ordering compliant" warnings (only when
    /// `pcie_relaxed` is on).
    pub pcie_ro_warning: bool,
    /// `ibv_wr*` API in use (`OFF` on rxe).
    pub ibv_wr_api: bool,
    /// This side is the client (shows `TX depth`).
    pub is_client: bool,
    /// `-t`.
    pub tx_depth: u32,
    /// `-r` (shown for send tests on the server or with `-b`).
    pub rx_depth: u32,
    /// `-Q` after dependencies (shown for BW).
    pub cq_mod: u32,
    /// Negotiated MTU in bytes.
    pub mtu_bytes: u64,
    /// Link type: `Ethernet` on RoCE.
    pub link_type: String,
    /// GID index; the line is omitted when -1.
    pub gid_index: i32,
    /// Max inline data (send/write tests).
    pub inline_size: u32,
    /// Outstanding reads (read/atomic tests show this instead of inline size).
    pub out_reads: u32,
    /// `-R` (never on in softroce; the line shows `OFF`).
    pub rdma_cm: bool,
}

fn on_off(b: bool) -> &'static str {
    if b { "ON" } else { "OFF" }
}

/// The test-information block, from the opening `RESULT_LINE` to the closing one, every line
/// ending in `\n`.
pub fn format_test_info(t: &TestInfo) -> String {
    let mut s = String::new();
    s.push_str(RESULT_LINE);
    s.push('\n');
    s.push_str("                    ");
    s.push_str(t.verb.title());
    s.push(' ');
    if t.verb == Verb::Atomic {
        s.push_str(t.atomic_type.name());
        s.push(' ');
    }
    match t.test {
        TestType::Bw => {
            if t.duplex {
                s.push_str("Bidirectional ");
            }
            if t.post_list > 1 {
                s.push_str("Post List ");
            }
            s.push_str("BW ");
        }
        TestType::Lat => s.push_str("Latency "),
    }
    s.push_str("Test\n");
    if let Some(eq) = t.events_eq_num {
        s.push_str(&format!(" Test with events. Using {}_comp{eq}\n", t.device));
    }
    s.push_str(&format!(" Dual-port       : {}\t\tDevice         : {}\n", on_off(t.dual_port), t.device));
    s.push_str(&format!(" Number of qps   : {}\t\tTransport type : {}\n", t.num_qps, t.transport));
    s.push_str(&format!(
        " Connection type : {}\t\tUsing SRQ      : {}\n",
        t.connection.name(),
        on_off(t.use_srq)
    ));
    s.push_str(&format!(" PCIe relax order: {}\n", on_off(t.pcie_relaxed)));
    if t.pcie_relaxed && t.pcie_ro_warning {
        s.push_str(" WARNING: CPU is not PCIe relaxed ordering compliant.\n");
        s.push_str(
            " WARNING: You should disable PCIe RO with `--disable_pcie_relaxed` for both server and client.\n",
        );
    }
    s.push_str(&format!(" ibv_wr* API     : {}\n", on_off(t.ibv_wr_api)));
    if t.is_client || t.duplex {
        s.push_str(&format!(" TX depth        : {}\n", t.tx_depth));
    }
    if t.post_list > 1 {
        s.push_str(&format!(" Post List       : {}\n", t.post_list));
    }
    if t.recv_post_list > 1 {
        s.push_str(&format!(" Recv Post List  : {}\n", t.recv_post_list));
    }
    if t.verb == Verb::Send && (!t.is_client || t.duplex) {
        s.push_str(&format!(" RX depth        : {}\n", t.rx_depth));
    }
    if t.test == TestType::Bw {
        s.push_str(&format!(" CQ Moderation   : {}\n", t.cq_mod));
    }
    s.push_str(&format!(" Mtu             : {}[B]\n", t.mtu_bytes));
    s.push_str(&format!(" Link type       : {}\n", t.link_type));
    if t.gid_index != -1 {
        s.push_str(&format!(" GID index       : {}\n", t.gid_index));
    }
    if matches!(t.verb, Verb::Read | Verb::Atomic) {
        s.push_str(&format!(" Outstand reads  : {}\n", t.out_reads));
    } else {
        s.push_str(&format!(" Max inline data : {}[B]\n", t.inline_size));
    }
    s.push_str(&format!(" rdma_cm QPs\t : {}\n", on_off(t.rdma_cm)));
    s.push_str(if t.rdma_cm { " Data ex. method : rdma_cm\n" } else { " Data ex. method : Ethernet\n" });
    s.push_str(RESULT_LINE);
    s.push('\n');
    s
}

/// Whether an address line describes our QP or the peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// ` local address: ...`
    Local,
    /// ` remote address: ...`
    Remote,
}

/// ` local address: LID %#04x QPN %#06x PSN %#06x[ OUT %#04x][ RKey %#08x VAddr %#016llx]`.
///
/// read adds OUT and RKey/VAddr, write adds RKey/VAddr, send and atomic add nothing. `lid` is
/// printed as given (perftest shows `--dlid` instead of the remote LID when set).
pub fn format_address_line(side: Side, verb: Verb, dest: &PerftestDest) -> String {
    let side = match side {
        Side::Local => "local",
        Side::Remote => "remote",
    };
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_alt_hex(dest.lid.into(), 4),
        c_alt_hex(dest.qpn.into(), 6),
        c_alt_hex(dest.psn.into(), 6)
    );
    if verb == Verb::Read {
        s.push_str(&format!(" OUT {}", c_alt_hex(dest.out_reads.into(), 4)));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        s.push_str(&format!(" RKey {} VAddr {}", c_alt_hex(dest.rkey.into(), 8), c_alt_hex(dest.vaddr, 16)));
    }
    s
}

/// ` GID: %02d:...:%02d`: each GID byte in decimal (printed when the GID index is not -1).
pub fn format_gid_line(gid: &[u8; 16]) -> String {
    let parts: Vec<String> = gid.iter().map(|b| format!("{b:02}")).collect();
    format!(" GID: {}", parts.join(":"))
}

// ---------------------------------------------------------------------------------------------
// Bandwidth
// ---------------------------------------------------------------------------------------------

/// BW report units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BwUnits {
    /// `MB/sec` columns, where MB is 2^20 bytes (the default).
    #[default]
    MiBps,
    /// `Gb/sec` columns (`--report_gbits`): 10^9 bits.
    Gbps,
}

impl BwUnits {
    /// perftest's `format_factor`: bytes per unit.
    pub fn format_factor(self) -> u64 {
        match self {
            BwUnits::MiBps => 0x10_0000,
            BwUnits::Gbps => 125_000_000,
        }
    }

    /// The column header line.
    pub fn header(self) -> &'static str {
        match self {
            BwUnits::MiBps => BW_HEADER_MB,
            BwUnits::Gbps => BW_HEADER_GB,
        }
    }
}

/// One BW result (perftest's `struct bw_report_data`); also the payload of the end-of-test
/// report exchange.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Messages counted (iters × QPs, or the measured count in `-D` mode).
    pub iters: u64,
    /// Peak bandwidth in the report units (0 with noPeak).
    pub bw_peak: f64,
    /// Average bandwidth in the report units.
    pub bw_avg: f64,
    /// Average message rate in Mpps.
    pub msg_rate: f64,
    /// `--report-per-port`: port 1 bandwidth.
    pub bw_avg_p1: f64,
    /// `--report-per-port`: port 1 message rate.
    pub msg_rate_p1: f64,
    /// `--report-per-port`: port 2 bandwidth.
    pub bw_avg_p2: f64,
    /// `--report-per-port`: port 2 message rate.
    pub msg_rate_p2: f64,
}

impl BwReport {
    /// The row perftest prints in duplex mode: rates summed, size and iters ours.
    pub fn combined(&self, remote: &BwReport) -> BwReport {
        BwReport {
            bw_peak: self.bw_peak + remote.bw_peak,
            bw_avg: self.bw_avg + remote.bw_avg,
            msg_rate: self.msg_rate + remote.msg_rate,
            bw_avg_p1: self.bw_avg_p1 + remote.bw_avg_p1,
            msg_rate_p1: self.msg_rate_p1 + remote.msg_rate_p1,
            bw_avg_p2: self.bw_avg_p2 + remote.bw_avg_p2,
            msg_rate_p2: self.msg_rate_p2 + remote.msg_rate_p2,
            ..*self
        }
    }
}

/// Inputs of [`compute_bw`] other than the timestamps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwParams {
    /// Message size in bytes.
    pub size: u64,
    /// Messages counted: `iters * num_qps` in iterations mode, the measured count in `-D` mode.
    pub msgs: u64,
    /// CQ moderation (`-Q` after dependencies), ≥ 1.
    pub cq_mod: u64,
    /// Post list (`-l`), ≥ 1.
    pub post_list: u64,
    /// No peak computation (`-N`, iters > 20000, `-D`, send_bw server): peak is 0 and the
    /// average uses `tcompleted[0] - tposted[0]`.
    pub no_peak: bool,
    /// Report units.
    pub units: BwUnits,
    /// Tick rate of the timestamps (perftest: CPU MHz × 10^6; nanoseconds: [`NS_PER_SEC`]).
    pub ticks_per_sec: f64,
}

/// perftest's `print_report_bw()` computation.
///
/// `tposted[i]` is the tick at which message i was posted; `tcompleted[j]` the tick at which
/// the completion covering message j was seen. perftest stamps only `k*cq_mod - 1` and the
/// last index and zeroes the rest; pass zeros there too (`tcompleted[0] - tposted[0]` seeds
/// the minimum and wraps around when unstamped). With `no_peak`, only `tposted[0]` (start) and
/// `tcompleted[0]` (end) are used.
///
/// * average = `size * msgs * ticks_per_sec / ((tcompleted[last] - tposted[0]) * factor)`;
/// * msg rate = `msgs * ticks_per_sec / (ticks * 10^6)` Mpps;
/// * peak = `size * ticks_per_sec / (opt_delta * factor)` where `opt_delta` is the smallest
///   integer per-message time `(tcompleted[j] - tposted[i]) / (j - i + 1)` over the stamped j.
pub fn compute_bw(p: &BwParams, tposted: &[u64], tcompleted: &[u64]) -> Result<BwReport, StatsError> {
    if p.cq_mod == 0 {
        return Err(StatsError::InvalidParameter("cq_mod must be at least 1"));
    }
    if p.post_list == 0 {
        return Err(StatsError::InvalidParameter("post_list must be at least 1"));
    }
    let n = p.msgs;
    let need = if p.no_peak { 1 } else { usize::try_from(n).unwrap_or(usize::MAX).max(1) };
    for len in [tposted.len(), tcompleted.len()] {
        if len < need {
            return Err(StatsError::NotEnoughSamples { got: len, need });
        }
    }
    let mut opt_delta = tcompleted[0].wrapping_sub(tposted[0]);
    if !p.no_peak {
        let n = n as usize;
        let cq_mod = p.cq_mod as usize;
        let per_msg = |i: usize, j: usize| tcompleted[j].wrapping_sub(tposted[i]) / (j - i + 1) as u64;
        let mut i = 0;
        while i < n {
            let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
            while j < n {
                opt_delta = opt_delta.min(per_msg(i, j));
                j += cq_mod;
            }
            if !n.is_multiple_of(cq_mod) {
                opt_delta = opt_delta.min(per_msg(i, n - 1));
            }
            i += p.post_list as usize;
        }
    }
    let last = if p.no_peak { 0 } else { n.saturating_sub(1) as usize };
    let factor = p.units.format_factor();
    let sum = tcompleted[last].wrapping_sub(tposted[0]) as f64;
    let bw_avg = (p.size as f64 * n as f64 * p.ticks_per_sec) / (sum * factor as f64);
    let msg_rate = (n as f64 * p.ticks_per_sec) / (sum * 1_000_000.0);
    let peak_up = if p.no_peak { 0 } else { p.size.wrapping_mul(p.ticks_per_sec as u64) };
    let peak_down = opt_delta.wrapping_mul(factor);
    Ok(BwReport {
        size: p.size,
        iters: n,
        bw_peak: x86_nan(peak_up as f64 / peak_down as f64),
        bw_avg: x86_nan(bw_avg),
        msg_rate: x86_nan(msg_rate),
        ..BwReport::default()
    })
}

/// One BW row (`REPORT_FMT`, or `REPORT_FMT_EXT` when reporting Gb/s with an average below 0.1).
pub fn format_bw_row(r: &BwReport, units: BwUnits) -> String {
    if units == BwUnits::Gbps && r.bw_avg < 0.1 {
        format!(
            " {:<7}    {}           {}            {}            {}",
            r.size,
            r.iters,
            c_fixed_left(r.bw_peak, 7, 6),
            c_fixed_left(r.bw_avg, 7, 6),
            c_fixed_left(r.msg_rate, 7, 6)
        )
    } else {
        format!(
            " {:<7}    {:<10}       {}            {}\t\t   {}",
            r.size,
            r.iters,
            c_fixed_left(r.bw_peak, 7, 2),
            c_fixed_left(r.bw_avg, 7, 2),
            c_fixed_left(r.msg_rate, 7, 6)
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Latency
// ---------------------------------------------------------------------------------------------

/// One latency result, in microseconds (or ticks when `ticks_per_usec` is 1, like `-C`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct LatReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations (`-n`).
    pub iters: u64,
    /// Smallest sample.
    pub t_min: f64,
    /// Largest kept sample (the two largest samples are dropped first).
    pub t_max: f64,
    /// Median of the kept samples, in integer ticks before scaling.
    pub t_typical: f64,
    /// Mean of the kept samples.
    pub t_avg: f64,
    /// Standard deviation with perftest's `int` truncations.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

/// `tposted[k+1] - tposted[k]` for the first `iters` timestamps: perftest's latency samples.
pub fn lat_deltas(tposted: &[u64], iters: u64) -> Result<Vec<u64>, StatsError> {
    let n = usize::try_from(iters).unwrap_or(usize::MAX);
    if tposted.len() < n {
        return Err(StatsError::NotEnoughSamples { got: tposted.len(), need: n });
    }
    Ok(tposted[..n].windows(2).map(|w| w[1].wrapping_sub(w[0])).collect())
}

/// perftest's `print_report_lat()` from post timestamps (`tposted`, at least `iters` of them;
/// `iters` ≥ 4). `rtt_factor` is [`Verb::rtt_factor`].
pub fn compute_lat(
    size: u64,
    iters: u64,
    tposted: &[u64],
    ticks_per_usec: f64,
    rtt_factor: u32,
) -> Result<LatReport, StatsError> {
    compute_lat_from_deltas(size, iters, lat_deltas(tposted, iters)?, ticks_per_usec, rtt_factor)
}

/// perftest's `print_report_lat()` from the `iters - 1` samples directly (round-trip or
/// per-operation durations in ticks). Needs at least 3 samples.
///
/// Samples are sorted and the 2 largest dropped (`m = len - 2` kept); with
/// `q = ticks_per_usec * rtt_factor`: `t_min = d[0]/q`, `t_max = d[m]/q`, `t_typical` = integer
/// median of `d[..m]` / q, `t_avg` = mean of `d[i]/q`, `t_stdev = sqrt(Σ (int)pow((int)(avg -
/// d[i]/q), 2) / m)`, `p99 = d[ceil(m*0.99)]/q`, `p99.9 = d[ceil(m*0.999)]/q`.
pub fn compute_lat_from_deltas(
    size: u64,
    iters: u64,
    mut deltas: Vec<u64>,
    ticks_per_usec: f64,
    rtt_factor: u32,
) -> Result<LatReport, StatsError> {
    const TAIL: usize = 2;
    if deltas.len() < TAIL + 1 {
        return Err(StatsError::NotEnoughSamples { got: deltas.len(), need: TAIL + 1 });
    }
    let q = ticks_per_usec * f64::from(rtt_factor);
    deltas.sort_unstable();
    let m = deltas.len() - TAIL;
    let median =
        if (m - 1) % 2 == 1 { deltas[m / 2].wrapping_add(deltas[m / 2 - 1]) / 2 } else { deltas[m / 2] };
    let average_sum: f64 = deltas[..m].iter().map(|&d| d as f64 / q).sum();
    let average = average_sum / m as f64;
    let stdev_sum: f64 = deltas[..m]
        .iter()
        .map(|&d| {
            let temp = c_double_to_int(average - d as f64 / q);
            f64::from(c_double_to_int(f64::from(temp).powi(2)))
        })
        .sum();
    let i99 = (m as f64 * 0.99).ceil() as usize;
    let i999 = (m as f64 * 0.999).ceil() as usize;
    Ok(LatReport {
        size,
        iters,
        t_min: deltas[0] as f64 / q,
        t_max: deltas[m] as f64 / q,
        t_typical: median as f64 / q,
        t_avg: average,
        t_stdev: (stdev_sum / m as f64).sqrt(),
        p99: deltas[i99] as f64 / q,
        p99_9: deltas[i999] as f64 / q,
    })
}

/// One latency row (`REPORT_FMT_LAT`).
pub fn format_lat_row(r: &LatReport) -> String {
    format!(
        " {:<7} {}          {}        {}      {}  \t       {}     \t{}\t\t{} \t\t{}",
        r.size,
        r.iters,
        c_fixed_left(r.t_min, 7, 2),
        c_fixed_left(r.t_max, 7, 2),
        c_fixed_left(r.t_typical, 7, 2),
        c_fixed_left(r.t_avg, 7, 2),
        c_fixed_left(r.t_stdev, 7, 2),
        c_fixed_left(r.p99, 7, 2),
        c_fixed_left(r.p99_9, 7, 2)
    )
}

/// The `-U` / `-H` sample listing: `#, <units>` then `%d, %g` per sample (already divided by
/// `q = ticks_per_usec * rtt_factor`), every line ending in `\n`. Pass the unsorted
/// [`lat_deltas`] for `-U`, or the sorted ones without the 2 largest for `-H`.
pub fn format_lat_samples(deltas: &[u64], q: f64, units: &str) -> String {
    let mut s = format!("#, {units}\n");
    for (i, &d) in deltas.iter().enumerate() {
        s.push_str(&format!("{}, {}\n", i + 1, c_general(d as f64 / q)));
    }
    s
}

/// A duration-mode (`-D`) latency result.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct LatDurationReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations completed.
    pub iters: u64,
    /// Average latency in microseconds.
    pub t_avg: f64,
    /// Transactions per second.
    pub tps: f64,
}

/// perftest's `print_report_lat_duration()`: `elapsed_ticks` is `tcompleted[0] - tposted[0]`.
pub fn compute_lat_duration(
    size: u64,
    iters: u64,
    elapsed_ticks: u64,
    ticks_per_usec: f64,
    rtt_factor: u32,
) -> LatDurationReport {
    let t = elapsed_ticks as f64;
    LatDurationReport {
        size,
        iters,
        t_avg: ((t / ticks_per_usec) / f64::from(rtt_factor)) / iters as f64,
        tps: iters as f64 / (t / (ticks_per_usec * 1_000_000.0)),
    }
}

/// One duration-mode latency row (`REPORT_FMT_LAT_DUR`).
pub fn format_lat_duration_row(r: &LatDurationReport) -> String {
    format!(
        " {:<7}       {}            {}        {}",
        r.size,
        r.iters,
        c_fixed_left(r.t_avg, 7, 2),
        c_fixed_left(r.tps, 7, 2)
    )
}

// ---------------------------------------------------------------------------------------------
// Pingpong
// ---------------------------------------------------------------------------------------------

/// The numbers of the pingpong tools' two final lines.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct PingpongStats {
    /// `(long long)size * iters * 2` (both directions).
    pub bytes: i64,
    /// Iterations, as printed by `%d`.
    pub iters: i32,
    /// `usec / 1000000.`
    pub seconds: f64,
    /// `bytes * 8. / usec` (decimal Mbit/s).
    pub mbit_per_sec: f64,
    /// `usec / iters`, computed in `float`.
    pub usec_per_iter: f64,
}

/// rc/uc/ud/srq_pingpong's final computation. `elapsed_usec` is the `gettimeofday` difference
/// in microseconds; like the C code it is first stored in a `float`.
pub fn compute_pingpong_stats(size: u32, iters: u32, elapsed_usec: i64) -> PingpongStats {
    let usec = elapsed_usec as f32;
    let bytes = i64::from(size).wrapping_mul(i64::from(iters)).wrapping_mul(2);
    PingpongStats {
        bytes,
        iters: iters as i32,
        seconds: f64::from(usec) / 1_000_000.0,
        mbit_per_sec: bytes as f64 * 8.0 / f64::from(usec),
        usec_per_iter: f64::from(usec / iters as f32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> TestInfo {
        TestInfo {
            verb: Verb::Write,
            atomic_type: AtomicType::FetchAndAdd,
            test: TestType::Bw,
            duplex: false,
            post_list: 1,
            recv_post_list: 1,
            events_eq_num: None,
            dual_port: false,
            device: "rxe0".into(),
            num_qps: 1,
            transport: "IB".into(),
            connection: ConnectionType::Rc,
            use_srq: false,
            pcie_relaxed: true,
            pcie_ro_warning: false,
            ibv_wr_api: false,
            is_client: true,
            tx_depth: 128,
            rx_depth: 512,
            cq_mod: 1,
            mtu_bytes: 1024,
            link_type: "Ethernet".into(),
            gid_index: 1,
            inline_size: 0,
            out_reads: 128,
            rdma_cm: false,
        }
    }

    const DASHES: &str =
        "---------------------------------------------------------------------------------------\n";

    #[test]
    fn result_line_is_87_dashes() {
        assert_eq!(RESULT_LINE.len(), 87);
        assert!(RESULT_LINE.bytes().all(|b| b == b'-'));
    }

    #[test]
    fn test_info_write_bw_client() {
        let expected = String::new()
            + DASHES
            + "                    RDMA_Write BW Test\n"
            + " Dual-port       : OFF\t\tDevice         : rxe0\n"
            + " Number of qps   : 1\t\tTransport type : IB\n"
            + " Connection type : RC\t\tUsing SRQ      : OFF\n"
            + " PCIe relax order: ON\n"
            + " ibv_wr* API     : OFF\n"
            + " TX depth        : 128\n"
            + " CQ Moderation   : 1\n"
            + " Mtu             : 1024[B]\n"
            + " Link type       : Ethernet\n"
            + " GID index       : 1\n"
            + " Max inline data : 0[B]\n"
            + " rdma_cm QPs\t : OFF\n"
            + " Data ex. method : Ethernet\n"
            + DASHES;
        assert_eq!(format_test_info(&info()), expected);
    }

    #[test]
    fn test_info_send_bw_server_and_spec_block() {
        // The spec's B10 sample block has both TX and RX depth: a duplex send test.
        let t = TestInfo { verb: Verb::Send, duplex: true, is_client: false, ..info() };
        let expected = String::new()
            + DASHES
            + "                    Send Bidirectional BW Test\n"
            + " Dual-port       : OFF\t\tDevice         : rxe0\n"
            + " Number of qps   : 1\t\tTransport type : IB\n"
            + " Connection type : RC\t\tUsing SRQ      : OFF\n"
            + " PCIe relax order: ON\n"
            + " ibv_wr* API     : OFF\n"
            + " TX depth        : 128\n"
            + " RX depth        : 512\n"
            + " CQ Moderation   : 1\n"
            + " Mtu             : 1024[B]\n"
            + " Link type       : Ethernet\n"
            + " GID index       : 1\n"
            + " Max inline data : 0[B]\n"
            + " rdma_cm QPs\t : OFF\n"
            + " Data ex. method : Ethernet\n"
            + DASHES;
        assert_eq!(format_test_info(&t), expected);
    }

    #[test]
    fn test_info_titles_and_optional_lines() {
        let title = |t: &TestInfo| format_test_info(t).lines().nth(1).unwrap().to_string();
        let atomic = TestInfo { verb: Verb::Atomic, ..info() };
        assert_eq!(title(&atomic), "                    Atomic FETCH_AND_ADD BW Test");
        let lat = TestInfo { verb: Verb::Send, test: TestType::Lat, ..info() };
        assert_eq!(title(&lat), "                    Send Latency Test");
        let pl = TestInfo { post_list: 4, ..info() };
        assert_eq!(title(&pl), "                    RDMA_Write Post List BW Test");
        assert!(format_test_info(&pl).contains(" Post List       : 4\n"));

        let read_srv = TestInfo { verb: Verb::Read, is_client: false, gid_index: -1, ..info() };
        let s = format_test_info(&read_srv);
        assert!(s.contains(" Outstand reads  : 128\n"));
        assert!(!s.contains("Max inline"));
        assert!(!s.contains("TX depth"));
        assert!(!s.contains("GID index"));
        assert!(!s.contains("RX depth"));

        let lat_s = format_test_info(&TestInfo { test: TestType::Lat, pcie_relaxed: false, ..info() });
        assert!(!lat_s.contains("CQ Moderation"));
        assert!(lat_s.contains(" PCIe relax order: OFF\n"));

        let ev = format_test_info(&TestInfo { events_eq_num: Some(0), pcie_ro_warning: true, ..info() });
        assert!(ev.contains("RDMA_Write BW Test\n Test with events. Using rxe0_comp0\n Dual-port"));
        assert!(ev.contains(
            " PCIe relax order: ON\n WARNING: CPU is not PCIe relaxed ordering compliant.\n WARNING: You should \
             disable PCIe RO with `--disable_pcie_relaxed` for both server and client.\n ibv_wr*"
        ));
    }

    fn dest() -> PerftestDest {
        PerftestDest {
            lid: 0,
            out_reads: 128,
            qpn: 0x11,
            psn: 0xabcd,
            rkey: 0x1234,
            vaddr: 0x7f00_1234_5000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 192, 168, 122, 10],
            srqn: 0,
        }
    }

    #[test]
    fn address_lines_per_verb() {
        let d = dest();
        assert_eq!(
            format_address_line(Side::Local, Verb::Read, &d),
            " local address: LID 0000 QPN 0x0011 PSN 0xabcd OUT 0x80 RKey 0x001234 VAddr 0x007f0012345000"
        );
        assert_eq!(
            format_address_line(Side::Remote, Verb::Write, &d),
            " remote address: LID 0000 QPN 0x0011 PSN 0xabcd RKey 0x001234 VAddr 0x007f0012345000"
        );
        assert_eq!(
            format_address_line(Side::Local, Verb::Send, &d),
            " local address: LID 0000 QPN 0x0011 PSN 0xabcd"
        );
        assert_eq!(
            format_address_line(Side::Local, Verb::Atomic, &d),
            " local address: LID 0000 QPN 0x0011 PSN 0xabcd"
        );
        let big = PerftestDest { lid: 0x1, qpn: 0xab_cdef, psn: 0, rkey: 0, vaddr: 0, ..d };
        assert_eq!(
            format_address_line(Side::Local, Verb::Write, &big),
            " local address: LID 0x01 QPN 0xabcdef PSN 000000 RKey 00000000 VAddr 0000000000000000"
        );
        assert_eq!(format_gid_line(&d.gid), " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:122:10");
        assert_eq!(format_gid_line(&[5; 16]), " GID: 05:05:05:05:05:05:05:05:05:05:05:05:05:05:05:05");
    }

    #[test]
    fn bw_header_and_rows() {
        assert_eq!(BwUnits::MiBps.header(), BW_HEADER_MB);
        let r = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1123.456,
            bw_avg: 1101.5,
            msg_rate: 0.017624,
            ..Default::default()
        };
        assert_eq!(
            format_bw_row(&r, BwUnits::MiBps),
            " 65536      5000             1123.46            1101.50\t\t   0.017624"
        );
        let small = BwReport {
            size: 2,
            iters: 1000,
            bw_peak: 0.0,
            bw_avg: 0.5,
            msg_rate: 31.25,
            ..Default::default()
        };
        assert_eq!(
            format_bw_row(&small, BwUnits::Gbps),
            " 2          1000             0.00               0.50   \t\t   31.250000"
        );
        let tiny = BwReport { bw_avg: 0.012345, ..small };
        assert_eq!(
            format_bw_row(&tiny, BwUnits::Gbps),
            " 2          1000           0.000000            0.012345            31.250000"
        );
        let nan = BwReport { bw_peak: f64::NAN, bw_avg: f64::INFINITY, ..small };
        assert_eq!(
            format_bw_row(&nan, BwUnits::MiBps),
            " 2          1000             nan                inf    \t\t   31.250000"
        );
        let nan = BwReport { bw_peak: -f64::NAN, ..nan };
        assert_eq!(
            format_bw_row(&nan, BwUnits::MiBps),
            " 2          1000             -nan               inf    \t\t   31.250000"
        );
    }

    #[test]
    fn bw_stats_cq_mod_1() {
        // 4 messages of 1000 B, ns ticks. Posted at 0,10,20,30; completed at 100,110,125,130.
        let p = BwParams {
            size: 1000,
            msgs: 4,
            cq_mod: 1,
            post_list: 1,
            no_peak: false,
            units: BwUnits::MiBps,
            ticks_per_sec: NS_PER_SEC,
        };
        let r = compute_bw(&p, &[0, 10, 20, 30], &[100, 110, 125, 130]).unwrap();
        // sum = 130 ns; avg = 1000*4*1e9 / (130 * 1048576)
        assert_eq!(r.bw_avg, 4000.0 * 1e9 / (130.0 * 1_048_576.0));
        assert_eq!(r.msg_rate, 4.0 * 1e9 / (130.0 * 1e6));
        // Candidates (tc[j]-tp[i])/(j-i+1): i=0: 100,55,41,32; i=1: 100,57,40; i=2: 105,55; i=3: 100.
        // Min is 32 (integer 130/4).
        assert_eq!(r.bw_peak, (1000u64 * 1_000_000_000) as f64 / (32u64 * 1_048_576) as f64);
        assert_eq!((r.size, r.iters), (1000, 4));
    }

    #[test]
    fn bw_stats_cq_mod_and_no_peak() {
        // 5 messages, cq_mod 2: stamped completions at indices 1, 3 and the last (4); the
        // others stay 0 (perftest zeroes the array), so tcompleted[0] - tposted[0] wraps.
        let tp = [1000, 1010, 1020, 1030, 1040];
        let tc = [0, 1050, 0, 1090, 1200];
        let p = BwParams {
            size: 64,
            msgs: 5,
            cq_mod: 2,
            post_list: 1,
            no_peak: false,
            units: BwUnits::Gbps,
            ticks_per_sec: NS_PER_SEC,
        };
        let r = compute_bw(&p, &tp, &tc).unwrap();
        // i=0: j=1 -> 50/2=25, j=3 -> 90/4=22, last j=4 -> 200/5=40
        // i=1: j=1 -> 40/1=40, j=3 -> 80/3=26, last -> 190/4=47
        // i=2: j=3 -> 70/2=35, last -> 180/3=60
        // i=3: j=3 -> 60, last -> 170/2=85;  i=4: j=5 (none), last -> 160
        assert_eq!(r.bw_peak, (64u64 * 1_000_000_000) as f64 / (22u64 * 125_000_000) as f64);
        assert_eq!(r.bw_avg, 64.0 * 5.0 * 1e9 / (200.0 * 125e6));
        let np = BwParams { no_peak: true, ..p };
        // noPeak: start tposted[0], end tcompleted[0].
        let r = compute_bw(&np, &[500], &[1500]).unwrap();
        assert_eq!(r.bw_peak, 0.0);
        assert_eq!(r.bw_avg, 64.0 * 5.0 * 1e9 / (1000.0 * 125e6));
        assert_eq!(r.msg_rate, 5.0 * 1e9 / (1000.0 * 1e6));
        assert!(compute_bw(&p, &tp[..3], &tc).is_err());
        assert!(compute_bw(&BwParams { cq_mod: 0, ..p }, &tp, &tc).is_err());
    }

    #[test]
    fn bw_combined_sums_rates() {
        let a =
            BwReport { size: 8, iters: 10, bw_peak: 1.0, bw_avg: 2.0, msg_rate: 3.0, ..Default::default() };
        let b =
            BwReport { size: 9, iters: 11, bw_peak: 0.5, bw_avg: 0.25, msg_rate: 1.0, ..Default::default() };
        let c = a.combined(&b);
        assert_eq!((c.size, c.iters, c.bw_peak, c.bw_avg, c.msg_rate), (8, 10, 1.5, 2.25, 4.0));
    }

    #[test]
    fn lat_stats_hand_computed() {
        // 7 timestamps -> 6 deltas: 10,12,11,50,13,100 (ns), q = 1000*2 (write_lat halving).
        let tp = [0u64, 10, 22, 33, 83, 96, 196];
        let r = compute_lat(2, 7, &tp, NS_PER_USEC, Verb::Write.rtt_factor()).unwrap();
        // sorted: 10,11,12,13,50,100; drop 2 largest -> m = 4: 10,11,12,13.
        assert_eq!(r.t_min, 10.0 / 2000.0);
        assert_eq!(r.t_max, 50.0 / 2000.0); // d[m]: the second-largest original sample
        // m even: (d[2] + d[1]) / 2 = (12 + 11) / 2 = 11 (integer)
        assert_eq!(r.t_typical, 11.0 / 2000.0);
        assert_eq!(r.t_avg, (10.0 / 2000.0 + 11.0 / 2000.0 + 12.0 / 2000.0 + 13.0 / 2000.0) / 4.0);
        assert_eq!(r.t_stdev, 0.0); // sub-µs spread truncates to 0
        // ceil(4*0.99) = 4, ceil(4*0.999) = 4 -> d[4] = 50
        assert_eq!((r.p99, r.p99_9), (50.0 / 2000.0, 50.0 / 2000.0));
        // Expected rows in these tests were produced by glibc printf with perftest's formats.
        assert_eq!(
            format_lat_row(&r),
            " 2       7          0.01           0.03         0.01     \t       0.01        \t0.00   \t\t0.03    \t\t0.03   "
        );
        let r = LatReport {
            size: 2,
            iters: 1000,
            t_min: 1.23,
            t_max: 45.678,
            t_typical: 1.5,
            t_avg: 1.6049,
            t_stdev: 0.0,
            p99: 2.345,
            p99_9: 12.3456,
        };
        assert_eq!(
            format_lat_row(&r),
            " 2       1000          1.23           45.68        1.50     \t       1.60        \t0.00   \t\t2.35    \t\t12.35  "
        );
    }

    #[test]
    fn lat_stats_odd_count_and_stdev_truncation() {
        // Deltas in µs ticks (ticks_per_usec = 1, rtt 1):
        // deltas: 1, 3, 10, 6, 2, 1000, 2000 -> sorted 1,2,3,6,10,1000,2000; m = 5.
        let d = vec![1u64, 3, 10, 6, 2, 1000, 2000];
        let r = compute_lat_from_deltas(8, 8, d, 1.0, 1).unwrap();
        assert_eq!(r.t_typical, 3.0); // m odd -> d[2]
        assert_eq!(r.t_avg, 22.0 / 5.0); // 4.4
        // (int)(4.4 - x): 3, 2, 1, -1, -5 -> squares 9, 4, 1, 1, 25 = 40; sqrt(40/5)
        assert_eq!(r.t_stdev, 8f64.sqrt());
        assert_eq!(r.t_max, 1000.0);
        // ceil(5*0.99)=5, ceil(5*0.999)=5
        assert_eq!(r.p99, 1000.0);
        assert_eq!(r.t_min, 1.0);
    }

    #[test]
    fn lat_stats_percentiles_large() {
        // 1000 iterations -> 999 samples 1..=999, m = 997.
        let tp: Vec<u64> = (0..1000u64).map(|k| k * (k + 1) / 2).collect(); // deltas 1..=999
        let r = compute_lat(2, 1000, &tp, 1.0, 1).unwrap();
        // Sorted d[i] = i + 1.
        assert_eq!(r.t_max, 998.0); // d[997]
        assert_eq!(r.t_typical, 499.0); // m odd -> d[498]
        assert_eq!(r.p99, 989.0); // ceil(987.03) = 988 -> d[988]
        assert_eq!(r.p99_9, 998.0); // ceil(996.003) = 997 -> d[997]
    }

    #[test]
    fn lat_stats_int_min_quirk() {
        // A spread above 46340 µs overflows the C int square: x86 yields INT_MIN.
        assert_eq!(c_double_to_int(46341f64.powi(2)), i32::MIN);
        assert_eq!(c_double_to_int(46340f64.powi(2)), 2_147_395_600);
        assert_eq!(c_double_to_int(-3.9), -3);
        assert_eq!(c_double_to_int(f64::NAN), i32::MIN);
        assert!(compute_lat_from_deltas(2, 3, vec![1, 2], 1.0, 1).is_err());
    }

    #[test]
    fn lat_duration() {
        // 1000 iterations in 5 s of ns ticks, send (rtt 2).
        let r = compute_lat_duration(2, 1000, 5_000_000_000, NS_PER_USEC, 2);
        assert_eq!(r.t_avg, ((5e9 / 1000.0) / 2.0) / 1000.0); // 2500 µs
        assert_eq!(r.tps, 1000.0 / (5e9 / 1e9));
        assert_eq!(format_lat_duration_row(&r), " 2             1000            2500.00        200.00 ");
    }

    #[test]
    fn headers_are_literal() {
        assert_eq!(
            LAT_HEADER,
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   \
             99% percentile[usec]   99.9% percentile[usec] "
        );
        assert_eq!(
            BW_HEADER_GB,
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        );
        assert!(WAITING_BANNER.starts_with("\n****"));
        assert_eq!(WAITING_BANNER.lines().nth(2), Some("* Waiting for client to connect... *"));
    }

    #[test]
    fn general_format_like_printf_g() {
        assert_eq!(c_general(0.0), "0");
        assert_eq!(c_general(1.5), "1.5");
        assert_eq!(c_general(2.0), "2");
        assert_eq!(c_general(123456.0), "123456");
        assert_eq!(c_general(1234567.0), "1.23457e+06");
        assert_eq!(c_general(0.0001), "0.0001");
        assert_eq!(c_general(0.00001234), "1.234e-05");
        assert_eq!(c_general(1.23456789), "1.23457");
        assert_eq!(c_general(999999.5), "1e+06");
        assert_eq!(format_lat_samples(&[3, 5], 2.0, "usec"), "#, usec\n1, 1.5\n2, 2.5\n");
    }

    #[test]
    fn pingpong_stats() {
        let s = compute_pingpong_stats(4096, 1000, 123_456);
        assert_eq!(s.bytes, 8_192_000);
        assert_eq!(s.seconds, 0.123456);
        assert_eq!(s.mbit_per_sec, 8_192_000.0 * 8.0 / 123_456.0);
        assert_eq!(s.usec_per_iter, f64::from(123_456f32 / 1000f32));
        // float precision: 16777217 µs is not representable in a float.
        let s = compute_pingpong_stats(1, 3, 16_777_217);
        assert_eq!(s.seconds, 16.777216);
        assert_eq!(c_fixed(s.usec_per_iter, 2), "5592405.50");
    }
}
