//! Atomic Extended Transport Header (IBTA 9.3.4), 28 bytes: on COMPARE_SWAP and FETCH_ADD.

simple_header! {
    /// A zero-copy view of an AtomicETH.
    AtomicEth,
    /// An owned AtomicETH.
    AtomicEthRepr,
    28;
    /// Virtual address of the 8-byte target (must be 8-byte aligned).
    va, set_va: u64 = 0..8, be_u64, put_u64;
    /// Remote key.
    rkey, set_rkey: u32 = 8..12, be_u32, put_u32;
    /// Swap value (COMPARE_SWAP) or addend (FETCH_ADD).
    swap_add, set_swap_add: u64 = 12..20, be_u64, put_u64;
    /// Compare value (COMPARE_SWAP; ignored by FETCH_ADD).
    compare, set_compare: u64 = 20..28, be_u64, put_u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = AtomicEthRepr { va: 0x561a_eb75_5000, rkey: 0x714, swap_add: 1, compare: u64::MAX };
        let mut buf = [0u8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[8..12], &[0, 0, 7, 0x14]);
        assert_eq!(&buf[20..28], &[0xff; 8]);
        assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&buf[..]).unwrap()), r);
    }
}
