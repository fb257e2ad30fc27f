//! The RDMA CM's protocol logic that needs no I/O (`drivers/infiniband/core/cma.c`,
//! `ucma.c` and librdmacm's `cma.c`, as Linux 6.1 and rdma-core 44 do it): the values
//! rdma_cm puts in a REQ, REP or SIDR_REQ, how a passive side matches a request to a
//! listener, the private data limits, the negotiation of responder resources and initiator
//! depth, the QP attributes each side applies, and how IB CM events become rdma_cm events.
//!
//! An rdma_cm-shaped API drives a [`super::CmEndpoint`] with these; what the kernel does
//! around the IB CM for a *user-space* rdma_cm id is:
//!
//! - passive, on [`super::CmEvent::ReqReceived`]: [`match_request`] against the listeners
//!   bound to the service ID's port space and port; on failure
//!   [`super::CmEndpoint::reject`] with [`RejReason::ConsumerDefined`] (from `REQ_RCVD`, so the
//!   REJ carries local comm ID 0); on success deliver `CONNECT_REQUEST` and call
//!   [`super::CmEndpoint::mra`]`(id, `[`CMA_CM_MRA_SERVICE_TIMEOUT`]`, delay = true, &[])` at
//!   once (`cma_ib_req_handler`), so that a duplicate REQ is answered with an MRA;
//! - passive `rdma_accept`: QP to INIT, RTR, RTS with [`rdma_qp_attrs`], then
//!   [`super::CmEndpoint::accept`] with [`rep_params`]; `rdma_reject`: reason 28 with the user's
//!   private data (at most [`REJ_PRIVATE_DATA`] bytes);
//! - active `rdma_connect`: [`req_params`] then [`super::CmEndpoint::connect`]; on
//!   [`super::CmEvent::RepReceived`] with a user-space QP, [`super::CmEndpoint::mra`] with delay,
//!   QP to RTR and RTS, then [`super::CmEndpoint::ready_to_use`] (`ucma_process_conn_resp` +
//!   `cma_rep_recv`) and deliver `ESTABLISHED`;
//! - `rdma_disconnect`: QP to ERR, then [`super::CmEndpoint::disconnect`];
//!   `rdma_destroy_id`: [`super::CmEndpoint::destroy`];
//! - events: [`rdma_event`], delivering `DISCONNECTED` only once per connection.

use core::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{
    CmError, CmEvent, CmPathRecord, CmQpAttrs, Ece, RepParams, ReqInfo, ReqParams, SendError, SidrReqParams,
};
use crate::wire::cm::{CmTransport, RejReason, SidrStatus, private_data_len as pdl};
use crate::wire::cma::{self, CMA_HDR_LEN, CmaHdr, CmaHdrRepr, PortSpace};

/// Remote and local CM response timeouts rdma_cm puts in a REQ (`CMA_CM_RESPONSE_TIMEOUT`).
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// Max CM retries rdma_cm puts in a REQ and uses for SIDR (`CMA_MAX_CM_RETRIES`).
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// The Service Timeout of rdma_cm's delayed MRA (`CMA_CM_MRA_SETTING` without its flag).
pub const CMA_CM_MRA_SERVICE_TIMEOUT: u8 = 24;
/// The packet life time rdma_cm gives a RoCE path (`CMA_IBOE_PACKET_LIFETIME`): 18 in Linux
/// 6.1, which the captures confirm (REQ Local ACK Timeout 19 = `cm_ack_timeout(15, 18)`);
/// later kernels use 16.
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 18;
/// The SIDR_REQ retransmission interval (`1 << (CMA_CM_RESPONSE_TIMEOUT - 8)` ms).
pub const SIDR_TIMEOUT: Duration = Duration::from_millis(1 << (CMA_CM_RESPONSE_TIMEOUT - 8));
/// "The device's maximum" for responder resources in a `rdma_conn_param` (librdmacm).
pub const RDMA_MAX_RESP_RES: u8 = 0xff;
/// "The device's maximum" for initiator depth in a `rdma_conn_param` (librdmacm).
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xff;
/// ucma's default (and largest) listen backlog (`max_backlog`).
pub const UCMA_MAX_BACKLOG: usize = 1024;
/// The `errno` rdma_cm reports with UNREACHABLE and a DISCONNECTED after a DREQ timeout.
pub const ETIMEDOUT: i32 = 110;

/// User private data a REQ carries after the `cma_hdr`: 92 − 36 = 56 bytes.
pub const REQ_PRIVATE_DATA: usize = pdl::REQ - CMA_HDR_LEN;
/// User private data a SIDR_REQ carries after the `cma_hdr`: 216 − 36 = 180 bytes.
pub const SIDR_REQ_PRIVATE_DATA: usize = pdl::SIDR_REQ - CMA_HDR_LEN;
/// User private data of a REP (no `cma_hdr`): 196 bytes.
pub const REP_PRIVATE_DATA: usize = pdl::REP;
/// User private data of a REJ: 148 bytes.
pub const REJ_PRIVATE_DATA: usize = pdl::REJ;
/// User private data of a SIDR_REP: 136 bytes.
pub const SIDR_REP_PRIVATE_DATA: usize = pdl::SIDR_REP;

/// The QP type of an rdma_cm id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaQpType {
    /// Reliable connected (port space TCP).
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram (port space UDP, SIDR).
    Ud,
}

/// A listening rdma_cm id: its port space, bound address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmaListen {
    /// Port space.
    pub ps: PortSpace,
    /// Bound address: a unicast address, or the unspecified / loopback address for "any".
    pub addr: IpAddr,
    /// Port.
    pub port: u16,
    /// Only requests of the bound address's family (`afonly`; Linux sets it for every IPv4
    /// bind, and for IPv6 as `bindv6only` says, 0 by default).
    pub afonly: bool,
    /// The QP type of the listener.
    pub qp_type: RdmaQpType,
}

fn is_any(ip: IpAddr) -> bool {
    ip.is_unspecified() || ip.is_loopback()
}

impl RdmaListen {
    /// The service ID the IB CM listens on: `(ps << 16) + port`.
    pub fn service_id(&self) -> u64 {
        self.ps.service_id(self.port)
    }

    /// `cma_match_private_data`: whether a request's `cma_hdr` is for this listener. A
    /// wildcard listener that is not `afonly` takes everything; otherwise the IP version must
    /// be the listener's and, unless bound to any/loopback, the destination its address.
    pub fn matches(&self, hdr: &CmaHdrRepr) -> bool {
        if is_any(self.addr) && !self.afonly {
            return true;
        }
        match self.addr {
            IpAddr::V4(a) => {
                hdr.ip_version == 4 && (is_any(self.addr) || hdr.dst_ip() == Some(IpAddr::V4(a)))
            }
            IpAddr::V6(a) => {
                hdr.ip_version == 6 && (is_any(self.addr) || hdr.dst_ip() == Some(IpAddr::V6(a)))
            }
        }
    }
}

/// What kind of request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// A REQ for this transport.
    Connect(CmTransport),
    /// A SIDR_REQ.
    Sidr,
}

/// A request matched to a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedRequest {
    /// Index of the listener in the slice given to [`match_request`].
    pub listener: usize,
    /// The request's `cma_hdr`.
    pub hdr: CmaHdrRepr,
    /// The peer's address and port (the new id's destination).
    pub peer: SocketAddr,
    /// Our address and the service port (the new id's source).
    pub local: SocketAddr,
    /// The user's private data: everything after the `cma_hdr` (Linux reports the full
    /// length, 56 for a REQ and 180 for a SIDR_REQ, whatever the peer wrote).
    pub private_data: Vec<u8>,
}

/// Why rdma_cm turns a request down after the IB CM found a listener for its service ID.
/// Linux then rejects with reason 28 (SIDR: a SIDR_REP with status "reject").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestRefused {
    /// No `cma_hdr` or a `cma_version` other than 0 (`cma_save_ip_info`).
    BadHeader,
    /// The IP version is neither 4 nor 6.
    BadIpVersion,
    /// Source or destination is multicast, broadcast or zero (`validate_ipv4_net_dev`; the
    /// route check itself is the engine's). Linux also refuses loopback addresses, which no
    /// rxe device serves; softroce devices do serve them, so they pass here.
    BadAddress,
    /// No listener's port space and port is the service ID's, or none matches the address.
    NoListener,
    /// The listener's QP type is not the request's (`cma_ib_check_req_qp_type`).
    WrongQpType,
    /// The destination address is not one of ours (`cma_ib_acquire_dev`).
    NotLocal,
}

fn bad_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.is_unspecified(),
        IpAddr::V6(a) => a.is_multicast() || a.is_unspecified(),
    }
}

/// Splits REQ or SIDR_REQ private data into the `cma_hdr` and the user's data.
pub fn split_private_data(pd: &[u8]) -> Option<(CmaHdrRepr, &[u8])> {
    let hdr = CmaHdrRepr::parse(&CmaHdr::new_checked(pd).ok()?);
    Some((hdr, &pd[CMA_HDR_LEN..]))
}

/// Matches a request to a listener as `cma_ib_id_from_event` and `cma_ib_req_handler` do:
/// parse the `cma_hdr`, check the addresses, find the listeners of the service ID's port space
/// and port, the first whose address matches, and check the QP type and that the destination
/// is local (`is_local`).
pub fn match_request(
    listeners: &[RdmaListen],
    service_id: u64,
    private_data: &[u8],
    kind: RequestKind,
    is_local: impl Fn(IpAddr) -> bool,
) -> Result<MatchedRequest, RequestRefused> {
    let (hdr, user) = split_private_data(private_data).ok_or(RequestRefused::BadHeader)?;
    if hdr.cma_version != cma::CMA_VERSION {
        return Err(RequestRefused::BadHeader);
    }
    let (Some(src), Some(dst)) = (hdr.src_ip(), hdr.dst_ip()) else {
        return Err(RequestRefused::BadIpVersion);
    };
    if bad_unicast(src) || bad_unicast(dst) {
        return Err(RequestRefused::BadAddress);
    }
    let ps = cma::ps_from_service_id(service_id);
    let port = cma::port_from_service_id(service_id);
    let (listener, l) = listeners
        .iter()
        .enumerate()
        .find(|(_, l)| l.ps as u16 == ps && l.port == port && service_id >> 32 == 0 && l.matches(&hdr))
        .ok_or(RequestRefused::NoListener)?;
    let type_ok = matches!(
        (kind, l.qp_type),
        (RequestKind::Connect(CmTransport::Rc), RdmaQpType::Rc)
            | (RequestKind::Connect(CmTransport::Uc), RdmaQpType::Uc)
            | (RequestKind::Sidr, RdmaQpType::Ud)
    );
    if !type_ok {
        return Err(RequestRefused::WrongQpType);
    }
    if !is_local(dst) {
        return Err(RequestRefused::NotLocal);
    }
    Ok(MatchedRequest {
        listener,
        hdr,
        peer: SocketAddr::new(src, hdr.port),
        local: SocketAddr::new(dst, port),
        private_data: user.to_vec(),
    })
}

/// REQ or SIDR_REQ private data: the `cma_hdr` then the user's bytes (`cma_connect_ib`,
/// `cma_resolve_ib_udp`). At most 56 user bytes for a REQ, 180 for a SIDR_REQ.
pub fn request_private_data(hdr: &CmaHdrRepr, user: &[u8], sidr: bool) -> Result<Vec<u8>, CmError> {
    let max = if sidr { SIDR_REQ_PRIVATE_DATA } else { REQ_PRIVATE_DATA };
    if user.len() > max {
        return Err(CmError::PrivateDataTooLong { len: user.len(), max });
    }
    let mut v = vec![0u8; CMA_HDR_LEN + user.len()];
    hdr.emit(&mut CmaHdr::new_unchecked(&mut v[..]));
    v[CMA_HDR_LEN..].copy_from_slice(user);
    Ok(v)
}

/// `struct rdma_conn_param`, as an application gives it to `rdma_connect` or `rdma_accept`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnParam {
    /// Private data (user bytes only).
    pub private_data: Vec<u8>,
    /// Responder resources, or [`RDMA_MAX_RESP_RES`] for the device's maximum.
    pub responder_resources: u8,
    /// Initiator depth, or [`RDMA_MAX_INIT_DEPTH`].
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retry count (at most 7 is used).
    pub retry_count: u8,
    /// RNR retry count (at most 7 is used; 7 means "infinite").
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ (when the id has no QP of its own).
    pub srq: bool,
    /// The QP number (when the id has no QP of its own).
    pub qp_num: u32,
}

/// The device limits the negotiation clamps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceCaps {
    /// `max_qp_rd_atom`: RDMA READ/atomic requests a QP can answer at once.
    pub max_qp_rd_atom: u8,
    /// `max_qp_init_rd_atom`: requests a QP can have outstanding.
    pub max_qp_init_rd_atom: u8,
}

/// What a side puts on the wire and applies to its QP after negotiation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Responder resources (the QP's `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// Initiator depth (the QP's `max_rd_atomic`).
    pub initiator_depth: u8,
    /// Transport retry count, at most 7 (active side only: the REQ carries it).
    pub retry_count: u8,
    /// RNR retry count, at most 7.
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The user's private data.
    pub private_data: Vec<u8>,
}

/// The active side's values (librdmacm `rdma_connect` + `ucma_copy_conn_param_to_kern`,
/// kernel `cma_connect_ib`): the given resources or the device's maximum for 0xff or no
/// parameters; retry and RNR retry as given, 7 without parameters, at most 7.
pub fn connect_values(param: Option<&ConnParam>, caps: DeviceCaps) -> Negotiated {
    let pick = |v: Option<u8>, max_marker: u8, cap: u8| match v {
        Some(v) if v != max_marker => v,
        _ => cap,
    };
    Negotiated {
        responder_resources: pick(
            param.map(|p| p.responder_resources),
            RDMA_MAX_RESP_RES,
            caps.max_qp_rd_atom,
        ),
        initiator_depth: pick(
            param.map(|p| p.initiator_depth),
            RDMA_MAX_INIT_DEPTH,
            caps.max_qp_init_rd_atom,
        ),
        retry_count: param.map_or(7, |p| p.retry_count).min(7),
        rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count).min(7),
        flow_control: param.is_some_and(|p| p.flow_control),
        private_data: param.map(|p| p.private_data.clone()).unwrap_or_default(),
    }
}

/// The passive side's values (librdmacm `rdma_accept`): for 0xff or no parameters, the
/// request's offer clamped to the device (initiator depth = min(the REQ's responder
/// resources, `max_qp_init_rd_atom`), responder resources = min(the REQ's initiator depth,
/// `max_qp_rd_atom`)); RNR retry as given, 7 without parameters.
pub fn accept_values(param: Option<&ConnParam>, req: &ReqInfo, caps: DeviceCaps) -> Negotiated {
    let initiator_depth = match param.map(|p| p.initiator_depth) {
        Some(v) if v != RDMA_MAX_INIT_DEPTH => v,
        _ => req.initiator_depth.min(caps.max_qp_init_rd_atom),
    };
    let responder_resources = match param.map(|p| p.responder_resources) {
        Some(v) if v != RDMA_MAX_RESP_RES => v,
        _ => req.responder_resources.min(caps.max_qp_rd_atom),
    };
    Negotiated {
        responder_resources,
        initiator_depth,
        retry_count: req.retry_count,
        rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count).min(7),
        flow_control: param.is_some_and(|p| p.flow_control),
        private_data: param.map(|p| p.private_data.clone()).unwrap_or_default(),
    }
}

/// `iboe_get_mtu`: the largest IB MTU (IBTA enum) that fits a netdev MTU once the RoCE
/// headers are taken off (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4 = 96 bytes).
/// 1500 gives 3 (1024); 0 when not even 256 fits.
pub fn iboe_get_mtu(netdev_mtu: u32) -> u8 {
    let m = netdev_mtu.saturating_sub(96);
    match m {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        256.. => 1,
        _ => 0,
    }
}

/// An active side's resolved route (what `rdma_resolve_addr` and `rdma_resolve_route` leave in
/// the id on RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmaRoute {
    /// Our address and port (the port goes in the `cma_hdr` and the flow label).
    pub src: SocketAddr,
    /// The peer's address and the service port.
    pub dst: SocketAddr,
    /// Path MTU, IBTA enum ([`iboe_get_mtu`] of the netdev MTU).
    pub mtu: u8,
    /// The route's hop limit (64).
    pub hop_limit: u8,
    /// Type of service (`rdma_set_service_type`, default 0).
    pub tos: u8,
    /// `rdma_set_ack_timeout`, if called before route resolution: the packet life time becomes
    /// `timeout - 1`.
    pub ack_timeout: Option<u8>,
    /// The IPv6 flow label of the source address, if any (0 or `None`: derived from ports).
    pub ipv6_flow_label: Option<u32>,
}

/// The path record of a RoCE route (`cma_resolve_iboe_route`): GIDs from the IP addresses,
/// P_Key 0xffff, SL 0, traffic class = ToS, rate 0 (port current), packet life time 18 (or
/// the ACK timeout − 1), flow label from the ports.
pub fn path_record(route: &RdmaRoute) -> CmPathRecord {
    let flow_label = match route.ipv6_flow_label {
        Some(fl) if fl & 0xf_ffff != 0 && route.src.is_ipv6() => fl & 0xf_ffff,
        _ => cma::roce_udp_flow_label(route.src.port(), route.dst.port()),
    };
    CmPathRecord {
        local_gid: cma::ip_to_gid(route.src.ip()),
        remote_gid: cma::ip_to_gid(route.dst.ip()),
        flow_label,
        traffic_class: route.tos,
        hop_limit: route.hop_limit,
        sl: 0,
        pkey: 0xffff,
        mtu: route.mtu,
        rate: 0,
        packet_life_time: match route.ack_timeout {
            Some(t) if t > 0 => t - 1,
            _ => CMA_IBOE_PACKET_LIFETIME,
        },
    }
}

/// The REQ an `rdma_connect` sends (`cma_connect_ib`): the route's path, the service ID
/// of the destination port in `ps`, the `cma_hdr`, our `seq_num` as Starting PSN (the PSN we
/// expect to receive), timeouts 20/20 and 15 retries.
pub fn req_params(
    route: &RdmaRoute,
    ps: PortSpace,
    qpn: u32,
    qp_type: RdmaQpType,
    seq_num: u32,
    neg: &Negotiated,
    srq: bool,
) -> Result<ReqParams, CmError> {
    let transport = match qp_type {
        RdmaQpType::Rc => CmTransport::Rc,
        RdmaQpType::Uc => CmTransport::Uc,
        RdmaQpType::Ud => return Err(CmError::InvalidParam("a UD id resolves its peer with SIDR")),
    };
    let hdr = CmaHdrRepr::new(route.src.ip(), route.src.port(), route.dst.ip())
        .ok_or(CmError::InvalidParam("source and destination of different IP families"))?;
    Ok(ReqParams {
        path: path_record(route),
        service_id: ps.service_id(route.dst.port()),
        qpn,
        transport,
        starting_psn: seq_num & 0xff_ffff,
        responder_resources: neg.responder_resources,
        initiator_depth: neg.initiator_depth,
        flow_control: neg.flow_control,
        retry_count: neg.retry_count.min(7),
        rnr_retry_count: neg.rnr_retry_count.min(7),
        remote_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
        local_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
        max_cm_retries: CMA_MAX_CM_RETRIES,
        srq,
        private_data: request_private_data(&hdr, &neg.private_data, false)?,
        ece: Ece::default(),
    })
}

/// The REP an `rdma_accept` sends (`cma_accept_ib`): our QP, our `seq_num` as Starting PSN,
/// the negotiated resources, failover 0.
pub fn rep_params(qpn: u32, seq_num: u32, neg: &Negotiated, srq: bool) -> Result<RepParams, CmError> {
    if neg.private_data.len() > REP_PRIVATE_DATA {
        return Err(CmError::PrivateDataTooLong { len: neg.private_data.len(), max: REP_PRIVATE_DATA });
    }
    Ok(RepParams {
        qpn,
        starting_psn: seq_num & 0xff_ffff,
        responder_resources: neg.responder_resources,
        initiator_depth: neg.initiator_depth,
        failover_accepted: 0,
        flow_control: neg.flow_control,
        rnr_retry_count: neg.rnr_retry_count.min(7),
        srq,
        private_data: neg.private_data.clone(),
        ece: Ece::default(),
    })
}

/// The SIDR_REQ an `rdma_connect` on a UD id sends (`cma_resolve_ib_udp`).
pub fn sidr_params(route: &RdmaRoute, ps: PortSpace, user: &[u8]) -> Result<SidrReqParams, CmError> {
    let hdr = CmaHdrRepr::new(route.src.ip(), route.src.port(), route.dst.ip())
        .ok_or(CmError::InvalidParam("source and destination of different IP families"))?;
    Ok(SidrReqParams {
        path: path_record(route),
        service_id: ps.service_id(route.dst.port()),
        timeout: SIDR_TIMEOUT,
        max_cm_retries: CMA_MAX_CM_RETRIES,
        private_data: request_private_data(&hdr, user, true)?,
    })
}

/// What rdma_cm changes in the CM's QP attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdmaQpOverrides {
    /// `conn_param.responder_resources` (RTR `max_dest_rd_atomic`) unless 0xff.
    pub responder_resources: Option<u8>,
    /// `conn_param.initiator_depth` (RTS `max_rd_atomic`) unless 0xff.
    pub initiator_depth: Option<u8>,
    /// `rdma_set_ack_timeout` (RTS timeout).
    pub ack_timeout: Option<u8>,
    /// `rdma_set_min_rnr_timer` (RTR min RNR timer).
    pub min_rnr_timer: Option<u8>,
}

/// `rdma_init_qp_attr` on top of the CM's attributes: RTR's `rq_psn` is the id's own
/// `seq_num` (the Starting PSN it sent), and the overrides replace what they name.
pub fn rdma_qp_attrs(cm: CmQpAttrs, seq_num: u32, o: &RdmaQpOverrides) -> CmQpAttrs {
    let mut a = cm;
    a.rq_psn = seq_num & 0xff_ffff;
    if let Some(v) = o.responder_resources.filter(|&v| v != RDMA_MAX_RESP_RES) {
        a.max_dest_rd_atomic = v;
    }
    if let Some(v) = o.initiator_depth.filter(|&v| v != RDMA_MAX_INIT_DEPTH) {
        a.max_rd_atomic = v;
    }
    if let Some(v) = o.ack_timeout {
        a.timeout = v;
    }
    if let Some(v) = o.min_rnr_timer {
        a.min_rnr_timer = v & 0x1f;
    }
    a
}

/// The rdma_cm event types, with librdmacm's names (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum RdmaEventType {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    MulticastJoin,
    MulticastError,
    AddrChange,
    TimewaitExit,
}

impl RdmaEventType {
    /// The name librdmacm's `rdma_event_str` gives.
    pub fn name(self) -> &'static str {
        match self {
            RdmaEventType::AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            RdmaEventType::AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            RdmaEventType::RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            RdmaEventType::RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            RdmaEventType::ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            RdmaEventType::ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            RdmaEventType::ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            RdmaEventType::Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            RdmaEventType::Rejected => "RDMA_CM_EVENT_REJECTED",
            RdmaEventType::Established => "RDMA_CM_EVENT_ESTABLISHED",
            RdmaEventType::Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            RdmaEventType::DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            RdmaEventType::MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            RdmaEventType::MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            RdmaEventType::AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            RdmaEventType::TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        }
    }
}

/// The rdma_cm event an IB CM event becomes (`cma_ib_handler`, `cma_ib_req_handler`,
/// `cma_sidr_rep_handler`), with its status: the REJ reason for REJECTED (8 for "no
/// listener", 28 for an application's reject), −110 for timeouts, the SIDR status for a
/// failed SIDR. `user_qp`: the QP lives in user space, so a REP gives CONNECT_RESPONSE (which
/// librdmacm turns into ESTABLISHED once it has sent the RTU). `None`: no event (MRA).
///
/// rdma_cm moves the id from CONNECT to DISCONNECT on the first DREQ, DREP or DREQ timeout
/// and reports DISCONNECTED only then: the caller delivers [`RdmaEventType::Disconnected`] once.
pub fn rdma_event(ev: &CmEvent, user_qp: bool) -> Option<(RdmaEventType, i32)> {
    Some(match ev {
        CmEvent::ReqReceived { .. } | CmEvent::SidrReqReceived { .. } => (RdmaEventType::ConnectRequest, 0),
        CmEvent::RepReceived { .. } if user_qp => (RdmaEventType::ConnectResponse, 0),
        CmEvent::RepReceived { .. } | CmEvent::RtuReceived { .. } | CmEvent::UserEstablished { .. } => {
            (RdmaEventType::Established, 0)
        }
        CmEvent::RejReceived { reason, .. } => (RdmaEventType::Rejected, i32::from(*reason)),
        CmEvent::MraReceived { .. } => return None,
        CmEvent::DreqReceived { .. } | CmEvent::DrepReceived { .. } => (RdmaEventType::Disconnected, 0),
        CmEvent::TimewaitExit { .. } => (RdmaEventType::TimewaitExit, 0),
        CmEvent::SendError { what: SendError::Dreq, .. } => (RdmaEventType::Disconnected, -ETIMEDOUT),
        CmEvent::SendError { .. } => (RdmaEventType::Unreachable, -ETIMEDOUT),
        CmEvent::SidrRepReceived { status, .. } if *status != SidrStatus::Success as u8 => {
            (RdmaEventType::Unreachable, i32::from(*status))
        }
        CmEvent::SidrRepReceived { .. } => (RdmaEventType::Established, 0),
    })
}

/// The reject reason rdma_cm uses for `rdma_reject` and its own refusals.
pub const CONSUMER_REJECT: RejReason = RejReason::ConsumerDefined;
