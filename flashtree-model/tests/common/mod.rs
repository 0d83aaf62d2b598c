//! Synthetic grids made from the model's own equations.

use flashtree_model::grid::{Grid, GridPoint, Op, GRID_VERSION};
use flashtree_model::rational::Rational;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The k of Ransom, Lim & Mitzenmacher §3.3.
pub const KS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// Known cost functions (µs): setup and transfer per op.
pub struct Truth {
    pub read_setup: Rational,
    pub read_transfer: Rational,
    pub write_setup: Rational,
    pub write_transfer: Rational,
}

fn r(num: &[f64], den: &[f64]) -> Rational {
    Rational {
        num: num.to_vec(),
        den: den.to_vec(),
    }
}

/// Shapes like a flash device: costs fall steeply with k, then level off.
pub fn truth() -> Truth {
    Truth {
        read_setup: r(&[200.0, 100.0, 12.0], &[1.0, 1.0, 1.0]),
        read_transfer: r(&[4.0, 2.0, 0.5], &[0.5, 1.0, 1.0]),
        write_setup: r(&[300.0, 200.0, 30.0], &[1.0, 2.0, 1.0]),
        write_transfer: r(&[10.0, 5.0, 2.0, 1.0], &[1.0, 1.0, 0.5, 1.0]),
    }
}

impl Truth {
    pub fn costs(&self, op: Op) -> (&Rational, &Rational) {
        match op {
            Op::Read => (&self.read_setup, &self.read_transfer),
            Op::Write => (&self.write_setup, &self.write_transfer),
        }
    }
}

/// Eight fractions from 0.1% to 100%, log-spaced.
pub fn fractions() -> Vec<f64> {
    (0..8)
        .map(|i| 10f64.powf(-3.0 + 3.0 * i as f64 / 7.0))
        .collect()
}

/// A grid whose elapsed times follow the truth, times `1 + noise·u`, u
/// uniform in [-1, 1].
pub fn synthetic_grid(truth: &Truth, noise: f64, seed: u64) -> Grid {
    let mut rng = StdRng::seed_from_u64(seed);
    let pages_total: u64 = 1 << 20;
    let mut points = Vec::new();
    for op in Op::ALL {
        let (setup, transfer) = truth.costs(op);
        for &k in &KS {
            for &f in &fractions() {
                let runs_total = ((f * pages_total as f64).round() as u64).max(1);
                let f_actual = runs_total as f64 / pages_total as f64;
                let us_per_page = transfer.eval(k as f64) + f_actual * setup.eval(k as f64);
                let jitter = 1.0 + noise * rng.random_range(-1.0..=1.0);
                points.push(GridPoint {
                    op,
                    k,
                    pages_total,
                    runs_total,
                    elapsed_s: us_per_page * pages_total as f64 / 1e6 * jitter,
                    random_fraction_target: Some(f),
                });
            }
        }
    }
    Grid {
        version: GRID_VERSION,
        page_bytes: 4096,
        device: None,
        points,
    }
}
