//! An in-process network: devices joined by the transport simulator's [`LossyLink`], in real
//! time. Tests use it to run the whole verbs path — engine threads, memory regions, CQs — with
//! loss, duplication, reordering and corruption, without sockets.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::{Backend, Datagram, Outgoing};
use crate::transport::Time;
use crate::transport::sim::{LinkConfig, LinkStats, LossyLink};

struct Inner {
    epoch: Instant,
    cfg: LinkConfig,
    seed: u64,
    /// One link per (source, destination) pair.
    links: HashMap<(IpAddr, IpAddr), LossyLink>,
    wakers: HashMap<IpAddr, Arc<mio::Waker>>,
}

/// A network of in-memory devices. Clone it to share.
#[derive(Clone)]
pub struct MemoryNetwork {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for MemoryNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNetwork").finish_non_exhaustive()
    }
}

impl MemoryNetwork {
    /// A network whose links all behave as `cfg`, seeded with `seed`.
    pub fn new(cfg: LinkConfig, seed: u64) -> MemoryNetwork {
        MemoryNetwork {
            inner: Arc::new(Mutex::new(Inner {
                epoch: Instant::now(),
                cfg,
                seed,
                links: HashMap::new(),
                wakers: HashMap::new(),
            })),
        }
    }

    /// Changes the behaviour of every link, existing and future.
    pub fn set_link_config(&self, cfg: LinkConfig) {
        let mut g = self.inner.lock();
        g.cfg = cfg;
        for l in g.links.values_mut() {
            l.set_config(cfg);
        }
    }

    /// What the links did so far, summed.
    pub fn stats(&self) -> LinkStats {
        let g = self.inner.lock();
        let mut s = LinkStats::default();
        for l in g.links.values() {
            s.sent += l.stats.sent;
            s.delivered += l.stats.delivered;
            s.dropped += l.stats.dropped;
            s.duplicated += l.stats.duplicated;
            s.reordered += l.stats.reordered;
            s.corrupted += l.stats.corrupted;
        }
        s
    }
}

fn now(epoch: Instant) -> Time {
    Time::from_nanos(epoch.elapsed().as_nanos() as u64)
}

pub(crate) struct MemoryBackend {
    net: MemoryNetwork,
    ip: IpAddr,
    port: u16,
    waker: Option<Arc<mio::Waker>>,
}

impl MemoryBackend {
    pub(crate) fn new(net: &MemoryNetwork, ip: IpAddr, port: u16) -> MemoryBackend {
        MemoryBackend { net: net.clone(), ip, port, waker: None }
    }
}

impl Backend for MemoryBackend {
    fn port(&self) -> u16 {
        self.port
    }
    fn recv(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<usize> {
        let mut got: Vec<(IpAddr, Vec<u8>)> = Vec::new();
        {
            let mut g = self.net.inner.lock();
            let t = now(g.epoch);
            for ((src, dst), link) in g.links.iter_mut() {
                if *dst == self.ip {
                    while let Some(p) = link.poll_deliver(t) {
                        got.push((*src, p));
                        if got.len() >= 256 {
                            break;
                        }
                    }
                }
            }
        }
        let n = got.len();
        for (src, p) in got {
            let Some((port, payload)) = p.split_first_chunk::<2>() else { continue };
            f(Datagram {
                payload,
                src: SocketAddr::new(src, u16::from_be_bytes(*port)),
                dst: self.ip,
                dst_port: self.port,
                ecn: 0,
                ip_header: None,
            });
        }
        Ok(n)
    }
    fn send(&mut self, out: Outgoing<'_>) -> io::Result<()> {
        let waker = {
            let mut g = self.net.inner.lock();
            let t = now(g.epoch);
            let (cfg, seed) = (g.cfg, g.seed);
            let key = (self.ip, out.dst.ip());
            let n = g.links.len() as u64;
            let link = g
                .links
                .entry(key)
                .or_insert_with(|| LossyLink::new(cfg, seed.wrapping_add(n.wrapping_mul(0x9e37_79b9))));
            for seg in out.contents.chunks(out.segment_size.max(1)) {
                // The UDP source port travels with the packet: the ICRC covers it.
                let mut p = Vec::with_capacity(seg.len() + 2);
                p.extend_from_slice(&out.src_port.to_be_bytes());
                p.extend_from_slice(seg);
                link.send(t, p);
            }
            g.wakers.get(&out.dst.ip()).cloned()
        };
        if let Some(w) = waker {
            w.wake()?;
        }
        Ok(())
    }
    fn register(&mut self, _registry: &mio::Registry, _token: mio::Token) -> io::Result<()> {
        Ok(())
    }
    fn next_deadline(&self) -> Option<Instant> {
        let g = self.net.inner.lock();
        g.links
            .iter()
            .filter(|((_, d), _)| *d == self.ip)
            .filter_map(|(_, l)| l.next_delivery())
            .min()
            .map(|t| g.epoch + std::time::Duration::from_nanos(t.as_nanos()))
    }
    fn max_segments(&self) -> usize {
        64
    }
    fn gso_numbers_ip_id(&self) -> bool {
        false
    }
    fn set_waker(&mut self, waker: Arc<mio::Waker>) {
        self.net.inner.lock().wakers.insert(self.ip, waker.clone());
        self.waker = Some(waker);
    }
}
