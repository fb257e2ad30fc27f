//! `softroce rping`: librdmacm's `rping` (rdma-core `librdmacm/examples/rping.c`), connected
//! through the RDMA CM, pairing with the real rping in either role.
//!
//! Per ping the client advertises its `start` buffer (16 bytes, big-endian: address, rkey,
//! size), the server RDMA READs it, answers with a 16-byte zero SEND, the client advertises its
//! `rdma` buffer, the server RDMA WRITEs what it read there (up to its NUL) and SENDs again.
//! The payload is `rdma-ping-N: ` followed by letters counting up from `A` + N, NUL-terminated.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softroce::verbs::cm::{CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use softroce::verbs::{
    Access, CompletionQueue, MemoryRegion, QpInitAttr, QueuePair, RecvWr, RemoteAddr, Rkey, SendOp, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};

/// Arguments of `softroce rping` (rping's flags).
#[derive(clap::Args, Debug)]
#[command(after_help = super::common::EXIT_CODES)]
pub struct RpingArgs {
    /// Server [rping -s]
    #[arg(short = 's')]
    pub server: bool,
    /// Client [rping -c]
    #[arg(short = 'c')]
    pub client: bool,
    /// Server: the address to bind; client: the server's address [rping -a]
    #[arg(short = 'a')]
    pub addr: Option<IpAddr>,
    /// Client: the local address to connect from [rping -I]
    #[arg(short = 'I')]
    pub src: Option<IpAddr>,
    /// Port [rping -p]
    #[arg(short = 'p', default_value_t = 7174)]
    pub port: u16,
    /// Pings (0: forever) [rping -C]
    #[arg(short = 'C', default_value_t = 0)]
    pub count: u64,
    /// Ping size in bytes, 26 to 65535 [rping -S]
    #[arg(short = 'S', default_value_t = 64)]
    pub size: usize,
    /// Print the ping data [rping -v]
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate the ping data [rping -V]
    #[arg(short = 'V')]
    pub validate: bool,
    /// Debug output [rping -d]
    #[arg(short = 'd')]
    pub debug: bool,
    /// Server: serve connection after connection [rping -P; here one at a time]
    #[arg(short = 'P')]
    pub persistent: bool,
    /// Application-managed QP transitions [rping -q; accepted, the id's QP is used]
    #[arg(short = 'q')]
    pub app_qp: bool,
}

type Res<T> = std::result::Result<T, String>;

/// The largest ping.
const MAX_SIZE: usize = 65535;

/// Runs `softroce rping`.
pub fn run(a: &RpingArgs) -> i32 {
    if a.server == a.client {
        eprintln!("softroce rping: give -s (server) or -c (client)");
        return 2;
    }
    if !(26..=MAX_SIZE).contains(&a.size) {
        eprintln!("Invalid size {} (valid range is 26 to {MAX_SIZE})", a.size);
        return 2;
    }
    let r = if a.server { server(a) } else { client(a) };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// The verbs objects of a connection.
struct Conn {
    cq: CompletionQueue,
    /// recv (16) | send (16) | start (size) | rdma (size)
    mr: MemoryRegion,
    size: usize,
    /// Completions that arrived while another was awaited (the peer's next SEND may come in
    /// before the ACK of ours).
    early: std::cell::RefCell<Vec<WorkCompletion>>,
}

const RECV: usize = 0;
const SEND: usize = 16;
const START: usize = 32;

impl Conn {
    fn new(id: &mut CmId, size: usize) -> Res<Conn> {
        let dev = id.device().ok_or("no device")?.clone();
        let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
        let mr = pd.alloc_mr(START + 2 * size, Access::ALL).map_err(|e| e.to_string())?;
        id.create_qp(Some(&pd), &QpInitAttr::rc(&cq, &cq).max_send_wr(8).max_recv_wr(4))
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        Ok(Conn { cq, mr, size, early: Default::default() })
    }
    fn rdma(&self) -> usize {
        START + self.size
    }
    fn post_recv(&self, qp: &QueuePair) -> Res<()> {
        qp.post_recv(RecvWr::new(0, &[self.mr.sge(RECV, 16)])).map_err(|e| e.to_string())
    }
    /// Sends the 16 bytes at SEND.
    fn send(&self, qp: &QueuePair) -> Res<()> {
        qp.post_send(SendWr::new(1, SendOp::Send, &[self.mr.sge(SEND, 16)])).map_err(|e| e.to_string())
    }
    fn advert(&self, offset: usize, len: usize) -> Res<()> {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&(self.mr.addr() + offset as u64).to_be_bytes());
        b[8..12].copy_from_slice(&self.mr.rkey().value().to_be_bytes());
        b[12..].copy_from_slice(&(len as u32).to_be_bytes());
        self.mr.write(SEND, &b).map_err(|e| e.to_string())
    }
    /// The next completion of `op`; `None` when the connection went away (flush or
    /// DISCONNECTED).
    fn wait(&self, ch: &EventChannel, op: WcOpcode) -> Res<Option<WorkCompletion>> {
        let mut wc =
            [WorkCompletion::new(0, WcStatus::GeneralErr, WcOpcode::Send, softroce::verbs::Qpn::new(0))];
        {
            let mut early = self.early.borrow_mut();
            if let Some(i) = early.iter().position(|w| w.opcode == op) {
                return Ok(Some(early.remove(i)));
            }
        }
        loop {
            if self.cq.poll_wait(&mut wc, Duration::from_millis(100)).map_err(|e| e.to_string())? == 0 {
                if let Some(ev) = ch.try_get_event().map_err(|e| e.to_string())? {
                    match ev.event_type() {
                        CmEventType::Disconnected => return Ok(None),
                        CmEventType::TimewaitExit => {}
                        t => return Err(format!("cma event {}, error {}", t.name(), ev.status())),
                    }
                }
                continue;
            }
            let w = wc[0];
            if w.status == WcStatus::WrFlushErr {
                return Ok(None);
            }
            if w.status != WcStatus::Success {
                return Err(format!("cq completion failed status {:?}", w.status));
            }
            if w.opcode == WcOpcode::Recv && w.byte_len != 16 {
                return Err(format!("Received bogus data, size {}", w.byte_len));
            }
            if w.opcode == op {
                return Ok(Some(w));
            }
            self.early.borrow_mut().push(w);
        }
    }
    /// Reads the advert in the receive buffer.
    fn remote(&self) -> Res<(RemoteAddr, usize)> {
        let mut b = [0u8; 16];
        self.mr.read(RECV, &mut b).map_err(|e| e.to_string())?;
        let addr = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
        let rkey = u32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(b[12..].try_into().unwrap_or_default()) as usize;
        Ok((RemoteAddr { addr, rkey: Rkey::new(rkey) }, len))
    }
    fn text(&self, offset: usize) -> String {
        let mut b = vec![0u8; self.size];
        let _ = self.mr.read(offset, &mut b);
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..n]).into_owned()
    }
}

fn next_event(ch: &EventChannel, want: CmEventType) -> Res<softroce::verbs::cm::CmEvent> {
    let ev = ch.get_event_timeout(Duration::from_secs(120)).map_err(|e| e.to_string())?;
    if ev.event_type() != want {
        return Err(format!("cma event {}, error {}", ev.event_type().name(), ev.status()));
    }
    Ok(ev)
}

/// rping's payload for ping `ping`: `rdma-ping-N: ` then letters from `start`, NUL-ended.
fn payload(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size - 1);
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    b[size - 1] = 0;
    b
}

fn client(a: &RpingArgs) -> Res<()> {
    let dst = SocketAddr::new(a.addr.ok_or("a client needs -a <server address>")?, a.port);
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    let mut id = CmId::new(Some(&ch), PortSpace::Tcp).map_err(|e| e.to_string())?;
    id.resolve_addr(a.src.map(|s| SocketAddr::new(s, 0)), dst, Duration::from_secs(2))
        .map_err(|e| format!("rdma_resolve_addr: {e}"))?;
    next_event(&ch, CmEventType::AddrResolved)?;
    id.resolve_route(Duration::from_secs(2)).map_err(|e| format!("rdma_resolve_route: {e}"))?;
    next_event(&ch, CmEventType::RouteResolved)?;
    let conn = Conn::new(&mut id, a.size)?;
    let qp = id.qp().ok_or("no QP")?;
    conn.post_recv(qp)?;
    let param = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    };
    id.connect(Some(&param)).map_err(|e| format!("rdma_connect: {e}"))?;
    let ev = ch.get_event_timeout(Duration::from_secs(120)).map_err(|e| e.to_string())?;
    if ev.event_type() != CmEventType::Established {
        eprintln!("cma event {}, error {}", ev.event_type().name(), ev.status());
        return Err("wait for CONNECTED state 10\nconnect error -1".into());
    }
    drop(ev);
    let qp = id.qp().ok_or("no QP")?;
    let mut start = 65u8;
    let mut ping = 0u64;
    while a.count == 0 || ping < a.count {
        let data = payload(ping, start, a.size);
        start = if start >= 122 { 65 } else { start + 1 };
        conn.mr.write(START, &data).map_err(|e| e.to_string())?;
        conn.mr.fill(conn.rdma(), a.size, 0).map_err(|e| e.to_string())?;
        // The start buffer, for the server to READ.
        conn.advert(START, a.size)?;
        conn.send(qp)?;
        if conn.wait(&ch, WcOpcode::Send)?.is_none() || conn.wait(&ch, WcOpcode::Recv)?.is_none() {
            return Err("client: the server went away".into());
        }
        conn.post_recv(qp)?;
        // The rdma buffer, for the server to WRITE.
        conn.advert(conn.rdma(), a.size)?;
        conn.send(qp)?;
        if conn.wait(&ch, WcOpcode::Send)?.is_none() || conn.wait(&ch, WcOpcode::Recv)?.is_none() {
            return Err("client: the server went away".into());
        }
        conn.post_recv(qp)?;
        if a.validate {
            let mut got = vec![0u8; a.size];
            conn.mr.read(conn.rdma(), &mut got).map_err(|e| e.to_string())?;
            if got != data {
                return Err("data mismatch!".into());
            }
        }
        if a.verbose {
            println!("ping data: {}", conn.text(conn.rdma()));
        }
        ping += 1;
    }
    id.disconnect().map_err(|e| format!("rdma_disconnect: {e}"))?;
    if let Ok(ev) = ch.get_event_timeout(Duration::from_secs(10))
        && ev.event_type() == CmEventType::Disconnected
    {
        eprintln!("client DISCONNECT EVENT...");
    }
    Ok(())
}

fn server(a: &RpingArgs) -> Res<()> {
    let bind = SocketAddr::new(a.addr.unwrap_or(IpAddr::from([0, 0, 0, 0])), a.port);
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    let mut listener = CmId::new(Some(&ch), PortSpace::Tcp).map_err(|e| e.to_string())?;
    listener.bind_addr(bind).map_err(|e| format!("rdma_bind_addr: {e}"))?;
    listener.listen(3).map_err(|e| format!("rdma_listen: {e}"))?;
    loop {
        let mut req = next_event(&ch, CmEventType::ConnectRequest)?;
        let mut id = req.take_id().ok_or("no new id")?;
        drop(req);
        // The server's buffers hold the largest ping, whatever size the client advertises.
        let conn = Conn::new(&mut id, MAX_SIZE)?;
        conn.post_recv(id.qp().ok_or("no QP")?)?;
        id.accept(None).map_err(|e| format!("rdma_accept: {e}"))?;
        next_event(&ch, CmEventType::Established)?;
        serve(a, &ch, &id, &conn)?;
        eprintln!("server DISCONNECT EVENT...");
        let _ = id.disconnect();
        if !a.persistent {
            return Ok(());
        }
    }
}

fn serve(a: &RpingArgs, ch: &EventChannel, id: &CmId, conn: &Conn) -> Res<()> {
    let qp = id.qp().ok_or("no QP")?;
    conn.mr.fill(SEND, 16, 0).map_err(|e| e.to_string())?;
    loop {
        // The client's start buffer: READ it.
        if conn.wait(ch, WcOpcode::Recv)?.is_none() {
            return Ok(());
        }
        let (remote, len) = conn.remote()?;
        conn.post_recv(qp)?;
        let len = len.min(conn.size);
        conn.mr.fill(conn.rdma(), conn.size, 0).map_err(|e| e.to_string())?;
        qp.post_send(SendWr::new(2, SendOp::RdmaRead(remote), &[conn.mr.sge(conn.rdma(), len as u32)]))
            .map_err(|e| e.to_string())?;
        if conn.wait(ch, WcOpcode::RdmaRead)?.is_none() {
            return Ok(());
        }
        if a.verbose {
            println!("server ping data: {}", conn.text(conn.rdma()));
        }
        // Go ahead (16 zero bytes).
        conn.send(qp)?;
        if conn.wait(ch, WcOpcode::Send)?.is_none() {
            return Ok(());
        }
        // The client's rdma buffer: WRITE what was read, up to its NUL.
        if conn.wait(ch, WcOpcode::Recv)?.is_none() {
            return Ok(());
        }
        let (remote, rlen) = conn.remote()?;
        conn.post_recv(qp)?;
        let n = (conn.text(conn.rdma()).len() + 1).min(rlen).min(conn.size);
        qp.post_send(SendWr::new(3, SendOp::RdmaWrite(remote), &[conn.mr.sge(conn.rdma(), n as u32)]))
            .map_err(|e| e.to_string())?;
        if conn.wait(ch, WcOpcode::RdmaWrite)?.is_none() {
            return Ok(());
        }
        conn.send(qp)?;
        if conn.wait(ch, WcOpcode::Send)?.is_none() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn payload_is_rpings() {
        let p = super::payload(0, 65, 64);
        assert_eq!(&p[..63], b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr");
        assert_eq!(p[63], 0);
    }
}
