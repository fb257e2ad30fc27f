//! Event channels (`rdma_event_channel`) and the events they deliver (`rdma_cm_event`).
//!
//! A channel is a queue of events plus a descriptor that is readable exactly while the queue
//! holds one ([`EventChannel::as_raw_fd`]): poll it with epoll, mio or tokio, then take the
//! event with [`EventChannel::try_get_event`]. [`EventChannel::get_event`] blocks (unless the
//! channel was made non-blocking, when it fails with [`Error::WouldBlock`] as librdmacm's does
//! with `EAGAIN`). Every event is acknowledged when it is dropped (or by [`CmEvent::ack`]):
//! `rdma_ack_cm_event`.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::error::{Error, Result};
use super::id::{CmId, CmIdRef, IdInner};
use super::{CmEventType, QpNum};
use crate::transport::Qkey;
use crate::verbs::AddressVector;

/// What a connection event carries (`rdma_conn_param` in an event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnEventParam {
    /// The private data of the message behind the event, its full length as Linux reports it:
    /// 56 bytes for CONNECT_REQUEST (after the 36-byte `cma_hdr`), 196 for an active side's
    /// ESTABLISHED (the REP's), 148 for REJECTED; empty where the message had none.
    pub private_data: Vec<u8>,
    /// Responder resources, from this side's point of view (the peer's initiator depth).
    pub responder_resources: u8,
    /// Initiator depth, from this side's point of view (the peer's responder resources).
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retry count (CONNECT_REQUEST).
    pub retry_count: u8,
    /// RNR retry count this side's QP uses.
    pub rnr_retry_count: u8,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The peer's QP number.
    pub qp_num: QpNum,
}

/// What a UD event carries (`rdma_ud_param`): on an active side's ESTABLISHED (the SIDR_REP
/// was a success) the peer's QP, its Q_Key and the address vector to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdEventParam {
    /// Private data (SIDR_REP: 136 bytes; CONNECT_REQUEST: 180 after the `cma_hdr`).
    pub private_data: Vec<u8>,
    /// Where the peer is: create an address handle from it.
    pub ah_attr: AddressVector,
    /// The peer's UD QP (0 in a CONNECT_REQUEST).
    pub qp_num: QpNum,
    /// The Q_Key to send with (rdma_cm: `RDMA_UDP_QKEY`, 0x01234567).
    pub qkey: Qkey,
}

/// The parameters of an event (`rdma_cm_event.param`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EventParam {
    /// None (address and route events, TIMEWAIT_EXIT).
    #[default]
    None,
    /// A connected id's parameters.
    Conn(ConnEventParam),
    /// A UD id's parameters.
    Ud(UdEventParam),
}

impl EventParam {
    /// The private data, empty if none.
    pub fn private_data(&self) -> &[u8] {
        match self {
            EventParam::None => &[],
            EventParam::Conn(c) => &c.private_data,
            EventParam::Ud(u) => &u.private_data,
        }
    }
}

/// An event as queued on a channel.
pub(crate) struct EventData {
    pub kind: CmEventType,
    pub status: i32,
    /// The id the event is about (CONNECT_REQUEST: the new id).
    pub id: Arc<IdInner>,
    /// CONNECT_REQUEST: the listener.
    pub listen: Option<Arc<IdInner>>,
    pub param: EventParam,
    /// `id` is a new id the application receives with the event (CONNECT_REQUEST); set until it
    /// has been handed over. An event dropped undelivered destroys it (which rejects the
    /// request, as destroying an unanswered id does).
    pub new_id: bool,
}

impl EventData {
    pub(crate) fn new(kind: CmEventType, status: i32, id: Arc<IdInner>, param: EventParam) -> EventData {
        EventData { kind, status, id, listen: None, param, new_id: false }
    }

    /// The id whose acknowledgement count the event belongs to: the listener's for a
    /// CONNECT_REQUEST (so that destroying a listener waits for its requests), else the id's.
    fn counted_on(&self) -> &Arc<IdInner> {
        self.listen.as_ref().unwrap_or(&self.id)
    }

    fn concerns(&self, id: &Arc<IdInner>) -> bool {
        Arc::ptr_eq(&self.id, id) || self.listen.as_ref().is_some_and(|l| Arc::ptr_eq(l, id))
    }
}

impl Drop for EventData {
    fn drop(&mut self) {
        if self.new_id {
            // Never handed to the application: nobody will answer it.
            self.id.post_destroy();
        }
    }
}

/// The shared part of a channel.
pub(crate) struct ChannelInner {
    queue: Mutex<VecDeque<EventData>>,
    cv: Condvar,
    /// Written (one byte) when the queue becomes non-empty, read back when it empties: the
    /// readable end is readable exactly while an event is pending.
    tx: UnixStream,
    rx: UnixStream,
    nonblocking: AtomicBool,
}

impl ChannelInner {
    pub(crate) fn new() -> Result<Arc<ChannelInner>> {
        let (tx, rx) = UnixStream::pair().map_err(crate::verbs::Error::Io)?;
        tx.set_nonblocking(true).map_err(crate::verbs::Error::Io)?;
        Ok(Arc::new(ChannelInner {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            tx,
            rx,
            nonblocking: AtomicBool::new(false),
        }))
    }

    /// Queues an event (engine or API thread).
    pub(crate) fn push(&self, ev: EventData) {
        ev.counted_on().event_reported();
        self.enqueue(ev);
    }

    /// Queues an event taken from another channel (already counted as reported).
    pub(crate) fn push_moved(&self, ev: EventData) {
        self.enqueue(ev);
    }

    fn enqueue(&self, ev: EventData) {
        let mut q = self.queue.lock();
        if q.is_empty() {
            let _ = (&self.tx).write(&[1]);
        }
        q.push_back(ev);
        drop(q);
        self.cv.notify_all();
    }

    fn pop_locked(&self, q: &mut VecDeque<EventData>) -> Option<EventData> {
        let ev = q.pop_front()?;
        if q.is_empty() {
            // The byte written when the queue filled is there (both happen under the lock).
            let mut b = [0u8; 1];
            let _ = (&self.rx).read(&mut b);
        }
        Some(ev)
    }

    /// Takes the next event: at once (`wait` = `Some(ZERO)`), within a time, or blocking.
    pub(crate) fn pop(&self, wait: Option<Duration>) -> Option<EventData> {
        let deadline = wait.map(|d| Instant::now() + d);
        let mut q = self.queue.lock();
        loop {
            if let Some(ev) = self.pop_locked(&mut q) {
                return Some(ev);
            }
            match deadline {
                None => self.cv.wait(&mut q),
                Some(d) => {
                    if Instant::now() >= d {
                        return None;
                    }
                    self.cv.wait_until(&mut q, d);
                }
            }
        }
    }

    /// Takes every queued event about `id` (the id is going away or moving).
    pub(crate) fn take_for(&self, id: &Arc<IdInner>) -> Vec<EventData> {
        let mut q = self.queue.lock();
        let was_empty = q.is_empty();
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(q.len());
        for ev in q.drain(..) {
            if ev.concerns(id) { taken.push(ev) } else { kept.push_back(ev) }
        }
        *q = kept;
        if !was_empty && q.is_empty() {
            let mut b = [0u8; 1];
            let _ = (&self.rx).read(&mut b);
        }
        taken
    }

    /// Drops every queued event about `id`, as acknowledged.
    pub(crate) fn purge(&self, id: &Arc<IdInner>) {
        for ev in self.take_for(id) {
            ev.counted_on().event_completed();
        }
    }
}

/// An event channel (`rdma_event_channel`): where the events of the ids created on it arrive.
/// Cheap to clone (clones share the queue).
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").field("fd", &self.as_raw_fd()).finish()
    }
}

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> Result<EventChannel> {
        Ok(EventChannel { inner: ChannelInner::new()? })
    }

    /// `rdma_get_cm_event`: the next event, blocking until one arrives — unless the channel is
    /// non-blocking ([`EventChannel::set_nonblocking`]), when an empty channel gives
    /// [`Error::WouldBlock`].
    pub fn get_event(&self) -> Result<CmEvent> {
        if self.inner.nonblocking.load(Ordering::Relaxed) {
            return self.try_get_event()?.ok_or(Error::WouldBlock);
        }
        Ok(deliver_event(self.inner.pop(None).expect("a blocking pop returns an event")))
    }

    /// The next event if one is pending.
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        Ok(self.inner.pop(Some(Duration::ZERO)).map(deliver_event))
    }

    /// The next event, waiting at most `timeout` ([`Error::Timeout`] when none came).
    pub fn get_event_timeout(&self, timeout: Duration) -> Result<CmEvent> {
        self.inner.pop(Some(timeout)).map(deliver_event).ok_or(Error::Timeout)
    }

    /// Makes [`EventChannel::get_event`] fail with [`Error::WouldBlock`] instead of waiting
    /// (and sets `O_NONBLOCK` on the descriptor, as `fcntl` on librdmacm's channel fd does).
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        self.inner.rx.set_nonblocking(nonblocking).map_err(crate::verbs::Error::Io)?;
        self.inner.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the channel is non-blocking.
    pub fn is_nonblocking(&self) -> bool {
        self.inner.nonblocking.load(Ordering::Relaxed)
    }

    /// The number of events waiting.
    pub fn pending(&self) -> usize {
        self.inner.queue.lock().len()
    }

    /// Whether `other` is a handle to the same channel.
    pub fn same(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl AsRawFd for EventChannel {
    /// A descriptor that is readable while an event is pending (`rdma_event_channel.fd`).
    /// Poll it; never read it.
    fn as_raw_fd(&self) -> RawFd {
        self.inner.rx.as_raw_fd()
    }
}

/// Turns a queued event into the application's: a CONNECT_REQUEST's new id becomes a
/// [`CmId`] the application owns.
pub(crate) fn deliver_event(mut ev: EventData) -> CmEvent {
    if ev.kind == CmEventType::ConnectResponse {
        let (kind, status) = ev.id.process_connect_response();
        ev.kind = kind;
        ev.status = status;
    }
    let new_id = if ev.new_id {
        ev.new_id = false;
        CmId::claim(ev.id.clone())
    } else {
        None
    };
    CmEvent {
        kind: ev.kind,
        status: ev.status,
        id: CmIdRef(ev.id.clone()),
        listen_id: ev.listen.clone().map(CmIdRef),
        param: std::mem::take(&mut ev.param),
        new_id,
        counted: ev.counted_on().clone(),
    }
}

/// An event (`rdma_cm_event`). Dropping it acknowledges it (`rdma_ack_cm_event`).
pub struct CmEvent {
    kind: CmEventType,
    status: i32,
    id: CmIdRef,
    listen_id: Option<CmIdRef>,
    param: EventParam,
    new_id: Option<CmId>,
    counted: Arc<IdInner>,
}

impl std::fmt::Debug for CmEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmEvent")
            .field("event", &self.kind.name())
            .field("status", &self.status)
            .field("id", &self.id)
            .field("param", &self.param)
            .finish()
    }
}

impl CmEvent {
    /// The event type (`event->event`).
    pub fn event_type(&self) -> CmEventType {
        self.kind
    }
    /// The status (`event->status`): 0, a REJ reason for REJECTED (8: nobody listens, 28:
    /// the application rejected), a negative errno (−110 `ETIMEDOUT` for a peer that never
    /// answered), or a SIDR status for a failed UD resolution.
    pub fn status(&self) -> i32 {
        self.status
    }
    /// The id the event is about (`event->id`; for CONNECT_REQUEST the new id, which
    /// [`CmEvent::take_id`] hands over).
    pub fn id(&self) -> &CmIdRef {
        &self.id
    }
    /// CONNECT_REQUEST: the listening id (`event->listen_id`).
    pub fn listen_id(&self) -> Option<&CmIdRef> {
        self.listen_id.as_ref()
    }
    /// The event's parameters (`event->param`).
    pub fn param(&self) -> &EventParam {
        &self.param
    }
    /// The private data the event carries (empty if none).
    pub fn private_data(&self) -> &[u8] {
        self.param.private_data()
    }
    /// CONNECT_REQUEST: the new id, to accept or reject (once; `None` afterwards and for other
    /// events). An id never taken is destroyed with the event, which rejects the request.
    pub fn take_id(&mut self) -> Option<CmId> {
        self.new_id.take()
    }
    /// Acknowledges the event (the same as dropping it).
    pub fn ack(self) {}
}

impl Drop for CmEvent {
    fn drop(&mut self) {
        self.counted.event_completed();
    }
}
