//! The 24-bit packet sequence number.
//!
//! PSNs live in a circular 24-bit space (IBTA 9.7.1). Two PSNs are compared by the signed
//! distance between them in that space, which is meaningful while they are less than 2^23
//! apart — exactly as kernel rxe's `psn_compare()` does it.

use core::cmp::Ordering;
use core::fmt;

/// A packet sequence number: a value in `0..2^24` with wrap-around arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs.
    pub const MODULUS: u32 = 1 << 24;
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = Self::MODULUS - 1;
    /// The largest distance for which [`Psn::cmp_wrapping`] is meaningful.
    pub const HALF: u32 = 1 << 23;

    /// Makes a PSN from the low 24 bits of `value` (higher bits are discarded).
    #[inline]
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The PSN as a number in `0..2^24`.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The next PSN.
    #[inline]
    #[must_use]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self - other` in the circular space, in `-2^23..2^23`.
    ///
    /// Positive when `self` is after `other`.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back: sign-extends bit 23.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Number of steps forward from `other` to `self` (the unsigned distance, modulo 2^24).
    #[inline]
    pub const fn distance_from(self, other: Psn) -> u32 {
        self.0.wrapping_sub(other.0) & Self::MASK
    }

    /// Wrap-aware ordering: `Less` when `self` comes before `other`.
    #[inline]
    pub fn cmp_wrapping(self, other: Psn) -> Ordering {
        self.diff(other).cmp(&0)
    }

    /// True when `self` comes strictly before `other`.
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` comes strictly after `other`.
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// True when `self` is in the half-open window `[start, start + len)`.
    #[inline]
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.distance_from(start) < len
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({:#08x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_to_24_bits() {
        assert_eq!(Psn::new(0x1ff_ffff).value(), 0xff_ffff);
        assert_eq!(Psn::new(0x100_0000).value(), 0);
    }

    #[test]
    fn wraps_forward_and_back() {
        let top = Psn::new(0xff_ffff);
        assert_eq!(top.next(), Psn::new(0));
        assert_eq!(top.add(3), Psn::new(2));
        assert_eq!(Psn::new(1).sub(3), Psn::new(0xff_fffe));
    }

    #[test]
    fn compares_across_wrap() {
        let a = Psn::new(0xff_fff0);
        let b = Psn::new(0x00_0010);
        assert!(a.is_before(b));
        assert!(b.is_after(a));
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
        assert_eq!(b.distance_from(a), 0x20);
        assert_eq!(a.distance_from(b), Psn::MODULUS - 0x20);
        assert_eq!(a.cmp_wrapping(a), Ordering::Equal);
    }

    #[test]
    fn half_space_boundary() {
        let z = Psn::new(0);
        // Exactly 2^23 apart is the ambiguous point: it reads as "before" from both sides,
        // the same as rxe's psn_compare (the sign bit of the shifted difference).
        let h = Psn::new(Psn::HALF);
        assert_eq!(h.diff(z), -(Psn::HALF as i32));
        assert!(Psn::new(Psn::HALF - 1).is_after(z));
        assert!(Psn::new(Psn::HALF + 1).is_before(z));
    }

    #[test]
    fn window() {
        let s = Psn::new(0xff_fffe);
        assert!(Psn::new(0xff_fffe).in_window(s, 4));
        assert!(Psn::new(1).in_window(s, 4));
        assert!(!Psn::new(2).in_window(s, 4));
        assert!(!Psn::new(0xff_fffd).in_window(s, 4));
        assert!(!s.in_window(s, 0));
    }
}
