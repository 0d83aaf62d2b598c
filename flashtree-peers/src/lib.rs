//! flashtree-peers: side-by-side benchmarks of flashtree and peer engines
//! (RocksDB, WiredTiger, LMDB; optionally redb and fjall) with the same
//! generator code, memory budget, cores and durability (issue 4, Haas & Leis (VLDB 2023)
//! §4, Xu et al. (SYSTOR 2015)).
//!
//! Layers: [`kv`] (the interface workloads use) → [`workload`] (lookup, YCSB
//! A–F, TPC-C, generic async code) → [`job`] (one task's loop: load, timed
//! run, check) → [`engine`] (what the driver calls) → [`driver`] (phases,
//! sweep, CPU/I/O measurement) → [`compare`] (CLI args, results, report).
//!
//! # How a foreign engine (flashtree) plugs in
//!
//! 1. Implement [`Kv`] for a per-task handle. Methods are `async fn`s; return
//!    `Pending` (after arranging a wake-up) while waiting for I/O. Keys
//!    compare as bytes (memcmp); tables `0..EngineConfig::table_count` must
//!    exist after open. `scan` visits keys `>= start` ascending, `scan_rev`
//!    keys `<= start` descending, until the callback returns false.
//!    Override `idle_until` if your executor has a timer (the default yields
//!    in a loop, which spins a core between an open loop's arrivals),
//!    and `wait_busy` if it can tell a task waiting for a lock from one
//!    taking turns (flashtree's `sched::yield_busy`: a worker whose ready
//!    tasks all wait that way blocks for I/O instead of polling them).
//! 2. Implement [`Engine`] for the opened database:
//!    ```ignore
//!    impl Engine for FlashtreeEngine {
//!        fn name(&self) -> &str { "flashtree" }
//!        fn settings(&self) -> String { /* pool, workers, tasks, backend, ... */ }
//!        fn concurrency(&self) -> Concurrency {
//!            Concurrency::Tasks { workers: self.workers, tasks_per_worker: self.tasks }
//!        }
//!        fn run_job(&self, job: &Job<'_>, _threads: usize) -> Result<Vec<TaskStats>, String> {
//!            // Spawn workers × tasks; task i of n (n = workers * tasks) runs
//!            //     job.run_task(&its_own_handle, i, n).await   // -> Result<TaskStats, KvError>
//!            // Wait for all, return their TaskStats (or the first error as text).
//!        }
//!        fn counters(&self) -> EngineCounters { /* hit ratio, page reads/writes */ }
//!        fn close(self: Box<Self>) -> Result<(), String> { /* flush, close */ }
//!    }
//!    ```
//!    `run_job` is called for every phase (load, run, check); `Job::run_task`
//!    does everything else: the load part, the closed/open loop with latency
//!    histograms and the per-second timeline, or the TPC-C checks (task 0).
//!    Stopping is cooperative: tasks return once the run's time is up.
//!    The driver measures wall and CPU time around `run_job` and pins the
//!    process to `--cores` before opening the engine (threads inherit it).
//! 3. Hand the driver a factory: `Hooks { flashtree: Some(Box::new(|config:
//!    &EngineConfig| Ok(Box::new(FlashtreeEngine::open(config)?) as Box<dyn Engine>))),
//!    device_limit: Some(Box::new(|dir| iobench_random_read_iops(dir))) }`
//!    and call [`compare::run_compare`]`(&args, &hooks)`. `config.dir` is the
//!    engine's own directory, `config.memory_bytes` its buffer-pool size.
//! 4. [`testing::model_check`] runs the BTreeMap model test on any handle.
//!
//! Thread-per-request engines implement [`HandleSource`] instead and call
//! [`engine::run_job_on_threads`] from `run_job`; each thread drives its
//! handle with [`block_on`].

pub mod adapters;
pub mod cgroup;
pub mod commits;
pub mod compare;
pub mod cost;
pub mod devio;
pub mod driver;
pub mod engine;
pub mod job;
pub mod kv;
pub mod plots;
pub mod report;
pub mod rng;
pub mod space;
pub mod suite;
pub mod sys;
pub mod targets;
pub mod testing;
pub mod workload;

pub use engine::{Concurrency, DurabilityMode, Engine, EngineConfig, EngineCounters, HandleSource};
pub use job::{Job, Phase, RunControl, TaskStats};
pub use kv::{block_on, yield_now, BatchItem, GetManyFn, Kv, KvBatch, KvError, ScanFn};
pub use workload::Workload;
