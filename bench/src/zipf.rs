//! Zipfian key choice as in YCSB (Gray et al., "Quickly generating billion-record synthetic
//! databases", SIGMOD 1994), with YCSB's constant 0.99.
//!
//! `Zipfian` draws ranks: rank 0 is the most popular. `ScrambledZipfian` maps ranks to keys
//! through a fixed permutation of `0..n`, so the popular keys are spread over the key space
//! (and, for Tessera, over shards) instead of being the first few ids. Unlike YCSB's
//! hash-then-modulo scramble, the permutation is a bijection, so the key popularity is
//! exactly the rank popularity.

use crate::rng::Rng;

/// YCSB's default skew.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// Ranks `0..n` with probability of rank `i` proportional to `1 / (i + 1)^theta`.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
    /// `1 + 0.5^theta`: below this (scaled) the draw is rank 1.
    half_pow_theta_plus_one: f64,
}

/// The generalized harmonic number `sum_{i=1..=n} 1 / i^theta`.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// A generator over `0..items` (`items >= 1`) with skew `theta` in `(0, 1)`.
    /// Computing `zeta` is O(items); the loader's limit keeps that under a second.
    pub fn new(items: u64, theta: f64) -> Self {
        assert!(items >= 1, "Zipfian over no items");
        assert!(theta > 0.0 && theta < 1.0, "theta {theta} outside (0, 1)");
        let zeta_n = zeta(items, theta);
        let zeta_2 = zeta(2.min(items), theta);
        let n = items as f64;
        let eta = if items > 2 {
            (1.0 - (2.0 / n).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n)
        } else {
            // With one or two items the closed form divides by zero; the first two branches
            // of `next` cover every draw then.
            1.0
        };
        Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta_n,
            eta,
            half_pow_theta_plus_one: 1.0 + 0.5f64.powf(theta),
        }
    }

    /// Number of items.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Exact probability of rank 0 (used by tests and docs).
    pub fn p_rank0(&self) -> f64 {
        1.0 / self.zeta_n
    }

    /// Exact probability of rank 1.
    pub fn p_rank1(&self) -> f64 {
        0.5f64.powf(self.theta) / self.zeta_n
    }

    /// Draws a rank in `0..items`.
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit_f64();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.half_pow_theta_plus_one {
            return 1.min(self.items - 1);
        }
        let v = (self.items as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        // `v` is in [0, items] up to rounding; clamp the float before converting.
        #[allow(clippy::cast_possible_truncation)]
        // A float-to-int `as` saturates (and maps NaN to 0), so any v lands in 0..=u64::MAX
        // and the clamp below makes it a valid rank.
        let rank = v.max(0.0) as u64;
        rank.min(self.items - 1)
    }
}

/// Zipfian ranks mapped to keys by the permutation `rank * step + offset (mod n)`.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    zipf: Zipfian,
    step: u64,
    offset: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl ScrambledZipfian {
    /// Keys `0..items`, YCSB skew.
    pub fn new(items: u64) -> Self {
        let zipf = Zipfian::new(items, ZIPFIAN_CONSTANT);
        // A large odd constant made coprime with `items`, so the map is a bijection.
        let mut step = 0x9E37_79B9_7F4A_7C15 % items.max(1);
        while items > 1 && gcd(step, items) != 1 {
            step = (step + 1) % items;
        }
        let offset = 0xD1B5_4A32_D192_ED03 % items.max(1);
        ScrambledZipfian { zipf, step, offset }
    }

    /// The key that rank `rank` maps to.
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        let n = u128::from(self.zipf.items());
        let k = (u128::from(rank) * u128::from(self.step) + u128::from(self.offset)) % n;
        // k < n <= u64::MAX.
        u64::try_from(k).unwrap_or(0)
    }

    /// Draws a key in `0..items`.
    pub fn next(&self, rng: &mut Rng) -> u64 {
        self.key_of_rank(self.zipf.next(rng))
    }

    /// The rank generator underneath.
    pub fn ranks(&self) -> &Zipfian {
        &self.zipf
    }
}

#[cfg(test)]
// Tests index small vectors with values known to be below their length.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    /// Allowed deviation: 6 standard deviations of a binomial count, so a correct generator
    /// fails with probability around 1e-9 (and with a fixed seed, never).
    fn bound(samples: u64, p: f64) -> f64 {
        6.0 * (samples as f64 * p * (1.0 - p)).sqrt()
    }

    #[test]
    fn unit_zipfian_stays_in_range() {
        // Every draw is a valid rank, for tiny and larger item counts.
        let mut rng = Rng::new(1);
        for items in [1u64, 2, 3, 10, 1000] {
            let z = Zipfian::new(items, ZIPFIAN_CONSTANT);
            for _ in 0..20_000 {
                assert!(z.next(&mut rng) < items);
            }
        }
    }

    #[test]
    fn unit_zipfian_head_matches_the_distribution() {
        // Ranks 0 and 1 have exact probabilities 1/zeta(n) and 0.5^theta/zeta(n); the
        // observed counts must be within 6 sigma of them, and the head must dominate.
        let items = 1000;
        let samples = 200_000u64;
        let z = Zipfian::new(items, ZIPFIAN_CONSTANT);
        let mut rng = Rng::new(0x5EED);
        let mut counts = vec![0u64; items as usize];
        for _ in 0..samples {
            counts[z.next(&mut rng) as usize] += 1;
        }
        for (rank, p) in [(0usize, z.p_rank0()), (1, z.p_rank1())] {
            let expected = samples as f64 * p;
            let got = counts[rank] as f64;
            assert!(
                (got - expected).abs() < bound(samples, p),
                "rank {rank}: got {got}, expected {expected:.0}"
            );
        }
        // Zipf 0.99 over 1000 items: the top 10 % of ranks get about 70 % of draws
        // (sum of 1/i^0.99 for i<=100 over i<=1000); uniform would give 10 %.
        let head: u64 = counts[..100].iter().sum();
        let p_head = zeta(100, ZIPFIAN_CONSTANT) / zeta(items, ZIPFIAN_CONSTANT);
        let expected = samples as f64 * p_head;
        // The tail ranks use Gray's approximation, so allow 2 % of samples on top of 6 sigma.
        assert!(
            (head as f64 - expected).abs() < bound(samples, p_head) + 0.02 * samples as f64,
            "head {head}, expected {expected:.0}"
        );
        assert!(p_head > 0.6);
    }

    #[test]
    fn unit_scrambled_zipfian_is_a_permutation_that_keeps_skew() {
        // The rank -> key map is a bijection of 0..n (for n with small factors too), and the
        // most popular key is drawn as often as rank 0.
        for items in [1u64, 2, 12, 1000, 1024] {
            let s = ScrambledZipfian::new(items);
            let mut seen = vec![false; items as usize];
            for rank in 0..items {
                let k = s.key_of_rank(rank) as usize;
                assert!(!seen[k], "key {k} hit twice for n={items}");
                seen[k] = true;
            }
        }
        let s = ScrambledZipfian::new(1000);
        let hot = s.key_of_rank(0);
        let mut rng = Rng::new(3);
        let samples = 100_000u64;
        let hits = (0..samples).filter(|_| s.next(&mut rng) == hot).count() as f64;
        let p = s.ranks().p_rank0();
        assert!((hits - samples as f64 * p).abs() < bound(samples, p));
        // The hot key is not simply key 0: the scramble moved it.
        assert_ne!(hot, 0);
    }
}
