//! Base Transport Header (IBTA 9.2), 12 bytes, present in every RoCEv2 packet.
//!
//! ```text
//!  0       opcode
//!  1       SE(7) M(6) PadCnt(5:4) TVer(3:0)
//!  2..4    P_Key
//!  4       FECN(7) BECN(6) resv6(5:0)      <- masked to 0xFF in the ICRC
//!  5..8    DestQP (24 bits)
//!  8       AckReq(7) resv7(6:0)
//!  9..12   PSN (24 bits)
//! ```

use super::{Error, Opcode, Psn, Result, be_u16, be_u24, put_u16, put_u24};

/// Length of the BTH in bytes.
pub const HEADER_LEN: usize = 12;

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Range<usize> = 2..4;
    pub const BECN_FECN: usize = 4;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Range<usize> = 9..12;
}

/// A zero-copy view of a BTH at the start of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Wraps a buffer without checking its length; accessors may panic if it is shorter than
    /// [`HEADER_LEN`]. Use [`Bth::new_checked`] for untrusted input.
    pub const fn new_unchecked(buffer: T) -> Bth<T> {
        Bth { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Bth<T>> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Bth { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// Pad count: bytes of zero padding after the payload (0..=3).
    pub fn pad(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x3
    }
    /// Transport header version (0 for the current version).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be_u16(&self.b()[field::PKEY])
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::BECN_FECN] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::BECN_FECN] & 0x40 != 0
    }
    /// The six reserved bits after FECN/BECN.
    pub fn resv6(&self) -> u8 {
        self.b()[field::BECN_FECN] & 0x3f
    }
    /// Destination queue pair number.
    pub fn dest_qp(&self) -> u32 {
        be_u24(&self.b()[field::DEST_QP])
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    /// The seven reserved bits after AckReq.
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK_REQ] & 0x7f
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be_u24(&self.b()[field::PSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_bit(&mut self, idx: usize, mask: u8, on: bool) {
        let b = &mut self.bm()[idx];
        *b = if on { *b | mask } else { *b & !mask };
    }
    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bm()[field::OPCODE] = op.0;
    }
    /// Sets the solicited-event bit.
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bit(field::FLAGS, 0x80, v);
    }
    /// Sets the migration-request bit.
    pub fn set_mig_req(&mut self, v: bool) {
        self.set_bit(field::FLAGS, 0x40, v);
    }
    /// Sets the pad count (low two bits of `v`).
    pub fn set_pad(&mut self, v: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !0x30) | ((v & 3) << 4);
    }
    /// Sets the transport header version (low four bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !0x0f) | (v & 0x0f);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        put_u16(&mut self.bm()[field::PKEY], v);
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bit(field::BECN_FECN, 0x80, v);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        self.set_bit(field::BECN_FECN, 0x40, v);
    }
    /// Sets the six reserved bits (low six bits of `v`).
    pub fn set_resv6(&mut self, v: u8) {
        let b = &mut self.bm()[field::BECN_FECN];
        *b = (*b & 0xc0) | (v & 0x3f);
    }
    /// Sets the destination QP number (low 24 bits of `v`).
    pub fn set_dest_qp(&mut self, v: u32) {
        put_u24(&mut self.bm()[field::DEST_QP], v);
    }
    /// Sets AckReq.
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_bit(field::ACK_REQ, 0x80, v);
    }
    /// Sets the seven reserved bits (low seven bits of `v`).
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.bm()[field::ACK_REQ];
        *b = (*b & 0x80) | (v & 0x7f);
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, v: Psn) {
        put_u24(&mut self.bm()[field::PSN], v.value());
    }
}

/// An owned BTH. Lossless: every bit of the header, reserved ones included, round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count. [`super::PacketRepr::emit`] derives it from the payload length.
    pub pad: u8,
    /// Transport header version.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Reserved bits after BECN.
    pub resv6: u8,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// Reserved bits after AckReq.
    pub resv7: u8,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// The default partition key (full membership, default partition), as rxe sends it.
    pub const DEFAULT_PKEY: u16 = 0xffff;

    /// A BTH with the usual defaults: default P_Key, version 0, no flags.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad: 0,
            tver: 0,
            pkey: Self::DEFAULT_PKEY,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qp: dest_qp & 0xff_ffff,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }

    /// Reads every field of a BTH view.
    pub fn parse<T: AsRef<[u8]>>(p: &Bth<T>) -> BthRepr {
        BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad: p.pad(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            resv6: p.resv6(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            resv7: p.resv7(),
            psn: p.psn(),
        }
    }

    /// Length of the emitted header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into a view of at least [`HEADER_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Bth<T>) {
        p.set_opcode(self.opcode);
        p.bm()[field::FLAGS] = 0;
        p.set_solicited(self.solicited);
        p.set_mig_req(self.mig_req);
        p.set_pad(self.pad);
        p.set_tver(self.tver);
        p.set_pkey(self.pkey);
        p.bm()[field::BECN_FECN] = 0;
        p.set_fecn(self.fecn);
        p.set_becn(self.becn);
        p.set_resv6(self.resv6);
        p.set_dest_qp(self.dest_qp);
        p.bm()[field::ACK_REQ] = 0;
        p.set_ack_req(self.ack_req);
        p.set_resv7(self.resv7);
        p.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // First packet of rc_pingpong.pcap: RC_SEND_FIRST dqp=0x11, psn, no flags.
    const SEND_FIRST: [u8; 12] = [0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x12, 0x34, 0x56];

    #[test]
    fn parse_fields() {
        let b = Bth::new_checked(&SEND_FIRST[..]).unwrap();
        assert_eq!(b.opcode(), Opcode::RC_SEND_FIRST);
        assert_eq!(b.pkey(), 0xffff);
        assert_eq!(b.dest_qp(), 0x11);
        assert_eq!(b.psn(), Psn::new(0x123456));
        assert!(!b.ack_req() && !b.solicited() && !b.fecn());
    }

    #[test]
    fn short_buffer_rejected() {
        assert_eq!(Bth::new_checked(&SEND_FIRST[..11]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn every_bit_round_trips() {
        let mut r = BthRepr::new(Opcode::RC_ACK, 0xabcdef, Psn::new(0xfedcba));
        r.solicited = true;
        r.mig_req = true;
        r.pad = 3;
        r.tver = 0xf;
        r.fecn = true;
        r.becn = true;
        r.resv6 = 0x2a;
        r.ack_req = true;
        r.resv7 = 0x55;
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut Bth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x12 - 1, 0xff, 0xff, 0xff, 0xea, 0xab, 0xcd, 0xef, 0xd5, 0xfe, 0xdc, 0xba]);
        assert_eq!(BthRepr::parse(&Bth::new_unchecked(&buf[..])), r);
    }
}
