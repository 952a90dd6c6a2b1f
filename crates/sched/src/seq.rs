//! Session-wide sequence numbers with serial-number arithmetic.
//!
//! Sequence numbers are 32 bits on the wire and wrap after 2^32 packets (about
//! 4.5 hours at 1 Gbit/s of 1500-byte packets), so they must never be compared
//! with `<`. Comparison follows RFC 1982 ("Serial Number Arithmetic") with
//! SERIAL_BITS = 32: `a` is before `b` when `b - a` (mod 2^32) lies in
//! `1..2^31`. Two numbers exactly 2^31 apart are unordered, as RFC 1982 §3.2
//! leaves them undefined; that is why [`SeqNo`] deliberately implements no `Ord`.

/// A session-wide packet sequence number (wraps at 2^32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqNo(pub u32);

impl SeqNo {
    /// The sequence number that follows this one (wrapping).
    #[must_use]
    pub fn next(self) -> Self {
        self.add(1)
    }

    /// This sequence number advanced by `count` (wrapping); same as `self + count`.
    // The explicit name reads better at call sites than `+` on a newtype, and
    // the operator traits are implemented too.
    #[allow(clippy::should_implement_trait)]
    #[must_use]
    pub fn add(self, count: u32) -> Self {
        SeqNo(self.0.wrapping_add(count))
    }

    /// This sequence number moved back by `count` (wrapping); same as `self - count`.
    #[allow(clippy::should_implement_trait)]
    #[must_use]
    pub fn sub(self, count: u32) -> Self {
        SeqNo(self.0.wrapping_sub(count))
    }

    /// Signed distance from `self` to `other`: positive when `other` comes
    /// after `self`, negative when before. Exactly 2^31 apart yields
    /// `i32::MIN` (RFC 1982: undefined, treated as "behind").
    #[must_use]
    pub fn distance_to(self, other: SeqNo) -> i32 {
        other.0.wrapping_sub(self.0) as i32
    }

    /// True when `self` comes strictly before `other` in serial order.
    #[must_use]
    pub fn is_before(self, other: SeqNo) -> bool {
        self.distance_to(other) > 0
    }
}

impl std::ops::Add<u32> for SeqNo {
    type Output = SeqNo;

    /// Wrapping addition.
    fn add(self, count: u32) -> SeqNo {
        SeqNo::add(self, count)
    }
}

impl std::ops::Sub<u32> for SeqNo {
    type Output = SeqNo;

    /// Wrapping subtraction.
    fn sub(self, count: u32) -> SeqNo {
        SeqNo::sub(self, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_and_add_wrap_at_u32_max() {
        assert_eq!(SeqNo(u32::MAX).next(), SeqNo(0));
        assert_eq!(SeqNo(0xFFFF_FFFE).add(5), SeqNo(3));
        assert_eq!(SeqNo(3).sub(5), SeqNo(0xFFFF_FFFE));
        assert_eq!(SeqNo(u32::MAX) + 2, SeqNo(1));
        assert_eq!(SeqNo(1) - 2, SeqNo(u32::MAX));
    }

    #[test]
    fn distance_is_signed_and_wraps() {
        let cases: &[(u32, u32, i32)] = &[
            (10, 15, 5),
            (15, 10, -5),
            (0xFFFF_FFFF, 0, 1),
            (0, 0xFFFF_FFFF, -1),
            (0xFFFF_FFF0, 0x10, 0x20),
            (7, 7, 0),
            (0, 0x7FFF_FFFF, i32::MAX),
            (0, 0x8000_0000, i32::MIN),
        ];
        for &(from, to, expected) in cases {
            assert_eq!(
                SeqNo(from).distance_to(SeqNo(to)),
                expected,
                "{from:#x} -> {to:#x}"
            );
        }
    }

    #[test]
    fn is_before_follows_rfc1982() {
        assert!(SeqNo(1).is_before(SeqNo(2)));
        assert!(!SeqNo(2).is_before(SeqNo(1)));
        assert!(!SeqNo(5).is_before(SeqNo(5)));
        assert!(SeqNo(0xFFFF_FFFF).is_before(SeqNo(0)));
        assert!(!SeqNo(0).is_before(SeqNo(0xFFFF_FFFF)));
        // 2^31 apart: unordered in both directions.
        assert!(!SeqNo(0).is_before(SeqNo(0x8000_0000)));
        assert!(!SeqNo(0x8000_0000).is_before(SeqNo(0)));
    }
}
