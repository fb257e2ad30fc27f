//! `softroce rc-pingpong`, `uc-pingpong`, `ud-pingpong` and `srq-pingpong`: rdma-core's
//! `ibv_{rc,uc,ud,srq}_pingpong`, with their flags, defaults, output lines and out-of-band TCP
//! exchange, so that each pairs with the real tool in either role
//! (docs/interop/oob-exchange.md part A is the specification followed here).

use std::io::Write;
use std::time::{Duration, Instant};

use softroce::verbs::*;

use super::common::{
    CliError, EXIT_CODES, Progress, WaitArgs, cpu_time, exit, in_range, linger, open_device, parse_size,
    random_psn, report,
};
use super::oob::pingpong::{
    GidTextBuffer, PingpongDest, PingpongKind, SRQ_MAX_QPS, client_exchange, format_bytes_line,
    format_iters_line, format_local_line, format_remote_line, server_read_remote, server_reply,
    srq_client_exchange, srq_server_read_remote, srq_server_reply,
};
use super::oob::{OobError, Watched, accept_within, connect_retry};
use super::report::compute_pingpong_stats;

/// wr_id of every receive (`PINGPONG_RECV_WRID`).
const RECV_WRID: u64 = 1;
/// wr_id of every send (`PINGPONG_SEND_WRID`).
const SEND_WRID: u64 = 2;
/// How long polling mode spins before it sleeps on the CQ.
const SPIN: Duration = Duration::from_micros(50);
/// The page size the `-c` check uses.
const PAGE: usize = 4096;
/// The Q_Key of `ibv_ud_pingpong`.
const UD_QKEY: Qkey = Qkey::new(0x1111_1111);
/// The GRH area at the start of a UD receive buffer.
const GRH: usize = GRH_LEN;

/// Arguments of `softroce rc-pingpong` (the flags of `ibv_rc_pingpong`).
#[derive(clap::Args, Debug)]
#[command(after_help = format!("Start the server (no host), then the client with the server's host name or address; \
the client retries for --connect-timeout seconds while the server is not listening yet, so \
`server & client` on one line works.\n\
softroce picks the GID index of its own address when -g is not given; rdma-core's tool needs -g on RoCE.\n\n{EXIT_CODES}"))]
pub struct PingpongArgs {
    /// Listen on/connect to TCP port PORT [ibv_rc_pingpong -p]
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Local IP address or network interface of the softroce device [ibv_rc_pingpong -d]
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Packet I/O: `udp` (a UDP socket, unprivileged) or `raw` (an AF_PACKET socket on the
    /// interface: full-strength ICRC checks, needs CAP_NET_RAW) [softroce only]
    #[arg(long, value_enum, default_value_t = crate::cli::common::BackendArg::Udp)]
    pub backend: crate::cli::common::BackendArg,
    /// Port of the device (only 1) [ibv_rc_pingpong -i]
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Size of the message to exchange, at most the device's max_msg_sz (2 GiB); K and M
    /// suffixes allowed [ibv_rc_pingpong -s]
    #[arg(short = 's', long = "size", default_value = "4096", allow_hyphen_values = true)]
    pub size: String,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 [ibv_rc_pingpong -m]
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Number of receives to post at a time [ibv_rc_pingpong -r]
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Number of exchanges [ibv_rc_pingpong -n]
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// Service level [ibv_rc_pingpong -l]
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on CQ events instead of polling [ibv_rc_pingpong -e]
    #[arg(short = 'e', long = "events", action = clap::ArgAction::Count)]
    pub events: u8,
    /// Local port GID index [ibv_rc_pingpong -g]
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u8>,
    /// Use on-demand paging (not supported, as on rxe) [ibv_rc_pingpong -o]
    #[arg(short = 'o', long = "odp")]
    pub odp: bool,
    /// Use implicit on-demand paging (not supported) [ibv_rc_pingpong -O]
    #[arg(short = 'O', long = "iodp")]
    pub iodp: bool,
    /// Prefetch an ODP MR [ibv_rc_pingpong -P]
    #[arg(short = 'P', long = "prefetch")]
    pub prefetch: bool,
    /// Get CQEs with timestamps (not supported, as on rxe) [ibv_rc_pingpong -t]
    #[arg(short = 't', long = "ts")]
    pub ts: bool,
    /// Validate the received buffer [ibv_rc_pingpong -c]
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Use device memory (not supported, as on rxe) [ibv_rc_pingpong -j]
    #[arg(short = 'j', long = "dm")]
    pub dm: bool,
    /// Use the new post-send API (same packets) [ibv_rc_pingpong -N]
    #[arg(short = 'N', long = "new_send")]
    pub new_send: bool,
    /// Also print the CPU time this side used
    #[arg(long)]
    pub cpu: bool,
    /// Print the result as one JSON object on stdout (addresses, bytes, times, CPU time,
    /// the -c verdict); the usual lines then go to stderr [softroce only]
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
    /// The server to connect to (without it: be the server)
    pub host: Option<String>,
}

/// Arguments of `softroce ud-pingpong` (the flags of `ibv_ud_pingpong`: no `-m`, the path MTU
/// is the port's; default size 1024).
#[derive(clap::Args, Debug)]
#[command(after_help = format!("Start the server (no host), then the client with the server's host name or address \
(the client retries for --connect-timeout seconds).\n\
The message size must fit the port's active MTU (softroce devinfo); both sides need -g on RoCE.\n\n{EXIT_CODES}"))]
pub struct UdPingpongArgs {
    /// Listen on/connect to TCP port PORT [ibv_ud_pingpong -p]
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Local IP address or network interface of the softroce device [ibv_ud_pingpong -d]
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Packet I/O: `udp` (a UDP socket, unprivileged) or `raw` (an AF_PACKET socket on the
    /// interface: full-strength ICRC checks, needs CAP_NET_RAW) [softroce only]
    #[arg(long, value_enum, default_value_t = crate::cli::common::BackendArg::Udp)]
    pub backend: crate::cli::common::BackendArg,
    /// Port of the device (only 1) [ibv_ud_pingpong -i]
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Size of the message to exchange, at most the active MTU [ibv_ud_pingpong -s]
    #[arg(short = 's', long = "size", default_value = "1024", allow_hyphen_values = true)]
    pub size: String,
    /// Number of receives to post at a time [ibv_ud_pingpong -r]
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Number of exchanges [ibv_ud_pingpong -n]
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// Service level [ibv_ud_pingpong -l]
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on CQ events instead of polling [ibv_ud_pingpong -e]
    #[arg(short = 'e', long = "events", action = clap::ArgAction::Count)]
    pub events: u8,
    /// Local port GID index [ibv_ud_pingpong -g]
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u8>,
    /// Validate the received buffer [ibv_ud_pingpong -c]
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Also print the CPU time this side used
    #[arg(long)]
    pub cpu: bool,
    /// Print the result as one JSON object on stdout [softroce only]
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
    /// The server to connect to (without it: be the server)
    pub host: Option<String>,
}

/// Arguments of `softroce srq-pingpong` (the flags of `ibv_srq_pingpong`).
#[derive(clap::Args, Debug)]
#[command(after_help = format!("Start the server (no host), then the client with the server's host name or address \
(the client retries for --connect-timeout seconds).\n\
-q, -s and -n must be the same on both sides (they are not exchanged); -n counts exchanges over all QPs.\n\n{EXIT_CODES}"))]
pub struct SrqPingpongArgs {
    #[command(flatten)]
    pub common: PingpongArgs,
    /// Number of QPs sharing the receive queue (1..=255) [ibv_srq_pingpong -q]
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    pub num_qp: u32,
}

/// Runs `softroce rc-pingpong`.
pub fn run(a: &PingpongArgs) -> i32 {
    match pingpong(a, PingpongKind::Rc, 1) {
        Ok(()) => exit::OK,
        Err(e) => report("rc-pingpong", &e),
    }
}

/// Runs `softroce uc-pingpong`.
pub fn run_uc(a: &PingpongArgs) -> i32 {
    match pingpong(a, PingpongKind::Uc, 1) {
        Ok(()) => exit::OK,
        Err(e) => report("uc-pingpong", &e),
    }
}

/// Runs `softroce srq-pingpong`.
pub fn run_srq(a: &SrqPingpongArgs) -> i32 {
    match pingpong(&a.common, PingpongKind::Srq, a.num_qp) {
        Ok(()) => exit::OK,
        Err(e) => report("srq-pingpong", &e),
    }
}

/// Runs `softroce ud-pingpong`.
pub fn run_ud(u: &UdPingpongArgs) -> i32 {
    let a = PingpongArgs {
        port: u.port,
        dev: u.dev.clone(),
        backend: u.backend,
        ib_port: u.ib_port,
        size: u.size.clone(),
        mtu: 1024, // unused: UD takes the port's MTU
        rx_depth: u.rx_depth,
        iters: u.iters,
        sl: u.sl,
        events: u.events,
        gid_idx: u.gid_idx,
        odp: false,
        iodp: false,
        prefetch: false,
        ts: false,
        chk: u.chk,
        dm: false,
        new_send: false,
        cpu: u.cpu,
        json: u.json,
        wait: u.wait,
        host: u.host.clone(),
    };
    match pingpong(&a, PingpongKind::Ud, 1) {
        Ok(()) => exit::OK,
        Err(e) => report("ud-pingpong", &e),
    }
}

fn tool_name(kind: PingpongKind) -> &'static str {
    match kind {
        PingpongKind::Rc => "rc",
        PingpongKind::Uc => "uc",
        PingpongKind::Ud => "ud",
        PingpongKind::Srq => "srq",
    }
}

fn pingpong(a: &PingpongArgs, kind: PingpongKind, num_qp: u32) -> std::result::Result<(), CliError> {
    let ud = kind == PingpongKind::Ud;
    let tool = tool_name(kind);
    // What rdma-core's tool says on rxe, where these features are missing too.
    if a.odp || a.iodp {
        return Err(CliError::usage(
            "The device isn't ODP capable or does not support RC send and receive with ODP",
        ));
    }
    if a.prefetch {
        return Err(CliError::usage("prefetch is valid only with on-demand memory region"));
    }
    if a.ts {
        return Err(CliError::usage("The device isn't completion timestamp capable"));
    }
    if a.dm {
        return Err(CliError::usage("Device doesn't support dm allocation"));
    }
    Mtu::from_bytes(a.mtu)
        .ok_or_else(|| CliError::usage(format!("invalid MTU {} (256, 512, 1024, 2048 or 4096)", a.mtu)))?;
    if a.ib_port != 1 {
        return Err(CliError::usage("softroce devices have one port: -i 1"));
    }
    if a.rx_depth == 0 || a.iters == 0 {
        return Err(CliError::usage("-r and -n must be at least 1"));
    }
    if kind == PingpongKind::Srq && (num_qp == 0 || num_qp as usize > SRQ_MAX_QPS) {
        return Err(CliError::usage(format!("num_qp {num_qp} must be less than {}", SRQ_MAX_QPS + 1)));
    }
    if kind == PingpongKind::Srq && num_qp > a.rx_depth {
        return Err(CliError::usage(format!(
            "rx_depth {} is too small for {num_qp} QPs -- must have at least one receive per QP.",
            a.rx_depth
        )));
    }
    // Sizes and counts are checked against the device's limits before anything is allocated,
    // with perf's messages and exit code.
    let max_msg = softroce::transport::MAX_MSG_SIZE;
    let size_u64 = parse_size("-s", &a.size, u64::from(kind == PingpongKind::Srq), max_msg)?;
    let size32 = size_u64 as u32;
    let size = size_u64 as usize;
    // UD: the first 40 bytes of every receive are the GRH area; sends go from after it.
    let off = if ud { GRH } else { 0 };
    // The rdma-core lines: stdout, or stderr when stdout carries JSON.
    let say = |line: &str| {
        if a.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };

    let dev = open_device(a.dev.as_deref(), a.host.as_deref(), a.backend)?;
    let limits = dev.query_device();
    let max_depth = if kind == PingpongKind::Srq { limits.max_srq_wr } else { limits.max_qp_wr };
    in_range("-r", "rx_depth", a.rx_depth, 1, max_depth)?;
    if ud && size32 > dev.query_port().active_mtu.bytes() {
        return Err(CliError::usage(format!(
            "Requested size larger than port MTU ({})",
            dev.query_port().active_mtu.bytes()
        )));
    }
    let gid_index = a.gid_idx.map_or_else(|| dev.default_gid_index(), GidIndex::new);
    let gid = dev.gid(gid_index).map_err(|_| {
        CliError::setup(format!(
            "GID index {gid_index} is out of range: this device's GID table has {} entries (0..={}; see softroce devinfo)",
            dev.gid_table().len(),
            dev.gid_table().len() - 1
        ))
    })?;
    let pd = dev.alloc_pd()?;
    let nqp = num_qp as usize;
    let cq = dev.create_cq(a.rx_depth as usize + nqp)?;
    let srq = if kind == PingpongKind::Srq {
        Some(pd.create_srq(&SrqInitAttr { max_wr: a.rx_depth, max_sge: 1, srq_limit: 0 })?)
    } else {
        None
    };
    let qp_type = match kind {
        PingpongKind::Uc => QpType::Uc,
        PingpongKind::Ud => QpType::Ud,
        PingpongKind::Rc | PingpongKind::Srq => QpType::Rc,
    };
    let mut init = QpInitAttr::new(qp_type, &cq, &cq);
    init.cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    init.srq = srq.as_ref();
    let qps = (0..nqp).map(|_| pd.create_qp(&init)).collect::<Result<Vec<_>>>()?;
    let mr = pd.alloc_mr((size + off).max(1), Access::LOCAL_WRITE)?;
    // rc, uc and ud fill the buffer with 0x7b; srq leaves it zero.
    if kind != PingpongKind::Srq {
        mr.fill(0, size + off, 0x7b).map_err(|e| CliError::failed(e.to_string()))?;
    }
    for qp in &qps {
        if ud {
            qp.modify(&QpAttrs::init_ud(UD_QKEY))?;
        } else {
            qp.modify(&QpAttrs::init(Access::NONE))?;
        }
    }
    let recv = || RecvWr::new(RECV_WRID, &[mr.sge(0, size32 + off as u32)]);
    let post_recv = || match &srq {
        Some(srq) => srq.post_recv(recv()),
        None => qps[0].post_recv(recv()),
    };
    for _ in 0..a.rx_depth {
        post_recv().map_err(|e| CliError::failed(format!("Couldn't post receive ({e})")))?;
    }
    let mut routs = a.rx_depth;

    let mut text = GidTextBuffer::new();
    let me: Vec<PingpongDest> = qps
        .iter()
        .map(|qp| PingpongDest { lid: 0, qpn: qp.qp_num().value(), psn: random_psn(), gid: gid.0 })
        .collect();
    for d in &me {
        say(&format_local_line(kind, d, text.render(&d.gid)));
    }

    let oob = |e: OobError| match e {
        OobError::Timeout { what } => CliError::network(a.wait.silence(&format!("no {what}"))),
        OobError::PeerClosed { .. } => CliError::network(format!(
            "{e}: the peer exited or was stopped before the exchange ended (see its output)"
        )),
        e => CliError::network(e.to_string()),
    };
    let ah;
    let peers: Vec<PingpongDest> = match &a.host {
        Some(host) => {
            let s = connect_retry(host, a.port, false, None, a.wait.connect_retry()).map_err(|e| {
                let tried = match a.wait.connect_timeout {
                    0 => String::new(),
                    n => format!(" for {n} s"),
                };
                CliError::network(format!(
                    "Couldn't connect to {host}:{} ({e}){tried}: start the server first (softroce {tool}-pingpong or ibv_{tool}_pingpong -g N), check -p, and --connect-timeout to wait longer",
                    a.port
                ))
            })?;
            let mut s = Watched::new(s, a.wait.idle(), None).map_err(|e| CliError::network(e.to_string()))?;
            let peers = if kind == PingpongKind::Srq {
                srq_client_exchange(&mut s, &me).map_err(oob)?
            } else {
                vec![client_exchange(&mut s, &me[0]).map_err(oob)?]
            };
            ah = connect_all(&dev, &pd, &qps, kind, &peers, gid_index, a, &me)?;
            peers
        }
        None => {
            let listener = super::oob::pingpong::listen(a.port).map_err(|e| {
                CliError::setup(format!(
                    "Couldn't listen to port {} ({e}): another server running? (or choose another -p on both sides)",
                    a.port
                ))
            })?;
            let s = accept_within(listener, a.wait.idle()).map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut => CliError::network(format!(
                    "no client connected to TCP port {} within {} s (--peer-timeout sets the limit, 0 waits forever)",
                    a.port, a.wait.peer_timeout
                )),
                _ => CliError::network(format!("accept() failed: {e}")),
            })?;
            let mut s = Watched::new(s, a.wait.idle(), None).map_err(|e| CliError::network(e.to_string()))?;
            // The peer may send the moment it reads our reply: be ready before replying.
            if kind == PingpongKind::Srq {
                let peers = srq_server_read_remote(&mut s).map_err(oob)?;
                ah = connect_all(&dev, &pd, &qps, kind, &peers, gid_index, a, &me)?;
                srq_server_reply(&mut s, &me).map_err(oob)?;
                peers
            } else {
                let peers = vec![server_read_remote(&mut s).map_err(oob)?];
                ah = connect_all(&dev, &pd, &qps, kind, &peers, gid_index, a, &me)?;
                server_reply(&mut s, &me[0]).map_err(oob)?;
                peers
            }
        }
    };
    for p in peers.iter().take(nqp) {
        say(&format_remote_line(p, text.render(&p.gid)));
    }
    let _ = std::io::stdout().flush();

    let client = a.host.is_some();
    let send = |i: usize| {
        let mut wr = SendWr::new(SEND_WRID, SendOp::Send, &[mr.sge(off, size32)]);
        wr.signaled = true;
        if let Some(ah) = &ah {
            wr.ud = Some(ah.dest(Qpn::new(peers[0].qpn), UD_QKEY));
        }
        qps[i].post_send(wr).map_err(|e| CliError::failed(format!("Couldn't post send ({e})")))
    };
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut pending = vec![RECV_WRID; nqp];
    let cpu0 = cpu_time();
    if client {
        if a.chk {
            // rdma-core's client zeroes the first byte of every page; its server checks them.
            for i in (0..size).step_by(PAGE) {
                mr.write(off + i, &[0]).map_err(|e| CliError::failed(e.to_string()))?;
            }
        }
        for (i, p) in pending.iter_mut().enumerate() {
            send(i)?;
            *p |= SEND_WRID;
        }
    }
    let start = Instant::now();
    let mut wcs = vec![WorkCompletion::default(); nqp + a.rx_depth as usize];
    let idle_limit = a.wait.idle();
    let mut last_progress = Instant::now();
    let mut progress = Progress::new("iters");
    while rcnt < a.iters || scnt < a.iters {
        // -e sleeps on the CQ at once; polling mode spins briefly first. (A poller that never
        // sleeps starves the engine threads on a small machine, so both end up blocking.)
        let max = if kind == PingpongKind::Srq { wcs.len() } else { 2 };
        let n = if a.events > 0 || last_progress.elapsed() > SPIN {
            cq.poll_wait(&mut wcs[..max], Duration::from_millis(200))?
        } else {
            cq.poll(&mut wcs[..max])?
        };
        if n == 0 {
            if let Some(idle_limit) = idle_limit
                && last_progress.elapsed() > idle_limit
            {
                let lost = if ud || kind == PingpongKind::Uc {
                    " (UC and UD do not retransmit: a lost message stops both sides, as with rdma-core's tools)"
                } else {
                    ""
                };
                return Err(CliError::failed(format!(
                    "no completion for {} s (sent {scnt}, received {rcnt} of {}): is the peer still running?{lost} (--peer-timeout sets the limit)",
                    idle_limit.as_secs(),
                    a.iters
                )));
            }
            if a.events == 0 {
                // Busy-poll like rdma-core's tool, but let the engine threads run: on a
                // small machine a spinning poller would otherwise starve them.
                std::thread::yield_now();
            }
            continue;
        }
        last_progress = Instant::now();
        progress.tick(rcnt as u64, a.iters as u64, 2 * rcnt as u64 * size_u64);
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                let hint = match wc.status {
                    WcStatus::RetryExcErr => {
                        " (the peer did not acknowledge: is it reachable at its GID, with -g on both sides?)"
                    }
                    WcStatus::RnrRetryExcErr => " (the peer had no receive posted)",
                    WcStatus::RemInvReqErr => {
                        " (the peer rejected the message: do -s and -m match on both sides?)"
                    }
                    WcStatus::LocLenErr => {
                        " (the message was longer than the receive: do -s match on both sides?)"
                    }
                    _ => "",
                };
                return Err(CliError::failed(format!(
                    "Failed status {} ({}) for wr_id {}{hint}",
                    wc.status.ibv_str(),
                    wc.status.code(),
                    wc.wr_id
                )));
            }
            let Some(i) = qps.iter().position(|q| q.qp_num() == wc.qp_num) else {
                return Err(CliError::failed(format!("Couldn't find QPN {:06x}", wc.qp_num)));
            };
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= num_qp {
                        while routs < a.rx_depth {
                            post_recv()
                                .map_err(|e| CliError::failed(format!("Couldn't post receive ({e})")))?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(CliError::failed(format!("Completion for unknown wr_id {other}"))),
            }
            pending[i] &= !wc.wr_id;
            if scnt < a.iters && pending[i] == 0 {
                send(i)?;
                pending[i] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let elapsed = start.elapsed();
    progress.finish();
    let usec = elapsed.as_micros() as i64;
    let stats = compute_pingpong_stats(size32, a.iters, usec);
    say(&format_bytes_line(&stats));
    say(&format_iters_line(&stats));
    let cpu = cpu_time().saturating_sub(cpu0);
    if a.cpu {
        say(&format!(
            "CPU time {:.2} s ({:.0}% of {:.2} s)",
            cpu.as_secs_f64(),
            100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64().max(1e-9),
            elapsed.as_secs_f64()
        ));
    }
    linger(&dev);
    if std::env::var_os("SOFTROCE_PRINT_COUNTERS").is_some() {
        let c = dev.counters()?;
        eprintln!("{}", c.nonzero_summary());
    }
    let mut bad_pages = Vec::new();
    if a.chk && !client {
        for i in (0..size).step_by(PAGE) {
            if mr.load_u8(off + i).unwrap_or(1) != 0 {
                say(&format!("invalid data in page {}", i / PAGE));
                bad_pages.push(i / PAGE);
            }
        }
    }
    if a.json {
        let dest = |d: &PingpongDest| serde_json::json!({ "lid": d.lid, "qpn": d.qpn, "psn": d.psn, "gid": Gid(d.gid).to_string() });
        let doc = serde_json::json!({
            "tool": format!("softroce {tool}-pingpong"),
            "role": if client { "client" } else { "server" },
            "local": dest(&me[0]),
            "remote": dest(&peers[0]),
            "num_qp": num_qp,
            "size": size32,
            "mtu": if ud { dev.query_port().active_mtu.bytes() } else { a.mtu },
            "iters": stats.iters,
            "bytes": stats.bytes,
            "seconds": stats.seconds,
            "mbit_per_sec": stats.mbit_per_sec,
            "usec_per_iter": stats.usec_per_iter,
            "cpu_seconds": cpu.as_secs_f64(),
            "data_check": if !a.chk || client { "not checked" } else if bad_pages.is_empty() { "ok" } else { "bad" },
            "bad_pages": bad_pages,
        });
        println!("{doc}");
    }
    if !bad_pages.is_empty() {
        return Err(CliError::failed("received data failed the -c check"));
    }
    Ok(())
}

/// Connects every QP to its peer record with rdma-core's attributes for the tool (srq: every QP
/// uses record 0's GID, as `ibv_srq_pingpong` does); UD instead creates the address handle.
#[allow(clippy::too_many_arguments)]
fn connect_all(
    dev: &Device,
    pd: &ProtectionDomain,
    qps: &[QueuePair],
    kind: PingpongKind,
    peers: &[PingpongDest],
    gid_index: GidIndex,
    a: &PingpongArgs,
    me: &[PingpongDest],
) -> std::result::Result<Option<AddressHandle>, CliError> {
    if peers.len() < qps.len() {
        return Err(CliError::setup("the peer sent fewer address records than QPs"));
    }
    let gid = peers[0].gid;
    for (i, qp) in qps.iter().enumerate() {
        let peer = PingpongDest { gid, ..peers[i] };
        if !peer.uses_grh() {
            return Err(CliError::setup(
                "the peer sent no GID (it was started without -g): RoCE needs one on both sides, e.g. -g 1",
            ));
        }
        match kind {
            PingpongKind::Ud => {
                qp.modify(&QpAttrs::rtr_ud())
                    .map_err(|e| CliError::setup(format!("Failed to modify QP to RTR: {e}")))?;
                qp.modify(&QpAttrs::rts_unreliable(Psn::new(me[i].psn)))
                    .map_err(|e| CliError::setup(format!("Failed to modify QP to RTS: {e}")))?;
                let mut av = AddressVector::new(Gid(peer.gid), gid_index);
                av.hop_limit = 1;
                av.sl = a.sl;
                let ah =
                    pd.create_ah(&av).map_err(|e| CliError::setup(format!("Failed to create AH: {e}")))?;
                return Ok(Some(ah));
            }
            _ => {
                let mtu = Mtu::from_bytes(a.mtu).unwrap_or(Mtu::Mtu1024);
                connect(dev, qp, kind, &peer, gid_index, mtu, a.sl, me[i].psn)?;
            }
        }
    }
    Ok(None)
}

/// RTR then RTS with rdma-core's attributes: GRH hop limit 1 (its quirk); RC: one READ/atomic,
/// RNR timer 12, timeout 14, retries 7.
#[allow(clippy::too_many_arguments)]
fn connect(
    dev: &Device,
    qp: &QueuePair,
    kind: PingpongKind,
    peer: &PingpongDest,
    gid_index: GidIndex,
    mtu: Mtu,
    sl: u8,
    psn: u32,
) -> std::result::Result<(), CliError> {
    if !peer.uses_grh() {
        return Err(CliError::setup(
            "the peer sent no GID (it was started without -g): RoCE needs one on both sides, e.g. -g 1",
        ));
    }
    let mut av = AddressVector::new(Gid(peer.gid), gid_index);
    av.hop_limit = 1;
    av.sl = sl;
    let uc = kind == PingpongKind::Uc;
    let rtr = if uc {
        QpAttrs::rtr_uc(av, mtu, Qpn::new(peer.qpn), Psn::new(peer.psn))
    } else {
        let mut rtr = QpAttrs::rtr(av, mtu, Qpn::new(peer.qpn), Psn::new(peer.psn));
        rtr.max_dest_rd_atomic = Some(1);
        rtr.min_rnr_timer = Some(12);
        rtr
    };
    qp.modify(&rtr).map_err(|e| match e {
        Error::Unreachable(_) => CliError::setup(format!(
            "Failed to modify QP to RTR: the peer's GID {} is not reachable from {} (address family?)",
            Gid(peer.gid),
            dev.ip()
        )),
        e => CliError::setup(format!("Failed to modify QP to RTR: {e}")),
    })?;
    let rts = if uc {
        QpAttrs::rts_unreliable(Psn::new(psn))
    } else {
        let mut rts = QpAttrs::rts(Psn::new(psn));
        rts.max_rd_atomic = Some(1);
        rts
    };
    qp.modify(&rts).map_err(|e| CliError::setup(format!("Failed to modify QP to RTS: {e}")))
}
