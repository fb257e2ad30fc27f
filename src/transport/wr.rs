//! Work requests, scatter/gather entries and work completions, named as ibverbs names them.

use smallvec::SmallVec;

use super::ids::{Lkey, Qkey, Qpn, Rkey};
pub use super::memory::MwBind;

/// Bytes at the start of a UD receive buffer that hold the packet's global route header
/// (for RoCEv2: its IP header).
pub const GRH_LEN: usize = 40;

/// A scatter/gather entry: `length` bytes at `addr` in the memory region with key `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (in the region's address space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: Lkey,
}

/// A scatter/gather list. Up to two entries live inline, more spill to the heap.
pub type SgList = SmallVec<[Sge; 2]>;

/// Total length of a scatter/gather list.
pub fn sg_len(sg: &[Sge]) -> u64 {
    sg.iter().map(|s| s.length as u64).sum()
}

/// The remote memory an RDMA or atomic operation targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: Rkey,
}

/// What a send work request does (ibverbs' `ibv_wr_opcode` with its operands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`; the immediate is carried as it appears on the wire.
    SendWithImm(u32),
    /// `IBV_WR_SEND_WITH_INV`: the responder invalidates this rkey.
    SendWithInv(Rkey),
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite(RemoteAddr),
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm(RemoteAddr, u32),
    /// `IBV_WR_RDMA_READ`.
    RdmaRead(RemoteAddr),
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the remote 8 bytes equal `compare`, write `swap`.
    /// The original value lands in the (8-byte) local SGE.
    CompareSwap {
        /// Target.
        remote: RemoteAddr,
        /// Compare operand.
        compare: u64,
        /// Swap operand.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` to the remote 8 bytes.
    FetchAdd {
        /// Target.
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
    /// `IBV_WR_BIND_MW`: binds a memory window to a range of a memory region (a local
    /// operation: no packet; it runs when the send queue reaches it, as in rxe).
    BindMw(MwBind),
    /// `IBV_WR_LOCAL_INV`: invalidates a type 2 memory window's (or an invalidatable
    /// region's) rkey (a local operation).
    LocalInv(Rkey),
}

impl SendOp {
    /// The remote target of one-sided operations.
    pub fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            SendOp::RdmaWrite(r)
            | SendOp::RdmaWriteWithImm(r, _)
            | SendOp::RdmaRead(r)
            | SendOp::CompareSwap { remote: r, .. }
            | SendOp::FetchAdd { remote: r, .. } => Some(r),
            _ => None,
        }
    }
    /// True for RDMA READ and the atomics: operations that take an initiator-depth credit.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(self, SendOp::RdmaRead(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// True for the atomics.
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    /// True for the operations that run locally and send no packet (bind, local invalidate).
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::BindMw(_) | SendOp::LocalInv(_))
    }
    /// True for the SEND family.
    pub fn is_send(&self) -> bool {
        matches!(self, SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_))
    }
    /// The completion opcode of a successful send work request.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
            SendOp::RdmaWrite(_) | SendOp::RdmaWriteWithImm(..) => WcOpcode::RdmaWrite,
            SendOp::RdmaRead(_) => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::BindMw(_) => WcOpcode::BindMw,
            SendOp::LocalInv(_) => WcOpcode::LocalInv,
        }
    }
    /// The immediate data, if the operation carries one.
    pub fn imm(&self) -> Option<u32> {
        match *self {
            SendOp::SendWithImm(i) | SendOp::RdmaWriteWithImm(_, i) => Some(i),
            _ => None,
        }
    }
}

/// Where the data of a send work request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Gathered from registered memory when the packets are built.
    Sges(SgList),
    /// Copied into the work request when it was posted (`IBV_SEND_INLINE`).
    Inline(Box<[u8]>),
}

impl Payload {
    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(s) => sg_len(s),
            Payload::Inline(b) => b.len() as u64,
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Destination of a UD send: the address handle's contents the transport needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// Index of the address handle, opaque to the transport; the engine resolves it.
    pub ah: u32,
    /// Destination QP number.
    pub remote_qpn: Qpn,
    /// Q_Key to send with ([`Qkey::USE_QP`]: the sending QP's own).
    pub remote_qkey: Qkey,
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Identifier returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Data (for SEND/WRITE) or destination (for READ and atomics: the local SGEs).
    pub payload: Payload,
    /// `IBV_SEND_SIGNALED`: generate a completion on success.
    pub signaled: bool,
    /// `IBV_SEND_FENCE`: wait for earlier READs and atomics to complete first.
    pub fence: bool,
    /// `IBV_SEND_SOLICITED`: set the solicited-event bit on the last packet.
    pub solicited: bool,
    /// UD destination (UD QPs only).
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signaled work request with the given operation and scatter/gather list.
    pub fn new(wr_id: u64, op: SendOp, sg: &[Sge]) -> SendWr {
        SendWr {
            wr_id,
            op,
            payload: Payload::Sges(SgList::from_slice(sg)),
            signaled: true,
            fence: false,
            solicited: false,
            ud: None,
        }
    }
    /// A SEND of the bytes `sg` names.
    pub fn send(wr_id: u64, sg: &[Sge]) -> SendWr {
        SendWr::new(wr_id, SendOp::Send, sg)
    }
    /// A SEND with immediate data (as it appears on the wire).
    pub fn send_with_imm(wr_id: u64, sg: &[Sge], imm: u32) -> SendWr {
        SendWr::new(wr_id, SendOp::SendWithImm(imm), sg)
    }
    /// An RDMA WRITE of the bytes `sg` names to the peer's `remote`.
    pub fn write(wr_id: u64, sg: &[Sge], remote: RemoteAddr) -> SendWr {
        SendWr::new(wr_id, SendOp::RdmaWrite(remote), sg)
    }
    /// An RDMA WRITE with immediate data: the peer gets a receive completion.
    pub fn write_with_imm(wr_id: u64, sg: &[Sge], remote: RemoteAddr, imm: u32) -> SendWr {
        SendWr::new(wr_id, SendOp::RdmaWriteWithImm(remote, imm), sg)
    }
    /// An RDMA READ of the peer's `remote` into the local bytes `sg` names.
    pub fn read(wr_id: u64, sg: &[Sge], remote: RemoteAddr) -> SendWr {
        SendWr::new(wr_id, SendOp::RdmaRead(remote), sg)
    }
    /// A fetch-and-add of `add` to the peer's 8 bytes at `remote`; the original value lands in
    /// `sge` (8 bytes).
    pub fn fetch_add(wr_id: u64, sge: Sge, remote: RemoteAddr, add: u64) -> SendWr {
        SendWr::new(wr_id, SendOp::FetchAdd { remote, add }, &[sge])
    }
    /// A compare-and-swap of the peer's 8 bytes at `remote`; the original value lands in `sge`.
    pub fn compare_swap(wr_id: u64, sge: Sge, remote: RemoteAddr, compare: u64, swap: u64) -> SendWr {
        SendWr::new(wr_id, SendOp::CompareSwap { remote, compare, swap }, &[sge])
    }
    /// The same carrying `data` inline (`IBV_SEND_INLINE`: copied now, no memory region
    /// needed; up to the QP's `max_inline_data`).
    #[must_use]
    pub fn inline(self, data: &[u8]) -> SendWr {
        SendWr { payload: Payload::Inline(data.into()), ..self }
    }
    /// The same without a completion on success (`IBV_SEND_SIGNALED` cleared; the QP must
    /// not have been created with `sq_sig_all`).
    #[must_use]
    pub fn unsignaled(self) -> SendWr {
        SendWr { signaled: false, ..self }
    }
    /// The same waiting for earlier READs and atomics first (`IBV_SEND_FENCE`).
    #[must_use]
    pub fn fenced(self) -> SendWr {
        SendWr { fence: true, ..self }
    }
    /// The same with the solicited-event bit (`IBV_SEND_SOLICITED`).
    #[must_use]
    pub fn solicited(self) -> SendWr {
        SendWr { solicited: true, ..self }
    }
    /// The same sent to `dest` (UD QPs: an address handle's
    /// [`dest`](crate::verbs::AddressHandle::dest)).
    #[must_use]
    pub fn to(self, dest: UdDest) -> SendWr {
        SendWr { ud: Some(dest), ..self }
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Identifier returned in the completion.
    pub wr_id: u64,
    /// Where received data lands.
    pub sg_list: SgList,
}

impl RecvWr {
    /// A receive work request over the given entries.
    pub fn new(wr_id: u64, sg: &[Sge]) -> RecvWr {
        RecvWr { wr_id, sg_list: SgList::from_slice(sg) }
    }
}

/// Completion status (`ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: a received message was longer than the receive buffer.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`: an internal QP consistency error (e.g. opcode not valid for
    /// the QP type, or the receive WQE could not hold the message on rxe's path).
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR`: a local SGE failed its key, PD, bounds or access check.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state before this request ran.
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR`: a memory-window bind failed its checks.
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR`: an unexpected response opcode.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder NAKed the request as invalid.
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: the responder's rkey, bounds or access check failed.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retries (timeouts, sequence NAKs) exhausted.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: RNR NAK retries exhausted.
    RnrRetryExcErr,
    /// `IBV_WC_FATAL_ERR`.
    FatalErr,
    /// `IBV_WC_GENERAL_ERR`.
    GeneralErr,
}

impl WcStatus {
    /// ibverbs' name for the status (what `ibv_wc_status_str` prints, in enum form).
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::FatalErr => "IBV_WC_FATAL_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }
    /// The text `ibv_wc_status_str()` returns for the status (what rdma-core's tools print).
    pub fn ibv_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operational error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::FatalErr => "fatal error",
            WcStatus::GeneralErr => "general error",
        }
    }
    /// ibverbs' numeric value of the status.
    pub fn code(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::MwBindErr => 6,
            WcStatus::BadRespErr => 7,
            WcStatus::LocAccessErr => 8,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
            WcStatus::FatalErr => 19,
            WcStatus::GeneralErr => 21,
        }
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Completion opcode (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (any variant) completed.
    Send,
    /// An RDMA WRITE completed.
    RdmaWrite,
    /// An RDMA READ completed.
    RdmaRead,
    /// A compare-and-swap completed.
    CompSwap,
    /// A fetch-and-add completed.
    FetchAdd,
    /// A memory-window bind completed.
    BindMw,
    /// A local invalidate completed.
    LocalInv,
    /// A SEND was received.
    Recv,
    /// An RDMA WRITE with immediate was received.
    RecvRdmaWithImm,
}

/// The network header a UD receive arrived with (the kernel's `ib_wc.network_hdr_type` for
/// RoCEv2): which of the two layouts the 40-byte GRH area at the start of the receive buffer
/// has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkHdr {
    /// RoCEv2 over IPv4: 20 zero bytes, then the IPv4 header (bytes 20..40).
    Ipv4,
    /// RoCEv2 over IPv6: the IPv6 header (its addresses are the GIDs).
    Ipv6,
}

impl NetworkHdr {
    /// The layout of a GRH area as the responder fills it: IPv6 when byte 0 carries IP
    /// version 6, IPv4 when byte 20 carries version 4, else none (an area of zeros: the packet
    /// came without its network header).
    pub fn of_grh_area(area: &[u8; GRH_LEN]) -> Option<NetworkHdr> {
        if area[0] >> 4 == 6 {
            Some(NetworkHdr::Ipv6)
        } else if area[20] >> 4 == 4 {
            Some(NetworkHdr::Ipv4)
        } else {
            None
        }
    }
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode (meaningful on success; for errors it is the request's kind where known).
    pub opcode: WcOpcode,
    /// Bytes transferred: the request's length for send-side completions, the bytes
    /// placed for receives (the RETH length for RDMA WRITE with immediate).
    pub byte_len: u32,
    /// Immediate data, as on the wire.
    pub imm_data: Option<u32>,
    /// The rkey the sender asked to invalidate (SEND with invalidate).
    pub invalidated_rkey: Option<Rkey>,
    /// The local QP number.
    pub qp_num: Qpn,
    /// Source QP number (UD receives).
    pub src_qp: Qpn,
    /// The receive buffer starts with a 40-byte GRH area (UD receives).
    pub grh: bool,
    /// The layout of that GRH area: the network header the datagram came with (UD receives
    /// with `grh`; `None` otherwise).
    pub network_hdr: Option<NetworkHdr>,
    /// The sender set the solicited-event bit.
    pub solicited: bool,
}

impl Default for WorkCompletion {
    /// An empty successful SEND completion: room for [`crate::verbs::CompletionQueue::poll`]
    /// to fill (`[WorkCompletion::default(); 16]`).
    fn default() -> WorkCompletion {
        WorkCompletion::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0))
    }
}

impl WorkCompletion {
    /// A completion with only the identifying fields set.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: Qpn) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num,
            src_qp: Qpn::new(0),
            grh: false,
            network_hdr: None,
            solicited: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_of_a_grh_area() {
        let mut v4 = [0u8; 40];
        v4[20] = 0x45;
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        assert_eq!(NetworkHdr::of_grh_area(&v4), Some(NetworkHdr::Ipv4));
        assert_eq!(NetworkHdr::of_grh_area(&v6), Some(NetworkHdr::Ipv6));
        assert_eq!(NetworkHdr::of_grh_area(&[0; 40]), None, "no network header: 40 zero bytes");
    }
}
