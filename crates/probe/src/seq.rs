//! Serial-number arithmetic for the 32-bit wrapping path packet numbers (RFC 1982
//! section 3.1, applied the way RFC 9000 appendix A.3 decodes truncated packet
//! numbers): a wire value is widened to 64 bits by choosing the candidate closest to a
//! reference the widening side already knows, so comparisons after widening are
//! plain integer comparisons.

/// Where the widened space starts for the very first number seen. Any value at or
/// above 2^31 works; 2^32 leaves a whole wrap of room below the first number, so
/// packets reordered ahead of the first one still widen to smaller values.
pub(crate) const WIDE_ORIGIN: u64 = 1 << 32;

/// Widens `value` to the 64-bit number closest to `reference` whose low 32 bits are
/// `value`. Correct as long as the two are less than 2^31 apart.
pub(crate) fn widen(reference: u64, value: u32) -> u64 {
    let delta = i64::from(value.wrapping_sub(reference as u32) as i32);
    reference.wrapping_add_signed(delta)
}

/// Widens `value` against an optional reference; the first number seen lands at
/// [`WIDE_ORIGIN`] plus its value.
pub(crate) fn widen_or_origin(reference: Option<u64>, value: u32) -> u64 {
    match reference {
        Some(reference) => widen(reference, value),
        None => WIDE_ORIGIN + u64::from(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: reference, wire value, expected widened number.
    #[test]
    fn widening_table() {
        let base = WIDE_ORIGIN;
        #[rustfmt::skip]
        let cases: &[(u64, u32, u64)] = &[
            (base + 10,           11,            base + 11),
            (base + 10,           9,             base + 9),
            (base + 0xFFFF_FFFE,  0xFFFF_FFFF,   base + 0xFFFF_FFFF),
            // crossing u32::MAX -> 0 goes up, not 4 billion down
            (base + 0xFFFF_FFFE,  1,             base + 0x1_0000_0001),
            // and back across the wrap goes down
            (base + 0x1_0000_0001, 0xFFFF_FFF0,  base + 0xFFFF_FFF0),
        ];
        for (index, &(reference, value, expected)) in cases.iter().enumerate() {
            assert_eq!(widen(reference, value), expected, "case {index}");
        }
        assert_eq!(widen_or_origin(None, 7), base + 7);
    }
}
