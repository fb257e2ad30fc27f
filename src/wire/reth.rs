//! RDMA Extended Transport Header (IBTA 9.3.3), 16 bytes: on RDMA WRITE First/Only, RDMA READ
//! requests, FLUSH and ATOMIC WRITE.

simple_header! {
    /// A zero-copy view of a RETH.
    Reth,
    /// An owned RETH.
    RethRepr,
    16;
    /// Virtual address of the remote buffer.
    va, set_va: u64 = 0..8, be_u64, put_u64;
    /// Remote key of the memory region.
    rkey, set_rkey: u32 = 8..12, be_u32, put_u32;
    /// DMA length: the length of the whole message in bytes.
    dma_len, set_dma_len: u32 = 12..16, be_u32, put_u32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;

    #[test]
    fn round_trip() {
        let r = RethRepr { va: 0x555c_5bf6_c000, rkey: 0x844, dma_len: 3000 };
        let mut buf = [0u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0, 0, 0x55, 0x5c, 0x5b, 0xf6, 0xc0, 0, 0, 0, 8, 0x44, 0, 0, 0x0b, 0xb8]);
        assert_eq!(RethRepr::parse(&Reth::new_checked(&buf[..]).unwrap()), r);
        assert_eq!(Reth::new_checked(&buf[..15]).unwrap_err(), Error::Truncated);
    }
}
