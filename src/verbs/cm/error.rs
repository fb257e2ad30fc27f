//! The RDMA CM API's error type: every refusal is one of these, each with the `errno` the real
//! librdmacm sets for it ([`Error::errno`]), so that a C translation can hand it on.

use std::net::{IpAddr, SocketAddr};

use super::CmEventType;

/// Why an RDMA CM call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verbs call underneath failed (QP creation, `modify_qp`, opening a device).
    #[error(transparent)]
    Verbs(#[from] crate::verbs::Error),
    /// The id is not in a state that allows the call (librdmacm: `EINVAL`).
    #[error("{op}: the id is in state {state:?}")]
    InvalidState {
        /// The call.
        op: &'static str,
        /// The id's state.
        state: super::CmIdState,
    },
    /// An argument is invalid (librdmacm: `EINVAL`).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// Private data longer than the message carries (librdmacm: `EINVAL`).
    #[error("private data of {len} bytes: at most {max} fit")]
    PrivateDataTooLong {
        /// What was given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// No softroce device serves this local address, and none could be opened for it
    /// (librdmacm: `EADDRNOTAVAIL`).
    #[error("no softroce device serves {addr}: {why}")]
    AddrNotAvailable {
        /// The address.
        addr: IpAddr,
        /// Why no device could be opened for it.
        why: String,
    },
    /// The address and port are bound by another id of this process (the kernel's
    /// `cma_check_port`: `EADDRINUSE`).
    #[error("{0} is already bound by another rdma_cm id")]
    AddrInUse(SocketAddr),
    /// The port is bound by another id of this process, one of the two on the wildcard
    /// address (the kernel's `cma_check_port`: `EADDRNOTAVAIL`).
    #[error("port {} is already bound by another rdma_cm id (a wildcard bind takes every address)", .0.port())]
    PortTaken(SocketAddr),
    /// No route leads to the destination (the kernel's `rdma_resolve_addr`: `ENETUNREACH`).
    #[error("no route to {0}")]
    NoRoute(IpAddr),
    /// No free port in the ephemeral range (librdmacm: `EADDRNOTAVAIL`).
    #[error("no free port left in the ephemeral range")]
    NoFreePort,
    /// Source and destination are of different address families (the kernel's
    /// `rdma_resolve_addr`: `EINVAL`).
    #[error("source {src} and destination {dst} are of different address families")]
    AddressFamily {
        /// Source.
        src: IpAddr,
        /// Destination.
        dst: IpAddr,
    },
    /// A wildcard listener found no open device to listen on (librdmacm: `ENODEV`).
    #[error("no softroce device is open to listen on: open a Device (or bind to a local address) first")]
    NoDevice,
    /// The port space is not supported (librdmacm: `EPROTONOSUPPORT`).
    #[error("port space {0:?} is not supported (TCP, UDP, IB and IPoIB are)")]
    PortSpace(crate::wire::cma::PortSpace),
    /// The peer rejected the connection, or nobody listens on the port: a synchronous
    /// `connect` got REJECTED (librdmacm: `ECONNREFUSED`, "Connection refused").
    #[error("connection refused: {}", crate::wire::cm::RejReason::from_u16(*reason).map_or("unknown reason", |r| r.as_str()))]
    ConnectionRefused {
        /// The REJ reason (8: nobody listens on the service ID; 28: the application rejected).
        reason: u16,
        /// The REJ's private data (148 bytes, as Linux reports it).
        private_data: Vec<u8>,
    },
    /// A synchronous call got an error event (UNREACHABLE, CONNECT_ERROR, ADDR_ERROR, …); the
    /// status is librdmacm's (`-ETIMEDOUT` = −110 for a peer that never answered).
    #[error("{}: status {status}", event.name())]
    Event {
        /// The event.
        event: CmEventType,
        /// Its status.
        status: i32,
    },
    /// A synchronous call got an event it did not wait for (librdmacm: `EINVAL`).
    #[error("unexpected event {}", .0.name())]
    UnexpectedEvent(CmEventType),
    /// A non-blocking `get_event` found no event (librdmacm: `EAGAIN`).
    #[error("no event pending")]
    WouldBlock,
    /// A wait with a timeout ran out (librdmacm: `ETIMEDOUT`).
    #[error("timed out waiting for an rdma_cm event")]
    Timeout,
    /// The IB CM refused the command.
    #[error(transparent)]
    Cm(#[from] crate::transport::cm::CmError),
    /// The connection is established already (the kernel's `rdma_notify`: `EISCONN`).
    #[error("the connection is established already")]
    IsConnected,
    /// Multicast is not implemented (librdmacm on a device without it: `ENOSYS`).
    #[error("{0} is not supported by softroce")]
    NotSupported(&'static str),
}

impl Error {
    /// The `errno` librdmacm leaves for this failure.
    pub fn errno(&self) -> i32 {
        use crate::verbs::Error as V;
        match self {
            Error::Verbs(v) => match v {
                V::NoSuchAddress(_) | V::NoAddress(_) => libc::EADDRNOTAVAIL,
                V::NoSuchInterface(_) => libc::ENODEV,
                V::Bind { .. } => libc::EADDRINUSE,
                V::NeedsCapNetRaw { .. } => libc::EPERM,
                V::NoMemory(_) => libc::ENOMEM,
                V::Limit { .. } => libc::ENOMEM,
                V::EngineGone => libc::ENODEV,
                V::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
                _ => libc::EINVAL,
            },
            Error::InvalidState { .. }
            | Error::InvalidArgument(_)
            | Error::PrivateDataTooLong { .. }
            | Error::UnexpectedEvent(_) => libc::EINVAL,
            Error::AddrNotAvailable { .. } | Error::NoFreePort | Error::PortTaken(_) => libc::EADDRNOTAVAIL,
            Error::AddrInUse(_) => libc::EADDRINUSE,
            Error::NoRoute(_) => libc::ENETUNREACH,
            Error::AddressFamily { .. } => libc::EINVAL,
            Error::NoDevice => libc::ENODEV,
            Error::PortSpace(_) => libc::EPROTONOSUPPORT,
            Error::ConnectionRefused { .. } => libc::ECONNREFUSED,
            Error::Event { status, .. } => status.abs(),
            Error::WouldBlock => libc::EAGAIN,
            Error::Timeout => libc::ETIMEDOUT,
            Error::Cm(e) => match e {
                crate::transport::cm::CmError::Busy(_) => libc::EBUSY,
                crate::transport::cm::CmError::NoResources => libc::ENOMEM,
                _ => libc::EINVAL,
            },
            Error::NotSupported(_) => libc::ENOSYS,
            Error::IsConnected => libc::EISCONN,
        }
    }
}

/// Result of an RDMA CM call.
pub type Result<T> = std::result::Result<T, Error>;
