//! Human-readable rendering of packets, as `softroce dump` prints them.
//!
//! [`PacketLine`] is the one-line summary of a transport packet (opcode, QPN, PSN, flags,
//! extension headers, payload length); [`FrameLine`] prefixes it with the IP/UDP fields and
//! suffixes the ICRC verdict (and, for a MAD to QP1, the [`MadLine`] summary of the CM message);
//! [`FrameDetail`] prints every header field on its own line, and [`MadDetail`] every MAD field.

use core::fmt;

use super::aeth::{AethRepr, NakCode, Syndrome, rnr_timer_ns};
use super::opcode::Operation;
use super::packet::{Packet, PacketRepr};
use super::roce::RoceFrame;

/// One-line summary of a transport packet.
pub struct PacketLine<'a, 'b>(pub &'b Packet<'a>);

fn fmt_aeth(f: &mut fmt::Formatter<'_>, a: &AethRepr) -> fmt::Result {
    match a.syndrome() {
        Syndrome::Ack { credits } => write!(f, "AETH(ACK credits={credits} msn={})", a.msn),
        Syndrome::RnrNak { timer } => {
            let us = rnr_timer_ns(timer) as f64 / 1000.0;
            write!(f, "AETH(RNR_NAK timer={timer} ({us} us) msn={})", a.msn)
        }
        Syndrome::Nak(code) => {
            let name = match code {
                NakCode::PsnSequenceError => "PSN_SEQ_ERR".to_string(),
                NakCode::InvalidRequest => "INV_REQ".to_string(),
                NakCode::RemoteAccessError => "REM_ACCESS_ERR".to_string(),
                NakCode::RemoteOperationalError => "REM_OP_ERR".to_string(),
                NakCode::InvalidRdRequest => "INV_RD_REQ".to_string(),
                NakCode::Reserved(c) => format!("reserved({c})"),
            };
            write!(f, "AETH(NAK {name} msn={})", a.msn)
        }
        Syndrome::Reserved(b) => write!(f, "AETH(reserved syndrome={b:#04x} msn={})", a.msn),
    }
}

fn fmt_ext(f: &mut fmt::Formatter<'_>, r: &PacketRepr) -> fmt::Result {
    if let Some(d) = r.deth {
        write!(f, " DETH(qkey={:#010x} srcqp={:#08x})", d.qkey, d.src_qp)?;
    }
    if let Some(e) = r.feth {
        write!(f, " FETH(sel={} plt={})", e.sel(), e.plt())?;
    }
    if let Some(e) = r.reth {
        write!(f, " RETH(va={:#x} rkey={:#x} len={})", e.va, e.rkey, e.dma_len)?;
    }
    if let Some(a) = r.atomic_eth {
        if r.bth.opcode.info().map(|i| i.operation) == Some(Operation::CompareSwap) {
            write!(f, " AtomicETH(va={:#x} rkey={:#x} swap={} cmp={})", a.va, a.rkey, a.swap_add, a.compare)?;
        } else {
            write!(f, " AtomicETH(va={:#x} rkey={:#x} add={})", a.va, a.rkey, a.swap_add)?;
        }
    }
    if let Some(a) = r.aeth {
        write!(f, " ")?;
        fmt_aeth(f, &a)?;
    }
    if let Some(a) = r.atomic_ack_eth {
        write!(f, " AtomicAckETH(orig={})", a.orig)?;
    }
    if let Some(i) = r.immdt {
        write!(f, " ImmDt({:#010x})", i.imm)?;
    }
    if let Some(i) = r.ieth {
        write!(f, " IETH(rkey={:#x})", i.rkey)?;
    }
    Ok(())
}

impl fmt::Display for PacketLine<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let r = PacketRepr::parse(p);
        let b = r.bth;
        write!(
            f,
            "{:<18} qp={:#08x} psn={:#08x} A={} SE={} M={} pad={}",
            p.info().name,
            b.dest_qp,
            b.psn.value(),
            b.ack_req as u8,
            b.solicited as u8,
            b.mig_req as u8,
            b.pad
        )?;
        if b.pkey != 0xffff {
            write!(f, " pkey={:#06x}", b.pkey)?;
        }
        if b.fecn || b.becn {
            write!(f, " FECN={} BECN={}", b.fecn as u8, b.becn as u8)?;
        }
        if b.tver != 0 {
            write!(f, " tver={}", b.tver)?;
        }
        fmt_ext(f, &r)?;
        write!(f, " len={}", p.payload().len())
    }
}

/// One-line summary of a RoCEv2 frame: addresses, ports, IP fields, the packet, the ICRC.
pub struct FrameLine<'a, 'b>(pub &'b RoceFrame<'a>);

impl fmt::Display for FrameLine<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fr = self.0;
        if fr.is_ipv6() {
            write!(f, "[{}]:{} > [{}]:{}", fr.src_addr(), fr.src_port(), fr.dst_addr(), fr.dst_port())?;
            write!(
                f,
                " tc={:#04x} flow={:#07x} hop={}",
                fr.traffic_class(),
                fr.flow_label().unwrap_or(0),
                fr.hop_limit()
            )?;
        } else {
            write!(f, "{}:{} > {}:{}", fr.src_addr(), fr.src_port(), fr.dst_addr(), fr.dst_port())?;
            write!(
                f,
                " id={:#06x}{} ttl={} tos={:#04x}",
                fr.ip_id().unwrap_or(0),
                if fr.df() == Some(true) { " DF" } else { "" },
                fr.hop_limit(),
                fr.traffic_class()
            )?;
        }
        write!(f, " | {}", PacketLine(&fr.packet()))?;
        let ok = fr.icrc_ok();
        write!(f, " icrc={:#010x} {}", fr.packet().icrc(), if ok { "ok" } else { "BAD" })?;
        if !ok {
            write!(f, " (expected {:#010x}", fr.computed_icrc())?;
            if let Some(id) = icrc_explained_by_ip_id(fr) {
                write!(
                    f,
                    "; it matches IP id={:#06x}{}: the sender computed it for other IP header fields",
                    id.id,
                    if id.df { " DF" } else { "" }
                )?;
            }
            write!(f, ")")?;
        }
        let p = fr.packet();
        if is_mad(&p) {
            write!(f, " | {}", MadLine(p.payload()))?;
        }
        Ok(())
    }
}

/// For an IPv4 frame with a bad ICRC: the IP identification and DF flag the ICRC was computed
/// for, when changing only those explains it (a sender that let the kernel pick the IP ID).
fn icrc_explained_by_ip_id(fr: &RoceFrame<'_>) -> Option<super::icrc::RecoveredIpv4> {
    let hdr: [u8; 20] = fr.ip_header().try_into().ok()?;
    let p = fr.packet();
    super::icrc::recover_ipv4_id(&hdr, fr.udp_header(), p.without_icrc(), p.icrc()).ok().flatten()
}

/// Every header field of a frame, one header per line, indented.
pub struct FrameDetail<'a, 'b>(pub &'b RoceFrame<'a>);

impl fmt::Display for FrameDetail<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fr = self.0;
        let p = fr.packet();
        let r = PacketRepr::parse(&p);
        if fr.is_ipv6() {
            writeln!(
                f,
                "    IPv6   src={} dst={} tc={:#04x} (dscp={} ecn={}) flow={:#07x} hop={} payload_len={}",
                fr.src_addr(),
                fr.dst_addr(),
                fr.traffic_class(),
                fr.traffic_class() >> 2,
                fr.traffic_class() & 3,
                fr.flow_label().unwrap_or(0),
                fr.hop_limit(),
                fr.ip_header().len() + fr.udp_header().len() + p.len() - 40
            )?;
        } else {
            let ip = fr.ip_header();
            writeln!(
                f,
                "    IPv4   src={} dst={} tos={:#04x} (dscp={} ecn={}) id={:#06x} flags={}{} ttl={} total_len={} cksum={:#06x}",
                fr.src_addr(),
                fr.dst_addr(),
                fr.traffic_class(),
                fr.traffic_class() >> 2,
                fr.traffic_class() & 3,
                fr.ip_id().unwrap_or(0),
                if ip[6] & 0x40 != 0 { "DF" } else { "-" },
                if ip[6] & 0x20 != 0 { ",MF" } else { "" },
                fr.hop_limit(),
                u16::from_be_bytes([ip[2], ip[3]]),
                u16::from_be_bytes([ip[10], ip[11]]),
            )?;
        }
        writeln!(
            f,
            "    UDP    sport={} dport={} len={} cksum={:#06x}",
            fr.src_port(),
            fr.dst_port(),
            fr.udp_header().len() + p.len(),
            fr.udp_checksum()
        )?;
        let b = r.bth;
        writeln!(
            f,
            "    BTH    opcode={:#04x} ({}) SE={} M={} pad={} tver={} pkey={:#06x} FECN={} BECN={} resv6={:#04x} dqp={:#08x} A={} resv7={:#04x} psn={:#08x} ({})",
            b.opcode.0,
            p.info().name,
            b.solicited as u8,
            b.mig_req as u8,
            b.pad,
            b.tver,
            b.pkey,
            b.fecn as u8,
            b.becn as u8,
            b.resv6,
            b.dest_qp,
            b.ack_req as u8,
            b.resv7,
            b.psn.value(),
            b.psn.value()
        )?;
        let mut ext = String::new();
        {
            use core::fmt::Write;
            let _ = write!(ext, "{}", ExtOnly(&r));
        }
        for h in ext.split_inclusive(") ").map(str::trim).filter(|s| !s.is_empty()) {
            let (name, rest) = h.split_once('(').unwrap_or((h, ""));
            writeln!(f, "    {:<6} {}", name, rest.trim_end_matches(')'))?;
        }
        writeln!(f, "    data   {} bytes, pad {}", p.payload().len(), p.pad_bytes().len())?;
        if is_mad(&p) {
            writeln!(f, "{}", MadDetail(p.payload()))?;
        }
        let ok = fr.icrc_ok();
        write!(
            f,
            "    ICRC   {:#010x} {} (computed {:#010x})",
            p.icrc(),
            if ok { "ok" } else { "BAD" },
            fr.computed_icrc()
        )
    }
}

struct ExtOnly<'a>(&'a PacketRepr);

impl fmt::Display for ExtOnly<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_ext(f, self.0)?;
        write!(f, " ")
    }
}

/// True when a packet is a MAD: a UD packet to QP1 (the GSI QP).
pub fn is_mad(p: &Packet<'_>) -> bool {
    p.deth().is_some() && p.bth().dest_qp() == super::cm::GSI_QPN
}

fn gid_text(g: &[u8]) -> String {
    match <[u8; 16]>::try_from(g) {
        Ok(a) => super::cma::gid_to_ip(&a).to_string(),
        Err(_) => hex_bytes(g),
    }
}

fn hex_bytes(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// Private data as hex without its zero tail (`"" (92 zero bytes)` when all zero).
fn private_text(b: &[u8]) -> String {
    let used = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    if used == 0 {
        format!("({} zero bytes)", b.len())
    } else if used == b.len() {
        hex_bytes(b)
    } else {
        format!("{} (+{} zero bytes)", hex_bytes(&b[..used]), b.len() - used)
    }
}

fn service_text(sid: u64) -> String {
    use super::cma::{PortSpace, is_ip_service_id, port_from_service_id, ps_from_service_id};
    if is_ip_service_id(sid) {
        let ps = match PortSpace::from_u16(ps_from_service_id(sid)) {
            Some(PortSpace::Tcp) => "TCP",
            Some(PortSpace::Udp) => "UDP",
            Some(PortSpace::Ib) => "IB",
            Some(PortSpace::Ipoib) => "IPoIB",
            None => "?",
        };
        format!("{sid:#018x}({ps}:{})", port_from_service_id(sid))
    } else {
        format!("{sid:#018x}")
    }
}

fn cma_text(pd: &[u8]) -> Option<String> {
    use super::cma::{CmaHdr, CmaHdrRepr};
    let h = CmaHdrRepr::parse(&CmaHdr::new_checked(pd).ok()?);
    if h.cma_version != 0 {
        return None;
    }
    Some(format!("cma({}:{} > {})", h.src_ip()?, h.port, h.dst_ip()?))
}

fn mtu_bytes(mtu: u8) -> u32 {
    if (1..=5).contains(&mtu) { 128 << mtu } else { 0 }
}

/// One-line summary of a MAD: the message name, its identifiers and the fields people look
/// for (for CM messages), or the header for other classes. Shorter than 256 bytes prints as
/// a truncated MAD.
pub struct MadLine<'a>(pub &'a [u8]);

impl fmt::Display for MadLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::cm::{MsgResponse, RejReason, SidrStatus};
        use super::mad::{Mad, MadBody, MadRepr};
        let Ok(mad) = Mad::new_checked(self.0) else {
            return write!(f, "MAD truncated ({} bytes, a MAD is 256)", self.0.len());
        };
        let m = MadRepr::parse(&mad);
        let h = &m.header;
        let Some(attr) = m.body.cm_attr() else {
            return write!(
                f,
                "MAD base={} class={:#04x} ver={} method={:#04x} status={:#06x} tid={:#018x} attr={:#06x} mod={:#x}",
                h.base_version,
                h.mgmt_class,
                h.class_version,
                h.method,
                h.status,
                h.transaction_id,
                h.attribute_id,
                h.attribute_modifier
            );
        };
        write!(f, "CM {}", attr.name())?;
        if h.method != super::mad::method::SEND
            || h.status != 0
            || h.class_version != 2
            || h.base_version != 1
        {
            write!(f, " (ver={} method={:#04x} status={:#06x})", h.class_version, h.method, h.status)?;
        }
        write!(f, " tid={:#018x}", h.transaction_id)?;
        match &m.body {
            MadBody::Req(r) => {
                write!(
                    f,
                    " local={:#010x} svc={} qpn={:#08x} psn={:#08x} rr={} id={} retry={} rnr={} mtu={} timeout={}/{} ack={} max_retries={} {} > {}",
                    r.local_comm_id,
                    service_text(r.service_id),
                    r.local_qpn,
                    r.starting_psn,
                    r.responder_resources,
                    r.initiator_depth,
                    r.retry_count,
                    r.rnr_retry_count,
                    mtu_bytes(r.path_mtu),
                    r.local_cm_response_timeout,
                    r.remote_cm_response_timeout,
                    r.primary_local_ack_timeout,
                    r.max_cm_retries,
                    gid_text(&r.primary_local_gid),
                    gid_text(&r.primary_remote_gid),
                )?;
                if r.transport_service_type != 0 {
                    write!(f, " transport={}", r.transport_service_type)?;
                }
                let cma = super::cma::is_ip_service_id(r.service_id).then(|| cma_text(&r.private_data));
                if let Some(c) = cma.flatten() {
                    write!(f, " {c}")?;
                }
            }
            MadBody::Rep(r) => write!(
                f,
                " local={:#010x} remote={:#010x} qpn={:#08x} psn={:#08x} rr={} id={} rnr={} ack_delay={}",
                r.local_comm_id,
                r.remote_comm_id,
                r.local_qpn,
                r.starting_psn,
                r.responder_resources,
                r.initiator_depth,
                r.rnr_retry_count,
                r.target_ack_delay
            )?,
            MadBody::Rtu(r) => {
                write!(f, " local={:#010x} remote={:#010x}", r.local_comm_id, r.remote_comm_id)?
            }
            MadBody::Rej(r) => {
                let what = match MsgResponse::from_u8(r.message_rejected) {
                    Some(MsgResponse::Req) => "REQ",
                    Some(MsgResponse::Rep) => "REP",
                    Some(MsgResponse::Other) => "other",
                    None => "reserved",
                };
                let why = RejReason::from_u16(r.reason).map_or("unknown", |x| x.as_str());
                write!(
                    f,
                    " local={:#010x} remote={:#010x} rejected={what} reason={} ({why})",
                    r.local_comm_id, r.remote_comm_id, r.reason
                )?;
                if r.rejected_info_length != 0 {
                    let n = usize::from(r.rejected_info_length).min(r.ari.len());
                    write!(f, " ari={}", hex_bytes(&r.ari[..n]))?;
                }
            }
            MadBody::Mra(r) => write!(
                f,
                " local={:#010x} remote={:#010x} mraed={} service_timeout={}",
                r.local_comm_id, r.remote_comm_id, r.message_mraed, r.service_timeout
            )?,
            MadBody::Dreq(r) => write!(
                f,
                " local={:#010x} remote={:#010x} remote_qpn={:#08x}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn
            )?,
            MadBody::Drep(r) => {
                write!(f, " local={:#010x} remote={:#010x}", r.local_comm_id, r.remote_comm_id)?
            }
            MadBody::SidrReq(r) => {
                write!(
                    f,
                    " request={:#010x} pkey={:#06x} svc={}",
                    r.request_id,
                    r.partition_key,
                    service_text(r.service_id)
                )?;
                if let Some(c) = cma_text(&r.private_data) {
                    write!(f, " {c}")?;
                }
            }
            MadBody::SidrRep(r) => {
                let st = match SidrStatus::from_u8(r.status) {
                    Some(SidrStatus::Success) => "success",
                    Some(SidrStatus::Unsupported) => "unsupported",
                    Some(SidrStatus::Reject) => "reject",
                    Some(SidrStatus::NoQp) => "no QP",
                    Some(SidrStatus::Redirect) => "redirect",
                    Some(SidrStatus::UnsupportedVersion) => "unsupported version",
                    None => "unknown",
                };
                write!(
                    f,
                    " request={:#010x} status={} ({st}) qpn={:#08x} qkey={:#010x} svc={}",
                    r.request_id,
                    r.status,
                    r.qpn,
                    r.qkey,
                    service_text(r.service_id)
                )?
            }
            MadBody::Lap(r) => write!(
                f,
                " local={:#010x} remote={:#010x} remote_qpn={:#08x}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn
            )?,
            MadBody::Apr(r) => write!(
                f,
                " local={:#010x} remote={:#010x} ap_status={}",
                r.local_comm_id, r.remote_comm_id, r.ap_status
            )?,
            MadBody::ClassPortInfo(c) => write!(
                f,
                " method={:#04x} status={:#06x} resp_time={}",
                h.method, h.status, c.resp_time_value
            )?,
            MadBody::Other(_) => {}
        }
        Ok(())
    }
}

/// Every field of a MAD, one per line, indented like [`FrameDetail`]'s headers.
pub struct MadDetail<'a>(pub &'a [u8]);

impl fmt::Display for MadDetail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::FieldValue;
        use super::mad::{Mad, MadBody, MadRepr};
        let Ok(mad) = Mad::new_checked(self.0) else {
            return write!(f, "    MAD    truncated: {} bytes", self.0.len());
        };
        let m = MadRepr::parse(&mad);
        let h = &m.header;
        write!(
            f,
            "    MAD    base_version={} mgmt_class={:#04x} class_version={} method={:#04x} status={:#06x} class_specific={:#06x} transaction_id={:#018x} attribute_id={:#06x} reserved={:#06x} attribute_modifier={:#010x}",
            h.base_version,
            h.mgmt_class,
            h.class_version,
            h.method,
            h.status,
            h.class_specific,
            h.transaction_id,
            h.attribute_id,
            h.reserved,
            h.attribute_modifier
        )?;
        let name = m.body.cm_attr().map_or("data", |a| a.name());
        let mut result = Ok(());
        let mut line = |field: &'static str, v: FieldValue<'_>| {
            if result.is_err() {
                return;
            }
            result = match v {
                FieldValue::Int(x) => write!(f, "\n    {name:<8} {field:<28} {x:#x} ({x})"),
                FieldValue::Bytes(b) if b.len() == 16 && field.ends_with("gid") => {
                    write!(f, "\n    {name:<8} {field:<28} {}", gid_text(b))
                }
                FieldValue::Bytes(b) => write!(f, "\n    {name:<8} {field:<28} {}", private_text(b)),
            };
        };
        match &m.body {
            MadBody::Req(r) => r.visit(&mut line),
            MadBody::Mra(r) => r.visit(&mut line),
            MadBody::Rej(r) => r.visit(&mut line),
            MadBody::Rep(r) => r.visit(&mut line),
            MadBody::Rtu(r) => r.visit(&mut line),
            MadBody::Dreq(r) => r.visit(&mut line),
            MadBody::Drep(r) => r.visit(&mut line),
            MadBody::SidrReq(r) => r.visit(&mut line),
            MadBody::SidrRep(r) => r.visit(&mut line),
            MadBody::Lap(r) => r.visit(&mut line),
            MadBody::Apr(r) => r.visit(&mut line),
            MadBody::ClassPortInfo(r) => r.visit(&mut line),
            MadBody::Other(raw) => line("data", FieldValue::Bytes(raw)),
        }
        result?;
        let cma = match &m.body {
            MadBody::Req(r) => cma_text(&r.private_data),
            MadBody::SidrReq(r) => cma_text(&r.private_data),
            _ => None,
        };
        if let Some(c) = cma {
            write!(f, "\n    {name:<8} {:<28} {c}", "cma_hdr")?;
        }
        Ok(())
    }
}
