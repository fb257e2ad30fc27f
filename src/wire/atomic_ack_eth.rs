//! Atomic Acknowledge Extended Transport Header (IBTA 9.5.3), 8 bytes: on ATOMIC ACKNOWLEDGE.
//! It returns the value the target held before the atomic operation.

simple_header! {
    /// A zero-copy view of an AtomicAckETH.
    AtomicAckEth,
    /// An owned AtomicAckETH.
    AtomicAckEthRepr,
    8;
    /// The original remote value.
    orig, set_orig: u64 = 0..8, be_u64, put_u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = AtomicAckEthRepr { orig: 3_253_694_356_369_086_624 };
        let mut buf = [0u8; 8];
        r.emit(&mut AtomicAckEth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, r.orig.to_be_bytes());
        assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&buf[..]).unwrap()), r);
    }
}
