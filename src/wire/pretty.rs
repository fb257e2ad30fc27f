//! Human-readable rendering of packets, as `softroce dump` prints them.
//!
//! [`PacketLine`] is the one-line summary of a transport packet (opcode, QPN, PSN, flags,
//! extension headers, payload length); [`FrameLine`] prefixes it with the IP/UDP fields and
//! suffixes the ICRC verdict; [`FrameDetail`] prints every header field on its own line.

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
