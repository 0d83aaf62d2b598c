//! The fitted device model (`model.json`): cost functions of k for reads and
//! writes, prediction of throughput, and the choice of a concurrency.
//!
//! At concurrency k (requests in flight on the device), the wall-clock cost
//! per page of an access pattern whose share of random page accesses is f is
//!
//! ```text
//! reads:  y(k, f) = α(k) + f · t(k)      writes: y(k, f) = β(k) + f · s(k)
//! ```
//!
//! in µs per page over all k streams together, and the predicted throughput is
//! `page_bytes / y`. This is Ransom, Lim & Mitzenmacher equations 7 and 8 written per page
//! (for a stream of N bytes with r random accesses, f = r·B/N).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::grid::{Op, K_MAX};
use crate::rational::Rational;

/// The model schema version this build writes and reads.
pub const MODEL_VERSION: u32 = 1;

/// A candidate whose predicted throughput is within this share of the best
/// is good enough for [`choose_concurrency`].
pub const CHOOSE_TOLERANCE: f64 = 0.05;

/// Table 2 of Ransom, Lim & Mitzenmacher: the affine fit at one k.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerKFit {
    /// Concurrency.
    pub k: u32,
    /// Setup cost per random access (µs): t(k) for reads, s(k) for writes.
    pub setup_us: f64,
    /// Transfer cost per page (µs): α(k) for reads, β(k) for writes.
    pub transfer_us: f64,
    /// Coefficient of determination of the affine fit.
    pub r2: f64,
    /// Number of grid points fitted.
    pub points: u32,
}

/// The cost functions of one operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpModel {
    /// Setup cost per random access (µs) as a function of k: t(k) or s(k).
    pub setup_us: Rational,
    /// Transfer cost per page (µs) as a function of k: α(k) or β(k).
    pub transfer_us: Rational,
    /// The per-k fits the functions were fitted to.
    pub per_k: Vec<PerKFit>,
}

/// How well the model fits its grid (informational).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FitQuality {
    /// Median relative throughput error on grid points held out of the fit.
    pub heldout_median_rel_error: f64,
    /// Largest relative error on held-out points.
    pub heldout_max_rel_error: f64,
    /// Number of held-out points.
    pub heldout_points: u32,
    /// Median relative error of the final model on all grid points.
    pub insample_median_rel_error: f64,
}

/// The device model as stored in `model.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceModel {
    /// Schema version, [`MODEL_VERSION`].
    pub version: u32,
    /// Page size in bytes.
    pub page_bytes: u64,
    /// Smallest k in the grid.
    pub k_measured_min: u32,
    /// Largest k in the grid; predictions for larger k use this k (the model
    /// knows nothing beyond it, and devices saturate).
    pub k_measured_max: u32,
    /// Read costs, if reads were measured.
    pub read: Option<OpModel>,
    /// Write costs, if writes were measured.
    pub write: Option<OpModel>,
    /// Fit quality.
    #[serde(default)]
    pub quality: Option<FitQuality>,
}

/// One prediction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Prediction {
    /// The concurrency asked for.
    pub k: u32,
    /// The concurrency the cost functions were evaluated at (clamped to the
    /// measured range).
    pub k_evaluated: u32,
    /// Setup cost per random access at k (µs).
    pub setup_us: f64,
    /// Transfer cost per page at k (µs).
    pub transfer_us: f64,
    /// Wall-clock µs per page over all streams.
    pub us_per_page: f64,
    /// Predicted throughput in bytes per second.
    pub throughput_bytes_per_s: f64,
}

impl DeviceModel {
    /// Reads and validates a model file. Any defect is an error, never a panic.
    pub fn load(path: &Path) -> Result<DeviceModel> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates a model from JSON text.
    pub fn from_json(text: &str) -> Result<DeviceModel> {
        Self::parse(text, Path::new("<model>"))
    }

    fn parse(text: &str, path: &Path) -> Result<DeviceModel> {
        let value: serde_json::Value = parse_json(text, path, "model")?;
        // Check the version before the fields, so an old file gets the
        // version message rather than a missing-field one.
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(MODEL_VERSION) => {}
            Some(v) => return Err(version_error(u32::try_from(v).unwrap_or(u32::MAX))),
            None => {
                return Err(ModelError::invalid(
                    "version",
                    "missing or not an unsigned integer",
                ))
            }
        }
        let model: DeviceModel = serde_path_to_error::deserialize(value)
            .map_err(|error| json_error(error, path, "model"))?;
        model.validate()?;
        Ok(model)
    }

    /// Writes the model as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_json(path, self)
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<()> {
        if self.version != MODEL_VERSION {
            return Err(version_error(self.version));
        }
        if self.page_bytes == 0 || self.page_bytes > 1 << 30 {
            return Err(ModelError::invalid("page_bytes", "must be in 1..=2^30"));
        }
        let k_ok = 1 <= self.k_measured_min
            && self.k_measured_min <= self.k_measured_max
            && self.k_measured_max <= K_MAX;
        if !k_ok {
            return Err(ModelError::invalid(
                "k_measured_min/k_measured_max",
                format!("need 1 <= min <= max <= {K_MAX}"),
            ));
        }
        if self.read.is_none() && self.write.is_none() {
            return Err(ModelError::invalid(
                "read/write",
                "the model has neither read nor write costs",
            ));
        }
        for op in Op::ALL {
            if let Some(costs) = self.op(op) {
                validate_op(costs, op, self.k_measured_max)?;
            }
        }
        Ok(())
    }

    /// The cost functions of `op`, if present.
    pub fn op(&self, op: Op) -> Option<&OpModel> {
        match op {
            Op::Read => self.read.as_ref(),
            Op::Write => self.write.as_ref(),
        }
    }

    /// Predicts throughput for `op` at concurrency `k` and random fraction
    /// `random_fraction` (share of page accesses that start a random run, 0 for
    /// purely sequential, 1 for one page per random access).
    pub fn predict(&self, op: Op, k: u32, random_fraction: f64) -> Result<Prediction> {
        let costs = self.op(op).ok_or(ModelError::MissingOp(op.name()))?;
        if k == 0 || k > K_MAX {
            return Err(ModelError::invalid("k", format!("must be in 1..={K_MAX}")));
        }
        if !(0.0..=1.0).contains(&random_fraction) {
            return Err(ModelError::invalid(
                "random fraction",
                "must be a number in [0, 1]",
            ));
        }
        let k_evaluated = k.clamp(self.k_measured_min, self.k_measured_max);
        let setup_us = costs.setup_us.eval(f64::from(k_evaluated));
        let transfer_us = costs.transfer_us.eval(f64::from(k_evaluated));
        let us_per_page = transfer_us + random_fraction * setup_us;
        if !(us_per_page.is_finite() && us_per_page > 0.0) {
            return Err(ModelError::Numerical(format!(
                "the model predicts {us_per_page} µs per page at k = {k_evaluated}"
            )));
        }
        Ok(Prediction {
            k,
            k_evaluated,
            setup_us,
            transfer_us,
            us_per_page,
            throughput_bytes_per_s: self.page_bytes as f64 * 1e6 / us_per_page,
        })
    }
}

fn validate_op(costs: &OpModel, op: Op, k_max: u32) -> Result<()> {
    let name = op.name();
    costs
        .setup_us
        .validate(&format!("{name}.setup_us"), k_max)?;
    costs
        .transfer_us
        .validate(&format!("{name}.transfer_us"), k_max)?;
    for (index, row) in costs.per_k.iter().enumerate() {
        let ok = row.setup_us.is_finite()
            && row.setup_us >= 0.0
            && row.transfer_us.is_finite()
            && row.transfer_us >= 0.0
            && row.r2.is_finite()
            && row.k >= 1;
        if !ok {
            return Err(ModelError::invalid(
                format!("{name}.per_k[{index}]"),
                "k must be >= 1 and costs finite and non-negative",
            ));
        }
    }
    Ok(())
}

fn json_error(
    error: serde_path_to_error::Error<serde_json::Error>,
    path: &Path,
    what: &'static str,
) -> ModelError {
    ModelError::Json {
        path: path.to_owned(),
        what,
        field: error.path().to_string(),
        source: error.into_inner(),
    }
}

/// Parses JSON text into `T`; errors name the file and the field.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    what: &'static str,
) -> Result<T> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|error| json_error(error, path, what))?;
    deserializer.end().map_err(|source| ModelError::Json {
        path: path.to_owned(),
        what,
        field: ".".into(),
        source,
    })?;
    Ok(value)
}

fn version_error(found: u32) -> ModelError {
    ModelError::Version {
        what: "model",
        found,
        expected: MODEL_VERSION,
        redo: "fit",
    }
}

/// Chooses the smallest candidate concurrency whose predicted throughput is
/// within 5% ([`CHOOSE_TOLERANCE`]) of the best candidate's.
///
/// `k` counts requests in flight on the device (for the engine: workers ×
/// tasks per worker). Returns the chosen k and a one-line reason for the
/// user. Fails if `candidates` is empty, the model lacks `op`, or an input is
/// out of range.
pub fn choose_concurrency(
    model: &DeviceModel,
    op: Op,
    random_fraction: f64,
    candidates: &[u32],
) -> Result<(u32, String)> {
    if candidates.is_empty() {
        return Err(ModelError::invalid(
            "candidates",
            "need at least one concurrency to choose from",
        ));
    }
    let mut predictions = candidates
        .iter()
        .map(|&k| model.predict(op, k, random_fraction))
        .collect::<Result<Vec<_>>>()?;
    predictions.sort_by_key(|p| p.k);
    let best = predictions
        .iter()
        .max_by(|a, b| {
            a.throughput_bytes_per_s
                .total_cmp(&b.throughput_bytes_per_s)
        })
        .copied()
        .ok_or_else(|| ModelError::invalid("candidates", "empty"))?;
    let threshold = best.throughput_bytes_per_s * (1.0 - CHOOSE_TOLERANCE);
    let chosen = predictions
        .iter()
        .find(|p| p.throughput_bytes_per_s >= threshold)
        .copied()
        .unwrap_or(best);
    let smaller = predictions.iter().rev().find(|p| p.k < chosen.k);
    let reason = format!(
        "k={} predicts {:.0} MB/s {} at random fraction {:.4}; best candidate k={} predicts {:.0} MB/s; {}; candidates {:?}{}",
        chosen.k,
        chosen.throughput_bytes_per_s / 1e6,
        op.name(),
        random_fraction,
        best.k,
        best.throughput_bytes_per_s / 1e6,
        match smaller {
            Some(p) => format!(
                "next smaller k={} predicts {:.0} MB/s, more than {:.0}% below the best",
                p.k,
                p.throughput_bytes_per_s / 1e6,
                CHOOSE_TOLERANCE * 100.0
            ),
            None => "it is the smallest candidate".to_string(),
        },
        candidates,
        clamp_note(model, &predictions),
    );
    Ok((chosen.k, reason))
}

fn clamp_note(model: &DeviceModel, predictions: &[Prediction]) -> String {
    if predictions.iter().any(|p| p.k > model.k_measured_max) {
        format!(
            "; k above the measured {} is predicted as k={}",
            model.k_measured_max, model.k_measured_max
        )
    } else {
        String::new()
    }
}

/// Writes `value` as pretty JSON to `path`.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|source| ModelError::Json {
        path: path.to_owned(),
        what: "output",
        field: ".".into(),
        source,
    })?;
    std::fs::write(path, text + "\n").map_err(|source| ModelError::Io {
        path: path.to_owned(),
        source,
    })
}
