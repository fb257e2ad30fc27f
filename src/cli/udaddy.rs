//! `softroce udaddy`: librdmacm's `udaddy` (rdma-core `librdmacm/examples/udaddy.c`), UD QPs
//! found through the RDMA CM's SIDR, pairing with the real udaddy in either role.
//!
//! The protocol, as udaddy runs it: ids in the UDP port space on port 7174. The client
//! resolves the server, creates a UD QP with `-C` receives of `-S` bytes (plus the 40-byte GRH)
//! posted, and connects (a SIDR_REQ); the server, per CONNECT_REQUEST, does the same and
//! accepts (the SIDR_REP names its QP and Q_Key 0x01234567). The client's ESTABLISHED gives the
//! server's QP, Q_Key and address; it sends `-C` SENDs with immediate data (its own QP number,
//! big-endian), unsignaled, then waits for `-C` receives. The server waits for its `-C`
//! receives, makes the reply address from the first one's GRH and immediate data, sends `-C`
//! signaled SENDs with immediate back and waits for their completions. The message contents are
//! not checked (udaddy sends uninitialised memory); the lengths are.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use softroce::verbs::cm::{CmEventType, CmId, ConnParam, EventChannel, EventParam, PortSpace};
use softroce::verbs::{
    Access, AddressHandle, AddressVector, CompletionQueue, Gid, MemoryRegion, ProtectionDomain, Qkey,
    QpInitAttr, Qpn, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

/// Arguments of `softroce udaddy` (udaddy's flags).
#[derive(clap::Args, Debug)]
#[command(after_help = super::common::EXIT_CODES)]
pub struct UdaddyArgs {
    /// Client: the server's address (without it: run the server) [udaddy -s]
    #[arg(short = 's')]
    pub server: Option<String>,
    /// The local address to bind (server) or connect from (client) [udaddy -b]
    #[arg(short = 'b')]
    pub bind: Option<IpAddr>,
    /// Connections [udaddy -c]
    #[arg(short = 'c', default_value_t = 1)]
    pub connections: usize,
    /// Messages each way per connection (0: none) [udaddy -C]
    #[arg(short = 'C', default_value_t = 10)]
    pub count: usize,
    /// Message size in bytes (at most the active MTU) [udaddy -S]
    #[arg(short = 'S', default_value_t = 100)]
    pub size: usize,
    /// Type of service [udaddy -t; only 0 is supported]
    #[arg(short = 't', default_value_t = 0)]
    pub tos: u8,
    /// Port space [udaddy -p; only 0x111, UDP]
    #[arg(short = 'p', default_value = "0x111")]
    pub port_space: String,
    /// Port space by name [udaddy -P; only udp]
    #[arg(short = 'P')]
    pub port_space_name: Option<String>,
    /// Port (udaddy has none: 7174)
    #[arg(long, default_value_t = 7174)]
    pub port: u16,
    /// How long to wait for each completion or CM event before giving up, in seconds (udaddy
    /// waits forever)
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

type Res<T> = std::result::Result<T, String>;

/// udaddy's Q_Key for UD ids in the UDP port space (`RDMA_UDP_QKEY`).
const QKEY: u32 = softroce::wire::cma::RDMA_UDP_QKEY;
/// The GRH area in front of every UD receive.
const GRH: usize = 40;

/// Runs `softroce udaddy`: prints udaddy's lines and exits with its return status.
pub fn run(a: &UdaddyArgs) -> i32 {
    let ps = a.port_space.trim_start_matches("0x");
    if u32::from_str_radix(ps, 16).ok() != Some(0x111)
        || a.port_space_name.as_deref().is_some_and(|p| !p.eq_ignore_ascii_case("udp"))
    {
        eprintln!("softroce udaddy: only the UDP port space is supported");
        return 2;
    }
    if a.tos != 0 {
        eprintln!("softroce udaddy: -t (type of service) is not supported");
        return 2;
    }
    if a.connections == 0 {
        eprintln!("softroce udaddy: -c needs at least one connection");
        return 2;
    }
    let r = if a.server.is_some() { client(a) } else { server(a) };
    let status = match r {
        Ok(()) => 0,
        Err(Failure::Status(s)) => s,
        Err(Failure::Msg(m)) => {
            println!("{m}");
            -1
        }
    };
    println!("test complete");
    println!("return status {status}");
    status & 0xff
}

/// How a run failed: with an event's status (udaddy returns it), or with a message.
enum Failure {
    Status(i32),
    Msg(String),
}

impl From<String> for Failure {
    fn from(m: String) -> Failure {
        Failure::Msg(m)
    }
}

/// One connection's verbs objects (udaddy's `cmatest_node`).
struct Node {
    id: CmId,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    /// GRH area + one message; every receive and send uses it, as udaddy's do.
    mr: MemoryRegion,
    /// Where replies go: from ESTABLISHED (client) or the first message (server).
    peer: Option<(AddressHandle, u32, u32)>,
}

impl Node {
    /// udaddy's `verify_test_params` + `init_node` + `post_recvs`; on failure the id comes back
    /// with the message (a server then rejects the request, as udaddy does).
    fn new(mut id: CmId, a: &UdaddyArgs) -> std::result::Result<Node, (String, CmId)> {
        let Some(dev) = id.device().cloned() else { return Err(("udaddy: no device".into(), id)) };
        let mtu = dev.query_port().active_mtu.bytes() as usize;
        if a.count > 0 && a.size > mtu {
            return Err((format!("udaddy: message_size {} is larger than active mtu {mtu}", a.size), id));
        }
        let pd = match dev.alloc_pd() {
            Ok(p) => p,
            Err(e) => return Err((format!("udaddy: unable to allocate PD: {e}"), id)),
        };
        let cq = match dev.create_cq(if a.count > 0 { a.count * 2 } else { 2 }) {
            Ok(c) => c,
            Err(e) => return Err((format!("udaddy: unable to create CQ: {e}"), id)),
        };
        let depth = a.count.max(1) as u32;
        if let Err(e) =
            id.create_qp(Some(&pd), &QpInitAttr::ud(&cq, &cq).max_send_wr(depth).max_recv_wr(depth))
        {
            return Err((format!("udaddy: unable to create QP: {e}"), id));
        }
        let mr = match pd.alloc_mr(a.size + GRH, Access::LOCAL_WRITE) {
            Ok(m) => m,
            Err(e) => return Err((format!("udaddy: failed to create messages: {e}"), id)),
        };
        let node = Node { id, pd, cq, mr, peer: None };
        if let Some(qp) = node.id.qp() {
            for _ in 0..a.count {
                if let Err(e) = qp.post_recv(RecvWr::new(0, &[node.mr.sge(0, (a.size + GRH) as u32)])) {
                    return Err((format!("failed to post receives: {e}"), node.id));
                }
            }
        }
        Ok(node)
    }

    fn qpn(&self) -> u32 {
        self.id.qp().map_or(0, |q| q.qp_num().value())
    }

    /// udaddy's `post_sends`: `count` SENDs with immediate (our QP number) to the peer.
    fn post_sends(&self, a: &UdaddyArgs, signaled: bool) -> Res<()> {
        let Some((ah, qpn, qkey)) = &self.peer else { return Ok(()) };
        let qp = self.id.qp().ok_or("udaddy: no QP")?;
        let dest = ah.dest(Qpn::new(*qpn), Qkey::new(*qkey));
        for _ in 0..a.count {
            let mut wr = SendWr::send_with_imm(0, &[self.mr.sge(0, a.size as u32)], self.qpn()).to(dest);
            if !signaled {
                wr = wr.unsignaled();
            }
            qp.post_send(wr).map_err(|e| format!("failed to post sends: {e}"))?;
        }
        Ok(())
    }

    /// udaddy's `poll_cqs` for one node: `count` completions; the first receive without a
    /// reply address gives one (`create_reply_ah`: the GRH's source, the immediate data's QP).
    fn poll(&mut self, a: &UdaddyArgs) -> Res<()> {
        let mut wc = [WorkCompletion::default(); 8];
        let mut done = 0;
        while done < a.count {
            let n = self
                .cq
                .poll_wait(&mut wc, Duration::from_secs(a.timeout))
                .map_err(|e| format!("udaddy: failed polling CQ: {e}"))?;
            if n == 0 {
                return Err(format!("udaddy: no completion in {} s ({done} of {})", a.timeout, a.count));
            }
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    return Err(format!("udaddy: completion status {:?}", w.status));
                }
                if w.opcode == WcOpcode::Recv && w.byte_len as usize != a.size + GRH {
                    return Err(format!("udaddy: received {} bytes, expected {}", w.byte_len, a.size + GRH));
                }
            }
            if self.peer.is_none() {
                self.reply_ah(&wc[0])?;
            }
            done += n;
        }
        Ok(())
    }

    fn reply_ah(&mut self, w: &WorkCompletion) -> Res<()> {
        let mut grh = [0u8; GRH];
        self.mr.read(0, &mut grh).map_err(|e| e.to_string())?;
        let (src, dst) = grh_addresses(&grh).ok_or("udaddy: failed to create reply AH (no GRH)")?;
        let dev = self.id.device().ok_or("udaddy: no device")?;
        let sgid = dev.gid_index_for(dst).unwrap_or_else(|| dev.default_gid_index());
        let ah = self
            .pd
            .create_ah(&AddressVector::new(Gid::from_ip(src), sgid))
            .map_err(|e| format!("udaddy: failed to create reply AH: {e}"))?;
        let qpn = w.imm_data.unwrap_or(w.src_qp.value());
        let qkey = self.id.qp().and_then(|q| q.query().ok()).map_or(QKEY, |i| i.attr.qkey.value());
        self.peer = Some((ah, qpn, qkey));
        Ok(())
    }
}

/// The source and destination addresses in a UD receive's GRH area: an IPv6 header, or an
/// IPv4 header in its last 20 bytes (how RoCEv2 receives lay it out).
fn grh_addresses(g: &[u8; GRH]) -> Option<(IpAddr, IpAddr)> {
    if g[0] >> 4 == 6 {
        let s: [u8; 16] = g[8..24].try_into().ok()?;
        let d: [u8; 16] = g[24..40].try_into().ok()?;
        return Some((IpAddr::from(s), IpAddr::from(d)));
    }
    if g[20] >> 4 == 4 {
        let s: [u8; 4] = g[32..36].try_into().ok()?;
        let d: [u8; 4] = g[36..40].try_into().ok()?;
        return Some((IpAddr::from(s), IpAddr::from(d)));
    }
    None
}

fn server(a: &UdaddyArgs) -> std::result::Result<(), Failure> {
    println!("udaddy: starting server");
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    let mut listen = CmId::new(Some(&ch), PortSpace::Udp).map_err(|e| e.to_string())?;
    let bind = SocketAddr::new(a.bind.unwrap_or(IpAddr::from([0, 0, 0, 0])), a.port);
    listen.bind_addr(bind).map_err(|e| format!("udaddy: bind address failed: {e}"))?;
    listen.listen(0).map_err(|e| format!("udaddy: failure trying to listen: {e}"))?;
    // udaddy's connect_handler: a request beyond -c, or one whose QP cannot be set up, is
    // rejected ("failing connection request"); each accepted or failed one counts.
    let mut nodes: Vec<Node> = Vec::new();
    let mut left = a.connections;
    while left > 0 {
        let mut ev =
            ch.get_event_timeout(Duration::from_secs(a.timeout.max(1) * 10)).map_err(|e| e.to_string())?;
        if ev.event_type() != CmEventType::ConnectRequest {
            continue;
        }
        let Some(mut id) = ev.take_id() else { continue };
        drop(ev);
        if nodes.len() == a.connections {
            println!("udaddy: failing connection request");
            let _ = id.reject(&[]);
            continue;
        }
        left -= 1;
        let mut node = match Node::new(id, a) {
            Ok(n) => n,
            Err((m, mut id)) => {
                println!("{m}");
                println!("udaddy: failing connection request");
                let _ = id.reject(&[]);
                continue;
            }
        };
        let param = ConnParam { qp_num: node.qpn(), ..Default::default() };
        if let Err(e) = node.id.accept(Some(&param)) {
            println!("udaddy: failure accepting: {e}");
            println!("udaddy: failing connection request");
            let _ = node.id.reject(&[]);
            continue;
        }
        nodes.push(node);
    }
    if a.count > 0 {
        println!("receiving data transfers");
        for n in &mut nodes {
            n.poll(a)?;
        }
        println!("sending replies");
        for n in &nodes {
            n.post_sends(a, true)?;
        }
        for n in &mut nodes {
            n.poll(a)?;
        }
        println!("data transfers complete");
    }
    Ok(())
}

fn client(a: &UdaddyArgs) -> std::result::Result<(), Failure> {
    println!("udaddy: starting client");
    let host = a.server.as_deref().unwrap_or_default();
    let dst = (host, a.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut i| i.next())
        .ok_or_else(|| format!("getaddrinfo: cannot resolve {host}"))?;
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    println!("udaddy: connecting");
    let mut ids = Vec::new();
    for _ in 0..a.connections {
        let mut id = CmId::new(Some(&ch), PortSpace::Udp).map_err(|e| e.to_string())?;
        id.resolve_addr(a.bind.map(|b| SocketAddr::new(b, 0)), dst, Duration::from_secs(2))
            .map_err(|e| format!("udaddy: failure getting addr: {e}"))?;
        ids.push(Some(id));
    }
    let mut nodes: Vec<Option<Node>> = (0..a.connections).map(|_| None).collect();
    let mut left = a.connections;
    let mut status = 0;
    while left > 0 {
        let ev =
            ch.get_event_timeout(Duration::from_secs(a.timeout.max(1) * 10)).map_err(|e| e.to_string())?;
        let Some(k) = (0..a.connections).find(|&k| {
            ids[k].as_ref().is_some_and(|i| ev.id().is(i))
                || nodes[k].as_ref().is_some_and(|n| ev.id().is(&n.id))
        }) else {
            continue;
        };
        match ev.event_type() {
            CmEventType::AddrResolved => {
                drop(ev);
                if let Some(id) = ids[k].as_mut()
                    && let Err(e) = id.resolve_route(Duration::from_secs(2))
                {
                    println!("udaddy: resolve route failed: {e}");
                    left -= 1;
                }
            }
            CmEventType::RouteResolved => {
                drop(ev);
                let Some(id) = ids[k].take() else { continue };
                match Node::new(id, a) {
                    Ok(mut n) => {
                        if let Err(e) = n.id.connect(Some(&ConnParam::default())) {
                            println!("udaddy: failure connecting: {e}");
                            left -= 1;
                        }
                        nodes[k] = Some(n);
                    }
                    Err((m, _)) => {
                        println!("{m}");
                        left -= 1;
                    }
                }
            }
            CmEventType::Established => {
                let EventParam::Ud(u) = ev.param().clone() else { continue };
                drop(ev);
                let Some(n) = nodes[k].as_mut() else { continue };
                match n.pd.create_ah(&u.ah_attr) {
                    Ok(ah) => n.peer = Some((ah, u.qp_num, u.qkey.value())),
                    Err(_) => println!("udaddy: failure creating address handle"),
                }
                left -= 1;
            }
            t @ (CmEventType::AddrError
            | CmEventType::RouteError
            | CmEventType::ConnectError
            | CmEventType::Unreachable
            | CmEventType::Rejected) => {
                println!("udaddy: event: {}, error: {}", t.name(), ev.status());
                status = ev.status();
                left -= 1;
            }
            _ => {}
        }
        if status != 0 {
            return Err(Failure::Status(status));
        }
    }
    if a.count > 0 {
        println!("initiating data transfers");
        for n in nodes.iter().flatten() {
            n.post_sends(a, false)?;
        }
        println!("receiving data transfers");
        for n in nodes.iter_mut().flatten().filter(|n| n.peer.is_some()) {
            n.poll(a)?;
        }
        println!("data transfers complete");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn grh_addresses_of_ipv4_and_ipv6_receives() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[10, 77, 0, 2]);
        g[36..40].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(super::grh_addresses(&g), Some(([10, 77, 0, 2].into(), [10, 77, 0, 1].into())));
        let mut g = [0u8; 40];
        g[0] = 0x60;
        g[23] = 1;
        g[39] = 2;
        let (s, d) = super::grh_addresses(&g).unwrap();
        assert_eq!((s.to_string(), d.to_string()), ("::1".into(), "::2".into()));
        assert_eq!(super::grh_addresses(&[0u8; 40]), None);
    }
}
