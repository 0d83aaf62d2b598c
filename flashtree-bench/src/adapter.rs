//! flashtree as a `flashtree_peers` engine: the same workload code that runs
//! on RocksDB, WiredTiger and LMDB runs here on flashtree's own executor.
//!
//! Contract:
//! - [`FlashtreeEngine::open`] creates the store under `EngineConfig::dir`
//!   with a buffer pool of `EngineConfig::memory_bytes` (direct I/O), and one
//!   named tree per table: table `i` is tree `"t{i}"`.
//! - [`Engine::run_job`] runs `workers × tasks_per_worker` tasks with
//!   [`Db::run`]; task `i` of `n` (i = worker × tasks_per_worker + task)
//!   runs `job.run_task(&its_handle, i, n)` and returns its `TaskStats`.
//! - [`FlashtreeKv`] is one task's handle: a [`TaskCtx`] plus the table →
//!   tree map. It lives and is used only on its worker thread.
//! - Durability follows `EngineConfig::durability`: `Durability::None` (no
//!   log), `Buffered { max_delay_ms: 10 }` or `Sync`; a `Kv::commit` is one
//!   `WriteBatch` written with `TaskCtx::write` (atomic; in `Sync` the task
//!   waits for the group commit that makes it durable).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use flashtree::btree::node::{MAX_ENTRY_BYTES, MAX_KEY_BYTES};
use flashtree::db::{
    Db, Durability, LogWrites, Options, ScanDirection, TaskCtx, Tree, WriteBatch, WriteOptions,
};
use flashtree::io::{BackendKind, IoConfig, PAGE_SIZE};
use flashtree_peers::kv::check_table;
use flashtree_peers::{
    Concurrency, DurabilityMode, Engine, EngineConfig, EngineCounters, GetManyFn, Job, Kv, KvBatch,
    KvError, ScanFn, TaskStats,
};

/// Engine name in reports.
pub const ENGINE_NAME: &str = "flashtree";
/// The engine's name in comparisons when every table is a hash tree
/// (`Db::hash_tree`; [`FlashtreeSettings::hash_index`]).
pub const HASH_ENGINE_NAME: &str = "flashtree-hash";
/// Default async tasks per worker: enough to keep ~128 reads in flight per
/// core out of memory (Haas & Leis (VLDB 2023) §3.3), few enough that TPC-C lock spinning
/// stays cheap.
pub const TASKS_PER_WORKER_DEFAULT: usize = 128;
/// Tasks per worker `bench compare` sweeps by default, as it sweeps the
/// peers' thread counts (`--threads 1,8,64,256`), reporting the best: 128
/// for a store out of memory (reads in flight), 32 for one in memory, where
/// each ready task's state and the node lines it prefetched before its
/// yield compete for the core's caches until its next turn. Fewer tasks
/// than 128 were often, not always, quicker in memory (`docs/ARCHITECTURE.md`,
/// "The cost of a lookup", has the runs and the command).
pub const TASKS_SWEEP_DEFAULT: &str = "32,128";
/// Most tasks per worker this adapter accepts.
pub const TASKS_PER_WORKER_MAX: usize = 4096;
/// The log-flush delay of the `buffered` mode (stated in
/// `flashtree_peers::adapters::durability`).
const BUFFERED_MAX_DELAY_MS: u32 = 10;
/// Smallest I/O depth per worker channel.
const IO_DEPTH_MIN: u32 = 512;

/// How to run flashtree in a comparison (what the peers crate cannot know).
#[derive(Clone, Debug)]
pub struct FlashtreeSettings {
    /// Worker threads; None: one per pinned core (or per available core).
    pub workers: Option<usize>,
    /// Async tasks per worker (of loads, checks, and runs outside a sweep).
    pub tasks_per_worker: usize,
    /// Tasks per worker to sweep in Run phases (empty: `tasks_per_worker`).
    pub tasks_sweep: Vec<usize>,
    /// I/O backend of every worker's channel.
    pub backend: BackendKind,
    /// `Options::dirty_spare_rounds`.
    pub dirty_spare_rounds: u8,
    /// `Options::hot_spare_rounds`.
    pub hot_spare_rounds: u8,
    /// `IoConfig::submit_batch`.
    pub submit_batch: u32,
    /// `IoConfig::submit_busy_depth`.
    pub submit_busy_depth: u32,
    /// `Options::wal_bytes_per_worker`.
    pub wal_bytes_per_worker: u64,
    /// `Options::checkpoint_log_bytes`.
    pub checkpoint_log_bytes: u64,
    /// `Options::log_writes`.
    pub log_writes: LogWrites,
    /// Block devices to keep the store on (empty: files under the
    /// engine's directory).
    pub devices: Vec<std::path::PathBuf>,
    /// Every table a hash tree (`Db::hash_tree`): engine
    /// [`HASH_ENGINE_NAME`], point operations only (a scan is an error).
    pub hash_index: bool,
}

/// Marker in the engine's directory of a store kept on block devices:
/// without it (a new load, after the harness emptied the directory) the
/// devices' superblocks are wiped and a new store is made.
const DEVICE_STORE_MARKER: &str = "flashtree-on-devices";

/// Opens the store on `devices`: the one there when the marker in `dir`
/// says this harness made it, else a new one over whatever they hold.
fn open_on_devices(
    devices: &[std::path::PathBuf],
    dir: &std::path::Path,
    options: Options,
) -> Result<Db, String> {
    use std::os::unix::fs::FileExt;
    let marker = dir.join(DEVICE_STORE_MARKER);
    if !marker.exists() {
        for device in devices {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(device)
                .map_err(|e| format!("flashtree: {}: {e}", device.display()))?;
            file.write_all_at(&[0u8; 8192], 0)
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("flashtree: wiping {}: {e}", device.display()))?;
        }
    }
    let options = Options {
        create_on_block_devices: true,
        ..options
    };
    let db = Db::open_devices(devices, options).map_err(|e| format!("flashtree: open: {e}"))?;
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&marker, b"the store is on block devices\n"))
        .map_err(|e| format!("flashtree: {}: {e}", marker.display()))?;
    Ok(db)
}

impl Default for FlashtreeSettings {
    fn default() -> Self {
        FlashtreeSettings {
            workers: None,
            tasks_per_worker: TASKS_PER_WORKER_DEFAULT,
            tasks_sweep: Vec::new(),
            backend: BackendKind::IoUring,
            dirty_spare_rounds: Options::default().dirty_spare_rounds,
            hot_spare_rounds: Options::default().hot_spare_rounds,
            submit_batch: IoConfig::default().submit_batch,
            submit_busy_depth: IoConfig::default().submit_busy_depth,
            wal_bytes_per_worker: Options::default().wal_bytes_per_worker,
            checkpoint_log_bytes: Options::default().checkpoint_log_bytes,
            log_writes: Options::default().log_writes,
            devices: Vec::new(),
            hash_index: false,
        }
    }
}

/// An open flashtree store with one tree per table.
pub struct FlashtreeEngine {
    /// [`ENGINE_NAME`] or [`HASH_ENGINE_NAME`].
    name: &'static str,
    db: Db,
    trees: Arc<Vec<Tree>>,
    workers: usize,
    tasks_per_worker: usize,
    tasks_sweep: Vec<usize>,
    settings: String,
}

impl FlashtreeEngine {
    /// Opens (creates) the store under `config.dir` and its tables.
    pub fn open(config: &EngineConfig, settings: &FlashtreeSettings) -> Result<Self, String> {
        let workers = settings
            .workers
            .unwrap_or_else(|| default_workers(&config.cores));
        let tasks_per_worker = settings.tasks_per_worker;
        for tasks in settings.tasks_sweep.iter().chain([&tasks_per_worker]) {
            if !(1..=TASKS_PER_WORKER_MAX).contains(tasks) {
                return Err(format!(
                    "flashtree: tasks per worker {tasks} outside 1..={TASKS_PER_WORKER_MAX}"
                ));
            }
        }
        let tasks_max = settings
            .tasks_sweep
            .iter()
            .copied()
            .chain([tasks_per_worker])
            .max()
            .unwrap_or(tasks_per_worker);
        let io_depth = IO_DEPTH_MIN.max(tasks_max as u32);
        let options = Options {
            pool_bytes: config.memory_bytes,
            workers,
            io: IoConfig {
                backend: settings.backend,
                depth: io_depth,
                submit_batch: settings.submit_batch,
                submit_busy_depth: settings.submit_busy_depth,
                ..IoConfig::default()
            },
            direct_io: true,
            dirty_spare_rounds: settings.dirty_spare_rounds,
            hot_spare_rounds: settings.hot_spare_rounds,
            wal_bytes_per_worker: settings.wal_bytes_per_worker,
            checkpoint_log_bytes: settings.checkpoint_log_bytes,
            log_writes: settings.log_writes,
            durability: match config.durability {
                DurabilityMode::None => Durability::None,
                DurabilityMode::Buffered => Durability::Buffered {
                    max_delay_ms: BUFFERED_MAX_DELAY_MS,
                },
                DurabilityMode::Sync => Durability::Sync,
            },
            ..Options::default()
        };
        let db = if settings.devices.is_empty() {
            Db::open(&config.dir, options).map_err(|e| format!("flashtree: open: {e}"))?
        } else {
            open_on_devices(&settings.devices, &config.dir, options)?
        };
        let trees = (0..config.table_count)
            .map(|table| {
                if settings.hash_index {
                    db.hash_tree(&format!("t{table}"))
                } else {
                    db.tree(&format!("t{table}"))
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("flashtree: creating tables: {e}"))?;
        assert_eq!(trees.len(), config.table_count as usize);
        let pool_bytes = db.stats().pool_bytes;
        let tasks_text = if settings.tasks_sweep.len() > 1 {
            let list: Vec<String> = settings.tasks_sweep.iter().map(|t| t.to_string()).collect();
            format!(
                "{{{}}} tasks (swept; load with {tasks_per_worker})",
                list.join(", ")
            )
        } else {
            format!("{tasks_per_worker} tasks")
        };
        let mut line = format!(
            "{workers} worker(s) × {tasks_text}; pool {} MiB ({} pages of {PAGE_SIZE} B); \
             direct I/O; backend {} (depth {io_depth}/worker, submitting by itself every {} requests \
             while fewer than {} are unfinished); clock spares dirty pages {} rounds, \
             hot pages up to {}; {}; log {} MiB per worker, a checkpoint every {} MiB of log, \
             log writes {}",
            pool_bytes >> 20,
            pool_bytes / PAGE_SIZE as u64,
            settings.backend,
            settings.submit_batch,
            settings.submit_busy_depth,
            settings.dirty_spare_rounds,
            settings.hot_spare_rounds,
            flashtree_peers::adapters::durability(ENGINE_NAME, config.durability),
            settings.wal_bytes_per_worker >> 20,
            settings.checkpoint_log_bytes >> 20,
            settings.log_writes.name(),
        );
        if !settings.devices.is_empty() {
            let names: Vec<String> = settings
                .devices
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            line.push_str("; on block devices ");
            line.push_str(&names.join(", "));
        }
        line.push_str("; placement: ");
        line.push_str(db.placement());
        for note in db.notes() {
            line.push_str("; ");
            line.push_str(note);
        }
        if settings.hash_index {
            line.push_str("; every table a hash tree");
        }
        Ok(FlashtreeEngine {
            name: if settings.hash_index {
                HASH_ENGINE_NAME
            } else {
                ENGINE_NAME
            },
            db,
            trees: Arc::new(trees),
            workers,
            tasks_per_worker,
            tasks_sweep: settings.tasks_sweep.clone(),
            settings: line,
        })
    }

    /// The open store (for tests and tools).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Runs `make(handle, task_index, task_count)` on every task and returns
    /// what each returned (any order). Blocks until all tasks finish.
    pub(crate) fn run_tasks<T, F, Fut>(
        &self,
        tasks_per_worker: usize,
        make: F,
    ) -> Result<Vec<T>, String>
    where
        T: Send + 'static,
        F: Fn(FlashtreeKv, usize, usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let task_count = self.workers * tasks_per_worker;
        let results = Arc::new(Mutex::new(Vec::with_capacity(task_count)));
        let (trees, results_shared) = (self.trees.clone(), results.clone());
        self.db
            .run(tasks_per_worker, move |ctx| {
                let task_index = ctx.worker() * tasks_per_worker + ctx.task_index();
                assert!(task_index < task_count);
                let kv = FlashtreeKv {
                    ctx,
                    trees: trees.clone(),
                };
                let task = CatchPanic(Box::pin(make(kv, task_index, task_count)));
                let results = results_shared.clone();
                async move {
                    let outcome = task.await;
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(outcome);
                }
            })
            .map_err(|e| format!("flashtree: run: {e}"))?;
        let outcomes = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
        assert_eq!(outcomes.len(), task_count, "every task reports once");
        outcomes
            .into_iter()
            .map(|outcome| outcome.map_err(|panic| format!("flashtree: a task panicked: {panic}")))
            .collect()
    }
}

/// One worker per pinned core; without pinning, one per available core.
fn default_workers(cores: &[usize]) -> usize {
    if cores.is_empty() {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cores.len()
    }
}

/// A `&Job` whose lifetime is erased so that `Db::run`'s `'static` tasks can
/// hold it. Only [`FlashtreeEngine::run_job`] makes one; see its SAFETY note.
#[derive(Clone, Copy)]
struct JobPtr(*const Job<'static>);

// SAFETY: `Job` is `Sync` (its fields are shared references to `Sync` data;
// the peers' thread runner shares it across threads the same way), so a
// pointer to it may move to and be used from worker threads.
unsafe impl Send for JobPtr {}
// SAFETY: as above; the pointer is only read.
unsafe impl Sync for JobPtr {}

impl JobPtr {
    /// # Safety
    /// The `Job` must outlive every use of the returned reference.
    unsafe fn get(&self) -> &'static Job<'static> {
        // SAFETY: the caller guarantees the job is alive.
        unsafe { &*self.0 }
    }
}

impl Engine for FlashtreeEngine {
    fn name(&self) -> &str {
        self.name
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn concurrency(&self) -> Concurrency {
        Concurrency::Tasks {
            workers: self.workers,
            tasks_per_worker: self.tasks_per_worker,
        }
    }

    fn tasks_sweep(&self) -> Vec<usize> {
        self.tasks_sweep.clone()
    }

    fn run_job(&self, job: &Job<'_>, tasks: usize) -> Result<Vec<TaskStats>, String> {
        // A sweep value in Run phases; anything else (Load, Check) runs the
        // default count.
        let tasks_per_worker = if self.tasks_sweep.contains(&tasks) {
            tasks
        } else {
            self.tasks_per_worker
        };
        let job_ptr = JobPtr(std::ptr::from_ref(job).cast::<Job<'static>>());
        let outcomes = self.run_tasks(
            tasks_per_worker,
            move |kv, task_index, task_count| async move {
                // SAFETY: `run_tasks` returns only after every task has finished
                // (`Db::run` waits for all of them, and nothing can shut the store
                // down meanwhile: `close` takes the engine by value), and `job`
                // is borrowed for the whole of this call, so it outlives every
                // use. A task that panics is caught before it could outlive it.
                let job = unsafe { job_ptr.get() };
                job.run_task(&kv, task_index, task_count).await
            },
        )?;
        outcomes
            .into_iter()
            .map(|stats| stats.map_err(|e| e.to_string()))
            .collect()
    }

    fn counters(&self) -> EngineCounters {
        let stats = self.db.stats();
        EngineCounters {
            // The engine counts page reads, not buffer hits.
            hit_ratio: None,
            reads_count: Some(stats.page_reads),
            writes_count: Some(stats.page_writes),
            hot_writes_count: Some(stats.page_writes_hot),
            log_syncs: Some(stats.log_syncs),
            log_bytes: Some(stats.log_bytes),
            log_image_bytes: Some(stats.log_image_bytes),
            checkpoints: Some(stats.checkpoints),
            store_bytes: Some(stats.pages_allocated.saturating_mul(PAGE_SIZE as u64)),
        }
    }

    fn compact(&self) -> Result<Option<String>, String> {
        if self.name == HASH_ENGINE_NAME {
            return Ok(None); // hash trees have no key order to compact
        }
        let (mut moved, mut parents, mut micros) = (0, 0, 0);
        let (mut filled, mut emptied) = (0, 0);
        for &tree in self.trees.iter() {
            let stats = self.db.compact(tree).map_err(|e| format!("compact: {e}"))?;
            moved += stats.leaves_moved;
            filled += stats.leaves_filled;
            emptied += stats.leaves_emptied;
            parents += stats.parents;
            micros += stats.micros;
        }
        Ok(Some(format!(
            "Db::compact of every tree: {filled} leaves filled from a neighbour and {emptied} emptied into one, {moved} moved under {parents} parents in {:.1} s",
            micros as f64 / 1e6
        )))
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        self.db
            .close()
            .map_err(|e| format!("flashtree: close: {e}"))
    }
}

/// Polls a future, turning a panic into `Err(message)` so that one failing
/// task reports instead of killing its worker thread (which would leave
/// `Db::run` waiting forever).
struct CatchPanic<Fut>(Pin<Box<Fut>>);

impl<Fut: Future> Future for CatchPanic<Fut> {
    type Output = Result<Fut::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic_message(panic.as_ref()))),
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_string()
    }
}

/// One task's handle: valid only on the worker that runs the task.
pub struct FlashtreeKv {
    ctx: TaskCtx,
    trees: Arc<Vec<Tree>>,
}

impl FlashtreeKv {
    /// The task context (e.g. for `take_missed`).
    pub fn ctx(&self) -> &TaskCtx {
        &self.ctx
    }

    /// The engine's batch of a workload batch.
    fn write_batch(&self, batch: &KvBatch) -> Result<WriteBatch, KvError> {
        let mut write_batch = WriteBatch::new();
        for (table, key, value) in batch.iter() {
            let tree = self.tree(table)?;
            match value {
                Some(value) => {
                    check_entry(key, value)?;
                    write_batch.put(tree, key, value)
                }
                None => {
                    check_key(key)?;
                    write_batch.delete(tree, key)
                }
            }
            .map_err(engine_error)?;
        }
        Ok(write_batch)
    }

    fn tree(&self, table: u32) -> Result<Tree, KvError> {
        check_table(table, self.trees.len() as u32)?;
        Ok(self.trees[table as usize])
    }
}

fn engine_error(error: flashtree::Error) -> KvError {
    KvError::Engine {
        engine: ENGINE_NAME,
        message: error.to_string(),
    }
}

fn check_key(key: &[u8]) -> Result<(), KvError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(KvError::TooLarge {
            what: "key",
            len_bytes: key.len(),
            limit_bytes: MAX_KEY_BYTES,
        });
    }
    Ok(())
}

fn check_entry(key: &[u8], value: &[u8]) -> Result<(), KvError> {
    check_key(key)?;
    let limit_bytes = MAX_ENTRY_BYTES - key.len();
    if value.len() > limit_bytes {
        return Err(KvError::TooLarge {
            what: "value",
            len_bytes: value.len(),
            limit_bytes,
        });
    }
    Ok(())
}

impl Kv for FlashtreeKv {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        let tree = self.tree(table)?;
        check_key(key)?;
        out.clear();
        self.ctx.get(tree, key, out).await.map_err(engine_error)
    }

    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let tree = self.tree(table)?;
        check_entry(key, value)?;
        self.ctx.put(tree, key, value).await.map_err(engine_error)
    }

    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        let tree = self.tree(table)?;
        check_key(key)?;
        self.ctx.delete(tree, key).await.map_err(engine_error)
    }

    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        let write_batch = self.write_batch(batch)?;
        self.ctx.write(&write_batch).await.map_err(engine_error)
    }

    /// Applies the batch without waiting for the log (its group is in the
    /// worker's log buffer, ordered by its sequence number), calls
    /// `applied`, then, in `Sync` mode, waits until every group up to the
    /// newest is durable in every worker's log (an empty synced write;
    /// `durable_below` is global, so a later commit that saw these writes
    /// cannot be acknowledged before them).
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        let write_batch = self.write_batch(batch)?;
        let unsynced = WriteOptions { sync: Some(false) };
        let result = self.ctx.write_with(&write_batch, unsynced).await;
        applied();
        result.map_err(engine_error)?;
        self.ctx
            .write_with(&WriteBatch::new(), WriteOptions::default())
            .await
            .map(drop)
            .map_err(engine_error)
    }

    fn page_reads(&self) -> Option<u64> {
        Some(self.ctx.page_reads())
    }

    async fn wait_busy(&self) {
        flashtree::sched::yield_busy().await;
    }

    /// Open-loop pacing: the task sleeps on its worker's timer (the worker
    /// sleeps, or waits for I/O, until the first deadline), so the CPU an
    /// open loop uses is the engine's, not a spinning generator's.
    async fn idle_until(&self, deadline: std::time::Instant) {
        flashtree::sched::sleep_until(deadline).await;
    }

    async fn get_many(
        &self,
        table: u32,
        keys: &[Vec<u8>],
        found: &mut GetManyFn<'_>,
    ) -> Result<(), KvError> {
        let tree = self.tree(table)?;
        for key in keys {
            check_key(key)?;
        }
        self.ctx
            .get_many(tree, keys, found)
            .await
            .map_err(engine_error)
    }

    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        let tree = self.tree(table)?;
        self.ctx
            .scan(tree, start, ScanDirection::Forward, f)
            .await
            .map_err(engine_error)
    }

    async fn scan_expecting(
        &self,
        table: u32,
        start: &[u8],
        entries_expected: usize,
        f: &mut ScanFn<'_>,
    ) -> Result<(), KvError> {
        let tree = self.tree(table)?;
        self.ctx
            .scan_expecting(tree, start, ScanDirection::Forward, entries_expected, f)
            .await
            .map_err(engine_error)
    }

    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        let tree = self.tree(table)?;
        self.ctx
            .scan(tree, start, ScanDirection::Backward, f)
            .await
            .map_err(engine_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashtree_peers::driver::{run_phase, PhaseSpec};
    use flashtree_peers::job::Phase;
    use flashtree_peers::workload::lookup::Lookup;
    use flashtree_peers::workload::tpcc::{Tpcc, TpccScale};
    use flashtree_peers::Workload;
    use std::path::Path;
    use std::time::Duration;

    const TINY_POOL_PAGES: u64 = 64;

    fn open(dir: &Path, pool_pages: u64, tables: u32, workers: usize) -> FlashtreeEngine {
        open_in(dir, pool_pages, tables, workers, DurabilityMode::None)
    }

    fn open_in(
        dir: &Path,
        pool_pages: u64,
        tables: u32,
        workers: usize,
        durability: DurabilityMode,
    ) -> FlashtreeEngine {
        let config = EngineConfig {
            dir: dir.to_path_buf(),
            memory_bytes: pool_pages * PAGE_SIZE as u64,
            table_count: tables,
            threads_max: 1,
            cores: Vec::new(),
            durability,
        };
        let settings = FlashtreeSettings {
            workers: Some(workers),
            tasks_per_worker: 8,
            ..FlashtreeSettings::default()
        };
        FlashtreeEngine::open(&config, &settings).expect("open flashtree")
    }

    /// A closed-loop phase of `millis` ms with `threads` (tasks per worker
    /// in a Run phase), no progress bar and no profile.
    fn phase_spec(
        dir: &Path,
        phase: Phase,
        threads: usize,
        millis: u64,
        seed: u64,
    ) -> PhaseSpec<'_> {
        PhaseSpec {
            phase,
            threads,
            duration: Duration::from_millis(millis),
            rate_ops_per_sec: None,
            seed,
            dir,
            progress: false,
            profile_dir: None,
        }
    }

    /// Page reads per operation kind: lookups of a store ~10× the 64-page
    /// pool read pages, at most the tree's depth per lookup on average, and
    /// are all counted under reads.
    #[test]
    fn page_reads_are_counted_per_operation_kind() {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path(), TINY_POOL_PAGES, 1, 1);
        let workload = Workload::Lookup(Lookup::new(20_000, None).unwrap());
        let spec = |phase| phase_spec(dir.path(), phase, 8, 300, 5);
        run_phase(&engine, &workload, &spec(Phase::Load)).unwrap();
        let run = run_phase(&engine, &workload, &spec(Phase::Run)).unwrap();
        let read = flashtree_peers::workload::OpKind::Read as usize;
        let (ops, reads) = (
            run.stats.ops_by_kind[read],
            run.stats.page_reads_by_kind[read],
        );
        assert!(ops > 100, "{ops} lookups");
        assert!(reads > ops / 2, "{reads} page reads for {ops} lookups");
        assert!(reads <= 3 * ops, "{reads} page reads for {ops} lookups");
        let others: u64 = run.stats.page_reads_by_kind.iter().sum::<u64>() - reads;
        assert_eq!(others, 0, "only lookups ran");
        Box::new(engine).close().unwrap();
    }

    /// `--tasks 2,6`: the driver runs one Run phase per value with that
    /// many tasks per worker (each task runs ops, so the distinct task
    /// indexes tell), and loads with the largest.
    #[test]
    fn tasks_sweep_runs_each_count() {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            dir: dir.path().to_path_buf(),
            memory_bytes: TINY_POOL_PAGES * PAGE_SIZE as u64,
            table_count: 1,
            threads_max: 1,
            cores: Vec::new(),
            durability: flashtree_peers::DurabilityMode::None,
        };
        let settings = FlashtreeSettings {
            workers: Some(1),
            tasks_per_worker: 6,
            tasks_sweep: vec![2, 6],
            ..FlashtreeSettings::default()
        };
        let engine = FlashtreeEngine::open(&config, &settings).unwrap();
        let workload = Workload::Lookup(Lookup::new(500, None).unwrap());
        let spec = |phase| phase_spec(dir.path(), phase, 1, 200, 3);
        let load = run_phase(&engine, &workload, &spec(Phase::Load)).unwrap();
        assert_eq!(load.tasks_per_worker, None);
        let sweep =
            flashtree_peers::driver::sweep_threads(&engine, &workload, &spec(Phase::Run), &[1])
                .unwrap();
        let tasks: Vec<Option<usize>> = sweep.iter().map(|r| r.tasks_per_worker).collect();
        assert_eq!(tasks, vec![Some(2), Some(6)]);
        assert!(sweep.iter().all(|r| r.stats.ops_count > 0));
        Box::new(engine).close().unwrap();
    }

    /// The model, batch commits included, with the log on: `Sync` (each
    /// commit waits for its group's log write) and `Buffered`.
    #[test]
    fn model_check_with_tiny_pool_when_logged() {
        for mode in [DurabilityMode::Sync, DurabilityMode::Buffered] {
            let dir = tempfile::tempdir().unwrap();
            let engine = open_in(dir.path(), TINY_POOL_PAGES, 2, 1, mode);
            let outcomes = engine
                .run_tasks(engine.tasks_per_worker, |kv, task_index, _| async move {
                    if task_index != 0 {
                        return Ok(());
                    }
                    flashtree_peers::testing::model_check(&kv, 2, 5_000, 11).await
                })
                .unwrap();
            for outcome in outcomes {
                outcome.unwrap();
            }
            let stats = engine.db().stats();
            assert!(stats.log_syncs > 0, "{mode:?}: the log was written");
            Box::new(engine).close().unwrap();
        }
    }

    #[test]
    fn model_check_with_tiny_pool() {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path(), TINY_POOL_PAGES, 2, 1);
        let outcomes = engine
            .run_tasks(engine.tasks_per_worker, |kv, task_index, _| async move {
                if task_index != 0 {
                    return Ok(());
                }
                flashtree_peers::testing::model_check(&kv, 2, 30_000, 7).await
            })
            .unwrap();
        for outcome in outcomes {
            outcome.unwrap();
        }
        assert!(
            engine.db().stats().page_writes > 0,
            "the model's data must exceed a {TINY_POOL_PAGES}-page pool"
        );
        Box::new(engine).close().unwrap();
    }

    #[test]
    fn unknown_table_and_oversized_entries_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path(), TINY_POOL_PAGES, 1, 1);
        let outcomes = engine
            .run_tasks(engine.tasks_per_worker, |kv, _, _| async move {
                let mut out = Vec::new();
                let no_table = kv.get(1, b"k", &mut out).await;
                let long_key = kv.put(0, &[1; MAX_KEY_BYTES + 1], b"v").await;
                let long_value = kv.put(0, b"k", &[1; MAX_ENTRY_BYTES]).await;
                matches!(no_table, Err(KvError::NoSuchTable { .. }))
                    && matches!(long_key, Err(KvError::TooLarge { what: "key", .. }))
                    && matches!(long_value, Err(KvError::TooLarge { what: "value", .. }))
            })
            .unwrap();
        assert!(outcomes.into_iter().all(|ok| ok));
        Box::new(engine).close().unwrap();
    }

    /// Open-loop pacing parks the task on its worker's timer: waiting
    /// 100 ms takes a poll to arm the timer and one when it fires, not one
    /// poll per turn of the worker loop (the trait's default, which yields,
    /// would be polled thousands of times and keep the worker busy).
    #[test]
    fn idle_until_parks_the_task_until_the_deadline() {
        /// Counts the polls of the future it wraps.
        struct CountPolls<'a, Fut> {
            inner: Pin<Box<Fut>>,
            polls: &'a mut u32,
        }
        impl<Fut: Future> Future for CountPolls<'_, Fut> {
            type Output = Fut::Output;
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Fut::Output> {
                *self.polls += 1;
                self.inner.as_mut().poll(cx)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path(), TINY_POOL_PAGES, 1, 1);
        let outcomes = engine
            .run_tasks(engine.tasks_per_worker, |kv, _, _| async move {
                let deadline = std::time::Instant::now() + Duration::from_millis(100);
                let mut polls = 0;
                CountPolls {
                    inner: Box::pin(kv.idle_until(deadline)),
                    polls: &mut polls,
                }
                .await;
                (polls, std::time::Instant::now() >= deadline)
            })
            .unwrap();
        for (polls, woke_after_deadline) in outcomes {
            assert!(woke_after_deadline, "idle_until returned early");
            assert!(polls <= 3, "idle_until was polled {polls} times");
        }
        Box::new(engine).close().unwrap();
    }

    #[test]
    fn panicking_task_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path(), TINY_POOL_PAGES, 1, 1);
        let result = engine.run_tasks(engine.tasks_per_worker, |_, task_index, _| async move {
            assert!(task_index != 3, "task three fails");
        });
        let message = result.unwrap_err();
        assert!(message.contains("task three fails"), "{message}");
        Box::new(engine).close().unwrap();
    }

    /// Load, run and check phases through the peers' driver; returns the
    /// records loaded and the operations run.
    fn run_workload(engine: &FlashtreeEngine, workload: &Workload, dir: &Path) -> (u64, u64) {
        let spec = |phase| phase_spec(dir, phase, 1, 500, 1);
        let load = run_phase(engine, workload, &spec(Phase::Load)).unwrap();
        let run = run_phase(engine, workload, &spec(Phase::Run)).unwrap();
        run_phase(engine, workload, &spec(Phase::Check)).unwrap();
        (load.stats.ops_count, run.stats.ops_count)
    }

    #[test]
    fn lookups_out_of_memory_on_two_workers() {
        let dir = tempfile::tempdir().unwrap();
        let workload = Workload::Lookup(Lookup::new(20_000, None).unwrap());
        let engine = open(dir.path(), TINY_POOL_PAGES, workload.table_count(), 2);
        let (loaded, ops) = run_workload(&engine, &workload, dir.path());
        assert_eq!(loaded, workload.records_count());
        assert!(ops > 0);
        assert!(engine.counters().reads_count.unwrap() > 0);
        Box::new(engine).close().unwrap();
    }

    /// TPC-C's transactions as `Sync` batch commits on two workers (each
    /// commit waits for its log, and may wait for the other worker's): the
    /// consistency checks pass after the run.
    #[test]
    fn tpcc_small_with_synced_commits_passes_consistency_checks() {
        let dir = tempfile::tempdir().unwrap();
        let workload = Workload::Tpcc(Tpcc::new(1, TpccScale::small()).unwrap());
        let engine = open_in(
            dir.path(),
            2048,
            workload.table_count(),
            2,
            DurabilityMode::Sync,
        );
        let (loaded, transactions) = run_workload(&engine, &workload, dir.path());
        assert!(loaded > 0 && transactions > 0);
        assert!(engine.db().stats().log_syncs > 0);
        Box::new(engine).close().unwrap();
    }

    #[test]
    fn tpcc_small_passes_consistency_checks() {
        let dir = tempfile::tempdir().unwrap();
        let workload = Workload::Tpcc(Tpcc::new(1, TpccScale::small()).unwrap());
        let engine = open(dir.path(), 256, workload.table_count(), 2);
        let (loaded, transactions) = run_workload(&engine, &workload, dir.path());
        assert!(loaded > 0 && transactions > 0);
        Box::new(engine).close().unwrap();
    }
}
