//! librdmacm, inside libibverbs: the functions softroce's `librdmacm.so.1` forwards to
//! (exported here as `softroce_<name>@SOFTROCE_PRIVATE_1`, see [`crate::private`]).
//!
//! They live in this library because they need its objects: the id's `verbs` context, its
//! `pd`, `qp`, CQs and completion channels are ordinary objects of this libibverbs (the
//! `<rdma/rdma_verbs.h>` inlines call `ibv_post_send`, `ibv_get_cq_event`, … through them),
//! and the connection logic is softroce's RDMA CM ([`softroce::verbs::cm`]) on the devices of
//! this library's runtime — one device table and one engine per device for both libraries.
//!
//! # Objects
//!
//! * An event channel is an `Obj<rdma_event_channel, Chan>` holding a softroce
//!   [`EventChannel`]; its `fd` is the channel's descriptor, readable while an event waits
//!   (so `poll`, `O_NONBLOCK` + `EAGAIN` work as with the kernel's `rdma_cm` file).
//! * An id is an `Obj<rdma_cm_id, Id>` holding a softroce [`CmId`]. After each call (and
//!   before an event about it is handed out) its C fields — `verbs`, the addresses, `port_num`
//!   — are refreshed from the Rust id.
//! * An event is an `Obj<rdma_cm_event, Event>` holding the softroce event (acknowledged when
//!   `rdma_ack_cm_event` drops it) and the private data the C event points to.
//!
//! # Devices
//!
//! The RDMA CM opens devices through this library's device table
//! ([`softroce::verbs::cm::registry::set_device_opener`]): binding to an address starts the
//! listed device that serves it (the loopback device takes that very 127.x.y.z address), and
//! a wildcard listener or a route lookup starts every listed device — with the kernel, every
//! RDMA device is always up. Each device gets one context for the process's lifetime
//! (`id->verbs`, `rdma_get_devices`), and one default PD (`id->pd` when the application gives
//! none), as librdmacm's own.

pub mod ffi;
mod rsocket;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use libc::{c_char, c_int, c_void, sockaddr};
use parking_lot::{Condvar, Mutex};
use softroce::verbs::Device;
use softroce::verbs::cm::{CmEvent, CmId, ConnParam, EventChannel, EventParam, PortSpace};

use crate::ffi::*;
use crate::object::Obj;
use crate::qp::qp_of;
use crate::runtime::{SrDevice, devices};
use crate::util::{Errno, guard, set_errno, zero_or_minus1};
use ffi::*;

pub use rsocket::*;

const CHAN_MAGIC: u64 = 0x736f_6674_636d_6368;
const ID_MAGIC: u64 = 0x736f_6674_636d_6964;
const EVENT_MAGIC: u64 = 0x736f_6674_636d_6576;

const IBV_QPT_RC: u32 = 2;
const IBV_QPT_UD: u32 = 4;

/// The Rust side of an event channel.
pub struct Chan {
    ch: EventChannel,
    /// Threads inside a blocking `rdma_get_cm_event` on this channel.
    waiters: std::sync::atomic::AtomicUsize,
    /// Set by `rdma_destroy_event_channel` while threads wait: they then block for good, as a
    /// thread blocked in the kernel's `rdma_get_cm_event` does when another thread destroys
    /// the channel (rping's server does that at exit), and the object is never freed under them.
    destroyed: std::sync::atomic::AtomicBool,
}

/// The Rust side of an id.
pub struct Id {
    st: Mutex<IdSt>,
    /// Events handed out about this id and not yet acknowledged.
    unacked: Mutex<u32>,
    acked: Condvar,
}

impl Id {
    /// Waits until every event handed out about the id has been acknowledged.
    fn wait_acked(&self) {
        let mut n = self.unacked.lock();
        while *n > 0 {
            self.acked.wait(&mut n);
        }
    }
}

/// A channel argument: `None` for NULL, `EINVAL` for a pointer that is not a channel of ours.
///
/// # Safety
/// `channel` is NULL or an `rdma_event_channel *`.
unsafe fn channel_arg<'a>(channel: *mut rdma_event_channel) -> Result<Option<&'a ChanObj>, Errno> {
    if channel.is_null() {
        return Ok(None);
    }
    // SAFETY: per the caller.
    unsafe { ChanObj::from_c(channel, CHAN_MAGIC) }.map(Some).ok_or(libc::EINVAL)
}

struct IdSt {
    cm: Option<CmId>,
    /// `rdma_create_qp` made the CQs and their channels (destroyed with the QP).
    owns_cqs: bool,
    /// `rdma_create_ep` on a passive id: the QP every new connection gets.
    ep_attr: Option<(ibv_qp_init_attr, *mut ibv_pd)>,
    /// A synchronous id's own channel (`id->channel`, as librdmacm gives one), destroyed with
    /// the id or when it migrates to an application's channel.
    own_channel: *mut rdma_event_channel,
}

/// The C channel of a synchronous id: the channel its events go to, as an object of ours.
fn own_channel_of(cm: &CmId) -> *mut rdma_event_channel {
    let ch = cm.event_channel();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&ch);
    Obj::into_c(
        rdma_event_channel { fd },
        CHAN_MAGIC,
        Chan { ch, waiters: Default::default(), destroyed: Default::default() },
    )
}

/// Destroys a synchronous id's own channel (NULL: nothing).
fn drop_own_channel(ch: *mut rdma_event_channel) {
    // SAFETY: a channel own_channel_of made; nobody else holds it.
    drop(unsafe { ChanObj::take(ch, CHAN_MAGIC) });
}

/// The Rust side of an event.
pub struct Event {
    ev: Option<CmEvent>,
    private_data: Vec<u8>,
    /// The id whose count of unacknowledged events this event is in.
    counted: *mut rdma_cm_id,
}

type ChanObj = Obj<rdma_event_channel, Chan>;
type IdObj = Obj<rdma_cm_id, Id>;
type EventObj = Obj<rdma_cm_event, Event>;

/// The ids alive, by their Rust serial number (to find an event's id).
static IDS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

fn register_id(serial: u64, p: *mut rdma_cm_id) {
    IDS.lock().get_or_insert_with(HashMap::new).insert(serial, p as usize);
}

/// # Safety
/// `p` is NULL or an `rdma_cm_id *`.
unsafe fn id_of<'a>(p: *const rdma_cm_id) -> Option<&'a IdObj> {
    // SAFETY: per the caller; every id of ours is an IdObj.
    unsafe { Obj::from_c(p, ID_MAGIC) }
}

fn cm_errno(e: &softroce::verbs::cm::Error) -> Errno {
    e.errno()
}

// ---------------------------------------------------------------------------------------
// Devices and contexts
// ---------------------------------------------------------------------------------------

/// One context per listed device, for the process's lifetime (`id->verbs`).
static CONTEXTS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
/// One default PD per context.
static PDS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The shared context of a listed device (opened once).
fn context_of(sr: &'static SrDevice) -> Result<*mut ibv_context, Errno> {
    let mut g = CONTEXTS.lock();
    if let Some((_, c)) = g.iter().find(|(i, _)| *i == sr.index) {
        return Ok(*c as *mut ibv_context);
    }
    // SAFETY: a device of our list.
    let c = unsafe { crate::context::ibv_open_device(sr.as_ibv()) };
    if c.is_null() {
        return Err(crate::util::errno());
    }
    g.push((sr.index, c as usize));
    Ok(c)
}

/// The listed device a softroce device (of this runtime) is.
fn listed(dev: &Device) -> Option<&'static SrDevice> {
    devices()
        .iter()
        .copied()
        .find(|sr| sr.current_runtime().and_then(|rt| rt.started()).is_some_and(|d| d.same(dev)))
}

/// The context for a softroce device of this runtime.
fn context_for(dev: &Device) -> Result<*mut ibv_context, Errno> {
    context_of(listed(dev).ok_or(libc::ENODEV)?)
}

/// The default PD of a context (librdmacm's per-device PD).
fn default_pd(ctx: *mut ibv_context) -> Result<*mut ibv_pd, Errno> {
    let mut g = PDS.lock();
    if let Some((_, p)) = g.iter().find(|(c, _)| *c == ctx as usize) {
        return Ok(*p as *mut ibv_pd);
    }
    // SAFETY: a context of ours.
    let p = unsafe { crate::pd::ibv_alloc_pd(ctx) };
    if p.is_null() {
        return Err(crate::util::errno());
    }
    g.push((ctx as usize, p as usize));
    Ok(p)
}

fn io_err(e: Errno) -> softroce::verbs::Error {
    softroce::verbs::Error::Io(std::io::Error::from_raw_os_error(e))
}

/// Starts a listed device (its context held for the process) and returns its engine.
fn start(sr: &'static SrDevice, at: Option<IpAddr>) -> Result<Device, Errno> {
    let rt = match at {
        Some(ip) => sr.runtime_on(ip)?,
        None => sr.runtime()?,
    };
    context_of(sr)?;
    rt.device()
}

/// The RDMA CM's device opener: the listed device serving local address `ip`.
fn open_for(ip: IpAddr) -> softroce::verbs::Result<Device> {
    for &sr in devices() {
        if let Some(rt) = sr.current_runtime() {
            if rt.info.addresses.contains(&ip) {
                return start(sr, None).map_err(io_err);
            }
            continue;
        }
        let loopback_any = sr.auto_loopback && matches!(ip, IpAddr::V4(v4) if v4.is_loopback());
        if loopback_any {
            return start(sr, Some(ip)).map_err(io_err);
        }
        // A fixed address or interface: whether it serves `ip` is known once it is made.
        let Ok(rt) = sr.runtime() else { continue };
        if rt.info.addresses.contains(&ip) {
            return start(sr, None).map_err(io_err);
        }
    }
    Err(softroce::verbs::Error::NoSuchAddress(ip))
}

/// Starts every listed device (errors are left to the device's own warning).
fn start_all() {
    for &sr in devices() {
        let _ = start(sr, None);
    }
}

fn init() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        softroce::verbs::cm::registry::set_device_opener(Some(Arc::new(open_for)));
        softroce::rsocket::set_device_starter(Some(Arc::new(start_all)));
        if let Some(h) = ExitHelper::start() {
            let _ = EXIT_HELPER.set(h);
            // SAFETY: registers a function with no arguments that stays in the library (which
            // is never unloaded: it is the process's libibverbs).
            unsafe { libc::atexit(disconnect_at_exit) };
        }
    });
}

/// How long `exit` waits at most for the exit-time disconnects (see [`disconnect_at_exit`]).
const EXIT_WAIT_MS: c_int = 1000;

/// The thread that disconnects at `exit` on the exiting thread's behalf: `wake` (an eventfd)
/// starts it, it writes `done` when finished.
struct ExitHelper {
    wake: c_int,
    done: c_int,
    /// The process that started it (a child of `fork` has no such thread).
    pid: u32,
}

static EXIT_HELPER: OnceLock<ExitHelper> = OnceLock::new();

impl ExitHelper {
    /// Starts the helper thread (`None` if the descriptors or the thread cannot be made: the
    /// process then exits without disconnecting, as a killed one does).
    fn start() -> Option<ExitHelper> {
        // SAFETY: eventfd has no memory preconditions.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        // SAFETY: as above.
        let done = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        let close = |fd: c_int| {
            if fd >= 0 {
                // SAFETY: a descriptor this function made.
                unsafe { libc::close(fd) };
            }
        };
        if wake < 0 || done < 0 {
            close(wake);
            close(done);
            return None;
        }
        let spawned = std::thread::Builder::new().name("softroce-cm-exit".into()).spawn(move || {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a local from the eventfd this thread owns.
            while unsafe { libc::read(wake, (&raw mut v).cast(), 8) } != 8 {}
            disconnect_all();
            let one = 1u64;
            // SAFETY: writes 8 bytes from a local to the eventfd.
            unsafe { libc::write(done, (&raw const one).cast(), 8) };
        });
        if spawned.is_err() {
            close(wake);
            close(done);
            return None;
        }
        Some(ExitHelper { wake, done, pid: std::process::id() })
    }
}

/// At `exit`: every connection an id still holds is disconnected (a DREQ, or the DREP to the
/// peer's DREQ), as the kernel does when a process's `rdma_cm` descriptor closes — the peer
/// learns at once that the process is gone instead of when its QP next times out. (A killed
/// process sends nothing: there is no kernel to do it for us.)
///
/// Exit must never block: `exit` may run on a thread that holds anything the library takes —
/// a signal handler that calls `exit` can interrupt a thread inside `ibv_poll_cq` holding the
/// engine's progress lock, inside `malloc`, or inside an `rdma_*` call holding an id's lock. So
/// this handler takes no lock and allocates nothing: it wakes the helper thread, which does the
/// work, and waits for it at most [`EXIT_WAIT_MS`] (if what the helper needs is held by the
/// exiting thread, the process exits without the disconnects, as a killed one does).
extern "C" fn disconnect_at_exit() {
    let Some(h) = EXIT_HELPER.get() else { return };
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } as u32 != h.pid {
        return;
    }
    let one = 1u64;
    // SAFETY: writes 8 bytes from a local to the helper's eventfd.
    if unsafe { libc::write(h.wake, (&raw const one).cast(), 8) } != 8 {
        return;
    }
    let mut p = libc::pollfd { fd: h.done, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd on the stack.
    unsafe { libc::poll(&mut p, 1, EXIT_WAIT_MS) };
}

/// The helper thread's work at exit ([`disconnect_at_exit`]): each id that holds a connection
/// disconnects it, then one round trip through each engine so that the MADs have been handed
/// to the socket before the process goes. Best effort: an id another thread holds is left alone.
fn disconnect_all() {
    let _ = std::panic::catch_unwind(|| {
        // Held throughout: rdma_destroy_id cannot free an id under us.
        let Some(ids) = IDS.try_lock_for(Duration::from_millis(100)) else { return };
        let mut devices: Vec<softroce::verbs::Device> = Vec::new();
        for p in ids.iter().flat_map(|m| m.values()) {
            // SAFETY: registered ids are live until rdma_destroy_id removes them (it needs IDS).
            let Some(o) = (unsafe { id_of(*p as *const rdma_cm_id) }) else { continue };
            let Some(mut st) = o.rust.st.try_lock() else { continue };
            let Some(cm) = st.cm.as_mut() else { continue };
            use softroce::verbs::cm::CmIdState as S;
            if matches!(cm.state(), S::Connect | S::Established | S::Disconnect)
                && cm.disconnect().is_ok()
                && let Some(d) = cm.device()
            {
                devices.push(d.clone());
            }
        }
        for d in devices {
            let _ = d.counters();
        }
    });
}

// ---------------------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------------------

/// A `sockaddr` (AF_INET or AF_INET6) as a Rust address.
///
/// # Safety
/// `p` is NULL or points to a sockaddr as large as its family says.
unsafe fn sockaddr_to(p: *const sockaddr) -> Result<Option<SocketAddr>, Errno> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: per the caller.
    match unsafe { (*p).sa_family } as c_int {
        libc::AF_INET => {
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let s = unsafe { &*p.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(s.sin_port)))))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
            let s = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            ))))
        }
        // (librdmacm's `ucma_addrlen` is 0 for any other family: EINVAL)
        _ => Err(libc::EINVAL),
    }
}

/// Writes `a` into a `sockaddr_storage`; its length.
fn write_sockaddr(dst: &mut libc::sockaddr_storage, a: Option<SocketAddr>) -> libc::socklen_t {
    // SAFETY: sockaddr_storage is plain data: all-zero is valid.
    *dst = unsafe { std::mem::zeroed() };
    match a {
        None => 0,
        Some(SocketAddr::V4(v4)) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let s = unsafe { &mut *(dst as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        Some(SocketAddr::V6(v6)) => {
            // SAFETY: as above, for a sockaddr_in6.
            let s = unsafe { &mut *(dst as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

fn gid_of(ip: Option<SocketAddr>) -> ibv_gid {
    ibv_gid { raw: ip.map_or([0; 16], |a| softroce::wire::cma::ip_to_gid(a.ip())) }
}

/// Copies the Rust id's state into its C fields (`verbs`, `pd`, addresses, GIDs, port, the
/// route's path record, QP state), as librdmacm's queries after each call fill them.
fn refresh(c: *mut rdma_cm_id, cm: &CmId) {
    let verbs = cm.device().and_then(|d| context_for(d).ok()).unwrap_or(std::ptr::null_mut());
    let (src, dst) = (cm.src_addr(), cm.dst_addr());
    // A bound id's destination is the zero address of its family (the kernel's).
    let dst = dst.or(src.map(|s| SocketAddr::new(unspecified(s.ip()), 0)));
    // SAFETY: `c` is a live id of ours; the application does not write these fields.
    unsafe {
        (*c).verbs = verbs;
        (*c).port_num = u8::from(!verbs.is_null());
        if !verbs.is_null()
            && (*c).pd.is_null()
            && let Ok(pd) = default_pd(verbs)
        {
            // librdmacm's per-device PD, `id->pd` once the id has a device.
            (*c).pd = pd;
        }
        write_sockaddr(&mut (*c).route.addr.src_storage, src);
        write_sockaddr(&mut (*c).route.addr.dst_storage, dst);
        (*c).route.addr.ibaddr.sgid = gid_of(src);
        (*c).route.addr.ibaddr.dgid = gid_of(dst);
        (*c).route.addr.ibaddr.pkey = 0;
        if let Some(p) = cm.route_path() {
            set_path_record(c, &p);
        }
        sync_qp_state(c, cm);
    }
}

/// The unspecified address of `ip`'s family.
fn unspecified(ip: IpAddr) -> IpAddr {
    if ip.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() }
}

/// `id->route.path_rec` (one path, `num_paths` 1) from the resolved route, as librdmacm fills
/// it from the kernel's route (`cma_resolve_iboe_route`: the selectors "exactly", reversible).
/// Freed with the id.
///
/// # Safety
/// `c` is a live id of ours.
unsafe fn set_path_record(c: *mut rdma_cm_id, p: &softroce::transport::cm::CmPathRecord) {
    use crate::kern::ibv_sa_path_rec;
    const IB_SA_EQ: u8 = 2;
    // SAFETY: per the caller.
    let mut rec = unsafe { (*c).route.path_rec }.cast::<ibv_sa_path_rec>();
    if rec.is_null() {
        // SAFETY: calloc of one path record (freed by rdma_destroy_id).
        rec = unsafe { libc::calloc(1, std::mem::size_of::<ibv_sa_path_rec>()) }.cast();
        if rec.is_null() {
            return;
        }
    }
    let r = ibv_sa_path_rec {
        dgid: ibv_gid { raw: p.remote_gid },
        sgid: ibv_gid { raw: p.local_gid },
        dlid: 0,
        slid: 0,
        raw_traffic: 0,
        flow_label: p.flow_label.to_be(),
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        reversible: 1,
        numb_path: 0,
        pkey: p.pkey.to_be(),
        sl: p.sl,
        mtu_selector: IB_SA_EQ,
        mtu: p.mtu,
        rate_selector: IB_SA_EQ,
        rate: p.rate,
        packet_life_time_selector: IB_SA_EQ,
        packet_life_time: p.packet_life_time,
        preference: 0,
    };
    // SAFETY: `rec` is a path record of ours; `c` per the caller.
    unsafe {
        rec.write(r);
        (*c).route.path_rec = rec.cast();
        (*c).route.num_paths = 1;
    }
}

/// The C QP's `state` field, from the softroce QP's.
///
/// # Safety
/// `c` is a live id of ours.
unsafe fn sync_qp_state(c: *mut rdma_cm_id, cm: &CmId) {
    // SAFETY: per the caller.
    let qp = unsafe { (*c).qp };
    if let (Some(q), false) = (cm.qp(), qp.is_null()) {
        // SAFETY: the id's QP is a live QP of ours.
        unsafe { (*qp).state = crate::qp::ibv_state(q.state()) };
    }
}

// ---------------------------------------------------------------------------------------
// Event channels
// ---------------------------------------------------------------------------------------

/// `rdma_create_event_channel`: NULL + errno on failure.
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    crate::util::ptr_or_errno(|| {
        init();
        let ch = EventChannel::new().map_err(|e| cm_errno(&e))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&ch);
        let chan = Chan { ch, waiters: Default::default(), destroyed: Default::default() };
        Ok(Obj::into_c(rdma_event_channel { fd }, CHAN_MAGIC, chan))
    })
}

/// `rdma_destroy_event_channel`.
///
/// # Safety
/// `ch` is NULL or a channel of ours, not used again.
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    use std::sync::atomic::Ordering;
    guard((), || {
        // SAFETY: per the caller.
        let Some(o) = (unsafe { ChanObj::from_c(ch, CHAN_MAGIC) }) else { return };
        o.rust.destroyed.store(true, Ordering::SeqCst);
        if o.rust.waiters.load(Ordering::SeqCst) > 0 {
            // Threads wait in rdma_get_cm_event: they never return (see `Chan::destroyed`),
            // so the channel stays allocated, with its descriptor.
            return;
        }
        // A thread about to call rdma_get_cm_event again (rping's event thread, between
        // acknowledging the DISCONNECTED that let the main thread go on and its next call,
        // while the main thread destroys the ids, the channel, and exits) must block as the
        // waiters do, not fail with EINVAL and exit the process with an error first: the
        // last few destroyed channels stay allocated, marked destroyed, before they are freed.
        let mut retired = RETIRED_CHANNELS.lock();
        retired.push_back(ch as usize);
        if retired.len() > RETIRED_KEPT {
            let old = retired.pop_front().expect("more than RETIRED_KEPT") as *mut rdma_event_channel;
            // SAFETY: a channel destroyed long before, by this function, and not freed yet.
            drop(unsafe { ChanObj::take(old, CHAN_MAGIC) });
        }
    });
}

/// Destroyed channels kept allocated (see `rdma_destroy_event_channel`), oldest first.
static RETIRED_CHANNELS: Mutex<std::collections::VecDeque<usize>> =
    Mutex::new(std::collections::VecDeque::new());

/// How many destroyed channels stay allocated.
const RETIRED_KEPT: usize = 16;

/// Blocks the calling thread for good (a waiter on a destroyed channel).
fn block_forever() -> ! {
    loop {
        // SAFETY: pause has no preconditions; it is a cancellation point.
        unsafe { libc::pause() };
    }
}

// ---------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------

fn port_space(ps: u32) -> Result<PortSpace, Errno> {
    match ps {
        RDMA_PS_TCP => Ok(PortSpace::Tcp),
        RDMA_PS_UDP => Ok(PortSpace::Udp),
        RDMA_PS_IB => Ok(PortSpace::Ib),
        RDMA_PS_IPOIB => Ok(PortSpace::Ipoib),
        _ => Err(libc::EINVAL),
    }
}

/// Makes the C id for a Rust id.
fn new_id(cm: CmId, channel: *mut rdma_event_channel, context: *mut c_void, ps: u32) -> *mut rdma_cm_id {
    // SAFETY: rdma_cm_id holds integers and raw pointers: all-zero is valid.
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = ps;
    c.qp_type = if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB { IBV_QPT_UD } else { IBV_QPT_RC };
    let own_channel = if channel.is_null() { own_channel_of(&cm) } else { std::ptr::null_mut() };
    if !own_channel.is_null() {
        c.channel = own_channel;
    }
    let serial = cm.serial();
    let id = Id {
        st: Mutex::new(IdSt { cm: Some(cm), owns_cqs: false, ep_attr: None, own_channel }),
        unacked: Mutex::new(0),
        acked: Condvar::new(),
    };
    let p = Obj::into_c(c, ID_MAGIC, id);
    register_id(serial, p);
    // SAFETY: fresh id.
    let o = unsafe { id_of(p) }.expect("fresh id");
    if let Some(cm) = &o.rust.st.lock().cm {
        refresh(p, cm);
    }
    p
}

/// `rdma_create_id`: 0, or -1 + errno (`EINVAL` for an unknown port space or a channel not
/// ours; `EPROTONOSUPPORT` for a port space softroce lacks). Without a channel the id is
/// synchronous.
///
/// # Safety
/// `id` is writable; `channel` NULL or a channel of ours.
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    zero_or_minus1(|| {
        init();
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let psp = port_space(ps)?;
        // SAFETY: per the caller.
        let ch = unsafe { channel_arg(channel) }?;
        let cm = CmId::new(ch.map(|c| &c.rust.ch), psp).map_err(|e| cm_errno(&e))?;
        let p = new_id(cm, channel, context, ps);
        // SAFETY: per the caller.
        unsafe { *id = p };
        Ok(())
    })
}

/// Runs `f` on the id's Rust side, then refreshes its C fields.
fn with_id(id: *mut rdma_cm_id, f: impl FnOnce(&mut IdSt, &mut CmId) -> Result<(), Errno>) -> c_int {
    zero_or_minus1(|| {
        // SAFETY: the caller's id (NULL or foreign is refused by the magic).
        let o = unsafe { id_of(id) }.ok_or(libc::EINVAL)?;
        let mut st = o.rust.st.lock();
        let mut cm = st.cm.take().ok_or(libc::EINVAL)?;
        let r = f(&mut st, &mut cm);
        refresh(id, &cm);
        st.cm = Some(cm);
        r
    })
}

/// `rdma_destroy_id`: waits until every event about the id has been acknowledged, then
/// destroys it (an unanswered request is rejected, a connection disconnected).
///
/// # Safety
/// `id` is NULL or an id of ours, not used again.
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    zero_or_minus1(|| {
        // SAFETY: per the caller.
        let o = unsafe { id_of(id) }.ok_or(libc::EINVAL)?;
        // Out of the registry first, so that no event is counted against it any more (see
        // `take_event`), then the events already handed out are waited for.
        let serial = o.rust.st.lock().cm.as_ref().map(|cm| cm.serial());
        if let (Some(serial), Some(m)) = (serial, IDS.lock().as_mut()) {
            m.remove(&serial);
        }
        o.rust.wait_acked();
        let (cm, own) = {
            let mut st = o.rust.st.lock();
            if st.owns_cqs {
                // SAFETY: the id is ours and going away.
                unsafe { destroy_cqs(id) };
                st.owns_cqs = false;
            }
            (st.cm.take(), std::mem::replace(&mut st.own_channel, std::ptr::null_mut()))
        };
        drop(cm);
        drop_own_channel(own);
        // SAFETY: the id is ours and going away; its path record is ours (or NULL).
        unsafe { libc::free((*id).route.path_rec) };
        // SAFETY: per the caller.
        drop(unsafe { IdObj::take(id, ID_MAGIC) });
        Ok(())
    })
}

/// `rdma_bind_addr`.
///
/// # Safety
/// `id` is an id of ours; `addr` a readable sockaddr.
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    with_id(id, |_, cm| {
        // SAFETY: per the caller.
        let a = unsafe { sockaddr_to(addr) }?.ok_or(libc::EINVAL)?;
        if a.ip().is_loopback() {
            // As Linux: a loopback address binds to no device (`id->verbs` stays NULL) and
            // listens on all of them. The loopback device, when listed, still takes that
            // address, so that a client on this host reaches the listener there.
            let _ = open_for(a.ip());
            return cm.bind_addr_loopback_as_any(a).map_err(|e| cm_errno(&e));
        }
        cm.bind_addr(a).map_err(|e| cm_errno(&e))
    })
}

fn timeout(ms: c_int) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// `rdma_resolve_addr`: ADDR_RESOLVED follows (a synchronous id waits for it).
///
/// # Safety
/// `id` is an id of ours; `src` NULL or and `dst` readable sockaddrs.
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    with_id(id, |_, cm| {
        // SAFETY: per the caller.
        let s = unsafe { sockaddr_to(src) }?;
        // SAFETY: per the caller.
        let d = unsafe { sockaddr_to(dst) }?.ok_or(libc::EINVAL)?;
        if cm.device().is_none() && s.is_none_or(|s| s.ip().is_unspecified()) {
            start_all();
        }
        cm.resolve_addr(s, d, timeout(timeout_ms)).map_err(|e| cm_errno(&e))
    })
}

/// `rdma_resolve_route`: ROUTE_RESOLVED follows.
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    with_id(id, |_, cm| cm.resolve_route(timeout(timeout_ms)).map_err(|e| cm_errno(&e)))
}

/// `rdma_listen`: a wildcard id listens on every listed device (all started).
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    with_id(id, |_, cm| {
        if cm.device().is_none() {
            start_all();
        }
        cm.listen(backlog.max(0) as usize).map_err(|e| cm_errno(&e))
    })
}

/// Destroys the CQs and channels `rdma_create_qp` made for an id.
///
/// # Safety
/// `id` is a live id of ours whose QP is gone.
unsafe fn destroy_cqs(id: *mut rdma_cm_id) {
    // SAFETY: per the caller; each object was made by create_cqs and is ours.
    unsafe {
        let c = &mut *id;
        if !c.recv_cq.is_null() && c.recv_cq != c.send_cq {
            crate::cq::ibv_destroy_cq(c.recv_cq);
        }
        if !c.send_cq.is_null() {
            crate::cq::ibv_destroy_cq(c.send_cq);
        }
        for ch in [c.recv_cq_channel, c.send_cq_channel] {
            if !ch.is_null() {
                crate::cq::ibv_destroy_comp_channel(ch);
            }
        }
        c.recv_cq = std::ptr::null_mut();
        c.send_cq = std::ptr::null_mut();
        c.recv_cq_channel = std::ptr::null_mut();
        c.send_cq_channel = std::ptr::null_mut();
    }
}

/// Makes a completion channel and a CQ (`cq_context` = the id) for each direction, as
/// librdmacm's `ucma_create_cqs` (the `rdma_get_*_comp` inlines check both).
///
/// # Safety
/// `id` is a live id of ours.
unsafe fn create_cqs(id: *mut rdma_cm_id, ctx: *mut ibv_context, send: u32, recv: u32) -> Result<(), Errno> {
    let owner = id.cast::<c_void>();
    let mk = move |n: u32| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), Errno> {
        // SAFETY: a context of ours.
        let ch = unsafe { crate::cq::ibv_create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(crate::util::errno());
        }
        // SAFETY: as above; the channel is ours.
        let cq = unsafe { crate::cq::ibv_create_cq(ctx, n.max(1) as c_int, owner, ch, 0) };
        if cq.is_null() {
            let e = crate::util::errno();
            // SAFETY: the channel just made.
            unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
            return Err(e);
        }
        Ok((ch, cq))
    };
    let (rch, rcq) = mk(recv)?;
    // SAFETY: per the caller.
    unsafe {
        (*id).recv_cq_channel = rch;
        (*id).recv_cq = rcq;
    }
    let (sch, scq) = mk(send).inspect_err(|_| {
        // SAFETY: the objects just made.
        unsafe { destroy_cqs(id) };
    })?;
    // SAFETY: per the caller.
    unsafe {
        (*id).send_cq_channel = sch;
        (*id).send_cq = scq;
    }
    Ok(())
}

/// The body of `rdma_create_qp(_ex)`.
fn create_qp(
    id: *mut rdma_cm_id,
    st: &mut IdSt,
    cm: &mut CmId,
    x: &mut ibv_qp_init_attr_ex,
) -> Result<(), Errno> {
    let dev = cm.device().ok_or(libc::EINVAL)?.clone();
    let ctx = context_for(&dev)?;
    if x.pd.is_null() {
        x.pd = default_pd(ctx)?;
    }
    // SAFETY: the PD is the application's (or ours).
    let pd = unsafe { crate::pd::pd_of(x.pd) }.ok_or(libc::EINVAL)?;
    if pd.c.context != ctx {
        return Err(libc::EINVAL);
    }
    let made_cqs = x.send_cq.is_null() || x.recv_cq.is_null();
    if made_cqs {
        // SAFETY: the id is live (the caller holds its lock).
        unsafe { create_cqs(id, ctx, x.cap.max_send_wr, x.cap.max_recv_wr) }?;
        // SAFETY: as above.
        unsafe {
            if x.send_cq.is_null() {
                x.send_cq = (*id).send_cq;
            }
            if x.recv_cq.is_null() {
                x.recv_cq = (*id).recv_cq;
            }
        }
    }
    x.comp_mask |= 1; // IBV_QP_INIT_ATTR_PD
    // SAFETY: x is a complete ibv_qp_init_attr_ex.
    let qp = unsafe { crate::qp::create_qp_ex(ctx, x) };
    if qp.is_null() {
        let e = crate::util::errno();
        if made_cqs {
            // SAFETY: the CQs just made.
            unsafe { destroy_cqs(id) };
        }
        return Err(e);
    }
    // SAFETY: a QP just made by this library.
    let arc = unsafe { qp_of(qp) }.expect("our QP").rust.qp.clone();
    if let Err(e) = cm.attach_qp(arc) {
        // SAFETY: the QP just made; nobody else has it.
        unsafe { crate::qp::ibv_destroy_qp(qp) };
        if made_cqs {
            // SAFETY: the CQs just made.
            unsafe { destroy_cqs(id) };
        }
        return Err(cm_errno(&e));
    }
    st.owns_cqs = made_cqs;
    // SAFETY: the id is live.
    unsafe {
        (*id).qp = qp;
        (*id).pd = x.pd;
        (*id).send_cq = x.send_cq;
        (*id).recv_cq = x.recv_cq;
        (*id).srq = x.srq;
    }
    Ok(())
}

fn attr_ex(pd: *mut ibv_pd, a: &ibv_qp_init_attr) -> ibv_qp_init_attr_ex {
    // SAFETY: ibv_qp_init_attr_ex is plain data: all-zero is valid.
    let mut x: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    x.qp_context = a.qp_context;
    x.send_cq = a.send_cq;
    x.recv_cq = a.recv_cq;
    x.srq = a.srq;
    x.cap = a.cap;
    x.qp_type = a.qp_type;
    x.sq_sig_all = a.sq_sig_all;
    x.pd = pd;
    x
}

/// `rdma_create_qp`: the id's QP (on `pd`, or the device's default PD), moved to INIT; CQs
/// with their own completion channels are made when `attr` names none. -1 + `EINVAL` when
/// the id has no device yet or `pd` is of another device.
///
/// # Safety
/// `id` is an id of ours; `pd` NULL or a PD of ours; `attr` readable and writable.
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    with_id(id, |st, cm| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let a = unsafe { &mut *attr };
        let mut x = attr_ex(pd, a);
        let r = create_qp(id, st, cm, &mut x);
        // As librdmacm, which copies its extended attributes back whatever the outcome: the
        // CQs it used (or made) and the granted capacities.
        a.send_cq = x.send_cq;
        a.recv_cq = x.recv_cq;
        a.srq = x.srq;
        a.cap = x.cap;
        r
    })
}

/// `rdma_create_qp_ex`.
///
/// # Safety
/// `id` is an id of ours; `attr` readable and writable.
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
    with_id(id, |st, cm| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let x = unsafe { &mut *attr };
        // librdmacm works on the caller's attributes themselves (PD, CQs, capacities).
        create_qp(id, st, cm, x)
    })
}

/// `rdma_destroy_qp`: destroys the id's QP (and the CQs `rdma_create_qp` made for it).
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    with_id(id, |st, cm| {
        cm.detach_qp();
        // SAFETY: the id is live.
        unsafe {
            let qp = (*id).qp;
            if !qp.is_null() {
                crate::qp::ibv_destroy_qp(qp);
                (*id).qp = std::ptr::null_mut();
            }
            if st.owns_cqs {
                destroy_cqs(id);
                st.owns_cqs = false;
            }
        }
        Ok(())
    });
}

/// A C `rdma_conn_param` as the Rust one.
///
/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn conn_param(p: *const rdma_conn_param) -> Option<ConnParam> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the caller.
    let c = unsafe { &*p };
    let pd = if c.private_data.is_null() || c.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: per the caller.
        unsafe { std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len)) }
            .to_vec()
    };
    Some(ConnParam {
        private_data: pd,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: c.flow_control != 0,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq != 0,
        qp_num: c.qp_num,
    })
}

/// librdmacm's `ucma_valid_param`, for ids in the TCP port space: a connection needs the id's
/// QP or parameters (naming the QP), and the responder resources and initiator depth asked
/// for (but for the "maximum" 255) are at most the device's `max_qp_rd_atom` and
/// `max_qp_init_rd_atom`; else `EINVAL`.
///
/// # Safety
/// `id` is a live id of ours.
unsafe fn valid_param(id: *mut rdma_cm_id, p: Option<&ConnParam>) -> Result<(), Errno> {
    // SAFETY: per the caller.
    let (ps, qp, verbs) = unsafe { ((*id).ps, (*id).qp, (*id).verbs) };
    if ps != RDMA_PS_TCP {
        return Ok(());
    }
    let Some(p) = p else { return if qp.is_null() { Err(libc::EINVAL) } else { Ok(()) } };
    // SAFETY: the id's context is one of ours (or NULL).
    let Some(ctx) = (unsafe { crate::context::Context::from_ibv(verbs) }) else { return Ok(()) };
    let a = crate::device::device_attr(&ctx.rt);
    let max_resp = a.max_qp_rd_atom.clamp(0, 255) as u8;
    let max_init = a.max_qp_init_rd_atom.clamp(0, 255) as u8;
    if (p.responder_resources != u8::MAX && p.responder_resources > max_resp)
        || (p.initiator_depth != u8::MAX && p.initiator_depth > max_init)
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `rdma_connect`: ESTABLISHED, REJECTED or UNREACHABLE follows (a synchronous id waits: -1
/// + `ECONNREFUSED` when rejected).
///
/// # Safety
/// `id` is an id of ours; `param` NULL or readable.
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    with_id(id, |_, cm| {
        // SAFETY: per the caller.
        let p = unsafe { conn_param(param) };
        // SAFETY: the id is live (with_id holds it).
        unsafe { valid_param(id, p.as_ref()) }?;
        cm.connect(p.as_ref()).map_err(|e| cm_errno(&e))
    })
}

/// `rdma_accept`.
///
/// # Safety
/// `id` is an id of ours; `param` NULL or readable.
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    with_id(id, |_, cm| {
        // SAFETY: per the caller.
        let p = unsafe { conn_param(param) };
        // SAFETY: the id is live (with_id holds it).
        unsafe { valid_param(id, p.as_ref()) }?;
        cm.accept(p.as_ref()).map_err(|e| cm_errno(&e))
    })
}

/// `rdma_reject`: the peer gets REJECTED, status 28, with this private data.
///
/// # Safety
/// `id` is an id of ours; `data` NULL or `len` readable bytes.
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    with_id(id, |_, cm| {
        let pd = if data.is_null() {
            &[][..]
        } else {
            // SAFETY: per the caller.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }
        };
        cm.reject(pd).map_err(|e| cm_errno(&e))
    })
}

/// `rdma_reject_ece`: as `rdma_reject` (softroce negotiates no ECE).
///
/// # Safety
/// As `rdma_reject`.
pub unsafe extern "C" fn rdma_reject_ece(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: per the caller.
    unsafe { rdma_reject(id, data, len) }
}

/// `rdma_disconnect`: the QP to ERR, then the DREQ; both sides get DISCONNECTED.
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    with_id(id, |_, cm| cm.disconnect().map_err(|e| cm_errno(&e)))
}

/// `rdma_establish`.
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    with_id(id, |_, cm| cm.establish().map_err(|e| cm_errno(&e)))
}

/// `rdma_notify`: `IBV_EVENT_COMM_EST` establishes the connection (the passive QP received
/// before the RTU; `EISCONN` if it is already); every other event, and an id without a
/// connection, is `EINVAL`, as the kernel's `ib_cm_notify`.
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    const IBV_EVENT_COMM_EST: c_int = 5;
    with_id(id, |_, cm| {
        if event != IBV_EVENT_COMM_EST {
            return Err(libc::EINVAL);
        }
        cm.notify_established().map_err(|e| cm_errno(&e))
    })
}

/// `rdma_get_request`: on a synchronous listener, waits for a connection request and returns
/// its new id (with the QP of `rdma_create_ep`'s attributes, if the listener was made so).
///
/// # Safety
/// `listen` is an id of ours; `id` writable.
pub unsafe extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    zero_or_minus1(|| {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let o = unsafe { id_of(listen) }.ok_or(libc::EINVAL)?;
        let (new, ep) = {
            let st = o.rust.st.lock();
            let cm = st.cm.as_ref().ok_or(libc::EINVAL)?;
            if !cm.is_sync() {
                return Err(libc::EINVAL);
            }
            (cm.get_request().map_err(|e| cm_errno(&e))?, st.ep_attr)
        };
        // SAFETY: the listener is live.
        let (context, ps) = unsafe { ((*listen).context, (*listen).ps) };
        let p = new_id(new, std::ptr::null_mut(), context, ps);
        if let Some((mut a, pd)) = ep {
            let r = with_id(p, |st, cm| {
                let mut x = attr_ex(pd, &a);
                create_qp(p, st, cm, &mut x)?;
                a.cap = x.cap;
                Ok(())
            });
            if r != 0 {
                let e = crate::util::errno();
                // SAFETY: the id just made.
                unsafe { rdma_destroy_id(p) };
                return Err(e);
            }
        }
        // SAFETY: per the caller.
        unsafe { *id = p };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// Takes one event off a channel and turns it into the C event; `None` if none was pending
/// (or it concerned an id already destroyed, which is then dropped).
fn take_event(chp: *mut rdma_event_channel, o: &ChanObj) -> Result<Option<*mut rdma_cm_event>, Errno> {
    let Some(mut ev) = o.rust.ch.try_get_event().map_err(|e| cm_errno(&e))? else { return Ok(None) };
    let kind = ev.event_type();
    // The ids are looked up, and the event counted against the one it will be acknowledged
    // for, under the registry's lock: `rdma_destroy_id` unregisters an id before it waits for
    // its events' acknowledgements, so an id is either found here (and its destroy waits for
    // this event) or not (and the event is dropped, as the kernel drops the events of a
    // destroyed id). Looked up and counted in two steps, an id destroyed between them by
    // another thread made this call fail with EINVAL (rping's event thread, at the end of a
    // run whose main thread destroyed the id).
    let new = ev.take_id();
    let (listen, counted) = {
        let ids = IDS.lock();
        let find = |serial: u64| ids.as_ref().and_then(|m| m.get(&serial)).map(|p| *p as *mut rdma_cm_id);
        let listen = ev.listen_id().and_then(|l| find(l.serial()));
        let counted = if new.is_some() { listen } else { find(ev.id().serial()) };
        let Some(counted) = counted else { return Ok(None) };
        // SAFETY: a registered id is live (it leaves the registry before it is freed).
        let co = unsafe { id_of(counted) }.ok_or(libc::EINVAL)?;
        *co.rust.unacked.lock() += 1;
        (listen, counted)
    };
    let id = if let Some(new) = new {
        // SAFETY: the listener is live: its destroy waits for this event's acknowledgement.
        let (context, ps) = unsafe { ((*counted).context, (*counted).ps) };
        new_id(new, chp, context, ps)
    } else {
        counted
    };
    // SAFETY: `counted` is live (above); a new id was just made.
    if let Some(io) = unsafe { id_of(id) }
        && let Some(cm) = io.rust.st.lock().cm.as_ref()
    {
        refresh(id, cm);
    }

    let private_data = ev.private_data().to_vec();
    // SAFETY: rdma_cm_event is plain data: all-zero is valid.
    let mut c: rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = id;
    c.listen_id = listen.unwrap_or(std::ptr::null_mut());
    c.event = kind as u32;
    c.status = ev.status();
    let len = private_data.len().min(255) as u8;
    match ev.param() {
        EventParam::Conn(p) => {
            c.param.conn = rdma_conn_param {
                private_data: std::ptr::null(),
                private_data_len: len,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                flow_control: u8::from(p.flow_control),
                retry_count: p.retry_count,
                rnr_retry_count: p.rnr_retry_count,
                srq: u8::from(p.srq),
                qp_num: p.qp_num,
            };
        }
        EventParam::Ud(_) if kind == softroce::verbs::cm::CmEventType::ConnectRequest => {
            // A SIDR request's event carries only its private data (the kernel's
            // `cma_ib_req_handler`): no address vector, QP number or Q_Key.
            // SAFETY: rdma_ud_param is plain data: all-zero is valid.
            c.param.ud = unsafe { std::mem::zeroed() };
            c.param.ud.private_data_len = len;
        }
        EventParam::Ud(u) => {
            // SAFETY: ibv_ah_attr is plain data: all-zero is valid.
            let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
            ah.grh.dgid = ibv_gid { raw: u.ah_attr.dgid.0 };
            ah.grh.flow_label = u.ah_attr.flow_label;
            ah.grh.sgid_index = u.ah_attr.sgid_index.value();
            ah.grh.hop_limit = u.ah_attr.hop_limit;
            ah.grh.traffic_class = u.ah_attr.traffic_class;
            ah.sl = u.ah_attr.sl;
            ah.is_global = 1;
            ah.port_num = 1;
            c.param.ud = rdma_ud_param {
                private_data: std::ptr::null(),
                private_data_len: len,
                ah_attr: ah,
                qp_num: u.qp_num,
                qkey: u.qkey.value(),
            };
        }
        EventParam::None => {}
    }
    let p = Obj::into_c(c, EVENT_MAGIC, Event { ev: Some(ev), private_data, counted });
    // SAFETY: fresh event; its private data lives in it until the acknowledgement.
    unsafe {
        let o = EventObj::from_c(p, EVENT_MAGIC).expect("fresh event");
        if !o.rust.private_data.is_empty() {
            (*p).param.conn.private_data = o.rust.private_data.as_ptr().cast();
        }
    }
    Ok(Some(p))
}

/// `rdma_get_cm_event`: the next event, waiting for one unless the channel's fd is
/// `O_NONBLOCK` (then -1 + `EAGAIN`). A CONNECT_REQUEST carries a new id.
///
/// The blocking `poll` runs in this frame, which holds nothing to drop (a `pthread_cancel`
/// while blocked unwinds through it cleanly).
///
/// # Safety
/// `channel` is a channel of ours; `event` writable.
pub unsafe extern "C-unwind" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    // SAFETY: per the caller (foreign pointers are refused by the magic).
    let Some(o) = (unsafe { ChanObj::from_c(channel, CHAN_MAGIC) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: per the caller.
    let fd = unsafe { (*channel).fd };
    use std::sync::atomic::Ordering;
    o.rust.waiters.fetch_add(1, Ordering::SeqCst);
    struct Leave<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _leave = Leave(&o.rust.waiters);
    loop {
        if o.rust.destroyed.load(Ordering::SeqCst) {
            block_forever();
        }
        match guard(Err(libc::EIO), || take_event(channel, o)) {
            Ok(Some(p)) => {
                // SAFETY: per the caller.
                unsafe { *event = p };
                return 0;
            }
            Ok(None) => {}
            Err(e) => {
                set_errno(e);
                return -1;
            }
        }
        // SAFETY: fcntl on the channel's descriptor.
        let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fl < 0 {
            return -1;
        }
        if fl & libc::O_NONBLOCK != 0 {
            if o.rust.ch.pending() > 0 {
                continue;
            }
            set_errno(libc::EAGAIN);
            return -1;
        }
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd; poll is a cancellation point.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if o.rust.destroyed.load(Ordering::SeqCst) {
            block_forever();
        }
        if n < 0 && crate::util::errno() != libc::EINTR {
            return -1;
        }
    }
}

/// `rdma_ack_cm_event`: frees the event; `rdma_destroy_id` waits for this.
///
/// # Safety
/// `event` is an event of ours, not used again.
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    zero_or_minus1(|| {
        // SAFETY: per the caller.
        let mut e = unsafe { EventObj::take(event, EVENT_MAGIC) }.ok_or(libc::EINVAL)?;
        drop(e.rust.ev.take());
        // SAFETY: an id with unacknowledged events is alive (destroy waits for them).
        if let Some(o) = unsafe { id_of(e.rust.counted) } {
            let mut n = o.rust.unacked.lock();
            *n = n.saturating_sub(1);
            o.rust.acked.notify_all();
        }
        Ok(())
    })
}

/// `rdma_event_str`.
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    let s: &'static std::ffi::CStr = match event {
        0 => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        1 => c"RDMA_CM_EVENT_ADDR_ERROR",
        2 => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        3 => c"RDMA_CM_EVENT_ROUTE_ERROR",
        4 => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        5 => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        6 => c"RDMA_CM_EVENT_CONNECT_ERROR",
        7 => c"RDMA_CM_EVENT_UNREACHABLE",
        8 => c"RDMA_CM_EVENT_REJECTED",
        9 => c"RDMA_CM_EVENT_ESTABLISHED",
        10 => c"RDMA_CM_EVENT_DISCONNECTED",
        11 => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        12 => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        13 => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        14 => c"RDMA_CM_EVENT_ADDR_CHANGE",
        15 => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

// ---------------------------------------------------------------------------------------
// Endpoints (the synchronous API)
// ---------------------------------------------------------------------------------------

/// `rdma_create_ep`: a synchronous id from `rdma_getaddrinfo`'s result — bound (passive) or
/// resolved to its destination (active) — with a QP if `attr` is given (a passive id keeps
/// the attributes for the QP of each request `rdma_get_request` returns).
///
/// # Safety
/// `id` writable; `res` an `rdma_addrinfo`; `pd` NULL or ours; `attr` NULL or readable.
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    zero_or_minus1(|| {
        if id.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let r = unsafe { &*res };
        let ps = if r.ai_port_space != 0 {
            r.ai_port_space as u32
        } else if r.ai_qp_type as u32 == IBV_QPT_UD {
            RDMA_PS_UDP
        } else {
            RDMA_PS_TCP
        };
        let qp_type = match r.ai_qp_type as u32 {
            0 if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB => IBV_QPT_UD,
            0 => IBV_QPT_RC,
            t => t,
        };
        let mut p = std::ptr::null_mut();
        // SAFETY: a local out-pointer.
        if unsafe { rdma_create_id(std::ptr::null_mut(), &mut p, std::ptr::null_mut(), ps) } != 0 {
            return Err(crate::util::errno());
        }
        let fail = |p: *mut rdma_cm_id| {
            let e = crate::util::errno();
            // SAFETY: the id just made.
            unsafe { rdma_destroy_id(p) };
            Err(e)
        };
        if r.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the id just made; the caller's address.
            if unsafe { rdma_bind_addr(p, r.ai_src_addr) } != 0 {
                return fail(p);
            }
            if !attr.is_null() {
                // SAFETY: per the caller; the id just made.
                let mut a = unsafe { *attr };
                a.qp_type = qp_type;
                let o = unsafe { id_of(p) }.expect("fresh id");
                o.rust.st.lock().ep_attr = Some((a, pd));
            }
        } else {
            // SAFETY: the id just made; the caller's addresses.
            if unsafe { rdma_resolve_addr(p, r.ai_src_addr, r.ai_dst_addr, 2000) } != 0
                // SAFETY: as above.
                || unsafe { rdma_resolve_route(p, 2000) } != 0
            {
                return fail(p);
            }
            if !attr.is_null() {
                // The QP type is the address's, as librdmacm's rdma_create_ep sets it.
                // SAFETY: per the caller.
                unsafe { (*attr).qp_type = qp_type };
            }
            // SAFETY: as above.
            if !attr.is_null() && unsafe { rdma_create_qp(p, pd, attr) } != 0 {
                return fail(p);
            }
        }
        // SAFETY: per the caller.
        unsafe { *id = p };
        Ok(())
    })
}

/// `rdma_destroy_ep`: the id's QP (and CQs), then the id.
///
/// # Safety
/// `id` is an id of ours, not used again.
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: per the caller.
    unsafe {
        if id_of(id).is_some() && !(*id).qp.is_null() {
            rdma_destroy_qp(id);
        }
        if id_of(id).is_some() && !(*id).srq.is_null() {
            rdma_destroy_srq(id);
        }
        rdma_destroy_id(id);
    }
}

/// `rdma_create_srq`: an SRQ on the id's device (in `pd` or the default PD) as `id->srq`.
///
/// # Safety
/// `id` is an id of ours; `pd` NULL or ours; `attr` readable and writable.
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    with_id(id, |_, cm| {
        let ctx = context_for(cm.device().ok_or(libc::EINVAL)?)?;
        let pd = if pd.is_null() { default_pd(ctx)? } else { pd };
        // SAFETY: per the caller.
        let srq = unsafe { crate::srq::ibv_create_srq(pd, attr) };
        if srq.is_null() {
            return Err(crate::util::errno());
        }
        // SAFETY: the id is live.
        unsafe {
            (*id).srq = srq;
            (*id).pd = pd;
        }
        Ok(())
    })
}

/// `rdma_create_srq_ex`: as `rdma_create_srq` for basic SRQs (`EOPNOTSUPP` for XRC/tag
/// matching types).
///
/// # Safety
/// `id` is an id of ours; `attr` readable and writable.
pub unsafe extern "C" fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
    zero_or_minus1(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let x = unsafe { &mut *attr };
        const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1;
        const IBV_SRQ_INIT_ATTR_PD: u32 = 2;
        if x.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && x.srq_type != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let pd = if x.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 { x.pd } else { std::ptr::null_mut() };
        let mut a = ibv_srq_init_attr { srq_context: x.srq_context, attr: x.attr };
        // SAFETY: per the caller.
        if unsafe { rdma_create_srq(id, pd, &mut a) } != 0 {
            return Err(crate::util::errno());
        }
        x.attr = a.attr;
        Ok(())
    })
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: per the caller.
        if unsafe { id_of(id) }.is_none() {
            return;
        }
        // SAFETY: the id is live; its SRQ ours.
        unsafe {
            let srq = (*id).srq;
            if !srq.is_null() {
                crate::srq::ibv_destroy_srq(srq);
                (*id).srq = std::ptr::null_mut();
            }
        }
    });
}

// ---------------------------------------------------------------------------------------
// Options, queries, devices
// ---------------------------------------------------------------------------------------

/// `rdma_set_option` (`RDMA_OPTION_ID`), with the kernel's checks (`ucma_set_option_id`):
/// `TOS` (1 byte) is the traffic class of the route resolved after it; `ACK_TIMEOUT` (1 byte)
/// the QP's local ACK timeout (`EINVAL` on a UD id); `REUSEADDR` (an `int`) is accepted on an
/// id that is idle, or — turning it on — not listening, and `AFONLY` (an `int`) on an idle or
/// bound id, else `EINVAL` (softroce's port space is per process and a bound IPv6 wildcard
/// serves IPv6 only, so neither changes how it binds). A wrong size is `EINVAL`;
/// `RDMA_OPTION_IB_PATH` and other levels `ENOSYS` (RoCE resolves its own path).
///
/// # Safety
/// `id` is an id of ours; `val` NULL or `len` readable bytes.
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: libc::size_t,
) -> c_int {
    use softroce::verbs::cm::CmIdState as S;
    with_id(id, |_, cm| {
        if val.is_null() && len > 0 {
            // (the kernel copies the option from user memory: NULL faults)
            return Err(libc::EFAULT);
        }
        let byte = || {
            // SAFETY: per the caller, `len` (checked to be 1) readable bytes.
            if len == 1 { Ok(unsafe { *val.cast::<u8>() }) } else { Err(libc::EINVAL) }
        };
        let int = || {
            if len == std::mem::size_of::<c_int>() {
                // SAFETY: per the caller, an int's worth of readable bytes.
                Ok(unsafe { val.cast::<c_int>().read_unaligned() })
            } else {
                Err(libc::EINVAL)
            }
        };
        match (level, name) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => {
                cm.set_tos(byte()?);
                Ok(())
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                let t = byte()?;
                cm.set_ack_timeout(t).map_err(|e| cm_errno(&e))
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                let on = int()? != 0;
                let st = cm.state();
                if st == S::Idle || (on && st != S::Listen) { Ok(()) } else { Err(libc::EINVAL) }
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
                int()?;
                if matches!(cm.state(), S::Idle | S::AddrBound) { Ok(()) } else { Err(libc::EINVAL) }
            }
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                // The kernel's `ucma_set_ib_path`: whole `struct ibv_path_data` entries, one of
                // them the primary bidirectional GMP path, on an id with a device; on RoCE the
                // path stands for route resolution (ROUTE_RESOLVED follows), from
                // ADDR_RESOLVED only.
                const ENTRY: usize = 72;
                const PRIMARY_GMP_BIDIRECTIONAL: u32 = 0x1 | 0x2 | 0x8 | 0x20;
                if !len.is_multiple_of(ENTRY) {
                    return Err(libc::EINVAL);
                }
                let found = (0..len / ENTRY).any(|i| {
                    // SAFETY: `len` readable bytes (whole entries); each starts with its flags.
                    let flags = unsafe { val.cast::<u8>().add(i * ENTRY).cast::<u32>().read_unaligned() };
                    flags == PRIMARY_GMP_BIDIRECTIONAL
                });
                if !found || cm.device().is_none() || cm.state() != S::AddrResolved {
                    return Err(libc::EINVAL);
                }
                cm.resolve_route(Duration::ZERO).map_err(|e| cm_errno(&e))
            }
            _ => Err(libc::ENOSYS),
        }
    })
}

/// `rdma_migrate_id`: the id's events go to `channel` from now on (NULL: the id becomes
/// synchronous); the events queued about it on its old channel move along (a listener's
/// pending requests too). As librdmacm, it then waits until every event already taken about
/// the id has been acknowledged. `EINVAL` for an id or a channel not ours.
///
/// # Safety
/// `id` is an id of ours; `channel` NULL or a channel of ours.
pub unsafe extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    zero_or_minus1(|| {
        // SAFETY: per the caller.
        let o = unsafe { id_of(id) }.ok_or(libc::EINVAL)?;
        // SAFETY: per the caller.
        let to = unsafe { channel_arg(channel) }?;
        {
            let mut st = o.rust.st.lock();
            let cm = st.cm.as_ref().ok_or(libc::EINVAL)?;
            if to.is_none() && !st.own_channel.is_null() {
                // Synchronous already: nothing moves.
                return Ok(());
            }
            cm.migrate(to.map(|c| &c.rust.ch)).map_err(|e| cm_errno(&e))?;
            // A synchronous id gets a channel of its own, as librdmacm's.
            let own = if to.is_none() { own_channel_of(cm) } else { std::ptr::null_mut() };
            drop_own_channel(std::mem::replace(&mut st.own_channel, own));
            // SAFETY: the id is live; the application does not write `channel` concurrently.
            unsafe { (*id).channel = if own.is_null() { channel } else { own } };
        }
        o.rust.wait_acked();
        Ok(())
    })
}

/// `rdma_init_qp_attr`: the attributes and mask that move a QP to `attr->qp_state`, as the
/// kernel computes them for the id's state ([`CmId::init_qp_attr`]): what programs that
/// create and move their own QP on `id->verbs` (UCX, libfabric, `rping -q`) use. Every other
/// field of `*attr` is zeroed, as librdmacm copies the kernel's answer over it. -1 + `EINVAL`
/// for an id without a device or in a state that gives none.
///
/// # Safety
/// `id` is an id of ours; `attr` and `mask` writable.
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    with_id(id, |_, cm| {
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        let raw = unsafe { (*attr).qp_state };
        let q = cm.init_qp_attr(crate::qp::state_of(raw).ok()).map_err(|e| cm_errno(&e))?;
        let (mut a, m) = crate::qp::ibv_attr_of(&q);
        if q.state.is_none() {
            // (a value that names no state is echoed, as the kernel does)
            a.qp_state = raw;
        }
        // SAFETY: per the caller.
        unsafe {
            *attr = a;
            *mask = m | 1; // IBV_QP_STATE
        }
        Ok(())
    })
}

/// `rdma_get_src_port`: the local port, network order (0 for a foreign id).
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: per the caller.
    guard(0, || unsafe { id_of(id) }.map_or(0, |o| port_of(&o.c.route.addr.src_storage)))
}

/// `rdma_get_dst_port`: the peer's port, network order.
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: per the caller.
    guard(0, || unsafe { id_of(id) }.map_or(0, |o| port_of(&o.c.route.addr.dst_storage)))
}

fn port_of(s: &libc::sockaddr_storage) -> u16 {
    let p = (s as *const libc::sockaddr_storage).cast::<u8>();
    match s.ss_family as c_int {
        // SAFETY: sin_port and sin6_port both sit at offset 2 of the storage.
        libc::AF_INET | libc::AF_INET6 => unsafe { p.add(2).cast::<u16>().read_unaligned() },
        _ => 0,
    }
}

/// `rdma_get_devices`: every listed device's context (each device started), NULL-terminated,
/// allocated with `malloc`; NULL + `ENODEV` when there is none.
///
/// # Safety
/// `num` NULL or writable.
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    crate::util::ptr_or_errno(|| {
        init();
        let ctxs: Vec<*mut ibv_context> = devices().iter().filter_map(|&sr| context_of(sr).ok()).collect();
        if !num.is_null() {
            // SAFETY: per the caller.
            unsafe { *num = ctxs.len() as c_int };
        }
        if ctxs.is_empty() {
            return Err(libc::ENODEV);
        }
        // SAFETY: malloc of ctxs.len() + 1 pointers.
        let list = unsafe { libc::malloc((ctxs.len() + 1) * std::mem::size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, c) in ctxs.iter().enumerate() {
            // SAFETY: within the allocation.
            unsafe { *list.add(i) = *c };
        }
        // SAFETY: the last slot.
        unsafe { *list.add(ctxs.len()) = std::ptr::null_mut() };
        Ok(list)
    })
}

/// `rdma_free_devices`.
///
/// # Safety
/// `list` NULL or from `rdma_get_devices`.
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: malloc'd by rdma_get_devices.
    unsafe { libc::free(list.cast()) };
}

/// `rdma_set_local_ece`: accepted (softroce negotiates no enhanced connection
/// establishment; the value is not sent).
///
/// # Safety
/// `id` is an id of ours.
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    with_id(id, |_, _| if ece.is_null() { Err(libc::EINVAL) } else { Ok(()) })
}

/// `rdma_get_remote_ece`: the peer offered none (all zero).
///
/// # Safety
/// `id` is an id of ours; `ece` writable.
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    with_id(id, |_, _| {
        if ece.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        unsafe { *ece = std::mem::zeroed() };
        Ok(())
    })
}

/// `rdma_join_multicast`: -1 + `ENOSYS` (softroce has no multicast).
pub extern "C" fn rdma_join_multicast(
    _id: *mut rdma_cm_id,
    _addr: *mut sockaddr,
    _ctx: *mut c_void,
) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// `rdma_join_multicast_ex`: -1 + `ENOSYS`.
pub extern "C" fn rdma_join_multicast_ex(
    _id: *mut rdma_cm_id,
    _attr: *mut c_void,
    _ctx: *mut c_void,
) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// `rdma_leave_multicast`: -1 + `EADDRNOTAVAIL` (no group was joined).
pub extern "C" fn rdma_leave_multicast(_id: *mut rdma_cm_id, _addr: *mut sockaddr) -> c_int {
    set_errno(libc::EADDRNOTAVAIL);
    -1
}

// ---------------------------------------------------------------------------------------
// rdma_getaddrinfo
// ---------------------------------------------------------------------------------------

/// A malloc'd copy of `len` bytes of an address (librdmacm's `ucma_copy_addr`); NULL for
/// nothing to copy.
///
/// # Safety
/// `src` is NULL or `len` readable bytes.
unsafe fn copy_addr(
    src: *const sockaddr,
    len: libc::socklen_t,
) -> Result<(*mut sockaddr, libc::socklen_t), Errno> {
    if src.is_null() || len == 0 {
        return Ok((std::ptr::null_mut(), 0));
    }
    // SAFETY: malloc of `len` bytes (freed by rdma_freeaddrinfo).
    let p = unsafe { libc::malloc(len as usize) }.cast::<sockaddr>();
    if p.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: per the caller, and the fresh allocation of the same size.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len as usize) };
    Ok((p, len))
}

/// `rdma_getaddrinfo`, as librdmacm's `addrinfo.c`. With `node` or `service`: the system
/// resolver with the hints translated (`RAI_PASSIVE` → `AI_PASSIVE`, `RAI_NUMERICHOST` →
/// `AI_NUMERICHOST`, the family, the socket type of the QP type, the protocol of the port
/// space), the first answer as the source (passive) or destination; QP type and port space
/// from the hints, else from the answer's socket type and protocol; a resolver failure is its
/// `EAI_*` code, returned as is. Without either: the hints themselves — flags, family, QP
/// type, port space and the destination address (libfabric's verbs provider asks so, with
/// `RAI_FAMILY`). Either way the hints' source address when the result has none. -1 +
/// `EINVAL` when `node`, `service` and `hints` are all NULL.
///
/// # Safety
/// `node`, `service` NULL or C strings; `hints` NULL or readable (its addresses `ai_*_len`
/// readable bytes); `res` writable.
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    enum Fail {
        Errno(Errno),
        Gai(c_int),
    }
    let r = guard(Err(Fail::Errno(libc::EIO)), || {
        init();
        if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
            return Err(Fail::Errno(libc::EINVAL));
        }
        // SAFETY: rdma_addrinfo is plain data: all-zero is valid (librdmacm's `nohints`).
        let nohints: rdma_addrinfo = unsafe { std::mem::zeroed() };
        // SAFETY: per the caller.
        let h = unsafe { hints.as_ref() }.unwrap_or(&nohints);
        // SAFETY: rdma_addrinfo is plain data: all-zero is valid.
        let mut ra: rdma_addrinfo = unsafe { std::mem::zeroed() };
        let free_on_err = |ra: &rdma_addrinfo| {
            // SAFETY: what this function malloc'd so far (or NULL).
            unsafe {
                libc::free(ra.ai_src_addr.cast());
                libc::free(ra.ai_dst_addr.cast());
                libc::free(ra.ai_src_canonname.cast());
                libc::free(ra.ai_dst_canonname.cast());
            }
        };
        if !node.is_null() || !service.is_null() {
            // SAFETY: addrinfo is plain data: all-zero is valid.
            let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
            if h.ai_flags & RAI_PASSIVE != 0 {
                ai.ai_flags = libc::AI_PASSIVE;
            }
            if h.ai_flags & RAI_NUMERICHOST != 0 {
                ai.ai_flags |= libc::AI_NUMERICHOST;
            }
            const AF_IB: c_int = 27;
            if h.ai_family != AF_IB {
                ai.ai_family = h.ai_family;
            }
            ai.ai_socktype = match h.ai_qp_type as u32 {
                2 | 3 | 9 | 10 => libc::SOCK_STREAM, // RC, UC, XRC_SEND, XRC_RECV
                IBV_QPT_UD => libc::SOCK_DGRAM,
                _ => 0,
            };
            ai.ai_protocol = match h.ai_port_space as u32 {
                RDMA_PS_TCP => libc::IPPROTO_TCP,
                RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
                RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
                RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
                _ => 0,
            };
            let mut out: *mut libc::addrinfo = std::ptr::null_mut();
            let hp: *const libc::addrinfo = if hints.is_null() { std::ptr::null() } else { &ai };
            // SAFETY: C strings from the caller (or NULL), local hints (or NULL), an out-pointer.
            let r = unsafe { libc::getaddrinfo(node, service, hp, &mut out) };
            if r != 0 {
                return Err(Fail::Gai(r));
            }
            // SAFETY: getaddrinfo succeeded: `out` is a list with at least one entry.
            let first = unsafe { &*out };
            ra.ai_qp_type = if h.ai_qp_type != 0 {
                h.ai_qp_type
            } else {
                match first.ai_socktype {
                    libc::SOCK_STREAM => IBV_QPT_RC as c_int,
                    libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
                    _ => 0,
                }
            };
            ra.ai_port_space = if h.ai_port_space != 0 {
                h.ai_port_space
            } else {
                match first.ai_protocol {
                    libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
                    libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
                    _ => 0,
                }
            };
            ra.ai_family = first.ai_family;
            let canon = || {
                if first.ai_canonname.is_null() {
                    std::ptr::null_mut()
                } else {
                    // SAFETY: the resolver's C string.
                    unsafe { libc::strdup(first.ai_canonname) }
                }
            };
            // SAFETY: ai_addr points to ai_addrlen bytes.
            let copied = unsafe { copy_addr(first.ai_addr, first.ai_addrlen) };
            if first.ai_flags & libc::AI_PASSIVE != 0 {
                ra.ai_flags = RAI_PASSIVE;
                ra.ai_src_canonname = canon();
                if let Ok(a) = copied {
                    (ra.ai_src_addr, ra.ai_src_len) = a;
                }
            } else {
                ra.ai_dst_canonname = canon();
                if let Ok(a) = copied {
                    (ra.ai_dst_addr, ra.ai_dst_len) = a;
                }
            }
            // SAFETY: the list from getaddrinfo.
            unsafe { libc::freeaddrinfo(out) };
            if let Err(e) = copied {
                free_on_err(&ra);
                return Err(Fail::Errno(e));
            }
        } else {
            ra.ai_flags = h.ai_flags;
            ra.ai_family = h.ai_family;
            ra.ai_qp_type = h.ai_qp_type;
            ra.ai_port_space = h.ai_port_space;
            // SAFETY: per the caller, ai_dst_len readable bytes.
            match unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) } {
                Ok(a) => (ra.ai_dst_addr, ra.ai_dst_len) = a,
                Err(e) => return Err(Fail::Errno(e)),
            }
        }
        if ra.ai_src_len == 0 && h.ai_src_len != 0 {
            // SAFETY: per the caller, ai_src_len readable bytes.
            match unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) } {
                Ok(a) => (ra.ai_src_addr, ra.ai_src_len) = a,
                Err(e) => {
                    free_on_err(&ra);
                    return Err(Fail::Errno(e));
                }
            }
        }
        // SAFETY: malloc of one rdma_addrinfo (freed by rdma_freeaddrinfo).
        let p = unsafe { libc::malloc(std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
        if p.is_null() {
            free_on_err(&ra);
            return Err(Fail::Errno(libc::ENOMEM));
        }
        // SAFETY: fresh allocation; `res` per the caller.
        unsafe {
            p.write(ra);
            *res = p;
        }
        Ok(())
    });
    match r {
        Ok(()) => 0,
        Err(Fail::Gai(code)) => code,
        Err(Fail::Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` NULL or from `rdma_getaddrinfo`.
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list made by rdma_getaddrinfo (malloc'd members).
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free((*p).ai_src_canonname.cast());
            libc::free((*p).ai_dst_canonname.cast());
            libc::free((*p).ai_route);
            libc::free((*p).ai_connect);
            libc::free(p.cast());
            p = next;
        }
    }
}
