//! The measurement grid (`grid.json`): what `measure` writes and `fit` reads.
//! The schema is documented in the crate docs; [`Grid::load`] validates every
//! field so that the fitting code can trust the values.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// The grid schema version this build writes and reads.
pub const GRID_VERSION: u32 = 1;

/// Largest page size accepted (1 GiB): a bound against nonsense files.
const PAGE_BYTES_MAX: u64 = 1 << 30;

/// Largest concurrency accepted in a grid or a query.
pub const K_MAX: u32 = 1 << 16;

/// The kind of access a grid point or a cost function describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Reads: costs t(k) (setup) and α(k) (transfer) of Ransom, Lim & Mitzenmacher.
    Read,
    /// Writes: costs s(k) (setup) and β(k) (transfer) of Ransom, Lim & Mitzenmacher.
    Write,
}

impl Op {
    /// Both operations, reads first.
    pub const ALL: [Op; 2] = [Op::Read, Op::Write];

    /// The lowercase name used in files and messages.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// Where and how a grid was measured (informational; `fit` ignores it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The file or device that was measured.
    pub path: String,
    /// Size of the measured file in bytes.
    pub file_bytes: u64,
    /// `"io_uring"` or `"threads"`.
    pub backend: String,
    /// Largest single request in bytes (runs are split into requests of at
    /// most this size).
    pub request_bytes_max: u64,
    /// Wall-clock limit of one trial in seconds.
    pub trial_time_max_s: f64,
}

/// One trial: k streams, each reading or writing sequential runs that start at
/// random offsets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridPoint {
    /// `"read"` or `"write"`.
    pub op: Op,
    /// Number of concurrent streams (requests in flight).
    pub k: u32,
    /// Pages transferred by all streams together.
    pub pages_total: u64,
    /// Random accesses (sequential runs started) by all streams together.
    pub runs_total: u64,
    /// Wall-clock time of the trial in seconds.
    pub elapsed_s: f64,
    /// The random fraction the trial aimed at (informational).
    #[serde(default)]
    pub random_fraction_target: Option<f64>,
}

impl GridPoint {
    /// Share of page accesses that were random: runs / pages, in (0, 1].
    pub fn random_fraction(&self) -> f64 {
        self.runs_total as f64 / self.pages_total as f64
    }

    /// Wall-clock microseconds per page over all streams together.
    pub fn us_per_page(&self) -> f64 {
        self.elapsed_s * 1e6 / self.pages_total as f64
    }

    /// Aggregate throughput in bytes per second.
    pub fn throughput_bytes_per_s(&self, page_bytes: u64) -> f64 {
        (self.pages_total * page_bytes) as f64 / self.elapsed_s
    }

    fn validate(&self, index: usize) -> Result<()> {
        let field = |name: &str| format!("points[{index}].{name}");
        if self.k == 0 || self.k > K_MAX {
            return Err(ModelError::invalid(
                field("k"),
                format!("must be in 1..={K_MAX}"),
            ));
        }
        if self.pages_total == 0 {
            return Err(ModelError::invalid(
                field("pages_total"),
                "must be at least 1",
            ));
        }
        if self.runs_total == 0 || self.runs_total > self.pages_total {
            return Err(ModelError::invalid(
                field("runs_total"),
                "must be in 1..=pages_total",
            ));
        }
        if !(self.elapsed_s.is_finite() && self.elapsed_s > 0.0) {
            return Err(ModelError::invalid(
                field("elapsed_s"),
                "must be a positive finite number",
            ));
        }
        Ok(())
    }
}

/// The whole grid file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// Schema version, [`GRID_VERSION`].
    pub version: u32,
    /// Page size in bytes (the unit of transfer costs).
    pub page_bytes: u64,
    /// How the grid was measured.
    #[serde(default)]
    pub device: Option<DeviceInfo>,
    /// The trials.
    pub points: Vec<GridPoint>,
}

impl Grid {
    /// Reads and validates a grid file.
    pub fn load(path: &Path) -> Result<Grid> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })?;
        let grid: Grid = crate::model::parse_json(&text, path, "grid")?;
        grid.validate()?;
        Ok(grid)
    }

    /// Writes the grid as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::model::write_json(path, self)
    }

    /// Checks every field; the fitting code relies on this.
    pub fn validate(&self) -> Result<()> {
        if self.version != GRID_VERSION {
            return Err(ModelError::Version {
                what: "grid",
                found: self.version,
                expected: GRID_VERSION,
                redo: "measure",
            });
        }
        if self.page_bytes == 0 || self.page_bytes > PAGE_BYTES_MAX {
            return Err(ModelError::invalid(
                "page_bytes",
                format!("must be in 1..={PAGE_BYTES_MAX}"),
            ));
        }
        for (index, point) in self.points.iter().enumerate() {
            point.validate(index)?;
        }
        Ok(())
    }

    /// The points of one operation.
    pub fn points_of(&self, op: Op) -> impl Iterator<Item = &GridPoint> {
        self.points.iter().filter(move |p| p.op == op)
    }
}
