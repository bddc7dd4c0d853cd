//! The simulator's only source of randomness: splitmix64 from one seed, so
//! a run replays exactly from its seed on any machine (no `rand` version or
//! platform can change the sequence).

/// A deterministic pseudo-random generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    #[must_use]
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// An independent generator derived from this one, so adding draws to
    /// one part of the simulation does not shift every other part's.
    #[must_use]
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64() ^ 0xa076_1d64_78bd_642f)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        // The modulo bias is below 2^-40 for the small bounds used here.
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "range {lo}..={hi}");
        lo + self.below(hi - lo + 1)
    }

    /// An index into a slice of `len` elements (`len > 0`).
    pub fn index(&mut self, len: usize) -> usize {
        let len = u64::try_from(len).expect("usize fits u64");
        usize::try_from(self.below(len)).expect("below a usize")
    }

    /// True with probability `per_million / 1_000_000`.
    pub fn chance(&mut self, per_million: u32) -> bool {
        self.below(1_000_000) < u64::from(per_million)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let r = a.range(3, 5);
            assert!((3..=5).contains(&r));
            b.range(3, 5);
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
