//! Immediate Data extended transport header (IBTA 9.3.5), 4 bytes: on SEND and RDMA WRITE
//! Last/Only "with immediate". The value is opaque to the transport; it is handed to the
//! receiver's completion exactly as it appeared on the wire (ibverbs' `imm_data` is likewise
//! in network byte order).

simple_header! {
    /// A zero-copy view of an ImmDt.
    ImmDt,
    /// An owned ImmDt.
    ImmDtRepr,
    4;
    /// The immediate data, read big-endian.
    imm, set_imm: u32 = 0..4, be_u32, put_u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = ImmDtRepr { imm: 0x1122_3344 };
        let mut buf = [0u8; 4];
        r.emit(&mut ImmDt::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(ImmDtRepr::parse(&ImmDt::new_checked(&buf[..]).unwrap()), r);
    }
}
