//! `measure`: the k × r grid of Ransom, Lim & Mitzenmacher §3.3 on one file.
//!
//! For each op (reads, then writes), each concurrency k and each random
//! fraction f, one trial runs k streams for a fixed wall-clock time. Stream i
//! owns the i-th k-th of the file and moves through it in sequential runs of
//! `1/f` pages, each starting at a uniformly random page of its region
//! ([`stream`]). A run is split into requests of at most `request_bytes_max`
//! that never cross a chunk boundary of the I/O layer. The trial records
//! pages moved, runs started and elapsed time ([`crate::grid::GridPoint`]).
//!
//! The streams are k requests in flight on one io_uring channel of the
//! engine's I/O layer driven by one thread (default), or k OS threads each
//! doing blocking I/O on its own synchronous channel (`--threads`).
//! Trials are bounded in time rather than in bytes (Ransom, Lim & Mitzenmacher moves 1 GB per
//! thread, which at k = 1 and f = 1 would take minutes here); the model only
//! needs the ratios.

mod fill;
mod runner;
mod stream;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flashtree::io::{Storage, StorageConfig, PAGE_SIZE};
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{ModelError, Result};
use crate::grid::{DeviceInfo, Grid, GridPoint, Op, GRID_VERSION};

pub use runner::{Backend, TrialSpec};

/// Longest trial accepted (bounds the whole run).
const TRIAL_TIME_MAX_S: f64 = 600.0;

/// Arguments of `measure`.
#[derive(clap::Args, Debug)]
pub struct MeasureArgs {
    /// File to measure on: created and written in full if missing or smaller
    /// than --size (reads of never-written extents would not reach the disk).
    #[arg(long)]
    pub path: PathBuf,
    /// File size, e.g. 16GiB, 4GiB, 512MiB.
    #[arg(long, default_value = "16GiB", value_parser = parse_bytes)]
    pub size: u64,
    /// Where to write the grid.
    #[arg(long, default_value = "grid.json")]
    pub out: PathBuf,
    /// Reduced grid: 8 k × 7 fractions × 2 ops × 3 passes, 0.3 s per trial (~2 min).
    #[arg(long)]
    pub quick: bool,
    /// Run each stream on its own OS thread with blocking I/O instead of k
    /// requests in flight on one io_uring channel.
    #[arg(long)]
    pub threads: bool,
    /// Concurrencies to measure (comma-separated); default 1,2,4,…,128.
    #[arg(long, value_delimiter = ',')]
    pub ks: Option<Vec<u32>>,
    /// Number of random fractions, log-spaced from 0.001 to 1 (default 10, quick 7).
    #[arg(long)]
    pub fractions: Option<usize>,
    /// Seconds per trial (default 1, quick 0.3).
    #[arg(long)]
    pub trial_time_s: Option<f64>,
    /// Trials per cell, in separate passes over the grid; the median is kept
    /// (default 3).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Operations to measure (default both).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub ops: Option<Vec<Op>>,
    /// Largest request in KiB: sequential runs are split into requests of at
    /// most this size.
    #[arg(long, default_value_t = 256)]
    pub request_kib: u32,
    /// Write the whole file again before measuring, even if it exists.
    #[arg(long)]
    pub refill: bool,
}

/// The resolved grid plan.
#[derive(Clone, Debug)]
struct Plan {
    ops: Vec<Op>,
    ks: Vec<u32>,
    fractions: Vec<f64>,
    trial_time_s: f64,
    request_bytes_max: u32,
    repeat: usize,
}

impl Plan {
    fn from_args(args: &MeasureArgs) -> Result<Plan> {
        let ks = args
            .ks
            .clone()
            .unwrap_or_else(|| vec![1, 2, 4, 8, 16, 32, 64, 128]);
        let fraction_count = args.fractions.unwrap_or(if args.quick { 7 } else { 10 });
        let trial_time_s = args
            .trial_time_s
            .unwrap_or(if args.quick { 0.3 } else { 1.0 });
        let plan = Plan {
            ops: args.ops.clone().unwrap_or_else(|| Op::ALL.to_vec()),
            ks,
            fractions: log_spaced(0.001, 1.0, fraction_count),
            trial_time_s,
            request_bytes_max: args.request_kib.saturating_mul(1024),
            repeat: args.repeat,
        };
        plan.validate()?;
        Ok(plan)
    }

    fn validate(&self) -> Result<()> {
        if self.ks.is_empty() || self.ks.iter().any(|&k| k == 0 || k > 4096) {
            return Err(ModelError::invalid(
                "--ks",
                "need at least one k, each in 1..=4096",
            ));
        }
        if self.fractions.len() < 2 || self.fractions.len() > 100 {
            return Err(ModelError::invalid("--fractions", "must be in 2..=100"));
        }
        if !(self.trial_time_s > 0.0 && self.trial_time_s <= TRIAL_TIME_MAX_S) {
            return Err(ModelError::invalid(
                "--trial-time-s",
                format!("must be in (0, {TRIAL_TIME_MAX_S}]"),
            ));
        }
        let request_ok = (self.request_bytes_max as usize).is_multiple_of(PAGE_SIZE)
            && (PAGE_SIZE as u32..=16 << 20).contains(&self.request_bytes_max);
        if !request_ok {
            return Err(ModelError::invalid(
                "--request-kib",
                "must be a multiple of 4 in 4..=16384",
            ));
        }
        if !(1..=100).contains(&self.repeat) {
            return Err(ModelError::invalid("--repeat", "must be in 1..=100"));
        }
        if self.ops.is_empty() {
            return Err(ModelError::invalid("--ops", "need read, write or both"));
        }
        Ok(())
    }

    /// Cells of the grid (one point each in the output).
    fn trial_count(&self) -> usize {
        self.ops.len() * self.ks.len() * self.fractions.len()
    }
}

/// `count` values from `low` to `high`, evenly spaced in log scale.
fn log_spaced(low: f64, high: f64, count: usize) -> Vec<f64> {
    let (a, b) = (low.ln(), high.ln());
    let steps = count.saturating_sub(1).max(1) as f64;
    (0..count)
        .map(|i| (a + (b - a) * i as f64 / steps).exp())
        .collect()
}

/// Parses a byte size: a number with an optional K/M/G/T suffix (KiB, MB,
/// … all taken as powers of 1024).
pub fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 16GiB"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "unknown unit in '{text}' (use KiB, MiB, GiB or TiB)"
            ))
        }
    };
    value
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Runs `measure`.
pub fn run(args: &MeasureArgs) -> Result<()> {
    let plan = Plan::from_args(args)?;
    let storage = open_storage(args, &plan)?;
    let backend = if args.threads {
        Backend::Threads
    } else {
        Backend::IoUring
    };
    let trials = plan.trial_count() * plan.repeat;
    let estimate_s = trials as f64 * plan.trial_time_s;
    eprintln!(
        "measuring {trials} trials ({} ops × {} k × {} fractions × {} passes, {} s each, ~{:.0} s) on {} with {}",
        plan.ops.len(),
        plan.ks.len(),
        plan.fractions.len(),
        plan.repeat,
        plan.trial_time_s,
        estimate_s,
        args.path.display(),
        backend.name(),
    );
    let points = run_grid(&storage, &plan, backend)?;
    let grid = Grid {
        version: GRID_VERSION,
        page_bytes: PAGE_SIZE as u64,
        device: Some(DeviceInfo {
            path: args.path.display().to_string(),
            file_bytes: storage.capacity_bytes(),
            backend: backend.name().into(),
            request_bytes_max: u64::from(plan.request_bytes_max),
            trial_time_max_s: plan.trial_time_s,
        }),
        points,
    };
    grid.validate()?;
    grid.save(&args.out)?;
    println!(
        "grid of {} points written to {}",
        grid.points.len(),
        args.out.display()
    );
    Ok(())
}

/// Opens the file through the I/O layer, writing it in full when it is new,
/// too small, or `--refill` is given.
fn open_storage(args: &MeasureArgs, plan: &Plan) -> Result<Arc<Storage>> {
    let existing_bytes = match std::fs::metadata(&args.path) {
        Ok(meta) if !meta.is_file() => {
            return Err(ModelError::Measure(format!(
            "{} is not a regular file; measure writes to it, so it refuses devices and directories",
            args.path.display()
        )))
        }
        Ok(meta) => meta.len(),
        Err(_) => 0,
    };
    let minimum_bytes = u64::from(plan.request_bytes_max) * 64;
    if args.size < minimum_bytes {
        return Err(ModelError::invalid(
            "--size",
            format!("must be at least {minimum_bytes} bytes"),
        ));
    }
    let mut config = StorageConfig::new([args.path.clone()]);
    config.chunk_bytes = u64::from(plan.request_bytes_max);
    config.min_capacity_bytes = args.size;
    let storage = Storage::open(&config).map_err(measure_error)?;
    let storage = Arc::new(storage);
    if args.refill || existing_bytes < args.size {
        fill::fill(&storage, plan.request_bytes_max)?;
    }
    Ok(storage)
}

/// The cells of the grid in measuring order.
fn cells(plan: &Plan) -> Vec<(Op, u32, f64)> {
    let mut cells = Vec::with_capacity(plan.trial_count());
    for &op in &plan.ops {
        for &k in &plan.ks {
            cells.extend(plan.fractions.iter().map(|&fraction| (op, k, fraction)));
        }
    }
    cells
}

/// Measures every cell `plan.repeat` times, in whole passes over the grid so
/// that a passing disturbance (another process's I/O) hits different cells
/// in each pass, and keeps each cell's median trial.
fn run_grid(storage: &Arc<Storage>, plan: &Plan, backend: Backend) -> Result<Vec<GridPoint>> {
    let cells = cells(plan);
    let progress = ProgressBar::new((cells.len() * plan.repeat) as u64);
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} trials, eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    progress.enable_steady_tick(Duration::from_millis(200));
    let mut trials: Vec<Vec<GridPoint>> = vec![Vec::with_capacity(plan.repeat); cells.len()];
    for pass in 0..plan.repeat {
        for (index, &(op, k, fraction)) in cells.iter().enumerate() {
            progress.set_message(format!(
                "pass {} {} k={k} f={fraction:.4}",
                pass + 1,
                op.name()
            ));
            let spec = TrialSpec {
                op,
                k,
                random_fraction: fraction,
                trial_time: Duration::from_secs_f64(plan.trial_time_s),
                request_bytes_max: plan.request_bytes_max,
                seed: (pass * cells.len() + index) as u64,
            };
            trials[index].push(runner::run_trial(storage, &spec, backend)?);
            progress.inc(1);
        }
    }
    progress.finish_with_message("done");
    Ok(trials.into_iter().filter_map(median_trial).collect())
}

/// The trial with the median cost per page.
fn median_trial(mut trials: Vec<GridPoint>) -> Option<GridPoint> {
    trials.sort_by(|a, b| a.us_per_page().total_cmp(&b.us_per_page()));
    let middle = trials.len() / 2;
    trials.into_iter().nth(middle)
}

pub(crate) fn measure_error(error: flashtree::Error) -> ModelError {
    ModelError::Measure(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("16GiB"), Ok(16 << 30));
        assert_eq!(parse_bytes("4G"), Ok(4 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("4PB").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
    }

    #[test]
    fn log_spacing_hits_both_ends() {
        let values = log_spaced(0.001, 1.0, 7);
        assert_eq!(values.len(), 7);
        assert!((values[0] - 0.001).abs() < 1e-12 && (values[6] - 1.0).abs() < 1e-12);
        assert!((values[3] - 10f64.powf(-1.5)).abs() < 1e-9);
    }
}
