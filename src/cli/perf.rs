//! `softroce perf`: perftest-compatible bandwidth and latency tests.
//!
//! `softroce perf <test> [HOST]` is perftest's `ib_<test>` (4.5-0.17, version "6.06"): the same
//! flags and defaults, the same TCP side channel byte for byte (`oob::perftest`), the same
//! verbs resources and data phase, and the same report (`report`). It pairs with the real
//! tools on kernel rxe in both directions and with another softroce process.
//!
//! Spec: `docs/interop/oob-exchange.md`, Part B.

mod args;
mod cm;
mod params;
mod runner;

use std::io::Write;
use std::net::{TcpListener, TcpStream};

use softroce::verbs::{Device, Gid, GidIndex, Mtu};

use crate::cli::common::WaitArgs;
use crate::cli::common::{CliError, exit, linger, open_device, report};
use crate::cli::oob::perftest::{
    KeyFormat, LocalParams, PerftestDest, PerftestTest, RunMode, SessionConfig, SessionError, SessionOutcome,
    run_session,
};
use crate::cli::oob::{OobError, Role, Watched, accept_within, connect_retry, perftest};
use crate::cli::report::{BwUnits, RESULT_LINE, WAITING_BANNER};

pub use args::PerfArgs;
use params::{MAX_OUT_READS, Params};
use runner::{Out, Row, Runner};
use serde_json::{Value as Json, json};

/// Runs `softroce perf`; returns the exit code.
pub fn run(args: &PerfArgs) -> i32 {
    match run_test(args) {
        Ok(()) => exit::OK,
        Err(e) => report("perf", &e),
    }
}

/// perftest's program name for a test.
fn tool_name(test: PerftestTest) -> &'static str {
    match test {
        PerftestTest::WriteBw => "ib_write_bw",
        PerftestTest::ReadBw => "ib_read_bw",
        PerftestTest::AtomicBw => "ib_atomic_bw",
        PerftestTest::SendBw => "ib_send_bw",
        PerftestTest::WriteLat => "ib_write_lat",
        PerftestTest::ReadLat => "ib_read_lat",
        PerftestTest::AtomicLat => "ib_atomic_lat",
        PerftestTest::SendLat => "ib_send_lat",
    }
}

/// Our subcommand name for a test.
fn command_name(test: PerftestTest) -> String {
    tool_name(test).trim_start_matches("ib_").replace('_', "-")
}

fn run_test(args: &PerfArgs) -> Result<(), CliError> {
    let (test, opts) = args.test.split();
    let p = params::resolve(test, opts)?;
    let out = Out::new(p.json);
    for notice in &p.notices {
        out.line(notice);
    }

    let dev =
        open_device(p.ib_dev.as_deref(), p.host.as_deref(), p.backend).map_err(|e| match &p.ib_dev {
            Some(d) => CliError { msg: format!("-d {d}: {}", e.msg), ..e },
            None => e,
        })?;
    let gid_index = choose_gid_index(&dev, p.gid_index)?;
    let mtu = local_mtu(&dev, p.mtu, out);
    let out_reads = match (p.is_read_or_atomic(), p.outs) {
        (false, _) => 1,
        (true, Some(o)) if o > MAX_OUT_READS => {
            out.line(RESULT_LINE);
            eprintln!(
                " Number of outstanding reads is above max = {MAX_OUT_READS}\n Changing to that max value"
            );
            MAX_OUT_READS
        }
        (true, Some(o)) if o > 0 => o,
        (true, _) => MAX_OUT_READS,
    };
    let max_inline = dev.query_device().max_inline_data;
    let inline_size = if p.inline_size > max_inline {
        eprintln!(
            "softroce perf: -I {}: softroce sends at most {max_inline} bytes inline; using {max_inline}",
            p.inline_size
        );
        max_inline
    } else {
        p.inline_size
    };

    if p.rdma_cm {
        return run_rdma_cm(&p, dev, out, gid_index, mtu, out_reads, inline_size);
    }

    let stream = match &p.host {
        Some(host) => connect_retry(host, p.port, true, None, p.wait.connect_retry())
            .map_err(|e| connect_error(test, host, p.port, &p.wait, &e))?,
        None => {
            let listener = perftest::listen(p.port, None).map_err(|e| listen_error(p.port, &e))?;
            out.text(WAITING_BANNER);
            accept(listener, p.port, &p.wait)?
        }
    };
    // During the run the channel is idle; the runner looks at it (without reading) to notice a
    // peer that exited or finished early.
    let link = stream.try_clone().ok();
    // A peer busy with RDMA traffic is not silent, although it sends nothing on the channel.
    let probe = dev.clone();
    let activity: crate::cli::oob::Activity =
        Box::new(move || probe.counters().map_or(0, |c| c.qp.rcvd_pkts));
    let stream = Watched::new(stream, p.wait.idle(), Some(activity))
        .map_err(|e| CliError::network(format!("side channel: {e}")))?;

    let cfg = session_config(&p, mtu, false);
    let mut runner = Runner::new(&p, dev, out, gid_index, out_reads, inline_size, link);
    let outcome = run_session(stream, &cfg, &mut runner).map_err(|e| session_error(test, &p.wait, e))?;
    finish_run(&mut runner, test);
    report_and_end(&p, &runner, &outcome, gid_index, out_reads, inline_size)
}

/// The session's configuration: what `p` asks for; `rdma_cm` for `-R` (the exchange's key
/// record is then perftest's binary `pingpong_dest`).
fn session_config(p: &Params, mtu: Mtu, rdma_cm: bool) -> SessionConfig {
    SessionConfig {
        test: p.test,
        role: p.role,
        local: LocalParams { mtu: mtu as u8, ..LocalParams::default() },
        key_format: if rdma_cm { KeyFormat::RdmaCm } else { KeyFormat::Gid },
        run_mode: if p.all { RunMode::AllSizes(params::ALL_SIZES) } else { RunMode::Regular },
        duplex: p.duplex,
        duration: p.duration.is_some(),
        report_per_port: false,
        rdma_cm,
    }
}

/// Ends the test's work requests; write_lat ends without a closing exchange, so the engine gets a
/// moment to acknowledge the peer's last RDMA WRITE before the QP goes away.
fn finish_run(runner: &mut Runner<'_>, test: PerftestTest) {
    runner.finish();
    if test == PerftestTest::WriteLat {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The `--json` report, the device's linger, and the run's verdict (messages lost or not).
fn report_and_end(
    p: &Params,
    runner: &Runner<'_>,
    outcome: &SessionOutcome,
    gid_index: GidIndex,
    out_reads: u32,
    inline_size: u32,
) -> Result<(), CliError> {
    if p.json {
        let doc = json_report(p, runner, outcome, gid_index, out_reads, inline_size);
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{}", doc);
        let _ = o.flush();
    }
    linger(runner.device());
    if let Some(lost) = runner.lost() {
        return Err(lost);
    }
    Ok(())
}

/// `-R`: the parameter exchange over an rdma_cm connection, the test QPs connected by the CM.
fn run_rdma_cm(
    p: &Params,
    dev: Device,
    out: Out,
    gid_index: GidIndex,
    mtu: Mtu,
    out_reads: u32,
    inline_size: u32,
) -> Result<(), CliError> {
    let test = p.test;
    let ud = p.connection == crate::cli::report::ConnectionType::Ud;
    let cm = match &p.host {
        Some(host) => {
            let ip = resolve_host(host)?;
            cm::CmCtx::client(
                &dev,
                std::net::SocketAddr::new(ip, p.port),
                p.wait.connect_retry(),
                p.wait.idle(),
            )?
        }
        None => {
            let cm = cm::CmCtx::server(&dev, p.port, ud, p.wait.idle())?;
            out.text(WAITING_BANNER);
            cm
        }
    };
    let control = cm.control(p.is_read_or_atomic(), out_reads.min(255) as u8)?;
    let cfg = session_config(p, mtu, true);
    let mut runner = Runner::new(p, dev, out, gid_index, out_reads, inline_size, None).with_cm(&cm);
    let outcome = run_session(control, &cfg, &mut runner).map_err(|e| session_error(test, &p.wait, e));
    finish_run(&mut runner, test);
    runner.close_cm();
    let outcome = outcome?;
    report_and_end(p, &runner, &outcome, gid_index, out_reads, inline_size)
}

/// The server's IPv4 address (perftest resolves with `AF_INET`).
fn resolve_host(host: &str) -> Result<std::net::IpAddr, CliError> {
    use std::net::ToSocketAddrs;
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| CliError::network(format!("cannot resolve {host}: {e}")))?
        .find(|a| a.is_ipv4())
        .map(|a| a.ip())
        .ok_or_else(|| CliError::network(format!("{host} has no IPv4 address")))
}

/// `-x`, or the device's own address (what perftest's automatic choice gives on rxe). Any
/// index of the table: the device sends from every GID it lists (the raw backend opened on an
/// interface serves all of its addresses, IPv6 too: the side channel may run over IPv4 while
/// the test QPs use an IPv6 GID, as with perftest).
fn choose_gid_index(dev: &Device, wanted: Option<u8>) -> Result<GidIndex, CliError> {
    let own = dev.default_gid_index();
    let Some(x) = wanted else { return Ok(own) };
    let len = dev.gid_table().len();
    dev.gid(GidIndex::new(x)).map_err(|_| {
        CliError::setup(format!(
            "-x {x}: GID index out of range: the device on {} has GID indexes 0..={} (index {own} is its address)",
            dev.ip(),
            len.saturating_sub(1)
        ))
    })?;
    Ok(GidIndex::new(x))
}

/// perftest's `set_mtu()`: the port's active MTU, or `-m` clamped to it (as an enum 1..=5).
fn local_mtu(dev: &Device, requested: u32, out: Out) -> Mtu {
    let active = dev.query_port().active_mtu;
    if requested == 0 {
        return active;
    }
    let Some(m) = Mtu::from_bytes(requested) else {
        eprintln!(
            " Invalid MTU - {requested} \n Please choose mtu from {{256,512,1024,2048,4096}}\n Will run with the port active mtu - {}",
            active as u8
        );
        return active;
    };
    if m > active {
        out.line(&format!(
            "Requested mtu is higher than active mtu \nChanging to active mtu - {}",
            active as u8
        ));
        return active;
    }
    m
}

fn connect_error(test: PerftestTest, host: &str, port: u16, wait: &WaitArgs, e: &std::io::Error) -> CliError {
    use std::io::ErrorKind::*;
    let hint = match e.kind() {
        ConnectionRefused => format!(
            "no server is listening there{}: start the server first (`softroce perf {}` or `{}` without a host), \
             check that both sides use the same -p, and --connect-timeout to wait longer",
            match wait.connect_timeout {
                0 => String::new(),
                n => format!(" (retried for {n} s)"),
            },
            command_name(test),
            tool_name(test)
        ),
        TimedOut | HostUnreachable | NetworkUnreachable => {
            "the host does not answer: check the address and the firewall (TCP port -p)".to_string()
        }
        _ => "check the host name and that the server is running".to_string(),
    };
    CliError::network(format!("cannot connect to {host}:{port}: {e}; {hint}"))
}

fn listen_error(port: u16, e: &std::io::Error) -> CliError {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        "another server is running on it: stop it or choose another -p (on both sides)"
    } else {
        "choose another -p (on both sides)"
    };
    CliError::setup(format!("cannot listen on TCP port {port}: {e}; {hint}"))
}

fn accept(listener: TcpListener, port: u16, wait: &WaitArgs) -> Result<TcpStream, CliError> {
    accept_within(listener, wait.idle()).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => CliError::network(format!(
            "no client connected to TCP port {port} within {} s (--peer-timeout sets the limit, 0 waits forever)",
            wait.peer_timeout
        )),
        _ => CliError::network(format!("accept() failed on TCP port {port}: {e}")),
    })
}

fn session_error(test: PerftestTest, wait: &WaitArgs, e: SessionError<CliError>) -> CliError {
    match e {
        SessionError::Hook(e) => e,
        SessionError::Oob(OobError::Timeout { what }) => {
            CliError::network(wait.silence(&format!("{} side channel: no {what}", tool_name(test))))
        }
        SessionError::Oob(e) => {
            let hint = match &e {
                OobError::PeerClosed { .. } => {
                    " — the peer exited or was stopped before the end of the test: see its output"
                }
                OobError::IncompatibleVersion(_) | OobError::Malformed { .. } => {
                    " — the other side must be perftest 5.70 or later (or softroce perf) running the same test"
                }
                OobError::GidIncompatible => "",
                _ => " — the side channel failed; see the peer's output",
            };
            CliError::network(format!("{} side channel: {e}{hint}", tool_name(test)))
        }
    }
}

fn dest_json(d: &PerftestDest) -> Json {
    json!({
        "qpn": d.qpn,
        "psn": d.psn,
        "rkey": d.rkey,
        "vaddr": d.vaddr,
        "out_reads": d.out_reads,
        "lid": d.lid,
        "gid": Gid(d.gid).to_string(),
    })
}

fn row_json(row: &Row) -> Json {
    match row {
        Row::Bw { source, report } => json!({
            "source": source,
            "size": report.size,
            "iters": report.iters,
            "bw_peak": report.bw_peak,
            "bw_avg": report.bw_avg,
            "msg_rate_mpps": report.msg_rate,
        }),
        Row::Lat(r) => json!({
            "size": r.size,
            "iters": r.iters,
            "t_min_us": r.t_min,
            "t_max_us": r.t_max,
            "t_typical_us": r.t_typical,
            "t_avg_us": r.t_avg,
            "t_stdev_us": r.t_stdev,
            "p99_us": r.p99,
            "p99_9_us": r.p99_9,
        }),
        Row::LatDuration(r) => json!({
            "size": r.size,
            "iters": r.iters,
            "t_avg_us": r.t_avg,
            "tps": r.tps,
        }),
    }
}

fn json_report(
    p: &Params,
    runner: &Runner<'_>,
    outcome: &SessionOutcome,
    gid_index: GidIndex,
    out_reads: u32,
    inline_size: u32,
) -> Json {
    let n = &outcome.negotiated;
    let dev = runner.device();
    let kind = match (p.test.is_bw(), p.duration.is_some()) {
        (true, _) => "bw",
        (false, false) => "lat",
        (false, true) => "lat_duration",
    };
    let units = match p.units {
        BwUnits::MiBps => "MB/sec",
        BwUnits::Gbps => "Gb/sec",
    };
    let atomic = p.verb() == crate::cli::report::Verb::Atomic;
    let params = json!({
        "size": (!p.all).then_some(p.size),
        "all_sizes": p.all,
        "iters": p.duration.is_none().then_some(p.iters),
        "duration_s": p.duration.map(|d| d.secs),
        "margin_s": p.duration.map(|d| d.margin),
        "num_qps": p.num_qps,
        "connection": p.connection.name(),
        "tx_depth": p.tx_depth,
        "rx_depth": p.rx_depth,
        "cq_mod": p.cq_mod,
        "mtu": perftest::mtu_bytes(n.mtu),
        "gid_index": gid_index.value(),
        "inline_size": inline_size,
        "out_reads": out_reads,
        "atomic_type": atomic.then(|| p.atomic_type.name()),
        "duplex": p.duplex,
        "no_peak": p.no_peak,
        "events": p.events,
        "bw_units": units,
        "qp_timeout": p.qp_timeout,
        "sl": p.sl,
        "tclass": p.tclass,
        "tcp_port": p.port,
        "cycle_buffer": n.cycle_buffer,
        "cache_line": n.cache_line,
    });
    let qps: Vec<Json> = outcome
        .local
        .iter()
        .zip(&outcome.remote)
        .map(|(l, r)| json!({ "local": dest_json(l), "remote": dest_json(r) }))
        .collect();
    let cpu = runner.cpu.map(|(cpu, wall)| {
        let pct = if wall.is_zero() { 0.0 } else { cpu.as_secs_f64() / wall.as_secs_f64() * 100.0 };
        json!({
            "seconds": cpu.as_secs_f64(),
            "wall_seconds": wall.as_secs_f64(),
            "percent": pct,
            "window": "from connecting the QPs to the last result",
        })
    });
    json!({
        "tool": "softroce perf",
        "test": tool_name(p.test).trim_start_matches("ib_"),
        "role": match p.role {
            Role::Client => "client",
            Role::Server => "server",
        },
        "version": perftest::VERSION,
        "peer_version": n.remote_version,
        "device": dev.name(),
        "local_ip": dev.ip().to_string(),
        "host": p.host,
        "kind": kind,
        "params": params,
        "qps": qps,
        "results": runner.rows.iter().map(row_json).collect::<Vec<_>>(),
        "cpu": cpu,
    })
}
