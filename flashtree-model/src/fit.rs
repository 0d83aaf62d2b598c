//! `fit`: from a measured grid to a [`DeviceModel`].
//!
//! 1. For each op and each k, the affine fit `y = transfer + setup · f`
//!    ([`crate::linear`]) gives Table 2 of Ransom, Lim & Mitzenmacher.
//! 2. Across k, rational functions ([`crate::rational`]) are fitted to the
//!    per-k setup and transfer costs: degree 2 for t, α and s (equation 5),
//!    degree 3 for β (equation 6).
//! 3. Held-out error: the same two steps on every other random fraction of
//!    each k (sorted by f), predicting the points left out. A second check
//!    leaves out each interior k in turn and predicts its points from the
//!    cost functions fitted on the other k.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{ModelError, Result};
use crate::grid::{Grid, GridPoint, Op};
use crate::linear::fit_line;
use crate::model::{DeviceModel, FitQuality, OpModel, PerKFit, MODEL_VERSION};
use crate::rational::fit_rational;

/// Degree of t(k), α(k) and s(k) (Ransom, Lim & Mitzenmacher equation 5).
pub const DEGREE_EQ5: usize = 2;
/// Degree of β(k) (Ransom, Lim & Mitzenmacher equation 6).
pub const DEGREE_EQ6: usize = 3;

/// Quality of one rational fit across k.
#[derive(Clone, Debug, Serialize)]
pub struct CurveQuality {
    /// Degree actually fitted (lower than asked when there are few k).
    pub degree: usize,
    /// RMS of relative residuals at the per-k values.
    pub rms_rel_error: f64,
    /// Start point that won.
    pub method: &'static str,
}

/// Fit details of one operation.
#[derive(Clone, Debug, Serialize)]
pub struct OpSummary {
    /// `"read"` or `"write"`.
    pub op: &'static str,
    /// Table 2.
    pub per_k: Vec<PerKFit>,
    /// The setup-cost function across k.
    pub setup_fit: CurveQuality,
    /// The transfer-cost function across k.
    pub transfer_fit: CurveQuality,
    /// Median relative error on this op's held-out points.
    pub heldout_median_rel_error: f64,
}

/// Everything `fit` reports; `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct FitSummary {
    /// Median relative throughput error on held-out points (every other r).
    pub heldout_median_rel_error: f64,
    /// Largest relative error on held-out points.
    pub heldout_max_rel_error: f64,
    /// Number of held-out points.
    pub heldout_points: u32,
    /// Median relative error when each interior k is left out in turn.
    pub heldout_k_median_rel_error: Option<f64>,
    /// Median relative error of the final model on all its grid points.
    pub insample_median_rel_error: f64,
    /// Per-op details.
    pub ops: Vec<OpSummary>,
}

/// A fitted model with its report.
#[derive(Clone, Debug)]
pub struct FitOutcome {
    /// The model to save.
    pub model: DeviceModel,
    /// The report.
    pub summary: FitSummary,
}

/// Fits the model to a validated grid.
pub fn fit_grid(grid: &Grid) -> Result<FitOutcome> {
    let (k_min, k_max) = k_range(grid)?;
    let mut model = DeviceModel {
        version: MODEL_VERSION,
        page_bytes: grid.page_bytes,
        k_measured_min: k_min,
        k_measured_max: k_max,
        read: None,
        write: None,
        quality: None,
    };
    let mut ops = Vec::new();
    let mut heldout_errors = Vec::new();
    let mut heldout_k_errors = Vec::new();
    for op in Op::ALL {
        let points: Vec<&GridPoint> = grid.points_of(op).collect();
        if points.is_empty() {
            continue;
        }
        let (costs, setup_fit, transfer_fit) = fit_op(&points, op)?;
        let op_heldout = heldout_errors_alternating(&points, op)?;
        heldout_k_errors.extend(heldout_errors_by_k(&points, op)?);
        ops.push(OpSummary {
            op: op.name(),
            per_k: costs.per_k.clone(),
            setup_fit,
            transfer_fit,
            heldout_median_rel_error: median(&op_heldout).unwrap_or(f64::NAN),
        });
        heldout_errors.extend(op_heldout);
        match op {
            Op::Read => model.read = Some(costs),
            Op::Write => model.write = Some(costs),
        }
    }
    let insample = insample_errors(&model, grid)?;
    let summary = FitSummary {
        heldout_median_rel_error: median(&heldout_errors).ok_or_else(|| {
            ModelError::NotEnoughData(
                "no point could be held out: need at least 4 random fractions per k".into(),
            )
        })?,
        heldout_max_rel_error: heldout_errors.iter().cloned().fold(0.0, f64::max),
        heldout_points: heldout_errors.len() as u32,
        heldout_k_median_rel_error: median(&heldout_k_errors),
        insample_median_rel_error: median(&insample).unwrap_or(f64::NAN),
        ops,
    };
    model.quality = Some(FitQuality {
        heldout_median_rel_error: summary.heldout_median_rel_error,
        heldout_max_rel_error: summary.heldout_max_rel_error,
        heldout_points: summary.heldout_points,
        insample_median_rel_error: summary.insample_median_rel_error,
    });
    model.validate()?;
    Ok(FitOutcome { model, summary })
}

fn k_range(grid: &Grid) -> Result<(u32, u32)> {
    let ks = grid.points.iter().map(|p| p.k);
    match (ks.clone().min(), ks.max()) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(ModelError::NotEnoughData("the grid has no points".into())),
    }
}

/// The degree of the transfer function: β (writes) gets equation 6.
fn transfer_degree(op: Op) -> usize {
    match op {
        Op::Read => DEGREE_EQ5,
        Op::Write => DEGREE_EQ6,
    }
}

/// Steps 1 and 2 for one op.
fn fit_op(points: &[&GridPoint], op: Op) -> Result<(OpModel, CurveQuality, CurveQuality)> {
    let per_k = per_k_fits(points, op)?;
    let ks: Vec<f64> = per_k.iter().map(|row| f64::from(row.k)).collect();
    let setups: Vec<f64> = per_k.iter().map(|row| row.setup_us).collect();
    let transfers: Vec<f64> = per_k.iter().map(|row| row.transfer_us).collect();
    let setup = fit_rational(&ks, &setups, DEGREE_EQ5)?;
    let transfer = fit_rational(&ks, &transfers, transfer_degree(op))?;
    let quality = |fit: &crate::rational::RationalFit| CurveQuality {
        degree: fit.function.degree(),
        rms_rel_error: fit.rms_rel_error,
        method: fit.method,
    };
    let (setup_quality, transfer_quality) = (quality(&setup), quality(&transfer));
    let costs = OpModel {
        setup_us: setup.function,
        transfer_us: transfer.function,
        per_k,
    };
    Ok((costs, setup_quality, transfer_quality))
}

/// Groups points by k.
fn by_k<'a>(points: &[&'a GridPoint]) -> BTreeMap<u32, Vec<&'a GridPoint>> {
    let mut groups: BTreeMap<u32, Vec<&GridPoint>> = BTreeMap::new();
    for point in points {
        groups.entry(point.k).or_default().push(point);
    }
    for group in groups.values_mut() {
        group.sort_by(|a, b| a.random_fraction().total_cmp(&b.random_fraction()));
    }
    groups
}

/// Step 1: Table 2. A k with fewer than two distinct fractions is skipped.
fn per_k_fits(points: &[&GridPoint], op: Op) -> Result<Vec<PerKFit>> {
    let mut rows = Vec::new();
    for (k, group) in by_k(points) {
        let xy: Vec<(f64, f64)> = group
            .iter()
            .map(|p| (p.random_fraction(), p.us_per_page()))
            .collect();
        if let Some(line) = fit_line(&xy) {
            rows.push(PerKFit {
                k,
                setup_us: line.setup_us,
                transfer_us: line.transfer_us,
                r2: line.r2,
                points: group.len() as u32,
            });
        }
    }
    if rows.is_empty() {
        return Err(ModelError::NotEnoughData(format!(
            "{}: no k has two distinct random fractions",
            op.name()
        )));
    }
    Ok(rows)
}

fn relative_error(costs: &OpModel, point: &GridPoint, k_max: u32) -> f64 {
    let k = f64::from(point.k.min(k_max));
    let predicted = costs.transfer_us.eval(k) + point.random_fraction() * costs.setup_us.eval(k);
    let measured = point.us_per_page();
    // Relative error of throughput = |1/pred − 1/meas| / (1/meas).
    (measured / predicted - 1.0).abs()
}

/// Held-out check 1: fit on even-indexed fractions of each k, predict odd.
fn heldout_errors_alternating(points: &[&GridPoint], op: Op) -> Result<Vec<f64>> {
    let mut train = Vec::new();
    let mut test = Vec::new();
    for group in by_k(points).into_values() {
        for (index, point) in group.into_iter().enumerate() {
            if index % 2 == 0 {
                train.push(point);
            } else {
                test.push(point);
            }
        }
    }
    let Ok((costs, _, _)) = fit_op(&train, op) else {
        return Ok(Vec::new());
    };
    let k_max = costs.per_k.iter().map(|row| row.k).max().unwrap_or(1);
    Ok(test
        .iter()
        .map(|p| relative_error(&costs, p, k_max))
        .collect())
}

/// Held-out check 2: leave each interior k out, predict its points.
fn heldout_errors_by_k(points: &[&GridPoint], op: Op) -> Result<Vec<f64>> {
    let groups = by_k(points);
    let ks: Vec<u32> = groups.keys().copied().collect();
    let mut errors = Vec::new();
    if ks.len() < 4 {
        return Ok(errors);
    }
    for &left_out in &ks[1..ks.len() - 1] {
        let train: Vec<&GridPoint> = points.iter().copied().filter(|p| p.k != left_out).collect();
        let Ok((costs, _, _)) = fit_op(&train, op) else {
            continue;
        };
        let k_max = ks[ks.len() - 1];
        errors.extend(
            groups[&left_out]
                .iter()
                .map(|p| relative_error(&costs, p, k_max)),
        );
    }
    Ok(errors)
}

fn insample_errors(model: &DeviceModel, grid: &Grid) -> Result<Vec<f64>> {
    let mut errors = Vec::new();
    for point in &grid.points {
        if let Some(costs) = model.op(point.op) {
            errors.push(relative_error(costs, point, model.k_measured_max));
        }
    }
    Ok(errors)
}

/// Median of finite values; `None` when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// Renders Table 2 of Ransom, Lim & Mitzenmacher for the terminal.
pub fn format_table(summary: &FitSummary) -> String {
    let mut out = String::new();
    for op in &summary.ops {
        let (setup, transfer) = match op.op {
            "read" => ("t(k)", "alpha(k)"),
            _ => ("s(k)", "beta(k)"),
        };
        out += &format!(
            "{} costs per k (µs, wall clock over all k streams)\n{:>6} {:>12} {:>12} {:>7} {:>6}\n",
            op.op, "k", setup, transfer, "R^2", "points"
        );
        for row in &op.per_k {
            out += &format!(
                "{:>6} {:>12.4e} {:>12.4e} {:>7.3} {:>6}\n",
                row.k, row.setup_us, row.transfer_us, row.r2, row.points
            );
        }
        out += &format!(
            "  {setup}: degree {} rms rel err {:.3} ({}); {transfer}: degree {} rms rel err {:.3} ({})\n  held-out median rel error {:.3}\n\n",
            op.setup_fit.degree,
            op.setup_fit.rms_rel_error,
            op.setup_fit.method,
            op.transfer_fit.degree,
            op.transfer_fit.rms_rel_error,
            op.transfer_fit.method,
            op.heldout_median_rel_error,
        );
    }
    out += &format!(
        "held-out (every other r per k): median rel error {:.3}, max {:.3}, {} points\n",
        summary.heldout_median_rel_error, summary.heldout_max_rel_error, summary.heldout_points
    );
    if let Some(error) = summary.heldout_k_median_rel_error {
        out += &format!("held-out (leave one k out): median rel error {error:.3}\n");
    }
    out += &format!(
        "in-sample: median rel error {:.3}\n",
        summary.insample_median_rel_error
    );
    out
}
