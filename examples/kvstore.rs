//! The key-value store of the Technion's RDMA course lab (`exp_server` / `exp_client` of
//! haggaie/rdma-experiment), both programs, on softroce's rdma_cm-shaped API.
//!
//! The server holds `int table[32768]`, registered for remote READ and WRITE, and serves
//! clients one after another over RC connections in the TCP port space (port 7471 by default).
//! Client and server exchange 24-byte SEND/RECV messages in little-endian byte order:
//!
//! ```text
//! offset 0  u32 type   0 DISCONNECT, 1 SET, 2 SET_RESP, 3 QUERY, 4 QUERY_RESP,
//!                      5 EXCHANGE_DATABASE_INFO
//! offset 4  4 bytes padding
//! offset 8  i32 key,  i32 value            (SET, SET_RESP, QUERY, QUERY_RESP)
//!      or   u32 rkey, u32 num_keys, u64 address   (EXCHANGE_DATABASE_INFO)
//! ```
//!
//! The client first sends EXCHANGE_DATABASE_INFO and gets the table's rkey, size and address
//! back (the type stays 5); a SET is echoed as SET_RESP; a QUERY is answered with QUERY_RESP
//! and the value (−1 for an invalid key); DISCONNECT gets no answer and both sides disconnect.
//! The client gets a value both ways: by RPC (QUERY) and by a one-sided 4-byte RDMA READ at
//! `address + 4·key`.
//!
//! ```text
//! cargo run --release --example kvstore -- server -a 127.0.0.1                     # server
//! cargo run --release --example kvstore -- client -a 127.0.0.2 127.0.0.1 set 7 42 get 7
//! cargo run --release --example kvstore -- client -a 127.0.0.2 127.0.0.1 --bench 100000
//! ```
//!
//! `client … set K V` sets a value, `get K` gets it by RPC and by RDMA READ (and fails if the
//! two disagree), `--bench N` times N SETs, N RPC gets and N READ gets and prints operations
//! per second and the mean latency of each. It pairs with the lab's C programs and with
//! `tests/interop/kvpeer.c` in either role.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use softroce::prelude::*;
use softroce::verbs::cm::{CmEvent, CmEventType, CmId, EventChannel, PortSpace};

/// Entries of the server's table (`NUM_KEYS` of the lab).
const NUM_KEYS: usize = 32 * 1024;
/// Size of a message.
const MSG: usize = 24;
/// Receive buffers each side keeps posted (the lab's server: 16).
const SLOTS: usize = 16;

const T_DISCONNECT: u32 = 0;
const T_SET: u32 = 1;
const T_SET_RESP: u32 = 2;
const T_QUERY: u32 = 3;
const T_QUERY_RESP: u32 = 4;
const T_DB_INFO: u32 = 5;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A message of the protocol, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    /// End of the conversation.
    Disconnect,
    /// Set `table[key] = value`.
    Set { key: i32, value: i32 },
    /// The server's echo of a SET.
    SetResp { key: i32, value: i32 },
    /// Ask for `table[key]`.
    Query { key: i32 },
    /// The answer: the value, −1 for an invalid key.
    QueryResp { key: i32, value: i32 },
    /// Ask for (client) or describe (server) the table.
    DbInfo { rkey: u32, num_keys: u32, address: u64 },
}

impl Msg {
    fn encode(self) -> [u8; MSG] {
        let mut b = [0u8; MSG];
        let (t, a, c) = match self {
            Msg::Disconnect => (T_DISCONNECT, 0, 0),
            Msg::Set { key, value } => (T_SET, key as u32, value as u32),
            Msg::SetResp { key, value } => (T_SET_RESP, key as u32, value as u32),
            Msg::Query { key } => (T_QUERY, key as u32, 0),
            Msg::QueryResp { key, value } => (T_QUERY_RESP, key as u32, value as u32),
            Msg::DbInfo { rkey, num_keys, address } => {
                b[16..24].copy_from_slice(&address.to_le_bytes());
                (T_DB_INFO, rkey, num_keys)
            }
        };
        b[0..4].copy_from_slice(&t.to_le_bytes());
        b[8..12].copy_from_slice(&a.to_le_bytes());
        b[12..16].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes a message; `Err(type)` for an unknown type.
    fn decode(b: &[u8; MSG]) -> std::result::Result<Msg, u32> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let (key, value) = (u32_at(8) as i32, u32_at(12) as i32);
        Ok(match u32_at(0) {
            T_DISCONNECT => Msg::Disconnect,
            T_SET => Msg::Set { key, value },
            T_SET_RESP => Msg::SetResp { key, value },
            T_QUERY => Msg::Query { key },
            T_QUERY_RESP => Msg::QueryResp { key, value },
            T_DB_INFO => {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[16..24]);
                Msg::DbInfo { rkey: u32_at(8), num_keys: u32_at(12), address: u64::from_le_bytes(a) }
            }
            t => return Err(t),
        })
    }
}

/// The lab's key-value store over the RDMA CM: server or client.
#[derive(Parser, Debug)]
#[command(name = "kvstore")]
struct Args {
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Serve the table to clients, one after another.
    Server {
        /// Local address (a softroce device is opened on it).
        #[arg(short = 'a', default_value = "127.0.0.1")]
        addr: IpAddr,
        /// rdma_cm port (TCP port space).
        #[arg(short = 'p', default_value_t = 7471)]
        port: u16,
        /// Exit after this many clients (default: serve forever).
        #[arg(short = 'n', long)]
        clients: Option<u64>,
        /// A connected client that sends nothing for this long while another one waits is
        /// dropped (it may have vanished), in milliseconds.
        #[arg(long, default_value_t = 2000)]
        idle_ms: u64,
        /// Print every request.
        #[arg(short = 'v')]
        verbose: bool,
    },
    /// Connect to a server, run the operations given, disconnect.
    Client {
        /// Local address (a softroce device is opened on it).
        #[arg(short = 'a', default_value = "127.0.0.2")]
        addr: IpAddr,
        /// rdma_cm port of the server.
        #[arg(short = 'p', default_value_t = 7471)]
        port: u16,
        /// Benchmark: time N SETs, N RPC gets and N READ gets.
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100000")]
        bench: Option<u64>,
        /// The server's address.
        server: IpAddr,
        /// Operations, in order: `set KEY VALUE`, `get KEY` (keys may be negative).
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        ops: Vec<String>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match args.role {
        Role::Server { addr, port, clients, idle_ms, verbose } => {
            server(addr, port, clients, Duration::from_millis(idle_ms), verbose)
        }
        Role::Client { addr, port, bench, server, ops } => client(addr, port, server, bench, &ops),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvstore: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The next event on `ch` within `limit`.
fn next_event(ch: &EventChannel, limit: Duration) -> Res<CmEvent> {
    Ok(ch.get_event_timeout(limit)?)
}

/// The next event, which must be `want`.
fn expect_event(ch: &EventChannel, want: CmEventType) -> Res<CmEvent> {
    let ev = next_event(ch, Duration::from_secs(30))?;
    if ev.event_type() != want {
        return Err(format!(
            "expected {}, got {} (status {})",
            want.name(),
            ev.event_type().name(),
            ev.status()
        )
        .into());
    }
    Ok(ev)
}

// ---------------------------------------------------------------------------------------------
// Server

/// Why a client's session ended.
enum End {
    /// It sent DISCONNECT.
    Goodbye,
    /// Its connection went away (DISCONNECTED, or an error completion).
    Lost(String),
    /// It broke the protocol (wrong length or type).
    Hostile(String),
    /// It was idle while another client waited.
    Idle,
}

fn server(addr: IpAddr, port: u16, clients: Option<u64>, idle: Duration, verbose: bool) -> Res<()> {
    let dev = Device::open(DeviceConfig::new(addr.to_string()))?;
    let pd = dev.alloc_pd()?;
    // The table: NUM_KEYS little-endian i32, zero at start.
    let table =
        pd.alloc_mr(NUM_KEYS * 4, Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE)?;
    // SLOTS receive buffers, then SLOTS reply buffers.
    let msgs = pd.alloc_mr(2 * SLOTS * MSG, Access::LOCAL_WRITE)?;
    let ch = EventChannel::new()?;
    let mut listener = CmId::new(Some(&ch), PortSpace::Tcp)?;
    listener.bind_addr(SocketAddr::new(addr, port))?;
    listener.listen(8)?;
    println!("kvstore server: listening on {addr}:{port}, table of {NUM_KEYS} keys");
    let mut waiting: VecDeque<CmId> = VecDeque::new();
    let mut served = 0u64;
    while clients.is_none_or(|n| served < n) {
        let id = match waiting.pop_front() {
            Some(id) => id,
            None => {
                let mut ev = match ch.get_event_timeout(Duration::from_secs(3600)) {
                    Ok(ev) => ev,
                    Err(_) => continue,
                };
                if ev.event_type() != CmEventType::ConnectRequest {
                    continue; // (late events of earlier clients)
                }
                match ev.take_id() {
                    Some(id) => id,
                    None => continue,
                }
            }
        };
        served += 1;
        let peer = id.dst_addr().map_or_else(|| "?".to_string(), |a| a.to_string());
        match serve_one(&dev, &pd, &table, &msgs, &ch, id, &mut waiting, idle, verbose) {
            Ok((End::Goodbye, st)) => println!("client {peer}: {st}; it disconnected"),
            Ok((End::Lost(why), st)) => println!("client {peer}: {st}; connection lost: {why}"),
            Ok((End::Hostile(why), st)) => println!("client {peer}: {st}; dropped: {why}"),
            Ok((End::Idle, st)) => println!("client {peer}: {st}; dropped: idle while another client waited"),
            Err(e) => println!("client {peer}: failed: {e}"),
        }
    }
    println!("kvstore server: {served} clients served");
    Ok(())
}

/// What one client did.
#[derive(Default)]
struct Stats {
    sets: u64,
    queries: u64,
    invalid: u64,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} SETs, {} QUERYs, {} invalid keys", self.sets, self.queries, self.invalid)
    }
}

#[allow(clippy::too_many_arguments)]
fn serve_one(
    dev: &Device,
    pd: &ProtectionDomain,
    table: &MemoryRegion,
    msgs: &MemoryRegion,
    ch: &EventChannel,
    mut id: CmId,
    waiting: &mut VecDeque<CmId>,
    idle: Duration,
    verbose: bool,
) -> Res<(End, Stats)> {
    let cq = dev.create_cq(4 * SLOTS)?;
    let caps = QpCaps {
        max_send_wr: SLOTS as u32,
        max_recv_wr: SLOTS as u32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 16,
    };
    id.create_qp(Some(pd), &QpInitAttr::rc(&cq, &cq).with_caps(caps))?;
    {
        let qp = id.qp().ok_or("no QP")?;
        for i in 0..SLOTS {
            qp.post_recv(RecvWr::new(i as u64, &[msgs.sge(i * MSG, MSG as u32)]))?;
        }
    }
    id.accept(None)?;
    let mut st = Stats::default();
    let mut last = Instant::now();
    let mut wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0)); 16];
    let mut inflight = 0usize;
    let end = 'session: loop {
        let qp = id.qp().ok_or("no QP")?;
        let n = cq.poll_wait(&mut wc, Duration::from_millis(50))?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                break 'session End::Lost(format!("completion status {:?}", w.status));
            }
            if w.opcode != WcOpcode::Recv {
                inflight = inflight.saturating_sub(1);
                continue;
            }
            last = Instant::now();
            let slot = (w.wr_id as usize).min(SLOTS - 1);
            if w.byte_len as usize != MSG {
                break 'session End::Hostile(format!("a message of {} bytes", w.byte_len));
            }
            let mut raw = [0u8; MSG];
            msgs.read(slot * MSG, &mut raw)?;
            qp.post_recv(RecvWr::new(slot as u64, &[msgs.sge(slot * MSG, MSG as u32)]))?;
            let msg = match Msg::decode(&raw) {
                Ok(m) => m,
                Err(t) => break 'session End::Hostile(format!("message type {t}")),
            };
            if verbose {
                println!("request {msg:?}");
            }
            let reply = match msg {
                Msg::Disconnect => break 'session End::Goodbye,
                Msg::Set { key, value } => {
                    st.sets += 1;
                    match usize::try_from(key).ok().filter(|&k| k < NUM_KEYS) {
                        Some(k) => table.write(4 * k, &value.to_le_bytes())?,
                        None => {
                            st.invalid += 1;
                            println!("Invalid key: {key}");
                        }
                    }
                    Msg::SetResp { key, value }
                }
                Msg::Query { key } => {
                    st.queries += 1;
                    let value = match usize::try_from(key).ok().filter(|&k| k < NUM_KEYS) {
                        Some(k) => {
                            let mut v = [0u8; 4];
                            table.read(4 * k, &mut v)?;
                            i32::from_le_bytes(v)
                        }
                        None => {
                            st.invalid += 1;
                            println!("Invalid key: {key}");
                            -1
                        }
                    };
                    Msg::QueryResp { key, value }
                }
                Msg::DbInfo { .. } => Msg::DbInfo {
                    rkey: table.rkey().value(),
                    num_keys: NUM_KEYS as u32,
                    address: table.addr(),
                },
                Msg::SetResp { .. } | Msg::QueryResp { .. } => {
                    break 'session End::Hostile(format!("a {msg:?} from the client"));
                }
            };
            if inflight >= SLOTS {
                break 'session End::Hostile("more requests than answers can be queued".into());
            }
            let out = (SLOTS + slot) * MSG;
            msgs.write(out, &reply.encode())?;
            qp.post_send(SendWr::new(slot as u64, SendOp::Send, &[msgs.sge(out, MSG as u32)]))?;
            inflight += 1;
        }
        if n > 0 {
            continue;
        }
        // Nothing to do: look at the CM's events (this id's; new requests wait their turn).
        while let Some(mut ev) = ch.try_get_event()? {
            match ev.event_type() {
                CmEventType::ConnectRequest => {
                    if let Some(next) = ev.take_id() {
                        waiting.push_back(next);
                    }
                }
                t if ev.id().is(&id) => match t {
                    CmEventType::Established | CmEventType::TimewaitExit => {}
                    CmEventType::Disconnected => break 'session End::Lost("the peer disconnected".into()),
                    t => break 'session End::Lost(format!("{} (status {})", t.name(), ev.status())),
                },
                _ => {}
            }
        }
        if !waiting.is_empty() && last.elapsed() > idle {
            break End::Idle;
        }
    };
    // (DISCONNECT: both sides disconnect; a lost or dropped client too, so that its QP is
    // flushed and its peer, if alive, learns it.)
    let _ = id.disconnect();
    drop(id);
    drop(cq);
    Ok((end, st))
}

// ---------------------------------------------------------------------------------------------
// Client

/// A connected client.
struct Client {
    ch: EventChannel,
    id: CmId,
    cq: CompletionQueue,
    /// Slot 0: receive; 1: send; 2: READ target.
    buf: MemoryRegion,
    rkey: u32,
    num_keys: u32,
    address: u64,
    wc: [WorkCompletion; 4],
}

impl Client {
    fn connect(dev: &Device, local: IpAddr, server: SocketAddr) -> Res<Client> {
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(8)?;
        let buf = pd.alloc_mr(3 * MSG, Access::LOCAL_WRITE)?;
        let ch = EventChannel::new()?;
        let mut id = CmId::new(Some(&ch), PortSpace::Tcp)?;
        id.resolve_addr(Some(SocketAddr::new(local, 0)), server, Duration::from_secs(2))?;
        expect_event(&ch, CmEventType::AddrResolved)?;
        id.resolve_route(Duration::from_secs(2))?;
        expect_event(&ch, CmEventType::RouteResolved)?;
        let caps =
            QpCaps { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 16 };
        id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq).with_caps(caps))?;
        id.qp().ok_or("no QP")?.post_recv(RecvWr::new(0, &[buf.sge(0, MSG as u32)]))?;
        id.connect(None)?;
        let ev = next_event(&ch, Duration::from_secs(30))?;
        if ev.event_type() != CmEventType::Established {
            return Err(format!(
                "connecting to {server}: {} (status {})",
                ev.event_type().name(),
                ev.status()
            )
            .into());
        }
        drop(ev);
        let wc = [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, Qpn::new(0)); 4];
        let mut c = Client { ch, id, cq, buf, rkey: 0, num_keys: 0, address: 0, wc };
        match c.rpc(Msg::DbInfo { rkey: 0, num_keys: 0, address: 0 })? {
            Msg::DbInfo { rkey, num_keys, address } => {
                (c.rkey, c.num_keys, c.address) = (rkey, num_keys, address);
            }
            m => return Err(format!("the server answered the database exchange with {m:?}").into()),
        }
        Ok(c)
    }

    fn qp(&self) -> Res<&QueuePair> {
        Ok(self.id.qp().ok_or("no QP")?)
    }

    /// The next completion, which must be a success.
    fn completion(&mut self) -> Res<WorkCompletion> {
        if self.cq.poll_wait(&mut self.wc[..1], Duration::from_secs(10))? != 1 {
            return Err("no completion within 10 s".into());
        }
        let w = self.wc[0];
        if w.status != WcStatus::Success {
            return Err(format!("completion status {:?} ({:?})", w.status, w.opcode).into());
        }
        Ok(w)
    }

    /// Sends `m` without waiting for anything.
    fn send(&mut self, m: Msg) -> Res<()> {
        self.buf.write(MSG, &m.encode())?;
        self.qp()?.post_send(SendWr::new(1, SendOp::Send, &[self.buf.sge(MSG, MSG as u32)]))?;
        Ok(())
    }

    /// Sends `m` and returns the answer.
    fn rpc(&mut self, m: Msg) -> Res<Msg> {
        self.send(m)?;
        let (mut sent, mut got) = (false, None);
        while !sent || got.is_none() {
            let w = self.completion()?;
            match w.opcode {
                WcOpcode::Recv => got = Some(w.byte_len as usize),
                _ => sent = true,
            }
        }
        if got != Some(MSG) {
            return Err(format!("an answer of {} bytes", got.unwrap_or(0)).into());
        }
        let mut raw = [0u8; MSG];
        self.buf.read(0, &mut raw)?;
        self.qp()?.post_recv(RecvWr::new(0, &[self.buf.sge(0, MSG as u32)]))?;
        Msg::decode(&raw).map_err(|t| format!("an answer of type {t}").into())
    }

    fn set(&mut self, key: i32, value: i32) -> Res<()> {
        match self.rpc(Msg::Set { key, value })? {
            Msg::SetResp { key: k, value: v } if (k, v) == (key, value) => Ok(()),
            m => Err(format!("SET {key} {value} answered with {m:?}").into()),
        }
    }

    /// Get by RPC.
    fn query(&mut self, key: i32) -> Res<i32> {
        match self.rpc(Msg::Query { key })? {
            Msg::QueryResp { key: k, value } if k == key => Ok(value),
            m => Err(format!("QUERY {key} answered with {m:?}").into()),
        }
    }

    /// Get by a 4-byte RDMA READ at `address + 4·key` (−1 for a key outside the table, which
    /// is not read).
    fn read(&mut self, key: i32) -> Res<i32> {
        if key < 0 || key as u32 >= self.num_keys {
            return Ok(-1);
        }
        let remote =
            RemoteAddr { addr: self.address.wrapping_add(4 * key as u64), rkey: Rkey::new(self.rkey) };
        let sge = self.buf.sge(2 * MSG, 4);
        self.qp()?.post_send(SendWr::new(2, SendOp::RdmaRead(remote), &[sge]))?;
        let w = self.completion()?;
        if w.opcode != WcOpcode::RdmaRead {
            return Err(format!("unexpected completion {:?}", w.opcode).into());
        }
        let mut v = [0u8; 4];
        self.buf.read(2 * MSG, &mut v)?;
        Ok(i32::from_le_bytes(v))
    }

    /// DISCONNECT, then the CM's disconnect; waits for DISCONNECTED.
    fn close(mut self) -> Res<()> {
        self.send(Msg::Disconnect)?;
        self.completion()?;
        self.id.disconnect()?;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            let ev = next_event(&self.ch, Duration::from_secs(10))?;
            if ev.event_type() == CmEventType::Disconnected {
                return Ok(());
            }
        }
        Err("no DISCONNECTED event".into())
    }
}

fn client(local: IpAddr, port: u16, server: IpAddr, mut bench: Option<u64>, ops: &[String]) -> Res<()> {
    // Parse the operations before connecting.
    enum Op {
        Set(i32, i32),
        Get(i32),
    }
    let mut parsed = Vec::new();
    let mut it = ops.iter();
    while let Some(op) = it.next() {
        let mut num = |what: &str| -> Res<i32> {
            let s = it.next().ok_or_else(|| format!("{op} needs {what}"))?;
            s.parse::<i32>().map_err(|e| format!("{op} {what} {s:?}: {e}").into())
        };
        parsed.push(match op.as_str() {
            "set" => Op::Set(num("a key")?, num("a value")?),
            "get" => Op::Get(num("a key")?),
            "--bench" => {
                // (also after SERVER, where clap leaves it among the operations)
                bench = Some(num("a count").and_then(|n| Ok(u64::try_from(n)?))?);
                continue;
            }
            o => return Err(format!("unknown operation {o:?} (set KEY VALUE, get KEY)").into()),
        });
    }
    let dev = Device::open(DeviceConfig::new(local.to_string()))?;
    let mut c = Client::connect(&dev, local, SocketAddr::new(server, port))?;
    println!(
        "connected to {server}:{port}: table of {} keys at {:#x}, rkey {:#x}",
        c.num_keys, c.address, c.rkey
    );
    let mut mismatch = false;
    for op in parsed {
        match op {
            Op::Set(k, v) => {
                c.set(k, v)?;
                println!("set {k} {v}: ok");
            }
            Op::Get(k) => {
                let (rpc, read) = (c.query(k)?, c.read(k)?);
                println!("get {k}: rpc {rpc} read {read}");
                mismatch |= rpc != read;
            }
        }
    }
    if let Some(n) = bench {
        benchmark(&mut c, n)?;
    }
    c.close()?;
    println!("disconnected");
    if mismatch {
        return Err("RPC and READ gets disagreed".into());
    }
    Ok(())
}

fn report(what: &str, n: u64, t: Duration) {
    let s = t.as_secs_f64();
    println!(
        "bench {what:<9} {n} ops in {s:.3} s: {:.0} ops/s, mean latency {:.2} us",
        n as f64 / s,
        s * 1e6 / n as f64
    );
}

/// N SETs (key i mod the table size, value i), N RPC gets and N READ gets of the same keys;
/// every value is checked.
fn benchmark(c: &mut Client, n: u64) -> Res<()> {
    if n == 0 {
        return Ok(());
    }
    let keys = u64::from(c.num_keys.clamp(1, i32::MAX as u32));
    let key = |i: u64| (i % keys) as i32;
    // The value key k holds after the SETs: the last i with i mod keys == k.
    let expect = |k: i32| -> i32 {
        let k = k as u64;
        let last = (n - 1 - k) / keys * keys + k;
        last as i32
    };
    let t = Instant::now();
    for i in 0..n {
        c.set(key(i), i as i32)?;
    }
    report("set", n, t.elapsed());
    let t = Instant::now();
    for i in 0..n {
        let k = key(i);
        let v = c.query(k)?;
        if v != expect(k) {
            return Err(format!("RPC get of key {k}: {v}, expected {}", expect(k)).into());
        }
    }
    report("rpc-get", n, t.elapsed());
    let t = Instant::now();
    for i in 0..n {
        let k = key(i);
        let v = c.read(k)?;
        if v != expect(k) {
            return Err(format!("READ get of key {k}: {v}, expected {}", expect(k)).into());
        }
    }
    report("read-get", n, t.elapsed());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bad_types_are_refused() {
        for m in [
            Msg::Disconnect,
            Msg::Set { key: -5, value: 7 },
            Msg::SetResp { key: 1, value: i32::MIN },
            Msg::QueryResp { key: 32767, value: -1 },
            Msg::DbInfo { rkey: 0xdead_beef, num_keys: 32768, address: 0x7f00_1234_5678 },
        ] {
            assert_eq!(Msg::decode(&m.encode()), Ok(m));
        }
        let mut b = Msg::Query { key: 3 }.encode();
        assert_eq!(&b[..12], &[3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0]);
        b[0] = 6;
        assert_eq!(Msg::decode(&b), Err(6));
    }
}
