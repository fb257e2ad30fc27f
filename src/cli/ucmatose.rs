//! `softroce ucmatose`: librdmacm's `ucmatose` (rdma-core `librdmacm/examples/cmatose.c`), RC
//! connections through the RDMA CM, pairing with the real ucmatose in either role.
//!
//! The protocol, as ucmatose runs it: ids in the TCP port space on port 7471 (`-p`). Each side
//! creates an RC QP per connection (every send signaled) with `-C` receives of `-S` bytes
//! posted before it connects or accepts; the client connects with responder resources 1,
//! initiator depth 1 and retry count 5. A server request beyond `-c` is rejected ("failing
//! connection request", and the server gives up with status −12 as ucmatose does). Once every
//! connection is established the server sends `-C` messages on each, waits for their
//! completions, then for `-C` messages back; the client waits for the server's messages and
//! sends its replies. The *server* then disconnects (DREQ); the client answers each
//! DISCONNECTED with its own `rdma_disconnect` (DREP). Message contents are not checked.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use softroce::verbs::cm::{CmEventType, CmId, ConnParam, EventChannel, PortSpace};
use softroce::verbs::{
    Access, CompletionQueue, MemoryRegion, ProtectionDomain, QpInitAttr, RecvWr, SendWr, WcStatus,
    WorkCompletion,
};

/// Arguments of `softroce ucmatose` (ucmatose's flags).
#[derive(clap::Args, Debug)]
#[command(after_help = super::common::EXIT_CODES)]
pub struct UcmatoseArgs {
    /// Client: the server's address (without it: run the server) [ucmatose -s]
    #[arg(short = 's')]
    pub server: Option<String>,
    /// The local address to bind (server) or connect from (client) [ucmatose -b]
    #[arg(short = 'b')]
    pub bind: Option<IpAddr>,
    /// Connections [ucmatose -c]
    #[arg(short = 'c', default_value_t = 1)]
    pub connections: usize,
    /// Messages each way per connection (0: none) [ucmatose -C]
    #[arg(short = 'C', default_value_t = 10)]
    pub count: usize,
    /// Message size in bytes [ucmatose -S]
    #[arg(short = 'S', default_value_t = 100)]
    pub size: usize,
    /// Port [ucmatose -p]
    #[arg(short = 'p', default_value_t = 7471)]
    pub port: u16,
    /// How long to wait for each completion or CM event before giving up, in seconds
    /// (ucmatose waits forever)
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

/// Runs `softroce ucmatose`: prints ucmatose's lines and exits with its return status.
pub fn run(a: &UcmatoseArgs) -> i32 {
    if a.connections == 0 {
        eprintln!("softroce ucmatose: -c needs at least one connection");
        return 2;
    }
    let r = if a.server.is_some() { client(a) } else { server(a) };
    let status = r.unwrap_or_else(|m| {
        println!("{m}");
        -1
    });
    println!("test complete");
    println!("return status {status}");
    status & 0xff
}

type Res<T> = std::result::Result<T, String>;

/// One connection's verbs objects (ucmatose's `cmatest_node`).
struct Node {
    id: CmId,
    _pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    connected: bool,
}

impl Node {
    /// ucmatose's `init_node` + `post_recvs`; on failure the id comes back with the message.
    fn new(mut id: CmId, a: &UcmatoseArgs) -> std::result::Result<Node, (String, CmId)> {
        let Some(dev) = id.device().cloned() else { return Err(("cmatose: no device".into(), id)) };
        let made = (|| {
            let pd = dev.alloc_pd().map_err(|e| format!("cmatose: unable to allocate PD: {e}"))?;
            let cqe = a.count.max(1);
            let send_cq = dev.create_cq(cqe).map_err(|e| format!("cmatose: unable to create CQ: {e}"))?;
            let recv_cq = dev.create_cq(cqe).map_err(|e| format!("cmatose: unable to create CQ: {e}"))?;
            let mr = pd
                .alloc_mr(a.size.max(1), Access::LOCAL_WRITE)
                .map_err(|e| format!("cmatose: failed to create messages: {e}"))?;
            Ok::<_, String>((pd, send_cq, recv_cq, mr))
        })();
        let (pd, send_cq, recv_cq, mr) = match made {
            Ok(v) => v,
            Err(m) => return Err((m, id)),
        };
        let depth = a.count.max(1) as u32;
        let init = QpInitAttr::rc(&send_cq, &recv_cq).max_send_wr(depth).max_recv_wr(depth).signal_all();
        if let Err(e) = id.create_qp(Some(&pd), &init) {
            return Err((format!("cmatose: unable to create QP: {e}"), id));
        }
        let node = Node { id, _pd: pd, send_cq, recv_cq, mr, connected: false };
        if let Some(qp) = node.id.qp()
            && a.size > 0
        {
            for _ in 0..a.count {
                if let Err(e) = qp.post_recv(RecvWr::new(0, &[node.mr.sge(0, a.size as u32)])) {
                    return Err((format!("failed to post receives: {e}"), node.id));
                }
            }
        }
        Ok(node)
    }

    fn post_sends(&self, a: &UcmatoseArgs) -> Res<()> {
        if !self.connected || a.count == 0 || a.size == 0 {
            return Ok(());
        }
        let qp = self.id.qp().ok_or("cmatose: no QP")?;
        for _ in 0..a.count {
            qp.post_send(SendWr::send(0, &[self.mr.sge(0, a.size as u32)]))
                .map_err(|e| format!("failed to post sends: {e}"))?;
        }
        Ok(())
    }

    /// `count` completions on one of the node's CQs.
    fn poll(&self, a: &UcmatoseArgs, recv: bool) -> Res<()> {
        if !self.connected || a.size == 0 {
            return Ok(());
        }
        let cq = if recv { &self.recv_cq } else { &self.send_cq };
        let mut wc = [WorkCompletion::default(); 8];
        let mut done = 0;
        while done < a.count {
            let n = cq
                .poll_wait(&mut wc, Duration::from_secs(a.timeout))
                .map_err(|e| format!("cmatose: failed polling CQ: {e}"))?;
            if n == 0 {
                return Err(format!("cmatose: no completion in {} s ({done} of {})", a.timeout, a.count));
            }
            if let Some(w) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
                return Err(format!("cmatose: completion status {:?}", w.status));
            }
            done += n;
        }
        Ok(())
    }
}

/// Waits for `left` DISCONNECTED events (ucmatose's `disconnect_events`), answering each with
/// `rdma_disconnect`; an error event (a connection rejected after all) ends the wait with its
/// status, as ucmatose's event handler does.
fn disconnect_events(ch: &EventChannel, nodes: &mut [Node], mut left: usize, a: &UcmatoseArgs) -> Res<i32> {
    while left > 0 {
        let ev = ch
            .get_event_timeout(Duration::from_secs(a.timeout))
            .map_err(|e| format!("cmatose: failure in rdma_get_cm_event in disconnect events: {e}"))?;
        let Some(n) = nodes.iter_mut().find(|n| ev.id().is(&n.id)) else { continue };
        match ev.event_type() {
            CmEventType::Disconnected => {
                drop(ev);
                let _ = n.id.disconnect();
                left -= 1;
            }
            t @ (CmEventType::ConnectError | CmEventType::Unreachable | CmEventType::Rejected) => {
                println!("cmatose: event: {}, error: {}", t.name(), ev.status());
                return Ok(ev.status());
            }
            _ => {}
        }
    }
    Ok(0)
}

fn server(a: &UcmatoseArgs) -> Res<i32> {
    println!("cmatose: starting server");
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    let mut listen = CmId::new(Some(&ch), PortSpace::Tcp).map_err(|e| e.to_string())?;
    let bind = SocketAddr::new(a.bind.unwrap_or(IpAddr::from([0, 0, 0, 0])), a.port);
    listen.bind_addr(bind).map_err(|e| format!("cmatose: bind address failed: {e}"))?;
    listen.listen(0).map_err(|e| format!("cmatose: failure trying to listen: {e}"))?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut left = a.connections;
    // ucmatose's connect_events: requests until every connection is established; a request
    // beyond -c (or one that cannot be set up) is rejected and ends the test with its error.
    while left > 0 {
        let mut ev = ch.get_event_timeout(Duration::from_secs(a.timeout * 10)).map_err(|e| e.to_string())?;
        match ev.event_type() {
            CmEventType::ConnectRequest => {
                let Some(mut id) = ev.take_id() else { continue };
                drop(ev);
                if nodes.len() == a.connections {
                    println!("cmatose: failing connection request");
                    let _ = id.reject(&[]);
                    return Ok(-libc::ENOMEM);
                }
                let mut node = match Node::new(id, a) {
                    Ok(n) => n,
                    Err((m, mut id)) => {
                        println!("{m}");
                        println!("cmatose: failing connection request");
                        let _ = id.reject(&[]);
                        return Ok(-libc::ENOMEM);
                    }
                };
                if let Err(e) = node.id.accept(None) {
                    println!("cmatose: failure accepting: {e}");
                    println!("cmatose: failing connection request");
                    let _ = node.id.reject(&[]);
                    return Ok(-libc::EINVAL);
                }
                nodes.push(node);
            }
            CmEventType::Established => {
                if let Some(n) = nodes.iter_mut().find(|n| ev.id().is(&n.id)) {
                    n.connected = true;
                    left -= 1;
                }
            }
            t @ (CmEventType::ConnectError | CmEventType::Unreachable | CmEventType::Rejected) => {
                println!("cmatose: event: {}, error: {}", t.name(), ev.status());
                return Ok(ev.status());
            }
            _ => {}
        }
    }
    if a.count > 0 {
        println!("initiating data transfers");
        for n in &nodes {
            n.post_sends(a)?;
        }
        println!("completing sends");
        for n in &nodes {
            n.poll(a, false)?;
        }
        println!("receiving data transfers");
        for n in &nodes {
            n.poll(a, true)?;
        }
        println!("data transfers complete");
    }
    println!("cmatose: disconnecting");
    let mut left = 0;
    for n in nodes.iter_mut().filter(|n| n.connected) {
        n.connected = false;
        let _ = n.id.disconnect();
        left += 1;
    }
    let r = disconnect_events(&ch, &mut nodes, left, a)?;
    println!("disconnected");
    Ok(r)
}

fn client(a: &UcmatoseArgs) -> Res<i32> {
    println!("cmatose: starting client");
    let host = a.server.as_deref().unwrap_or_default();
    let dst = (host, a.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut i| i.next())
        .ok_or_else(|| format!("getaddrinfo: cannot resolve {host}"))?;
    let ch = EventChannel::new().map_err(|e| e.to_string())?;
    println!("cmatose: connecting");
    let mut ids = Vec::new();
    for _ in 0..a.connections {
        let mut id = CmId::new(Some(&ch), PortSpace::Tcp).map_err(|e| e.to_string())?;
        id.resolve_addr(a.bind.map(|b| SocketAddr::new(b, 0)), dst, Duration::from_secs(2))
            .map_err(|e| format!("cmatose: failure getting addr: {e}"))?;
        ids.push(Some(id));
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut left = a.connections;
    let mut status = 0;
    while left > 0 && status == 0 {
        let ev = ch.get_event_timeout(Duration::from_secs(a.timeout * 10)).map_err(|e| e.to_string())?;
        let k = ids.iter().position(|i| i.as_ref().is_some_and(|i| ev.id().is(i)));
        let n = nodes.iter().position(|n| ev.id().is(&n.id));
        match ev.event_type() {
            CmEventType::AddrResolved => {
                drop(ev);
                if let Some(id) = k.and_then(|k| ids[k].as_mut())
                    && let Err(e) = id.resolve_route(Duration::from_secs(2))
                {
                    println!("cmatose: resolve route failed: {e}");
                    left -= 1;
                }
            }
            CmEventType::RouteResolved => {
                drop(ev);
                let Some(id) = k.and_then(|k| ids[k].take()) else { continue };
                match Node::new(id, a) {
                    Ok(mut node) => {
                        let p = ConnParam {
                            responder_resources: 1,
                            initiator_depth: 1,
                            retry_count: 5,
                            // (librdmacm's rnr_retry_count from a zeroed conn_param)
                            rnr_retry_count: 0,
                            ..Default::default()
                        };
                        if let Err(e) = node.id.connect(Some(&p)) {
                            println!("cmatose: failure connecting: {e}");
                            left -= 1;
                        }
                        nodes.push(node);
                    }
                    Err((m, _)) => {
                        println!("{m}");
                        left -= 1;
                    }
                }
            }
            CmEventType::Established => {
                if let Some(n) = n {
                    nodes[n].connected = true;
                    left -= 1;
                }
            }
            t @ (CmEventType::AddrError
            | CmEventType::RouteError
            | CmEventType::ConnectError
            | CmEventType::Unreachable
            | CmEventType::Rejected) => {
                println!("cmatose: event: {}, error: {}", t.name(), ev.status());
                status = ev.status();
                left -= 1;
            }
            _ => {}
        }
    }
    if status == 0 && a.count > 0 {
        println!("receiving data transfers");
        for n in &nodes {
            n.poll(a, true)?;
        }
        println!("sending replies");
        for n in &nodes {
            n.post_sends(a)?;
        }
        println!("data transfers complete");
    }
    // The server disconnects: answer each established connection's DISCONNECTED.
    let established = nodes.iter().filter(|n| n.connected).count();
    let r = disconnect_events(&ch, &mut nodes, established, a)?;
    Ok(if r != 0 { r } else { status })
}
