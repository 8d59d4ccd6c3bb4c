//! The pseudo-random order of "randomize order" selectors.

/// Minimal deterministic generator (SplitMix64) for "randomize order": the order only has
/// to be a fixed shuffle, not unpredictable, so no dependency is needed.
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    pub(super) fn below(&mut self, bound: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % bound.max(1) as u64) as usize
    }
}
