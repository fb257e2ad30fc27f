//! The process's softroce runtime: the device list, and one [`DevRt`] (device runtime: the
//! softroce [`Device`] and its engine thread) per listed device, shared by every context
//! opened on it.
//!
//! # Which devices
//!
//! `SOFTROCE_DEVICES`, read once at the first `ibv_get_device_list` of the process, is a
//! comma-separated list of local IP addresses or interface names, each optionally followed by
//! `:raw` (the AF_PACKET backend, needs `CAP_NET_RAW`; the default is the unprivileged UDP
//! backend). Entry *n* is device `softroce<n>`. An entry that names no local address or
//! interface is left out with a warning on stderr (the others keep their numbers, so a
//! missing `softroce1` is visible rather than renumbering `softroce2`). Set but empty: no
//! devices.
//!
//! Unset: one UDP device per network interface that is up and has an IPv4 or a non-link-local
//! IPv6 address, in interface-index order — so the loopback interface is `softroce0` on
//! every Linux host.
//!
//! # The loopback device picks its address per process
//!
//! A UDP device owns `<address>:4791`, so two processes on one host need two addresses. A
//! device that names the loopback *interface* (`lo`: the default list, or `lo` in
//! `SOFTROCE_DEVICES`) takes, when the process first opens it, the first of 127.0.0.1 …
//! 127.0.0.64 whose port 4791 is free, and holds that port until its engine starts. So two
//! unmodified programs on one host get 127.0.0.1 and 127.0.0.2 with no configuration, and
//! exchange those addresses as their GIDs. An explicit address (`SOFTROCE_DEVICES=127.0.0.5`)
//! is used as given.
//!
//! # When the engine starts
//!
//! Opening a context binds nothing: `ibv_open_device` only queries what the device is (its
//! GIDs, port and limits), so `ibv_devinfo` works beside a running program. The engine thread
//! and the socket start at the first [`DevRt::device`] call — the first PD, CQ, … — and stop
//! when the last context of the device is closed and the last object is gone.
//!
//! # Contexts opened and closed from many threads
//!
//! Any interleaving of `ibv_open_device`/`ibv_close_device` from any number of threads works.
//! A context opened while the previous runtime's engine still runs (objects of the closed
//! contexts hold it) adopts that engine, on its address. And the last holder of an engine
//! closes its socket as it drops it, on its own thread: a context opened in that moment
//! finds the port still taken, so a device that had an engine in this process retries the bind
//! until that engine is gone ([`ENGINE_GONE_WAIT`]) rather than failing with `EADDRINUSE`.
//!
//! # fork
//!
//! After `fork()` the child has none of the parent's threads. A [`DevRt`] remembers the pid
//! that made it; `ibv_open_device` in a child makes a fresh runtime for the child (with its own
//! engine), and the parent's runtime is never dropped in the child (its engine thread does not
//! exist there to be joined). Objects the parent created must not be used in the child, as
//! with the real library.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use softroce::verbs::device::{DeviceInfo, WeakDevice};
use softroce::verbs::{BackendKind, Device, DeviceConfig};

use crate::ffi::*;
use crate::util::{Errno, copy_cstr};

/// The directory prefix of every softroce device's `ibdev_path` (the sysfs files under it are served by `sysfs.rs`).
pub const IBDEV_PATH_PREFIX: &str = "/sys/class/infiniband";

/// How many loopback addresses a `lo` device tries (127.0.0.1 …).
pub const LOOPBACK_CANDIDATES: u8 = 64;

/// How long starting an engine retries a taken port when this process's own previous engine of
/// the device may still be closing its socket (see the module docs).
pub const ENGINE_GONE_WAIT: Duration = Duration::from_secs(2);

/// One configured device, before it is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// An IP address or interface name (what `DeviceConfig::new` takes).
    pub address: String,
    /// `:raw` was given.
    pub raw: bool,
}

/// Parses `SOFTROCE_DEVICES`: comma-separated, blanks ignored, `:raw` suffix; IPv6 addresses
/// may be written bare or in brackets (`::1`, `[::1]:raw`).
pub fn parse_devices(s: &str) -> Vec<DeviceSpec> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (addr, raw) = match e.strip_suffix(":raw") {
                Some(a) if !a.is_empty() => (a, true),
                _ => (e, false),
            };
            let addr = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
            DeviceSpec { address: addr.to_string(), raw }
        })
        .collect()
}

/// The default list: every interface that is up and has an IPv4 or non-link-local IPv6
/// address, in interface-index order, each a UDP device named by its interface.
pub fn default_devices() -> Vec<DeviceSpec> {
    let mut ifaces = pnet::datalink::interfaces();
    ifaces.sort_by_key(|i| i.index);
    ifaces
        .into_iter()
        .filter(|i| {
            i.is_up()
                && i.ips.iter().any(|n| match n.ip() {
                    IpAddr::V4(_) => true,
                    IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
                })
        })
        .map(|i| DeviceSpec { address: i.name, raw: false })
        .collect()
}

/// True if `address` is the name of a loopback interface.
fn is_loopback_interface(address: &str) -> bool {
    address.parse::<IpAddr>().is_err()
        && pnet::datalink::interfaces().iter().any(|i| i.name == address && i.is_loopback())
}

/// A listed device: the `ibv_device` applications hold, and what it stands for.
///
/// `repr(C)` with the `ibv_device` first, so the pointer handed out is the pointer to this.
/// Devices live for the whole process (applications and librdmacm keep `ibv_device *`).
#[repr(C)]
pub struct SrDevice {
    /// What applications see.
    pub ibv: ibv_device,
    /// Position in the list: the `n` of `softroce<n>`, and `ibv_get_device_index`.
    pub index: usize,
    /// The configuration entry.
    pub spec: DeviceSpec,
    /// `softroce<n>`.
    pub name: String,
    /// The device's node GUID (host order).
    pub guid: u64,
    /// A loopback-interface device that picks its address per process.
    pub auto_loopback: bool,
    runtime: Mutex<Weak<DevRt>>,
    /// The engine this process last started for the device, and the pid that started it.
    last_engine: Mutex<Option<(WeakDevice, u32)>>,
}

impl SrDevice {
    /// The device of list entry `index`, or why the entry names no usable device.
    fn new(index: usize, spec: DeviceSpec) -> Result<SrDevice, String> {
        let name = format!("softroce{index}");
        let auto_loopback = !spec.raw && is_loopback_interface(&spec.address);
        let guid = DeviceInfo::query(&config(&spec, &spec.address, &name))
            .map_err(|e| e.to_string())?
            .attr
            .node_guid;
        // SAFETY: ibv_device is plain C data (integers, byte arrays, NULL function pointers):
        // all-zero is a valid value.
        let mut ibv: ibv_device = unsafe { std::mem::zeroed() };
        ibv.node_type = IBV_NODE_CA;
        ibv.transport_type = IBV_TRANSPORT_IB;
        copy_cstr(&mut ibv.name, &name);
        copy_cstr(&mut ibv.dev_name, &format!("uverbs{index}"));
        copy_cstr(&mut ibv.dev_path, &format!("/sys/class/infiniband_verbs/uverbs{index}"));
        copy_cstr(&mut ibv.ibdev_path, &format!("{IBDEV_PATH_PREFIX}/{name}"));
        Ok(SrDevice {
            ibv,
            index,
            spec,
            name,
            guid,
            auto_loopback,
            runtime: Mutex::new(Weak::new()),
            last_engine: Mutex::new(None),
        })
    }

    /// The engine this process last started for the device, if it still runs (objects of a
    /// closed context hold it).
    fn live_engine(&self) -> Option<Device> {
        let g = self.last_engine.lock();
        g.as_ref().filter(|(_, pid)| *pid == std::process::id()).and_then(|(w, _)| w.upgrade())
    }

    /// Whether this process started an engine for the device before (which may be closing).
    fn had_engine(&self) -> bool {
        self.last_engine.lock().as_ref().is_some_and(|(_, pid)| *pid == std::process::id())
    }

    /// The `ibv_device *` applications hold.
    pub fn as_ibv(&'static self) -> *mut ibv_device {
        &self.ibv as *const ibv_device as *mut ibv_device
    }

    /// The runtime of this device in this process, if one exists (nothing is made).
    pub fn current_runtime(&self) -> Option<Arc<DevRt>> {
        self.runtime.lock().upgrade().filter(|rt| rt.pid == std::process::id())
    }

    /// The runtime of this device in this process, made on first use (see the module docs).
    pub fn runtime(&'static self) -> Result<Arc<DevRt>, Errno> {
        let mut slot = self.runtime.lock();
        let pid = std::process::id();
        if let Some(rt) = slot.upgrade() {
            if rt.pid == pid {
                return Ok(rt);
            }
            // A runtime the parent made before fork(): never drop it here.
            std::mem::forget(rt);
        }
        let rt = Arc::new(match self.live_engine() {
            Some(d) => DevRt::adopt(self, d)?,
            None => DevRt::new(self, None)?,
        });
        *slot = Arc::downgrade(&rt);
        Ok(rt)
    }

    /// The runtime of this device in this process; if none exists yet and this is a loopback
    /// device, made on loopback address `ip` exactly (librdmacm binding to 127.x.y.z: the
    /// loopback device takes that address rather than the first free one).
    pub fn runtime_on(&'static self, ip: IpAddr) -> Result<Arc<DevRt>, Errno> {
        let mut slot = self.runtime.lock();
        let pid = std::process::id();
        if let Some(rt) = slot.upgrade() {
            if rt.pid == pid {
                return Ok(rt);
            }
            std::mem::forget(rt);
        }
        let at = (self.auto_loopback && ip.is_loopback()).then_some(ip);
        let rt = Arc::new(match self.live_engine() {
            Some(d) => DevRt::adopt(self, d)?,
            None => DevRt::new(self, at)?,
        });
        *slot = Arc::downgrade(&rt);
        Ok(rt)
    }
}

fn config(spec: &DeviceSpec, address: &str, name: &str) -> DeviceConfig {
    let mut cfg = DeviceConfig::new(address);
    if spec.raw {
        cfg = cfg.with_backend(BackendKind::Raw);
    }
    cfg.name = Some(name.to_string());
    cfg
}

/// With `RUST_LOG` set (e.g. `RUST_LOG=softroce::faults=debug` for the faults
/// `SOFTROCE_FAULTS` injects, `RUST_LOG=softroce=debug` for the whole story, as the `softroce`
/// tools log), softroce's `tracing` events go to stderr; otherwise nothing is logged.
fn init_logging() {
    if let Ok(filter) = std::env::var("RUST_LOG")
        && !filter.trim().is_empty()
    {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
    }
}

/// Prints a one-line warning on stderr, as the real library does for configuration problems.
pub fn warn(msg: &str) {
    eprintln!("libibverbs (softroce): {msg}");
}

static DEVICES: OnceLock<Vec<&'static SrDevice>> = OnceLock::new();

/// The device list of this process (built once, from `SOFTROCE_DEVICES` or the default).
pub fn devices() -> &'static [&'static SrDevice] {
    DEVICES.get_or_init(|| {
        init_logging();
        flush_at_exit();
        let specs = match std::env::var("SOFTROCE_DEVICES") {
            Ok(s) => parse_devices(&s),
            Err(_) => default_devices(),
        };
        specs
            .into_iter()
            .enumerate()
            .filter_map(|(i, spec)| match SrDevice::new(i, spec.clone()) {
                Ok(d) => Some(&*Box::leak(Box::new(d))),
                Err(why) => {
                    warn(&format!("SOFTROCE_DEVICES entry {:?} (softroce{i}) left out: {why}", spec.address));
                    None
                }
            })
            .collect()
    })
}

/// Registers the process's `exit` handler that sends what the devices' engines hold back for
/// a moment ([`Device::flush`]): an application may exit the moment it sees the last
/// message's receive completion, before the ACK held for its next packet leaves. Called once,
/// as the device list is made.
fn flush_at_exit() {
    extern "C" fn flush_all() {
        for d in DEVICES.get().map(|v| v.as_slice()).unwrap_or_default() {
            if let Some(dev) = d.live_engine() {
                dev.flush();
            }
        }
    }
    // SAFETY: `flush_all` is an `extern "C"` function without arguments, as `atexit` takes;
    // it only reads this library's statics, which live until the process ends.
    if unsafe { libc::atexit(flush_all) } != 0 {
        warn("atexit refused the exit handler");
    }
}

/// The listed device behind an `ibv_device *`, if it is one of ours (compared by address,
/// never dereferenced).
pub fn device_from_ibv(p: *const ibv_device) -> Option<&'static SrDevice> {
    if p.is_null() {
        return None;
    }
    devices().iter().copied().find(|d| std::ptr::eq(&d.ibv, p))
}

/// A device's runtime in this process: what it is, and (once started) its engine.
pub struct DevRt {
    /// The listed device.
    pub dev: &'static SrDevice,
    /// The configuration the engine opens.
    pub cfg: DeviceConfig,
    /// What the device is: address, GID table, port and limits (fixed for its lifetime).
    pub info: DeviceInfo,
    /// The pid that made it (see the module docs on fork).
    pub pid: u32,
    /// A loopback device's claim on its port until the engine binds it.
    reservation: Mutex<Option<UdpSocket>>,
    engine: Mutex<Option<Device>>,
}

impl DevRt {
    fn new(dev: &'static SrDevice, at: Option<IpAddr>) -> Result<DevRt, Errno> {
        // A malformed fault SPEC is refused here, when the application opens the device
        // (`ibv_open_device` fails with EINVAL), not later at its first object.
        if let Some(Err(e)) = softroce::faults::default_spec().map(|s| softroce::faults::FaultSpec::parse(&s))
        {
            warn(&format!("{}: SOFTROCE_FAULTS refused: {e}", dev.name));
            return Err(libc::EINVAL);
        }
        let (address, reservation, claimed) = if dev.auto_loopback {
            let (ip, sock) = match at {
                Some(ip) => {
                    let s = UdpSocket::bind((ip, softroce::verbs::device::ROCE_PORT)).map_err(|e| {
                        warn(&format!("{ip}: UDP port {} is taken: {e}", softroce::verbs::device::ROCE_PORT));
                        libc::EADDRINUSE
                    })?;
                    CLAIMED.lock().push(ip);
                    (ip, s)
                }
                None => claim_loopback()?,
            };
            (ip.to_string(), Some(sock), Some(ip))
        } else {
            (dev.spec.address.clone(), None, None)
        };
        let cfg = config(&dev.spec, &address, &dev.name);
        let info = DeviceInfo::query(&cfg).map_err(|e| {
            warn(&format!("{}: {e}", dev.name));
            if let Some(ip) = claimed {
                release_loopback(ip);
            }
            crate::util::errno_of(&e)
        })?;
        Ok(DevRt {
            dev,
            cfg,
            info,
            pid: std::process::id(),
            reservation: Mutex::new(reservation),
            engine: Mutex::new(None),
        })
    }

    /// A runtime for an engine of the device that still runs (see the module docs), on its
    /// address.
    fn adopt(dev: &'static SrDevice, d: Device) -> Result<DevRt, Errno> {
        let ip = d.ip();
        let address = if dev.auto_loopback { ip.to_string() } else { dev.spec.address.clone() };
        let cfg = config(&dev.spec, &address, &dev.name);
        let info = DeviceInfo::query(&cfg).map_err(|e| {
            warn(&format!("{}: {e}", dev.name));
            crate::util::errno_of(&e)
        })?;
        if dev.auto_loopback {
            CLAIMED.lock().push(ip);
        }
        Ok(DevRt {
            dev,
            cfg,
            info,
            pid: std::process::id(),
            reservation: Mutex::new(None),
            engine: Mutex::new(Some(d)),
        })
    }

    /// The softroce device, its engine started on first call (binding the port). Errors are
    /// also printed once per failed start on stderr, since applications only print the errno.
    pub fn device(&self) -> Result<Device, Errno> {
        let mut engine = self.engine.lock();
        if let Some(d) = &*engine {
            return Ok(d.clone());
        }
        drop(self.reservation.lock().take());
        let t0 = Instant::now();
        loop {
            // The previous runtime's engine, still running on this address: adopt it.
            if let Some(d) = self.dev.live_engine().filter(|d| d.ip() == self.info.ip) {
                *engine = Some(d.clone());
                return Ok(d);
            }
            match Device::open(self.cfg.clone()) {
                Ok(d) => {
                    crate::events::hook(self.dev.as_ibv() as usize, &d);
                    *self.dev.last_engine.lock() = Some((d.downgrade(), std::process::id()));
                    *engine = Some(d.clone());
                    return Ok(d);
                }
                // This process's previous engine may be closing its socket on another thread.
                Err(e)
                    if crate::util::errno_of(&e) == libc::EADDRINUSE
                        && self.dev.had_engine()
                        && t0.elapsed() < ENGINE_GONE_WAIT =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => {
                    warn(&format!("{}: {e}", self.dev.name));
                    return Err(crate::util::errno_of(&e));
                }
            }
        }
    }

    /// The engine, if it has started.
    pub fn started(&self) -> Option<Device> {
        self.engine.lock().clone()
    }
}

impl Drop for DevRt {
    fn drop(&mut self) {
        if self.dev.auto_loopback {
            release_loopback(self.info.ip);
        }
    }
}

/// Loopback addresses this process's devices have claimed. A device gives up its claim's
/// socket just before its engine binds the port, and another device of the same process
/// claiming in that moment must not take the address (it would, by the socket alone).
static CLAIMED: Mutex<Vec<IpAddr>> = Mutex::new(Vec::new());

/// The first loopback address whose RoCE port is free and that no device of this process has
/// claimed, and a socket holding it; the address stays claimed until [`release_loopback`].
fn claim_loopback() -> Result<(IpAddr, UdpSocket), Errno> {
    let mut claimed = CLAIMED.lock();
    for n in 1..=LOOPBACK_CANDIDATES {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, n));
        if claimed.contains(&ip) {
            continue;
        }
        if let Ok(s) = UdpSocket::bind((ip, softroce::verbs::device::ROCE_PORT)) {
            claimed.push(ip);
            return Ok((ip, s));
        }
    }
    warn(&format!(
        "no free loopback address: UDP port {} is taken on 127.0.0.1 to 127.0.0.{LOOPBACK_CANDIDATES}",
        softroce::verbs::device::ROCE_PORT
    ));
    Err(libc::EADDRINUSE)
}

/// Gives back a claim of [`claim_loopback`].
fn release_loopback(ip: IpAddr) {
    CLAIMED.lock().retain(|c| *c != ip);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_device_list() {
        let d = |a: &str, raw| DeviceSpec { address: a.into(), raw };
        assert_eq!(
            parse_devices("127.0.0.1, eth0:raw,,::1,[fe80::1]:raw, 10.0.0.1:raw "),
            vec![
                d("127.0.0.1", false),
                d("eth0", true),
                d("::1", false),
                d("fe80::1", true),
                d("10.0.0.1", true)
            ]
        );
        assert_eq!(parse_devices(""), vec![]);
        assert_eq!(parse_devices(":raw"), vec![d(":raw", false)]);
    }

    #[test]
    fn default_list_has_loopback_first() {
        let list = default_devices();
        let lo = pnet::datalink::interfaces().into_iter().find(|i| i.is_loopback());
        if let Some(lo) = lo {
            assert_eq!(list.first().map(|s| s.address.as_str()), Some(lo.name.as_str()), "{list:?}");
            assert!(is_loopback_interface(&lo.name));
        }
        assert!(!is_loopback_interface("127.0.0.1"));
    }

    #[test]
    fn a_claim_holds_while_its_device_moves_from_the_claim_to_the_engine() {
        // A device gives its claim's socket up just before its engine binds the port: a claim
        // by another device of the process in that moment must not take the address (a
        // parallel test did, and the first device's engine then failed to bind).
        let (ip, held) = claim_loopback().unwrap();
        drop(held);
        let (ip2, _held2) = claim_loopback().unwrap();
        assert_ne!(ip, ip2);
        release_loopback(ip);
        release_loopback(ip2);
    }

    #[test]
    fn loopback_claims_skip_taken_ports() {
        let (ip, held) = claim_loopback().unwrap();
        assert!(ip.is_loopback());
        // The port stays claimed while the socket lives: the next claim moves on.
        let (ip2, _) = claim_loopback().unwrap();
        assert_ne!(ip, ip2);
        drop(held);
    }

    /// A device of its own (not in the process's list), leaked like listed ones.
    fn device(spec: &str) -> &'static SrDevice {
        Box::leak(Box::new(SrDevice::new(9, parse_devices(spec).remove(0)).unwrap()))
    }

    #[test]
    fn the_engine_starts_on_first_use_and_is_shared() {
        // A fresh address per process, so parallel runs do not share a port.
        let ip = format!("127.77.{}.{}", std::process::id() % 250, std::process::id() / 250 % 250 + 1);
        let dev = device(&ip);
        assert!(!dev.auto_loopback);
        let rt = dev.runtime().unwrap();
        assert!(rt.started().is_none(), "opening binds nothing");
        assert!(std::net::UdpSocket::bind((ip.as_str(), softroce::verbs::device::ROCE_PORT)).is_ok());
        let d = rt.device().unwrap();
        assert_eq!(d.ip().to_string(), ip);
        assert_eq!(d.name(), "softroce9");
        assert!(std::net::UdpSocket::bind((ip.as_str(), softroce::verbs::device::ROCE_PORT)).is_err());
        // Every context of the device shares the runtime and its engine.
        let rt2 = dev.runtime().unwrap();
        assert!(Arc::ptr_eq(&rt, &rt2));
        assert_eq!(rt2.started().unwrap().ip(), d.ip());
        assert!(dev.current_runtime().is_some());
        drop((rt, rt2, d));
        assert!(dev.current_runtime().is_none(), "the last context gone, the runtime goes");
    }

    #[test]
    fn a_loopback_device_binds_the_address_it_claimed() {
        let lo = pnet::datalink::interfaces().into_iter().find(|i| i.is_loopback()).unwrap();
        let dev = device(&lo.name);
        assert!(dev.auto_loopback);
        let rt = dev.runtime().unwrap();
        let ip = rt.info.ip;
        assert!(matches!(ip, IpAddr::V4(v4) if v4.octets()[..3] == [127, 0, 0]), "{ip}");
        assert_eq!(rt.cfg.address, ip.to_string());
        // Claimed at open, bound by the engine later: nobody else gets it in between.
        assert!(UdpSocket::bind((ip, softroce::verbs::device::ROCE_PORT)).is_err());
        assert_eq!(rt.device().unwrap().ip(), ip);
    }
}
