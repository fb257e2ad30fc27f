//! The packet walker and builder: a BTH, exactly the extension headers its opcode implies, the
//! payload, zero to three pad bytes and the four-byte ICRC.
//!
//! [`Packet`] is the zero-copy view of a whole InfiniBand transport packet as it sits in a UDP
//! datagram's payload. [`PacketRepr`] is its owned form (every header; the payload stays a
//! borrowed slice) and its builder.

use core::ops::Range;

use super::aeth::{Aeth, AethRepr};
use super::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use super::atomic_eth::{AtomicEth, AtomicEthRepr};
use super::bth::{self, Bth, BthRepr};
use super::deth::{Deth, DethRepr};
use super::feth::{Feth, FethRepr};
use super::ieth::{Ieth, IethRepr};
use super::immdt::{ImmDt, ImmDtRepr};
use super::opcode::{Headers, OpcodeInfo};
use super::reth::{Reth, RethRepr};
use super::{Error, Malformed, Result, pad_len};

/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;

/// A checked, zero-copy view of one transport packet (BTH through ICRC).
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    buffer: &'a [u8],
    info: &'static OpcodeInfo,
    payload_len: usize,
}

/// Offset of extension header `h` after the BTH, if the set contains it.
fn ext_offset(set: Headers, h: Headers) -> Option<usize> {
    let mut off = bth::HEADER_LEN;
    for (hh, len) in Headers::ORDER {
        if hh == h {
            return set.contains(h).then_some(off);
        }
        if set.contains(hh) {
            off += len;
        }
    }
    None
}

impl<'a> Packet<'a> {
    /// Checks that `buffer` (a UDP payload) is a whole packet: a known opcode, all the headers
    /// it implies, a pad count that fits, a 4-byte-aligned length and room for the ICRC.
    ///
    /// The ICRC itself is not checked here: it covers the IP and UDP headers too (see
    /// [`super::icrc`]).
    pub fn new_checked(buffer: &'a [u8]) -> Result<Packet<'a>> {
        let bth = Bth::new_checked(buffer)?;
        let op = bth.opcode();
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        let fixed = info.header_len() + ICRC_LEN;
        let area = buffer.len().checked_sub(fixed).ok_or(Error::Truncated)?;
        if area % 4 != 0 {
            return Err(Malformed::Unaligned.into());
        }
        let pad = bth.pad() as usize;
        let payload_len = area.checked_sub(pad).ok_or(Malformed::PadTooLong)?;
        if !info.payload && area != 0 {
            return Err(Malformed::UnexpectedPayload.into());
        }
        Ok(Packet { buffer, info, payload_len })
    }

    /// The opcode's table entry.
    pub fn info(&self) -> &'static OpcodeInfo {
        self.info
    }
    /// The whole packet, ICRC included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buffer
    }
    /// Total length, ICRC included.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }
    /// Never true: a checked packet holds at least a BTH and an ICRC.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The BTH.
    pub fn bth(&self) -> Bth<&'a [u8]> {
        Bth::new_unchecked(&self.buffer[..bth::HEADER_LEN])
    }
    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        self.info.header_len()
    }
    fn ext(&self, h: Headers, len: usize) -> Option<&'a [u8]> {
        ext_offset(self.info.headers, h).map(|o| &self.buffer[o..o + len])
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<Deth<&'a [u8]>> {
        self.ext(Headers::DETH, 8).map(Deth::new_unchecked)
    }
    /// The FETH, if the opcode carries one.
    pub fn feth(&self) -> Option<Feth<&'a [u8]>> {
        self.ext(Headers::FETH, 4).map(Feth::new_unchecked)
    }
    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<Reth<&'a [u8]>> {
        self.ext(Headers::RETH, 16).map(Reth::new_unchecked)
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEth<&'a [u8]>> {
        self.ext(Headers::ATOMIC_ETH, 28).map(AtomicEth::new_unchecked)
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth<&'a [u8]>> {
        self.ext(Headers::AETH, 4).map(Aeth::new_unchecked)
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&'a [u8]>> {
        self.ext(Headers::ATOMIC_ACK_ETH, 8).map(AtomicAckEth::new_unchecked)
    }
    /// The ImmDt, if the opcode carries one.
    pub fn immdt(&self) -> Option<ImmDt<&'a [u8]>> {
        self.ext(Headers::IMMDT, 4).map(ImmDt::new_unchecked)
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth<&'a [u8]>> {
        self.ext(Headers::IETH, 4).map(Ieth::new_unchecked)
    }
    /// The payload (without pad).
    pub fn payload(&self) -> &'a [u8] {
        let s = self.header_len();
        &self.buffer[s..s + self.payload_len]
    }
    /// The pad bytes (zero on a well-formed packet; receivers ignore their value).
    pub fn pad_bytes(&self) -> &'a [u8] {
        let s = self.header_len() + self.payload_len;
        &self.buffer[s..self.buffer.len() - ICRC_LEN]
    }
    /// Everything the ICRC covers after the UDP header: BTH through pad.
    pub fn without_icrc(&self) -> &'a [u8] {
        &self.buffer[..self.buffer.len() - ICRC_LEN]
    }
    /// The ICRC as carried (little-endian on the wire).
    pub fn icrc(&self) -> u32 {
        let n = self.buffer.len();
        super::be_u32(&self.buffer[n - ICRC_LEN..]).swap_bytes()
    }
}

/// The owned headers of a transport packet. The payload is not part of it: the builder takes
/// it (or its length, for callers that copy it in themselves) at emit time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr {
    /// Base transport header. `bth.pad` is derived from the payload length on emit.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<ImmDtRepr>,
    /// IETH.
    pub ieth: Option<IethRepr>,
}

impl PacketRepr {
    /// A representation with only a BTH; set the extension headers the opcode needs.
    pub fn new(bth: BthRepr) -> PacketRepr {
        PacketRepr {
            bth,
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// Reads every header of a checked packet.
    pub fn parse(p: &Packet<'_>) -> PacketRepr {
        PacketRepr {
            bth: BthRepr::parse(&p.bth()),
            deth: p.deth().map(|h| DethRepr::parse(&h)),
            feth: p.feth().map(|h| FethRepr::parse(&h)),
            reth: p.reth().map(|h| RethRepr::parse(&h)),
            atomic_eth: p.atomic_eth().map(|h| AtomicEthRepr::parse(&h)),
            aeth: p.aeth().map(|h| AethRepr::parse(&h)),
            atomic_ack_eth: p.atomic_ack_eth().map(|h| AtomicAckEthRepr::parse(&h)),
            immdt: p.immdt().map(|h| ImmDtRepr::parse(&h)),
            ieth: p.ieth().map(|h| IethRepr::parse(&h)),
        }
    }

    /// The extension headers this representation carries.
    pub fn headers(&self) -> Headers {
        let mut h = Headers::NONE;
        let mut add = |present: bool, x: Headers| {
            if present {
                h = h | x;
            }
        };
        add(self.deth.is_some(), Headers::DETH);
        add(self.feth.is_some(), Headers::FETH);
        add(self.reth.is_some(), Headers::RETH);
        add(self.atomic_eth.is_some(), Headers::ATOMIC_ETH);
        add(self.aeth.is_some(), Headers::AETH);
        add(self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH);
        add(self.immdt.is_some(), Headers::IMMDT);
        add(self.ieth.is_some(), Headers::IETH);
        h
    }

    /// Checks that the headers and payload length fit the opcode; returns its table entry.
    pub fn validate(&self, payload_len: usize) -> Result<&'static OpcodeInfo> {
        let op = self.bth.opcode;
        let info = op.info().ok_or(Error::UnknownOpcode(op.0))?;
        if info.headers != self.headers() {
            return Err(Malformed::HeaderMismatch.into());
        }
        if !info.payload && payload_len != 0 {
            return Err(Malformed::UnexpectedPayload.into());
        }
        Ok(info)
    }

    /// Length of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.headers().len()
    }

    /// Length of the whole packet with a payload of `payload_len` bytes: headers, payload,
    /// pad and ICRC.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + pad_len(payload_len) + ICRC_LEN
    }

    /// Writes the headers, zero pad and a zero ICRC placeholder, leaving the payload bytes
    /// untouched for the caller to fill (zero-copy from a memory region). Returns the
    /// payload's range in `buf` and the packet's total length.
    ///
    /// `bth.pad` is set from `payload_len`, whatever the representation says.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<(Range<usize>, usize)> {
        self.validate(payload_len)?;
        let total = self.buffer_len(payload_len);
        let buf = buf.get_mut(..total).ok_or(Error::Truncated)?;
        let mut bth = self.bth;
        bth.pad = pad_len(payload_len) as u8;
        bth.emit(&mut Bth::new_unchecked(&mut buf[..bth::HEADER_LEN]));
        let mut off = bth::HEADER_LEN;
        macro_rules! put {
            ($field:ident, $view:ident) => {
                if let Some(r) = &self.$field {
                    let n = r.buffer_len();
                    r.emit(&mut $view::new_unchecked(&mut buf[off..off + n]));
                    off += n;
                }
            };
        }
        // Wire order, as in Headers::ORDER.
        put!(deth, Deth);
        put!(feth, Feth);
        put!(reth, Reth);
        put!(atomic_eth, AtomicEth);
        put!(aeth, Aeth);
        put!(atomic_ack_eth, AtomicAckEth);
        put!(immdt, ImmDt);
        put!(ieth, Ieth);
        let payload = off..off + payload_len;
        buf[payload.end..].fill(0);
        Ok((payload, total))
    }

    /// Writes the whole packet with `payload`; the ICRC field is left zero for
    /// [`super::icrc`] to fill. Returns the packet's length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let (range, total) = self.emit_headers(buf, payload.len())?;
        buf[range].copy_from_slice(payload);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Opcode, Psn};

    fn repr(op: Opcode) -> PacketRepr {
        let mut r = PacketRepr::new(BthRepr::new(op, 0x11, Psn::new(5)));
        let h = op.info().unwrap().headers;
        if h.contains(Headers::DETH) {
            r.deth = Some(DethRepr { qkey: 0x1111_1111, resv8: 0, src_qp: 0x1d });
        }
        if h.contains(Headers::FETH) {
            r.feth = Some(FethRepr::new(0, 1));
        }
        if h.contains(Headers::RETH) {
            r.reth = Some(RethRepr { va: 0x1000, rkey: 0x844, dma_len: 3000 });
        }
        if h.contains(Headers::ATOMIC_ETH) {
            r.atomic_eth = Some(AtomicEthRepr { va: 8, rkey: 1, swap_add: 2, compare: 3 });
        }
        if h.contains(Headers::AETH) {
            r.aeth = Some(AethRepr::ack(7));
        }
        if h.contains(Headers::ATOMIC_ACK_ETH) {
            r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: 42 });
        }
        if h.contains(Headers::IMMDT) {
            r.immdt = Some(ImmDtRepr { imm: 0x2222_2222 });
        }
        if h.contains(Headers::IETH) {
            r.ieth = Some(IethRepr { rkey: 0x99 });
        }
        r
    }

    #[test]
    fn every_opcode_round_trips() {
        for info in crate::wire::opcode::ALL {
            for len in [0usize, 1, 2, 3, 4, 5, 1023, 1024] {
                let len = if info.payload { len } else { 0 };
                let payload: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
                let r = repr(info.opcode);
                let mut buf = vec![0xeeu8; r.buffer_len(len)];
                let n = r.emit(&mut buf, &payload).unwrap();
                assert_eq!(n, buf.len());
                let p = Packet::new_checked(&buf).unwrap();
                assert_eq!(p.payload(), &payload[..]);
                assert_eq!(p.bth().pad() as usize, pad_len(len));
                assert!(p.pad_bytes().iter().all(|&b| b == 0));
                let mut expect = r;
                expect.bth.pad = pad_len(len) as u8;
                assert_eq!(PacketRepr::parse(&p), expect, "{}", info.name);
                assert_eq!(p.header_len() + p.payload().len() + p.pad_bytes().len() + ICRC_LEN, buf.len());
            }
        }
    }

    #[test]
    fn header_mismatch_is_an_error() {
        let mut r = repr(Opcode::RC_WRITE_FIRST);
        r.reth = None;
        let mut buf = [0u8; 64];
        assert_eq!(r.emit(&mut buf, &[]), Err(Malformed::HeaderMismatch.into()));
        let r = repr(Opcode::RC_ACK);
        assert_eq!(r.emit(&mut buf, &[1]), Err(Malformed::UnexpectedPayload.into()));
        let r = repr(Opcode::RC_SEND_ONLY);
        assert_eq!(r.emit(&mut buf[..10], &[1]), Err(Error::Truncated));
    }

    #[test]
    fn malformed_inputs() {
        let r = repr(Opcode::RC_SEND_ONLY);
        let mut buf = vec![0u8; r.buffer_len(4)];
        r.emit(&mut buf, &[1, 2, 3, 4]).unwrap();
        // Drop one byte: no longer aligned.
        assert_eq!(Packet::new_checked(&buf[..buf.len() - 1]).unwrap_err(), Malformed::Unaligned.into());
        // Claim a pad on an empty payload.
        let mut empty = vec![0u8; r.buffer_len(0)];
        r.emit(&mut empty, &[]).unwrap();
        empty[1] |= 0x30;
        assert_eq!(Packet::new_checked(&empty).unwrap_err(), Malformed::PadTooLong.into());
        // An ACK with payload.
        let a = repr(Opcode::RC_ACK);
        let mut ack = vec![0u8; a.buffer_len(0) + 4];
        a.emit(&mut ack, &[]).unwrap();
        assert_eq!(Packet::new_checked(&ack).unwrap_err(), Malformed::UnexpectedPayload.into());
        // Unknown opcode, truncated.
        buf[0] = 0x15;
        assert_eq!(Packet::new_checked(&buf).unwrap_err(), Error::UnknownOpcode(0x15));
        assert_eq!(Packet::new_checked(&buf[..5]).unwrap_err(), Error::Truncated);
        let w = repr(Opcode::RC_WRITE_FIRST);
        let mut wb = vec![0u8; w.buffer_len(0)];
        w.emit(&mut wb, &[]).unwrap();
        assert_eq!(Packet::new_checked(&wb[..20]).unwrap_err(), Error::Truncated);
    }
}
