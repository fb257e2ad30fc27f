//! The responder: executes incoming requests and answers them (kernel rxe's `rxe_resp.c`).
//!
//! `Qp::responder_handle` takes one request packet through rxe's checks in rxe's order —
//! CHK_PSN, CHK_OP_SEQ, CHK_OP_VALID, CHK_RESOURCE, CHK_LENGTH, CHK_RKEY, EXECUTE, COMPLETE,
//! ACKNOWLEDGE — and queues the response (ACK, NAK, READ response, atomic ACK), which
//! `Qp::responder_transmit` turns into packets.
//!
//! Two deliberate differences from rxe 6.1, both what the IBTA and RDMA NICs do:
//! - a SEND longer than the receive buffer completes the receive with `LOC_LEN_ERR` and is
//!   NAKed as an invalid request (rxe: `LOC_QP_OP_ERR` and a remote operational error NAK);
//! - packet lengths are checked against the path MTU (First/Middle exactly one MTU, Last and
//!   Only at most one), as rxe does from 6.2 on.
//!
//! READ responses read memory when each response packet is built, not when the request
//! arrives, so a later, unfenced WRITE from the same requester may be visible in them — the
//! requester's fence (`IBV_SEND_FENCE`) orders the two, as on hardware.

use super::ids::{Qpn, Rkey};
use super::memory::{Access, AtomicOp, MemError, Memory};
use super::qp::{Qp, QpEvent, QpState, QpType, packets_for};
use super::sgl::scatter;
use super::wqe::{CurRecv, RdmaCursor, Resource, Response};
use super::wr::{WcOpcode, WcStatus, WorkCompletion};
use super::{Time, Transmit};
use crate::wire::aeth::{NakCode, Syndrome};
use crate::wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, Opcode, Operation, Packet, PacketRepr, Position, Psn,
};

/// What a failed check does (rxe's error states, §6.6 of docs/design/rxe-behaviour.md).
struct Fatal {
    nak: NakCode,
    recv_status: WcStatus,
    event: QpEvent,
}

const INVALID_REQUEST: Fatal =
    Fatal { nak: NakCode::InvalidRequest, recv_status: WcStatus::RemInvReqErr, event: QpEvent::RequestError };
const ACCESS_ERROR: Fatal = Fatal {
    nak: NakCode::RemoteAccessError,
    recv_status: WcStatus::RemAccessErr,
    event: QpEvent::AccessError,
};

impl Qp {
    /// Handles a request packet (the QP is in RTR, RTS or SQD).
    pub(crate) fn responder_handle<M: Memory>(
        &mut self,
        _now: Time,
        pkt: &Packet<'_>,
        grh: Option<&[u8; super::wr::GRH_LEN]>,
        mem: &M,
    ) {
        match self.qp_type {
            QpType::Rc => self.rc_request(pkt, mem),
            QpType::Uc => self.uc_request(pkt, mem),
            QpType::Ud => self.ud_request(pkt, grh, mem),
        }
    }

    /// A class C/A error: NAK, complete the receive WQE in progress with an error, QP to ERR.
    fn resp_fatal(&mut self, psn: Psn, f: Fatal) {
        tracing::warn!(qpn = self.qpn, %psn, nak = ?f.nak, "NAK sent, QP to ERR");
        let msn = self.resp.msn;
        self.resp.push(Response::Ack { psn, syndrome: Syndrome::Nak(f.nak), msn }, &mut self.counters);
        self.counters.send_nak_err += 1;
        if let Some(cur) = self.resp.recv.take() {
            self.recv_wcs.push_back(WorkCompletion::new(
                cur.wr.wr_id,
                f.recv_status,
                WcOpcode::Recv,
                Qpn::new(self.qpn),
            ));
        }
        self.events.push_back(f.event);
        self.enter_error(true);
    }

    fn rc_request<M: Memory>(&mut self, pkt: &Packet<'_>, mem: &M) {
        let bth = pkt.bth();
        let psn = bth.psn();
        let info = pkt.info();
        let op = info.opcode;
        let mtu = self.mtu();

        // CHK_PSN: one NAK per gap, then silence until the expected PSN arrives (C9-110);
        // anything earlier is a duplicate.
        let d = psn.diff(self.resp.psn);
        if d > 0 {
            if self.resp.sent_psn_nak {
                self.counters.rcvd_dropped += 1;
            } else {
                self.resp.sent_psn_nak = true;
                self.counters.out_of_seq_request += 1;
                tracing::debug!(qpn = self.qpn, %psn, expected = %self.resp.psn, "sequence NAK sent (a gap)");
                let (expected, msn) = (self.resp.psn, self.resp.msn);
                self.resp.push(
                    Response::Ack { psn: expected, syndrome: Syndrome::Nak(NakCode::PsnSequenceError), msn },
                    &mut self.counters,
                );
            }
            return;
        }
        if d < 0 {
            self.counters.duplicate_request += 1;
            self.duplicate_request(pkt);
            return;
        }
        self.resp.sent_psn_nak = false;

        // CHK_OP_SEQ: Middle/Last only inside a message of the same kind (C9-?).
        let in_send = matches!(self.resp.opcode, Some(Opcode::RC_SEND_FIRST | Opcode::RC_SEND_MIDDLE));
        let in_write = matches!(self.resp.opcode, Some(Opcode::RC_WRITE_FIRST | Opcode::RC_WRITE_MIDDLE));
        let continues = matches!(info.position, Position::Middle | Position::Last);
        let seq_ok = if in_send {
            info.operation == Operation::Send && continues
        } else if in_write {
            info.operation == Operation::RdmaWrite && continues
        } else {
            !continues
        };
        if !seq_ok {
            return self.resp_fatal(psn, INVALID_REQUEST);
        }

        // CHK_OP_VALID: the QP's remote access rights.
        let need = match info.operation {
            Operation::RdmaReadRequest => Some(Access::REMOTE_READ),
            Operation::RdmaWrite => Some(Access::REMOTE_WRITE),
            Operation::CompareSwap | Operation::FetchAdd => Some(Access::REMOTE_ATOMIC),
            Operation::Send => None,
            _ => return self.resp_fatal(psn, INVALID_REQUEST),
        };
        if let Some(a) = need
            && !self.attr.access.contains(a)
        {
            return self.resp_fatal(psn, INVALID_REQUEST);
        }

        // CHK_RESOURCE: READ/atomic slots, and a receive WQE for what consumes one.
        if info.is_read_or_atomic()
            && (self.attr.max_dest_rd_atomic == 0
                || self.resp.reads_in_progress() >= self.attr.max_dest_rd_atomic as usize)
        {
            return self.resp_fatal(psn, INVALID_REQUEST);
        }
        let consumes_recv = (info.operation == Operation::Send && info.position.starts())
            || (info.operation == Operation::RdmaWrite && info.immediate());
        if consumes_recv && self.resp.recv.is_none() {
            // Fault injection: a SEND answered as if no receive were posted.
            let forced = info.operation == Operation::Send && std::mem::take(&mut self.resp.forced_rnr);
            match if forced { None } else { self.rq.pop_front() } {
                Some(wr) => self.resp.recv = Some(CurRecv { wr, offset: 0 }),
                None => {
                    // RNR NAK: the PSN is not consumed; the retry is processed as new.
                    self.counters.send_rnr_err += 1;
                    self.resp.forced_rnr_sent |= forced;
                    tracing::debug!(qpn = self.qpn, %psn, forced, "RNR NAK sent: no receive WQE posted");
                    let msn = self.resp.msn;
                    let syndrome = Syndrome::RnrNak { timer: self.attr.min_rnr_timer };
                    self.resp.push(Response::Ack { psn, syndrome, msn }, &mut self.counters);
                    return;
                }
            }
        }

        // CHK_LENGTH: payload against the path MTU and the packet's position.
        let len = pkt.payload().len() as u64;
        if matches!(info.operation, Operation::Send | Operation::RdmaWrite) {
            let ok = match info.position {
                Position::First | Position::Middle => len == mtu,
                Position::Last => len >= 1 && len <= mtu,
                Position::Only => len <= mtu,
            };
            if !ok {
                return self.resp_fatal(psn, INVALID_REQUEST);
            }
        }

        // CHK_RKEY.
        if let Some(reth) = pkt.reth() {
            self.resp.rdma = RdmaCursor {
                va: reth.va(),
                rkey: reth.rkey(),
                resid: reth.dma_len() as u64,
                length: reth.dma_len(),
            };
            // A zero-length transfer touches no memory: its R_Key is not checked (rxe).
            if reth.dma_len() != 0 {
                let access = need.unwrap_or(Access::REMOTE_WRITE);
                if mem
                    .check_remote(self.pd, self.qpn, reth.rkey(), reth.va(), reth.dma_len() as u64, access)
                    .is_err()
                {
                    return self.resp_fatal(psn, ACCESS_ERROR);
                }
            }
        }
        if info.operation == Operation::RdmaWrite {
            // The packet must carry exactly its share of the RETH length.
            let resid = self.resp.rdma.resid;
            let ok = if resid > mtu { len == mtu } else { len == resid };
            if !ok {
                return self.resp_fatal(psn, INVALID_REQUEST);
            }
        }
        if let Some(a) = pkt.atomic_eth()
            && !a.va().is_multiple_of(8)
        {
            return self.resp_fatal(psn, INVALID_REQUEST);
        }

        // EXECUTE.
        match info.operation {
            Operation::Send => {
                let Some(cur) = self.resp.recv.as_mut() else {
                    return self.resp_fatal(psn, INVALID_REQUEST);
                };
                let room = super::wr::sg_len(&cur.wr.sg_list).saturating_sub(cur.offset);
                if len > room {
                    let f = Fatal {
                        nak: NakCode::InvalidRequest,
                        recv_status: WcStatus::LocLenErr,
                        event: QpEvent::RequestError,
                    };
                    return self.resp_fatal(psn, f);
                }
                if scatter(mem, self.pd, &cur.wr.sg_list, cur.offset, pkt.payload()).is_err() {
                    let f = Fatal {
                        nak: NakCode::RemoteOperationalError,
                        recv_status: WcStatus::LocProtErr,
                        event: QpEvent::Fatal,
                    };
                    return self.resp_fatal(psn, f);
                }
                cur.offset += len;
            }
            Operation::RdmaWrite => {
                if len > 0 {
                    let c = &mut self.resp.rdma;
                    if mem.write_remote(self.pd, self.qpn, c.rkey, c.va, pkt.payload()).is_err() {
                        return self.resp_fatal(psn, ACCESS_ERROR);
                    }
                    c.va += len;
                    c.resid -= len;
                }
            }
            Operation::RdmaReadRequest => {
                let c = self.resp.rdma;
                let npkts = packets_for(c.resid, mtu);
                self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
                let last_psn = psn.add(npkts - 1);
                self.resp.add_resource(Resource::Read {
                    first_psn: psn,
                    last_psn,
                    rkey: c.rkey,
                    va: c.va,
                    length: c.length,
                });
                let msn = self.resp.msn;
                self.resp.out.push_back(Response::Read {
                    psn,
                    rkey: c.rkey,
                    va: c.va,
                    resid: c.resid,
                    first: true,
                    msn,
                    replay: false,
                });
                self.resp.psn = last_psn.next();
                self.resp.opcode = None;
                return;
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let a = pkt.atomic_eth().expect("atomic opcodes carry an AtomicETH");
                let aop = if info.operation == Operation::CompareSwap {
                    AtomicOp::CompareSwap { compare: a.compare(), swap: a.swap_add() }
                } else {
                    AtomicOp::FetchAdd { add: a.swap_add() }
                };
                let orig = match mem.atomic_remote(self.pd, self.qpn, a.rkey(), a.va(), aop) {
                    Ok(v) => v,
                    Err(MemError::Misaligned) => return self.resp_fatal(psn, INVALID_REQUEST),
                    Err(_) => return self.resp_fatal(psn, ACCESS_ERROR),
                };
                self.resp.add_resource(Resource::Atomic { psn, orig });
                self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
                self.resp.psn = psn.next();
                self.resp.ack_psn = self.resp.psn;
                self.resp.opcode = None;
                let msn = self.resp.msn;
                // Atomics are always acknowledged (with the original value).
                self.resp.out.push_back(Response::AtomicAck { psn, orig, msn });
                return;
            }
            _ => return self.resp_fatal(psn, INVALID_REQUEST),
        }
        let mut invalidated = None;
        if let Some(ieth) = pkt.ieth() {
            if mem.invalidate_remote(self.pd, self.qpn, ieth.rkey()).is_err() {
                return self.resp_fatal(psn, INVALID_REQUEST);
            }
            invalidated = Some(ieth.rkey());
        }
        let end = info.position.ends();
        if end {
            self.resp.msn = (self.resp.msn + 1) & 0xff_ffff;
        }
        self.resp.psn = psn.next();
        self.resp.ack_psn = self.resp.psn;
        self.resp.opcode = Some(op);

        // COMPLETE: a receive completion at the end of a SEND or WRITE with immediate.
        if end {
            self.complete_recv(pkt, invalidated);
        }

        // ACKNOWLEDGE: rxe answers exactly the packets that ask (AckReq).
        if bth.ack_req() {
            let msn = self.resp.msn;
            self.resp.push(
                Response::Ack { psn, syndrome: Syndrome::Ack { credits: 31 }, msn },
                &mut self.counters,
            );
        }
    }

    /// Fault injection (`rnr=K`): with `armed`, the next RC SEND that starts a new message
    /// (its PSN the expected one) is answered with an RNR NAK as if no receive were posted —
    /// the PSN is not consumed, the receive stays posted, and the requester retries after its
    /// RNR timer, as on an HCA whose receive queue ran dry. `armed: false` disarms. Returns
    /// whether such a NAK was sent since the last call.
    pub fn force_rnr_nak(&mut self, armed: bool) -> bool {
        self.resp.forced_rnr = armed;
        std::mem::take(&mut self.resp.forced_rnr_sent)
    }

    /// Completes the receive WQE in progress when `pkt` ends a SEND or a WRITE with
    /// immediate (RC and UC).
    pub(crate) fn complete_recv(&mut self, pkt: &Packet<'_>, invalidated: Option<u32>) {
        let info = pkt.info();
        if !(info.operation == Operation::Send || info.immediate()) {
            return;
        }
        let Some(cur) = self.resp.recv.take() else { return };
        let send = info.operation == Operation::Send;
        let opcode = if send { WcOpcode::Recv } else { WcOpcode::RecvRdmaWithImm };
        let mut wc = WorkCompletion::new(cur.wr.wr_id, WcStatus::Success, opcode, Qpn::new(self.qpn));
        wc.byte_len = if send { cur.offset as u32 } else { self.resp.rdma.length };
        wc.imm_data = pkt.immdt().map(|i| i.imm());
        wc.invalidated_rkey = invalidated.map(Rkey::new);
        wc.solicited = pkt.bth().solicited();
        self.counters.rdma_recvs += 1;
        self.recv_wcs.push_back(wc);
    }

    /// A request with a PSN before the expected one (C9-105..C9-108).
    fn duplicate_request(&mut self, pkt: &Packet<'_>) {
        let info = pkt.info();
        let psn = pkt.bth().psn();
        let msn = self.resp.msn;
        match info.operation {
            Operation::Send | Operation::RdmaWrite => {
                // Never re-executed: re-acknowledge the last executed request (rxe uses the
                // PSN of the last SEND/WRITE/atomic, never one inside a READ's range).
                let ack = self.resp.ack_psn.sub(1);
                self.resp.push(
                    Response::Ack { psn: ack, syndrome: Syndrome::Ack { credits: 31 }, msn },
                    &mut self.counters,
                );
            }
            Operation::RdmaReadRequest => {
                let Some(reth) = pkt.reth() else { return };
                let found = self.resp.resources.iter().flatten().find_map(|r| match *r {
                    Resource::Read { first_psn, last_psn, rkey, va, length }
                        if !psn.is_before(first_psn) && !psn.is_after(last_psn) =>
                    {
                        Some((first_psn, rkey, va, length))
                    }
                    _ => None,
                });
                let Some((first_psn, rkey, va_org, length)) = found else {
                    self.counters.rcvd_dropped += 1;
                    return;
                };
                // The retried request must ask for a part of the original range.
                let (va, len) = (reth.va(), reth.dma_len() as u64);
                let inside = reth.rkey() == rkey
                    && va >= va_org
                    && len <= length as u64
                    && va.checked_add(len).is_some_and(|e| e <= va_org + length as u64);
                if !inside {
                    self.counters.rcvd_dropped += 1;
                    return;
                }
                // A response stream for this READ still being sent: the requester missed a
                // packet at `psn`, and what the stream sends past it would be dropped as out of
                // order. Restart the stream there instead of queueing a second one (hardware
                // does the same; rxe finishes the stream first and then replays).
                let npkts = (length as u64).div_ceil(self.mtu()).max(1) as u32;
                let first = psn == first_psn;
                let in_flight = self.resp.out.iter_mut().find_map(|r| match r {
                    Response::Read { psn: p, rkey: k, .. }
                        if *k == rkey && p.distance_from(first_psn) < npkts =>
                    {
                        Some(r)
                    }
                    _ => None,
                });
                if let Some(r) = in_flight {
                    self.counters.duplicate_read_replayed += 1;
                    let replay = matches!(r, Response::Read { replay: true, .. });
                    *r = Response::Read { psn, rkey, va, resid: len, first, msn, replay };
                    return;
                }
                self.counters.duplicate_read_replayed += 1;
                self.resp.out.push_back(Response::Read {
                    psn,
                    rkey,
                    va,
                    resid: len,
                    first,
                    msn,
                    replay: true,
                });
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let orig = self.resp.resources.iter().flatten().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                match orig {
                    Some(orig) => {
                        // Never re-executed: replay the saved original value.
                        self.counters.duplicate_atomic_replayed += 1;
                        self.resp.push(Response::AtomicAck { psn, orig, msn }, &mut self.counters);
                    }
                    None => self.counters.rcvd_dropped += 1,
                }
            }
            _ => self.counters.rcvd_dropped += 1,
        }
    }

    /// Builds the next response packet, if one is queued.
    pub(crate) fn responder_transmit<M: Memory>(&mut self, mem: &M, buf: &mut [u8]) -> Option<Transmit> {
        if self.state == QpState::Reset {
            return None;
        }
        let mtu = self.mtu();
        let dest = self.attr.dest_qpn.value();
        let front = self.resp.out.front_mut()?;
        let total = match *front {
            Response::Ack { psn, syndrome, msn } => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_ACK, dest, psn));
                r.aeth = Some(AethRepr::new(syndrome, msn));
                self.resp.out.pop_front();
                r.emit(buf, &[]).ok()?
            }
            Response::AtomicAck { psn, orig, msn } => {
                let mut r = PacketRepr::new(BthRepr::new(Opcode::RC_ATOMIC_ACK, dest, psn));
                r.aeth = Some(AethRepr::ack(msn));
                r.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
                self.resp.out.pop_front();
                r.emit(buf, &[]).ok()?
            }
            Response::Read { psn, rkey, va, resid, first, msn, .. } => {
                let fits = resid <= mtu;
                let (op, pos_ends) = match (first, fits) {
                    (true, true) => (Opcode::RC_READ_RESP_ONLY, true),
                    (true, false) => (Opcode::RC_READ_RESP_FIRST, false),
                    (false, true) => (Opcode::RC_READ_RESP_LAST, true),
                    (false, false) => (Opcode::RC_READ_RESP_MIDDLE, false),
                };
                let n = resid.min(mtu);
                let mut r = PacketRepr::new(BthRepr::new(op, dest, psn));
                if op != Opcode::RC_READ_RESP_MIDDLE {
                    r.aeth = Some(AethRepr::ack(msn));
                }
                let (range, total) = r.emit_headers(buf, n as usize).ok()?;
                if n > 0 && mem.read_remote(self.pd, self.qpn, rkey, va, &mut buf[range]).is_err() {
                    // The region went away under the READ (deregistered or invalidated).
                    self.resp.out.pop_front();
                    self.resp_fatal(psn, ACCESS_ERROR);
                    return self.responder_transmit(mem, buf);
                }
                if pos_ends {
                    self.resp.out.pop_front();
                } else if let Some(Response::Read { psn, va, resid, first, .. }) = self.resp.out.front_mut() {
                    *psn = psn.next();
                    *va += n;
                    *resid -= n;
                    *first = false;
                }
                total
            }
        };
        Some(Transmit { len: total, ud: None })
    }
}
