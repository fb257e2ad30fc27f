//! Flush Extended Transport Header (IBTA Memory Placement Extensions), 4 bytes: on FLUSH,
//! before the RETH. The low six bits carry the selectivity level and the placement type.
//!
//! ```text
//!  bits 31..6  reserved
//!  bits  5..4  SEL  (0: flush the memory region range, 1: the whole region)
//!  bits  3..0  PLT  (bit 0: global visibility, bit 1: persistence)
//! ```

simple_header! {
    /// A zero-copy view of a FETH.
    Feth,
    /// An owned FETH (the raw 32-bit word; see [`FethRepr::sel`] and [`FethRepr::plt`]).
    FethRepr,
    4;
    /// The whole header word.
    word, set_word: u32 = 0..4, be_u32, put_u32;
}

impl FethRepr {
    /// A FETH with the given selectivity level and placement type, reserved bits zero.
    pub const fn new(sel: u8, plt: u8) -> FethRepr {
        FethRepr { word: ((sel as u32 & 3) << 4) | (plt as u32 & 0xf) }
    }
    /// Selectivity level.
    pub const fn sel(&self) -> u8 {
        ((self.word >> 4) & 3) as u8
    }
    /// Placement type.
    pub const fn plt(&self) -> u8 {
        (self.word & 0xf) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let r = FethRepr::new(1, 2);
        assert_eq!((r.sel(), r.plt()), (1, 2));
        let mut buf = [0u8; 4];
        r.emit(&mut Feth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0, 0, 0, 0x12]);
        assert_eq!(FethRepr::parse(&Feth::new_checked(&buf[..]).unwrap()), r);
    }
}
