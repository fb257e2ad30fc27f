//! Completion queues.
//!
//! The engine pushes completions into a lock-free bounded queue; [`CompletionQueue::poll`]
//! takes them without a system call. For blocking, [`CompletionQueue::wait`] sleeps until a
//! completion arrives, and [`CompletionQueue::as_raw_fd`] is a descriptor that becomes
//! readable when one does (after [`CompletionQueue::req_notify`]), usable with epoll, mio or
//! tokio's `AsyncFd`.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::device::Device;
use super::error::{Error, Result};
pub(crate) use crate::engine::shared::cq::CqShared;
use crate::engine::shared::cq::{ARMED_NEXT, ARMED_SOLICITED, DISARMED};
use crate::transport::{WcOpcode, WorkCompletion};

/// A completion queue (`ibv_cq`).
pub struct CompletionQueue {
    pub(crate) shared: std::sync::Arc<CqShared>,
    pub(crate) device: Device,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue").field("cqe", &self.shared.queue.read().capacity()).finish()
    }
}

impl CompletionQueue {
    /// The CQ's number: what [`super::AsyncEvent::CqError`] names.
    pub fn cq_num(&self) -> u32 {
        self.shared.id
    }

    /// Capacity.
    pub fn cqe(&self) -> usize {
        self.shared.queue.read().capacity()
    }

    /// `ibv_resize_cq`: gives the CQ room for `cqe` completions (at least 1, at most the
    /// device's `max_cqe`), keeping the completions it holds, in order. Work posted before the
    /// call first runs as far as it can without a peer (a UD send's completion is in the CQ
    /// then). Refused, with nothing changed, when the CQ holds more than `cqe` completions (as
    /// rxe: `EINVAL`).
    pub fn resize(&self, cqe: usize) -> Result<()> {
        let max = self.device.shared.attr.max_cqe as u64;
        if cqe == 0 || cqe as u64 > max {
            return Err(Error::Limit { what: "max_cqe", max });
        }
        let dev = &self.device.shared;
        // Every engine first runs what was posted to its QPs; then one resizes.
        for idx in 1..dev.engines.len() {
            let cq = self.shared.clone();
            dev.call_on(idx, |reply| crate::engine::command::Command::ResizeCq { cq, cqe: None, reply })??;
        }
        let cq = self.shared.clone();
        dev.call_on(0, |reply| crate::engine::command::Command::ResizeCq { cq, cqe: Some(cqe), reply })?
    }

    /// `ibv_poll_cq`: moves up to `out.len()` completions into `out` without blocking;
    /// returns how many. Fails once the CQ overflowed.
    ///
    /// On a device with inline progress ([`super::DeviceConfig::inline_progress`]), polling an
    /// empty CQ makes progress on the calling thread (reads what has arrived, sends what was
    /// posted) before it looks again, as a busy-polling application on an HCA expects; and a
    /// thread whose polls keep finding nothing yields its CPU when the CPU is contended or
    /// after 50 µs ([`super::DeviceConfig::poll_yield`], [`crate::engine::pacer`]).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        let mut n = self.take(out);
        if n == 0 && !out.is_empty() {
            let pass = self.device.progress_inline(true);
            if pass.ran {
                n = self.take(out);
            }
            self.pace(pass, &out[..n]);
        } else if n > 0 {
            self.pace(Default::default(), &out[..n]);
        }
        if n == 0 && self.shared.overflowed.load(Ordering::SeqCst) {
            return Err(Error::CqOverflow);
        }
        Ok(n)
    }

    /// After a poll on a device with inline progress: gives the CPU away when this thread's
    /// polling is idle and the CPU is wanted elsewhere ([`crate::engine::pacer`]).
    /// `found`: the completions the poll returns.
    fn pace(&self, pass: super::device::Pass, found: &[WorkCompletion]) {
        if !self.device.inline_progress() {
            return;
        }
        let got = !found.is_empty();
        // Quiet engines ([`super::DeviceConfig::quiet_engine`]): after a few polls that ran a
        // pass and found nothing, this thread reads the sockets and the engines need not be
        // woken by each datagram; a completion found makes them listen again (the thread may
        // now leave for something else: spin on memory, sleep). After completions the thread
        // usually answers or polls on ([`poller_stays`]), its next send does it, once its
        // packet has left (a request answered at once does not wait for it), unless it polls
        // again first; and its next poll in vain makes them quiet again ([`hear_after_send`]).
        // The same goes for a one-sided ping-pong's poll whose pass also executed the peer's
        // request on the completions' QP (`ib_write_lat`: the peer's WRITE came with the ACK
        // this thread polled for, and the memory it will spin on already holds it).
        let answered_here = pass.held.is_some_and(|q| found.iter().all(|w| w.qp_num.value() == q));
        EMPTY_POLLS.with(|e| {
            if got {
                e.set(0);
                if poller_stays(found) || answered_here {
                    HEAR_AFTER_SEND.set(true);
                } else {
                    HEAR_AFTER_SEND.set(false);
                    self.device.hear_engines();
                }
            } else if pass.ran && !pass.work {
                HEAR_AFTER_SEND.set(false);
                let n = e.get().saturating_add(1);
                e.set(n);
                if n >= QUIET_AFTER {
                    self.device.quiet_engines();
                }
            }
        });
        if !self.device.shared.poll_yield {
            return;
        }
        PACER.with(|c| {
            let mut p = c.get();
            // (The end of this poll's pass, moments ago: no clock reading of its own.)
            let now = || pass.at.unwrap_or_else(Instant::now);
            if got || pass.work {
                p.busy();
            } else if p.polled(now(), true) {
                let start = now();
                std::thread::yield_now();
                p.yielded(start, Instant::now());
            }
            c.set(p);
        });
    }

    /// Moves up to `out.len()` queued completions into `out`.
    fn take(&self, out: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        let queue = self.shared.queue.read();
        while n < out.len() {
            match queue.pop() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Takes one completion, if any (with inline progress as [`CompletionQueue::poll`]).
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>> {
        let mut wc = self.shared.queue.read().pop();
        let mut pass = super::device::Pass::default();
        if wc.is_none() {
            pass = self.device.progress_inline(true);
            if pass.ran {
                wc = self.shared.queue.read().pop();
            }
        }
        self.pace(pass, wc.as_slice());
        match wc {
            Some(wc) => Ok(Some(wc)),
            None if self.shared.overflowed.load(Ordering::SeqCst) => Err(Error::CqOverflow),
            None => Ok(None),
        }
    }

    /// `ibv_req_notify_cq(cq, 0)`: the descriptor becomes readable at the next completion
    /// (at once if the CQ holds one already).
    pub fn req_notify(&self) {
        // The caller is about to sleep on the channel rather than poll: the engines must
        // hear the packets that will make the completion.
        self.device.hear_engines();
        self.shared.armed.store(ARMED_NEXT, Ordering::SeqCst);
        if !self.shared.queue.read().is_empty() {
            self.shared.notify();
        }
    }

    /// `ibv_req_notify_cq(cq, 1)`: the descriptor becomes readable at the next *solicited*
    /// completion — a receive of a message sent with the solicited-event bit
    /// (`SendWr::solicited`) or a failed receive — added after this call
    /// (as rxe; unsolicited completions and send completions do not wake it). A later
    /// [`CompletionQueue::req_notify`] widens the arm to any completion.
    pub fn req_notify_solicited(&self) {
        self.device.hear_engines();
        self.shared.solicited_seen.store(false, Ordering::SeqCst);
        // Never narrow an arm for any completion to solicited ones (the IB rule).
        let _ =
            self.shared.armed.compare_exchange(DISARMED, ARMED_SOLICITED, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Consumes pending notifications on the descriptor (`ibv_get_cq_event` +
    /// `ibv_ack_cq_events`); returns how many there were.
    pub fn ack_notify(&self) -> usize {
        let mut n = 0;
        loop {
            match self.shared.take_notifications() {
                0 => return n,
                k => n += k,
            }
        }
    }

    /// Blocks until the CQ holds a completion or `timeout` passes; returns whether it holds
    /// one. It first polls for up to the device's [`super::DeviceConfig::spin`] (50 µs by
    /// default), yielding the CPU between looks, then sleeps on the completion channel.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let start = Instant::now();
        let deadline = start + timeout;
        // First look again for a while, yielding the CPU between looks (to the engine, when
        // it shares the core), as the engine does before it sleeps: a waiter that goes to
        // sleep costs the engine a notification and both threads a context switch, and at
        // high message rates completions follow each other within microseconds.
        let spin = self.device.shared.spin.min(timeout);
        while start.elapsed() < spin {
            // (With inline progress, each look also makes progress.)
            let _ = self.device.progress_inline(true);
            if !self.shared.queue.read().is_empty() {
                return Ok(true);
            }
            std::thread::yield_now();
        }
        loop {
            if !self.shared.queue.read().is_empty() {
                return Ok(true);
            }
            if self.shared.overflowed.load(Ordering::SeqCst) {
                return Err(Error::CqOverflow);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.req_notify();
            if !self.shared.queue.read().is_empty() {
                return Ok(true);
            }
            // (req_notify made quiet engines listen: this thread will not read the sockets,
            // and no longer drives the engines either.)
            self.device.polling_stops();
            // One system call to sleep (the descriptor's mode and timeout are left alone),
            // one to take the notification once it came.
            let mut pfd =
                libc::pollfd { fd: self.shared.notify_rx.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ts = libc::timespec {
                tv_sec: left.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: one valid pollfd, a valid timespec, no signal mask.
            let ready = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            if ready > 0 {
                self.shared.take_notifications();
            }
        }
    }

    /// Takes one completion, waiting up to `timeout` for it.
    pub fn poll_one_wait(&self, timeout: Duration) -> Result<Option<WorkCompletion>> {
        match self.poll_one()? {
            Some(wc) => Ok(Some(wc)),
            None if self.wait(timeout)? => self.poll_one(),
            None => Ok(None),
        }
    }

    /// Polls, waiting up to `timeout` for the first completion.
    pub fn poll_wait(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        let n = self.poll(out)?;
        if n > 0 || !self.wait(timeout)? {
            return Ok(n);
        }
        self.poll(out)
    }

    /// The device this CQ belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl Device {
    /// `ibv_create_cq` with room for `cqe` completions.
    pub fn create_cq(&self, cqe: usize) -> Result<CompletionQueue> {
        if cqe == 0 || cqe > self.shared.attr.max_cqe as usize {
            return Err(Error::Limit { what: "max_cqe", max: self.shared.attr.max_cqe as u64 });
        }
        let n = self.shared.cq_count.fetch_add(1, Ordering::Relaxed);
        if n >= self.shared.attr.max_cq {
            self.shared.cq_count.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Limit { what: "max_cq", max: self.shared.attr.max_cq as u64 });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(CompletionQueue { shared: std::sync::Arc::new(CqShared::new(id, cqe)?), device: self.clone() })
    }
}

impl AsRawFd for CompletionQueue {
    /// The completion channel: readable after [`CompletionQueue::req_notify`] once a
    /// completion arrives. Consume with [`CompletionQueue::ack_notify`].
    fn as_raw_fd(&self) -> RawFd {
        self.shared.notify_rx.as_raw_fd()
    }
}

/// Polls in a row that ran a pass of inline progress and found nothing after which the
/// engines go quiet ([`CompletionQueue::pace`]).
const QUIET_AFTER: u32 = 4;

/// Whether the completions are all of kinds after which an application goes on posting or
/// polling — receives, SENDs (a two-sided exchange waits for its answer on a CQ), READs and
/// atomics (their data is there) — rather than leave to wait elsewhere, as after an RDMA
/// WRITE (the one-sided pattern: wait on memory for the peer's WRITE).
fn poller_stays(wcs: &[WorkCompletion]) -> bool {
    !wcs.is_empty()
        && wcs.iter().all(|w| {
            matches!(
                w.opcode,
                WcOpcode::Recv
                    | WcOpcode::RecvRdmaWithImm
                    | WcOpcode::Send
                    | WcOpcode::RdmaRead
                    | WcOpcode::CompSwap
                    | WcOpcode::FetchAdd
            )
        })
}

/// After a send posted by this thread left: quiet engines listen again if this thread's last
/// poll found completions after which it stays ([`poller_stays`]; see
/// [`CompletionQueue::pace`]), until the thread's next poll that finds nothing: a thread that
/// comes back to poll for the answer reads the sockets itself again, and the answer must
/// not wake the engines as well (measured on UCX's `am_lat` over `rc_verbs`, which answers
/// in a callback and polls on: with the usual [`QUIET_AFTER`] polls in vain, a third of the
/// answers still woke an engine thread, and the half round trip was twice as long in the
/// slow runs). An application that then neither sends nor polls is heard again by the
/// engine itself after [`crate::engine::core::QUIET_LIMIT`].
pub(crate) fn hear_after_send(device: &Device) {
    if HEAR_AFTER_SEND.replace(false) {
        device.hear_engines();
        EMPTY_POLLS.set(QUIET_AFTER - 1);
    }
}

thread_local! {
    /// This thread's last poll found completions after which it stays ([`poller_stays`]), and
    /// it has not polled since.
    static HEAR_AFTER_SEND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Polls in a row that ran a pass and found nothing (see [`QUIET_AFTER`]).
    static EMPTY_POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// This thread's polling history, for [`CompletionQueue::pace`].
    static PACER: std::cell::Cell<crate::engine::pacer::Pacer> = const { std::cell::Cell::new(crate::engine::pacer::Pacer::new()) };
}
