//! The transport services as sans-IO state machines.
//!
//! A [`Qp`] takes posted work requests, received packets (as parsed by [`crate::wire`]) and the
//! current time, and gives back packets to send, work completions and timer deadlines. It
//! never opens a socket, starts a thread or reads a clock: the engine in [`crate::verbs`] is a
//! thin loop around it, and the simulator in [`sim`] drives two of them over a seeded lossy
//! link in virtual time.
//!
//! The Reliable Connected service is split like kernel rxe's, with rxe's state names:
//! [`requester`] (`rxe_req.c`) builds request packets, [`completer`] (`rxe_comp.c`) handles
//! ACKs, NAKs and READ/atomic responses, [`responder`] (`rxe_resp.c`) executes requests and
//! answers them. `docs/design/rxe-behaviour.md` describes rxe's behaviour that this follows,
//! and the module docs note each place where softroce deliberately differs.
//!
//! Memory is reached only through the [`Memory`] trait: tests use [`VecMemory`], the engine
//! its registered memory regions with their key, bounds, PD and access checks.

#![forbid(unsafe_code)]

use core::ops::{Add, Sub};
use std::time::Duration;

pub mod cm;
pub mod completer;
mod counters;
pub mod ids;
pub mod memory;
mod qp;
pub mod requester;
pub mod responder;
mod sgl;
pub mod sim;
mod srq;
mod unreliable;
mod wqe;
pub mod wr;

pub use counters::Counters;
pub use ids::{Lkey, Qkey, Qpn, Rkey};
pub use memory::{Access, AtomicOp, MemError, Memory, VecMemory, VecRegion};
pub use qp::{
    LOCAL_ACK_STRETCH, MAX_MSG_SIZE, MAX_RD_ATOMIC, ModifyError, Mtu, PROBE_MIN, PostError, Qp, QpAttr,
    QpAttrUpdate, QpCaps, QpEvent, QpState, QpTuning, QpType, TAIL_PROBE_MIN, check_send_wr,
};
pub use srq::{Srq, SrqError};
pub use wr::{
    GRH_LEN, MwBind, NetworkHdr, Payload, RecvWr, RemoteAddr, SendOp, SendWr, SgList, Sge, UdDest, WcOpcode,
    WcStatus, WorkCompletion,
};

/// A point in time: nanoseconds since an epoch the driver chooses (the engine: its start;
/// the simulator: zero). The state machines only compare and add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);

    /// `n` nanoseconds after the epoch.
    pub const fn from_nanos(n: u64) -> Time {
        Time(n)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, other: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(other.0))
    }
}

/// A packet [`Qp::poll_transmit`] built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Length of the packet (BTH through ICRC) at the start of the buffer.
    pub len: usize,
    /// For UD sends: the destination the work request named.
    pub ud: Option<UdDest>,
}
