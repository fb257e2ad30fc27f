//! The responder of the unreliable services, UC and UD (kernel rxe's `rxe_resp.c` paths for
//! `IB_QPT_UC` and `IB_QPT_UD`).
//!
//! Neither service acknowledges, so nothing here queues a response: a packet is executed or
//! dropped, and every drop is counted.
//!
//! **UC** checks what RC checks, in the same order, but answers no error with a NAK: a PSN gap
//! drops the rest of the message in progress, and the receiver resynchronises at the next
//! First or Only packet (IBTA C9-?? "class D1"; rxe's `drop_msg`). The receive WQE a broken
//! SEND had started is kept and reused for the next message, as rxe does; an RDMA WRITE's
//! packets that arrived before the gap stay in memory (the spec allows it). A message that
//! finds no receive WQE is dropped silently (RC would send an RNR NAK).
//!
//! **UD** takes SEND Only (with or without immediate) carrying a DETH. The Q_Key must be the
//! QP's (C10-?? — a mismatch is dropped silently and counted); the PSN is not checked. The
//! receive buffer gets the 40-byte GRH area first, then the payload, and the completion
//! reports the sender's QPN and `grh`.
//!
//! Two deliberate differences from rxe:
//! - a message longer than the receive WQE completes that WQE with `LOC_LEN_ERR` (what RDMA
//!   NICs report and what an application can act on) and the QP stays usable, where rxe
//!   without an SRQ drops the message silently and reuses the WQE;
//! - a UC packet with a PSN before the expected one (a duplicate, or a straggler of a message
//!   already given up) is dropped, where rxe takes a First/Only with any unexpected PSN as a
//!   new message and so delivers a duplicated SEND Only twice.

use super::ids::Qpn;
use super::memory::{Access, Memory};
use super::qp::Qp;
use super::sgl::scatter;
use super::wqe::{CurRecv, RdmaCursor};
use super::wr::{GRH_LEN, NetworkHdr, RecvWr, WcOpcode, WcStatus, WorkCompletion, sg_len};
use crate::wire::{Opcode, Operation, Packet, Position};

impl Qp {
    /// Abandons the UC message in progress: a started receive WQE is rewound for reuse.
    fn uc_drop_message(&mut self) {
        if let Some(cur) = self.resp.recv.as_mut() {
            cur.offset = 0;
        }
        self.resp.opcode = None;
        self.resp.drop_msg = true;
        self.counters.uc_msg_dropped += 1;
    }

    /// Completes the receive WQE in progress with an error status (UC/UD).
    fn unreliable_recv_error(&mut self, status: WcStatus) {
        if let Some(cur) = self.resp.recv.take() {
            self.recv_wcs.push_back(WorkCompletion::new(
                cur.wr.wr_id,
                status,
                WcOpcode::Recv,
                Qpn::new(self.qpn),
            ));
        }
    }

    pub(crate) fn uc_request<M: Memory>(&mut self, pkt: &Packet<'_>, mem: &M) {
        let bth = pkt.bth();
        let psn = bth.psn();
        let info = pkt.info();
        let op = info.opcode;
        let mtu = self.mtu();
        let starts = info.position.starts();

        // CHK_PSN: a packet from before the expected PSN is a duplicate or came too late (its
        // message was already given up): dropped. After a gap, nothing but the start of a new
        // message is taken.
        if psn.diff(self.resp.psn) < 0 {
            self.counters.duplicate_request += 1;
            return;
        }
        if self.resp.drop_msg || psn != self.resp.psn {
            if !starts {
                self.resp.psn = psn.next();
                if !self.resp.drop_msg {
                    self.uc_drop_message();
                } else {
                    self.counters.rcvd_dropped += 1;
                }
                return;
            }
            self.resp.drop_msg = false;
        }

        // CHK_OP_SEQ: a Middle/Last continues the message of its kind; a First/Only while a
        // message is open means its end was lost: abandon it and take the new one.
        let in_send = matches!(self.resp.opcode, Some(Opcode::UC_SEND_FIRST | Opcode::UC_SEND_MIDDLE));
        let in_write = matches!(self.resp.opcode, Some(Opcode::UC_WRITE_FIRST | Opcode::UC_WRITE_MIDDLE));
        if starts {
            if in_send || in_write {
                self.uc_drop_message();
                self.resp.drop_msg = false;
            }
        } else {
            let ok = (in_send && info.operation == Operation::Send)
                || (in_write && info.operation == Operation::RdmaWrite);
            if !ok {
                return self.uc_drop_message();
            }
        }

        // CHK_OP_VALID.
        match info.operation {
            Operation::Send => {}
            Operation::RdmaWrite if self.attr.access.contains(Access::REMOTE_WRITE) => {}
            _ => return self.uc_drop_message(),
        }

        // CHK_RESOURCE: a receive WQE for what consumes one, or the message is dropped.
        let consumes_recv = (info.operation == Operation::Send && starts) || info.immediate();
        if consumes_recv && self.resp.recv.is_none() {
            match self.rq.pop_front() {
                Some(wr) => self.resp.recv = Some(CurRecv { wr, offset: 0 }),
                None => {
                    self.counters.rcvd_no_wqe_drop += 1;
                    self.counters.uc_msg_dropped += 1;
                    self.resp.opcode = None;
                    self.resp.drop_msg = !info.position.ends();
                    return;
                }
            }
        }

        // CHK_LENGTH.
        let len = pkt.payload().len() as u64;
        let ok = match info.position {
            Position::First | Position::Middle => len == mtu,
            Position::Last => len >= 1 && len <= mtu,
            Position::Only => len <= mtu,
        };
        if !ok {
            return self.uc_drop_message();
        }

        // CHK_RKEY.
        if let Some(reth) = pkt.reth() {
            self.resp.rdma = RdmaCursor {
                va: reth.va(),
                rkey: reth.rkey(),
                resid: reth.dma_len() as u64,
                length: reth.dma_len(),
            };
            if reth.dma_len() != 0
                && mem
                    .check_remote(
                        self.pd,
                        self.qpn,
                        reth.rkey(),
                        reth.va(),
                        reth.dma_len() as u64,
                        Access::REMOTE_WRITE,
                    )
                    .is_err()
            {
                return self.uc_drop_message();
            }
        }
        if info.operation == Operation::RdmaWrite {
            let resid = self.resp.rdma.resid;
            let ok = if resid > mtu { len == mtu } else { len == resid };
            if !ok {
                return self.uc_drop_message();
            }
        }

        // EXECUTE.
        if info.operation == Operation::Send {
            let Some(cur) = self.resp.recv.as_mut() else {
                return self.uc_drop_message();
            };
            let room = sg_len(&cur.wr.sg_list).saturating_sub(cur.offset);
            let placed = if len > room {
                Err(WcStatus::LocLenErr)
            } else {
                scatter(mem, self.pd, &cur.wr.sg_list, cur.offset, pkt.payload())
                    .map_err(|_| WcStatus::LocProtErr)
            };
            if let Err(status) = placed {
                // The receive completes in error; the rest of the message is dropped.
                self.unreliable_recv_error(status);
                self.resp.opcode = None;
                self.resp.drop_msg = !info.position.ends();
                self.resp.psn = psn.next();
                self.counters.uc_msg_dropped += 1;
                return;
            }
            cur.offset += len;
        } else if len > 0 {
            let c = &mut self.resp.rdma;
            if mem.write_remote(self.pd, self.qpn, c.rkey, c.va, pkt.payload()).is_err() {
                return self.uc_drop_message();
            }
            c.va += len;
            c.resid -= len;
        }
        let end = info.position.ends();
        self.resp.psn = psn.next();
        self.resp.opcode = Some(op);

        // COMPLETE.
        if end {
            self.complete_recv(pkt, None);
        }
    }

    pub(crate) fn ud_request<M: Memory>(&mut self, pkt: &Packet<'_>, grh: Option<&[u8; GRH_LEN]>, mem: &M) {
        let info = pkt.info();
        let Some(deth) = pkt.deth() else {
            self.counters.rcvd_dropped += 1;
            return;
        };
        if info.operation != Operation::Send || info.position != Position::Only {
            self.counters.rcvd_dropped += 1;
            return;
        }
        if deth.qkey() != self.attr.qkey.value() {
            self.counters.rcvd_qkey_err += 1;
            return;
        }
        let payload = pkt.payload();
        let Some(wr) = self.rq.pop_front() else {
            self.counters.rcvd_no_wqe_drop += 1;
            return;
        };
        let RecvWr { wr_id, sg_list } = wr;
        let len = (GRH_LEN + payload.len()) as u64;
        let zero = [0u8; GRH_LEN];
        let placed = if len > sg_len(&sg_list) {
            Err(WcStatus::LocLenErr)
        } else {
            scatter(mem, self.pd, &sg_list, 0, grh.unwrap_or(&zero))
                .and_then(|_| scatter(mem, self.pd, &sg_list, GRH_LEN as u64, payload))
                .map_err(|_| WcStatus::LocProtErr)
        };
        if let Err(status) = placed {
            self.recv_wcs.push_back(WorkCompletion::new(wr_id, status, WcOpcode::Recv, Qpn::new(self.qpn)));
            return;
        }
        let mut wc = WorkCompletion::new(wr_id, WcStatus::Success, WcOpcode::Recv, Qpn::new(self.qpn));
        wc.byte_len = len as u32;
        wc.imm_data = pkt.immdt().map(|i| i.imm());
        wc.src_qp = Qpn::new(deth.src_qp());
        wc.grh = true;
        wc.network_hdr = grh.and_then(NetworkHdr::of_grh_area);
        wc.solicited = pkt.bth().solicited();
        self.counters.rdma_recvs += 1;
        self.recv_wcs.push_back(wc);
    }
}
