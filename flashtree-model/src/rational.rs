//! Rational cost functions of k (Ransom, Lim & Mitzenmacher equations 5 and 6) and their
//! nonlinear least-squares fit across k.
//!
//! A function of degree n is `(c_0 + c_1 k + … + c_n k^n) / (d_0 + d_1 k + … + d_n k^n)`.
//! The scale of numerator and denominator is fixed by `d_n = 1`, and the other
//! denominator coefficients are kept non-negative (fitted as squares), so the
//! denominator is positive for every k ≥ 0: the fitted curve has no poles and
//! none of the spikes Ransom, Lim & Mitzenmacher reports for unconstrained fits. The common shape
//! of device costs, `A/k + B` (latency shared by k requests, then a bandwidth
//! floor), is the special case `c_{n-1} = A, c_n = B`, all other terms 0; it
//! serves as a start point and as the fallback when the full fit fails.
//!
//! The fit minimises relative residuals `(f(k_i) − v_i) / v_i` with the
//! Levenberg–Marquardt solver of the `levenberg-marquardt` crate.

use levenberg_marquardt::{LeastSquaresProblem, LevenbergMarquardt};
use nalgebra::{storage::Owned, DMatrix, DVector, Dyn};
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::linear::fit_line;

/// Largest degree accepted in a model file (bounds evaluation and fitting).
pub const DEGREE_MAX: usize = 6;

/// A rational function of k with coefficients in ascending powers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rational {
    /// Numerator coefficients c_0 … c_n.
    pub num: Vec<f64>,
    /// Denominator coefficients d_0 … d_n.
    pub den: Vec<f64>,
}

/// A fitted rational function with its quality.
#[derive(Clone, Debug, PartialEq)]
pub struct RationalFit {
    /// The function.
    pub function: Rational,
    /// Root mean square of the relative residuals at the fitted points.
    pub rms_rel_error: f64,
    /// Which start point won: `"lm-linearized"`, `"lm-a/k+b"` or `"a/k+b"`.
    pub method: &'static str,
}

impl Rational {
    /// Evaluates the function at k.
    pub fn eval(&self, k: f64) -> f64 {
        horner(&self.num, k) / horner(&self.den, k)
    }

    /// The degree n (number of coefficients minus one).
    pub fn degree(&self) -> usize {
        self.num.len().saturating_sub(1)
    }

    /// Checks the coefficients and that the function is finite and
    /// non-negative at every integer k in `1..=k_max`.
    pub fn validate(&self, field: &str, k_max: u32) -> Result<()> {
        let len = self.num.len();
        if len == 0 || len > DEGREE_MAX + 1 || self.den.len() != len {
            return Err(ModelError::invalid(
                field,
                format!(
                    "num and den must have the same length, 1..={}",
                    DEGREE_MAX + 1
                ),
            ));
        }
        if self.num.iter().chain(&self.den).any(|c| !c.is_finite()) {
            return Err(ModelError::invalid(
                field,
                "coefficients must be finite numbers",
            ));
        }
        for k in 1..=k_max {
            let value = self.eval(f64::from(k));
            if !(value.is_finite() && value >= 0.0) {
                return Err(ModelError::invalid(
                    field,
                    format!(
                        "evaluates to {value} at k = {k}; costs must be finite and non-negative"
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn horner(coefficients: &[f64], k: f64) -> f64 {
    coefficients.iter().rev().fold(0.0, |acc, c| acc * k + c)
}

/// Fits a rational function of the given degree to `(k_i, v_i)`.
///
/// The degree is lowered when there are fewer than `2·degree + 1` distinct
/// points. Fails only when there are no points or a value is not finite and
/// non-negative.
pub fn fit_rational(ks: &[f64], values: &[f64], degree: usize) -> Result<RationalFit> {
    check_points(ks, values)?;
    let degree = degree.min(DEGREE_MAX).min((ks.len() - 1) / 2);
    let weights = relative_weights(values);
    let fallback = shape_fit(ks, values, degree);
    let mut best = score(fallback.clone(), ks, values, &weights, "a/k+b");
    if degree == 0 {
        return Ok(best);
    }
    let k_max = ks.iter().cloned().fold(1.0, f64::max) as u32;
    let starts = [
        (
            linearized_start(ks, values, &weights, degree),
            "lm-linearized",
        ),
        (Some(fallback), "lm-a/k+b"),
    ];
    for (start, method) in starts {
        let Some(start) = start else { continue };
        let Some(function) = refine(start, ks, values, &weights) else {
            continue;
        };
        let candidate = score(function, ks, values, &weights, method);
        let valid = candidate.function.validate("fit", k_max).is_ok();
        if valid && candidate.rms_rel_error < best.rms_rel_error {
            best = candidate;
        }
    }
    Ok(best)
}

fn check_points(ks: &[f64], values: &[f64]) -> Result<()> {
    if ks.is_empty() || ks.len() != values.len() {
        return Err(ModelError::NotEnoughData(
            "a cost function needs at least one value of k".into(),
        ));
    }
    let bad = ks.iter().any(|k| !(k.is_finite() && *k >= 1.0))
        || values.iter().any(|v| !(v.is_finite() && *v >= 0.0));
    if bad {
        return Err(ModelError::Numerical(
            "cost values must be finite and non-negative, k at least 1".into(),
        ));
    }
    Ok(())
}

/// Weights 1/v, with a floor so that a zero cost does not divide by zero.
fn relative_weights(values: &[f64]) -> Vec<f64> {
    let v_max = values.iter().cloned().fold(0.0, f64::max);
    let floor = (v_max * 1e-6).max(1e-12);
    values.iter().map(|v| 1.0 / v.max(floor)).collect()
}

fn score(
    function: Rational,
    ks: &[f64],
    values: &[f64],
    weights: &[f64],
    method: &'static str,
) -> RationalFit {
    let sum_sq: f64 = ks
        .iter()
        .zip(values)
        .zip(weights)
        .map(|((k, v), w)| ((function.eval(*k) - v) * w).powi(2))
        .sum();
    let rms = (sum_sq / ks.len() as f64).sqrt();
    let rms_rel_error = if rms.is_finite() { rms } else { f64::INFINITY };
    RationalFit {
        function,
        rms_rel_error,
        method,
    }
}

/// The `A/k + B` fit (A, B ≥ 0) written as a rational function of `degree`.
fn shape_fit(ks: &[f64], values: &[f64], degree: usize) -> Rational {
    let points: Vec<(f64, f64)> = ks
        .iter()
        .zip(values)
        .map(|(k, v)| (1.0 / k, v.max(1e-300)))
        .collect();
    let (a, b) = match fit_line(&points) {
        Some(line) => (line.setup_us, line.transfer_us),
        None => (0.0, values.iter().sum::<f64>() / values.len() as f64),
    };
    let mut num = vec![0.0; degree + 1];
    let mut den = vec![0.0; degree + 1];
    num[degree] = b;
    den[degree] = 1.0;
    if degree > 0 {
        num[degree - 1] = a;
    } else {
        num[0] = b + a / ks[0];
    }
    Rational { num, den }
}

/// Start point from the linearised problem `N(k) − v·D(k) = 0` (Levy's
/// method), solved by SVD on relative weights.
fn linearized_start(
    ks: &[f64],
    values: &[f64],
    weights: &[f64],
    degree: usize,
) -> Option<Rational> {
    let n = degree;
    let columns = 2 * n + 1;
    let mut a = DMatrix::<f64>::zeros(ks.len(), columns);
    let mut b = DVector::<f64>::zeros(ks.len());
    for (row, ((&k, &v), &w)) in ks.iter().zip(values).zip(weights).enumerate() {
        let scale = w / k.powi(n as i32);
        for j in 0..=n {
            a[(row, j)] = k.powi(j as i32) * scale;
        }
        for j in 0..n {
            a[(row, n + 1 + j)] = -v * k.powi(j as i32) * scale;
        }
        b[row] = v * k.powi(n as i32) * scale;
    }
    let solution = a.svd(true, true).solve(&b, 1e-12).ok()?;
    if solution.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let num = solution.rows(0, n + 1).iter().cloned().collect();
    let mut den: Vec<f64> = solution.rows(n + 1, n).iter().map(|d| d.max(0.0)).collect();
    den.push(1.0);
    Some(Rational { num, den })
}

/// Runs Levenberg–Marquardt from `start`.
fn refine(start: Rational, ks: &[f64], values: &[f64], weights: &[f64]) -> Option<Rational> {
    let problem = RationalProblem::new(start, ks, values, weights);
    let (problem, report) = LevenbergMarquardt::new()
        .with_patience(200)
        .minimize(problem);
    if !report.objective_function.is_finite() {
        return None;
    }
    Some(problem.function())
}

/// The least-squares problem handed to the solver. Parameters are
/// `c_0 … c_n, q_0 … q_{n-1}` with `d_j = q_j²` and `d_n = 1`.
struct RationalProblem<'a> {
    ks: &'a [f64],
    values: &'a [f64],
    weights: &'a [f64],
    degree: usize,
    params: DVector<f64>,
}

impl<'a> RationalProblem<'a> {
    fn new(start: Rational, ks: &'a [f64], values: &'a [f64], weights: &'a [f64]) -> Self {
        let degree = start.degree();
        let k_mid = ks.iter().sum::<f64>() / ks.len() as f64;
        let mut params = DVector::<f64>::zeros(2 * degree + 1);
        for j in 0..=degree {
            params[j] = start.num[j];
        }
        for j in 0..degree {
            // A zero q would have a zero gradient and never move: start a
            // little above it, at a term worth 0.1% of k^n at a typical k.
            let floor = 1e-3 * k_mid.powi((degree - j) as i32);
            params[degree + 1 + j] = start.den[j].max(floor).sqrt();
        }
        RationalProblem {
            ks,
            values,
            weights,
            degree,
            params,
        }
    }

    fn function(&self) -> Rational {
        let n = self.degree;
        let num = self.params.rows(0, n + 1).iter().cloned().collect();
        let mut den: Vec<f64> = self.params.rows(n + 1, n).iter().map(|q| q * q).collect();
        den.push(1.0);
        Rational { num, den }
    }
}

impl LeastSquaresProblem<f64, Dyn, Dyn> for RationalProblem<'_> {
    type ResidualStorage = Owned<f64, Dyn>;
    type JacobianStorage = Owned<f64, Dyn, Dyn>;
    type ParameterStorage = Owned<f64, Dyn>;

    fn set_params(&mut self, params: &DVector<f64>) {
        self.params.copy_from(params);
    }

    fn params(&self) -> DVector<f64> {
        self.params.clone()
    }

    fn residuals(&self) -> Option<DVector<f64>> {
        let function = self.function();
        let residuals = self
            .ks
            .iter()
            .zip(self.values)
            .zip(self.weights)
            .map(|((k, v), w)| (function.eval(*k) - v) * w);
        Some(DVector::from_iterator(self.ks.len(), residuals))
    }

    fn jacobian(&self) -> Option<DMatrix<f64>> {
        let n = self.degree;
        let function = self.function();
        let mut jacobian = DMatrix::<f64>::zeros(self.ks.len(), 2 * n + 1);
        for (row, (&k, &w)) in self.ks.iter().zip(self.weights).enumerate() {
            let numerator = horner(&function.num, k);
            let denominator = horner(&function.den, k);
            for j in 0..=n {
                jacobian[(row, j)] = w * k.powi(j as i32) / denominator;
            }
            for j in 0..n {
                let q = self.params[n + 1 + j];
                jacobian[(row, n + 1 + j)] =
                    -w * numerator * k.powi(j as i32) * 2.0 * q / (denominator * denominator);
            }
        }
        Some(jacobian)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use levenberg_marquardt::differentiate_numerically;

    const KS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

    fn sample(function: &Rational) -> Vec<f64> {
        KS.iter().map(|&k| function.eval(k)).collect()
    }

    #[test]
    fn jacobian_matches_numeric_derivative() {
        let start = Rational {
            num: vec![3.0, 2.0, 0.5],
            den: vec![0.7, 0.3, 1.0],
        };
        let values = sample(&start);
        let weights = relative_weights(&values);
        let mut problem = RationalProblem::new(start, &KS, &values, &weights);
        let analytic = problem.jacobian().unwrap();
        let numeric = differentiate_numerically(&mut problem).unwrap();
        assert!((analytic - numeric).abs().max() < 1e-5);
    }

    #[test]
    fn recovers_quadratic_rational() {
        // Shaped like t(k) of Ransom, Lim & Mitzenmacher Table 2: steep drop, then a floor.
        let truth = Rational {
            num: vec![50.0, 3000.0, 2.0],
            den: vec![0.5, 0.02, 1.0],
        };
        let values = sample(&truth);
        let fit = fit_rational(&KS, &values, 2).unwrap();
        assert!(fit.rms_rel_error < 1e-6, "{fit:?}");
        for k in 1..=128 {
            let (got, want) = (fit.function.eval(k as f64), truth.eval(k as f64));
            assert!(
                (got - want).abs() / want < 1e-4,
                "k={k} got={got} want={want}"
            );
        }
    }

    #[test]
    fn recovers_a_over_k_plus_b_exactly() {
        let values: Vec<f64> = KS.iter().map(|k| 120.0 / k + 0.8).collect();
        for degree in [1, 2, 3] {
            let fit = fit_rational(&KS, &values, degree).unwrap();
            assert!(fit.rms_rel_error < 1e-6, "degree {degree}: {fit:?}");
        }
    }

    #[test]
    fn few_points_lower_the_degree() {
        let fit = fit_rational(&[1.0, 4.0], &[10.0, 3.0], 3).unwrap();
        assert_eq!(fit.function.degree(), 0);
        let fit = fit_rational(&[1.0, 4.0, 16.0], &[10.0, 3.0, 1.0], 3).unwrap();
        assert_eq!(fit.function.degree(), 1);
    }

    #[test]
    fn rejects_bad_points() {
        assert!(fit_rational(&[], &[], 2).is_err());
        assert!(fit_rational(&[1.0], &[f64::NAN], 2).is_err());
        assert!(fit_rational(&[0.0], &[1.0], 2).is_err());
    }

    #[test]
    fn validate_rejects_negative_values() {
        let function = Rational {
            num: vec![1.0, -1.0],
            den: vec![0.0, 1.0],
        };
        assert!(function.validate("f", 4).is_err());
    }
}
