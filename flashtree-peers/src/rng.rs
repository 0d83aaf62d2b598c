//! Small, fast, seedable random numbers and the distributions workloads need
//! (uniform, exponential, zipfian as in YCSB, TPC-C NURand).

/// wyrand: 64-bit state, one multiply per draw. Not cryptographic.
#[derive(Debug, Clone)]
pub struct Rng64 {
    state: u64,
}

impl Rng64 {
    /// A generator from a seed (any value, including 0).
    pub fn new(seed: u64) -> Self {
        Rng64 {
            state: seed ^ 0x2545_F491_4F6C_DD1D,
        }
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0xA076_1D64_78BD_642F);
        let product = (self.state as u128) * ((self.state ^ 0xE703_7ED1_A0B4_28DB) as u128);
        ((product >> 64) as u64) ^ (product as u64)
    }
    /// Uniform in `0..bound` (bound > 0; returns 0 for bound 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }
    /// Uniform in `low..=high` (inclusive; high >= low).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        debug_assert!(high >= low);
        low + self.below(high - low + 1)
    }
    /// Uniform in [0, 1).
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Exponential with rate `rate_per_sec`, in seconds.
    pub fn exponential(&mut self, rate_per_sec: f64) -> f64 {
        -(1.0 - self.unit_f64()).ln() / rate_per_sec
    }
    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325u64, |hash, &byte| {
        (hash ^ byte as u64).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// 64-bit FNV-1a of a number's little-endian bytes (YCSB's key scrambling).
pub fn fnv1a_u64(value: u64) -> u64 {
    fnv1a(&value.to_le_bytes())
}

/// Zipfian over `0..items_count` with skew theta (Gray et al., as in YCSB's
/// ZipfianGenerator): rank 0 is the most popular.
#[derive(Debug, Clone)]
pub struct Zipf {
    items_count: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
}

/// Most items a Zipf generator accepts (zeta is computed in O(n) at setup).
pub const ZIPF_ITEMS_MAX: u64 = 1 << 34;

impl Zipf {
    /// Builds the generator; O(items_count) for zeta.
    pub fn new(items_count: u64, theta: f64) -> Result<Self, String> {
        if !(2..=ZIPF_ITEMS_MAX).contains(&items_count) {
            return Err(format!(
                "zipf needs 2..={ZIPF_ITEMS_MAX} items, got {items_count}"
            ));
        }
        if !(theta > 0.0 && theta < 1.0) {
            return Err(format!("zipf theta must be in (0, 1), got {theta}"));
        }
        let zeta_n = zeta(items_count, theta);
        let zeta_2 = zeta(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / items_count as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Ok(Zipf {
            items_count,
            theta,
            alpha,
            zeta_n,
            eta,
        })
    }
    /// Items in the domain.
    pub fn items_count(&self) -> u64 {
        self.items_count
    }
    /// A rank in `0..items_count`.
    pub fn sample(&self, rng: &mut Rng64) -> u64 {
        let u = rng.unit_f64();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let rank =
            (self.items_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.items_count - 1)
    }
    /// A rank scrambled over the domain (YCSB's ScrambledZipfian), so hot
    /// items are spread over the key space.
    pub fn sample_scrambled(&self, rng: &mut Rng64) -> u64 {
        fnv1a_u64(self.sample(rng)) % self.items_count
    }
}

fn zeta(items_count: u64, theta: f64) -> f64 {
    (1..=items_count)
        .map(|i| 1.0 / (i as f64).powf(theta))
        .sum()
}

/// TPC-C NURand(A, x, y) with run-time constant `c` (clause 2.1.6).
pub fn nurand(rng: &mut Rng64, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((rng.range(0, a) | rng.range(x, y)) + c) % (y - x + 1)) + x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_bounds() {
        let mut rng = Rng64::new(1);
        for bound in [1u64, 2, 3, 10, 1000] {
            for _ in 0..1000 {
                assert!(rng.below(bound) < bound);
            }
        }
    }

    #[test]
    fn zipf_is_skewed_and_bounded() {
        let zipf = Zipf::new(1000, 0.99).unwrap();
        let mut rng = Rng64::new(7);
        let mut zero_count = 0;
        for _ in 0..10_000 {
            let rank = zipf.sample(&mut rng);
            assert!(rank < 1000);
            zero_count += (rank == 0) as u32;
        }
        // P(rank 0) = 1/zeta(1000, 0.99) ≈ 0.13.
        assert!(zero_count > 800 && zero_count < 1900, "{zero_count}");
        assert!(Zipf::new(1, 0.5).is_err());
        assert!(Zipf::new(10, 1.5).is_err());
    }
}
