//! A small deterministic pseudo-random generator, so that a scenario with a
//! given seed drops exactly the same packets on every run.
//!
//! SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number
//! generators", OOPSLA 2014): 64 bits of state, passes BigCrush, and is more
//! than enough for drawing loss decisions and jitter.

/// Seeded generator; the same seed gives the same sequence on every platform.
#[derive(Debug, Clone)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        // Constants from the SplitMix64 paper (golden-ratio increment and the
        // two multipliers of the finaliser, "Mix13" variant).
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 bits of precision.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with the given probability (clamped to [0, 1]).
    pub fn chance(&mut self, probability: f64) -> bool {
        probability > 0.0 && self.next_unit() < probability
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_roughly_uniform() {
        let mut a = SeededRng::new(42);
        let mut b = SeededRng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut rng = SeededRng::new(7);
        let hits = (0..100_000).filter(|_| rng.chance(0.1)).count();
        assert!(
            (9_000..11_000).contains(&hits),
            "{hits} hits of 100000 at p=0.1"
        );
        assert!(!SeededRng::new(1).chance(0.0));
    }
}
