//! Invalidate Extended Transport Header (IBTA 9.3.6), 4 bytes: on SEND Last/Only with
//! invalidate. It names the rkey the responder must invalidate.

simple_header! {
    /// A zero-copy view of an IETH.
    Ieth,
    /// An owned IETH.
    IethRepr,
    4;
    /// The remote key to invalidate.
    rkey, set_rkey: u32 = 0..4, be_u32, put_u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = IethRepr { rkey: 0xdead_beef };
        let mut buf = [0u8; 4];
        r.emit(&mut Ieth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(IethRepr::parse(&Ieth::new_checked(&buf[..]).unwrap()), r);
    }
}
