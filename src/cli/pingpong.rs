//! `softroce rc-pingpong`: rdma-core's `ibv_rc_pingpong`, with its flags, defaults, output
//! lines and out-of-band TCP exchange, so that it pairs with the real tool in either role
//! (docs/interop/oob-exchange.md part A is the specification followed here).

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use softroce::verbs::*;

use super::common::{CliError, Progress, cpu_time, exit, linger, open_device, random_psn, report};
use super::oob::pingpong::{
    GidTextBuffer, PingpongDest, PingpongKind, client_exchange, format_bytes_line, format_iters_line,
    format_local_line, format_remote_line, server_read_remote, server_reply,
};
use super::report::compute_pingpong_stats;

/// wr_id of every receive (`PINGPONG_RECV_WRID`).
const RECV_WRID: u64 = 1;
/// wr_id of every send (`PINGPONG_SEND_WRID`).
const SEND_WRID: u64 = 2;
/// How long polling mode spins before it sleeps on the CQ.
const SPIN: Duration = Duration::from_micros(50);
/// The page size the `-c` check uses.
const PAGE: usize = 4096;

/// Arguments of `softroce rc-pingpong` (the flags of `ibv_rc_pingpong`).
#[derive(clap::Args, Debug)]
#[command(after_help = "Start the server first, then the client with the server's host name or address.\n\
softroce picks the GID index of its own address when -g is not given; rdma-core's tool needs -g on RoCE.")]
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
    /// Size of the message to exchange [ibv_rc_pingpong -s]
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    pub size: u32,
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
    /// The server to connect to (without it: be the server)
    pub host: Option<String>,
}

/// Runs `softroce rc-pingpong`.
pub fn run(a: &PingpongArgs) -> i32 {
    match pingpong(a, PingpongKind::Rc) {
        Ok(()) => exit::OK,
        Err(e) => report("rc-pingpong", &e),
    }
}

fn pingpong(a: &PingpongArgs, kind: PingpongKind) -> std::result::Result<(), CliError> {
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
    let mtu = Mtu::from_bytes(a.mtu)
        .ok_or_else(|| CliError::usage(format!("invalid MTU {} (256, 512, 1024, 2048 or 4096)", a.mtu)))?;
    if a.ib_port != 1 {
        return Err(CliError::usage("softroce devices have one port: -i 1"));
    }
    if a.rx_depth == 0 || a.iters == 0 {
        return Err(CliError::usage("-r and -n must be at least 1"));
    }
    let size = a.size as usize;
    // The rdma-core lines: stdout, or stderr when stdout carries JSON.
    let say = |line: &str| {
        if a.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };

    let dev = open_device(a.dev.as_deref(), a.host.as_deref(), a.backend)?;
    let gid_index = a.gid_idx.unwrap_or_else(|| dev.default_gid_index());
    let gid = dev.gid(gid_index).map_err(|_| {
        CliError::setup(format!(
            "GID index {gid_index} is out of range: this device's GID table has {} entries (0..={}; see softroce devinfo)",
            dev.gid_table().len(),
            dev.gid_table().len() - 1
        ))
    })?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(a.rx_depth as usize + 1)?;
    let mut init = QpInitAttr::rc(&cq, &cq);
    init.cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&init)?;
    let mr = pd.alloc_mr(size.max(1), Access::LOCAL_WRITE)?;
    mr.fill(0, size, 0x7b).map_err(|e| CliError::failed(e.to_string()))?;
    qp.modify(&QpAttrs::init(Access::NONE))?;
    let recv = || RecvWr::new(RECV_WRID, &[mr.sge(0, a.size)]);
    for _ in 0..a.rx_depth {
        qp.post_recv(recv()).map_err(|e| CliError::failed(format!("Couldn't post receive ({e})")))?;
    }
    let mut routs = a.rx_depth;

    let me = PingpongDest { lid: 0, qpn: qp.qp_num(), psn: random_psn(), gid: gid.0 };
    let mut text = GidTextBuffer::new();
    say(&format_local_line(kind, &me, text.render(&me.gid)));

    let peer = match &a.host {
        Some(host) => {
            let mut s = TcpStream::connect((host.as_str(), a.port)).map_err(|e| {
                CliError::network(format!(
                    "Couldn't connect to {host}:{} ({e}): start the server first (softroce rc-pingpong or ibv_rc_pingpong -g N), and check -p",
                    a.port
                ))
            })?;
            let peer = client_exchange(&mut s, &me).map_err(|e| CliError::network(e.to_string()))?;
            connect(&dev, &qp, &peer, gid_index, mtu, a.sl, me.psn)?;
            peer
        }
        None => {
            let listener = super::oob::pingpong::listen(a.port).map_err(|e| {
                CliError::network(format!(
                    "Couldn't listen to port {} ({e}): another server running?",
                    a.port
                ))
            })?;
            let mut s = super::oob::accept_one(listener)
                .map_err(|e| CliError::network(format!("accept() failed: {e}")))?;
            let peer = server_read_remote(&mut s).map_err(|e| CliError::network(e.to_string()))?;
            // The peer may send the moment it reads our reply: be ready before replying.
            connect(&dev, &qp, &peer, gid_index, mtu, a.sl, me.psn)?;
            server_reply(&mut s, &me).map_err(|e| CliError::network(e.to_string()))?;
            peer
        }
    };
    say(&format_remote_line(&peer, text.render(&peer.gid)));
    let _ = std::io::stdout().flush();

    let client = a.host.is_some();
    let send = |qp: &QueuePair| {
        let mut wr = SendWr::new(SEND_WRID, SendOp::Send, &[mr.sge(0, a.size)]);
        wr.signaled = true;
        qp.post_send(wr).map_err(|e| CliError::failed(format!("Couldn't post send ({e})")))
    };
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut pending: u64 = RECV_WRID;
    let cpu0 = cpu_time();
    if client {
        if a.chk {
            // rdma-core's client zeroes the first byte of every page; its server checks them.
            for i in (0..size).step_by(PAGE) {
                mr.write(i, &[0]).map_err(|e| CliError::failed(e.to_string()))?;
            }
        }
        send(&qp)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let mut wcs = [WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, 0); 2];
    let idle_limit = Duration::from_secs(60);
    let mut last_progress = Instant::now();
    let mut progress = Progress::new("iters");
    while rcnt < a.iters || scnt < a.iters {
        // -e sleeps on the CQ at once; polling mode spins briefly first. (A poller that never
        // sleeps starves the engine threads on a small machine, so both end up blocking.)
        let n = if a.events > 0 || last_progress.elapsed() > SPIN {
            cq.poll_wait(&mut wcs, Duration::from_millis(200))?
        } else {
            cq.poll(&mut wcs)?
        };
        if n == 0 {
            if last_progress.elapsed() > idle_limit {
                return Err(CliError::failed(format!(
                    "no completion for {} s (sent {scnt}, received {rcnt} of {}): is the peer still running?",
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
        progress.tick(rcnt as u64, a.iters as u64, 2 * rcnt as u64 * a.size as u64);
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
                    _ => "",
                };
                return Err(CliError::failed(format!(
                    "Failed status {} ({}) for wr_id {}{hint}",
                    wc.status.ibv_str(),
                    wc.status.code(),
                    wc.wr_id
                )));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        while routs < a.rx_depth {
                            qp.post_recv(recv())
                                .map_err(|e| CliError::failed(format!("Couldn't post receive ({e})")))?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(CliError::failed(format!("Completion for unknown wr_id {other}"))),
            }
            pending &= !wc.wr_id;
            if scnt < a.iters && pending == 0 {
                send(&qp)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let elapsed = start.elapsed();
    progress.finish();
    let usec = elapsed.as_micros() as i64;
    let stats = compute_pingpong_stats(a.size, a.iters, usec);
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
        eprintln!(
            "{}",
            c.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        );
    }
    let mut bad_pages = Vec::new();
    if a.chk && !client {
        for i in (0..size).step_by(PAGE) {
            if mr.load_u8(i).unwrap_or(1) != 0 {
                say(&format!("invalid data in page {}", i / PAGE));
                bad_pages.push(i / PAGE);
            }
        }
    }
    if a.json {
        let dest = |d: &PingpongDest| serde_json::json!({ "lid": d.lid, "qpn": d.qpn, "psn": d.psn, "gid": Gid(d.gid).to_string() });
        let doc = serde_json::json!({
            "tool": "softroce rc-pingpong",
            "role": if client { "client" } else { "server" },
            "local": dest(&me),
            "remote": dest(&peer),
            "size": a.size,
            "mtu": mtu.bytes(),
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

/// RTR then RTS with rdma-core's attributes: GRH hop limit 1 (its quirk), one READ/atomic,
/// RNR timer 12, timeout 14, retries 7.
fn connect(
    dev: &Device,
    qp: &QueuePair,
    peer: &PingpongDest,
    gid_index: u8,
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
    let mut rtr = QpAttrs::rtr(av, mtu, peer.qpn, peer.psn);
    rtr.max_dest_rd_atomic = Some(1);
    rtr.min_rnr_timer = Some(12);
    qp.modify(&rtr).map_err(|e| match e {
        Error::Unreachable(_) => CliError::setup(format!(
            "Failed to modify QP to RTR: the peer's GID {} is not reachable from {} (address family?)",
            Gid(peer.gid),
            dev.ip()
        )),
        e => CliError::setup(format!("Failed to modify QP to RTR: {e}")),
    })?;
    let mut rts = QpAttrs::rts(psn);
    rts.max_rd_atomic = Some(1);
    qp.modify(&rts).map_err(|e| CliError::setup(format!("Failed to modify QP to RTS: {e}")))
}
