//! Datagram Extended Transport Header (IBTA 9.3.2), 8 bytes: on every UD packet.
//!
//! ```text
//!  0..4  Q_Key
//!  4     reserved
//!  5..8  SrcQP (24 bits)
//! ```

simple_header! {
    /// A zero-copy view of a DETH.
    Deth,
    /// An owned DETH.
    DethRepr,
    8;
    /// Queue key.
    qkey, set_qkey: u32 = 0..4, be_u32, put_u32;
    /// The reserved byte.
    resv8, set_resv8: u8 = 4..5, be_u8, put_u8;
    /// Source QP number (24 bits).
    src_qp, set_src_qp: u32 = 5..8, be_u24, put_u24;
}

impl DethRepr {
    /// The high bit of a Q_Key marks a privileged key (IBTA 10.2.4): only privileged
    /// consumers may send with one; a non-privileged sender's WR Q_Key with the high bit set
    /// is replaced by the QP's own Q_Key.
    pub const fn is_privileged_qkey(qkey: u32) -> bool {
        qkey & 0x8000_0000 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = DethRepr { qkey: 0x1111_1111, resv8: 0, src_qp: 0x1d };
        let mut buf = [0u8; 8];
        r.emit(&mut Deth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x1d]);
        assert_eq!(DethRepr::parse(&Deth::new_checked(&buf[..]).unwrap()), r);
        assert!(DethRepr::is_privileged_qkey(0x8001_0000));
        assert!(!DethRepr::is_privileged_qkey(0x1111_1111));
    }
}
