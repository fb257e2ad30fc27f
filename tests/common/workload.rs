//! A workload runner over the transport simulator: posts a list of operations from A to B
//! (and optionally B to A), drives the pair in virtual time and checks that every message
//! completed exactly once, in order, with the right bytes in the right place — or with a
//! retry-exhaustion error after which everything else was flushed.

use std::time::Duration;

use softroce::transport::sim::{PD, Pair, PairConfig, Rng};
use softroce::transport::*;

/// One operation of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Send(u32),
    SendImm(u32),
    Write(u32),
    WriteImm(u32),
    Read(u32),
    CmpSwap,
    FetchAdd,
}

impl Op {
    fn len(self) -> u32 {
        match self {
            Op::Send(n) | Op::SendImm(n) | Op::Write(n) | Op::WriteImm(n) | Op::Read(n) => n,
            Op::CmpSwap | Op::FetchAdd => 8,
        }
    }
    fn needs_recv(self) -> bool {
        matches!(self, Op::Send(_) | Op::SendImm(_) | Op::WriteImm(_))
    }
}

// Keys of the regions each side registers.
const SRC: u32 = 0x100; // requester: data to send/write
const DST: u32 = 0x101; // requester: READ and atomic results
const RCV: u32 = 0x200; // responder: receive buffers
const TGT: u32 = 0x201; // responder: RDMA/atomic target
const BASE: [u64; 4] = [0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000];

fn pattern(seed: u64, i: usize, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9));
    (0..len).map(|_| r.next_u64() as u8).collect()
}

/// Where each operation's bytes live.
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    src: u64,
    dst: u64,
    rcv: u64,
    tgt: u64,
}

/// Outcome of a run.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Operations that completed successfully.
    pub completed: usize,
    /// The status that stopped the run, if any.
    pub error: Option<WcStatus>,
    /// Virtual time taken.
    pub elapsed: Duration,
    /// Packets offered to the A->B link.
    pub packets_ab: u64,
    /// Retransmissions A started.
    pub retries: u64,
    /// Of them, early ones A's probe started (not counted in `retries`).
    pub probes: u64,
    /// Tail probes A sent (single packets; see `Qp::tail_probe`).
    pub tail_probes: u64,
}

/// The runner for one direction: requester on `req` side (A when `forward`).
pub struct Workload {
    pub ops: Vec<Op>,
    pub seed: u64,
    /// Most send work requests outstanding.
    pub window: usize,
    /// Signal every Nth operation only (1 = all signaled). The last is always signaled.
    pub signal_every: usize,
    /// SGEs to split each send/write source into.
    pub gather: usize,
    /// Fence every Nth operation (0 = none).
    pub fence_every: usize,
    /// SGEs to split each receive buffer into.
    pub scatter: usize,
}

impl Workload {
    pub fn new(ops: Vec<Op>, seed: u64) -> Workload {
        Workload { ops, seed, window: 16, signal_every: 1, gather: 1, fence_every: 0, scatter: 1 }
    }

    fn split(addr: u64, len: u32, parts: usize, lkey: u32) -> Vec<Sge> {
        let parts = parts.max(1).min(len.max(1) as usize);
        let mut v = Vec::new();
        let mut off = 0u32;
        for k in 0..parts {
            let n = if k + 1 == parts { len - off } else { len / parts as u32 };
            v.push(Sge { addr: addr + off as u64, length: n, lkey: Lkey::new(lkey) });
            off += n;
        }
        v
    }

    /// Runs the workload on `cfg`, checking everything; panics with the seed on a violation.
    pub fn run(&self, cfg: PairConfig, limit: Duration) -> Outcome {
        let ctx = format!("seed={} mtu={:?} ab={:?} ops={}", cfg.seed, cfg.mtu, cfg.a_to_b, self.ops.len());
        let mut p = Pair::new(cfg);
        // Layout.
        let mut lay = vec![Layout::default(); self.ops.len()];
        let (mut src, mut dst, mut rcv, mut tgt) = (0u64, 0u64, 0u64, 64u64);
        for (i, op) in self.ops.iter().enumerate() {
            let n = op.len() as u64;
            let l = &mut lay[i];
            match op {
                Op::Send(_) | Op::SendImm(_) => {
                    l.src = src;
                    src += n;
                    l.rcv = rcv;
                    rcv += n + 16; // receive buffers a little larger than the message
                }
                Op::Write(_) | Op::WriteImm(_) => {
                    l.src = src;
                    src += n;
                    l.tgt = tgt;
                    tgt += n;
                    if op.needs_recv() {
                        l.rcv = rcv;
                        rcv += 16;
                    }
                }
                Op::Read(_) => {
                    l.dst = dst;
                    dst += n;
                    l.tgt = tgt;
                    tgt += n;
                }
                Op::CmpSwap | Op::FetchAdd => {
                    l.dst = dst;
                    dst += 8;
                }
            }
        }
        let a = &p.a.mem;
        a.add(PD, SRC, BASE[0], src as usize + 1, Access::LOCAL_WRITE);
        a.add(PD, DST, BASE[1], dst as usize + 1, Access::LOCAL_WRITE);
        let b = &p.b.mem;
        b.add(PD, RCV, BASE[2], rcv as usize + 1, Access::LOCAL_WRITE);
        b.add(PD, TGT, BASE[3], tgt as usize + 1, Access::ALL);
        for (i, op) in self.ops.iter().enumerate() {
            let n = op.len() as usize;
            match op {
                Op::Send(_) | Op::SendImm(_) | Op::Write(_) | Op::WriteImm(_) => {
                    p.a.mem.set(SRC, BASE[0] + lay[i].src, &pattern(self.seed, i, n))
                }
                Op::Read(_) => p.b.mem.set(TGT, BASE[3] + lay[i].tgt, &pattern(self.seed, i, n)),
                _ => {}
            }
        }
        let counter0 = 0x1111_2222_3333_4444u64;
        p.b.mem.set(TGT, BASE[3], &counter0.to_ne_bytes());

        // Posting.
        let recv_ops: Vec<usize> = (0..self.ops.len()).filter(|&i| self.ops[i].needs_recv()).collect();
        let (mut next_send, mut next_recv) = (0usize, 0usize);
        let mut counter = counter0;
        let mut expect_orig = vec![0u64; self.ops.len()];
        let post = |p: &mut Pair,
                    next_send: &mut usize,
                    next_recv: &mut usize,
                    counter: &mut u64,
                    expect_orig: &mut Vec<u64>| {
            while *next_recv < recv_ops.len() && p.b.qp(0).recv_queue_len() < 200 {
                let i = recv_ops[*next_recv];
                let n = if matches!(self.ops[i], Op::WriteImm(_)) { 16 } else { self.ops[i].len() + 16 };
                let sg = Self::split(BASE[2] + lay[i].rcv, n, self.scatter, RCV);
                p.b.qp(0).post_recv(RecvWr::new(i as u64, &sg)).unwrap();
                *next_recv += 1;
            }
            let done = p.a.send_wcs.len();
            while *next_send < self.ops.len() && p.a.qp(0).send_queue_len() < self.window {
                // Unsignaled requests complete silently; bound what is outstanding anyway.
                let _ = done;
                let i = *next_send;
                let op = self.ops[i];
                let n = op.len();
                let src = Self::split(BASE[0] + lay[i].src, n, self.gather, SRC);
                let remote = |off: u64| RemoteAddr { addr: BASE[3] + off, rkey: Rkey::new(TGT) };
                let (sop, sg) = match op {
                    Op::Send(_) => (SendOp::Send, src),
                    Op::SendImm(_) => (SendOp::SendWithImm(i as u32 ^ 0xabcd_0000), src),
                    Op::Write(_) => (SendOp::RdmaWrite(remote(lay[i].tgt)), src),
                    Op::WriteImm(_) => {
                        (SendOp::RdmaWriteWithImm(remote(lay[i].tgt), i as u32 ^ 0x1234_0000), src)
                    }
                    Op::Read(_) => (
                        SendOp::RdmaRead(remote(lay[i].tgt)),
                        Self::split(BASE[1] + lay[i].dst, n, self.scatter, DST),
                    ),
                    Op::CmpSwap => {
                        // Compare with the value the counter will hold: always swaps.
                        expect_orig[i] = *counter;
                        let swap = counter.rotate_left(7) ^ i as u64;
                        let c = *counter;
                        *counter = swap;
                        (
                            SendOp::CompareSwap { remote: remote(0), compare: c, swap },
                            vec![Sge { addr: BASE[1] + lay[i].dst, length: 8, lkey: Lkey::new(DST) }],
                        )
                    }
                    Op::FetchAdd => {
                        expect_orig[i] = *counter;
                        let add = 1 + i as u64;
                        *counter = counter.wrapping_add(add);
                        (
                            SendOp::FetchAdd { remote: remote(0), add },
                            vec![Sge { addr: BASE[1] + lay[i].dst, length: 8, lkey: Lkey::new(DST) }],
                        )
                    }
                };
                let mut wr = SendWr::new(i as u64, sop, &sg);
                wr.signaled = (i + 1).is_multiple_of(self.signal_every) || i + 1 == self.ops.len();
                wr.fence = self.fence_every > 0 && (i + 1).is_multiple_of(self.fence_every);
                p.a.qp(0).post_send(wr).unwrap_or_else(|e| panic!("{ctx}: post {i}: {e}"));
                *next_send += 1;
            }
        };
        let deadline = p.now + limit;
        loop {
            post(&mut p, &mut next_send, &mut next_recv, &mut counter, &mut expect_orig);
            let finished = next_send == self.ops.len() && p.a.qp(0).send_queue_len() == 0;
            if finished || p.a.qp(0).state() == QpState::Err {
                // Let the last ACKs and flushes settle.
                p.drive(Duration::from_secs(5));
                break;
            }
            if !p.step() {
                post(&mut p, &mut next_send, &mut next_recv, &mut counter, &mut expect_orig);
                let finished = next_send == self.ops.len() && p.a.qp(0).send_queue_len() == 0;
                if finished || p.a.qp(0).state() == QpState::Err {
                    continue;
                }
                if !p.step() {
                    panic!(
                        "{ctx}: stalled at {:?} with {} posted, {} completed, sq {} state {:?} last {:?}\nA: {}\nB: {}",
                        p.now,
                        next_send,
                        p.a.send_wcs.len(),
                        p.a.qps[0].send_queue_len(),
                        p.a.qps[0].state(),
                        p.a.send_wcs.last(),
                        p.a.qps[0].debug_state(),
                        p.b.qps[0].debug_state()
                    );
                }
            }
            assert!(
                p.now <= deadline,
                "{ctx}: not done after {limit:?} of virtual time ({} of {} completed)",
                p.a.send_wcs.len(),
                self.ops.len()
            );
        }

        // Checks.
        let mut out = Outcome {
            elapsed: p.now - softroce::transport::Time::ZERO,
            packets_ab: p.ab.stats.sent,
            retries: p.a.qps[0].counters().completer_retry_err,
            probes: p.a.qps[0].counters().probe_retransmit,
            tail_probes: p.a.qps[0].counters().tail_probe,
            ..Default::default()
        };
        let mut expected_ids =
            (0..self.ops.len()).filter(|&i| (i + 1) % self.signal_every == 0 || i + 1 == self.ops.len());
        let mut first_error: Option<usize> = None;
        let mut seen = std::collections::BTreeSet::new();
        for wc in &p.a.send_wcs {
            let i = wc.wr_id as usize;
            assert!(seen.insert(i), "{ctx}: op {i} completed twice");
            if let Some(e) = first_error {
                assert_eq!(wc.status, WcStatus::WrFlushErr, "{ctx}: after the error, op {i}");
                assert!(i > e, "{ctx}: flush order");
            } else {
                if wc.status == WcStatus::Success {
                    assert_eq!(Some(i), expected_ids.next(), "{ctx}: completions out of order");
                    out.completed = i + 1;
                } else {
                    assert!(
                        matches!(wc.status, WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr),
                        "{ctx}: op {i} ({:?}): {:?}; responder recv wcs {:?}; A counters {:?}; B counters {:?}",
                        self.ops[i],
                        wc.status,
                        p.b.recv_wcs.iter().filter(|w| w.status != WcStatus::Success).collect::<Vec<_>>(),
                        p.a.qps[0].counters(),
                        p.b.qps[0].counters()
                    );
                    first_error = Some(i);
                    out.error = Some(wc.status);
                }
            }
        }
        if first_error.is_none() {
            assert_eq!(
                out.completed,
                self.ops.len(),
                "{ctx}: not every op completed: {:?}",
                p.a.send_wcs.last()
            );
            assert_eq!(expected_ids.next(), None);
        } else {
            // Every WR posted got exactly one completion (errors and flushes are always
            // reported, successes when signaled).
            assert_eq!(p.a.qps[0].send_queue_len(), 0, "{ctx}");
        }
        // Receive side: in order, exactly once, right length, immediate and bytes.
        let mut last: Option<u64> = None;
        let mut recvd = 0;
        for wc in &p.b.recv_wcs {
            if wc.status != WcStatus::Success {
                assert!(first_error.is_some(), "{ctx}: receive {} failed with {:?}", wc.wr_id, wc.status);
                continue;
            }
            let i = wc.wr_id as usize;
            assert!(last.is_none_or(|l| l < wc.wr_id), "{ctx}: receive {i} out of order or twice");
            last = Some(wc.wr_id);
            recvd += 1;
            match self.ops[i] {
                Op::Send(n) => {
                    assert_eq!(
                        (wc.byte_len, wc.opcode, wc.imm_data),
                        (n, WcOpcode::Recv, None),
                        "{ctx}: op {i}"
                    );
                    assert_eq!(
                        p.b.mem.get(RCV, BASE[2] + lay[i].rcv, n as usize),
                        pattern(self.seed, i, n as usize),
                        "{ctx}: op {i} data"
                    );
                }
                Op::SendImm(n) => {
                    assert_eq!(
                        (wc.byte_len, wc.opcode, wc.imm_data),
                        (n, WcOpcode::Recv, Some(i as u32 ^ 0xabcd_0000)),
                        "{ctx}: op {i}"
                    );
                    assert_eq!(
                        p.b.mem.get(RCV, BASE[2] + lay[i].rcv, n as usize),
                        pattern(self.seed, i, n as usize),
                        "{ctx}: op {i} data"
                    );
                }
                Op::WriteImm(n) => {
                    assert_eq!(
                        (wc.byte_len, wc.opcode, wc.imm_data),
                        (n, WcOpcode::RecvRdmaWithImm, Some(i as u32 ^ 0x1234_0000)),
                        "{ctx}: op {i}"
                    );
                }
                _ => panic!("{ctx}: a receive completion for op {i}"),
            }
        }
        let needed = (0..out.completed).filter(|&i| self.ops[i].needs_recv()).count();
        assert!(recvd >= needed, "{ctx}: {recvd} receives for {needed} completed sends");
        // One-sided results of every completed op.
        for i in 0..out.completed {
            let n = self.ops[i].len() as usize;
            match self.ops[i] {
                Op::Write(_) | Op::WriteImm(_) => {
                    assert_eq!(
                        p.b.mem.get(TGT, BASE[3] + lay[i].tgt, n),
                        pattern(self.seed, i, n),
                        "{ctx}: write {i}"
                    )
                }
                Op::Read(_) => assert_eq!(
                    p.a.mem.get(DST, BASE[1] + lay[i].dst, n),
                    pattern(self.seed, i, n),
                    "{ctx}: read {i}"
                ),
                Op::CmpSwap | Op::FetchAdd => {
                    // Completed (the op or a later one was acknowledged): its value is in.
                    let got =
                        u64::from_ne_bytes(p.a.mem.get(DST, BASE[1] + lay[i].dst, 8).try_into().unwrap());
                    assert_eq!(got, expect_orig[i], "{ctx}: atomic {i} original value");
                }
                _ => {}
            }
        }
        if first_error.is_none() {
            let fin = u64::from_ne_bytes(p.b.mem.get(TGT, BASE[3], 8).try_into().unwrap());
            assert_eq!(fin, counter, "{ctx}: atomics executed once each");
        }
        out
    }
}
