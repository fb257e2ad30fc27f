//! Drives two CM endpoints with arbitrary MAD sequences, commands and timer jumps: MADs made
//! of raw bytes, captured MADs (the seeds) and MADs the endpoints sent, mutated and aimed at
//! live connections; deliveries reordered, duplicated and dropped; every command in every
//! state.
//!
//! Invariants: nothing panics; every MAD an endpoint sends is a well-formed CM MAD (or the MAD
//! layer's GetResp); each endpoint's tables and timers stay consistent
//! (`CmEndpoint::check_invariants`: every waiting state has a retransmission timer, so no
//! connection waits forever; backlogs and the connection limit hold); one round of
//! transmission always ends.
//!
//! Input: a sequence of operations, each an opcode byte and its arguments (see `step`). The
//! seeds in `fuzz/corpus/cm` (written by `tests/fuzz_corpus.rs`) inject each captured MAD.
#![no_main]

#[allow(dead_code)]
mod layout;

use std::collections::VecDeque;
use std::time::Duration;

use layout::R;
use libfuzzer_sys::fuzz_target;
use softroce::transport::Time;
use softroce::transport::cm::*;
use softroce::wire::cm::{CmTransport, GSI_QPN, RejReason, SidrStatus};
use softroce::wire::mad::{MAD_LEN, Mad, MadRepr, method};

const TCP: u64 = 0x0106_1c06;
const UDP: u64 = 0x0111_1c06;

struct World {
    now: Time,
    cms: [CmEndpoint; 2],
    gids: [[u8; 16]; 2],
    /// MADs in flight: (destination side, bytes).
    flight: VecDeque<(usize, [u8; MAD_LEN])>,
    /// MADs seen, to mutate and replay.
    pool: Vec<[u8; MAD_LEN]>,
}

fn gid(last: u8) -> [u8; 16] {
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, last]
}

impl World {
    fn new(seed: u8) -> World {
        let cfg = |guid| CmConfig { node_guid: guid, max_connections: 48, ..CmConfig::default() };
        let mut w = World {
            now: Time::ZERO,
            cms: [CmEndpoint::new(cfg(0x5054_00ff_fe77_0003), seed.into()), CmEndpoint::new(cfg(0x5054_00ff_fe77_0002), 7)],
            gids: [gid(3), gid(2)],
            flight: VecDeque::new(),
            pool: Vec::new(),
        };
        w.cms[1].listen(TCP, 8).unwrap();
        w.cms[1].listen(UDP, 4).unwrap();
        w.cms[0].listen(TCP, 2).unwrap();
        w
    }

    fn addr(&self, from: usize, to: usize) -> MadAddr {
        MadAddr { remote_gid: self.gids[from], local_gid: self.gids[to], traffic_class: 0, pkey: 0xffff, qpn: GSI_QPN }
    }

    /// Moves what both endpoints sent into flight, checking each MAD.
    fn drain(&mut self) {
        for side in 0..2 {
            let mut n = 0;
            while let Some(t) = self.cms[side].poll_transmit() {
                n += 1;
                assert!(n < 10_000, "a round of transmission must end");
                let m = MadRepr::parse(&Mad::new_checked(&t.mad[..]).unwrap());
                let ok = (m.header.method == method::SEND && m.body.cm_attr().is_some())
                    || (m.header.method == method::GET_RESP && m.header.status == 0x000c);
                assert!(ok, "side {side} sent {m:?}");
                assert_eq!(t.to.qpn, GSI_QPN);
                let to = if t.to.remote_gid == self.gids[1 - side] { 1 - side } else { side };
                if self.pool.len() < 64 {
                    self.pool.push(t.mad);
                }
                self.flight.push_back((to, t.mad));
            }
            while self.cms[side].poll_event().is_some() {}
            if let Err(e) = self.cms[side].check_invariants() {
                panic!("side {side}: {e}");
            }
        }
    }

    fn conn(&self, side: usize, pick: u8) -> Option<CmId> {
        let ids: Vec<CmId> = self.cms[side].connections().map(|(id, _)| id).collect();
        (!ids.is_empty()).then(|| ids[pick as usize % ids.len()])
    }

    fn path(&self, side: usize) -> CmPathRecord {
        CmPathRecord {
            local_gid: self.gids[side],
            remote_gid: self.gids[1 - side],
            flow_label: 0x274e3,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            pkey: 0xffff,
            mtu: 3,
            rate: 0,
            packet_life_time: 18,
        }
    }

    fn step(&mut self, r: &mut R) -> Option<()> {
        let op = r.u8()?;
        let side = usize::from(op >> 7);
        match op & 0x7f {
            // Raw bytes to a side (any length up to 300).
            0..=15 => {
                let len = match r.u8()? {
                    0..=200 => MAD_LEN,
                    n => usize::from(n) + 44,
                };
                let bytes = r.bytes(len).to_vec();
                let from = self.addr(1 - side, side);
                self.cms[side].handle_mad(self.now, &from, &bytes);
            }
            // A pool MAD, mutated and aimed at a live connection, to a side.
            16..=47 => {
                if self.pool.is_empty() {
                    return Some(());
                }
                let mut m = self.pool[usize::from(r.u8()?) % self.pool.len()];
                for _ in 0..(r.u8()? % 4) {
                    let off = usize::from(r.u8()?) % MAD_LEN;
                    m[off] = r.u8()?;
                }
                let retarget = r.u8()?;
                if retarget & 1 != 0 {
                    if let Some(id) = self.conn(side, retarget >> 1) {
                        // Comm IDs sit at data bytes 0 (SIDR request ID) and 4 (remote).
                        let at = if retarget & 2 != 0 { 24 } else { 28 };
                        m[at..at + 4].copy_from_slice(&id.0.to_be_bytes());
                    }
                }
                let from = self.addr(1 - side, side);
                self.cms[side].handle_mad(self.now, &from, &m);
            }
            // Delivery: next, reordered, duplicated or dropped.
            48..=79 => {
                let k = usize::from(r.u8()?);
                if self.flight.is_empty() {
                    return Some(());
                }
                let i = if op & 1 == 0 { 0 } else { k % self.flight.len() };
                let (to, m) = self.flight[i];
                match op % 4 {
                    0 | 1 => {
                        self.flight.remove(i);
                    }
                    2 => {} // duplicate: deliver and keep
                    _ => {
                        self.flight.remove(i); // drop
                        return Some(());
                    }
                }
                let from = self.addr(1 - to, to);
                self.cms[to].handle_mad(self.now, &from, &m);
            }
            // Time jumps: small, to the next deadline, or huge.
            80..=95 => {
                let d = match r.u8()? % 4 {
                    0 => Duration::from_millis(u64::from(r.u16()?)),
                    1 => Duration::from_secs(u64::from(r.u16()?)),
                    2 => Duration::from_secs(100_000),
                    _ => {
                        let next = self.cms.iter().filter_map(|c| c.poll_timeout()).min();
                        next.map_or(Duration::ZERO, |t| t - self.now)
                    }
                };
                self.now = self.now + d;
                for cm in &mut self.cms {
                    cm.handle_timeout(self.now);
                }
            }
            // Active commands.
            96..=103 => {
                let psn = r.u32()?;
                let svc = if r.u8()? & 1 == 0 { TCP } else { 0x0106_1f3f };
                let pd_len = usize::from(r.u8()?);
                let private_data = r.bytes(if op & 1 == 0 { pd_len % 100 } else { pd_len }).to_vec();
                if op & 1 == 0 {
                    let p = ReqParams {
                        path: self.path(side),
                        service_id: svc,
                        qpn: 0x20 + u32::from(r.u8()?),
                        transport: if psn & 1 == 0 { CmTransport::Rc } else { CmTransport::Uc },
                        starting_psn: psn,
                        responder_resources: r.u8()?,
                        initiator_depth: r.u8()?,
                        flow_control: false,
                        retry_count: 7,
                        rnr_retry_count: 7,
                        remote_cm_response_timeout: r.u8()? % 32,
                        local_cm_response_timeout: 20,
                        max_cm_retries: r.u8()? % 16,
                        srq: false,
                        private_data,
                        ece: Ece::default(),
                    };
                    let _ = self.cms[side].connect(self.now, &p);
                } else {
                    let p = SidrReqParams {
                        path: self.path(side),
                        service_id: if svc == TCP { UDP } else { svc },
                        timeout: Duration::from_millis(u64::from(r.u16()?)),
                        max_cm_retries: r.u8()? % 16,
                        private_data,
                    };
                    let _ = self.cms[side].sidr_request(self.now, &p);
                }
            }
            // Commands on a connection, in whatever state it is.
            104..=119 => {
                let Some(id) = self.conn(side, r.u8()?) else { return Some(()) };
                let arg = r.u8()?;
                let pd = r.bytes(usize::from(arg % 8) * 32).to_vec();
                let now = self.now;
                let cm = &mut self.cms[side];
                let _ = match op % 12 {
                    0 => cm.accept(
                        now,
                        id,
                        &RepParams {
                            qpn: 0x40 + u32::from(arg),
                            starting_psn: u32::from(arg) << 8,
                            responder_resources: arg,
                            initiator_depth: arg,
                            failover_accepted: 0,
                            flow_control: false,
                            rnr_retry_count: 7,
                            srq: false,
                            private_data: pd,
                            ece: Ece::default(),
                        },
                    ),
                    1 => cm.reject(now, id, RejReason::ConsumerDefined, &pd[..pd.len().min(80)], &pd),
                    2 => cm.mra(now, id, arg % 32, arg & 0x80 != 0, &pd),
                    3 => cm.ready_to_use(now, id, &pd),
                    4 => cm.send_dreq(now, id, &pd),
                    5 => cm.send_drep(now, id, &pd),
                    6 => cm.disconnect(now, id),
                    7 => cm.establish(id),
                    8 => cm.destroy(now, id),
                    9 => cm.sidr_reply(
                        now,
                        id,
                        &SidrRepParams {
                            status: SidrStatus::from_u8(arg % 6).unwrap_or(SidrStatus::Reject),
                            qpn: 0x1d,
                            qkey: 0x0123_4567,
                            info: pd[..pd.len().min(80)].to_vec(),
                            private_data: pd,
                            ece: Ece::default(),
                        },
                    ),
                    10 => cm.qp_attrs(id).map(|_| ()),
                    _ => cm.mra(now, id, 24, true, &[]),
                };
            }
            // Listeners.
            _ => {
                let svc = [TCP, UDP, 0x0106_1f3f][usize::from(r.u8()? % 3)];
                if op & 1 == 0 {
                    let _ = self.cms[side].listen(svc, usize::from(r.u8()? % 16));
                } else {
                    let _ = self.cms[side].cancel_listen(svc);
                }
            }
        }
        self.drain();
        Some(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = R(data);
    let Some(seed) = r.u8() else { return };
    let mut w = World::new(seed);
    // The seeds: captured MADs to start from.
    for _ in 0..512 {
        if w.step(&mut r).is_none() {
            break;
        }
    }
    // Let every timer run out: afterwards nothing may wait any more. Each expiry either
    // resends (at most 15 times a connection) or ends a wait, so this terminates.
    for _ in 0..100_000 {
        let next = w.cms.iter().filter_map(|c| c.poll_timeout()).min();
        let Some(t) = next else { break };
        w.now = w.now.max(t);
        for cm in &mut w.cms {
            cm.handle_timeout(w.now);
        }
        w.drain();
        w.flight.clear();
    }
    for cm in &w.cms {
        let waiting = cm.connections().filter(|(_, s)| {
            matches!(s, CmState::ReqSent | CmState::RepSent | CmState::DreqSent | CmState::SidrReqSent
                | CmState::MraReqRcvd | CmState::MraRepRcvd | CmState::Timewait)
        });
        assert_eq!(waiting.count(), 0, "a connection still waits after every timer ran out");
    }
});
