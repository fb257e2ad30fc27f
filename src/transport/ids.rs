//! Newtypes for the integers of the verbs world that sit next to each other and are easy to
//! swap: queue pair numbers, memory keys and Q_Keys (the PSN is [`crate::wire::Psn`]).
//!
//! Each wraps the integer ibverbs uses. [`Qpn::new`] (etc.) and [`Qpn::value`] convert
//! explicitly, and `From<Qpn> for u32` gives the raw value back, so that code bridging to C or
//! to the wire passes numbers through unchanged while a `QpAttrs::rtr(av, mtu, psn, qpn)` with
//! the two swapped does not compile.
//!
//! ```
//! use softroce::transport::{Lkey, Qpn, Rkey};
//! let qpn = Qpn::new(0x11);
//! assert_eq!(qpn.value(), 0x11);
//! assert_eq!(u32::from(qpn), 0x11);
//! assert_eq!(qpn.to_string(), "0x000011");
//! assert_eq!(Qpn::new(0x1ab_cdef), Qpn::new(0xab_cdef), "24 bits, like the BTH field");
//! let (l, r) = (Lkey::new(0x1234), Rkey::new(0x1234));
//! assert_eq!(l.value(), r.value()); // the same number, but never the same type
//! ```

use core::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $mask:expr, $width:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(u32);

        impl $name {
            /// Wraps a raw value (bits above the field's width are dropped).
            #[inline]
            pub const fn new(value: u32) -> $name {
                $name(value & $mask)
            }
            /// The raw value.
            #[inline]
            pub const fn value(self) -> u32 {
                self.0
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!("{:#0", $width, "x}"), self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

id_type!(
    /// A queue pair number: 24 bits, as in the BTH's destination QP field.
    Qpn,
    0x00ff_ffff,
    "8"
);

id_type!(
    /// A local key: names a memory region in the scatter/gather entries of this process's work
    /// requests ([`crate::transport::Sge::lkey`]).
    Lkey,
    u32::MAX,
    "10"
);

id_type!(
    /// A remote key: what a peer names in RDMA READ, WRITE and atomic requests to reach a
    /// memory region ([`crate::transport::RemoteAddr::rkey`]), and what SEND with invalidate
    /// invalidates.
    Rkey,
    u32::MAX,
    "10"
);

id_type!(
    /// A Q_Key: the key a UD QP accepts datagrams with. A value with the high bit set in a
    /// send ([`Qkey::USE_QP`]) means "the sending QP's own Q_Key", as in ibverbs.
    Qkey,
    u32::MAX,
    "10"
);

impl Qpn {
    /// The largest QP number.
    pub const MAX: Qpn = Qpn(0x00ff_ffff);
}

impl Qkey {
    /// A send's Q_Key with this bit set stands for the sending QP's own Q_Key.
    pub const USE_QP: Qkey = Qkey(0x8000_0000);
    /// True when the high bit asks for the sending QP's own Q_Key.
    pub const fn uses_qp_qkey(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_debug() {
        assert_eq!(Qpn::new(0x11).to_string(), "0x000011");
        assert_eq!(format!("{:?}", Qpn::new(0x11)), "Qpn(0x11)");
        assert_eq!(Rkey::new(0xab).to_string(), "0x000000ab");
        assert_eq!(format!("{:?}", Lkey::new(0xab)), "Lkey(0xab)");
        assert!(Qkey::USE_QP.uses_qp_qkey() && !Qkey::new(0x1111_1111).uses_qp_qkey());
        assert_eq!(Qpn::new(u32::MAX), Qpn::MAX);
    }
}
