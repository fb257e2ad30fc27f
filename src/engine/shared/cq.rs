//! What a completion queue's handle shares with the engines: its completions and its
//! notification state.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;

use crate::engine::error::{Error, Result};
use crate::transport::{WcOpcode, WcStatus, WorkCompletion};

pub(crate) struct CqShared {
    pub id: u32,
    /// Behind a lock only for [`CompletionQueue::resize`] and [`CqShared::remove_qp`] (write);
    /// the engine's pushes and the application's polls share it (read) and stay lock-free
    /// among themselves.
    pub queue: parking_lot::RwLock<ArrayQueue<WorkCompletion>>,
    pub overflowed: AtomicBool,
    /// `DISARMED`, `ARMED_NEXT` or `ARMED_SOLICITED`.
    pub armed: AtomicU8,
    /// A completion that satisfies a solicited-only arm was pushed since it was armed.
    pub solicited_seen: AtomicBool,
    notify_tx: UnixStream,
    pub notify_rx: UnixStream,
    pub delivered: AtomicU64,
}

impl CqShared {
    pub(crate) fn new(id: u32, cqe: usize) -> std::io::Result<CqShared> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        Ok(CqShared {
            id,
            queue: parking_lot::RwLock::new(ArrayQueue::new(cqe.max(1))),
            overflowed: AtomicBool::new(false),
            armed: AtomicU8::new(DISARMED),
            solicited_seen: AtomicBool::new(false),
            notify_tx: tx,
            notify_rx: rx,
            delivered: AtomicU64::new(0),
        })
    }

    /// Engine side: adds a completion; `false` on overflow.
    pub(crate) fn push(&self, wc: WorkCompletion) -> bool {
        // What wakes a solicited-only waiter (as rxe's `rxe_cq_post`): a receive completion of
        // a message whose last packet had the solicited-event bit, or a failed receive.
        if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
            && (wc.solicited || wc.status != WcStatus::Success)
        {
            self.solicited_seen.store(true, Ordering::SeqCst);
        }
        if self.queue.read().push(wc).is_err() {
            self.overflowed.store(true, Ordering::SeqCst);
            return false;
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Engine side: drops the completions of QP `qpn` still queued (a QP moved to Reset),
    /// keeping the others in order.
    pub(crate) fn remove_qp(&self, qpn: u32) {
        let queue = self.queue.write();
        let mut keep = Vec::new();
        while let Some(wc) = queue.pop() {
            if wc.qp_num.value() != qpn {
                keep.push(wc);
            }
        }
        for wc in keep {
            // Cannot overflow: these came out of the queue, and the lock keeps others out.
            let _ = queue.push(wc);
        }
    }

    /// Engine side: the queue replaced by one of `cqe` entries holding the same completions.
    pub(crate) fn resize(&self, cqe: usize) -> Result<()> {
        let mut queue = self.queue.write();
        if queue.len() > cqe {
            return Err(Error::InvalidArgument("the CQ holds more completions than the new size"));
        }
        let bigger = ArrayQueue::new(cqe);
        while let Some(wc) = queue.pop() {
            // Cannot fail: `cqe` >= the number of completions, and the lock keeps pushes out.
            let _ = bigger.push(wc);
        }
        *queue = bigger;
        Ok(())
    }

    /// Engine side: signals a waiter, if one armed the notification.
    pub(crate) fn notify(&self) {
        let fire = match self.armed.load(Ordering::SeqCst) {
            ARMED_NEXT => self.disarm(ARMED_NEXT),
            ARMED_SOLICITED => self.solicited_seen.load(Ordering::SeqCst) && self.disarm(ARMED_SOLICITED),
            _ => false,
        };
        if fire {
            let _ = (&self.notify_tx).write(&[1]);
        }
    }

    /// Reads the pending notification bytes without blocking (at most 64); returns how many.
    pub(crate) fn take_notifications(&self) -> usize {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
        socket2::SockRef::from(&self.notify_rx).recv_with_flags(&mut buf, libc::MSG_DONTWAIT).unwrap_or(0)
    }

    fn disarm(&self, from: u8) -> bool {
        self.armed.compare_exchange(from, DISARMED, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }
}

pub(crate) const DISARMED: u8 = 0;

pub(crate) const ARMED_NEXT: u8 = 1;

pub(crate) const ARMED_SOLICITED: u8 = 2;
