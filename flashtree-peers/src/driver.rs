//! Runs one phase of a workload on an engine and measures it: wall time,
//! process CPU time, device I/O counts, progress bar; and the thread sweep.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::engine::{Concurrency, Engine};
use crate::job::{Job, Phase, RunControl, TaskStats};
use crate::sys::{device_io_counts, process_cpu_s};
use crate::workload::Workload;

/// Progress bar refresh period.
const PROGRESS_PERIOD: Duration = Duration::from_millis(200);

/// What a phase measured.
#[derive(Debug, Clone)]
pub struct PhaseResult {
    /// All tasks' stats merged.
    pub stats: TaskStats,
    /// Wall-clock seconds of the phase.
    pub wall_s: f64,
    /// Process CPU seconds (all threads, incl. engine background threads).
    pub cpu_s: f64,
    /// Device reads completed during the phase (None: not measurable).
    pub device_reads: Option<u64>,
    /// Device writes completed during the phase.
    pub device_writes: Option<u64>,
    /// OS threads (thread engines) used.
    pub threads: usize,
}

impl PhaseResult {
    /// Operations per second of wall time.
    pub fn ops_per_sec(&self) -> f64 {
        self.stats.ops_count as f64 / self.wall_s.max(1e-9)
    }
}

/// How to run one phase.
#[derive(Debug, Clone)]
pub struct PhaseSpec<'a> {
    /// Load, Run or Check.
    pub phase: Phase,
    /// Threads for thread-per-request engines.
    pub threads: usize,
    /// Run length (ignored by Load and Check, which run to completion).
    pub duration: Duration,
    /// Open loop at this total rate; None: closed loop.
    pub rate_ops_per_sec: Option<f64>,
    /// Seed of the run's random numbers.
    pub seed: u64,
    /// Data directory (for device I/O counts).
    pub dir: &'a Path,
    /// Show a progress bar.
    pub progress: bool,
}

/// Runs one phase of `workload` on `engine`, with a progress bar.
pub fn run_phase(
    engine: &dyn Engine,
    workload: &Workload,
    spec: &PhaseSpec<'_>,
) -> Result<PhaseResult, String> {
    let duration = match spec.phase {
        Phase::Run => spec.duration,
        Phase::Load | Phase::Check => Duration::from_secs(365 * 24 * 3600),
    };
    let control = RunControl::new(duration, spec.rate_ops_per_sec, spec.seed);
    let job = Job {
        workload,
        phase: spec.phase,
        control: &control,
    };
    let io_before = device_io_counts(spec.dir);
    let cpu_before = process_cpu_s();
    let started = Instant::now();
    let finished = AtomicBool::new(false);
    let all = std::thread::scope(|scope| {
        if spec.progress {
            scope.spawn(|| show_progress(engine.name(), workload, spec, &control, &finished));
        }
        let result = engine.run_job(&job, spec.threads);
        finished.store(true, Ordering::Relaxed);
        result
    })?;
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu_before;
    let io_after = device_io_counts(spec.dir);
    let (device_reads, device_writes) = match (io_before, io_after) {
        (Some(before), Some(after)) => (Some(after.0 - before.0), Some(after.1 - before.1)),
        _ => (None, None),
    };
    let threads = match engine.concurrency() {
        Concurrency::Threads => spec.threads,
        Concurrency::Tasks { workers, .. } => workers,
    };
    Ok(PhaseResult {
        stats: TaskStats::merge_all(&all),
        wall_s,
        cpu_s,
        device_reads,
        device_writes,
        threads,
    })
}

fn show_progress(
    engine: &str,
    workload: &Workload,
    spec: &PhaseSpec<'_>,
    control: &RunControl,
    finished: &AtomicBool,
) {
    let (length, unit) = match spec.phase {
        Phase::Load => (workload.records_count(), "records"),
        Phase::Run => (spec.duration.as_secs().max(1), "s"),
        Phase::Check => (1, "check"),
    };
    let bar = ProgressBar::new(length);
    let template = format!("{{prefix}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}}");
    bar.set_style(
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(format!("{engine} {} {:?}", workload.name(), spec.phase).to_lowercase());
    while !finished.load(Ordering::Relaxed) {
        std::thread::sleep(PROGRESS_PERIOD);
        let elapsed_s = control.start().elapsed().as_secs_f64();
        let done = control.progress_ops();
        match spec.phase {
            Phase::Load => bar.set_position(done.min(length)),
            Phase::Run => bar.set_position((elapsed_s as u64).min(length)),
            Phase::Check => {}
        }
        bar.set_message(format!("{:.0} ops/s", done as f64 / elapsed_s.max(1e-9)));
    }
    bar.finish_and_clear();
}

/// Runs the Run phase once per thread count and returns every result, in
/// order; task-based engines run once. The caller picks the best.
pub fn sweep_threads(
    engine: &dyn Engine,
    workload: &Workload,
    spec: &PhaseSpec<'_>,
    thread_counts: &[usize],
) -> Result<Vec<PhaseResult>, String> {
    let counts: Vec<usize> = match engine.concurrency() {
        Concurrency::Threads => thread_counts.to_vec(),
        Concurrency::Tasks { .. } => vec![thread_counts.first().copied().unwrap_or(1)],
    };
    let mut results = Vec::with_capacity(counts.len());
    for (round, threads) in counts.into_iter().enumerate() {
        let round_spec = PhaseSpec {
            threads,
            seed: spec.seed + round as u64,
            ..spec.clone()
        };
        results.push(run_phase(engine, workload, &round_spec)?);
    }
    Ok(results)
}

/// Index of the result with the most operations per second.
pub fn best_index(results: &[PhaseResult]) -> Option<usize> {
    (0..results.len()).max_by(|&a, &b| {
        results[a]
            .ops_per_sec()
            .total_cmp(&results[b].ops_per_sec())
    })
}
