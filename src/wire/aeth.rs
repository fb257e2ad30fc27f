//! ACK Extended Transport Header (IBTA 9.3.3.2), 4 bytes: on ACKNOWLEDGE, ATOMIC ACKNOWLEDGE
//! and READ response First/Last/Only.
//!
//! ```text
//!  0     Syndrome: bits 7..5 type (000 ACK, 001 RNR NAK, 011 NAK), bits 4..0 value
//!  1..4  MSN (24 bits): message sequence number of the last completed request
//! ```

simple_header! {
    /// A zero-copy view of an AETH.
    Aeth,
    /// An owned AETH. The syndrome byte is kept raw so that every value round-trips;
    /// [`AethRepr::syndrome`] decodes it.
    AethRepr,
    4;
    /// The raw syndrome byte.
    syndrome_raw, set_syndrome_raw: u8 = 0..1, be_u8, put_u8;
    /// Message sequence number (24 bits).
    msn, set_msn: u32 = 1..4, be_u24, put_u24;
}

/// NAK codes (IBTA table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder expected an earlier PSN.
    PsnSequenceError,
    /// Invalid request (bad opcode sequence, unsupported operation, length error...).
    InvalidRequest,
    /// Remote access error (rkey, bounds, access rights).
    RemoteAccessError,
    /// Remote operational error.
    RemoteOperationalError,
    /// Invalid RD request.
    InvalidRdRequest,
    /// A reserved code (5..=31).
    Reserved(u8),
}

impl NakCode {
    /// The five-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
    /// Decodes a five-bit code.
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit count (31 = invalid/unlimited,
    /// which is what kernel rxe always sends).
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// Receiver-not-ready NAK; `timer` indexes the RNR timer table.
    RnrNak {
        /// RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A reserved syndrome type (bits 7..5 = 010, or the reserved top bit set).
    Reserved(u8),
}

impl Syndrome {
    /// The "invalid credit count" that means unlimited, sent by rxe in every ACK.
    pub const UNLIMITED_CREDITS: u8 = 0x1f;

    /// Decodes a raw syndrome byte.
    pub const fn from_u8(b: u8) -> Syndrome {
        match b & 0xe0 {
            0x00 => Syndrome::Ack { credits: b & 0x1f },
            0x20 => Syndrome::RnrNak { timer: b & 0x1f },
            0x60 => Syndrome::Nak(NakCode::from_code(b)),
            _ => Syndrome::Reserved(b),
        }
    }

    /// Encodes the syndrome byte.
    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(b) => b,
        }
    }
}

impl AethRepr {
    /// An AETH with the given syndrome and MSN.
    pub const fn new(syndrome: Syndrome, msn: u32) -> AethRepr {
        AethRepr { syndrome_raw: syndrome.to_u8(), msn: msn & 0xff_ffff }
    }
    /// A plain ACK with unlimited credits, as rxe sends it.
    pub const fn ack(msn: u32) -> AethRepr {
        Self::new(Syndrome::Ack { credits: Syndrome::UNLIMITED_CREDITS }, msn)
    }
    /// The decoded syndrome.
    pub const fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.syndrome_raw)
    }
}

/// The RNR NAK timer table (IBTA table 45): the minimum wait, in microseconds, for each
/// five-bit timer code. Code 0 means 655.36 ms.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120,
    7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680,
    491_520,
];

/// The RNR wait for a timer code, in nanoseconds.
pub const fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_US[(code & 0x1f) as usize] as u64 * 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes() {
        assert_eq!(Syndrome::from_u8(0x1f), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_u8(0x2c), Syndrome::RnrNak { timer: 12 });
        assert_eq!(Syndrome::from_u8(0x60), Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(Syndrome::from_u8(0x62), Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(Syndrome::from_u8(0x41), Syndrome::Reserved(0x41));
        assert_eq!(Syndrome::from_u8(0x9f), Syndrome::Reserved(0x9f));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_u8(b).to_u8(), b);
        }
    }

    #[test]
    fn round_trip() {
        let r = AethRepr::ack(20);
        let mut buf = [0u8; 4];
        r.emit(&mut Aeth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x1f, 0, 0, 20]);
        assert_eq!(AethRepr::parse(&Aeth::new_checked(&buf[..]).unwrap()), r);
    }

    #[test]
    fn rnr_table() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(12), 640_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }
}
