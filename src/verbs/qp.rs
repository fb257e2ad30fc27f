//! Queue pairs (`ibv_qp`): creation, `modify_qp`, `query_qp` and posting.
//!
//! Posting validates the work request on the caller's thread — state, queue depth, SGE
//! keys, bounds and protection domain, operation — so every misuse is a typed error at once,
//! then hands it to the engine through a lock-free queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crossbeam_queue::SegQueue;

use super::cq::{CompletionQueue, CqShared};
use super::device::Device;
use super::error::{Error, Result};
use super::mr::check_sges;
use super::pd::ProtectionDomain;
use super::srq::{SharedReceiveQueue, SrqInner};
use crate::engine::command::Command;
use crate::transport::{Access, Mtu, Payload, PostError, QpCaps, QpState, QpType, Qpn, RecvWr, SendWr};
use crate::wire::Psn;
use crate::wire::gid::{Gid, GidIndex};

pub use crate::engine::shared::qp::{AddressVector, QpAttrs, QpInfo};
pub(crate) use crate::engine::shared::qp::{AhEntry, QpShared};

/// Creation attributes (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInitAttr<'a> {
    /// Transport type.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ for receive completions.
    pub recv_cq: &'a CompletionQueue,
    /// Queue capacities.
    pub cap: QpCaps,
    /// Generate a completion for every send work request, signaled or not.
    pub sq_sig_all: bool,
    /// Take receives from this shared receive queue instead of a receive queue of the QP's
    /// own (`cap.max_recv_wr` and `max_recv_sge` are then ignored).
    pub srq: Option<&'a SharedReceiveQueue>,
}

impl<'a> QpInitAttr<'a> {
    /// A QP of the given type with default capacities on the given CQs.
    pub fn new(
        qp_type: QpType,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> QpInitAttr<'a> {
        QpInitAttr { qp_type, send_cq, recv_cq, cap: QpCaps::default(), sq_sig_all: false, srq: None }
    }
    /// An RC QP with default capacities on the given CQs.
    pub fn rc(send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> QpInitAttr<'a> {
        QpInitAttr::new(QpType::Rc, send_cq, recv_cq)
    }
    /// A UC QP with default capacities on the given CQs.
    pub fn uc(send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> QpInitAttr<'a> {
        QpInitAttr::new(QpType::Uc, send_cq, recv_cq)
    }
    /// A UD QP with default capacities on the given CQs.
    pub fn ud(send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> QpInitAttr<'a> {
        QpInitAttr::new(QpType::Ud, send_cq, recv_cq)
    }
    /// The same with these queue capacities.
    #[must_use]
    pub fn with_caps(self, cap: QpCaps) -> QpInitAttr<'a> {
        QpInitAttr { cap, ..self }
    }
    /// The same with a send queue of `n` work requests (`cap.max_send_wr`).
    #[must_use]
    pub fn max_send_wr(mut self, n: u32) -> QpInitAttr<'a> {
        self.cap.max_send_wr = n;
        self
    }
    /// The same with a receive queue of `n` work requests (`cap.max_recv_wr`).
    #[must_use]
    pub fn max_recv_wr(mut self, n: u32) -> QpInitAttr<'a> {
        self.cap.max_recv_wr = n;
        self
    }
    /// The same with up to `n` scatter/gather entries per send work request.
    #[must_use]
    pub fn max_send_sge(mut self, n: u32) -> QpInitAttr<'a> {
        self.cap.max_send_sge = n;
        self
    }
    /// The same with up to `n` scatter/gather entries per receive work request.
    #[must_use]
    pub fn max_recv_sge(mut self, n: u32) -> QpInitAttr<'a> {
        self.cap.max_recv_sge = n;
        self
    }
    /// The same with inline sends of up to `n` bytes.
    #[must_use]
    pub fn max_inline_data(mut self, n: u32) -> QpInitAttr<'a> {
        self.cap.max_inline_data = n;
        self
    }
    /// The same taking its receives from `srq`.
    #[must_use]
    pub fn with_srq(self, srq: &'a SharedReceiveQueue) -> QpInitAttr<'a> {
        QpInitAttr { srq: Some(srq), ..self }
    }
    /// The same generating a completion for every send work request (`sq_sig_all`).
    #[must_use]
    pub fn signal_all(self) -> QpInitAttr<'a> {
        QpInitAttr { sq_sig_all: true, ..self }
    }
}

/// One end of a connection: what two peers exchange out of band (over TCP, a file, a
/// message) before they connect their QPs: the GID to send to, the QP number and the first PSN
/// (rdma-core's pingpong record, the `ibverbs` crate's `QueuePairEndpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    /// The GID packets to this QP go to (the peer device's [`Device::own_gid`]).
    pub gid: Gid,
    /// The QP number.
    pub qpn: Qpn,
    /// The first PSN this QP sends (what its peer expects first).
    pub psn: Psn,
}

/// A random starting PSN (24 bits), as ibverbs programs pick with `lrand48() & 0xffffff`.
pub fn random_psn() -> Psn {
    Psn::new(crate::engine::random::u32())
}

/// The attributes [`QueuePair::connect`] uses beyond the two endpoints. The defaults are
/// perftest's: timeout 14 (67 ms), 7 retries, infinite RNR retries, RNR timer 12 (0.64 ms),
/// 16 outstanding READs/atomics each way, the port's active MTU, the device's own GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Remote access rights granted to the peer (RC and UC; UC ignores READ and atomics).
    pub access: Access,
    /// Path MTU; `None`: the port's active MTU.
    pub mtu: Option<Mtu>,
    /// The source GID; `None`: [`Device::default_gid_index`].
    pub sgid_index: Option<GidIndex>,
    /// Local ACK timeout code (4.096 µs × 2^timeout; RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries, 7 = infinite (RC).
    pub rnr_retry: u8,
    /// RNR NAK timer code this responder asks for (RC).
    pub min_rnr_timer: u8,
    /// READs/atomics outstanding as requester (RC).
    pub max_rd_atomic: u8,
    /// READs/atomics accepted as responder (RC).
    pub max_dest_rd_atomic: u8,
    /// Hop limit of the packets.
    pub hop_limit: u8,
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            mtu: None,
            sgid_index: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

impl ConnectOptions {
    /// The defaults with these remote access rights.
    pub fn with_access(access: Access) -> ConnectOptions {
        ConnectOptions { access, ..ConnectOptions::default() }
    }
}

/// A queue pair. Dropping it destroys it.
pub struct QueuePair {
    pub(crate) shared: Arc<QpShared>,
    device: Device,
    _cqs: (Arc<CqShared>, Arc<CqShared>),
    /// Keeps the SRQ alive while the QP uses it.
    _srq: Option<Arc<SrqInner>>,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair").field("qpn", &format_args!("{:#x}", self.shared.qpn)).finish()
    }
}

impl QueuePair {
    pub(crate) fn create(pd: &ProtectionDomain, init: &QpInitAttr<'_>) -> Result<QueuePair> {
        let dev = &pd.device;
        let attr = &dev.shared.attr;
        let c = init.cap;
        let limit = |v: u32, max: u32, what: &'static str| {
            if v > max { Err(Error::Limit { what, max: max as u64 }) } else { Ok(()) }
        };
        let mut c = c;
        if let Some(srq) = init.srq {
            if srq.inner.shared.pd != pd.id {
                return Err(Error::InvalidArgument("the SRQ belongs to another protection domain"));
            }
            if !Arc::ptr_eq(&srq.inner.device.shared, &dev.shared) {
                return Err(Error::InvalidArgument("the SRQ belongs to another device"));
            }
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
        limit(c.max_send_wr, attr.max_qp_wr, "max_qp_wr")?;
        limit(c.max_recv_wr, attr.max_qp_wr, "max_qp_wr")?;
        limit(c.max_send_sge, attr.max_sge, "max_sge")?;
        limit(c.max_recv_sge, attr.max_sge, "max_sge")?;
        limit(c.max_inline_data, attr.max_inline_data, "max_inline_data")?;
        if c.max_send_wr == 0 && c.max_recv_wr == 0 && init.srq.is_none() {
            return Err(Error::InvalidArgument("a QP needs a send or a receive queue"));
        }
        let n = dev.shared.qp_count.fetch_add(1, Ordering::Relaxed);
        if n >= attr.max_qp {
            dev.shared.qp_count.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Limit { what: "max_qp", max: attr.max_qp as u64 });
        }
        // QP numbers start at 0x11 and count up, as on a fresh rxe device (on a shared address,
        // within this member's slot: [`crate::engine::share::qpn_range`], from a random point when
        // the member joined others), skipping numbers in use once
        // the counter wraps. A QP that uses an SRQ must live on the SRQ's engine (QP `q` on
        // engine `q % engines`): the next number that maps there.
        let want = init.srq.map(|s| dev.shared.engine_of(s.inner.shared.srqn));
        let (base, span) = crate::engine::share::qpn_range(dev.shared.share.as_ref().map(|s| s.slot));
        let qpn = {
            let mut used = dev.shared.qpns.lock();
            let mut tries = 0u32;
            loop {
                let q = base + dev.shared.next_qpn.fetch_add(1, Ordering::Relaxed) % span;
                tries += 1;
                if want.is_none_or(|e| dev.shared.engine_of(q) == e) && used.insert(q) {
                    break q;
                }
                if tries > span {
                    dev.shared.qp_count.fetch_sub(1, Ordering::Relaxed);
                    return Err(Error::Limit { what: "max_qp", max: attr.max_qp as u64 });
                }
            }
        };
        let shared = Arc::new(QpShared {
            qpn,
            qp_type: init.qp_type,
            pd: pd.id,
            caps: c,
            sq_sig_all: init.sq_sig_all,
            state: AtomicU8::new(0),
            path_mtu: AtomicU8::new(Mtu::Mtu256 as u8),
            send_outstanding: AtomicUsize::new(0),
            recv_outstanding: AtomicUsize::new(0),
            send_wrq: SegQueue::new(),
            recv_wrq: SegQueue::new(),
            scheduled: std::sync::atomic::AtomicBool::new(false),
            srq: init.srq.map(|s| s.inner.shared.clone()),
        });
        let cqs = (init.send_cq.shared.clone(), init.recv_cq.shared.clone());
        let created = dev.shared.call_for(qpn, |reply| Command::CreateQp {
            shared: shared.clone(),
            send_cq: cqs.0.clone(),
            recv_cq: cqs.1.clone(),
            reply,
        });
        if let Err(e) = created {
            dev.shared.qpns.lock().remove(&qpn);
            dev.shared.qp_count.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        Ok(QueuePair { shared, device: dev.clone(), _cqs: cqs, _srq: init.srq.map(|s| s.inner.clone()) })
    }

    /// The QP number.
    pub fn qp_num(&self) -> Qpn {
        Qpn::new(self.shared.qpn)
    }
    /// The transport type.
    pub fn qp_type(&self) -> QpType {
        self.shared.qp_type
    }
    /// The state as last published by the engine.
    pub fn state(&self) -> QpState {
        self.shared.state()
    }
    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attrs: &QpAttrs) -> Result<()> {
        if let Some(p) = attrs.port_num
            && p != 1
        {
            return Err(Error::InvalidArgument("port_num must be 1"));
        }
        if let Some(k) = attrs.pkey_index
            && k != 0
        {
            return Err(Error::InvalidArgument("pkey_index must be 0 (the P_Key table has one entry)"));
        }
        if let Some(av) = attrs.av {
            let sgid = self.device.gid(av.sgid_index)?;
            // (Every GID of the table is an address the device serves.)
            if av.dgid.is_zero() || av.dgid.to_ip().is_ipv4() != sgid.to_ip().is_ipv4() {
                return Err(Error::Unreachable(av.dgid));
            }
        }
        let qpn = self.shared.qpn;
        let attrs = *attrs;
        self.device.shared.call_for(qpn, |reply| Command::ModifyQp { qpn, attrs, reply })?
    }

    /// This QP's endpoint for a peer: the device's own GID, the QP number and `psn`, the
    /// first PSN it will send (pass the same to [`QueuePair::connect`]).
    pub fn endpoint(&self, psn: Psn) -> QpEndpoint {
        QpEndpoint { gid: self.device.own_gid(), qpn: self.qp_num(), psn }
    }

    /// Connects an RC or UC QP to its peer in one call: INIT (from RESET; a QP already in INIT
    /// keeps its access rights), RTR (to `remote`) and RTS (sending from `local.psn`), with
    /// `opts`. `local` is what this side sent the peer ([`QueuePair::endpoint`]), `remote` what
    /// it received. The peer may send as soon as this returns: to have receives posted by
    /// then, move the QP to INIT first (`qp.modify(&QpAttrs::init(access))`) and post them
    /// before connecting.
    ///
    /// The same as the three [`QueuePair::modify`] calls with [`QpAttrs::init`],
    /// [`QpAttrs::rtr`] and [`QpAttrs::rts`] (UC: [`QpAttrs::rtr_uc`],
    /// [`QpAttrs::rts_unreliable`]), which remain available for other attribute sets.
    pub fn connect(&self, local: &QpEndpoint, remote: &QpEndpoint, opts: &ConnectOptions) -> Result<()> {
        let qp_type = self.qp_type();
        if qp_type == QpType::Ud {
            return Err(Error::InvalidArgument("a UD QP has no peer to connect to: use QpAttrs::init_ud"));
        }
        if local.qpn != self.qp_num() || self.device.gid_index_for(local.gid.to_ip()).is_none() {
            return Err(Error::InvalidArgument("the local endpoint is another QP's"));
        }
        let sgid_index = opts.sgid_index.unwrap_or_else(|| self.device.default_gid_index());
        let mut av = AddressVector::new(remote.gid, sgid_index);
        av.hop_limit = opts.hop_limit;
        av.traffic_class = opts.traffic_class;
        let mtu = opts.mtu.unwrap_or(self.device.query_port().active_mtu);
        match self.state() {
            QpState::Reset => self.modify(&QpAttrs::init(opts.access))?,
            QpState::Init => {}
            _ => return Err(Error::InvalidArgument("connect needs a QP in RESET or INIT")),
        }
        if qp_type == QpType::Uc {
            self.modify(&QpAttrs::rtr_uc(av, mtu, remote.qpn, remote.psn))?;
            return self.modify(&QpAttrs::rts_unreliable(local.psn));
        }
        let rtr = QpAttrs {
            max_dest_rd_atomic: Some(opts.max_dest_rd_atomic),
            min_rnr_timer: Some(opts.min_rnr_timer),
            ..QpAttrs::rtr(av, mtu, remote.qpn, remote.psn)
        };
        self.modify(&rtr)?;
        self.modify(&QpAttrs {
            timeout: Some(opts.timeout),
            retry_cnt: Some(opts.retry_cnt),
            rnr_retry: Some(opts.rnr_retry),
            max_rd_atomic: Some(opts.max_rd_atomic),
            ..QpAttrs::rts(local.psn)
        })
    }

    /// `ibv_query_qp`.
    pub fn query(&self) -> Result<QpInfo> {
        let qpn = self.shared.qpn;
        self.device
            .shared
            .call_for(qpn, |reply| Command::QueryQp { qpn, reply })?
            .ok_or(Error::NoSuchQp(Qpn::new(qpn)))
    }

    fn check_sges(&self, sges: &[crate::transport::Sge], need_write: bool) -> Result<()> {
        check_sges(&self.device, self.shared.pd, sges, need_write)
    }

    /// `ibv_post_send` for one work request.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        let wr = self.check_send(wr)?;
        let before = self.reserve_send(1)?;
        self.shared.send_wrq.push(wr);
        // A send posted to an idle queue (a latency-bound application: one message at a
        // time) leaves from this thread at once; one posted behind others waits for the next
        // pass, which sends the queue's packets together (GSO batches).
        self.schedule(before == 0, true, true);
        Ok(())
    }

    /// Posts all of `wrs` or none (what `ibv_wr_complete` does with a batch built by the
    /// `ibv_wr_*` calls): every request is checked and room for all of them is reserved
    /// before the first is queued. On an error nothing was posted; the error comes with the
    /// index of the request that failed its checks (or 0 when the queue has no room for the
    /// whole batch).
    pub fn post_send_all(&self, wrs: Vec<SendWr>) -> std::result::Result<(), (usize, Error)> {
        let mut checked = Vec::with_capacity(wrs.len());
        for (i, wr) in wrs.into_iter().enumerate() {
            checked.push(self.check_send(wr).map_err(|e| (i, e))?);
        }
        if checked.is_empty() {
            return Ok(());
        }
        let n = checked.len();
        let before = self.reserve_send(n).map_err(|e| (0, e))?;
        for wr in checked {
            self.shared.send_wrq.push(wr);
        }
        self.schedule(before == 0, true, true);
        Ok(())
    }

    /// The checks `ibv_post_send` makes before queueing (state, operation, sizes, keys,
    /// address handle); applies `sq_sig_all`.
    fn check_send(&self, mut wr: SendWr) -> Result<SendWr> {
        let s = &self.shared;
        let state = self.state();
        if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err) {
            return Err(PostError::InvalidState(state).into());
        }
        let mtu = Mtu::from_ibv(s.path_mtu.load(Ordering::Relaxed) as u32).unwrap_or(Mtu::Mtu256);
        crate::transport::check_send_wr(s.qp_type, &s.caps, mtu, &wr)?;
        if let Payload::Sges(sg) = &wr.payload {
            self.check_sges(sg, wr.op.is_read_or_atomic())?;
        }
        if let Some(ud) = &wr.ud {
            match self.device.shared.ahs.read().get(&ud.ah) {
                Some(ah) if ah.pd == s.pd => {}
                Some(_) => {
                    return Err(Error::InvalidArgument(
                        "the address handle belongs to another protection domain",
                    ));
                }
                None => return Err(Error::InvalidArgument("no such address handle (destroyed?)")),
            }
        }
        if s.sq_sig_all {
            wr.signaled = true;
        }
        Ok(wr)
    }

    /// Reserves `n` send slots: posted and not yet finished must stay within the queue depth.
    /// Returns how many were outstanding before.
    fn reserve_send(&self, n: usize) -> Result<usize> {
        let s = &self.shared;
        let max = s.caps.max_send_wr as usize;
        s.send_outstanding
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| (cur + n <= max).then_some(cur + n))
            .map_err(|_| PostError::QueueFull.into())
    }

    /// `ibv_bind_mw`: binds the type 1 window `mw` to `len` bytes at `offset` of `mr` with
    /// the remote rights `access`, as a signaled work request `wr_id` on this QP (its
    /// completion has opcode [`WcOpcode::BindMw`](crate::transport::WcOpcode::BindMw)).
    /// Returns the rkey the window has once the bind ran. A zero `len` unbinds the window. A
    /// bind that fails its checks (region without [`Access::MW_BIND`], range outside the
    /// region, another PD, …) completes with `IBV_WC_MW_BIND_ERR` and takes the QP to the
    /// error state, as in rxe. Type 2 windows are bound with
    /// [`MemoryWindow::bind_op`](super::MemoryWindow::bind_op) and `post_send` instead.
    pub fn bind_mw(
        &self,
        wr_id: u64,
        mw: &super::MemoryWindow,
        mr: &super::MemoryRegion,
        offset: u64,
        len: u64,
        access: crate::transport::Access,
    ) -> Result<crate::transport::Rkey> {
        if mw.mw_type() != super::MwType::Type1 {
            return Err(Error::InvalidArgument(
                "ibv_bind_mw binds type 1 windows; post a bind work request for type 2",
            ));
        }
        let (op, rkey) = mw.bind_op(mr, offset, len, access);
        let mut wr = SendWr::new(wr_id, op, &[]);
        wr.signaled = true;
        self.post_send(wr)?;
        Ok(rkey)
    }

    /// Posts several send work requests in order; stops at the first refused one and returns
    /// its index with the error (the `bad_wr` of ibverbs).
    pub fn post_send_list(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> std::result::Result<(), (usize, Error)> {
        for (i, wr) in wrs.into_iter().enumerate() {
            self.post_send(wr).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// `ibv_post_recv` for one work request. The scatter list is checked now (key, PD,
    /// bounds, local write), and again when a message lands in it.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_checked(wr, true)
    }

    /// Like [`QueuePair::post_recv`], but the scatter list's keys, PD, bounds and local-write
    /// right are only checked when a message lands in it, as kernel rxe (and hardware) do: a
    /// bad entry then ends that receive with a local protection error completion and a
    /// "remote operational error" NAK to the sender. For applications that change a region
    /// under posted receives (`ibv_rereg_mr`) and expect the failure at execution time, as
    /// rdma-core's tests do.
    pub fn post_recv_checked_on_use(&self, wr: RecvWr) -> Result<()> {
        self.post_recv_checked(wr, false)
    }

    fn post_recv_checked(&self, wr: RecvWr, check_now: bool) -> Result<()> {
        let s = &self.shared;
        let state = self.state();
        if state == QpState::Reset {
            return Err(PostError::InvalidState(state).into());
        }
        if s.srq.is_some() {
            return Err(PostError::UsesSrq.into());
        }
        crate::transport::Qp::check_recv_wr(&s.caps, &wr)?;
        if check_now {
            self.check_sges(&wr.sg_list, true)?;
        }
        let max = s.caps.max_recv_wr as usize;
        if s.recv_outstanding
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return Err(PostError::QueueFull.into());
        }
        s.recv_wrq.push(wr);
        // A receive is taken before every packet its QP gets, so in the states in which
        // packets come (or will, after a modify the engine runs) nobody needs to run for it
        // now. Waking a sleeping engine per receive cost a context switch per message, which
        // on a small machine took the CPU from the spinning application. In the other states
        // (ERR flushes it at once) the engine is told. (The state is read after the push: an
        // engine that published ERR before it went to sleep is woken.)
        let lazy =
            matches!(self.state(), QpState::Init | QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe);
        self.schedule(false, !lazy, false);
        Ok(())
    }

    /// Tells the engine the QP has new work; with `inline`, runs it on this thread instead
    /// when inline progress is on and no other thread is driving the device (otherwise the
    /// one that is, or the engine, woken if it sleeps when `wake` says so, takes it from the
    /// queue). `send`: work requests for the send queue, which may be left to the thread
    /// that polls the device (below).
    ///
    /// The QP is queued for the engine once until it takes its work (`scheduled`), but an
    /// inline send runs here even when it already is: a receive posted just before (queued,
    /// not run: [`QueuePair::post_recv`]) must not hand the send that follows to the engine
    /// thread.
    fn schedule(&self, inline: bool, wake: bool, send: bool) {
        let dev = &self.device.shared;
        let qpn = self.shared.qpn;
        let link = &dev.engines[dev.engine_of(qpn)];
        if !self.shared.scheduled.swap(true, Ordering::SeqCst) {
            link.posted.push(qpn);
        }
        let ran = inline && self.device.progress_inline_for(qpn, false);
        // A send posted behind others while an application thread drives the engine (it polls
        // this device's CQs and makes the progress itself): its next poll takes this work
        // with the rest of the queue (one GSO send). Waking the engine for it cost an eventfd
        // write here and a wake-up there per post (8 % of a `send-bw -s 64` client's
        // samples), and the engine then took the CPU the other side's poller needed. Left
        // only when the engine looks again by itself no later than the end of the poller's
        // inline window (its last inline pass and 1 ms): an engine that went to sleep while
        // the window was open sleeps no longer than it (`Engine::run`), and one whose
        // deadline has passed is up already. (No clock reading here: the deadline says it.)
        // A thread that stops polling to sleep on a CQ wakes it for what waits
        // ([`super::Device::hear_engines`]).
        let poller_takes_it = send
            && !inline
            && dev
                .inline_busy_until(dev.engine_of(qpn))
                .is_some_and(|until| link.engine_deadline.load(Ordering::SeqCst) <= until.as_nanos());
        if wake && !ran && !poller_takes_it {
            link.wake_if_sleeping();
        }
        if inline {
            super::cq::hear_after_send(&self.device);
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let qpn = self.shared.qpn;
        let _ = self.device.shared.call_for(qpn, |reply| Command::DestroyQp { qpn, reply });
        self.device.shared.qpns.lock().remove(&qpn);
        self.device.shared.qp_count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ProtectionDomain {
    /// `ibv_create_qp`.
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<QueuePair> {
        QueuePair::create(self, init)
    }
}
