//! Runs one phase of a workload on an engine and measures it: wall time,
//! process CPU time (user and system), device I/O counts, progress bar,
//! optionally a perf profile; and the thread sweep.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::devio::{BlockDevice, IoCounters};
use crate::engine::{Concurrency, Engine, EngineCounters};
use crate::job::{Job, Phase, RunControl, TaskStats};
use crate::sys::{
    peak_rss_bytes, perf_report, process_cpu_user_sys_s, process_read_bytes, process_write_bytes,
    reset_peak_rss, PerfRecording, Profile,
};
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
    /// Process CPU seconds (all threads, incl. engine background threads):
    /// `cpu_user_s + cpu_sys_s`.
    pub cpu_s: f64,
    /// Of `cpu_s`, seconds in user space.
    pub cpu_user_s: f64,
    /// Of `cpu_s`, seconds in the kernel (system calls, page faults, I/O).
    pub cpu_sys_s: f64,
    /// What the block device under the data directory completed during
    /// the phase, every process's I/O to it included (Err: why it is not
    /// measurable: no block device, counters unreadable).
    pub device_io: Result<DeviceIo, String>,
    /// Bytes the process sent to storage during the phase
    /// ([`process_write_bytes`]; None: not measurable).
    pub process_write_bytes: Option<u64>,
    /// Bytes the process read from storage during the phase
    /// ([`process_read_bytes`]: direct reads and page-cache misses; None:
    /// not measurable).
    pub process_read_bytes: Option<u64>,
    /// Peak resident memory of the process during the phase (`VmHWM`,
    /// reset when the phase starts; None: the reset is not supported).
    pub rss_peak_bytes: Option<u64>,
    /// Log syncs during the phase, from the engine's counters (None: the
    /// engine does not count them).
    pub log_syncs: Option<u64>,
    /// Log bytes written during the phase (engine counters; None: not
    /// counted).
    pub log_bytes: Option<u64>,
    /// Of those, page images (flashtree).
    pub log_image_bytes: Option<u64>,
    /// Page writes during the phase, and of them those of hot data
    /// (flashtree's write classes).
    pub page_writes: Option<u64>,
    pub hot_page_writes: Option<u64>,
    /// Checkpoints completed during the phase (flashtree).
    pub checkpoints: Option<u64>,
    /// OS threads (thread engines) used.
    pub threads: usize,
    /// Task-based engines: tasks per worker of a Run phase (None: the
    /// engine's default, or a thread engine).
    pub tasks_per_worker: Option<usize>,
    /// perf profile of the phase (None: not asked for, or not a Run phase;
    /// Err: why perf could not sample it).
    pub profile: Option<Result<Profile, String>>,
    /// The perf.data file perf wrote, if any (also when the profile failed).
    pub perf_data_path: Option<PathBuf>,
}

impl PhaseResult {
    /// Operations per second of wall time.
    pub fn ops_per_sec(&self) -> f64 {
        self.stats.ops_count as f64 / self.wall_s.max(1e-9)
    }
}

/// A phase's I/O on the block device under its data directory.
#[derive(Debug, Clone)]
pub struct DeviceIo {
    pub device: BlockDevice,
    /// Completed during the phase.
    pub counters: IoCounters,
}

/// The device under `dir` and its counters now.
fn device_counters(dir: &Path) -> Result<(BlockDevice, IoCounters), String> {
    let device = BlockDevice::of_path(dir)?;
    let counters = device.counters()?;
    Ok((device, counters))
}

/// How to run one phase.
#[derive(Debug, Clone)]
pub struct PhaseSpec<'a> {
    /// Load, Run or Check.
    pub phase: Phase,
    /// Threads for thread-per-request engines; for task-based engines in a
    /// Run phase, tasks per worker (Load and Check use the engine's own).
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
    /// Sample Run phases with `perf record` into
    /// `<profile_dir>/<engine>-<threads>.perf.data` (None: no profile).
    pub profile_dir: Option<PathBuf>,
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
    // `run_arg`: what `run_job` gets (0 = a task engine's own count).
    let (threads, tasks_per_worker, run_arg) = match engine.concurrency() {
        Concurrency::Threads => (spec.threads, None, spec.threads),
        Concurrency::Tasks { workers, .. } => {
            let tasks = (spec.phase == Phase::Run).then_some(spec.threads);
            (workers, tasks, tasks.unwrap_or(0))
        }
    };
    // Started before the run's clock, so that perf's start-up is not timed.
    let recording = match (&spec.profile_dir, spec.phase) {
        (Some(dir), Phase::Run) => {
            let name = match tasks_per_worker {
                Some(tasks) => format!("{}-{threads}x{tasks}.perf.data", engine.name()),
                None => format!("{}-{threads}.perf.data", engine.name()),
            };
            let path = dir.join(name);
            let started = PerfRecording::start(&path);
            Some((path, started))
        }
        _ => None,
    };
    let control = RunControl::new(duration, spec.rate_ops_per_sec, spec.seed);
    let job = Job {
        workload,
        phase: spec.phase,
        control: &control,
    };
    let io_before = device_counters(spec.dir);
    let written_before = process_write_bytes();
    let read_before = process_read_bytes();
    let peak_reset = reset_peak_rss();
    let counters_before = engine.counters();
    let (user_before_s, sys_before_s) = process_cpu_user_sys_s();
    let started = Instant::now();
    let finished = AtomicBool::new(false);
    let all = std::thread::scope(|scope| {
        if spec.progress {
            scope.spawn(|| show_progress(engine.name(), workload, spec, &control, &finished));
        }
        let result = engine.run_job(&job, run_arg);
        finished.store(true, Ordering::Relaxed);
        result
    });
    let wall_s = started.elapsed().as_secs_f64();
    let (user_after_s, sys_after_s) = process_cpu_user_sys_s();
    let (cpu_user_s, cpu_sys_s) = (user_after_s - user_before_s, sys_after_s - sys_before_s);
    let io_after = io_before
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|(device, _)| device.counters());
    let written = process_write_bytes()
        .zip(written_before)
        .map(|(after, before)| after.saturating_sub(before));
    let read = process_read_bytes()
        .zip(read_before)
        .map(|(after, before)| after.saturating_sub(before));
    let rss_peak_bytes = peak_reset.then(peak_rss_bytes).flatten();
    let counters_after = engine.counters();
    let during = |count: fn(&EngineCounters) -> Option<u64>| {
        count(&counters_after)
            .zip(count(&counters_before))
            .map(|(after, before)| after.saturating_sub(before))
    };
    let log_syncs = during(|c| c.log_syncs);
    let log_bytes = during(|c| c.log_bytes);
    let log_image_bytes = during(|c| c.log_image_bytes);
    let page_writes = during(|c| c.hot_writes_count.and(c.writes_count));
    let hot_page_writes = during(|c| c.hot_writes_count);
    let checkpoints = during(|c| c.checkpoints);
    // Stopped before looking at the job's result: a failed job must not leave perf running.
    let stopped = recording.map(|(path, started)| (path, started.and_then(PerfRecording::stop)));
    let all = all?;
    let device_io = io_before.and_then(|(device, before)| {
        io_after.map(|after| DeviceIo {
            device,
            counters: after.since(&before),
        })
    });
    let (perf_data_path, profile) = match stopped {
        Some((path, Ok(()))) => {
            let profile = perf_report(&path);
            (Some(path), Some(profile))
        }
        Some((path, Err(error))) => (path.exists().then_some(path), Some(Err(error))),
        None => (None, None),
    };
    let mut stats = TaskStats::merge_all(&all);
    if spec.phase == Phase::Load {
        stats.user_bytes_written = control.loaded_bytes();
    }
    Ok(PhaseResult {
        stats,
        wall_s,
        cpu_s: cpu_user_s + cpu_sys_s,
        cpu_user_s,
        cpu_sys_s,
        device_io,
        process_write_bytes: written,
        process_read_bytes: read,
        rss_peak_bytes,
        log_syncs,
        log_bytes,
        log_image_bytes,
        page_writes,
        hot_page_writes,
        checkpoints,
        threads,
        tasks_per_worker,
        profile,
        perf_data_path,
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

/// The counts a sweep runs `engine` with (`PhaseSpec::threads` of each Run
/// phase): `thread_counts` for thread engines; a task-based engine's own
/// [`Engine::tasks_sweep`], or its `tasks_per_worker` alone.
pub fn sweep_counts(engine: &dyn Engine, thread_counts: &[usize]) -> Vec<usize> {
    match engine.concurrency() {
        Concurrency::Threads => thread_counts.to_vec(),
        Concurrency::Tasks {
            tasks_per_worker, ..
        } => {
            let own = engine.tasks_sweep();
            if own.is_empty() {
                vec![tasks_per_worker]
            } else {
                own
            }
        }
    }
}

/// Runs the Run phase once per entry of [`sweep_counts`] and returns every
/// result, in order. The caller picks the best.
pub fn sweep_threads(
    engine: &dyn Engine,
    workload: &Workload,
    spec: &PhaseSpec<'_>,
    thread_counts: &[usize],
) -> Result<Vec<PhaseResult>, String> {
    let counts = sweep_counts(engine, thread_counts);
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
