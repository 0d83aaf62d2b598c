//! The per-k affine fit of Ransom, Lim & Mitzenmacher Table 2: at one concurrency k, the
//! wall-clock cost per page is `y = transfer + setup · f`, with f the share of
//! page accesses that are random. Least squares on relative residuals (each
//! point weighs by 1/y), so that cheap sequential points count as much as
//! expensive random ones; both costs are kept non-negative.

/// Result of one affine fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineFit {
    /// Intercept: cost per page with no random access (µs).
    pub transfer_us: f64,
    /// Slope: extra cost per random access (µs).
    pub setup_us: f64,
    /// Coefficient of determination of y on f (unweighted, as in Table 2).
    pub r2: f64,
}

/// Fits `y = transfer + setup · f` to the points `(f, y)`.
///
/// Returns `None` when there are fewer than two distinct f, or when a value is
/// not finite or y is not positive.
pub fn fit_line(points: &[(f64, f64)]) -> Option<LineFit> {
    let valid = points
        .iter()
        .all(|&(f, y)| f.is_finite() && y.is_finite() && y > 0.0 && f >= 0.0);
    if !valid || distinct_count(points) < 2 {
        return None;
    }
    let (transfer_us, setup_us) = match weighted_line(points) {
        (a, b) if a >= 0.0 && b >= 0.0 => (a, b),
        (a, _) if a >= 0.0 => (weighted_constant(points), 0.0),
        _ => (0.0, weighted_slope(points)),
    };
    let r2 = r_squared(points, transfer_us, setup_us);
    Some(LineFit {
        transfer_us,
        setup_us,
        r2,
    })
}

fn distinct_count(points: &[(f64, f64)]) -> usize {
    let mut fs: Vec<f64> = points.iter().map(|p| p.0).collect();
    fs.sort_by(f64::total_cmp);
    fs.dedup_by(|a, b| (*a - *b).abs() <= 1e-12 * b.abs().max(1e-300));
    fs.len()
}

/// Unconstrained weighted least squares, weights 1/y².
fn weighted_line(points: &[(f64, f64)]) -> (f64, f64) {
    let (mut sw, mut swf, mut swff, mut swy, mut swfy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(f, y) in points {
        let w = 1.0 / (y * y);
        sw += w;
        swf += w * f;
        swff += w * f * f;
        swy += w * y;
        swfy += w * f * y;
    }
    let det = sw * swff - swf * swf;
    if det.abs() <= f64::EPSILON * sw * swff {
        return (weighted_constant(points), 0.0);
    }
    let slope = (sw * swfy - swf * swy) / det;
    let intercept = (swy - slope * swf) / sw;
    (intercept, slope)
}

/// Best constant (slope fixed at 0).
fn weighted_constant(points: &[(f64, f64)]) -> f64 {
    let sw: f64 = points.iter().map(|&(_, y)| 1.0 / (y * y)).sum();
    let swy: f64 = points.iter().map(|&(_, y)| 1.0 / y).sum();
    swy / sw
}

/// Best slope through the origin (intercept fixed at 0).
fn weighted_slope(points: &[(f64, f64)]) -> f64 {
    let swff: f64 = points.iter().map(|&(f, y)| f * f / (y * y)).sum();
    let swfy: f64 = points.iter().map(|&(f, y)| f / y).sum();
    if swff > 0.0 {
        (swfy / swff).max(0.0)
    } else {
        0.0
    }
}

fn r_squared(points: &[(f64, f64)], intercept: f64, slope: f64) -> f64 {
    let n = points.len() as f64;
    let mean = points.iter().map(|p| p.1).sum::<f64>() / n;
    let ss_tot: f64 = points.iter().map(|&(_, y)| (y - mean).powi(2)).sum();
    let ss_res: f64 = points
        .iter()
        .map(|&(f, y)| (y - intercept - slope * f).powi(2))
        .sum();
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_exact_line() {
        let points: Vec<(f64, f64)> = [0.001, 0.01, 0.1, 1.0]
            .iter()
            .map(|&f| (f, 2.0 + 30.0 * f))
            .collect();
        let fit = fit_line(&points).unwrap();
        assert!((fit.transfer_us - 2.0).abs() < 1e-9);
        assert!((fit.setup_us - 30.0).abs() < 1e-9);
        assert!((fit.r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn negative_slope_is_clamped() {
        let points = [(0.1, 5.0), (0.5, 4.0), (1.0, 3.0)];
        let fit = fit_line(&points).unwrap();
        assert_eq!(fit.setup_us, 0.0);
        assert!(fit.transfer_us > 3.0 && fit.transfer_us < 5.0);
    }

    #[test]
    fn rejects_degenerate_input() {
        assert!(fit_line(&[(0.5, 1.0), (0.5, 2.0)]).is_none());
        assert!(fit_line(&[(0.1, f64::NAN), (0.5, 2.0)]).is_none());
        assert!(fit_line(&[(0.1, -1.0), (0.5, 2.0)]).is_none());
        assert!(fit_line(&[]).is_none());
    }
}
