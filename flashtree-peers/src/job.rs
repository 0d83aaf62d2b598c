//! A job is one phase of a workload (load, timed run, consistency check)
//! that an engine executes on `n` concurrent tasks. [`Job::run_task`] is the
//! whole body of one task: engines call it and return what it returns.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::kv::{Kv, KvError};
use crate::rng::Rng64;
use crate::workload::{OpKind, Workload, OP_KIND_COUNT};

/// Which phase a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Insert the initial dataset; task `i` of `n` loads part `i`.
    Load,
    /// Timed run: closed loop, or open loop at a target rate.
    Run,
    /// Consistency checks after the run (task 0 only; others return at once).
    Check,
}

/// Longest latency the histograms hold (larger values are clamped).
pub const LATENCY_NS_MAX: u64 = 60_000_000_000;
/// Longest run the per-second timeline holds.
pub const RUN_SECONDS_MAX: u64 = 24 * 3600;
/// Tasks add to the shared progress counter every this many operations.
const PROGRESS_BATCH_OPS: u64 = 64;
/// Significant digits of the latency histograms (1% resolution).
const LATENCY_SIGNIFICANT_DIGITS: u8 = 2;

/// The stats of the timed-run tasks running on this thread. Tasks of an
/// async engine share their worker thread, and with it one histogram: one
/// per task (hundreds per core) would spread the recording over megabytes
/// and cost a cache miss per operation, which is harness overhead charged
/// to the engine.
struct ThreadStats {
    /// The job (its `RunControl`'s address) these stats belong to.
    job_id: usize,
    /// Tasks of that job on this thread that have not finished.
    active_tasks: usize,
    stats: TaskStats,
    /// The second of the run that the last operation ended in, and when
    /// it began and ends: an operation ending in it needs no division.
    second: Option<(u64, Instant, Instant)>,
}

thread_local! {
    static THREAD_STATS: RefCell<Option<ThreadStats>> = const { RefCell::new(None) };
}

/// Registers a running task of `job_id` on this thread.
fn thread_stats_enter(job_id: usize) {
    THREAD_STATS.with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut() {
            Some(shared) if shared.job_id == job_id => shared.active_tasks += 1,
            Some(shared) => panic!(
                "tasks of two jobs interleaved on one thread ({} tasks of the other still active)",
                shared.active_tasks
            ),
            None => {
                *slot = Some(ThreadStats {
                    job_id,
                    active_tasks: 1,
                    stats: TaskStats::new(),
                    second: None,
                })
            }
        }
    });
}

/// Records one operation, which ended at `done` in a run that started at
/// `start`, into this thread's stats.
fn thread_stats_record(
    kind: OpKind,
    latency_ns: u64,
    (start, done): (Instant, Instant),
    page_reads: Option<u64>,
) {
    THREAD_STATS.with(|cell| {
        let mut slot = cell.borrow_mut();
        let shared = slot.as_mut().expect("thread_stats_enter ran first");
        let second = match shared.second {
            Some((second, from, to)) if from <= done && done < to => second,
            _ => {
                let second = done.saturating_duration_since(start).as_secs();
                let from = start + Duration::from_secs(second);
                shared.second = Some((second, from, from + Duration::from_secs(1)));
                second
            }
        };
        shared.stats.record(kind, latency_ns, second, page_reads);
    });
}

/// Records one commit (its latency, and the user bytes it wrote) into this
/// thread's stats; nothing outside a timed run (loads and checks have no
/// thread stats).
pub(crate) fn thread_stats_record_commit(latency: Duration, user_bytes: u64) {
    THREAD_STATS.with(|cell| {
        if let Some(shared) = cell.borrow_mut().as_mut() {
            let stats = &mut shared.stats;
            stats.commits += 1;
            stats.user_bytes_written += user_bytes;
            let latency_ns = (latency.as_nanos() as u64).clamp(1, LATENCY_NS_MAX);
            let _ = stats.commit_latency_ns.record(latency_ns);
        }
    });
}

/// A task leaves: the last one out takes the thread's stats, the others get
/// empty stats (the engine merges them all).
fn thread_stats_leave() -> TaskStats {
    THREAD_STATS.with(|cell| {
        let mut slot = cell.borrow_mut();
        let shared = slot.as_mut().expect("thread_stats_enter ran first");
        shared.active_tasks -= 1;
        if shared.active_tasks == 0 {
            slot.take().map(|shared| shared.stats).unwrap_or_default()
        } else {
            TaskStats::new()
        }
    })
}

/// Leaves the thread's stats when dropped without [`ThreadStatsMember::finish`]
/// (a task that panicked or was dropped), so that the thread's next job starts clean.
struct ThreadStatsMember {
    finished: bool,
}

impl ThreadStatsMember {
    fn enter(job_id: usize) -> Self {
        thread_stats_enter(job_id);
        ThreadStatsMember { finished: false }
    }
    fn finish(mut self) -> TaskStats {
        self.finished = true;
        thread_stats_leave()
    }
}

impl Drop for ThreadStatsMember {
    fn drop(&mut self) {
        if !self.finished {
            thread_stats_leave();
        }
    }
}

/// Shared state of a job: stop flag, clock, progress. One per job.
#[derive(Debug)]
pub struct RunControl {
    stop: AtomicBool,
    start: Instant,
    duration: Duration,
    /// `start + duration` (None: too far to represent), so that the check
    /// per operation is a comparison.
    deadline: Option<Instant>,
    rate_ops_per_sec: Option<f64>,
    progress_ops: AtomicU64,
    /// Key and value bytes committed by loaders ([`RunControl::add_loaded_bytes`]).
    loaded_bytes: AtomicU64,
    seed: u64,
}

impl RunControl {
    /// A control whose clock starts now. `rate_ops_per_sec` = None: closed loop.
    pub fn new(duration: Duration, rate_ops_per_sec: Option<f64>, seed: u64) -> Self {
        let start = Instant::now();
        RunControl {
            stop: AtomicBool::new(false),
            start,
            duration,
            deadline: start.checked_add(duration),
            rate_ops_per_sec,
            progress_ops: AtomicU64::new(0),
            loaded_bytes: AtomicU64::new(0),
            seed,
        }
    }
    /// Asks all tasks to stop after their current operation.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
    /// Operations (or loaded records) completed so far, in batches.
    pub fn progress_ops(&self) -> u64 {
        self.progress_ops.load(Ordering::Relaxed)
    }
    /// Adds to the progress counter (loaders call this).
    pub fn add_progress(&self, ops: u64) {
        self.progress_ops.fetch_add(ops, Ordering::Relaxed);
    }
    /// Adds the key and value bytes of a committed load batch (loaders
    /// call this, once per batch).
    pub fn add_loaded_bytes(&self, bytes: u64) {
        self.loaded_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    /// Key and value bytes the loaders committed so far: the raw size of
    /// the loaded data (space amplification divides by it).
    pub fn loaded_bytes(&self) -> u64 {
        self.loaded_bytes.load(Ordering::Relaxed)
    }
    /// When the clock started.
    pub fn start(&self) -> Instant {
        self.start
    }
    fn stopped(&self, now: Instant) -> bool {
        self.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|end| now >= end)
    }
}

/// What one task measured.
#[derive(Debug, Clone)]
pub struct TaskStats {
    /// Operations (transactions for TPC-C; records for a load).
    pub ops_count: u64,
    /// Operations by kind, indexed by [`OpKind`] as usize.
    pub ops_by_kind: [u64; OP_KIND_COUNT],
    /// Page reads by operation kind (engines whose handles count them; see
    /// [`Kv::page_reads`]), indexed as `ops_by_kind`.
    pub page_reads_by_kind: [u64; OP_KIND_COUNT],
    /// Latency per operation in ns (open loop: from the scheduled arrival).
    pub latency_ns: Histogram<u64>,
    /// Operations completed in each second of the run.
    pub ops_per_second: Vec<u64>,
    /// Commits in a timed run: single puts and deletes, and batch commits
    /// (counted by [`crate::commits::CountCommits`]).
    pub commits: u64,
    /// Latency of each commit call in ns (from the call, not the arrival).
    pub commit_latency_ns: Histogram<u64>,
    /// Bytes of keys and values the commits wrote (a load's: what its
    /// batches committed, set by the driver from
    /// [`RunControl::loaded_bytes`]).
    pub user_bytes_written: u64,
}

impl TaskStats {
    /// Empty stats.
    pub fn new() -> Self {
        TaskStats {
            ops_count: 0,
            ops_by_kind: [0; OP_KIND_COUNT],
            page_reads_by_kind: [0; OP_KIND_COUNT],
            latency_ns: Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGNIFICANT_DIGITS)
                .expect("static histogram bounds are valid"),
            ops_per_second: Vec::new(),
            commits: 0,
            commit_latency_ns: Histogram::new_with_bounds(
                1,
                LATENCY_NS_MAX,
                LATENCY_SIGNIFICANT_DIGITS,
            )
            .expect("static histogram bounds are valid"),
            user_bytes_written: 0,
        }
    }
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &TaskStats) {
        self.ops_count += other.ops_count;
        for (mine, theirs) in self.ops_by_kind.iter_mut().zip(other.ops_by_kind.iter()) {
            *mine += theirs;
        }
        for (mine, theirs) in self
            .page_reads_by_kind
            .iter_mut()
            .zip(other.page_reads_by_kind.iter())
        {
            *mine += theirs;
        }
        // Both histograms have the same bounds, so `add` cannot fail.
        let _ = self.latency_ns.add(&other.latency_ns);
        let _ = self.commit_latency_ns.add(&other.commit_latency_ns);
        self.commits += other.commits;
        self.user_bytes_written += other.user_bytes_written;
        if self.ops_per_second.len() < other.ops_per_second.len() {
            self.ops_per_second.resize(other.ops_per_second.len(), 0);
        }
        for (second, ops) in other.ops_per_second.iter().enumerate() {
            self.ops_per_second[second] += ops;
        }
    }
    /// Merges a list of task stats into one.
    pub fn merge_all(all: &[TaskStats]) -> TaskStats {
        let mut total = TaskStats::new();
        for stats in all {
            total.merge(stats);
        }
        total
    }
    fn record(&mut self, kind: OpKind, latency_ns: u64, second: u64, page_reads: Option<u64>) {
        self.ops_count += 1;
        self.ops_by_kind[kind as usize] += 1;
        self.page_reads_by_kind[kind as usize] += page_reads.unwrap_or(0);
        let _ = self.latency_ns.record(latency_ns.clamp(1, LATENCY_NS_MAX));
        let second = second.min(RUN_SECONDS_MAX) as usize;
        if self.ops_per_second.len() <= second {
            self.ops_per_second.resize(second + 1, 0);
        }
        self.ops_per_second[second] += 1;
    }
}

impl Default for TaskStats {
    fn default() -> Self {
        Self::new()
    }
}

/// One phase of a workload, as handed to [`crate::Engine::run_job`].
#[derive(Debug)]
pub struct Job<'a> {
    /// The workload (shared by all tasks).
    pub workload: &'a Workload,
    /// Which phase.
    pub phase: Phase,
    /// Stop flag, clock and progress.
    pub control: &'a RunControl,
}

impl Job<'_> {
    /// The whole body of task `task_index` of `task_count`. Engines run this
    /// on each of their tasks with that task's own handle, and merge what
    /// all tasks return. In a timed run the tasks on one thread share their
    /// stats: the last of them to finish returns them all, the others
    /// return empty stats. On error the other tasks are asked to stop.
    pub async fn run_task<K: Kv>(
        &self,
        kv: &K,
        task_index: usize,
        task_count: usize,
    ) -> Result<TaskStats, KvError> {
        let result = match self.phase {
            Phase::Load => self.load_task(kv, task_index, task_count).await,
            Phase::Run => self.run_loop(kv, task_index, task_count).await,
            Phase::Check if task_index == 0 => {
                self.workload.check(kv).await.map(|()| TaskStats::new())
            }
            Phase::Check => Ok(TaskStats::new()),
        };
        if result.is_err() {
            self.control.request_stop();
        }
        result
    }

    async fn load_task<K: Kv>(
        &self,
        kv: &K,
        task_index: usize,
        task_count: usize,
    ) -> Result<TaskStats, KvError> {
        let records = self
            .workload
            .load_part(kv, task_index, task_count, self.control)
            .await?;
        let mut stats = TaskStats::new();
        stats.ops_count = records;
        stats.ops_by_kind[OpKind::Insert as usize] = records;
        Ok(stats)
    }

    async fn run_loop<K: Kv>(
        &self,
        kv: &K,
        task_index: usize,
        task_count: usize,
    ) -> Result<TaskStats, KvError> {
        let control = self.control;
        let seed = control.seed ^ (task_index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = Rng64::new(seed);
        let mut state = self.workload.task_state(task_index, task_count, seed);
        let job_id = std::ptr::from_ref(control) as usize;
        let member = ThreadStatsMember::enter(job_id);
        let kv = &crate::commits::CountCommits::new(kv);
        let result = self.run_ops(kv, &mut rng, &mut state, task_count).await;
        let stats = member.finish();
        result.map(|()| stats)
    }

    async fn run_ops<K: Kv>(
        &self,
        kv: &K,
        rng: &mut Rng64,
        state: &mut crate::workload::TaskState,
        task_count: usize,
    ) -> Result<(), KvError> {
        let control = self.control;
        let rate_per_task = control
            .rate_ops_per_sec
            .map(|rate| rate / task_count.max(1) as f64);
        let mut next_arrival = control.start;
        let mut unreported_ops = 0u64;
        // The clock is read once per operation: when it ends, which is
        // also when the next one begins (in a closed loop).
        let mut now = Instant::now();
        loop {
            if control.stopped(now) {
                break;
            }
            let began = match rate_per_task {
                Some(rate) => {
                    next_arrival += Duration::from_secs_f64(rng.exponential(rate));
                    if next_arrival > control.start + control.duration {
                        break;
                    }
                    kv.idle_until(next_arrival).await;
                    next_arrival
                }
                None => now,
            };
            let reads_before = kv.page_reads();
            let kind = self.workload.op(kv, state).await?;
            let done = Instant::now();
            let latency_ns = done.saturating_duration_since(began).as_nanos() as u64;
            let page_reads = kv
                .page_reads()
                .zip(reads_before)
                .map(|(after, before)| after - before);
            thread_stats_record(kind, latency_ns, (control.start, done), page_reads);
            now = done;
            unreported_ops += 1;
            if unreported_ops == PROGRESS_BATCH_OPS {
                control.add_progress(unreported_ops);
                unreported_ops = 0;
            }
        }
        control.add_progress(unreported_ops);
        Ok(())
    }
}
