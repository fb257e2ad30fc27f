//! The device (`ibv_context`): a network address, its GID table and port, the registered
//! memory, and the engine thread that drives every queue pair.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender};
use crossbeam_queue::SegQueue;
use parking_lot::{Mutex, RwLock};

use super::error::{Error, Result};
use crate::engine::command::Command;
use crate::engine::core::Engine;
use crate::engine::shared::memory::MrTable;
use crate::transport::{Counters, Mtu};
use crate::wire::gid::{Gid, GidIndex, GidType};

pub(crate) use crate::engine::backend::RxCounters;
pub use crate::engine::config::{BackendKind, DeviceConfig, MAX_ENGINE_THREADS, ROCE_PORT};
pub use crate::engine::counters::{DeviceCounters, JunkCounters, counters_dir};
pub(crate) use crate::engine::handle::{EngineHandle, closing, progress_on};
pub use crate::engine::shared::device::{
    AsyncEvent, AsyncEventHook, DeviceAttr, PortAttr, PortState, Sharing,
};
pub(crate) use crate::engine::shared::device::{DeviceShared, EngineLink, Pass, next_mr_generation};

/// The devices this process opened (what the RDMA CM chooses from).
static OPEN: Mutex<Vec<WeakDevice>> = Mutex::new(Vec::new());

/// How long [`Device::open`] waits for this process's engine on the same address to finish
/// closing (see [`closing`]); past it, the open goes ahead as before.
const CLOSE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// A device that does not keep its engine running ([`Device::downgrade`]): the RDMA CM's
/// registry and new ids, and the drop-in library, which adopts a device's running engine for a
/// context opened while objects of an earlier one still hold it.
#[derive(Clone)]
pub struct WeakDevice {
    shared: std::sync::Weak<DeviceShared>,
    engine: std::sync::Weak<EngineHandle>,
}

impl WeakDevice {
    /// The device, if it is still open.
    pub fn upgrade(&self) -> Option<Device> {
        Some(Device { shared: self.shared.upgrade()?, _engine: self.engine.upgrade()? })
    }
    /// Whether the device is still open.
    pub(crate) fn is_alive(&self) -> bool {
        self.engine.strong_count() > 0
    }
    /// Whether this is `dev`.
    pub(crate) fn is(&self, dev: &Device) -> bool {
        std::sync::Weak::ptr_eq(&self.shared, &Arc::downgrade(&dev.shared))
    }
    /// What the engine shares, to send it commands (this does not keep the engine running).
    pub(crate) fn shared(&self) -> Option<Arc<DeviceShared>> {
        self.shared.upgrade()
    }
}

/// An open device. Cheap to clone; the engine stops when the last clone and the last
/// object created from it are dropped.
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: Arc<DeviceShared>,
    _engine: Arc<EngineHandle>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("name", &self.shared.name).field("ip", &self.shared.ip).finish()
    }
}

/// An interface as softroce sees it.
#[derive(Debug, Clone)]
struct Iface {
    name: String,
    index: u32,
    loopback: bool,
    mac: [u8; 6],
    ips: Vec<IpAddr>,
    mtu: u32,
}

/// `IFA_F_DADFAILED`: duplicate address detection found the address in use on the link.
const IFA_F_DADFAILED: u32 = 0x08;

/// The IPv6 addresses of `/proc/net/if_inet6` (`address ifindex prefixlen scope flags name`,
/// hex) whose duplicate address detection failed, with their interface index: the kernel keeps
/// them, never usable.
fn dad_failed(if_inet6: &str) -> Vec<(u32, IpAddr)> {
    if_inet6
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(4)?, 16).ok()?;
            if flags & IFA_F_DADFAILED == 0 {
                return None;
            }
            let addr = u128::from_str_radix(f.first()?, 16).ok()?;
            Some((u32::from_str_radix(f.get(1)?, 16).ok()?, IpAddr::V6(std::net::Ipv6Addr::from(addr))))
        })
        .collect()
}

fn interfaces() -> Vec<Iface> {
    let failed = dad_failed(&std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default());
    pnet_datalink::interfaces()
        .into_iter()
        .map(|i| {
            let mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", i.name))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(1500);
            Iface {
                index: i.index,
                loopback: i.is_loopback(),
                mac: i.mac.map(|m| m.octets()).unwrap_or_default(),
                ips: i.ips.iter().map(|n| n.ip()).filter(|a| !failed.contains(&(i.index, *a))).collect(),
                name: i.name,
                mtu,
            }
        })
        .collect()
}

/// Finds the interface and address to open: an IP address (127.0.0.0/8 always belongs to
/// the loopback interface) or an interface name.
fn resolve(address: &str) -> Result<(Iface, IpAddr)> {
    let ifaces = interfaces();
    if let Ok(ip) = address.parse::<IpAddr>() {
        if let Some(i) = ifaces.iter().find(|i| i.ips.contains(&ip)) {
            return Ok((i.clone(), ip));
        }
        if ip.is_loopback() {
            let lo = ifaces.iter().find(|i| i.name == "lo").cloned().unwrap_or(Iface {
                name: "lo".into(),
                index: 1,
                loopback: true,
                mac: [0; 6],
                ips: vec![],
                mtu: 65536,
            });
            return Ok((lo, ip));
        }
        return Err(Error::NoSuchAddress(ip));
    }
    let i = ifaces
        .into_iter()
        .find(|i| i.name == address)
        .ok_or_else(|| Error::NoSuchInterface(address.into()))?;
    let ip = i
        .ips
        .iter()
        .find(|a| a.is_ipv4())
        .or(i.ips.first())
        .copied()
        .ok_or_else(|| Error::NoAddress(i.name.clone()))?;
    Ok((i, ip))
}

/// Whether `ip` is an IPv6 link-local address (`fe80::/10`).
fn is_link_local(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
}

/// The GID table of a device serving `addresses` (the device's own address first).
///
/// Index 0 is the port's default GID. On kernel rxe that is the interface's link-local
/// address (`fe80::` + EUI-64 of the MAC): here it is the link-local address the device
/// serves, if it serves one (a device opened on an interface). A device that serves none (one
/// opened on a single address, on loopback, which has no link-local address, or on an
/// interface without IPv6) has a copy of its own address's GID at index 0: every listed GID
/// must work, and index 0 is what programs use when told nothing (rdma-core's tests,
/// libfabric). The addresses follow from index 1 in the order given (the device's own address
/// at 1: the index perftest and `-g 1` users pass; then IPv4, IPv6 global, IPv6 link-local, as
/// rxe orders them), the link-local address of index 0 not again.
fn gid_table(addresses: &[IpAddr]) -> Vec<Gid> {
    let ip = addresses.first().copied().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let link_local = addresses.iter().copied().find(is_link_local);
    let mut gids = vec![Gid::from_ip(link_local.unwrap_or(ip))];
    gids.extend(addresses.iter().filter(|a| Some(**a) != link_local).map(|a| Gid::from_ip(*a)));
    gids
}

/// The interface's IPv6 link-local address a device on it serves as GID 0: the one rxe
/// would list (`fe80::` + EUI-64 of the MAC) if the interface has it, else its first
/// link-local address; none on an interface without IPv6 (or whose link-local addresses all
/// failed duplicate address detection, which the caller has left out).
fn link_local_of(iface: &Iface) -> Option<IpAddr> {
    let eui64 = IpAddr::V6(std::net::Ipv6Addr::from(Gid::link_local_from_mac(iface.mac).0));
    let mut lls = iface.ips.iter().copied().filter(is_link_local);
    let first = lls.next()?;
    Some(if iface.ips.contains(&eui64) { eui64 } else { first })
}

/// The addresses a device serves, its own address `ip` first. A device opened on a single
/// address (or an in-memory one) serves that address. A device opened by interface name also
/// serves the interface's link-local address (GID 0, see [`gid_table`]); the raw backend
/// serves every address of the interface (the first IPv4 one first, then the other IPv4 ones,
/// IPv6 global, IPv6 link-local, as rxe orders its GID table).
fn served_ips(cfg: &DeviceConfig, iface: &Iface, ip: IpAddr) -> Vec<IpAddr> {
    let mut ips = vec![ip];
    let by_name = cfg.address.parse::<IpAddr>().is_err();
    match cfg.backend {
        BackendKind::Raw if by_name => {
            let preferred = link_local_of(iface);
            let mut rest: Vec<IpAddr> = iface.ips.iter().copied().filter(|a| *a != ip).collect();
            // (the link-local address of GID 0 first among the link-local ones)
            rest.sort_by_key(|a| (a.is_ipv6(), is_link_local(a), Some(*a) != preferred));
            ips.extend(rest);
        }
        BackendKind::Udp if by_name => ips.extend(link_local_of(iface).filter(|a| *a != ip)),
        _ => {}
    }
    ips
}

/// What a device is, without opening it (no port bound, no thread): what `devinfo` shows.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// The local address it uses.
    pub ip: IpAddr,
    /// The interface's MAC address (zero for loopback).
    pub mac: [u8; 6],
    /// The GID table.
    pub gids: Vec<Gid>,
    /// Every local address the device serves (the first is [`DeviceInfo::ip`]).
    pub addresses: Vec<IpAddr>,
    ifindex: u32,
    loopback: bool,
    /// Port attributes.
    pub port: PortAttr,
    /// Device attributes and limits.
    pub attr: DeviceAttr,
}

impl DeviceInfo {
    /// Describes the device `cfg` would open.
    pub fn query(cfg: &DeviceConfig) -> Result<DeviceInfo> {
        let (iface, ip) = match &cfg.backend {
            BackendKind::Udp | BackendKind::Raw => resolve(&cfg.address)?,
            BackendKind::Memory(_) => {
                let ip: IpAddr = cfg
                    .address
                    .parse()
                    .map_err(|_| Error::InvalidArgument("in-memory devices need an IP address"))?;
                (
                    Iface {
                        name: "mem".into(),
                        index: 0,
                        loopback: false,
                        mac: [0; 6],
                        ips: vec![ip],
                        mtu: 4200,
                    },
                    ip,
                )
            }
        };
        let mac = iface.mac;
        let node_guid =
            u64::from_be_bytes(Gid::link_local_from_mac(mac).0[8..].try_into().unwrap_or_default());
        let addresses = served_ips(cfg, &iface, ip);
        let gids = gid_table(&addresses);
        let active = Mtu::active_for_netdev(iface.mtu);
        Ok(DeviceInfo {
            name: cfg.name.clone().unwrap_or_else(|| "softroce0".into()),
            ip,
            mac,
            port: PortAttr {
                state: PortState::Active,
                max_mtu: Mtu::Mtu4096,
                active_mtu: active,
                netdev_mtu: iface.mtu,
                gid_tbl_len: gids.len() as u32,
                port_cap_flags: 0x0001_0000,
                max_msg_sz: crate::transport::MAX_MSG_SIZE,
                lid: 0,
                link_layer: "Ethernet",
                netdev: iface.name.clone(),
            },
            gids,
            addresses,
            ifindex: iface.index,
            loopback: iface.loopback,
            attr: DeviceAttr {
                fw_ver: env!("CARGO_PKG_VERSION").into(),
                node_guid,
                max_mr_size: u64::MAX,
                page_size_cap: 0xffff_f000,
                vendor_id: 0xffffff,
                vendor_part_id: 0,
                max_qp: 0x10000,
                max_qp_wr: 0x4000,
                max_sge: 32,
                max_inline_data: 512,
                max_cq: 0x10000,
                max_cqe: (1 << 20) - 1,
                max_mr: 0x80000,
                max_mw: 0x7ffff,
                max_pd: 0x10000,
                max_qp_rd_atom: crate::transport::MAX_RD_ATOMIC as u32,
                max_qp_init_rd_atom: crate::transport::MAX_RD_ATOMIC as u32,
                max_srq: 0x10000,
                max_srq_wr: 0x4000,
                max_srq_sge: 27,
                max_ah: 0x8000,
                phys_port_cnt: 1,
                atomic_cap: "ATOMIC_HCA",
            },
        })
    }
}

impl Device {
    /// Opens a device on a local address or interface.
    pub fn open(cfg: DeviceConfig) -> Result<Device> {
        let info = DeviceInfo::query(&cfg)?;
        let faults = crate::engine::injector::FaultState::open(cfg.faults.as_deref())?;
        let ip = info.ip;
        let rx = Arc::new(RxCounters::default());
        let mut threads = cfg.engine_threads.clamp(1, MAX_ENGINE_THREADS);
        if threads > 1 && !matches!(cfg.backend, BackendKind::Udp) {
            // Only UDP sockets are steered by the kernel (SO_ATTACH_REUSEPORT_CBPF).
            tracing::warn!(
                requested = threads,
                "engine_threads > 1 needs the UDP backend; this device runs one engine thread"
            );
            threads = 1;
        }
        // What the engines bind, marked while they close (see [`closing`]).
        let bound: Vec<(IpAddr, u16)> = if cfg.port == 0 || matches!(cfg.backend, BackendKind::Memory(_)) {
            Vec::new()
        } else {
            info.addresses.iter().map(|a| (*a, cfg.port)).collect()
        };
        closing::wait(&bound, CLOSE_PATIENCE);
        // A shared address's membership, held until its engines run and it has steered.
        let mut joining: Option<crate::engine::share::Joining> = None;
        let backends: Vec<Box<dyn crate::engine::backend::Backend>> = match &cfg.backend {
            BackendKind::Raw => {
                use crate::engine::backend::raw::{Link, OpenError, RawBackend};
                let link = Link {
                    ifindex: info.ifindex as i32,
                    mac: info.mac,
                    loopback: info.loopback,
                    mtu: info.port.netdev_mtu,
                };
                let b = RawBackend::new(link, info.addresses.clone(), cfg.port, cfg.gso, rx.clone())
                    .map_err(|e| match e {
                        OpenError::Permission => Error::NeedsCapNetRaw { netdev: info.port.netdev.clone() },
                        OpenError::Bind(addr, source) => Error::Bind { addr, source },
                        OpenError::Io(source) => {
                            Error::RawSocket { netdev: info.port.netdev.clone(), source }
                        }
                    })?;
                vec![Box::new(b)]
            }
            BackendKind::Udp if cfg.share && cfg.port != 0 => {
                use crate::engine::backend::udp::{UdpBackend, local_socket_addr};
                let addrs: Vec<_> =
                    info.addresses.iter().map(|a| local_socket_addr(*a, cfg.port, info.ifindex)).collect();
                let here = addrs[0];
                let mut j = crate::engine::share::Share::join(&addrs, threads).map_err(|e| match e {
                    crate::engine::share::JoinError::Io(source, _) => Error::Bind { addr: here, source },
                    other => Error::Bind {
                        addr: here,
                        source: std::io::Error::new(std::io::ErrorKind::AddrInUse, other.to_string()),
                    },
                })?;
                let sockets = std::mem::take(&mut j.sockets);
                joining = Some(j);
                let mut v: Vec<Box<dyn crate::engine::backend::Backend>> = Vec::with_capacity(threads);
                for s in sockets {
                    let b = UdpBackend::from_shared(s, cfg.gso, rx.clone())
                        .map_err(|(addr, source)| Error::Bind { addr, source })?;
                    v.push(Box::new(b));
                }
                v
            }
            BackendKind::Udp => {
                use crate::engine::backend::udp::{UdpBackend, local_socket_addr};
                let addrs: Vec<_> =
                    info.addresses.iter().map(|a| local_socket_addr(*a, cfg.port, info.ifindex)).collect();
                let group = if threads > 1 {
                    UdpBackend::group(&addrs, cfg.gso, rx.clone(), threads)
                } else {
                    UdpBackend::new(&addrs, cfg.gso, rx.clone()).map(|b| vec![b])
                };
                group
                    .map_err(|(addr, source)| Error::Bind { addr, source })?
                    .into_iter()
                    .map(|b| Box::new(b) as Box<dyn crate::engine::backend::Backend>)
                    .collect()
            }
            BackendKind::Memory(net) => {
                vec![Box::new(crate::engine::backend::memory::MemoryBackend::new(net, ip, cfg.port))]
            }
        };
        let backends: Vec<Box<dyn crate::engine::backend::Backend>> = match &faults {
            Some(f) => backends
                .into_iter()
                .map(|b| {
                    Box::new(crate::engine::backend::faulty::FaultBackend::new(b, f.clone()))
                        as Box<dyn crate::engine::backend::Backend>
                })
                .collect(),
            None => backends,
        };
        let recv_buffer = backends[0].recv_buffer_size();
        let mut links = Vec::with_capacity(backends.len());
        let mut ends = Vec::with_capacity(backends.len());
        for _ in 0..backends.len() {
            let poll = mio::Poll::new()?;
            let waker = Arc::new(mio::Waker::new(poll.registry(), crate::engine::core::WAKE)?);
            let (cmd_tx, cmd_rx): (Sender<Command>, Receiver<Command>) = crossbeam_channel::unbounded();
            links.push(EngineLink {
                cmd_tx,
                waker,
                sleeping: AtomicBool::new(false),
                posted: SegQueue::new(),
                inbox: SegQueue::new(),
                inline_at: AtomicU64::new(0),
                engine_deadline: AtomicU64::new(u64::MAX),
                quiet: AtomicBool::new(false),
                hear: AtomicBool::new(false),
                read_at: AtomicU64::new(0),
                rcvd: AtomicU64::new(0),
                probes: AtomicU64::new(0),
                snapshot: Mutex::new(DeviceCounters::default()),
            });
            ends.push((poll, cmd_rx));
        }
        let shared = Arc::new(DeviceShared {
            name: info.name,
            ip,
            netdev: info.port.netdev.clone(),
            mac: info.mac,
            gids: info.gids,
            addresses: info.addresses.clone(),
            port: info.port,
            attr: info.attr,
            mrs: RwLock::new(MrTable::default()),
            mr_generation: crossbeam_utils::CachePadded::new(AtomicU64::new(next_mr_generation())),
            engines: links,
            events: SegQueue::new(),
            event_hook: RwLock::new(None),
            rx,
            ecn: cfg.ecn,
            next_id: AtomicU32::new(1),
            // A member joining others starts its QP numbers at a random point of its slot's
            // range: the slot may have been a process's that just died, whose peers still
            // retransmit to its QPs (a READ to a reused number would hit the new QP with a
            // stale R_Key and take it to the error state). Alone on the address it counts
            // from 0x11, as a fresh rxe device.
            next_qpn: AtomicU32::new(match &joining {
                Some(j) if j.share.members() > 1 => crate::engine::random::u32() % (1 << 17),
                _ => 0,
            }),
            qp_count: AtomicU32::new(0),
            cq_count: AtomicU32::new(0),
            pd_count: AtomicU32::new(0),
            retired_counters: Mutex::new(Counters::default()),
            ahs: RwLock::new(std::collections::HashMap::new()),
            recv_buffer,
            cm_sink: Mutex::new(None),
            cm_state: std::sync::OnceLock::new(),
            epoch: std::time::Instant::now(),
            spin: cfg.spin,
            poll_yield: cfg.poll_yield,
            quiet_engine: cfg.quiet_engine,
            hold_acks: cfg.hold_acks,
            share: joining.as_ref().map(|j| j.share.clone()),
            qpns: Mutex::new(std::collections::HashSet::new()),
            faults,
        });
        let stats = crate::engine::core::StatsFile::shared(&shared);
        let mut engines = Vec::with_capacity(backends.len());
        for (idx, (backend, (poll, cmd_rx))) in backends.into_iter().zip(ends).enumerate() {
            engines.push(Engine::new(shared.clone(), idx, backend, poll, cmd_rx, cfg.spin, stats.clone())?);
        }
        let cores = if cfg.inline_progress { engines.iter().map(|e| e.core()).collect() } else { Vec::new() };
        let mut handle =
            EngineHandle { shared: shared.clone(), threads: Mutex::new(Vec::new()), cores, bound };
        let n = engines.len();
        for (idx, engine) in engines.into_iter().enumerate() {
            let name = if n == 1 { format!("softroce-{ip}") } else { format!("softroce-{ip}/{idx}") };
            match std::thread::Builder::new().name(name).spawn(move || engine.run()) {
                Ok(t) => handle.threads.get_mut().push(t),
                // (Dropping the handle stops the engines already running.)
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(j) = joining {
            j.finish();
        }
        let dev = Device { _engine: Arc::new(handle), shared };
        let mut open = OPEN.lock();
        open.retain(|w| w.is_alive());
        open.push(dev.downgrade());
        drop(open);
        Ok(dev)
    }

    /// Every device of this process still open, in the order they were opened.
    pub(crate) fn open_devices() -> Vec<Device> {
        let mut d = OPEN.lock();
        d.retain(|w| w.is_alive());
        d.iter().filter_map(|w| w.upgrade()).collect()
    }

    /// The device without keeping it open.
    pub fn downgrade(&self) -> WeakDevice {
        WeakDevice { shared: Arc::downgrade(&self.shared), engine: Arc::downgrade(&self._engine) }
    }

    /// Inline progress from an application thread (see [`DeviceConfig::inline_progress`]):
    /// if no other thread is making progress on the device right now, moves what has arrived
    /// (when `recv`), what was posted and what is to send, and publishes the completions.
    /// Returns whether it ran and whether it moved anything; not run at once when the device
    /// has inline progress off or another thread holds the engine's state.
    /// With several engines, each engine not busy on another thread takes a turn.
    pub(crate) fn progress_inline(&self, recv: bool) -> Pass {
        self._engine.cores.iter().fold(Pass::default(), |p, core| progress_on(core, recv) | p)
    }

    /// Makes the engines quiet (`Core::set_quiet`): an application thread polls in vain and
    /// reads their sockets itself. An engine whose state another thread holds stays as it is.
    pub(crate) fn quiet_engines(&self) {
        if !self.shared.quiet_engine {
            return;
        }
        for (core, link) in self._engine.cores.iter().zip(&self.shared.engines) {
            if !link.quiet.load(Ordering::Relaxed)
                && let Some(mut c) = core.try_lock()
            {
                c.set_quiet(true);
            }
        }
    }

    /// Ends the engines' inline windows ([`DeviceShared::inline_busy_until`]): the calling
    /// thread, which made the last inline pass, is about to sleep on a CQ. An engine then works
    /// as it does without a polling thread (it polls on for a while after work instead of
    /// leaving the next packet to a poll that will not come) until some thread's next inline
    /// pass opens a window again.
    pub(crate) fn polling_stops(&self) {
        for link in &self.shared.engines {
            link.inline_at.store(0, Ordering::Relaxed);
        }
    }

    /// Makes quiet engines listen to their sockets again (see [`Device::quiet_engines`]). An
    /// engine whose state another thread holds (it may be this thread's caller, on the
    /// engine thread) is asked to, and woken. A sleeping engine with work posted to it is
    /// woken too: posts behind others were left to the polling thread
    /// (`QueuePair::schedule`), which now stops polling.
    pub(crate) fn hear_engines(&self) {
        for (core, link) in self._engine.cores.iter().zip(&self.shared.engines) {
            if link.quiet.load(Ordering::Relaxed) {
                match core.try_lock() {
                    Some(mut c) => c.set_quiet(false),
                    None => {
                        link.hear.store(true, Ordering::SeqCst);
                        let _ = link.waker.wake();
                        continue;
                    }
                }
            }
            if !link.posted.is_empty() {
                link.wake_if_sleeping();
            }
        }
    }

    /// Sends at once the plain ACKs application threads' polls held back for their QPs'
    /// next packets ([`DeviceConfig::hold_acks`]). Closing the device, destroying or
    /// modifying the QP and the device's next progress do it anyway; this is for a process
    /// that ends without any of them (the drop-in library calls it from its `exit`
    /// handler). An engine busy for longer than a few milliseconds is left as it is.
    pub fn flush(&self) {
        for core in &self._engine.cores {
            if let Some(mut c) = core.try_lock_for(std::time::Duration::from_millis(20)) {
                c.flush_held(None);
            }
        }
    }

    /// Inline progress on the engine that owns QP `qpn` only (see
    /// [`Device::progress_inline`]).
    pub(crate) fn progress_inline_for(&self, qpn: u32, recv: bool) -> bool {
        self._engine.cores.get(self.shared.engine_of(qpn)).is_some_and(|core| progress_on(core, recv).ran)
    }

    /// Whether application threads that poll this device's CQs or post to its QPs make
    /// progress themselves ([`DeviceConfig::inline_progress`]).
    pub fn inline_progress(&self) -> bool {
        !self._engine.cores.is_empty()
    }

    /// How many engine threads the device runs ([`DeviceConfig::engine_threads`]).
    pub fn engine_threads(&self) -> usize {
        self.shared.engines.len()
    }

    /// The datagrams each engine has read from its own socket so far, by engine index (QP
    /// `q` lives on engine `q % engine_threads()`). With the kernel's steering every packet
    /// arrives at its QP's engine; the few that do not are passed on and counted as
    /// `rcvd_forwarded`.
    pub fn engine_received(&self) -> Vec<u64> {
        // (A shared address's steering probes are read there too; they are no QP's.)
        self.shared
            .engines
            .iter()
            .map(|l| l.rcvd.load(Ordering::Relaxed).saturating_sub(l.probes.load(Ordering::Relaxed)))
            .collect()
    }

    /// The device's part in a shared address ([`DeviceConfig::share`]): `None` for a device
    /// that does not share its address.
    pub fn sharing(&self) -> Option<Sharing> {
        let s = self.shared.share.as_ref()?;
        Some(Sharing { slot: s.slot, members: s.members(), peers: s.peer_pids() })
    }

    /// Whether `other` is a handle to the same device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }
    /// The local IP address packets use.
    pub fn ip(&self) -> IpAddr {
        self.shared.ip
    }
    /// The interface's MAC address (zero for loopback).
    pub fn mac(&self) -> [u8; 6] {
        self.shared.mac
    }
    /// The network interface.
    pub fn netdev(&self) -> &str {
        &self.shared.netdev
    }
    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        &self.shared.attr
    }
    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> &PortAttr {
        &self.shared.port
    }
    /// `ibv_query_gid`: the GID at `index`.
    pub fn gid(&self, index: GidIndex) -> Result<Gid> {
        self.shared
            .gids
            .get(usize::from(index.value()))
            .copied()
            .ok_or(Error::GidIndex { index, len: self.shared.gids.len() })
    }
    /// The GID table with entry types.
    pub fn gid_table(&self) -> Vec<(Gid, GidType)> {
        self.shared.gids.iter().map(|g| (*g, GidType::RoceV2)).collect()
    }
    /// The index of the GID of the device's own IP address ([`Device::ip`]): the source GID
    /// to use unless there is a reason to pick another (what the tools default to).
    pub fn default_gid_index(&self) -> GidIndex {
        self.gid_index_for(self.shared.ip).unwrap_or(GidIndex::LINK_LOCAL)
    }
    /// The index of the GID of local address `ip`, if the device serves it.
    ///
    /// ```no_run
    /// # use softroce::prelude::*;
    /// let dev = Device::open(DeviceConfig::new("127.0.0.1"))?;
    /// let index = dev.gid_index_for("127.0.0.1".parse()?).expect("the device's own address");
    /// assert_eq!(index, dev.default_gid_index());
    /// assert_eq!(dev.gid(index)?, Gid::from_ip(dev.ip()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// An address listed twice (a device without a link-local address has its own address at
    /// index 0 and 1) gives its entry past index 0: the index it would have without the copy.
    pub fn gid_index_for(&self, ip: IpAddr) -> Option<GidIndex> {
        let g = Gid::from_ip(ip);
        let gids = &self.shared.gids;
        let i = gids
            .iter()
            .skip(1)
            .position(|x| *x == g)
            .map(|i| i + 1)
            .or_else(|| gids.iter().position(|x| *x == g))?;
        u8::try_from(i).ok().map(GidIndex::new)
    }
    /// Every local address the device sends from and receives on (the first is
    /// [`Device::ip`]; the raw backend opened on an interface serves all of its addresses).
    pub fn addresses(&self) -> &[IpAddr] {
        &self.shared.addresses
    }
    /// Whether the device sends from and receives on local address `ip`.
    pub fn serves(&self, ip: IpAddr) -> bool {
        self.shared.addresses.contains(&ip)
    }
    /// The GID of the device's own IP address: what a peer sends to.
    pub fn own_gid(&self) -> Gid {
        Gid::from_ip(self.shared.ip)
    }
    /// The bytes the kernel holds for this device's receive socket before it drops packets
    /// (`rcvd_socket_drops`), where the backend has one: softroce asks for 32 MiB, an
    /// unprivileged process gets at most twice `net.core.rmem_max`.
    pub fn socket_receive_buffer(&self) -> Option<usize> {
        self.shared.recv_buffer
    }
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<super::ProtectionDomain> {
        let n = self.shared.pd_count.fetch_add(1, Ordering::Relaxed);
        if n >= self.shared.attr.max_pd {
            self.shared.pd_count.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Limit { what: "max_pd", max: self.shared.attr.max_pd as u64 });
        }
        Ok(super::ProtectionDomain {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            device: self.clone(),
        })
    }
    /// The next asynchronous event, if any (`ibv_get_async_event`).
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        self.shared.events.pop()
    }

    /// Hands every asynchronous event from now on to `hook`, as it is raised, instead of
    /// queueing it for [`Device::poll_async_event`] (events already queued stay there). The
    /// hook runs on the engine's thread: it must be quick, must not block, and must not call
    /// into this device (deliver the event to a queue, a pipe, a channel). For a program
    /// that waits for events without calling anything else meanwhile (an `ibv_asyncwatch`
    /// thread): with the queue alone, nothing would wake it.
    pub fn on_async_event(&self, hook: impl Fn(AsyncEvent) + Send + Sync + 'static) {
        *self.shared.event_hook.write() = Some(Arc::new(hook));
    }
    /// Counters summed over every QP, past and present, plus the receive path's own.
    pub fn counters(&self) -> Result<DeviceCounters> {
        self.shared.combine_engines(|idx| self.shared.call_on(idx, Command::Counters))
    }

    /// Waits until no packet has arrived for `quiet`, or `limit` has passed; returns whether
    /// the device went quiet.
    ///
    /// Call it before a program ends whose peer may still be retransmitting. When the last
    /// acknowledgement of a conversation is lost (or, as seen once with kernel rxe, received
    /// and not acted on), the peer resends the message after its ACK timeout; a device that
    /// still exists acknowledges the duplicate, one that is gone leaves the peer retrying until
    /// `retry_cnt` runs out, which kernel rxe never does with `retry_cnt` 7. Like TCP's
    /// TIME-WAIT, but bounded by `limit`.
    pub fn wait_quiet(&self, quiet: std::time::Duration, limit: std::time::Duration) -> Result<bool> {
        let received = |c: &DeviceCounters| {
            c.qp.rcvd_pkts + c.rcvd_icrc_err + c.rcvd_malformed + c.rcvd_unknown_qp + c.rcvd_bad_source
        };
        let start = std::time::Instant::now();
        let mut last = received(&self.counters()?);
        let mut since = start;
        let step =
            (quiet / 8).clamp(std::time::Duration::from_millis(1), std::time::Duration::from_millis(20));
        loop {
            if since.elapsed() >= quiet {
                return Ok(true);
            }
            if start.elapsed() >= limit {
                return Ok(false);
            }
            std::thread::sleep(step);
            let now = received(&self.counters()?);
            if now != last {
                last = now;
                since = std::time::Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn veth() -> Iface {
        Iface {
            name: "veth0".into(),
            index: 7,
            loopback: false,
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            ips: vec![ip("10.0.0.1"), ip("fe80::5054:ff:fe12:3456"), ip("fd00::1"), ip("10.0.0.9")],
            mtu: 1500,
        }
    }

    fn served(address: &str, backend: BackendKind, iface: &Iface) -> Vec<IpAddr> {
        let cfg = DeviceConfig::new(address).with_backend(backend);
        let own = address.parse().unwrap_or(ip("10.0.0.1"));
        served_ips(&cfg, iface, own)
    }

    #[test]
    fn an_interface_device_serves_its_link_local_address_as_gid_0() {
        let ll = ip("fe80::5054:ff:fe12:3456");
        // UDP: the IPv4 address and the link-local one.
        let udp = served("veth0", BackendKind::Udp, &veth());
        assert_eq!(udp, vec![ip("10.0.0.1"), ll]);
        assert_eq!(gid_table(&udp), vec![Gid::from_ip(ll), Gid::from_ip(ip("10.0.0.1"))]);
        // Raw: every address, the link-local one at 0 only (rxe's table for an EUI-64
        // link-local address).
        let raw = served("veth0", BackendKind::Raw, &veth());
        assert_eq!(raw, vec![ip("10.0.0.1"), ip("10.0.0.9"), ip("fd00::1"), ll]);
        let gids: Vec<IpAddr> = gid_table(&raw).iter().map(|g| g.to_ip()).collect();
        assert_eq!(gids, vec![ll, ip("10.0.0.1"), ip("10.0.0.9"), ip("fd00::1")]);
    }

    #[test]
    fn a_device_without_a_link_local_address_lists_its_own_at_0_and_1() {
        let own = Gid::from_ip(ip("10.0.0.1"));
        // Opened on one address (any backend), or on an interface without IPv6.
        for backend in [BackendKind::Udp, BackendKind::Raw] {
            let one = served("10.0.0.1", backend, &veth());
            assert_eq!(one, vec![ip("10.0.0.1")]);
            assert_eq!(gid_table(&one), vec![own, own]);
        }
        let mut v4_only = veth();
        v4_only.ips.retain(|a| a.is_ipv4());
        assert_eq!(gid_table(&served("veth0", BackendKind::Udp, &v4_only)), vec![own, own]);
        // Loopback.
        let lo = Gid::from_ip(ip("127.0.0.7"));
        assert_eq!(gid_table(&[ip("127.0.0.7")]), vec![lo, lo]);
        // A device on a link-local address: that address, once.
        assert_eq!(gid_table(&[ip("fe80::1")]), vec![Gid::from_ip(ip("fe80::1"))]);
    }

    #[test]
    fn gid_0_prefers_the_eui64_link_local_address() {
        // A stable-privacy link-local address first, the EUI-64 one (rxe's default GID) too.
        let mut i = veth();
        i.ips = vec![ip("10.0.0.1"), ip("fe80::1234:5678:9abc:def0"), ip("fe80::5054:ff:fe12:3456")];
        assert_eq!(link_local_of(&i), Some(ip("fe80::5054:ff:fe12:3456")));
        let raw = served("veth0", BackendKind::Raw, &i);
        assert_eq!(gid_table(&raw)[0], Gid::from_ip(ip("fe80::5054:ff:fe12:3456")));
        // Only a stable-privacy one: that one.
        i.ips.pop();
        assert_eq!(link_local_of(&i), Some(ip("fe80::1234:5678:9abc:def0")));
    }

    #[test]
    fn addresses_that_failed_duplicate_detection_are_found() {
        let text = "\
fe80000000000000505400fffe123456 07 40 20 80    veth0
fe800000000000000000000000000001 07 40 20 c8    veth0
fd000000000000000000000000000001 07 40 00 48    veth0
00000000000000000000000000000001 01 80 10 80       lo
";
        assert_eq!(dad_failed(text), vec![(7, ip("fe80::1")), (7, ip("fd00::1"))]);
        assert_eq!(dad_failed("garbage\n\n1 2"), vec![]);
    }
}
