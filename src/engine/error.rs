//! The verbs layer's error type: every misuse is one of these, never a panic.

use std::net::IpAddr;

use crate::transport::{Lkey, ModifyError, PostError, Qpn};

/// Why a verbs call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No local interface has this address.
    #[error("no local network interface has address {0} (use an address of `ip addr`, or 127.0.0.x)")]
    NoSuchAddress(IpAddr),
    /// No interface has this name.
    #[error("no network interface named {0:?}")]
    NoSuchInterface(String),
    /// The interface has no usable IPv4 or IPv6 address.
    #[error("interface {0} has no IP address to run RoCEv2 on")]
    NoAddress(String),
    /// The UDP port could not be bound.
    #[error("cannot bind UDP {addr}: {source} (is another RoCE stack or softroce device using it?)")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The raw backend needs `CAP_NET_RAW` to open a packet socket.
    #[error(
        "the raw backend needs CAP_NET_RAW to open a packet socket on {netdev} (run as root, or `setcap cap_net_raw+ep` the binary; --backend udp needs no privilege)"
    )]
    NeedsCapNetRaw {
        /// The interface.
        netdev: String,
    },
    /// The raw backend's packet socket could not be set up.
    #[error("cannot open a packet socket on {netdev}: {source}")]
    RawSocket {
        /// The interface.
        netdev: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// `modify_qp` was refused.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// A work request was refused.
    #[error(transparent)]
    Post(#[from] PostError),
    /// A GID index past the table.
    #[error("GID index {index} is out of range: the table has {len} entries")]
    GidIndex {
        /// Requested index.
        index: crate::wire::gid::GidIndex,
        /// Table length.
        len: usize,
    },
    /// The address vector's GIDs are of different families than the device's address.
    #[error("GID {0} cannot be reached from this device (address family or scope mismatch)")]
    Unreachable(crate::wire::gid::Gid),
    /// An SGE names a key that is not registered.
    #[error("lkey {0} is not a registered memory region")]
    BadLkey(Lkey),
    /// An SGE's region belongs to another protection domain.
    #[error("lkey {0} belongs to another protection domain")]
    PdMismatch(Lkey),
    /// An SGE reaches outside its region.
    #[error("SGE {addr:#x}+{len} is outside the memory region of lkey {lkey}")]
    SgeOutOfRegion {
        /// SGE address.
        addr: u64,
        /// SGE length.
        len: u32,
        /// SGE key.
        lkey: Lkey,
    },
    /// The receive or READ target region lacks LOCAL_WRITE.
    #[error("lkey {0} lacks LOCAL_WRITE, which receives, READs and atomics need")]
    NotLocalWrite(Lkey),
    /// A device limit was exceeded.
    #[error("device limit exceeded: {what} (max {max})")]
    Limit {
        /// The limit.
        what: &'static str,
        /// Its value.
        max: u64,
    },
    /// The memory for a region could not be allocated.
    #[error("cannot allocate {0} bytes of memory")]
    NoMemory(usize),
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The CQ overflowed; completions were lost and the QPs using it are in error.
    #[error("completion queue overflow")]
    CqOverflow,
    /// An access through a memory region handle fell outside the region.
    #[error(transparent)]
    OutOfRegion(#[from] OutOfRegion),
    /// The QP was destroyed.
    #[error("QP {0} does not exist (destroyed?)")]
    NoSuchQp(Qpn),
    /// `modify_srq` was refused.
    #[error(transparent)]
    Srq(#[from] crate::transport::SrqError),
    /// The fault SPEC (`SOFTROCE_FAULTS`, [`crate::verbs::DeviceConfig::faults`]) is malformed.
    #[error(transparent)]
    Faults(#[from] crate::faults::FaultSpecError),
    /// The device's engine thread stopped.
    #[error("the device's engine thread has stopped")]
    EngineGone,
}

impl Error {
    /// The `errno` libibverbs reports for this failure (what softroce's drop-in
    /// `libibverbs.so.1` and rsockets set).
    pub fn errno(&self) -> i32 {
        let os = |s: &std::io::Error, default| s.raw_os_error().unwrap_or(default);
        match self {
            Error::NoSuchAddress(_) | Error::NoAddress(_) => libc::EADDRNOTAVAIL,
            Error::NoSuchInterface(_) => libc::ENODEV,
            Error::Bind { source, .. } => os(source, libc::EADDRINUSE),
            Error::NeedsCapNetRaw { .. } => libc::EPERM,
            Error::RawSocket { source, .. } | Error::Io(source) => os(source, libc::EIO),
            Error::Limit { .. } => libc::ENOMEM,
            Error::EngineGone => libc::EIO,
            Error::NoSuchQp(_) => libc::ENOENT,
            // (the kernel's rdma_get_gid_attr for a GID index that names no GID)
            Error::GidIndex { .. } => libc::ENODATA,
            _ => libc::EINVAL,
        }
    }
}

/// Result of a verbs call.
pub type Result<T> = std::result::Result<T, Error>;

/// Why an access through a [`MemoryRegion`](crate::verbs::MemoryRegion) handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset} + length {len} is outside the region of {size} bytes")]
pub struct OutOfRegion {
    /// Requested offset.
    pub offset: usize,
    /// Requested length.
    pub len: usize,
    /// Region size.
    pub size: usize,
}
