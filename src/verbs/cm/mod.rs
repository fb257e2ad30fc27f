//! The RDMA CM, shaped like librdmacm: connect queue pairs by IP address and port instead of
//! exchanging QP numbers out of band.
//!
//! Every device runs an IB CM on its QP1 (the engine sends and receives the MADs); this module
//! is the rdma_cm layer above it (what Linux's `cma.c` and librdmacm do): ids in a port space,
//! address and route resolution on the softroce devices of the process, listeners, the
//! `cma_hdr`, negotiation, the QP moved through INIT → RTR → RTS, events on channels.
//!
//! Ids in [`PortSpace::Tcp`] connect RC QPs (REQ/REP/RTU, DREQ/DREP); ids in
//! [`PortSpace::Udp`] find a peer's UD QP through SIDR: `connect` sends a SIDR_REQ, the
//! listener's application gets CONNECT_REQUEST (with the requester's address in a
//! [`UdEventParam`]) and answers with `accept` or `reject` (the SIDR_REP), and the active
//! side's ESTABLISHED carries the peer's QP number, Q_Key and an address vector to create an
//! address handle from (or UNREACHABLE with the SIDR status: 1 nobody listens, 2 rejected).

pub mod channel;
pub mod error;
pub mod id;
pub mod registry;

pub use crate::transport::cm::rdma::ConnParam;
pub use crate::wire::cma::PortSpace;
pub use channel::{CmEvent, ConnEventParam, EventChannel, EventParam, UdEventParam};
pub use id::{CmId, CmIdRef};

pub use crate::transport::cm::rdma::RdmaEventType as CmEventType;
pub use error::{Error, Result};

/// A QP number as events report it.
pub type QpNum = u32;

/// The state of an rdma_cm id (librdmacm's `enum rdma_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmIdState {
    /// Created, nothing bound.
    Idle,
    /// Bound to a local address (`rdma_bind_addr`).
    AddrBound,
    /// `rdma_resolve_addr` done.
    AddrResolved,
    /// `rdma_resolve_route` done.
    RouteResolved,
    /// Listening.
    Listen,
    /// A connection is being set up (REQ sent or received).
    Connect,
    /// Connected.
    Established,
    /// Disconnected (or the connection failed): only `destroy` is left.
    Disconnect,
    /// Destroyed.
    Destroyed,
}

#[cfg(test)]
mod gsi_tests;
#[cfg(test)]
mod listen_tests;
