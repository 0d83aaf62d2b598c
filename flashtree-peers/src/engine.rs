//! The driver-facing engine interface and the thread-per-request runner.
//!
//! Contract: the driver opens an engine with an [`EngineConfig`], then hands
//! it [`Job`]s (load, run, check). The engine runs `job.run_task(&kv, i, n)`
//! on `n` concurrent tasks or threads, each with its own [`Kv`] handle, and
//! returns every task's [`TaskStats`]. The driver measures wall time and CPU
//! time around [`Engine::run_job`], so engines only execute.

use std::path::PathBuf;

use crate::job::{Job, TaskStats};
use crate::kv::{block_on, Kv};

/// What the driver gives an engine to open or create its database.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Everything the engine writes goes under this directory (created if missing).
    pub dir: PathBuf,
    /// Memory budget: the engine's cache or buffer pool is set to this.
    pub memory_bytes: u64,
    /// Tables `0..table_count` must exist after open.
    pub table_count: u32,
    /// Most threads the driver will run at once (sessions to reserve).
    pub threads_max: usize,
    /// CPU cores the run is pinned to (empty: no pinning).
    pub cores: Vec<usize>,
    /// When a commit (a single put or delete, or [`crate::Kv::commit`])
    /// may return.
    pub durability: DurabilityMode,
}

/// When an engine's commit may return, as `bench compare --durability`
/// sets it for every engine of a run. Each adapter maps it to its engine's
/// nearest setting and says which in its settings line
/// ([`crate::adapters::durability`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// No log (where the engine can turn it off), no sync: a crash may
    /// lose anything since the last checkpoint or clean close.
    #[default]
    None,
    /// Logged but not synced at commit: a process crash loses little or
    /// nothing, a power cut loses the last moments.
    Buffered,
    /// A commit returns only once it would survive a power cut.
    Sync,
}

impl DurabilityMode {
    /// "none", "buffered" or "sync".
    pub fn name(self) -> &'static str {
        match self {
            DurabilityMode::None => "none",
            DurabilityMode::Buffered => "buffered",
            DurabilityMode::Sync => "sync",
        }
    }
}

/// How an engine turns concurrency into execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// One OS thread per request stream; the driver sweeps the thread count.
    Threads,
    /// The engine's own executor: `workers` OS threads × `tasks_per_worker`
    /// async tasks. The driver runs it once, with no sweep.
    Tasks {
        /// Worker OS threads.
        workers: usize,
        /// Async tasks per worker.
        tasks_per_worker: usize,
    },
}

/// Counters an engine may report (None: the engine cannot tell).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineCounters {
    /// Buffer-pool/cache hits / (hits + misses) since open.
    pub hit_ratio: Option<f64>,
    /// Page reads issued since open (device-level counts are used otherwise).
    pub reads_count: Option<u64>,
    /// Page writes issued since open.
    pub writes_count: Option<u64>,
    /// Of those, pages written as hot data (flashtree's write class by its
    /// pool's heat counts; None for engines without classes).
    pub hot_writes_count: Option<u64>,
    /// Log syncs (fsync/fdatasync of the log, or durable log writes)
    /// since open, from the engine's own counters.
    pub log_syncs: Option<u64>,
    /// Bytes written to the log since open, from the engine's own
    /// counters (flashtree: whole log blocks; RocksDB: the
    /// `rocksdb.wal.bytes` ticker).
    pub log_bytes: Option<u64>,
    /// Of those, page images (flashtree's full-page images, which repair
    /// torn pages; None for engines without them).
    pub log_image_bytes: Option<u64>,
    /// Checkpoints completed since open (flashtree).
    pub checkpoints: Option<u64>,
    /// Bytes of its data file(s) by the engine's own accounting, to
    /// cross-check the directory's size on disk (flashtree: pages
    /// allocated × page size, from `Db::stats`; its logs not included).
    pub store_bytes: Option<u64>,
}

/// An opened storage engine, as the driver sees it. Object safe.
pub trait Engine: Send + Sync {
    /// Short name: "rocksdb", "wiredtiger", "lmdb", "redb", "fjall", "flashtree".
    fn name(&self) -> &str;
    /// Every setting that matters for the comparison, one line, for the report.
    fn settings(&self) -> String;
    /// How `run_job` executes tasks.
    fn concurrency(&self) -> Concurrency;
    /// Runs `job.run_task(&kv, task_index, task_count)` on concurrent tasks,
    /// each with its own handle, and returns all their stats (any order).
    /// `threads` is the requested count for [`Concurrency::Threads`] engines;
    /// task-based engines run `workers × threads` tasks, where `threads` is
    /// tasks per worker (a value from [`Engine::tasks_sweep`] in Run
    /// phases; 0 in Load and Check phases: the engine's own count).
    fn run_job(&self, job: &Job<'_>, threads: usize) -> Result<Vec<TaskStats>, String>;
    /// Task-based engines: the tasks-per-worker values the driver's sweep
    /// runs, as thread engines get a thread sweep (empty: only the
    /// engine's own `tasks_per_worker`).
    fn tasks_sweep(&self) -> Vec<usize> {
        Vec::new()
    }
    /// Optional counters (hit ratio, page I/O).
    fn counters(&self) -> EngineCounters {
        EngineCounters::default()
    }
    /// True if the engine reads through mmap or the page cache, so the
    /// driver must bound it with a memory cgroup (LMDB, redb, fjall). The
    /// driver enters the cgroup before opening, by name
    /// (`adapters::needs_memory_cgroup`), which a test keeps equal to this.
    fn needs_memory_cgroup(&self) -> bool {
        false
    }
    /// Compacts the engine's data its own way (`bench compare
    /// --compact-after-load`, after the load and before the run): returns
    /// what it did, one line for the report, or None when the engine has
    /// no such operation.
    fn compact(&self) -> Result<Option<String>, String> {
        Ok(None)
    }
    /// Flushes and closes. Errors are reported, never panics.
    fn close(self: Box<Self>) -> Result<(), String>;
}

/// Opens an engine from a config (what the driver calls per engine).
pub type EngineFactory = dyn Fn(&EngineConfig) -> Result<Box<dyn Engine>, String>;

/// Source of per-thread handles for thread-per-request engines.
pub trait HandleSource: Sync {
    /// The per-thread handle type.
    type Handle: Kv;
    /// Opens one handle; called on the thread that will use it.
    fn open_handle(&self) -> Result<Self::Handle, String>;
}

/// Bound on thread count for thread-per-request runs.
pub const THREADS_MAX: usize = 4096;

/// Runs `job` on `threads` OS threads, one handle each (the default
/// execution for peer engines). Threads inherit the caller's CPU affinity.
pub fn run_job_on_threads<S: HandleSource>(
    source: &S,
    job: &Job<'_>,
    threads: usize,
) -> Result<Vec<TaskStats>, String> {
    if threads == 0 || threads > THREADS_MAX {
        return Err(format!("thread count {threads} outside 1..={THREADS_MAX}"));
    }
    std::thread::scope(|scope| {
        let mut joins = Vec::with_capacity(threads);
        for task_index in 0..threads {
            let builder = std::thread::Builder::new()
                .name(format!("kv-{task_index}"))
                .stack_size(1 << 20);
            let join = builder
                .spawn_scoped(scope, move || -> Result<TaskStats, String> {
                    let handle = source.open_handle()?;
                    block_on(job.run_task(&handle, task_index, threads)).map_err(|e| e.to_string())
                })
                .map_err(|e| format!("cannot spawn thread {task_index}: {e}"))?;
            joins.push(join);
        }
        let mut all = Vec::with_capacity(threads);
        for join in joins {
            let stats = join
                .join()
                .map_err(|_| "a benchmark thread panicked".to_string())??;
            all.push(stats);
        }
        Ok(all)
    })
}

/// Sleeps the thread until `deadline` (open-loop pacing for thread handles).
pub fn sleep_until(deadline: std::time::Instant) {
    let now = std::time::Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}
