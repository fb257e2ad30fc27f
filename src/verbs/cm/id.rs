//! rdma_cm ids (`struct rdma_cm_id`): what an application connects with, and the glue between
//! them and the IB CM of each device (Linux's `cma.c` + librdmacm): RC in the TCP port space,
//! UD in the UDP port space (SIDR: `connect` sends a SIDR_REQ, `accept` the SIDR_REP).
//!
//! The engine hands every IB CM event of a device to `on_cm_event` on its own thread; that
//! function answers at once where the kernel does (reject a request no listener takes, the
//! MRA that covers the application's thinking time) and queues the rdma_cm event on the id's
//! channel. Work that needs the engine (moving a QP to RTR/RTS, sending the RTU) is done by
//! the application's thread: in its calls, and — for an active id's connect response — when
//! it takes the event, as librdmacm does in `rdma_get_cm_event`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::channel::{ChannelInner, ConnEventParam, EventChannel, EventData, EventParam, UdEventParam};
use super::error::{Error, Result};
use super::registry::{self, PortBinding};
use super::{CmEventType, CmIdState};
use crate::transport::cm::rdma::{
    self, ConnParam, DeviceCaps, RdmaListen, RdmaQpType, RdmaRoute, RequestKind,
};
use crate::transport::cm::{
    CmEndpoint, CmEvent as IbEvent, CmId as IbCmId, CmPathRecord, CmQpAttrs, MadAddr, RepInfo, ReqInfo,
    SidrRepParams,
};
use crate::transport::{Mtu, Qkey, QpState, QpType, Qpn, Time};
use crate::verbs::device::{DeviceShared, WeakDevice};
use crate::verbs::{Access, AddressVector, Device, Gid, ProtectionDomain, QpAttrs, QpInitAttr, QueuePair};
use crate::wire::Psn;
use crate::wire::cm::{CmTransport, RejReason, SidrStatus};
use crate::wire::cma::{PortSpace, RDMA_UDP_QKEY};

/// What the RDMA CM keeps per device, in the device's `cm_state` (set at open, by
/// [`install`]): the device itself, weakly (what the ids of incoming requests hold), and the
/// IB CM connections of its ids and its listeners, which only the engine thread touches.
struct CmDevice {
    weak: WeakDevice,
    conns: Mutex<DevCm>,
}

/// The RDMA CM's state of a device (every device has it from [`install`] on, before any id
/// can reach it through the registry).
fn cm_device(shared: &DeviceShared) -> &CmDevice {
    shared
        .cm_state
        .get()
        .and_then(|b| b.downcast_ref::<CmDevice>())
        .expect("the RDMA CM state is installed when the device opens")
}

/// The IB CM connections of a device's ids and its listeners.
fn rdma_cm(shared: &DeviceShared) -> parking_lot::MutexGuard<'_, DevCm> {
    cm_device(shared).conns.lock()
}

/// A device's IB CM connections of ids and its listeners.
#[derive(Default)]
struct DevCm {
    conns: HashMap<u32, Arc<IdInner>>,
    listeners: Vec<(RdmaListen, Arc<IdInner>)>,
}

/// The mutable part of an id.
struct IdSt {
    state: CmIdState,
    dev: Option<WeakDevice>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    binding: Option<PortBinding>,
    route: Option<RdmaRoute>,
    /// The IB CM connection, once there is one.
    ib: Option<IbCmId>,
    /// The devices this id listens on.
    listens: Vec<WeakDevice>,
    qp: Option<Arc<QueuePair>>,
    /// The PSN this side starts receiving at (the Starting PSN of its REQ or REP).
    seq_num: u32,
    /// Passive: the request.
    req: Option<Box<ReqInfo>>,
    /// Passive UD: a SIDR request is unanswered.
    sidr_pending: bool,
    /// Active UD: the peer the SIDR_REP named.
    ud_peer: Option<UdEventParam>,
    /// Active: the reply, until the connect response is processed.
    rep: Option<Box<RepInfo>>,
    /// The application's connection parameters (QP overrides).
    conn: Option<ConnParam>,
    /// DISCONNECTED was queued.
    disconnected: bool,
    /// `rdma_set_option(RDMA_OPTION_ID_TOS)`: the route's traffic class.
    tos: Option<u8>,
    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`: the QP's local ACK timeout.
    ack_timeout: Option<u8>,
}

/// An id, as the engine's side and the application's share it.
pub(crate) struct IdInner {
    serial: u64,
    /// Where this id's events go, and whether the id is synchronous (created or migrated
    /// without a channel: every call waits for its outcome). [`CmId::migrate`] changes both;
    /// an event is pushed with this lock held, so none lands on a channel the id has left.
    channel: Mutex<(Arc<ChannelInner>, bool)>,
    ps: PortSpace,
    qp_type: RdmaQpType,
    st: Mutex<IdSt>,
    outstanding: AtomicUsize,
}

impl IdInner {
    fn new(channel: Arc<ChannelInner>, sync: bool, ps: PortSpace) -> Arc<IdInner> {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        Arc::new(IdInner {
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            channel: Mutex::new((channel, sync)),
            ps,
            qp_type: if matches!(ps, PortSpace::Udp | PortSpace::Ipoib) {
                RdmaQpType::Ud
            } else {
                RdmaQpType::Rc
            },
            st: Mutex::new(IdSt {
                state: CmIdState::Idle,
                dev: None,
                src: None,
                dst: None,
                binding: None,
                route: None,
                ib: None,
                listens: Vec::new(),
                qp: None,
                // The Starting PSN this id will send (in its REQ or REP), fixed at creation as
                // the kernel's `__rdma_create_id` does: `rdma_init_qp_attr` for RTR gives it
                // before the REP that carries it is sent.
                seq_num: crate::engine::random::u32() & 0xff_ffff,
                req: None,
                sidr_pending: false,
                ud_peer: None,
                rep: None,
                conn: None,
                disconnected: false,
                tos: None,
                ack_timeout: None,
            }),
            outstanding: AtomicUsize::new(0),
        })
    }

    /// An event about this id was queued.
    pub(crate) fn event_reported(&self) {
        self.outstanding.fetch_add(1, Ordering::SeqCst);
    }

    /// An event about this id was acknowledged.
    pub(crate) fn event_completed(&self) {
        let _ = self.outstanding.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Destroys an id nobody will ever hold (a request whose event was dropped undelivered):
    /// its IB CM connection is rejected, without waiting for the engine.
    pub(crate) fn post_destroy(self: &Arc<Self>) {
        let (ib, dev) = {
            let mut st = self.st.lock();
            st.state = CmIdState::Destroyed;
            (st.ib.take(), st.dev.clone())
        };
        if let (Some(ib), Some(shared)) = (ib, dev.and_then(|d| d.shared())) {
            let weak = Arc::downgrade(&shared);
            shared.cm_post(move |cm, now| {
                let _ = cm.destroy(now, ib);
                if let Some(s) = weak.upgrade() {
                    rdma_cm(&s).conns.remove(&ib.0);
                }
            });
        }
    }

    fn state(&self) -> CmIdState {
        self.st.lock().state
    }

    /// The channel the id's events go to now.
    fn channel(&self) -> Arc<ChannelInner> {
        self.channel.lock().0.clone()
    }

    /// Whether the id is synchronous now.
    fn sync(&self) -> bool {
        self.channel.lock().1
    }

    /// The id a connection request to this listener gets: on the listener's channel, or, for
    /// a synchronous listener, synchronous too with a channel of its own.
    fn new_request_id(&self) -> Result<Arc<IdInner>> {
        let (channel, sync) = self.channel.lock().clone();
        let channel = if sync { ChannelInner::new()? } else { channel };
        Ok(IdInner::new(channel, sync, self.ps))
    }

    /// Queues an event on the id's channel (the channel it has at that moment).
    fn push_event(&self, ev: EventData) {
        self.channel.lock().0.push(ev);
    }

    fn push(self: &Arc<Self>, kind: CmEventType, status: i32, param: EventParam) {
        self.push_event(EventData::new(kind, status, self.clone(), param));
    }

    /// An active id's connect response, processed as the application takes it (librdmacm's
    /// `ucma_process_conn_resp`): the QP to RTR and RTS from the REP, then the RTU. Returns
    /// the event the application sees: ESTABLISHED, or CONNECT_ERROR (the connection is then
    /// rejected). An id without a QP sees CONNECT_RESPONSE and calls [`CmId::establish`].
    pub(crate) fn process_connect_response(self: &Arc<Self>) -> (CmEventType, i32) {
        let (qp, ib, dev, seq, conn) = {
            let st = self.st.lock();
            (st.qp.clone(), st.ib, st.dev.clone(), st.seq_num, st.conn.clone())
        };
        let ack_timeout = self.st.lock().ack_timeout;
        let (Some(ib), Some(dev)) = (ib, dev.and_then(|d| d.upgrade())) else {
            return (CmEventType::ConnectError, -libc::ENODEV);
        };
        let Some(qp) = qp else { return (CmEventType::ConnectResponse, 0) };
        let r = (|| -> Result<()> {
            let attrs = dev.shared.cm_call(move |cm, _| cm.qp_attrs(ib))??;
            move_qp(&qp, &dev, attrs, seq, conn.as_ref(), ack_timeout)?;
            dev.shared.cm_call(move |cm, now| cm.ready_to_use(now, ib, &[]))??;
            Ok(())
        })();
        match r {
            Ok(()) => {
                self.st.lock().state = CmIdState::Established;
                (CmEventType::Established, 0)
            }
            Err(e) => {
                let _ = qp.modify(&QpAttrs::error());
                let _ = dev
                    .shared
                    .cm_call(move |cm, now| cm.reject(now, ib, RejReason::ConsumerDefined, &[], &[]));
                self.st.lock().state = CmIdState::Disconnect;
                (CmEventType::ConnectError, -e.errno())
            }
        }
    }
}

/// A reference to an id, as events carry it (`event->id`, `event->listen_id`).
#[derive(Clone)]
pub struct CmIdRef(pub(crate) Arc<IdInner>);

impl std::fmt::Debug for CmIdRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId#{}", self.0.serial)
    }
}

impl CmIdRef {
    /// The id's state.
    pub fn state(&self) -> CmIdState {
        self.0.state()
    }
    /// The local address and port (`rdma_get_local_addr`).
    pub fn src_addr(&self) -> Option<SocketAddr> {
        self.0.st.lock().src
    }
    /// The peer's address and port (`rdma_get_peer_addr`).
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        self.0.st.lock().dst
    }
    /// Whether this refers to `id`.
    pub fn is(&self, id: &CmId) -> bool {
        Arc::ptr_eq(&self.0, &id.inner)
    }
    /// The id's serial number ([`CmId::serial`]).
    pub fn serial(&self) -> u64 {
        self.0.serial
    }
}

/// An rdma_cm id (`struct rdma_cm_id`): RC in the TCP port space, UD in the UDP port space.
/// A UD id resolves its peer with SIDR: [`CmId::connect`] sends a SIDR_REQ, the listener's
/// application gets CONNECT_REQUEST and [`CmId::accept`] answers with its QP number and
/// Q_Key; the active side's ESTABLISHED carries them with an address vector for an address
/// handle ([`super::UdEventParam`], librdmacm's `rdma_ud_param`). Created on an
/// [`EventChannel`], its calls return at once and their outcome arrives as events; created
/// without one, every call waits for its outcome (librdmacm's synchronous mode). Dropping it
/// destroys it (`rdma_destroy_id`): an unanswered request is rejected, a connection
/// disconnected, the QP destroyed.
pub struct CmId {
    inner: Arc<IdInner>,
    dev: Option<Device>,
    qp: Option<Arc<QueuePair>>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("serial", &self.inner.serial)
            .field("state", &self.state())
            .field("src", &self.src_addr())
            .field("dst", &self.dst_addr())
            .finish()
    }
}

/// How long a synchronous call waits at most: longer than the IB CM's own give-up time for
/// an unanswered REQ (16 × 6.1 s), so its outcome always arrives first.
const SYNC_WAIT: Duration = Duration::from_secs(120);

impl CmId {
    /// `rdma_create_id`: a new id in port space `ps` (TCP and IB: RC; UDP and IPoIB: UD). With
    /// a channel its events go there; without one (`None`) the id is synchronous. An IPoIB id
    /// exists, as with the kernel, but a RoCE device resolves no address for it
    /// ([`CmId::resolve_addr`] reports ADDR_ERROR).
    pub fn new(channel: Option<&EventChannel>, ps: PortSpace) -> Result<CmId> {
        if !matches!(ps, PortSpace::Tcp | PortSpace::Udp | PortSpace::Ib | PortSpace::Ipoib) {
            return Err(Error::PortSpace(ps));
        }
        let (ch, sync) = match channel {
            Some(c) => (c.inner.clone(), false),
            None => (ChannelInner::new()?, true),
        };
        Ok(CmId { inner: IdInner::new(ch, sync, ps), dev: None, qp: None })
    }

    /// Hands an id that arrived with a CONNECT_REQUEST to the application.
    pub(crate) fn claim(inner: Arc<IdInner>) -> Option<CmId> {
        let dev = inner.st.lock().dev.as_ref().and_then(|d| d.upgrade())?;
        Some(CmId { inner, dev: Some(dev), qp: None })
    }

    /// A reference to this id, to compare with an event's ([`CmIdRef::is`]).
    pub fn as_ref(&self) -> CmIdRef {
        CmIdRef(self.inner.clone())
    }
    /// The id's state.
    pub fn state(&self) -> CmIdState {
        self.inner.state()
    }
    /// The local address and port (`rdma_get_local_addr`).
    pub fn src_addr(&self) -> Option<SocketAddr> {
        self.inner.st.lock().src
    }
    /// The peer's address and port (`rdma_get_peer_addr`).
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        self.inner.st.lock().dst
    }
    /// The device the id is bound to (`id->verbs`), once it has an address.
    pub fn device(&self) -> Option<&Device> {
        self.dev.as_ref()
    }
    /// The QP made with [`CmId::create_qp`] (`id->qp`).
    pub fn qp(&self) -> Option<&QueuePair> {
        self.qp.as_deref()
    }
    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.inner.ps
    }
    /// A UD id after a successful SIDR (the active side's ESTABLISHED): the peer's QP number,
    /// Q_Key and address vector, as the event carried them. `None` before, and on RC ids.
    pub fn ud_peer(&self) -> Option<UdEventParam> {
        self.inner.st.lock().ud_peer.clone()
    }
    /// A number unique to this id in the process, the same in the [`CmIdRef`] of its events
    /// (so that a C library can find its own object for an event's id).
    pub fn serial(&self) -> u64 {
        self.inner.serial
    }
    /// Whether the id is synchronous (created without a channel).
    pub fn is_sync(&self) -> bool {
        self.inner.sync()
    }

    /// The channel the id's events go to now: the application's, or — for a synchronous id —
    /// its own (librdmacm gives a synchronous id a channel of its own, `id->channel`).
    pub fn event_channel(&self) -> EventChannel {
        EventChannel { inner: self.inner.channel() }
    }

    /// `rdma_migrate_id`: from now on the id's events go to `channel` (`None`: the id becomes
    /// synchronous, with a channel of its own). Events queued about it on its old channel and
    /// not yet taken move with it, in order (a listener's: its pending connection requests);
    /// events already taken stay the application's to acknowledge. Moving to the channel the
    /// id is on changes nothing.
    pub fn migrate(&self, channel: Option<&EventChannel>) -> Result<()> {
        let (to, sync) = match channel {
            Some(c) => (c.inner.clone(), false),
            None => (ChannelInner::new()?, true),
        };
        let mut cur = self.inner.channel.lock();
        if Arc::ptr_eq(&cur.0, &to) {
            return Ok(());
        }
        for ev in cur.0.take_for(&self.inner) {
            to.push_moved(ev);
        }
        *cur = (to, sync);
        Ok(())
    }

    /// The IB CM connection of the id.
    fn ib_id(&self, op: &'static str) -> Result<IbCmId> {
        let st = self.inner.st.lock();
        st.ib.ok_or(Error::InvalidState { op, state: st.state })
    }

    fn expect(&self, op: &'static str, ok: &[CmIdState]) -> Result<()> {
        let s = self.state();
        if ok.contains(&s) { Ok(()) } else { Err(Error::InvalidState { op, state: s }) }
    }

    fn set_device(&mut self, dev: Device) {
        install(&dev);
        self.inner.st.lock().dev = Some(dev.downgrade());
        self.dev = Some(dev);
    }

    /// Waits, for a synchronous id, for the event that ends a call.
    fn wait_sync(&self, want: CmEventType) -> Result<()> {
        if !self.inner.sync() {
            return Ok(());
        }
        loop {
            let ev = self.inner.channel().pop(Some(SYNC_WAIT)).ok_or(Error::Timeout)?;
            let ev = super::channel::deliver_event(ev);
            let t = ev.event_type();
            if t == want {
                return Ok(());
            }
            return Err(match t {
                CmEventType::TimewaitExit => continue,
                CmEventType::Rejected => Error::ConnectionRefused {
                    reason: ev.status() as u16,
                    private_data: ev.private_data().to_vec(),
                },
                t if ev.status() != 0 => Error::Event { event: t, status: ev.status() },
                t => Error::UnexpectedEvent(t),
            });
        }
    }

    /// `rdma_bind_addr`: binds the id to a local address and port (port 0: an ephemeral
    /// one). A specific address picks the softroce device that serves it (opening one if none
    /// does); the unspecified address binds to every device (for a listener).
    pub fn bind_addr(&mut self, addr: SocketAddr) -> Result<()> {
        self.expect("bind_addr", &[CmIdState::Idle])?;
        if !addr.ip().is_unspecified() {
            let dev = registry::device_for_local(addr.ip())?;
            self.set_device(dev);
        }
        self.bind_port(addr)
    }

    /// `rdma_bind_addr` of a loopback address as Linux does it: the address and port are the
    /// id's, but no device is chosen (the kernel's `cma_any_addr` counts loopback addresses as
    /// "any": `id->verbs` stays NULL), so a listen listens on every device and takes requests
    /// to any of its addresses, like a wildcard. libfabric's verbs provider relies on it: it
    /// binds `localhost` to learn the devices' addresses. Other addresses bind as
    /// [`CmId::bind_addr`] does.
    pub fn bind_addr_loopback_as_any(&mut self, addr: SocketAddr) -> Result<()> {
        if !addr.ip().is_loopback() {
            return self.bind_addr(addr);
        }
        self.expect("bind_addr", &[CmIdState::Idle])?;
        self.bind_port(addr)
    }

    fn bind_port(&mut self, addr: SocketAddr) -> Result<()> {
        let b = registry::bind_port(self.inner.ps, addr, self.inner.serial, false)?;
        let mut st = self.inner.st.lock();
        st.src = Some(b.addr());
        st.binding = Some(b);
        st.state = CmIdState::AddrBound;
        Ok(())
    }

    /// `rdma_resolve_addr`: picks the local device and address that reach `dst` (binding an
    /// ephemeral port if the id is not bound) and reports ADDR_RESOLVED. `src` names the local
    /// address to use, as its first argument does. The destination's port may be 0: as with
    /// the kernel, it matters only at `connect`. An id bound to the other address family stays
    /// bound and gets [`Error::AddressFamily`] (`EINVAL`); no route to `dst` is
    /// [`Error::NoRoute`] (`ENETUNREACH`). An IPoIB id resolves nothing on RoCE: ADDR_ERROR
    /// with status `-EINVAL` follows, as from the kernel.
    pub fn resolve_addr(
        &mut self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        _timeout: Duration,
    ) -> Result<()> {
        if let Some(s) = src
            && self.state() == CmIdState::Idle
        {
            self.bind_addr(s)?;
        }
        self.expect("resolve_addr", &[CmIdState::Idle, CmIdState::AddrBound])?;
        if dst.ip().is_unspecified() {
            return Err(Error::InvalidArgument("the destination needs an address"));
        }
        let bound = self.inner.st.lock().src;
        if let Some(b) = bound
            && b.is_ipv4() != dst.is_ipv4()
        {
            return Err(Error::AddressFamily { src: b.ip(), dst: dst.ip() });
        }
        if self.inner.ps == PortSpace::Ipoib {
            self.inner.push(CmEventType::AddrError, -libc::EINVAL, EventParam::None);
            return self.wait_sync(CmEventType::AddrResolved);
        }
        let (dev, local) = match (&self.dev, bound) {
            (Some(d), Some(b)) if !b.ip().is_unspecified() => (d.clone(), b.ip()),
            _ => registry::device_towards(dst.ip())?,
        };
        if local.is_ipv4() != dst.ip().is_ipv4() {
            return Err(Error::AddressFamily { src: local, dst: dst.ip() });
        }
        self.set_device(dev);
        let port = match bound {
            Some(b) => b.port(),
            None => 0,
        };
        let mut st = self.inner.st.lock();
        if st.binding.is_none() || bound.is_some_and(|b| b.ip().is_unspecified()) {
            drop(st);
            let b =
                registry::bind_port(self.inner.ps, SocketAddr::new(local, port), self.inner.serial, false)?;
            st = self.inner.st.lock();
            st.binding = Some(b);
        }
        let port = st.binding.as_ref().map_or(0, |b| b.addr().port());
        st.src = Some(SocketAddr::new(local, port));
        st.dst = Some(dst);
        st.state = CmIdState::AddrResolved;
        drop(st);
        self.inner.push(CmEventType::AddrResolved, 0, EventParam::None);
        self.wait_sync(CmEventType::AddrResolved)
    }

    /// `rdma_set_option(RDMA_OPTION_ID_TOS)` (`rdma_set_service_type`): the type of service of
    /// the route resolved after it (the traffic class of the path, hence of the REQ's GRH
    /// fields and the QP's address vector), as Linux applies it at route resolution.
    pub fn set_tos(&mut self, tos: u8) {
        self.inner.st.lock().tos = Some(tos);
    }

    /// The type of service [`CmId::set_tos`] gave (0 by default).
    pub fn tos(&self) -> u8 {
        self.inner.st.lock().tos.unwrap_or(0)
    }

    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)` (`rdma_set_ack_timeout`): the local ACK
    /// timeout (4.096 µs × 2^`timeout`) the QP gets at RTS instead of the CM's; set before the
    /// route is resolved, it also sets the path's packet life time (`timeout` − 1), as Linux.
    /// `EINVAL` style [`Error::InvalidArgument`] for an id that is not RC.
    pub fn set_ack_timeout(&mut self, timeout: u8) -> Result<()> {
        if self.inner.qp_type != RdmaQpType::Rc {
            return Err(Error::InvalidArgument("the ACK timeout applies to RC ids"));
        }
        self.inner.st.lock().ack_timeout = Some(timeout.min(31));
        Ok(())
    }

    /// `rdma_resolve_route`: the RoCE route to the resolved address (path MTU from the
    /// device's MTU, hop limit 64, the traffic class of [`CmId::set_tos`]); reports
    /// ROUTE_RESOLVED.
    pub fn resolve_route(&mut self, _timeout: Duration) -> Result<()> {
        self.expect("resolve_route", &[CmIdState::AddrResolved])?;
        let dev = self.dev.as_ref().ok_or(Error::NoDevice)?;
        let mut st = self.inner.st.lock();
        let (Some(src), Some(dst)) = (st.src, st.dst) else {
            return Err(Error::InvalidState { op: "resolve_route", state: st.state });
        };
        st.route = Some(RdmaRoute {
            src,
            dst,
            mtu: rdma::iboe_get_mtu(dev.shared.port.netdev_mtu).max(1),
            hop_limit: 64,
            tos: st.tos.unwrap_or(0),
            ack_timeout: st.ack_timeout,
            ipv6_flow_label: None,
        });
        st.state = CmIdState::RouteResolved;
        drop(st);
        self.inner.push(CmEventType::RouteResolved, 0, EventParam::None);
        self.wait_sync(CmEventType::RouteResolved)
    }

    /// `rdma_listen`: listens for connection requests to the bound port — on the bound
    /// address's device, or on every open softroce device for a wildcard address (an id not
    /// bound yet binds to the IPv4 wildcard and an ephemeral port first). At most
    /// `backlog` requests (0: 1024) wait unanswered; more are dropped so that their senders
    /// retry, as Linux does.
    pub fn listen(&mut self, backlog: usize) -> Result<()> {
        if self.state() == CmIdState::Idle {
            // As the kernel's rdma_listen: an unbound id binds to the IPv4 wildcard first.
            self.bind_addr(SocketAddr::from(([0, 0, 0, 0], 0)))?;
        }
        self.expect("listen", &[CmIdState::AddrBound])?;
        let src = self.src_addr().ok_or(Error::InvalidArgument("bind the id first"))?;
        let backlog = if backlog == 0 { rdma::UCMA_MAX_BACKLOG } else { backlog.min(rdma::UCMA_MAX_BACKLOG) };
        let devs = match &self.dev {
            Some(d) => vec![d.clone()],
            None => registry::devices_for_wildcard(src.is_ipv4(), true),
        };
        devs.iter().for_each(install);
        if devs.is_empty() {
            return Err(Error::NoDevice);
        }
        let l = RdmaListen {
            ps: self.inner.ps,
            addr: src.ip(),
            port: src.port(),
            afonly: src.is_ipv4(),
            qp_type: self.inner.qp_type,
        };
        let sid = l.service_id();
        // LISTEN before the engine can match a request to the id (as `rdma_listen` in Linux
        // moves the id to LISTEN before it listens): a request that arrives the moment the
        // listener is registered — in the same engine turn — must find it listening, not be
        // refused (REJ 28) because this thread has not run again yet.
        self.inner.st.lock().state = CmIdState::Listen;
        let mut done = Vec::new();
        let mut failed = None;
        for d in &devs {
            let inner = self.inner.clone();
            let weak = Arc::downgrade(&d.shared);
            let r = d.shared.cm_call(move |cm, _| {
                let Some(s) = weak.upgrade() else { return Ok(()) };
                let mut g = rdma_cm(&s);
                if !g.listeners.iter().any(|(x, _)| x.service_id() == sid) {
                    cm.listen(sid, backlog)?;
                }
                g.listeners.push((l, inner));
                // Requests that reach another process sharing the address come here.
                if let Some(share) = &s.share {
                    share.announce_listen(sid, l.addr, true);
                }
                Ok::<(), crate::transport::cm::CmError>(())
            });
            match r {
                Ok(Ok(())) => done.push(d.downgrade()),
                Ok(Err(e)) => {
                    failed = Some(Error::from(e));
                    break;
                }
                Err(e) => {
                    failed = Some(Error::from(e));
                    break;
                }
            }
        }
        let mut st = self.inner.st.lock();
        // The devices that registered it (dropping the id unregisters them).
        st.listens = done;
        match failed {
            None => Ok(()),
            Some(e) => {
                st.state = CmIdState::AddrBound;
                Err(e)
            }
        }
    }

    /// `rdma_get_request` (synchronous listener): waits for the next connection request and
    /// returns its new id.
    pub fn get_request(&self) -> Result<CmId> {
        self.expect("get_request", &[CmIdState::Listen])?;
        loop {
            let ev = self.inner.channel().pop(None).ok_or(Error::Timeout)?;
            let mut ev = super::channel::deliver_event(ev);
            if ev.event_type() == CmEventType::ConnectRequest
                && let Some(id) = ev.take_id()
            {
                return Ok(id);
            }
        }
    }

    /// `rdma_create_qp`: creates the id's QP on its device (in `pd`, or the device's default
    /// protection domain). An RC QP goes to INIT with no remote access yet, as librdmacm does
    /// (`rdma_init_qp_attr` before a connection), and `connect` or `accept` give it the
    /// connection's access and take it to RTR and RTS; a UD QP (UDP port space) goes straight to RTS with Q_Key
    /// 0x01234567 (`RDMA_UDP_QKEY`) and send PSN 0 (`ucma_init_ud_qp`).
    pub fn create_qp(&mut self, pd: Option<&ProtectionDomain>, init: &QpInitAttr<'_>) -> Result<&QueuePair> {
        let dev =
            self.dev.clone().ok_or(Error::InvalidArgument("resolve or bind the id to a device first"))?;
        if self.qp.is_some() {
            return Err(Error::InvalidArgument("the id already has a QP"));
        }
        let ud = self.inner.qp_type == RdmaQpType::Ud;
        match (ud, init.qp_type) {
            (false, QpType::Rc) | (true, QpType::Ud) => {}
            (false, _) => return Err(Error::InvalidArgument("an id in the TCP port space takes an RC QP")),
            (true, _) => return Err(Error::InvalidArgument("an id in the UDP port space takes a UD QP")),
        }
        let default;
        let pd = match pd {
            Some(p) => p,
            None => {
                default = registry::default_pd(&dev)?;
                &default
            }
        };
        let qp = Arc::new(pd.create_qp(init)?);
        if ud {
            qp.modify(&QpAttrs::init_ud(Qkey::new(RDMA_UDP_QKEY)))?;
            qp.modify(&QpAttrs::rtr_ud())?;
            qp.modify(&QpAttrs::rts_unreliable(Psn::new(0)))?;
        } else {
            qp.modify(&QpAttrs::init(Access::NONE))?;
        }
        self.inner.st.lock().qp = Some(qp.clone());
        self.qp = Some(qp);
        Ok(self.qp.as_deref().expect("just set"))
    }

    /// `rdma_create_qp` with a QP made elsewhere (by a C library over the same device): moves
    /// it as [`CmId::create_qp`] does (an RC QP to INIT, which `connect` and `accept` then take
    /// to RTR and RTS; a UD QP of a UDP id straight to RTS with Q_Key 0x01234567) and makes it
    /// the id's QP.
    pub fn attach_qp(&mut self, qp: Arc<QueuePair>) -> Result<()> {
        let dev =
            self.dev.as_ref().ok_or(Error::InvalidArgument("resolve or bind the id to a device first"))?;
        if self.qp.is_some() {
            return Err(Error::InvalidArgument("the id already has a QP"));
        }
        if !qp.device().same(dev) {
            return Err(Error::InvalidArgument("the QP is on another device"));
        }
        let ud = self.inner.qp_type == RdmaQpType::Ud;
        match (ud, qp.qp_type()) {
            (false, QpType::Rc) | (true, QpType::Ud) => {}
            (false, _) => return Err(Error::InvalidArgument("an id in the TCP port space takes an RC QP")),
            (true, _) => return Err(Error::InvalidArgument("an id in the UDP port space takes a UD QP")),
        }
        if ud {
            // librdmacm's `ucma_init_ud_qp`: INIT with the port space's Q_Key, RTR, RTS.
            if qp.state() == QpState::Reset {
                qp.modify(&QpAttrs::init_ud(Qkey::new(RDMA_UDP_QKEY)))?;
            }
            if qp.state() == QpState::Init {
                qp.modify(&QpAttrs::rtr_ud())?;
            }
            if qp.state() == QpState::Rtr {
                qp.modify(&QpAttrs::rts_unreliable(Psn::new(0)))?;
            }
        } else if qp.state() == QpState::Reset {
            qp.modify(&QpAttrs::init(Access::NONE))?;
        }
        self.inner.st.lock().qp = Some(qp.clone());
        self.qp = Some(qp);
        Ok(())
    }

    /// `rdma_destroy_qp`: the id lets go of its QP (which is destroyed when its last holder
    /// drops it).
    pub fn detach_qp(&mut self) -> Option<Arc<QueuePair>> {
        self.inner.st.lock().qp = None;
        self.qp.take()
    }

    /// `rdma_init_qp_attr`: the attributes that move a QP of the application's own — created on
    /// the id's device, its number given as [`ConnParam::qp_num`] (UCX, libfabric, `rping -q`)
    /// — to `state`, as the kernel computes them. Before the id has an IB CM connection (bound,
    /// resolved, and on every UD id): P_Key index 0, port 1, and remote access 0 (RC) or the
    /// Q_Key 0x01234567 (UD), whatever the state asked for. From the REQ on (the active side
    /// after `connect`, the passive after CONNECT_REQUEST) through ESTABLISHED: INIT with
    /// remote write (and read and atomic when the connection has responder resources); from
    /// the passive side's request and the active side's CONNECT_RESPONSE on, also RTR (the
    /// path, MTU, peer QP, this id's Starting PSN, responder resources) and RTS (the peer's
    /// Starting PSN, retry counts, initiator depth, ACK timeout — the id's own if
    /// `set_ack_timeout` was called). Anything else, and a listening RC id, is
    /// [`Error::InvalidState`] (`EINVAL`); `state` is `None` for a value that names no state.
    pub fn init_qp_attr(&self, state: Option<QpState>) -> Result<QpAttrs> {
        let dev = self.dev.as_ref().ok_or(Error::InvalidArgument("the id has no device yet"))?;
        let (ib, seq, ack_timeout, id_state) = {
            let st = self.inner.st.lock();
            (st.ib, st.seq_num, st.ack_timeout, st.state)
        };
        if self.inner.ps == PortSpace::Ipoib {
            return Err(Error::InvalidArgument("IPoIB ids have no Q_Key on RoCE"));
        }
        let ud = self.inner.qp_type == RdmaQpType::Ud;
        let ib = match ib {
            Some(ib) if !ud => ib,
            _ => {
                if !ud && id_state == CmIdState::Listen {
                    return Err(Error::InvalidState { op: "init_qp_attr", state: id_state });
                }
                let mut a = QpAttrs { state, pkey_index: Some(0), port_num: Some(1), ..QpAttrs::default() };
                if ud {
                    a.qkey = Some(Qkey::new(RDMA_UDP_QKEY));
                } else {
                    a.access = Some(Access::NONE);
                }
                return Ok(a);
            }
        };
        let invalid = || Error::InvalidState { op: "init_qp_attr", state: id_state };
        match state {
            Some(QpState::Init) => {
                let (read_atomic, _pkey) =
                    dev.shared.cm_call(move |cm, _| cm.qp_init_attrs(ib))?.map_err(|_| invalid())?;
                let mut access = Access::REMOTE_WRITE;
                if read_atomic {
                    access = access | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
                }
                Ok(QpAttrs::init(access))
            }
            Some(s @ (QpState::Rtr | QpState::Rts)) => {
                let attrs = dev.shared.cm_call(move |cm, _| cm.qp_attrs(ib))?.map_err(|_| invalid())?;
                let o = rdma::RdmaQpOverrides {
                    responder_resources: None,
                    initiator_depth: None,
                    ack_timeout,
                    min_rnr_timer: None,
                };
                let (rtr, rts) = cm_moves(dev, attrs, seq, &o)?;
                Ok(if s == QpState::Rtr { rtr } else { rts })
            }
            _ => Err(invalid()),
        }
    }

    /// The path record of the resolved route (`id->route.path_rec`), once the route is.
    pub fn route_path(&self) -> Option<CmPathRecord> {
        self.inner.st.lock().route.map(|r| rdma::path_record(&r))
    }

    fn caps(&self) -> DeviceCaps {
        let a = self.dev.as_ref().map(|d| d.shared.attr.clone());
        DeviceCaps {
            max_qp_rd_atom: a.as_ref().map_or(16, |a| a.max_qp_rd_atom.min(255) as u8),
            max_qp_init_rd_atom: a.as_ref().map_or(16, |a| a.max_qp_init_rd_atom.min(255) as u8),
        }
    }

    /// `rdma_connect`: sends the connection request (the QP number is the id's QP, or
    /// `param.qp_num` without one). The outcome is ESTABLISHED (the QP is then in RTS),
    /// REJECTED (status 8: nobody listens on the port; 28: the peer's application said no) or
    /// UNREACHABLE (status −110: no answer after the IB CM's retries). A synchronous id waits
    /// for it and turns REJECTED into [`Error::ConnectionRefused`].
    ///
    /// On a UD id it sends a SIDR_REQ (with at most 180 bytes of private data; retried every
    /// 4096 ms, 15 times). The outcome is ESTABLISHED with a [`super::UdEventParam`] (the
    /// peer's QP, Q_Key and address vector), or UNREACHABLE with the SIDR status (1: nobody
    /// listens on the port; 2: the peer's application rejected) or −110 (no answer). A
    /// synchronous id waits for the outcome ([`CmId::ud_peer`] then names the peer; a failure
    /// is [`Error::Event`] with the status).
    pub fn connect(&mut self, param: Option<&ConnParam>) -> Result<()> {
        self.expect("connect", &[CmIdState::RouteResolved])?;
        let dev = self.dev.clone().ok_or(Error::NoDevice)?;
        if self.inner.qp_type == RdmaQpType::Ud {
            return self.connect_ud(&dev, param);
        }
        let (route, qpn) = {
            let st = self.inner.st.lock();
            let qpn = st.qp.as_ref().map(|q| q.qp_num().value()).or(param.map(|p| p.qp_num));
            (st.route.ok_or(Error::InvalidState { op: "connect", state: st.state })?, qpn)
        };
        let qpn = qpn
            .filter(|q| *q >= 2)
            .ok_or(Error::InvalidArgument("create a QP on the id (or name one) first"))?;
        let neg = rdma::connect_values(param, self.caps());
        let seq = self.inner.st.lock().seq_num;
        let srq = param.is_some_and(|p| p.srq);
        let req = rdma::req_params(&route, self.inner.ps, qpn, self.inner.qp_type, seq, &neg, srq)?;
        {
            let mut st = self.inner.st.lock();
            st.conn = param.cloned();
            st.state = CmIdState::Connect;
        }
        self.start_exchange(&dev, move |cm, now| cm.connect(now, &req))
    }

    /// SIDR for a UD id (`cma_resolve_ib_udp`).
    fn connect_ud(&mut self, dev: &Device, param: Option<&ConnParam>) -> Result<()> {
        let route = {
            let st = self.inner.st.lock();
            st.route.ok_or(Error::InvalidState { op: "connect", state: st.state })?
        };
        let user = param.map(|p| p.private_data.as_slice()).unwrap_or_default();
        if user.len() > rdma::SIDR_REQ_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong { len: user.len(), max: rdma::SIDR_REQ_PRIVATE_DATA });
        }
        let sidr = rdma::sidr_params(&route, self.inner.ps, user)?;
        self.inner.st.lock().state = CmIdState::Connect;
        self.start_exchange(dev, move |cm, now| cm.sidr_request(now, &sidr))
    }

    /// Starts the IB CM exchange `start` begins (a REQ or a SIDR_REQ), files this id under the
    /// CM's id for it, and waits for ESTABLISHED if the id is synchronous; if the CM refuses to
    /// start, the id is back in ROUTE_RESOLVED.
    fn start_exchange(
        &mut self,
        dev: &Device,
        start: impl FnOnce(
            &mut crate::transport::cm::CmEndpoint,
            crate::transport::Time,
        )
            -> std::result::Result<crate::transport::cm::CmId, crate::transport::cm::CmError>
        + Send
        + 'static,
    ) -> Result<()> {
        let inner = self.inner.clone();
        let weak = Arc::downgrade(&dev.shared);
        let r = dev.shared.cm_call(move |cm, now| {
            let id = start(cm, now)?;
            inner.st.lock().ib = Some(id);
            if let Some(s) = weak.upgrade() {
                rdma_cm(&s).conns.insert(id.0, inner);
            }
            Ok::<_, crate::transport::cm::CmError>(id)
        })?;
        if let Err(e) = r {
            self.inner.st.lock().state = CmIdState::RouteResolved;
            return Err(e.into());
        }
        self.wait_sync(CmEventType::Established)
    }

    /// `rdma_accept`: accepts a connection request; the QP goes to RTR and RTS from the
    /// request, the REP leaves, and ESTABLISHED follows when the peer's RTU (or its first
    /// packet, see [`CmId::establish`]) arrives. A synchronous id waits for it.
    ///
    /// On a UD id it sends the SIDR_REP: success, the id's QP number (or `param.qp_num`) and
    /// Q_Key 0x01234567, with at most 136 bytes of private data. There is no ESTABLISHED on
    /// the passive side of a UD id (as in Linux); the id is [`CmIdState::Established`] at once.
    pub fn accept(&mut self, param: Option<&ConnParam>) -> Result<()> {
        self.expect("accept", &[CmIdState::Connect])?;
        let dev = self.dev.clone().ok_or(Error::NoDevice)?;
        if self.inner.qp_type == RdmaQpType::Ud {
            let qpn = self.qp.as_ref().map(|q| q.qp_num().value()).or(param.map(|p| p.qp_num));
            let qpn = qpn
                .filter(|q| *q >= 2)
                .ok_or(Error::InvalidArgument("create a QP on the id (or name one) first"))?;
            let pd = param.map(|p| p.private_data.clone()).unwrap_or_default();
            if let Err(e) = self.sidr_answer(&dev, SidrStatus::Success, qpn, RDMA_UDP_QKEY, pd) {
                // As the kernel's rdma_accept: a request it cannot accept is rejected.
                let _ = self.sidr_answer(&dev, SidrStatus::Reject, 0, 0, Vec::new());
                self.inner.st.lock().state = CmIdState::Disconnect;
                return Err(e);
            }
            self.inner.st.lock().state = CmIdState::Established;
            return Ok(());
        }
        let (ib, req, qp) = {
            let st = self.inner.st.lock();
            (st.ib, st.req.clone(), st.qp.clone())
        };
        let (Some(ib), Some(req)) = (ib, req) else {
            return Err(Error::InvalidState { op: "accept", state: self.state() });
        };
        let qpn = qp.as_ref().map(|q| q.qp_num().value()).or(param.map(|p| p.qp_num));
        let qpn = qpn
            .filter(|q| *q >= 2)
            .ok_or(Error::InvalidArgument("create a QP on the id (or name one) first"))?;
        let neg = rdma::accept_values(param, &req, self.caps());
        let seq = self.inner.st.lock().seq_num;
        if let Some(qp) = &qp {
            let attrs = dev.shared.cm_call(move |cm, _| cm.qp_attrs(ib))??;
            let mut p = param.cloned().unwrap_or_default();
            p.responder_resources = neg.responder_resources;
            p.initiator_depth = neg.initiator_depth;
            let ack_timeout = self.inner.st.lock().ack_timeout;
            move_qp(qp, &dev, attrs, seq, Some(&p), ack_timeout)?;
        }
        let sent = (|| -> Result<()> {
            let rep = rdma::rep_params(qpn, seq, &neg, param.is_some_and(|p| p.srq))?;
            dev.shared.cm_call(move |cm, now| cm.accept(now, ib, &rep))??;
            Ok(())
        })();
        if let Err(e) = sent {
            // As the kernel's rdma_accept: a request it cannot accept (the REP refused, e.g.
            // private data too long) is rejected, and the QP goes to ERR.
            if let Some(qp) = &qp {
                let _ = qp.modify(&QpAttrs::error());
            }
            let _ =
                dev.shared.cm_call(move |cm, now| cm.reject(now, ib, RejReason::ConsumerDefined, &[], &[]));
            self.inner.st.lock().state = CmIdState::Disconnect;
            return Err(e);
        }
        self.wait_sync(CmEventType::Established)
    }

    /// Sends the SIDR_REP of a UD id's request.
    fn sidr_answer(&self, dev: &Device, status: SidrStatus, qpn: u32, qkey: u32, pd: Vec<u8>) -> Result<()> {
        if pd.len() > rdma::SIDR_REP_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong { len: pd.len(), max: rdma::SIDR_REP_PRIVATE_DATA });
        }
        let ib = self.ib_id("accept")?;
        if !self.inner.st.lock().sidr_pending {
            return Err(Error::InvalidState { op: "accept", state: self.state() });
        }
        let p =
            SidrRepParams { status, qpn, qkey, info: Vec::new(), private_data: pd, ece: Default::default() };
        dev.shared.cm_call(move |cm, now| cm.sidr_reply(now, ib, &p))??;
        self.inner.st.lock().sidr_pending = false;
        Ok(())
    }

    /// `rdma_reject`: turns a connection request down; the peer sees REJECTED with status 28
    /// and this private data (at most 148 bytes). On a UD id: a SIDR_REP with status 2
    /// (reject) and at most 136 bytes; the peer sees UNREACHABLE with status 2.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<()> {
        self.expect("reject", &[CmIdState::Connect])?;
        if self.inner.qp_type == RdmaQpType::Ud {
            let dev = self.dev.clone().ok_or(Error::NoDevice)?;
            self.sidr_answer(&dev, SidrStatus::Reject, 0, 0, private_data.to_vec())?;
            self.inner.st.lock().state = CmIdState::Disconnect;
            return Ok(());
        }
        if private_data.len() > rdma::REJ_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong { len: private_data.len(), max: rdma::REJ_PRIVATE_DATA });
        }
        let dev = self.dev.clone().ok_or(Error::NoDevice)?;
        let ib = self.ib_id("reject")?;
        let pd = private_data.to_vec();
        dev.shared.cm_call(move |cm, now| cm.reject(now, ib, RejReason::ConsumerDefined, &[], &pd))??;
        self.inner.st.lock().state = CmIdState::Disconnect;
        Ok(())
    }

    /// `rdma_establish`: tells the CM the connection is up before the RTU arrived (the
    /// passive QP received its first packet), or — on an active id without a QP, after
    /// CONNECT_RESPONSE — sends the RTU.
    pub fn establish(&mut self) -> Result<()> {
        let dev = self.dev.clone().ok_or(Error::NoDevice)?;
        let ib = self.ib_id("establish")?;
        let passive = self.inner.st.lock().req.is_some();
        if passive {
            dev.shared.cm_call(move |cm, _| cm.establish(ib))??;
        } else {
            dev.shared.cm_call(move |cm, now| cm.ready_to_use(now, ib, &[]))??;
            self.inner.st.lock().state = CmIdState::Established;
        }
        Ok(())
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)`: the passive side's QP received its first packet
    /// before the RTU — the connection is established (ESTABLISHED follows), as the kernel's
    /// `ib_cm_notify`. [`Error::IsConnected`] if it is already, [`Error::InvalidState`] on an
    /// id without an IB CM connection or whose connection is not waiting for an RTU.
    pub fn notify_established(&mut self) -> Result<()> {
        let dev = self.dev.clone().ok_or(Error::InvalidArgument("the id has no device"))?;
        let ib = self.ib_id("notify")?;
        match dev.shared.cm_call(move |cm, _| cm.establish(ib))? {
            Ok(()) => Ok(()),
            Err(crate::transport::cm::CmError::InvalidState {
                state: crate::transport::cm::CmState::Established,
                ..
            }) => Err(Error::IsConnected),
            Err(e) => Err(Error::Cm(e)),
        }
    }

    /// `rdma_disconnect`: the QP to ERR (its outstanding work flushes), then the DREQ (or the
    /// DREP, if the peer disconnected first). Both sides get DISCONNECTED. A UD id has no
    /// connection: only its QP goes to ERR, and no event follows (as in Linux).
    pub fn disconnect(&mut self) -> Result<()> {
        self.expect("disconnect", &[CmIdState::Connect, CmIdState::Established, CmIdState::Disconnect])?;
        let dev = self.dev.clone().ok_or(Error::NoDevice)?;
        if let Some(qp) = &self.qp {
            qp.modify(&QpAttrs::error())?;
        }
        if self.inner.qp_type == RdmaQpType::Ud {
            self.inner.st.lock().state = CmIdState::Disconnect;
            return Ok(());
        }
        let ib = self.ib_id("disconnect")?;
        let r = dev.shared.cm_call(move |cm, now| cm.disconnect(now, ib))?;
        // Disconnecting twice, or after the peer's DREQ was answered, is not an error.
        if let Err(e) = r
            && self.state() != CmIdState::Disconnect
        {
            return Err(e.into());
        }
        self.inner.st.lock().state = CmIdState::Disconnect;
        Ok(())
    }

    /// `rdma_destroy_id` (the same as dropping the id).
    pub fn destroy(self) {}
}

impl Drop for CmId {
    fn drop(&mut self) {
        let (ib, listens) = {
            let mut st = self.inner.st.lock();
            st.state = CmIdState::Destroyed;
            st.binding = None;
            st.qp = None;
            (st.ib.take(), std::mem::take(&mut st.listens))
        };
        self.inner.channel().purge(&self.inner);
        if let (Some(ib), Some(dev)) = (ib, &self.dev) {
            let weak = Arc::downgrade(&dev.shared);
            let _ = dev.shared.cm_call(move |cm, now| {
                let _ = cm.destroy(now, ib);
                if let Some(s) = weak.upgrade() {
                    rdma_cm(&s).conns.remove(&ib.0);
                }
            });
        }
        for d in listens.iter().filter_map(|w| w.upgrade()) {
            let inner = self.inner.clone();
            let weak = Arc::downgrade(&d.shared);
            let _ = d.shared.cm_call(move |cm, _| {
                let Some(s) = weak.upgrade() else { return };
                let mut g = rdma_cm(&s);
                let Some(pos) = g.listeners.iter().position(|(_, i)| Arc::ptr_eq(i, &inner)) else { return };
                let (l, _) = g.listeners.remove(pos);
                if !g.listeners.iter().any(|(x, _)| x.service_id() == l.service_id()) {
                    let _ = cm.cancel_listen(l.service_id());
                }
                if let Some(share) = &s.share
                    && !g.listeners.iter().any(|(x, _)| x.service_id() == l.service_id() && x.addr == l.addr)
                {
                    share.announce_listen(l.service_id(), l.addr, false);
                }
            });
        }
        self.qp = None;
    }
}

/// Moves a QP to RTR and RTS with the CM's attributes (`rdma_init_qp_attr` +
/// `ibv_modify_qp`).
fn move_qp(
    qp: &QueuePair,
    dev: &Device,
    attrs: CmQpAttrs,
    seq: u32,
    conn: Option<&ConnParam>,
    ack_timeout: Option<u8>,
) -> Result<()> {
    let o = rdma::RdmaQpOverrides {
        responder_resources: conn.map(|c| c.responder_resources).filter(|v| *v != rdma::RDMA_MAX_RESP_RES),
        initiator_depth: conn.map(|c| c.initiator_depth).filter(|v| *v != rdma::RDMA_MAX_INIT_DEPTH),
        ack_timeout,
        min_rnr_timer: None,
    };
    let mut access = Access::NONE;
    if attrs.remote_write {
        access = access | Access::REMOTE_WRITE;
    }
    if attrs.remote_read_atomic {
        access = access | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    }
    let (rtr, rts) = cm_moves(dev, attrs, seq, &o)?;
    if qp.state() == QpState::Init {
        // librdmacm's `ucma_modify_qp_rtr`: INIT again with the connection's access, then RTR.
        qp.modify(&QpAttrs::init(access))?;
        qp.modify(&rtr)?;
    }
    qp.modify(&rts)?;
    Ok(())
}

/// The RTR and RTS attributes of an RC connection's QP on `dev` (`rdma_init_qp_attr` for
/// those states): the CM's values, RTR's receive PSN the id's `seq`, the overrides applied.
fn cm_moves(
    dev: &Device,
    attrs: CmQpAttrs,
    seq: u32,
    o: &rdma::RdmaQpOverrides,
) -> Result<(QpAttrs, QpAttrs)> {
    let a = rdma::rdma_qp_attrs(attrs, seq, o);
    if a.transport != CmTransport::Rc {
        return Err(Error::NotSupported("connections other than RC"));
    }
    let local = Gid(a.path.local_gid).to_ip();
    let sgid = dev.gid_index_for(local).unwrap_or_else(|| dev.default_gid_index());
    let mut av = AddressVector::new(Gid(a.path.remote_gid), sgid);
    av.hop_limit = a.path.hop_limit;
    av.traffic_class = a.path.traffic_class;
    av.flow_label = a.path.flow_label;
    av.sl = a.path.sl;
    let mtu = Mtu::from_ibv(u32::from(a.path_mtu)).unwrap_or(Mtu::Mtu1024).min(dev.shared.port.active_mtu);
    let mut rtr = QpAttrs::rtr(av, mtu, Qpn::new(a.dest_qpn), Psn::new(a.rq_psn));
    rtr.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    rtr.min_rnr_timer = Some(a.min_rnr_timer);
    let mut rts = QpAttrs::rts(Psn::new(a.sq_psn));
    rts.retry_cnt = Some(a.retry_cnt);
    rts.rnr_retry = Some(a.rnr_retry);
    rts.max_rd_atomic = Some(a.max_rd_atomic);
    rts.timeout = Some(a.timeout);
    Ok((rtr, rts))
}

/// Sets up the RDMA CM's state of a device and installs its handler of the device's IB CM
/// events, the first time an id takes the device (binds or resolves to it, or listens on
/// it); an incoming request's new id takes the device its listener has.
pub(crate) fn install(dev: &Device) {
    let shared = &dev.shared;
    if shared.cm_state.get().is_some() {
        return;
    }
    let state = CmDevice { weak: dev.downgrade(), conns: Mutex::new(DevCm::default()) };
    if shared.cm_state.set(Box::new(state)).is_err() {
        return; // another thread installed it meanwhile
    }
    let weak = Arc::downgrade(shared);
    *shared.cm_sink.lock() = Some(Box::new(move |cm, now, ev| {
        if let Some(s) = weak.upgrade() {
            on_cm_event(&s, cm, now, ev);
        }
    }));
}

/// One IB CM event, on the engine thread (`cma_ib_handler`, `cma_ib_req_handler`).
pub(crate) fn on_cm_event(shared: &DeviceShared, cm: &mut CmEndpoint, now: Time, ev: IbEvent) {
    let ib = ev.id();
    if let IbEvent::ReqReceived { id, req, .. } = ev {
        on_request(shared, cm, now, id, req);
        return;
    }
    if let IbEvent::SidrReqReceived { id, service_id, private_data, from, .. } = ev {
        on_sidr_request(shared, cm, now, id, service_id, &private_data, &from);
        return;
    }
    let Some(inner) = rdma_cm(shared).conns.get(&ib.0).cloned() else { return };
    let Some((kind, status)) = rdma::rdma_event(&ev, true) else { return };
    match ev {
        IbEvent::RepReceived { rep, .. } => {
            // Cover the application's time until it takes the event (librdmacm sends the
            // RTU from rdma_get_cm_event).
            let _ = cm.mra(now, ib, rdma::CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]);
            let param = EventParam::Conn(ConnEventParam {
                private_data: rep.private_data.clone(),
                responder_resources: rep.responder_resources,
                initiator_depth: rep.initiator_depth,
                flow_control: rep.flow_control,
                retry_count: 0,
                rnr_retry_count: rep.rnr_retry_count,
                srq: rep.srq,
                qp_num: rep.remote_qpn,
            });
            inner.st.lock().rep = Some(rep);
            inner.push(CmEventType::ConnectResponse, 0, param);
        }
        IbEvent::RtuReceived { .. } => {
            // (the kernel's ESTABLISHED on the passive side carries no private data)
            inner.st.lock().state = CmIdState::Established;
            inner.push(kind, status, EventParam::Conn(ConnEventParam::default()));
        }
        IbEvent::UserEstablished { .. } => {
            inner.st.lock().state = CmIdState::Established;
            inner.push(kind, status, EventParam::None);
        }
        IbEvent::RejReceived { private_data, .. } => {
            inner.st.lock().state = CmIdState::Disconnect;
            inner.push(kind, status, EventParam::Conn(ConnEventParam { private_data, ..Default::default() }));
        }
        IbEvent::DreqReceived { .. } | IbEvent::DrepReceived { .. } => disconnected(&inner, kind, status),
        IbEvent::SendError { .. } if kind == CmEventType::Disconnected => disconnected(&inner, kind, status),
        IbEvent::SendError { .. } => {
            inner.st.lock().state = CmIdState::Disconnect;
            inner.push(kind, status, EventParam::None);
        }
        IbEvent::TimewaitExit { .. } => {
            rdma_cm(shared).conns.remove(&ib.0);
            inner.push(kind, status, EventParam::None);
        }
        IbEvent::SidrRepReceived { qpn, qkey, private_data, .. } => {
            let param = if kind == CmEventType::Established {
                let route = inner.st.lock().route;
                let Some(av) = route.and_then(|r| device_av(shared, &rdma::path_record(&r))) else {
                    inner.st.lock().state = CmIdState::Disconnect;
                    inner.push(CmEventType::AddrError, -libc::EINVAL, EventParam::None);
                    return;
                };
                let p = UdEventParam { private_data, ah_attr: av, qp_num: qpn, qkey: Qkey::new(qkey) };
                let mut st = inner.st.lock();
                st.state = CmIdState::Established;
                st.ud_peer = Some(p.clone());
                drop(st);
                EventParam::Ud(p)
            } else {
                inner.st.lock().state = CmIdState::Disconnect;
                EventParam::Ud(UdEventParam {
                    private_data,
                    ah_attr: AddressVector::new(Gid([0; 16]), crate::verbs::GidIndex::new(0)),
                    qp_num: 0,
                    qkey: Qkey::new(0),
                })
            };
            inner.push(kind, status, param);
        }
        _ => {}
    }
}

/// The address vector of a path on this device: the peer's GID, the GID index of our side's
/// address, hop limit, traffic class, flow label (`ib_init_ah_attr_from_path` on RoCE).
fn device_av(shared: &DeviceShared, path: &CmPathRecord) -> Option<AddressVector> {
    let dev = cm_device(shared).weak.upgrade()?;
    let sgid = dev.gid_index_for(Gid(path.local_gid).to_ip())?;
    let mut av = AddressVector::new(Gid(path.remote_gid), sgid);
    av.hop_limit = path.hop_limit;
    av.traffic_class = path.traffic_class;
    av.flow_label = path.flow_label;
    av.sl = path.sl;
    Some(av)
}

/// A SIDR request (`cma_ib_req_handler` for `IB_CM_SIDR_REQ_RECEIVED`): matched to a UD
/// listener (else SIDR_REP "reject", as `cm_destroy_id` answers a failed handler), a new id,
/// CONNECT_REQUEST with the 180 bytes of user private data and the requester's address. No
/// MRA: SIDR has none.
fn on_sidr_request(
    shared: &DeviceShared,
    cm: &mut CmEndpoint,
    now: Time,
    id: IbCmId,
    service_id: u64,
    private_data: &[u8],
    from: &MadAddr,
) {
    let refuse = |cm: &mut CmEndpoint| {
        let p = SidrRepParams {
            status: SidrStatus::Reject,
            qpn: 0,
            qkey: 0,
            info: Vec::new(),
            private_data: Vec::new(),
            ece: Default::default(),
        };
        let _ = cm.sidr_reply(now, id, &p);
        let _ = cm.destroy(now, id);
    };
    let listeners: Vec<(RdmaListen, Arc<IdInner>)> = rdma_cm(shared).listeners.clone();
    let ls: Vec<RdmaListen> = listeners.iter().map(|(l, _)| *l).collect();
    let addrs = &shared.addresses;
    let m = rdma::match_request(&ls, service_id, private_data, RequestKind::Sidr, |ip: IpAddr| {
        addrs.contains(&ip)
    });
    let Ok(m) = m else { return refuse(cm) };
    let listener = listeners[m.listener].1.clone();
    if listener.state() != CmIdState::Listen {
        return refuse(cm);
    }
    let path = CmPathRecord {
        local_gid: from.local_gid,
        remote_gid: from.remote_gid,
        flow_label: 0,
        traffic_class: from.traffic_class,
        hop_limit: 64,
        sl: 0,
        pkey: from.pkey,
        mtu: 0,
        rate: 0,
        packet_life_time: 0,
    };
    let Some(av) = device_av(shared, &path) else { return refuse(cm) };
    let Ok(new) = listener.new_request_id() else { return refuse(cm) };
    {
        let mut st = new.st.lock();
        st.state = CmIdState::Connect;
        st.dev = Some(cm_device(shared).weak.clone());
        st.src = Some(m.local);
        st.dst = Some(m.peer);
        st.ib = Some(id);
        st.sidr_pending = true;
    }
    rdma_cm(shared).conns.insert(id.0, new.clone());
    let param = EventParam::Ud(UdEventParam {
        private_data: m.private_data,
        ah_attr: av,
        qp_num: 0,
        qkey: Qkey::new(0),
    });
    let mut ev = EventData::new(CmEventType::ConnectRequest, 0, new, param);
    ev.listen = Some(listener.clone());
    ev.new_id = true;
    listener.push_event(ev);
}

/// DISCONNECTED, once per connection.
fn disconnected(inner: &Arc<IdInner>, kind: CmEventType, status: i32) {
    let mut st = inner.st.lock();
    if st.disconnected {
        return;
    }
    st.disconnected = true;
    st.state = CmIdState::Disconnect;
    drop(st);
    inner.push(kind, status, EventParam::None);
}

/// A connection request: matched to a listener (else REJ 28, as `cma_ib_req_handler`'s
/// failure), a new id, the delayed MRA, CONNECT_REQUEST on the listener's channel.
fn on_request(shared: &DeviceShared, cm: &mut CmEndpoint, now: Time, id: IbCmId, req: Box<ReqInfo>) {
    let listeners: Vec<(RdmaListen, Arc<IdInner>)> = rdma_cm(shared).listeners.clone();
    let ls: Vec<RdmaListen> = listeners.iter().map(|(l, _)| *l).collect();
    let addrs = &shared.addresses;
    let m = rdma::match_request(
        &ls,
        req.service_id,
        &req.private_data,
        RequestKind::Connect(req.transport),
        |ip: IpAddr| addrs.contains(&ip),
    );
    let Ok(m) = m else {
        let _ = cm.reject(now, id, RejReason::ConsumerDefined, &[], &[]);
        return;
    };
    let listener = listeners[m.listener].1.clone();
    if listener.state() != CmIdState::Listen {
        let _ = cm.reject(now, id, RejReason::ConsumerDefined, &[], &[]);
        return;
    }
    let Ok(new) = listener.new_request_id() else {
        let _ = cm.reject(now, id, RejReason::ConsumerDefined, &[], &[]);
        return;
    };
    {
        let mut st = new.st.lock();
        st.state = CmIdState::Connect;
        st.dev = Some(cm_device(shared).weak.clone());
        st.src = Some(m.local);
        st.dst = Some(m.peer);
        st.ib = Some(id);
        st.req = Some(req.clone());
    }
    rdma_cm(shared).conns.insert(id.0, new.clone());
    let _ = cm.mra(now, id, rdma::CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]);
    let param = EventParam::Conn(ConnEventParam {
        private_data: m.private_data,
        responder_resources: req.responder_resources,
        initiator_depth: req.initiator_depth,
        flow_control: req.flow_control,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: req.srq,
        qp_num: req.remote_qpn,
    });
    let mut ev = EventData::new(CmEventType::ConnectRequest, 0, new, param);
    ev.listen = Some(listener.clone());
    ev.new_id = true;
    listener.push_event(ev);
}
