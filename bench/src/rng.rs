//! A small seeded random number generator (SplitMix64), so every run is reproducible from its
//! seed and the crate needs no RNG dependency. Quality is ample for choosing keys.

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, full period, passes BigCrush.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// An independent stream for one worker: mixes the stream number into the seed.
    pub fn stream(seed: u64, stream: u64) -> Self {
        let mut r = Rng::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `n` must be positive. Multiply-high mapping (bias below 2^-64 * n).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        let wide = u128::from(self.next_u64()) * u128::from(n);
        // The high half of a 64x64 product is below n, so it fits in u64.
        u64::try_from(wide >> 64).unwrap_or(n - 1)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
// Tests index small vectors with values known to be below their length.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    #[test]
    fn unit_rng_is_deterministic_per_seed_and_stream() {
        // Same seed and stream give the same sequence; different streams differ.
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::stream(7, 1);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::stream(7, 1);
                move |_| r.next_u64()
            })
            .collect();
        let c: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::stream(7, 2);
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn unit_below_stays_in_range_and_covers_it() {
        // 10,000 draws below 10 hit every value, and none reaches 10.
        let mut r = Rng::new(42);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let v = r.below(10);
            assert!(v < 10);
            seen[v as usize] += 1;
        }
        // Each bucket expects 1000; 5 sigma is about 150.
        for count in seen {
            assert!((850..=1150).contains(&count), "{seen:?}");
        }
        let f = r.unit_f64();
        assert!((0.0..1.0).contains(&f));
    }
}
