//! What the RDMA CM shares across a process: the open devices it can use (every
//! [`Device::open`] registers its device), the rule that picks one for an address, the device
//! opener used when none serves it, the per-device default protection domain (librdmacm's
//! `id->pd`), and the ports bound in each port space.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use super::error::{Error, Result};
use crate::verbs::device::WeakDevice;
use crate::verbs::{Device, DeviceConfig, ProtectionDomain};
use crate::wire::cma::PortSpace;

/// Opens a device for a local address when no open device serves it.
pub type DeviceOpener = dyn Fn(IpAddr) -> crate::verbs::Result<Device> + Send + Sync;

static OPENER: RwLock<Option<Arc<DeviceOpener>>> = RwLock::new(None);

/// Every open device, in the order they were opened.
pub fn devices() -> Vec<Device> {
    Device::open_devices()
}

/// Sets how the RDMA CM opens a device for a local address no open device serves (for
/// example with the raw backend, or through a C library's device table). The default opens a
/// UDP device on the address ([`DeviceConfig::new`]); on a loopback address already taken by
/// another process it tries 127.0.0.1 … 127.0.0.64.
pub fn set_device_opener(opener: Option<Arc<DeviceOpener>>) {
    *OPENER.write() = opener;
}

/// The open device that serves local address `ip`, if any (the most recently opened).
pub fn device_serving(ip: IpAddr) -> Option<Device> {
    devices().into_iter().rev().find(|d| d.shared.addresses.contains(&ip))
}

fn open(ip: IpAddr) -> Result<Device> {
    let opener = OPENER.read().clone();
    let r = match &opener {
        Some(f) => f(ip),
        None => Device::open(DeviceConfig::new(ip.to_string())),
    };
    r.map_err(|e| Error::AddrNotAvailable { addr: ip, why: e.to_string() })
}

/// The device for local address `ip`: an open one that serves it, else a new one.
pub(crate) fn device_for_local(ip: IpAddr) -> Result<Device> {
    if let Some(d) = device_serving(ip) {
        return Ok(d);
    }
    open(ip)
}

/// The local address the kernel's routing would send from towards `dst` (nothing is sent).
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let bind: IpAddr =
        if dst.is_ipv4() { [0, 0, 0, 0].into() } else { std::net::Ipv6Addr::UNSPECIFIED.into() };
    let s = std::net::UdpSocket::bind((bind, 0)).ok()?;
    s.connect((dst, 4791)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// The device and source address an active id uses towards `dst` without an explicit source
/// (`rdma_resolve_addr` with no source: the route's source address and the device that owns
/// it). In order: an open device serving the route's source address; for a loopback
/// destination, an open device on a loopback address; an open device serving `dst` itself
/// (a connection within one device); a device opened on the route's source address (on
/// loopback, the first of 127.0.0.1 … 127.0.0.64 that can be opened).
pub(crate) fn device_towards(dst: IpAddr) -> Result<(Device, IpAddr)> {
    let src = route_source(dst);
    let devs = devices();
    if let Some(s) = src
        && let Some(d) = devs.iter().rev().find(|d| d.shared.addresses.contains(&s))
    {
        return Ok((d.clone(), s));
    }
    if dst.is_loopback()
        && let Some((d, a)) = devs.iter().rev().find_map(|d| {
            d.shared
                .addresses
                .iter()
                .find(|a| a.is_loopback() && a.is_ipv4() == dst.is_ipv4())
                .map(|a| (d, *a))
        })
    {
        return Ok((d.clone(), a));
    }
    if let Some(d) = devs.iter().rev().find(|d| d.shared.addresses.contains(&dst)) {
        return Ok((d.clone(), dst));
    }
    let Some(s) = src else {
        return Err(Error::NoRoute(dst));
    };
    match open(s) {
        Ok(d) => Ok((d, s)),
        Err(e) if s.is_loopback() && s.is_ipv4() => {
            for i in 1..=64u8 {
                let a = IpAddr::from([127, 0, 0, i]);
                if a != s
                    && a != dst
                    && let Ok(d) = open(a)
                {
                    return Ok((d, a));
                }
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// The devices a wildcard listener on `family` listens on: every open device with an
/// address of the family (`any_family`: every open device).
pub(crate) fn devices_for_wildcard(v4: bool, any_family: bool) -> Vec<Device> {
    devices()
        .into_iter()
        .filter(|d| any_family || d.shared.addresses.iter().any(|a| a.is_ipv4() == v4))
        .collect()
}

static PDS: Mutex<Vec<(WeakDevice, Weak<ProtectionDomain>)>> = Mutex::new(Vec::new());

/// The device's default protection domain, shared by the ids on it (librdmacm allocates one
/// per device and gives it to every id: `id->pd`).
pub(crate) fn default_pd(dev: &Device) -> Result<Arc<ProtectionDomain>> {
    let mut pds = PDS.lock();
    pds.retain(|(d, p)| d.is_alive() && p.strong_count() > 0);
    if let Some(pd) = pds.iter().find(|(d, _)| d.is(dev)).and_then(|(_, p)| p.upgrade()) {
        return Ok(pd);
    }
    let pd = Arc::new(dev.alloc_pd()?);
    pds.push((dev.downgrade(), Arc::downgrade(&pd)));
    Ok(pd)
}

/// A port bound in a port space (`rdma_bind_addr`); released when dropped.
#[derive(Debug)]
pub(crate) struct PortBinding {
    ps: PortSpace,
    addr: SocketAddr,
    id: u64,
    /// The port's claim among the processes of the network namespace (see [`claim`]).
    _claim: Option<socket2::Socket>,
}

impl PortBinding {
    /// The bound address and port.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

struct Bound {
    ip: IpAddr,
    id: u64,
    reuse: bool,
}

/// The ids bound to each (port space, port).
type PortTable = HashMap<(PortSpace, u16), Vec<Bound>>;

static PORTS: Mutex<Option<PortTable>> = Mutex::new(None);

/// The kernel's default ephemeral range (`ip_local_port_range`).
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// The binding of the port that a bind to `ip` conflicts with (the kernel's `cma_check_port`:
/// a wildcard on either side, or the same address; unless both ids reuse addresses).
fn conflict(list: &[Bound], ip: IpAddr, reuse: bool) -> Option<&Bound> {
    list.iter().find(|b| {
        let overlap = b.ip.is_unspecified() || ip.is_unspecified() || b.ip == ip;
        overlap && !(reuse && b.reuse)
    })
}

fn conflicts(list: &[Bound], ip: IpAddr, reuse: bool) -> bool {
    conflict(list, ip, reuse).is_some()
}

/// Binds `addr` in `ps` for id `id` (port 0: a free ephemeral port).
pub(crate) fn bind_port(ps: PortSpace, addr: SocketAddr, id: u64, reuse: bool) -> Result<PortBinding> {
    let mut g = PORTS.lock();
    let map = g.get_or_insert_with(HashMap::new);
    if addr.port() != 0 {
        if let Some(b) = map.get(&(ps, addr.port())).and_then(|l| conflict(l, addr.ip(), reuse)) {
            return Err(taken(addr, b.ip.is_unspecified()));
        }
        let claim = match if reuse { Claim::Unclaimed } else { claim(ps, addr.ip(), addr.port())? } {
            Claim::Taken { wildcard } => return Err(taken(addr, wildcard)),
            Claim::Got(c) => Some(c),
            Claim::Unclaimed => None,
        };
        map.entry((ps, addr.port())).or_default().push(Bound { ip: addr.ip(), id, reuse });
        return Ok(PortBinding { ps, addr, id, _claim: claim });
    }
    let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
    let start = (crate::engine::random::u32() % span) as u16;
    for p in (0..span as u16).map(|i| EPHEMERAL.start() + (start + i) % span as u16) {
        if map.get(&(ps, p)).is_some_and(|l| conflicts(l, addr.ip(), false)) {
            continue;
        }
        let Claim::Got(c) = claim(ps, addr.ip(), p)? else { continue };
        map.entry((ps, p)).or_default().push(Bound { ip: addr.ip(), id, reuse });
        return Ok(PortBinding { ps, addr: SocketAddr::new(addr.ip(), p), id, _claim: Some(c) });
    }
    Err(Error::NoFreePort)
}

/// Claims `port` of `ps` on `ip` among the processes of the network namespace, as the kernel's
/// one port space per namespace would refuse a port another process holds: an abstract unix
/// name per (port space, port, address), `any` for the wildcard, bound while the binding lives
/// (released by the kernel when the process dies). A specific address conflicts with the
/// wildcard and itself; the wildcard with any address. Ports bound with reuse
/// (`RDMA_OPTION_ID_REUSEADDR`) are not claimed across processes.
fn claim(ps: PortSpace, ip: IpAddr, port: u16) -> Result<Claim> {
    use crate::engine::share::unix;
    let base = format!("\0softroce/v1/cm/{}/{port}/", ps as u16);
    let name = |what: &str| format!("{base}{what}").into_bytes();
    let io = |e: std::io::Error| Error::AddrNotAvailable { addr: ip, why: format!("port claim: {e}") };
    let _lock = unix::NameLock::acquire(&name("lock"), std::time::Duration::from_secs(5)).map_err(io)?;
    let held = |what: &str| match unix::bind(socket2::Type::DGRAM, &name(what)) {
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(true),
        Err(e) => Err(io(e)),
    };
    if ip.is_unspecified() {
        // Any address of the port claimed by another process?
        let prefix = format!("@softroce/v1/cm/{}/{port}/", ps as u16);
        let others = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        if others.lines().any(|l| {
            l.split_whitespace().last().is_some_and(|n| n.starts_with(&prefix) && !n.ends_with("/lock"))
        }) {
            return Ok(Claim::Taken { wildcard: true });
        }
    } else if held("any")? {
        return Ok(Claim::Taken { wildcard: true });
    }
    let what = if ip.is_unspecified() { "any".to_string() } else { ip.to_string() };
    match unix::bind(socket2::Type::DGRAM, &name(&what)) {
        Ok(s) => Ok(Claim::Got(s)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            Ok(Claim::Taken { wildcard: ip.is_unspecified() })
        }
        Err(e) => Err(io(e)),
    }
}

/// What [`claim`] found.
enum Claim {
    /// The port is this process's on the address while the socket lives.
    Got(socket2::Socket),
    /// Another process holds it; `wildcard`: the wildcard was on one side.
    Taken { wildcard: bool },
    /// Not claimed across processes (bound with reuse).
    Unclaimed,
}

/// The error for a port taken at `addr`: as the kernel, a wildcard on either side is
/// EADDRNOTAVAIL, the same address EADDRINUSE.
fn taken(addr: SocketAddr, wildcard: bool) -> Error {
    if wildcard || addr.ip().is_unspecified() { Error::PortTaken(addr) } else { Error::AddrInUse(addr) }
}

impl Drop for PortBinding {
    fn drop(&mut self) {
        let mut g = PORTS.lock();
        if let Some(map) = g.as_mut()
            && let Some(list) = map.get_mut(&(self.ps, self.addr.port()))
        {
            list.retain(|b| b.id != self.id);
            if list.is_empty() {
                map.remove(&(self.ps, self.addr.port()));
            }
        }
    }
}
