//! perftest's parameter handling: defaults, the parser's range checks, and the derived
//! defaults of `force_dependecies()` in perftest's order (spec B6).

use crate::cli::common::CliError;
use crate::cli::oob::Role;
use crate::cli::oob::perftest::PerftestTest;
use crate::cli::report::ConnectionType;
use crate::cli::report::{AtomicType, BwUnits, RESULT_LINE, Verb};

use super::args::TestOpts;

/// `MAX_SIZE`: the largest `-a` size, and the buffer size `-a` allocates for.
pub const MAX_SIZE: u64 = 8_388_608;
/// `-a` runs sizes 2^1 ..= 2^23.
pub const ALL_SIZES: usize = 23;
/// Fixed message size of the atomic tests.
pub const ATOMIC_SIZE: u64 = 8;
/// `MSG_SIZE_CQ_MOD_LIMIT`: above it, CQ moderation is turned off unless `-Q` was given.
const CQ_MOD_LIMIT: u64 = 8192;
/// The device's outstanding READ/atomic limit (`max_qp_rd_atom`, as on rxe).
pub const MAX_OUT_READS: u32 = softroce::transport::MAX_RD_ATOMIC as u32;
/// perftest's largest `-I`.
const MAX_INLINE: u32 = 912;

/// `-D` mode timing: measure between `margin` and `secs - margin` after the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationMode {
    /// `-D`.
    pub secs: u64,
    /// `-f`, or `secs / 4`.
    pub margin: u64,
}

/// Everything a run needs, after validation and perftest's derived defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Which tool.
    pub test: PerftestTest,
    /// Client (host given) or server.
    pub role: Role,
    /// The server (client only).
    pub host: Option<String>,
    /// TCP port.
    pub port: u16,
    /// `-d`.
    pub ib_dev: Option<String>,
    /// `--backend`.
    pub backend: crate::cli::common::BackendArg,
    /// `-x`, if given.
    pub gid_index: Option<u8>,
    /// Message size; with `-a` the buffer-layout size [`MAX_SIZE`] (each round has its own).
    pub size: u64,
    /// `-a`.
    pub all: bool,
    /// Iterations per QP (0 in `-D` mode, where they are counted).
    pub iters: u64,
    /// `-D`.
    pub duration: Option<DurationMode>,
    /// Send queue depth.
    pub tx_depth: u32,
    /// Receive queue depth (send tests; 1 otherwise).
    pub rx_depth: u32,
    /// Signal every `cq_mod`-th send.
    pub cq_mod: u32,
    /// Number of QPs.
    pub num_qps: u32,
    /// `-m` (0: the port's active MTU).
    pub mtu: u32,
    /// Largest inline message.
    pub inline_size: u32,
    /// `-o` as given (read/atomic only).
    pub outs: Option<u32>,
    /// `-A`.
    pub atomic_type: AtomicType,
    /// `-b`.
    pub duplex: bool,
    /// No peak computation (`-N`, `-D`, send_bw server, iters > 20000).
    pub no_peak: bool,
    /// `-e`.
    pub events: bool,
    /// `--report_gbits`.
    pub units: BwUnits,
    /// `-u`.
    pub qp_timeout: u8,
    /// `-S`.
    pub sl: u8,
    /// `--tclass`.
    pub tclass: u8,
    /// `--json`.
    pub json: bool,
    /// `--connect-timeout`, `--peer-timeout`.
    pub wait: crate::cli::common::WaitArgs,
    /// `-c`: the QP type (RC, or UC for the write and send tests).
    pub connection: ConnectionType,
    /// Notices perftest prints on stdout while applying its dependencies.
    pub notices: Vec<String>,
    /// `-R`: connect through rdma_cm (the parameter exchange too).
    pub rdma_cm: bool,
    /// `-s` was given (perftest's `req_size`: a UD size above the MTU is then an error, not
    /// lowered to the MTU).
    pub req_size: bool,
}

impl Params {
    /// The verb under test.
    pub fn verb(&self) -> Verb {
        self.test.verb()
    }

    /// True for the send tests.
    pub fn is_send(&self) -> bool {
        self.verb() == Verb::Send
    }

    /// True for READ and atomic tests.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(self.verb(), Verb::Read | Verb::Atomic)
    }

    /// The message size of run `round` (`-a`: 2 << round).
    pub fn round_size(&self, round: usize) -> u64 {
        if self.all { 2u64 << round } else { self.size }
    }
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError::usage(msg)
}

/// `-s`: a number with an optional `K` (×1024) or `M` (×1024²) suffix, 1..=UINT_MAX/2.
pub fn parse_size(text: &str) -> Result<u64, CliError> {
    crate::cli::common::parse_size("-s", text, 1, u64::from(u32::MAX / 2))
}

use crate::cli::common::in_range;

/// Validates `o` for `test` like perftest's parser and applies `force_dependecies()`.
pub fn resolve(test: PerftestTest, o: &TestOpts) -> Result<Params, CliError> {
    use PerftestTest::*;
    let verb = test.verb();
    let bw = test.is_bw();
    let send = verb == Verb::Send;
    let read_atomic = matches!(verb, Verb::Read | Verb::Atomic);
    let role = if o.host.is_some() { Role::Client } else { Role::Server };

    // --- init_perftest_params(): defaults ---------------------------------------------------
    let mut size = match (verb, bw) {
        (Verb::Atomic, _) => ATOMIC_SIZE,
        (_, true) => 65536,
        (_, false) => 2,
    };
    let mut iters: u64 = if test == WriteBw { 5000 } else { 1000 };
    let mut tx_depth: u32 = if bw { 128 } else { 1 };
    let mut rx_depth: u32 = if send { 512 } else { 1 };
    let mut cq_mod: u32 = 100;
    let mut num_qps = 1;
    let mut notices = Vec::new();

    // --- parser(): per-flag checks ----------------------------------------------------------
    if let Some(p) = o.ib_port {
        if p < 1 {
            return Err(usage("-i: IB Port can't be less than 1"));
        }
        if p != 1 {
            return Err(usage(format!("-i {p}: softroce devices have a single port; use -i 1")));
        }
    }
    if let Some(n) = o.iters {
        iters = in_range("-n", "Iteration num", n, 5, 100_000_000)?;
    }
    if let Some(t) = o.tx_depth {
        tx_depth = in_range("-t", "Tx depth", t, 1, 15000)?;
    }
    if let Some(sl) = o.sl
        && sl > 15
    {
        return Err(usage(format!("-S {sl}: Only 15 Service levels")));
    }
    let gid_index = match o.gid_index {
        Some(x) => Some(in_range("-x", "Gid index", x, 0, 64)? as u8),
        None => None,
    };
    let connection = match o.connection.as_deref() {
        None | Some("RC") => ConnectionType::Rc,
        Some("UC") if read_atomic => {
            return Err(usage("-c UC: UC connection not possible in READ/ATOMIC verbs"));
        }
        Some("UC") => ConnectionType::Uc,
        Some("UD") if !send => return Err(usage("-c UD: UD connection only possible in SEND verb")),
        Some("UD") => ConnectionType::Ud,
        Some(c @ ("XRC" | "DC" | "SRD" | "RawEth")) => {
            return Err(usage(format!(
                "-c {c}: {c} is not supported by softroce (rxe has no {c} either); use -c RC"
            )));
        }
        Some(other) => {
            return Err(usage(format!(
                "-c {other}: unknown connection type (choose RC, UC, or UD for the send tests)"
            )));
        }
    };
    if let Some(q) = o.qp {
        if !bw {
            return Err(usage("-q: Multiple QPs only available on bw tests"));
        }
        num_qps = in_range("-q", "num of Qps", q, 1, 16384)?;
    }
    let mut inline_size = 0;
    if let Some(i) = o.inline_size {
        inline_size = in_range("-I", "Max inline", i, 0, MAX_INLINE)?;
        if read_atomic {
            return Err(usage("-I: Inline feature not available on READ/Atomic verbs"));
        }
    }
    if o.outs.is_some() && !read_atomic {
        return Err(usage("-o: Setting Outstanding reads only available on READ verb (and atomic tests)"));
    }
    if let Some(r) = o.rx_depth {
        rx_depth = in_range("-r", "Rx depth", r, 1, 16384)?;
        if !send && rx_depth > 1 {
            return Err(usage("-r: On RDMA verbs rx depth can be only 1"));
        }
    }
    let req_cq_mod = o.cq_mod.is_some();
    if let Some(q) = o.cq_mod {
        cq_mod = in_range("-Q", "CQ moderation", q, 1, 1024)?;
    }
    let mut atomic_type = AtomicType::FetchAndAdd;
    if let Some(a) = &o.atomic_type {
        if verb != Verb::Atomic {
            return Err(usage(
                "-A: You are not running the atomic_lat/bw test! To change the atomic action type, you must run one of the atomic tests",
            ));
        }
        atomic_type = match a.as_str() {
            "CMP_AND_SWAP" => AtomicType::CmpAndSwap,
            "FETCH_AND_ADD" => AtomicType::FetchAndAdd,
            _ => {
                return Err(usage(format!(
                    "-A {a}: Invalid Atomic type! please choose from {{CMP_AND_SWAP,FETCH_AND_ADD}}"
                )));
            }
        };
    }
    let duration_secs = match o.duration {
        Some(0) => return Err(usage("-D 0: Duration period should be positive")),
        other => other,
    };
    if let Some(s) = &o.size {
        size = parse_size(s)?;
    }
    if o.events && verb == Verb::Write {
        return Err(usage("-e: Events feature not available on WRITE verb"));
    }
    if o.bidirectional && !bw {
        return Err(usage("-b: Bidirectional is only available in BW test"));
    }
    let mut no_peak = o.no_peak;
    if no_peak && !bw {
        return Err(usage("-N: NoPeak only valid for BW tests"));
    }
    if let Some(m) = o.mtu
        && m > i32::MAX as u32
    {
        return Err(usage(format!("-m {m}: MTU argument should be an int")));
    }
    let duplex = o.bidirectional;
    let all = o.all;
    if connection == ConnectionType::Ud && all {
        return Err(usage("-a with -c UD: softroce perf runs UD at one size (-s, at most the MTU)"));
    }
    if connection == ConnectionType::Uc && o.rdma_cm {
        return Err(usage("-c UC with -R: rdma_cm connects RC and UD QPs only; use -c RC (or leave -R out)"));
    }

    // --- force_dependecies(), in perftest's order --------------------------------------------
    // 1. Iterations mode: depths no larger than the iterations.
    if duration_secs.is_none() {
        tx_depth = tx_depth.min(iters.min(u64::from(u32::MAX)) as u32);
        if send {
            rx_depth = rx_depth.min(iters.min(u64::from(u32::MAX)) as u32);
        }
    }
    // 2. Large messages: no CQ moderation unless asked for.
    if size > CQ_MOD_LIMIT && !all && !o.events {
        if !req_cq_mod {
            cq_mod = 1;
        } else if cq_mod > 1 {
            notices.push(format!(
                "{RESULT_LINE}\nWarning: Large message requested and CQ moderation enabled\nWarning: It can lead to inaccurate results"
            ));
        }
    }
    // 3. Never more than the send queue holds.
    cq_mod = cq_mod.min(tx_depth);
    // 4. No inline for READ/atomic.
    if read_atomic {
        inline_size = 0;
    }
    // 5. -a: buffers for the largest size.
    if all {
        size = MAX_SIZE;
    }
    // 6. Atomics are 8 bytes.
    if verb == Verb::Atomic && size != ATOMIC_SIZE {
        return Err(usage(if all {
            "-a: Message size cannot be changed for Atomic tests (they always use 8 bytes)".to_string()
        } else {
            format!("-s {size}: Message size cannot be changed for Atomic tests (they always use 8 bytes)")
        }));
    }
    // 8. Duration mode.
    let mut duration = None;
    if let Some(secs) = duration_secs {
        iters = 0;
        no_peak = true;
        if o.events {
            return Err(usage("-D with -e: Duration mode doesn't work with events."));
        }
        if all {
            return Err(usage("-D with -a: Duration mode currently doesn't support running on all sizes."));
        }
        duration = Some(DurationMode { secs, margin: o.margin.unwrap_or(secs / 4) });
    }
    // 9. The send_bw server cannot see when messages were sent.
    if send && bw && role == Role::Server && !duplex {
        no_peak = true;
    }
    // 10. perftest's work-around for an odd receive depth.
    if send && rx_depth % 2 == 1 && !all {
        rx_depth += 1;
    }
    // 11. Too many samples for the peak search.
    if duration.is_none() && iters > 20000 && bw {
        no_peak = true;
    }
    // The margin check runs whether or not -D was given (default duration 5, margin -1).
    let (check_secs, check_margin) = match (duration, o.margin) {
        (Some(d), _) => (d.secs as i64, d.margin as i64),
        (None, Some(m)) => (5, m as i64),
        (None, None) => (5, -1),
    };
    if check_secs <= 2 * check_margin {
        return Err(usage("-D/-f: please check that DURATION > 2*MARGIN"));
    }

    Ok(Params {
        test,
        role,
        host: o.host.clone(),
        port: o.port,
        ib_dev: o.ib_dev.clone(),
        backend: o.backend,
        gid_index,
        size,
        all,
        iters,
        duration,
        tx_depth,
        rx_depth,
        cq_mod,
        num_qps,
        mtu: o.mtu.unwrap_or(0),
        inline_size,
        outs: o.outs,
        atomic_type,
        duplex,
        no_peak,
        events: o.events,
        units: if o.report_gbits { BwUnits::Gbps } else { BwUnits::MiBps },
        qp_timeout: o.qp_timeout.unwrap_or(14),
        sl: o.sl.unwrap_or(0),
        tclass: o.tclass.unwrap_or(0),
        json: o.json,
        wait: o.wait,
        connection,
        notices,
        rdma_cm: o.rdma_cm,
        req_size: o.size.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> TestOpts {
        TestOpts { port: 18515, ..TestOpts::default() }
    }

    fn client() -> TestOpts {
        TestOpts { host: Some("10.0.0.1".into()), ..opts() }
    }

    #[test]
    fn defaults_per_tool() {
        let p = resolve(PerftestTest::WriteBw, &client()).unwrap();
        assert_eq!((p.size, p.iters, p.tx_depth, p.rx_depth, p.cq_mod), (65536, 5000, 128, 1, 1));
        assert!(!p.no_peak);
        let p = resolve(PerftestTest::SendBw, &opts()).unwrap();
        assert_eq!((p.size, p.iters, p.tx_depth, p.rx_depth, p.cq_mod), (65536, 1000, 128, 512, 1));
        assert!(p.no_peak, "the send_bw server has no peak");
        let p = resolve(PerftestTest::SendLat, &opts()).unwrap();
        assert_eq!((p.size, p.iters, p.tx_depth, p.rx_depth, p.cq_mod), (2, 1000, 1, 512, 1));
        let p = resolve(PerftestTest::AtomicBw, &client()).unwrap();
        assert_eq!((p.size, p.cq_mod, p.tx_depth), (8, 100, 128));
        let p = resolve(PerftestTest::ReadLat, &client()).unwrap();
        assert_eq!((p.size, p.iters, p.tx_depth, p.cq_mod), (2, 1000, 1, 1));
    }

    #[test]
    fn derived_defaults() {
        // Small messages keep CQ moderation, clamped to the depth.
        let o = TestOpts { size: Some("4K".into()), iters: Some(50), ..client() };
        let p = resolve(PerftestTest::WriteBw, &o).unwrap();
        assert_eq!((p.size, p.tx_depth, p.cq_mod), (4096, 50, 50));
        // -Q with a large message: kept, with perftest's warning.
        let o = TestOpts { cq_mod: Some(10), ..client() };
        let p = resolve(PerftestTest::ReadBw, &o).unwrap();
        assert_eq!(p.cq_mod, 10);
        assert!(p.notices[0].contains("Large message requested"));
        // Odd receive depth rounds up for send tests.
        let o = TestOpts { rx_depth: Some(7), ..opts() };
        assert_eq!(resolve(PerftestTest::SendBw, &o).unwrap().rx_depth, 8);
        // -a sizes the buffers for 8 MiB and keeps moderation.
        let o = TestOpts { all: true, iters: Some(10), ..client() };
        let p = resolve(PerftestTest::WriteBw, &o).unwrap();
        assert_eq!((p.size, p.cq_mod, p.tx_depth), (MAX_SIZE, 10, 10));
        assert_eq!(p.round_size(0), 2);
        assert_eq!(p.round_size(22), MAX_SIZE);
        // -D: iterations counted, no peak, margin duration/4.
        let o = TestOpts { duration: Some(1), ..client() };
        let p = resolve(PerftestTest::WriteBw, &o).unwrap();
        assert_eq!((p.iters, p.no_peak, p.duration), (0, true, Some(DurationMode { secs: 1, margin: 0 })));
        // Many iterations: no peak.
        let o = TestOpts { iters: Some(20001), ..client() };
        assert!(resolve(PerftestTest::WriteBw, &o).unwrap().no_peak);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("0x10").unwrap(), 16);
        assert_eq!(parse_size("010").unwrap(), 8);
        for bad in ["0", "abc", "2048M", "", "K"] {
            assert_eq!(parse_size(bad).unwrap_err().code, crate::cli::common::exit::USAGE, "{bad}");
        }
    }

    #[test]
    fn refusals() {
        let cases: Vec<(PerftestTest, TestOpts, &str)> = vec![
            (PerftestTest::WriteLat, TestOpts { qp: Some(2), ..client() }, "only available on bw"),
            (PerftestTest::AtomicBw, TestOpts { size: Some("16".into()), ..client() }, "Atomic"),
            (PerftestTest::AtomicLat, TestOpts { all: true, ..client() }, "Atomic"),
            (PerftestTest::WriteBw, TestOpts { connection: Some("UD".into()), ..client() }, "SEND verb"),
            (PerftestTest::SendBw, TestOpts { connection: Some("UD".into()), all: true, ..client() }, "UD"),
            (
                PerftestTest::SendBw,
                TestOpts { connection: Some("UC".into()), rdma_cm: true, ..client() },
                "rdma_cm",
            ),
            (PerftestTest::ReadBw, TestOpts { connection: Some("UC".into()), ..client() }, "READ/ATOMIC"),
            (PerftestTest::WriteBw, TestOpts { iters: Some(4), ..client() }, "between 5 and"),
            (PerftestTest::WriteBw, TestOpts { events: true, ..client() }, "WRITE verb"),
            (PerftestTest::ReadLat, TestOpts { bidirectional: true, ..client() }, "BW test"),
            (PerftestTest::ReadBw, TestOpts { inline_size: Some(8), ..client() }, "Inline"),
            (PerftestTest::WriteBw, TestOpts { outs: Some(8), ..client() }, "Outstanding"),
            (PerftestTest::WriteBw, TestOpts { rx_depth: Some(8), ..client() }, "rx depth"),
            (
                PerftestTest::WriteBw,
                TestOpts { atomic_type: Some("CMP_AND_SWAP".into()), ..client() },
                "atomic",
            ),
            (
                PerftestTest::AtomicBw,
                TestOpts { atomic_type: Some("SWAP".into()), ..client() },
                "Invalid Atomic",
            ),
            (PerftestTest::WriteBw, TestOpts { ib_port: Some(2), ..client() }, "single port"),
            (PerftestTest::WriteBw, TestOpts { duration: Some(2), margin: Some(1), ..client() }, "2*MARGIN"),
            (PerftestTest::WriteBw, TestOpts { duration: Some(2), all: true, ..client() }, "all sizes"),
        ];
        for (test, o, want) in cases {
            let e = resolve(test, &o).unwrap_err();
            assert_eq!(e.code, crate::cli::common::exit::USAGE);
            assert!(e.msg.contains(want), "{test:?}: {} lacks {want:?}", e.msg);
            assert!(!e.msg.contains('\n'), "one line: {}", e.msg);
        }
        let ok = TestOpts { atomic_type: Some("CMP_AND_SWAP".into()), ..client() };
        assert_eq!(resolve(PerftestTest::AtomicLat, &ok).unwrap().atomic_type, AtomicType::CmpAndSwap);
    }
}
