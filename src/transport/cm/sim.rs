//! Two CM endpoints joined by seeded lossy links, in virtual time, after the transport's
//! [`crate::transport::sim::Pair`]: [`CmPair::step`] jumps to the next packet arrival or timer.
//!
//! MADs travel with a CRC-32 trailer that the receiving side checks, standing in for the ICRC:
//! a corrupted MAD is dropped, as rxe drops it. Each side can run an automatic application
//! ([`AutoApp`]) that answers events the way an rdma_cm server and client do, so that long
//! randomized runs need no scripting.

use std::collections::VecDeque;
use std::time::Duration;

use super::rdma::CMA_CM_MRA_SERVICE_TIMEOUT;
use super::{CmConfig, CmEndpoint, CmEvent, CmId, CmState, MadAddr, RepParams, SidrRepParams};
use crate::transport::Time;
use crate::transport::sim::{LinkConfig, LossyLink};
use crate::wire::cm::GSI_QPN;

/// How a side answers events by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AutoApp {
    /// Passive: accept every request (after rdma_cm's delayed MRA), with this QPN base
    /// (connection `k` gets `qpn_base + k`). `None`: leave requests to the test.
    pub accept_qpn_base: Option<u32>,
    /// Active: answer every REP with an RTU (after rdma_cm's delayed MRA).
    pub complete_connects: bool,
    /// Answer every DREQ with a DREP.
    pub answer_dreq: bool,
    /// Delay before acting on a request or REP (the application's think time).
    pub think: Duration,
    /// Passive: answer every SIDR_REQ with success, naming this UD QPN and Q_Key (`None`:
    /// leave SIDR requests to the test).
    pub sidr_accept: Option<(u32, u32)>,
}

/// One side of a [`CmPair`].
#[derive(Debug)]
pub struct CmNode {
    /// The CM.
    pub cm: CmEndpoint,
    /// Our GID.
    pub gid: [u8; 16],
    /// Every event, with the time it was polled.
    pub events: Vec<(Time, CmEvent)>,
    /// Events not yet consumed by the test (it pops them).
    pub pending: VecDeque<CmEvent>,
    /// Automatic answers.
    pub auto: AutoApp,
    /// Actions the automatic application postponed by its think time.
    deferred: VecDeque<(Time, CmEvent)>,
    accepted: u32,
    /// MADs dropped because their CRC trailer was wrong (corrupted on the link).
    pub corrupt_dropped: u64,
    /// MADs this side sent to a GID that is not the peer's (must stay 0).
    pub misaddressed: u64,
}

impl CmNode {
    fn new(cfg: CmConfig, seed: u64, gid: [u8; 16]) -> CmNode {
        CmNode {
            cm: CmEndpoint::new(cfg, seed),
            gid,
            events: Vec::new(),
            pending: VecDeque::new(),
            auto: AutoApp::default(),
            deferred: VecDeque::new(),
            accepted: 0,
            corrupt_dropped: 0,
            misaddressed: 0,
        }
    }

    fn act(&mut self, now: Time, ev: &CmEvent) {
        let a = self.auto;
        match ev {
            CmEvent::ReqReceived { id, req, .. } => {
                if let Some(base) = a.accept_qpn_base {
                    let _ = self.cm.mra(now, *id, CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]);
                    self.accepted += 1;
                    let p = RepParams {
                        qpn: base + self.accepted,
                        starting_psn: 0x1000 + self.accepted,
                        responder_resources: req.responder_resources,
                        initiator_depth: req.initiator_depth,
                        failover_accepted: 0,
                        flow_control: false,
                        rnr_retry_count: 7,
                        srq: false,
                        private_data: Vec::new(),
                        ece: Default::default(),
                    };
                    let _ = self.cm.accept(now, *id, &p);
                }
            }
            CmEvent::RepReceived { id, .. } if a.complete_connects => {
                let _ = self.cm.mra(now, *id, CMA_CM_MRA_SERVICE_TIMEOUT, true, &[]);
                let _ = self.cm.ready_to_use(now, *id, &[]);
            }
            CmEvent::DreqReceived { id, .. } if a.answer_dreq => {
                let _ = self.cm.send_drep(now, *id, &[]);
            }
            CmEvent::SidrReqReceived { id, .. } => {
                if let Some((qpn, qkey)) = a.sidr_accept {
                    let p = SidrRepParams {
                        status: crate::wire::cm::SidrStatus::Success,
                        qpn,
                        qkey,
                        info: Vec::new(),
                        private_data: Vec::new(),
                        ece: Default::default(),
                    };
                    let _ = self.cm.sidr_reply(now, *id, &p);
                }
            }
            _ => {}
        }
    }

    fn poll_events(&mut self, now: Time) {
        while let Some(ev) = self.cm.poll_event() {
            self.events.push((now, ev.clone()));
            let wants = match &ev {
                CmEvent::ReqReceived { .. } => self.auto.accept_qpn_base.is_some(),
                CmEvent::RepReceived { .. } => self.auto.complete_connects,
                CmEvent::DreqReceived { .. } => self.auto.answer_dreq,
                CmEvent::SidrReqReceived { .. } => self.auto.sidr_accept.is_some(),
                _ => false,
            };
            if wants {
                self.deferred.push_back((now + self.auto.think, ev.clone()));
            }
            self.pending.push_back(ev);
        }
        while self.deferred.front().is_some_and(|(t, _)| *t <= now) {
            let (_, ev) = self.deferred.pop_front().expect("checked");
            self.act(now, &ev);
        }
    }

    fn next_deadline(&self) -> Option<Time> {
        [self.cm.poll_timeout(), self.deferred.front().map(|d| d.0)].into_iter().flatten().min()
    }

    /// The state of a connection (`None` once destroyed).
    pub fn state(&self, id: CmId) -> Option<CmState> {
        self.cm.state(id)
    }
}

/// Two CM endpoints, `a` and `b`, and a lossy link each way.
#[derive(Debug)]
pub struct CmPair {
    /// Virtual time.
    pub now: Time,
    /// Side A (10.0.0.1).
    pub a: CmNode,
    /// Side B (10.0.0.2).
    pub b: CmNode,
    /// A to B.
    pub ab: LossyLink,
    /// B to A.
    pub ba: LossyLink,
}

fn gid(last: u8) -> [u8; 16] {
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last]
}

impl CmPair {
    /// A pair with the default CM configuration (node GUIDs differ) and the same link
    /// behaviour both ways.
    pub fn new(link: LinkConfig, seed: u64) -> CmPair {
        let ca = CmConfig { node_guid: 0x0200_00ff_fe00_0001, ..CmConfig::default() };
        let cb = CmConfig { node_guid: 0x0200_00ff_fe00_0002, ..CmConfig::default() };
        CmPair::with_configs(ca, cb, link, seed)
    }

    /// A pair with given configurations.
    pub fn with_configs(ca: CmConfig, cb: CmConfig, link: LinkConfig, seed: u64) -> CmPair {
        CmPair {
            now: Time::ZERO,
            a: CmNode::new(ca, seed ^ 0xa, gid(1)),
            b: CmNode::new(cb, seed ^ 0xb, gid(2)),
            ab: LossyLink::new(link, seed.wrapping_mul(3).wrapping_add(1)),
            ba: LossyLink::new(link, seed.wrapping_mul(5).wrapping_add(2)),
        }
    }

    /// The address side A's MADs arrive with at B (and the reverse with `b_to_a`).
    pub fn addr(from: &CmNode, to: &CmNode) -> MadAddr {
        MadAddr { remote_gid: from.gid, local_gid: to.gid, traffic_class: 0, pkey: 0xffff, qpn: GSI_QPN }
    }

    fn flush(&mut self) {
        let (ga, gb) = (self.a.gid, self.b.gid);
        for (node, link, peer) in [(&mut self.a, &mut self.ab, gb), (&mut self.b, &mut self.ba, ga)] {
            while let Some(t) = node.cm.poll_transmit() {
                if t.to.remote_gid != peer || t.to.qpn != GSI_QPN {
                    node.misaddressed += 1;
                    continue;
                }
                let mut bytes = t.mad.to_vec();
                bytes.extend_from_slice(&crc32fast::hash(&t.mad).to_le_bytes());
                link.send(self.now, bytes);
            }
        }
    }

    fn deliver(now: Time, from: &CmNode, to: &mut CmNode, bytes: &[u8]) {
        let (mad, crc) = bytes.split_at(bytes.len().saturating_sub(4));
        if crc32fast::hash(mad).to_le_bytes() != crc {
            to.corrupt_dropped += 1;
            return;
        }
        let addr = CmPair::addr(from, to);
        to.cm.handle_mad(now, &addr, mad);
    }

    /// Moves everything queued: transmits onto the links, events into the nodes (and their
    /// automatic answers). Call after issuing commands.
    ///
    /// # Panics
    ///
    /// When an endpoint's [`CmEndpoint::check_invariants`] fails: the harness is for tests.
    pub fn settle(&mut self) {
        for n in [&self.a, &self.b] {
            if let Err(e) = n.cm.check_invariants() {
                panic!("CM invariant broken at {:?}: {e}", self.now);
            }
        }
        for _ in 0..64 {
            self.a.poll_events(self.now);
            self.b.poll_events(self.now);
            self.flush();
            if self.a.cm.poll_transmit_is_empty() && self.b.cm.poll_transmit_is_empty() {
                break;
            }
        }
    }

    /// The next time something happens, if anything will.
    pub fn next_time(&self) -> Option<Time> {
        [self.ab.next_delivery(), self.ba.next_delivery(), self.a.next_deadline(), self.b.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advances to the next event and processes everything due then. False when nothing is
    /// pending any more.
    pub fn step(&mut self) -> bool {
        self.settle();
        let Some(t) = self.next_time() else { return false };
        self.now = self.now.max(t);
        let now = self.now;
        while let Some(p) = self.ab.poll_deliver(now) {
            CmPair::deliver(now, &self.a, &mut self.b, &p);
        }
        while let Some(p) = self.ba.poll_deliver(now) {
            CmPair::deliver(now, &self.b, &mut self.a, &p);
        }
        self.a.cm.handle_timeout(now);
        self.b.cm.handle_timeout(now);
        self.settle();
        true
    }

    /// Steps until `done` holds or virtual time passes `limit`. True when `done` held.
    pub fn run_until(&mut self, limit: Time, mut done: impl FnMut(&CmPair) -> bool) -> bool {
        loop {
            self.settle();
            if done(self) {
                return true;
            }
            match self.next_time() {
                Some(t) if t <= limit => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(limit);
                    return done(self);
                }
            }
        }
    }

    /// Steps until nothing is pending or `limit` passes.
    pub fn run_idle(&mut self, limit: Time) {
        self.run_until(limit, |p| p.next_time().is_none());
    }

    /// Lets `d` of virtual time pass, processing what happens meanwhile.
    pub fn advance(&mut self, d: Duration) {
        let limit = self.now + d;
        self.run_until(limit, |_| false);
    }
}
