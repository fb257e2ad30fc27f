//! Two QPs wired by hand: the test sees, drops, edits and injects every packet.

use std::time::Duration;

use softroce::transport::sim::{PD, Pair, PairConfig};
use softroce::transport::*;
use softroce::wire::*;

pub struct Duo {
    pub a: Qp,
    pub b: Qp,
    pub ma: VecMemory,
    pub mb: VecMemory,
    pub now: Time,
    pub a_send: Vec<WorkCompletion>,
    pub a_recv: Vec<WorkCompletion>,
    pub b_send: Vec<WorkCompletion>,
    pub b_recv: Vec<WorkCompletion>,
}

/// Keys and addresses every Duo registers on both sides.
pub const BUF: u32 = 0x100; // local buffer, LOCAL_WRITE
pub const TGT: u32 = 0x200; // remote target, all rights
pub const BUF_ADDR: u64 = 0x10_0000;
pub const TGT_ADDR: u64 = 0x20_0000;
pub const LEN: usize = 1 << 20;

impl Duo {
    pub fn new(cfg: PairConfig) -> Duo {
        let p = Pair::new(cfg);
        let Pair { a, b, .. } = p;
        let d = Duo {
            a: a.qps.into_iter().next().unwrap(),
            b: b.qps.into_iter().next().unwrap(),
            ma: a.mem,
            mb: b.mem,
            now: Time::ZERO,
            a_send: vec![],
            a_recv: vec![],
            b_send: vec![],
            b_recv: vec![],
        };
        for m in [&d.ma, &d.mb] {
            m.add(PD, BUF, BUF_ADDR, LEN, Access::LOCAL_WRITE);
            m.add(PD, TGT, TGT_ADDR, LEN, Access::ALL);
        }
        d
    }

    pub fn sge(off: u64, len: u32) -> Sge {
        Sge { addr: BUF_ADDR + off, length: len, lkey: Lkey::new(BUF) }
    }

    pub fn remote(off: u64) -> RemoteAddr {
        RemoteAddr { addr: TGT_ADDR + off, rkey: Rkey::new(TGT) }
    }

    fn drain(&mut self) {
        while let Some(w) = self.a.poll_send_completion() {
            self.a_send.push(w);
        }
        while let Some(w) = self.a.poll_recv_completion() {
            self.a_recv.push(w);
        }
        while let Some(w) = self.b.poll_send_completion() {
            self.b_send.push(w);
        }
        while let Some(w) = self.b.poll_recv_completion() {
            self.b_recv.push(w);
        }
    }

    /// Every packet A has to send now.
    pub fn tx_a(&mut self) -> Vec<Vec<u8>> {
        let mut out = vec![];
        let mut buf = vec![0u8; 8192];
        while let Some(t) = self.a.poll_transmit(self.now, &self.ma, &mut buf) {
            out.push(buf[..t.len].to_vec());
        }
        // Whatever the test did to the packets: outstanding work is always timed.
        assert!(!self.a.silently_stalled(), "silent stall: {}", self.a.debug_state());
        self.drain();
        out
    }

    /// Every packet B has to send now.
    pub fn tx_b(&mut self) -> Vec<Vec<u8>> {
        let mut out = vec![];
        let mut buf = vec![0u8; 8192];
        while let Some(t) = self.b.poll_transmit(self.now, &self.mb, &mut buf) {
            out.push(buf[..t.len].to_vec());
        }
        // Whatever the test did to the packets: outstanding work is always timed.
        assert!(!self.b.silently_stalled(), "silent stall: {}", self.b.debug_state());
        self.drain();
        out
    }

    pub fn deliver_b(&mut self, pkts: &[Vec<u8>]) {
        for p in pkts {
            let pkt = Packet::new_checked(p).expect("well-formed");
            self.b.handle_packet(self.now, &pkt, &self.mb);
        }
        self.drain();
    }

    pub fn deliver_a(&mut self, pkts: &[Vec<u8>]) {
        for p in pkts {
            let pkt = Packet::new_checked(p).expect("well-formed");
            self.a.handle_packet(self.now, &pkt, &self.ma);
        }
        self.drain();
    }

    /// Moves time forward and fires due timers.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now, &self.ma);
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
            self.b.handle_timeout(self.now, &self.mb);
        }
        self.drain();
    }

    /// Exchanges packets without loss until both sides are quiet.
    pub fn settle(&mut self) {
        for _ in 0..100_000 {
            let pa = self.tx_a();
            let pb = self.tx_b();
            if pa.is_empty() && pb.is_empty() {
                return;
            }
            self.deliver_b(&pa);
            self.deliver_a(&pb);
        }
        panic!("no quiet after 100000 rounds");
    }

    /// Exchanges packets and fires timers until quiet and no timer is pending (or `limit`).
    pub fn run(&mut self, limit: Duration) {
        let end = self.now + limit;
        loop {
            self.settle();
            let next = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
            match next {
                Some(t) if t <= end => self.advance(t - self.now),
                _ => return,
            }
        }
    }
}

/// Opcode of a raw packet.
pub fn op(p: &[u8]) -> Opcode {
    Packet::new_checked(p).unwrap().bth().opcode()
}

/// PSN of a raw packet.
pub fn psn(p: &[u8]) -> Psn {
    Packet::new_checked(p).unwrap().bth().psn()
}

/// AETH syndrome of a raw packet.
pub fn syndrome(p: &[u8]) -> Option<Syndrome> {
    Packet::new_checked(p).unwrap().aeth().map(|a| AethRepr::parse(&a).syndrome())
}

/// AETH MSN of a raw packet.
pub fn msn(p: &[u8]) -> Option<u32> {
    Packet::new_checked(p).unwrap().aeth().map(|a| a.msn())
}

/// A response packet built by hand (zero ICRC: QPs do not check it).
pub fn response(opcode: Opcode, dest_qp: u32, psn: Psn, syndrome: Syndrome, msn: u32) -> Vec<u8> {
    let mut r = PacketRepr::new(BthRepr::new(opcode, dest_qp, psn));
    r.aeth = Some(AethRepr::new(syndrome, msn));
    if opcode == Opcode::RC_ATOMIC_ACK {
        r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: 0 });
    }
    let mut buf = vec![0u8; r.buffer_len(0)];
    r.emit(&mut buf, &[]).unwrap();
    buf
}
