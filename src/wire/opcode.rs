//! The opcode table: one entry per base-transport opcode softroce knows, in the spirit of kernel
//! rxe's `rxe_opcode[]`.
//!
//! The rest of the stack never decides "does this opcode carry a RETH?" by itself: it asks
//! [`Opcode::info`]. The header order inside a packet is fixed by the IBTA (9.2 and the
//! Memory Placement Extensions): BTH, DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt,
//! IETH, payload — no opcode carries more than a few of them, and [`Headers::ORDER`] lists them
//! in that order for the packet walker.

use core::fmt;

/// An extension-header set, as a small bit set.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// No extension header.
    pub const NONE: Headers = Headers(0);
    /// Datagram extended transport header (UD).
    pub const DETH: Headers = Headers(1 << 0);
    /// Flush extended transport header (FLUSH).
    pub const FETH: Headers = Headers(1 << 1);
    /// RDMA extended transport header.
    pub const RETH: Headers = Headers(1 << 2);
    /// Atomic extended transport header.
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    /// ACK extended transport header.
    pub const AETH: Headers = Headers(1 << 4);
    /// Atomic ACK extended transport header.
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    /// Immediate data.
    pub const IMMDT: Headers = Headers(1 << 6);
    /// Invalidate extended transport header.
    pub const IETH: Headers = Headers(1 << 7);

    /// Every extension header in wire order, with its length in bytes.
    pub const ORDER: [(Headers, usize); 8] = [
        (Headers::DETH, 8),
        (Headers::FETH, 4),
        (Headers::RETH, 16),
        (Headers::ATOMIC_ETH, 28),
        (Headers::AETH, 4),
        (Headers::ATOMIC_ACK_ETH, 8),
        (Headers::IMMDT, 4),
        (Headers::IETH, 4),
    ];

    /// Union of two sets.
    pub const fn union(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    /// True when every header of `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// Total length in bytes of the extension headers in the set.
    pub const fn len(self) -> usize {
        let mut total = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                total += Self::ORDER[i].1;
            }
            i += 1;
        }
        total
    }

    /// True for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for Headers {
    type Output = Headers;
    fn bitor(self, rhs: Headers) -> Headers {
        self.union(rhs)
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] =
            ["DETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH"];
        let mut list = f.debug_set();
        for (i, (h, _)) in Headers::ORDER.iter().enumerate() {
            if self.contains(*h) {
                list.entry(&format_args!("{}", NAMES[i]));
            }
        }
        list.finish()
    }
}

/// The transport service an opcode belongs to (the top three bits of the opcode).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

/// The operation an opcode performs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Operation {
    /// SEND (with or without immediate or invalidate).
    Send,
    /// RDMA WRITE (with or without immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// Acknowledge (ACK or NAK).
    Acknowledge,
    /// Atomic acknowledge.
    AtomicAcknowledge,
    /// ATOMIC compare and swap.
    CompareSwap,
    /// ATOMIC fetch and add.
    FetchAdd,
    /// FLUSH (Memory Placement Extensions).
    Flush,
    /// ATOMIC WRITE (Memory Placement Extensions).
    AtomicWrite,
}

/// Where a packet sits inside its message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// A middle packet of a multi-packet message.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The only packet of a message.
    Only,
}

impl Position {
    /// True for First and Only: the packet starts a message.
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// True for Last and Only: the packet ends a message.
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Whether an opcode is sent by a requester or by a responder.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Direction {
    /// Requester to responder.
    Request,
    /// Responder to requester.
    Response,
}

/// Everything the stack needs to know about one opcode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The opcode.
    pub opcode: Opcode,
    /// Short name as `softroce dump` prints it (e.g. `RC_SEND_FIRST`).
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extension headers that follow the BTH.
    pub headers: Headers,
    /// Whether the packet may carry payload (even if zero bytes of it).
    pub payload: bool,
    /// Request or response.
    pub direction: Direction,
}

impl OpcodeInfo {
    /// Whether the packet carries immediate data.
    pub const fn immediate(&self) -> bool {
        self.headers.contains(Headers::IMMDT)
    }
    /// Whether the packet carries an invalidate rkey.
    pub const fn invalidate(&self) -> bool {
        self.headers.contains(Headers::IETH)
    }
    /// Length of BTH plus extension headers.
    pub const fn header_len(&self) -> usize {
        super::bth::HEADER_LEN + self.headers.len()
    }
    /// True for operations that the responder answers with data or a saved value and that
    /// therefore count against `max_rd_atomic` (READ, atomics, FLUSH, ATOMIC WRITE).
    pub const fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.operation,
            Operation::RdmaReadRequest
                | Operation::CompareSwap
                | Operation::FetchAdd
                | Operation::Flush
                | Operation::AtomicWrite
        )
    }
    /// True for the two 8-byte atomic operations that carry an AtomicETH.
    pub const fn is_atomic(&self) -> bool {
        matches!(self.operation, Operation::CompareSwap | Operation::FetchAdd)
    }
}

/// A base transport header opcode (any byte; [`Opcode::info`] says whether it is known).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($( $konst:ident = $val:expr, $name:literal, $tr:ident, $op:ident, $pos:ident,
        [$($h:ident),*], $payload:expr, $dir:ident; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", $name, "`")]
                pub const $konst: Opcode = Opcode($val);
            )*
        }
        /// Every opcode softroce knows, in numeric order.
        pub const ALL: &[OpcodeInfo] = &[
            $( OpcodeInfo {
                opcode: Opcode($val),
                name: $name,
                transport: Transport::$tr,
                operation: Operation::$op,
                position: Position::$pos,
                headers: Headers::NONE $(.union(Headers::$h))*,
                payload: $payload,
                direction: Direction::$dir,
            }, )*
        ];
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00, "RC_SEND_FIRST", Rc, Send, First, [], true, Request;
    RC_SEND_MIDDLE = 0x01, "RC_SEND_MIDDLE", Rc, Send, Middle, [], true, Request;
    RC_SEND_LAST = 0x02, "RC_SEND_LAST", Rc, Send, Last, [], true, Request;
    RC_SEND_LAST_IMM = 0x03, "RC_SEND_LAST_IMM", Rc, Send, Last, [IMMDT], true, Request;
    RC_SEND_ONLY = 0x04, "RC_SEND_ONLY", Rc, Send, Only, [], true, Request;
    RC_SEND_ONLY_IMM = 0x05, "RC_SEND_ONLY_IMM", Rc, Send, Only, [IMMDT], true, Request;
    RC_WRITE_FIRST = 0x06, "RC_WRITE_FIRST", Rc, RdmaWrite, First, [RETH], true, Request;
    RC_WRITE_MIDDLE = 0x07, "RC_WRITE_MIDDLE", Rc, RdmaWrite, Middle, [], true, Request;
    RC_WRITE_LAST = 0x08, "RC_WRITE_LAST", Rc, RdmaWrite, Last, [], true, Request;
    RC_WRITE_LAST_IMM = 0x09, "RC_WRITE_LAST_IMM", Rc, RdmaWrite, Last, [IMMDT], true, Request;
    RC_WRITE_ONLY = 0x0a, "RC_WRITE_ONLY", Rc, RdmaWrite, Only, [RETH], true, Request;
    RC_WRITE_ONLY_IMM = 0x0b, "RC_WRITE_ONLY_IMM", Rc, RdmaWrite, Only, [RETH, IMMDT], true, Request;
    RC_READ_REQ = 0x0c, "RC_READ_REQ", Rc, RdmaReadRequest, Only, [RETH], false, Request;
    RC_READ_RESP_FIRST = 0x0d, "RC_READ_RESP_FIRST", Rc, RdmaReadResponse, First, [AETH], true, Response;
    RC_READ_RESP_MIDDLE = 0x0e, "RC_READ_RESP_MIDDLE", Rc, RdmaReadResponse, Middle, [], true, Response;
    RC_READ_RESP_LAST = 0x0f, "RC_READ_RESP_LAST", Rc, RdmaReadResponse, Last, [AETH], true, Response;
    RC_READ_RESP_ONLY = 0x10, "RC_READ_RESP_ONLY", Rc, RdmaReadResponse, Only, [AETH], true, Response;
    RC_ACK = 0x11, "RC_ACK", Rc, Acknowledge, Only, [AETH], false, Response;
    RC_ATOMIC_ACK = 0x12, "RC_ATOMIC_ACK", Rc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], false, Response;
    RC_CMP_SWAP = 0x13, "RC_CMP_SWAP", Rc, CompareSwap, Only, [ATOMIC_ETH], false, Request;
    RC_FETCH_ADD = 0x14, "RC_FETCH_ADD", Rc, FetchAdd, Only, [ATOMIC_ETH], false, Request;
    RC_SEND_LAST_INV = 0x16, "RC_SEND_LAST_INV", Rc, Send, Last, [IETH], true, Request;
    RC_SEND_ONLY_INV = 0x17, "RC_SEND_ONLY_INV", Rc, Send, Only, [IETH], true, Request;
    RC_FLUSH = 0x1c, "RC_FLUSH", Rc, Flush, Only, [FETH, RETH], false, Request;
    RC_ATOMIC_WRITE = 0x1d, "RC_ATOMIC_WRITE", Rc, AtomicWrite, Only, [RETH], true, Request;
    UC_SEND_FIRST = 0x20, "UC_SEND_FIRST", Uc, Send, First, [], true, Request;
    UC_SEND_MIDDLE = 0x21, "UC_SEND_MIDDLE", Uc, Send, Middle, [], true, Request;
    UC_SEND_LAST = 0x22, "UC_SEND_LAST", Uc, Send, Last, [], true, Request;
    UC_SEND_LAST_IMM = 0x23, "UC_SEND_LAST_IMM", Uc, Send, Last, [IMMDT], true, Request;
    UC_SEND_ONLY = 0x24, "UC_SEND_ONLY", Uc, Send, Only, [], true, Request;
    UC_SEND_ONLY_IMM = 0x25, "UC_SEND_ONLY_IMM", Uc, Send, Only, [IMMDT], true, Request;
    UC_WRITE_FIRST = 0x26, "UC_WRITE_FIRST", Uc, RdmaWrite, First, [RETH], true, Request;
    UC_WRITE_MIDDLE = 0x27, "UC_WRITE_MIDDLE", Uc, RdmaWrite, Middle, [], true, Request;
    UC_WRITE_LAST = 0x28, "UC_WRITE_LAST", Uc, RdmaWrite, Last, [], true, Request;
    UC_WRITE_LAST_IMM = 0x29, "UC_WRITE_LAST_IMM", Uc, RdmaWrite, Last, [IMMDT], true, Request;
    UC_WRITE_ONLY = 0x2a, "UC_WRITE_ONLY", Uc, RdmaWrite, Only, [RETH], true, Request;
    UC_WRITE_ONLY_IMM = 0x2b, "UC_WRITE_ONLY_IMM", Uc, RdmaWrite, Only, [RETH, IMMDT], true, Request;
    UD_SEND_ONLY = 0x64, "UD_SEND_ONLY", Ud, Send, Only, [DETH], true, Request;
    UD_SEND_ONLY_IMM = 0x65, "UD_SEND_ONLY_IMM", Ud, Send, Only, [DETH, IMMDT], true, Request;
}

static TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < ALL.len() {
        t[ALL[i].opcode.0 as usize] = Some(ALL[i]);
        i += 1;
    }
    t
};

impl Opcode {
    /// The table entry for this opcode, or `None` for an opcode softroce does not know
    /// (reserved, RD, XRC, CNP, manufacturer-specific).
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[self.0 as usize].as_ref()
    }

    /// The table's name, or `None` for an unknown opcode.
    pub fn name(self) -> Option<&'static str> {
        self.info().map(|i| i.name)
    }

    /// The opcode for `operation` at `position` on `transport`, with or without immediate
    /// data / invalidate — the requester's way to pick an opcode.
    pub fn find(
        transport: Transport,
        operation: Operation,
        position: Position,
        extra: Headers,
    ) -> Option<Opcode> {
        ALL.iter()
            .find(|i| {
                i.transport == transport
                    && i.operation == operation
                    && i.position == position
                    && i.headers.contains(extra)
                    && (i.headers.contains(Headers::IMMDT) == extra.contains(Headers::IMMDT))
                    && (i.headers.contains(Headers::IETH) == extra.contains(Headers::IETH))
            })
            .map(|i| i.opcode)
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "Opcode({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for info in ALL {
            assert_eq!(info.opcode.info(), Some(info));
            let tr = match info.opcode.0 >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                3 => Transport::Ud,
                _ => panic!("unexpected transport bits in {info:?}"),
            };
            assert_eq!(info.transport, tr, "{}", info.name);
            // Responses only on RC; UD has only Only packets.
            if info.direction == Direction::Response {
                assert_eq!(info.transport, Transport::Rc);
            }
            if info.transport == Transport::Ud {
                assert_eq!(info.position, Position::Only);
                assert!(info.headers.contains(Headers::DETH));
            }
            // First and Only of a WRITE carry the RETH; Middle and Last never do.
            if info.operation == Operation::RdmaWrite {
                assert_eq!(info.headers.contains(Headers::RETH), info.position.starts());
            }
            // READ responses carry an AETH on First, Last and Only, never on Middle.
            if info.operation == Operation::RdmaReadResponse {
                assert_eq!(info.headers.contains(Headers::AETH), info.position != Position::Middle);
            }
            // Immediate and invalidate only on the packet that ends a message.
            if info.immediate() || info.invalidate() {
                assert!(info.position.ends());
            }
        }
        assert_eq!(ALL.len(), 25 + 12 + 2);
    }

    #[test]
    fn unknown_opcodes() {
        for b in [0x15u8, 0x18, 0x1e, 0x1f, 0x2c, 0x40, 0x60, 0x63, 0x81, 0xa0, 0xff] {
            assert_eq!(Opcode(b).info(), None, "{b:#x}");
        }
    }

    #[test]
    fn header_lengths() {
        assert_eq!(Opcode::RC_ATOMIC_ACK.info().unwrap().header_len(), 12 + 4 + 8);
        assert_eq!(Opcode::RC_CMP_SWAP.info().unwrap().header_len(), 12 + 28);
        assert_eq!(Opcode::RC_WRITE_ONLY_IMM.info().unwrap().header_len(), 12 + 16 + 4);
        assert_eq!(Opcode::UD_SEND_ONLY_IMM.info().unwrap().header_len(), 12 + 8 + 4);
        assert_eq!(Opcode::RC_FLUSH.info().unwrap().header_len(), 12 + 4 + 16);
    }

    #[test]
    fn find_picks_the_right_variant() {
        use Headers as H;
        assert_eq!(
            Opcode::find(Transport::Rc, Operation::Send, Position::Last, H::IMMDT),
            Some(Opcode::RC_SEND_LAST_IMM)
        );
        assert_eq!(
            Opcode::find(Transport::Rc, Operation::Send, Position::Last, H::NONE),
            Some(Opcode::RC_SEND_LAST)
        );
        assert_eq!(
            Opcode::find(Transport::Rc, Operation::Send, Position::Only, H::IETH),
            Some(Opcode::RC_SEND_ONLY_INV)
        );
        assert_eq!(
            Opcode::find(Transport::Uc, Operation::RdmaWrite, Position::Only, H::IMMDT),
            Some(Opcode::UC_WRITE_ONLY_IMM)
        );
        assert_eq!(Opcode::find(Transport::Ud, Operation::Send, Position::First, H::NONE), None);
    }
}
