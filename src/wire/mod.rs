//! RoCEv2 wire formats: InfiniBand transport headers over UDP, and the invariant CRC.
//!
//! One file per header, each with a zero-copy view over a byte buffer (`Bth<T>`, `Reth<T>`, …)
//! and an owned, plain representation (`BthRepr`, `RethRepr`, …), after smoltcp's wire layer.
//! [`opcode`] holds the single opcode table the rest of the stack consults, [`packet`] walks
//! the header chain an opcode implies, [`icrc`] computes and checks the invariant CRC, and
//! [`roce`] frames a transport packet in IPv4/IPv6 + UDP. [`mad`] is the management
//! datagram that travels to QP1, [`cm`] the Communication Manager's messages inside it, and
//! [`cma`] the RDMA CM's conventions on top (service IDs, the `cma_hdr`).
//!
//! # The no-panic contract
//!
//! Untrusted bytes enter this module only through a checked constructor:
//! [`Packet::new_checked`], [`roce::RoceFrame::parse_ip`] / [`roce::RoceFrame::parse_ethernet`],
//! or a header or message view's `new_checked` (MAD and CM views included). Once a checked constructor has returned `Ok`:
//!
//! - no accessor of the view panics, whatever the bytes hold;
//! - `Repr::parse` never panics;
//! - `Repr::emit` never panics when the buffer is at least `Repr::buffer_len()` long
//!   ([`PacketRepr::emit`] checks its buffer and returns an error instead);
//! - nothing here allocates.
//!
//! `new_unchecked` exists for buffers the caller built itself (it skips the length check,
//! and accessors then panic on a short buffer, as slice indexing does).
//!
//! The contract is enforced by the property tests in this module and by the fuzz targets in
//! `fuzz/`, which run the packet walker and the ICRC check on arbitrary bytes.

#![forbid(unsafe_code)]

/// Defines a fixed-length header: a zero-copy view with one accessor and one setter per
/// field, and an owned `Repr` with the same fields.
macro_rules! simple_header {
    (
        $(#[$vmeta:meta])* $view:ident,
        $(#[$rmeta:meta])* $repr:ident,
        $len:expr;
        $( $(#[$fmeta:meta])* $get:ident, $set:ident : $ty:ty = $range:expr, $rd:ident, $wr:ident; )+
    ) => {
        /// Length of this header in bytes.
        pub const HEADER_LEN: usize = $len;

        $(#[$vmeta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Wraps a buffer without checking its length (accessors panic if it is short).
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }
            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                if buffer.as_ref().len() < HEADER_LEN {
                    return Err($crate::wire::Error::Truncated);
                }
                Ok(Self { buffer })
            }
            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
            $(
                $(#[$fmeta])*
                pub fn $get(&self) -> $ty {
                    $crate::wire::$rd(&self.buffer.as_ref()[$range])
                }
            )+
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Sets `", stringify!($get), "`.")]
                pub fn $set(&mut self, v: $ty) {
                    $crate::wire::$wr(&mut self.buffer.as_mut()[$range], v)
                }
            )+
        }

        $(#[$rmeta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
        pub struct $repr {
            $( $(#[$fmeta])* pub $get: $ty, )+
        }

        impl $repr {
            /// Reads every field of a view.
            pub fn parse<T: AsRef<[u8]>>(p: &$view<T>) -> Self {
                Self { $( $get: p.$get(), )+ }
            }
            /// Length of the emitted header.
            pub const fn buffer_len(&self) -> usize {
                HEADER_LEN
            }
            /// Writes every field into a view of at least `HEADER_LEN` bytes.
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut $view<T>) {
                $( p.$set(self.$get); )+
            }
        }
    };
}

/// The value of one field of a message, as [`cm::ReqRepr::visit`] and its siblings give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// A number.
    Int(u64),
    /// A byte array (GID, private data).
    Bytes(&'a [u8]),
}

/// Where a field of a fixed-layout message sits: a whole byte, 16/32/64-bit big-endian word,
/// or some bits of a byte or of a big-endian 32-bit word (IBTA `Byte[Bit]` fields, which the
/// kernel's `IBA_FIELD*_LOC` macros describe the same way: an aligned word and a mask).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field {
    /// The byte at this offset.
    U8(usize),
    /// The bits `mask` of the byte at this offset.
    Bits8(usize, u8),
    /// The big-endian u16 at this offset.
    U16(usize),
    /// The big-endian u32 at this offset.
    U32(usize),
    /// The bits `mask` of the big-endian u32 at this offset.
    Bits32(usize, u32),
    /// The big-endian u64 at this offset.
    U64(usize),
}

impl Field {
    /// Reads the field from a buffer that holds it (callers pass views checked for length).
    #[inline]
    pub(crate) fn get(self, b: &[u8]) -> u64 {
        match self {
            Field::U8(o) => u64::from(be_u8(&b[o..o + 1])),
            Field::Bits8(o, m) => u64::from((be_u8(&b[o..o + 1]) & m) >> m.trailing_zeros()),
            Field::U16(o) => u64::from(be_u16(&b[o..o + 2])),
            Field::U32(o) => u64::from(be_u32(&b[o..o + 4])),
            Field::Bits32(o, m) => u64::from((be_u32(&b[o..o + 4]) & m) >> m.trailing_zeros()),
            Field::U64(o) => be_u64(&b[o..o + 8]),
        }
    }

    /// Writes the field (the value is truncated to the field's width; other bits are kept).
    #[inline]
    pub(crate) fn set(self, b: &mut [u8], v: u64) {
        match self {
            Field::U8(o) => b[o] = v as u8,
            Field::Bits8(o, m) => b[o] = (b[o] & !m) | (((v as u8) << m.trailing_zeros()) & m),
            Field::U16(o) => put_u16(&mut b[o..o + 2], v as u16),
            Field::U32(o) => put_u32(&mut b[o..o + 4], v as u32),
            Field::Bits32(o, m) => {
                let old = be_u32(&b[o..o + 4]);
                put_u32(&mut b[o..o + 4], (old & !m) | (((v as u32) << m.trailing_zeros()) & m));
            }
            Field::U64(o) => put_u64(&mut b[o..o + 8], v),
        }
    }
}

/// Defines a fixed-length message described by a field table: a zero-copy view with one
/// accessor and one setter per field, byte-array fields (GIDs, private data) as slices, and an
/// owned `Repr` with every field. The tables list every bit, reserved ones included, so that
/// `parse` followed by `emit` reproduces the bytes exactly.
macro_rules! field_message {
    (
        $(#[$vmeta:meta])* $view:ident,
        $(#[$rmeta:meta])* $repr:ident,
        $len:expr;
        fields { $( $(#[$fmeta:meta])* $get:ident, $set:ident : $ty:ty = $field:expr; )* }
        bytes { $( $(#[$bmeta:meta])* $bget:ident, $bset:ident : [$n:expr] = $off:expr; )* }
    ) => {
        $(#[$vmeta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Length of the message in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length (accessors panic if it is short).
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }
            /// Wraps a buffer after checking that it holds the whole message.
            pub fn new_checked(buffer: T) -> $crate::wire::Result<Self> {
                if buffer.as_ref().len() < Self::LEN {
                    return Err($crate::wire::Error::Truncated);
                }
                Ok(Self { buffer })
            }
            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
            $(
                $(#[$fmeta])*
                pub fn $get(&self) -> $ty {
                    #[allow(clippy::unnecessary_cast)]
                    { $field.get(self.buffer.as_ref()) as $ty }
                }
            )*
            $(
                $(#[$bmeta])*
                pub fn $bget(&self) -> &[u8] {
                    &self.buffer.as_ref()[$off..$off + $n]
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Sets `", stringify!($get), "` (truncated to the field's width).")]
                pub fn $set(&mut self, v: $ty) {
                    #[allow(clippy::unnecessary_cast)]
                    $field.set(self.buffer.as_mut(), v as u64)
                }
            )*
            $(
                #[doc = concat!("Sets `", stringify!($bget), "`: copies `v` (at most the field's length) and zero-fills the rest.")]
                pub fn $bset(&mut self, v: &[u8]) {
                    let dst = &mut self.buffer.as_mut()[$off..$off + $n];
                    let k = v.len().min($n);
                    dst[..k].copy_from_slice(&v[..k]);
                    dst[k..].fill(0);
                }
            )*
        }

        $(#[$rmeta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $repr {
            $( $(#[$fmeta])* pub $get: $ty, )*
            $( $(#[$bmeta])* pub $bget: [u8; $n], )*
        }

        impl Default for $repr {
            fn default() -> Self {
                Self { $( $get: 0, )* $( $bget: [0; $n], )* }
            }
        }

        impl $repr {
            /// Reads every field of a view.
            pub fn parse<T: AsRef<[u8]>>(p: &$view<T>) -> Self {
                Self {
                    $( $get: p.$get(), )*
                    $( $bget: {
                        let mut a = [0u8; $n];
                        a.copy_from_slice(p.$bget());
                        a
                    }, )*
                }
            }
            /// Length of the emitted message.
            pub const fn buffer_len(&self) -> usize {
                $len
            }
            /// Calls `f` with every field's name and value: the scalar fields in table order,
            /// then the byte arrays (for printing every field, as `softroce dump -v` does).
            pub fn visit(&self, mut f: impl FnMut(&'static str, $crate::wire::FieldValue<'_>)) {
                #[allow(clippy::unnecessary_cast)]
                {
                    $( f(stringify!($get), $crate::wire::FieldValue::Int(self.$get as u64)); )*
                }
                $( f(stringify!($bget), $crate::wire::FieldValue::Bytes(&self.$bget)); )*
            }
            /// Writes every field into a view of at least `buffer_len()` bytes (the message's
            /// bytes are zeroed first, so nothing of the buffer's old content survives).
            pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut $view<T>) {
                p.buffer.as_mut()[..$len].fill(0);
                $( p.$set(self.$get); )*
                $( p.$bset(&self.$bget); )*
            }
        }
    };
}

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cm;
pub mod cma;
pub mod deth;
pub mod feth;
pub mod gid;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pretty;
pub mod psn;
pub mod reth;
pub mod roce;

pub use aeth::{Aeth, AethRepr, NakCode, Syndrome};
pub use atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
pub use atomic_eth::{AtomicEth, AtomicEthRepr};
pub use bth::{Bth, BthRepr};
pub use deth::{Deth, DethRepr};
pub use feth::{Feth, FethRepr};
pub use ieth::{Ieth, IethRepr};
pub use immdt::{ImmDt, ImmDtRepr};
pub use mad::{Mad, MadBody, MadHeader, MadHeaderRepr, MadRepr};
pub use opcode::{Direction, Headers, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{ICRC_LEN, Packet, PacketRepr};
pub use psn::Psn;
pub use reth::{Reth, RethRepr};
pub use roce::ROCEV2_UDP_PORT;

/// Why bytes were not accepted as a packet or header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the headers it must hold.
    #[error("truncated")]
    Truncated,
    /// The BTH opcode is not one softroce knows.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A well-formed UDP datagram that is not addressed to the RoCEv2 port.
    #[error("not RoCEv2 (UDP destination port is not 4791)")]
    NotRoce,
    /// The bytes are long enough but inconsistent.
    #[error("malformed: {0}")]
    Malformed(Malformed),
}

/// The ways a packet can be inconsistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Malformed {
    /// Payload plus pad is not a multiple of four bytes (IBTA: packets are 4-byte aligned).
    #[error("payload and pad are not a multiple of 4 bytes")]
    Unaligned,
    /// The pad count is larger than the bytes after the headers.
    #[error("pad count exceeds the payload")]
    PadTooLong,
    /// An opcode that carries no payload has bytes after its headers.
    #[error("payload on an opcode that carries none")]
    UnexpectedPayload,
    /// The representation's extension headers do not match its opcode.
    #[error("extension headers do not match the opcode")]
    HeaderMismatch,
    /// The IP header is not IPv4 or IPv6, is fragmented, or its lengths disagree.
    #[error("bad IP header")]
    BadIp,
    /// The IP payload is not UDP.
    #[error("not UDP")]
    NotUdp,
    /// The UDP length field disagrees with the IP length.
    #[error("bad UDP length")]
    BadUdpLength,
    /// The frame is not Ethernet + IP + UDP.
    #[error("not an IP/UDP frame")]
    NotIpUdp,
}

impl From<Malformed> for Error {
    fn from(m: Malformed) -> Error {
        Error::Malformed(m)
    }
}

/// Result of a wire operation.
pub type Result<T> = core::result::Result<T, Error>;

// Field readers and writers used by the header views. Callers pass slices of exactly the
// field's width (the views' constant ranges), so the conversions below cannot fail; they
// fall back to zero rather than panic should that ever change.
#[inline]
pub(crate) fn be_u8(b: &[u8]) -> u8 {
    b.first().copied().unwrap_or(0)
}
#[inline]
pub(crate) fn be_u16(b: &[u8]) -> u16 {
    b.try_into().map(u16::from_be_bytes).unwrap_or(0)
}
#[inline]
pub(crate) fn be_u24(b: &[u8]) -> u32 {
    match b {
        [a, b, c] => u32::from_be_bytes([0, *a, *b, *c]),
        _ => 0,
    }
}
#[inline]
pub(crate) fn be_u32(b: &[u8]) -> u32 {
    b.try_into().map(u32::from_be_bytes).unwrap_or(0)
}
#[inline]
pub(crate) fn be_u64(b: &[u8]) -> u64 {
    b.try_into().map(u64::from_be_bytes).unwrap_or(0)
}
#[inline]
pub(crate) fn put_u8(b: &mut [u8], v: u8) {
    b[0] = v;
}
#[inline]
pub(crate) fn put_u16(b: &mut [u8], v: u16) {
    b.copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub(crate) fn put_u24(b: &mut [u8], v: u32) {
    b.copy_from_slice(&v.to_be_bytes()[1..]);
}
#[inline]
pub(crate) fn put_u32(b: &mut [u8], v: u32) {
    b.copy_from_slice(&v.to_be_bytes());
}
#[inline]
pub(crate) fn put_u64(b: &mut [u8], v: u64) {
    b.copy_from_slice(&v.to_be_bytes());
}

/// Number of zero bytes that pad a payload of `len` bytes to a multiple of four.
#[inline]
pub const fn pad_len(len: usize) -> usize {
    len.wrapping_neg() & 3
}
