//! `bench recover --engines LIST`: the same crash on every engine. For each
//! engine a child process opens it in the `sync` durability mode and
//! commits from `--threads` threads (flashtree: one worker running that
//! many tasks), printing an acknowledgement on its stdout after each
//! commit returns. After `--seconds` the parent kills the child with
//! SIGKILL, reopens the engine in this process, times the open and the
//! first read, and checks that every acknowledged commit is there. What
//! the child commits is `--workload`:
//!
//! * `puts` (the default): each thread a loop of puts over its own keys,
//!   committed in turn as a single put, a one-entry batch, and a one-entry
//!   batch with early lock release ([`Commit`]). Values: the 8-byte
//!   little-endian version (the writing thread's put number `i`) then
//!   filler, [`VALUE_BYTES`] in all. Thread `t` of `T` writes key number
//!   `t * K + i % K` (`K` = keys per thread), so the last acknowledged
//!   version of each key follows from the last acknowledged `i` of its
//!   thread; a key whose stored version is older is a lost commit.
//! * `ycsb-a`: the child loads `--keys` YCSB records, then runs YCSB-A
//!   (50% reads, 50% updates, zipfian) with the workload code of `bench
//!   compare` ([`flashtree_peers::workload::ycsb`]). Every handle is
//!   wrapped in [`Acking`], which stamps each update's value with a version
//!   (bytes 8..16, little-endian, after the record number; bytes 16..24 a
//!   check of key and version, so that load filler never reads as a
//!   version), commits updates of one key one at a time (a striped
//!   try-lock over the put, so that versions of a key rise in commit
//!   order) and prints `U <key> <version>` once the put returns. A key
//!   whose stored version is older than its highest acknowledged one is a
//!   lost commit.
//! * `tpcc`: the child loads a TPC-C database (`--warehouses`, reduced
//!   scale unless `--tpcc-full`), then runs the TPC-C mix with the
//!   transactions of `bench compare` ([`flashtree_peers::workload::tpcc`]:
//!   each New-Order, Payment and Delivery one atomic batch through
//!   `Kv::commit_releasing`). [`Acking`] prints `N <w> <d> <o>` once a
//!   batch that inserts a NEW-ORDER row returns. After the reopen the
//!   parent looks up every acknowledged order: its ORDER row, its
//!   `O_OL_CNT` ORDER-LINE rows, its ORDER-CUSTOMER entry, and its
//!   NEW-ORDER row unless the order was delivered since (a carrier set); a
//!   missing piece is a lost commit. Then it runs the TPC-C consistency
//!   conditions 1–4, as `bench compare` does after every TPC-C run.
//!
//! The YCSB and TPC-C loads run in `sync` too (batches of 64 rows, as in
//! `bench compare`) and end with a clean close; the child then reopens the
//! engine, prints `READY`, and the parent's clock starts, so the log that
//! recovery replays holds the timed run, not the load. (A load with the log
//! off, `DurabilityMode::None`, then a reopen in `sync` was tried first:
//! WiredTiger 3.2.1 then lost every acknowledged New-Order of the run.)
//!
//! "Data replayed": flashtree's own count (`DbStats::recovery`: log bytes
//! read, groups applied); for a peer, its log files on disk just before the
//! reopen, a stand-in for what its recovery reads (RocksDB `*.log` and
//! fjall `*.jnl` by length; WiredTiger's `WiredTigerLog.*`, preallocated
//! at 100 MiB, up to their last non-zero byte). LMDB and redb have no log.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use flashtree_peers::adapters::fjall::FjallEngine;
use flashtree_peers::adapters::lmdb::{LmdbEngine, LmdbSource};
use flashtree_peers::adapters::redb::RedbEngine;
use flashtree_peers::adapters::rocks::RocksEngine;
use flashtree_peers::adapters::wiredtiger::WtEngine;
use flashtree_peers::job::RUN_SECONDS_MAX;
use flashtree_peers::rng::fnv1a_u64;
use flashtree_peers::workload::tpcc::{self, Order, Row, Tpcc, TpccScale};
use flashtree_peers::workload::ycsb::{self, Ycsb, YcsbKind};
use flashtree_peers::{
    block_on, DurabilityMode, Engine, EngineConfig, GetManyFn, HandleSource, Job, Kv, KvBatch,
    KvError, Phase, RunControl, ScanFn, Workload,
};

use flashtree::db::{WriteBatch, WriteOptions};

use crate::adapter::{FlashtreeEngine, FlashtreeSettings, TASKS_PER_WORKER_MAX};

/// Bytes of each value of the `puts` workload.
const VALUE_BYTES: usize = 100;
/// The environment variable that makes `bench recover` the writing child of
/// engine `<value>`.
const KILL_CHILD_ENV: &str = "FLASHTREE_KILL_CHILD";
/// Seed of the YCSB and TPC-C runs.
const RUN_SEED: u64 = 0x5EC0_7E55;
/// Striped locks that order the updates of one YCSB key.
const VERSION_STRIPES: usize = 1 << 12;
/// Mixed into a YCSB version's check (bytes 16..24 of a stamped value).
const VERSION_CHECK_SALT: u64 = 0x7E55_10CA_11ED_0001;
/// Bytes of a stamped YCSB value's prefix: record number, version, check.
const STAMP_BYTES: usize = 24;

/// What the writing child commits (`bench recover --engines --workload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RecoverWorkload {
    /// Synced puts, each thread over its own keys (single put, batch, batch
    /// with early lock release, in turn).
    #[default]
    Puts,
    /// YCSB-A (50% reads, 50% updates, zipfian) over `--keys` loaded records.
    YcsbA,
    /// The TPC-C mix over `--warehouses` loaded warehouses.
    Tpcc,
}

impl RecoverWorkload {
    /// The name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            RecoverWorkload::Puts => "puts",
            RecoverWorkload::YcsbA => "ycsb-a",
            RecoverWorkload::Tpcc => "tpcc",
        }
    }
}

/// What `bench recover --engines` needs.
#[derive(Debug, Clone)]
pub struct KillSpec {
    pub engines: Vec<String>,
    pub dir: std::path::PathBuf,
    pub memory_bytes: u64,
    pub threads: usize,
    pub keys: u64,
    pub seconds: f64,
    pub json: bool,
    pub workload: RecoverWorkload,
    /// TPC-C warehouses.
    pub warehouses: u32,
    /// TPC-C at the specification's scale instead of the reduced one.
    pub tpcc_full: bool,
}

impl KillSpec {
    /// Checks the numbers and that the workload can be built.
    pub fn validate(&self) -> Result<(), String> {
        self.workload().map(drop)
    }

    /// Checks the numbers (also in the child, which parses the same
    /// arguments), and builds the YCSB or TPC-C workload (None: `puts`).
    fn workload(&self) -> Result<Option<Workload>, String> {
        if self.threads == 0 || self.keys == 0 {
            return Err("--threads and --keys must be > 0".into());
        }
        let seconds_ok = self.seconds.is_finite()
            && self.seconds > 0.0
            && self.seconds <= RUN_SECONDS_MAX as f64;
        if !seconds_ok {
            return Err(format!(
                "--seconds must be > 0 and at most {RUN_SECONDS_MAX}"
            ));
        }
        if self.threads > TASKS_PER_WORKER_MAX {
            return Err(format!("--threads must be at most {TASKS_PER_WORKER_MAX}"));
        }
        Ok(match self.workload {
            RecoverWorkload::Puts => None,
            RecoverWorkload::YcsbA => Some(Workload::Ycsb(
                Ycsb::new(YcsbKind::A, self.keys).map_err(|e| format!("--keys: {e}"))?,
            )),
            RecoverWorkload::Tpcc => {
                let scale = if self.tpcc_full {
                    TpccScale::full()
                } else {
                    TpccScale::small()
                };
                Some(Workload::Tpcc(
                    Tpcc::new(self.warehouses, scale).map_err(|e| format!("--warehouses: {e}"))?,
                ))
            }
        })
    }
}

/// One engine's row.
#[derive(Debug, serde::Serialize)]
struct KillRow {
    engine: String,
    workload: String,
    durability: String,
    /// Commits the child acknowledged: puts, YCSB updates, or TPC-C
    /// New-Orders.
    acknowledged_commits: u64,
    acknowledged_commits_per_sec: f64,
    reopen_seconds: f64,
    first_read_seconds: f64,
    /// None: the engine has no log.
    data_replayed_bytes: Option<u64>,
    /// What `data_replayed_bytes` counts.
    data_replayed_what: String,
    /// Log groups recovery applied (flashtree only).
    log_groups_replayed: Option<u64>,
    bytes_on_disk: u64,
    /// Keys (puts, YCSB) or New-Orders (TPC-C) checked.
    keys_checked: u64,
    lost_acknowledged_commits: u64,
    /// TPC-C: "held" or "failed"; None for the other workloads.
    consistency_checks: Option<String>,
    /// TPC-C: the violated condition, if any.
    consistency_error: Option<String>,
}

fn key_of(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

fn value_of(version: u64) -> Vec<u8> {
    let mut value = version.to_le_bytes().to_vec();
    value.resize(VALUE_BYTES, (version % 251) as u8);
    value
}

/// How a writer commits one put: the ways a workload commits, taken in
/// turn, so that the kill meets each of them.
#[derive(Clone, Copy)]
enum Commit {
    /// A single put.
    Put,
    /// A one-entry batch ([`Kv::commit`]).
    Batch,
    /// A one-entry batch with early release ([`Kv::commit_releasing`]):
    /// applied first, acknowledged once durable.
    Releasing,
}

impl Commit {
    fn of(i: u64) -> Commit {
        [Commit::Put, Commit::Batch, Commit::Releasing][(i % 3) as usize]
    }
}

/// A put-and-get handle on one thread, whatever the engine.
trait PutGet {
    fn put(&self, key: &[u8], value: &[u8], way: Commit) -> Result<(), String>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

struct PeerHandle<H: Kv>(H);

impl<H: Kv> PutGet for PeerHandle<H> {
    fn put(&self, key: &[u8], value: &[u8], way: Commit) -> Result<(), String> {
        let mut batch = flashtree_peers::KvBatch::new();
        batch.put(0, key, value);
        block_on(async {
            match way {
                Commit::Put => self.0.put(0, key, value).await,
                Commit::Batch => self.0.commit(&batch).await,
                Commit::Releasing => self.0.commit_releasing(&batch, &mut || {}).await,
            }
        })
        .map_err(|e| e.to_string())
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut out = Vec::new();
        let found = block_on(self.0.get(0, key, &mut out)).map_err(|e| e.to_string())?;
        Ok(found.then_some(out))
    }
}

struct FlashtreeHandle<'a>(&'a flashtree::db::Db, flashtree::db::Tree);

impl PutGet for FlashtreeHandle<'_> {
    /// The batch ways as the flashtree adapter commits them: `Releasing`
    /// applies the batch unsynced, then waits with an empty synced write.
    fn put(&self, key: &[u8], value: &[u8], way: Commit) -> Result<(), String> {
        let (db, tree) = (self.0, self.1);
        let mut batch = WriteBatch::new();
        batch.put(tree, key, value).map_err(|e| e.to_string())?;
        match way {
            Commit::Put => db.put(tree, key, value),
            Commit::Batch => db.write(&batch, WriteOptions::default()),
            Commit::Releasing => db
                .write(&batch, WriteOptions { sync: Some(false) })
                .and_then(|()| db.write(&WriteBatch::new(), WriteOptions::default())),
        }
        .map_err(|e| e.to_string())
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.0.get(self.1, key).map_err(|e| e.to_string())
    }
}

/// The body of each task (or thread) of a run on any engine: what
/// `Job::run_task` is to `Engine::run_job`, for code of this module.
#[allow(async_fn_in_trait)]
trait TaskBody: Send + Sync + 'static {
    type Out: Send + 'static;
    async fn run<K: Kv>(&self, kv: &K, task_index: usize, task_count: usize) -> Self::Out;
}

/// Runs `body` on `threads` threads of `source`, one handle each.
fn run_on_threads<S: HandleSource, B: TaskBody>(
    source: &S,
    threads: usize,
    body: &B,
) -> Result<Vec<B::Out>, String> {
    std::thread::scope(|scope| {
        let joins = (0..threads)
            .map(|index| {
                std::thread::Builder::new()
                    .name(format!("kill-{index}"))
                    .spawn_scoped(scope, move || -> Result<B::Out, String> {
                        let handle = source.open_handle()?;
                        Ok(block_on(body.run(&handle, index, threads)))
                    })
                    .map_err(|e| format!("cannot spawn thread {index}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        joins
            .into_iter()
            .map(|join| join.join().map_err(|_| "a thread panicked".to_string())?)
            .collect()
    })
}

/// An engine opened by name, with a way to get a handle on any thread.
enum Opened {
    Flashtree(Box<FlashtreeEngine>),
    Rocks(RocksEngine),
    Wt(WtEngine),
    Lmdb(LmdbEngine),
    Redb(RedbEngine),
    Fjall(FjallEngine),
}

impl Opened {
    /// Opens engine `name`; flashtree with one worker running
    /// `tasks_per_worker` tasks (in loads and in [`Opened::run_body`]).
    fn open(name: &str, config: &EngineConfig, tasks_per_worker: usize) -> Result<Opened, String> {
        std::fs::create_dir_all(&config.dir)
            .map_err(|e| format!("cannot create {}: {e}", config.dir.display()))?;
        Ok(match name {
            "flashtree" => Opened::Flashtree(Box::new(FlashtreeEngine::open(
                config,
                &FlashtreeSettings {
                    workers: Some(1),
                    tasks_per_worker,
                    ..FlashtreeSettings::default()
                },
            )?)),
            "rocksdb" => Opened::Rocks(RocksEngine::open(config)?),
            "wiredtiger" => Opened::Wt(WtEngine::open(config)?),
            "lmdb" => Opened::Lmdb(LmdbEngine::open(config)?),
            "redb" => Opened::Redb(RedbEngine::open(config)?),
            "fjall" => Opened::Fjall(FjallEngine::open(config)?),
            other => return Err(format!("unknown engine {other:?}")),
        })
    }

    /// The engine as the driver of `bench compare` sees it.
    fn engine(&self) -> &dyn Engine {
        match self {
            Opened::Flashtree(e) => e.as_ref(),
            Opened::Rocks(e) => e,
            Opened::Wt(e) => e,
            Opened::Lmdb(e) => e,
            Opened::Redb(e) => e,
            Opened::Fjall(e) => e,
        }
    }

    /// Runs `body` on `tasks` concurrent handles (peers: threads;
    /// flashtree: tasks of its one worker) and returns what each returned.
    fn run_body<B: TaskBody>(&self, tasks: usize, body: Arc<B>) -> Result<Vec<B::Out>, String> {
        match self {
            Opened::Flashtree(engine) => engine.run_tasks(tasks, move |kv, index, count| {
                let body = Arc::clone(&body);
                async move { body.run(&kv, index, count).await }
            }),
            Opened::Rocks(engine) => run_on_threads(engine, tasks, body.as_ref()),
            Opened::Wt(engine) => run_on_threads(engine, tasks, body.as_ref()),
            Opened::Lmdb(engine) => run_on_threads(&LmdbSource(engine), tasks, body.as_ref()),
            Opened::Redb(engine) => run_on_threads(engine, tasks, body.as_ref()),
            Opened::Fjall(engine) => run_on_threads(engine, tasks, body.as_ref()),
        }
    }

    /// Runs `f` with a handle of this thread's own.
    fn with_handle<T>(&self, f: impl FnOnce(&dyn PutGet) -> T) -> Result<T, String> {
        fn peer<S: HandleSource, T>(
            source: &S,
            f: impl FnOnce(&dyn PutGet) -> T,
        ) -> Result<T, String> {
            Ok(f(&PeerHandle(source.open_handle()?)))
        }
        match self {
            Opened::Flashtree(engine) => {
                let db = engine.db();
                let tree = db.tree("t0").map_err(|e| e.to_string())?;
                Ok(f(&FlashtreeHandle(db, tree)))
            }
            Opened::Rocks(engine) => peer(engine, f),
            Opened::Wt(engine) => peer(engine, f),
            Opened::Lmdb(engine) => peer(&LmdbSource(engine), f),
            Opened::Redb(engine) => peer(engine, f),
            Opened::Fjall(engine) => peer(engine, f),
        }
    }

    fn close(self) -> Result<(), String> {
        let engine: Box<dyn Engine> = match self {
            Opened::Flashtree(e) => e,
            Opened::Rocks(e) => Box::new(e),
            Opened::Wt(e) => Box::new(e),
            Opened::Lmdb(e) => Box::new(e),
            Opened::Redb(e) => Box::new(e),
            Opened::Fjall(e) => Box::new(e),
        };
        engine.close()
    }
}

fn config(
    spec: &KillSpec,
    engine: &str,
    table_count: u32,
    durability: DurabilityMode,
) -> EngineConfig {
    EngineConfig {
        dir: spec.dir.join(engine),
        memory_bytes: spec.memory_bytes,
        table_count,
        threads_max: spec.threads,
        cores: Vec::new(),
        durability,
    }
}

fn keys_per_thread(spec: &KillSpec) -> u64 {
    (spec.keys / spec.threads as u64).max(1)
}

/// True in the writing child (then [`run_child`] is what to run).
pub fn child_engine() -> Option<String> {
    std::env::var(KILL_CHILD_ENV).ok()
}

/// The writing child of `engine`: prints `READY` once it writes, then
/// writes until killed, printing an acknowledgement after each commit.
pub fn run_child(spec: &KillSpec, engine: &str) -> Result<(), String> {
    match spec.workload()? {
        None => run_puts_child(spec, engine),
        Some(workload) => run_workload_child(spec, engine, workload),
    }
}

/// `puts`: prints `A <thread> <i>` after each put returns.
fn run_puts_child(spec: &KillSpec, engine: &str) -> Result<(), String> {
    let opened = Opened::open(
        engine,
        &config(spec, engine, 1, DurabilityMode::Sync),
        spec.threads,
    )?;
    let per_thread = keys_per_thread(spec);
    println!("READY");
    std::thread::scope(|scope| {
        let joins: Vec<_> = (0..spec.threads as u64)
            .map(|thread| {
                let opened = &opened;
                scope.spawn(move || -> Result<(), String> {
                    opened.with_handle(|handle| -> Result<(), String> {
                        let stdout = std::io::stdout();
                        for i in 0u64.. {
                            let key = key_of(thread * per_thread + i % per_thread);
                            handle.put(&key, &value_of(i), Commit::of(i))?;
                            let mut out = stdout.lock();
                            writeln!(out, "A {thread} {i}")
                                .and_then(|()| out.flush())
                                .map_err(|e| format!("acknowledging: {e}"))?;
                        }
                        Ok(())
                    })?
                })
            })
            .collect();
        for join in joins {
            join.join().map_err(|_| "a writing thread panicked")??;
        }
        Ok(())
    })
}

/// `ycsb-a`, `tpcc`: loads (in `sync`, then a clean close), reopens,
/// prints `READY` and runs the workload through [`Acking`]
/// handles until killed.
fn run_workload_child(spec: &KillSpec, engine: &str, workload: Workload) -> Result<(), String> {
    let tables = workload.table_count();
    let loading = Opened::open(
        engine,
        &config(spec, engine, tables, DurabilityMode::Sync),
        spec.threads,
    )?;
    let control = RunControl::new(Duration::from_secs(RUN_SECONDS_MAX), None, RUN_SEED);
    let load = Job {
        workload: &workload,
        phase: Phase::Load,
        control: &control,
    };
    loading
        .engine()
        .run_job(&load, spec.threads)
        .map_err(|e| format!("{engine}: load: {e}"))?;
    loading.close()?;
    let opened = Opened::open(
        engine,
        &config(spec, engine, tables, DurabilityMode::Sync),
        spec.threads,
    )?;
    println!("READY");
    let body = Arc::new(RunBody {
        versioned: matches!(workload, Workload::Ycsb(_)),
        workload,
        control: RunControl::new(Duration::from_secs(RUN_SECONDS_MAX), None, RUN_SEED),
        stripes: (0..VERSION_STRIPES)
            .map(|_| AtomicBool::new(false))
            .collect(),
        version: AtomicU64::new(0),
    });
    for outcome in opened.run_body(spec.threads, body)? {
        outcome?;
    }
    Ok(())
}

/// The child's run: `Job::run_task` of the workload's Run phase on an
/// [`Acking`] handle.
struct RunBody {
    workload: Workload,
    control: RunControl,
    /// YCSB: stamp and acknowledge updates.
    versioned: bool,
    stripes: Vec<AtomicBool>,
    /// The last version handed out (versions start at 1).
    version: AtomicU64,
}

impl TaskBody for RunBody {
    type Out = Result<(), String>;
    async fn run<K: Kv>(&self, kv: &K, task_index: usize, task_count: usize) -> Self::Out {
        let acking = Acking { kv, run: self };
        let job = Job {
            workload: &self.workload,
            phase: Phase::Run,
            control: &self.control,
        };
        job.run_task(&acking, task_index, task_count)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// A handle that acknowledges what it commits on stdout: each YCSB update
/// (stamped with a version, see the module doc) as `U <key> <version>`,
/// each batch that inserts a TPC-C NEW-ORDER row as `N <w> <d> <o>`.
/// Everything else goes straight to the engine's handle.
struct Acking<'a, K: Kv> {
    kv: &'a K,
    run: &'a RunBody,
}

fn ack(line: std::fmt::Arguments<'_>) -> Result<(), KvError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| KvError::Engine {
            engine: "stdout",
            message: format!("acknowledging: {e}"),
        })
}

/// The check of version `version` of key number `key` (bytes 16..24).
fn version_check(key: u64, version: u64) -> u64 {
    fnv1a_u64(key ^ version.rotate_left(29) ^ VERSION_CHECK_SALT)
}

/// The version a stored YCSB value carries (0: none, e.g. as loaded).
fn stamped_version(key: u64, value: &[u8]) -> u64 {
    let word = |at: usize| {
        value
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    match (word(8), word(16)) {
        (Some(version), Some(check)) if check == version_check(key, version) => version,
        _ => 0,
    }
}

impl<K: Kv> Acking<'_, K> {
    /// Acknowledges the New-Order of `batch`, if it holds one.
    fn ack_new_order(&self, batch: &KvBatch) -> Result<(), KvError> {
        for (table, key, value) in batch.iter() {
            if table == tpcc::table::NEW_ORDER && value.is_some() {
                let (w, d, o) = (
                    tpcc::key_part(key, 0)?,
                    tpcc::key_part(key, 1)?,
                    tpcc::key_part(key, 2)?,
                );
                ack(format_args!("N {w} {d} {o}"))?;
            }
        }
        Ok(())
    }

    /// A YCSB update: stamped with the next version under its key's stripe
    /// lock, acknowledged once the put returns.
    async fn versioned_put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let key_number = <[u8; 8]>::try_from(key)
            .map(u64::from_be_bytes)
            .map_err(|_| KvError::Corrupt(format!("YCSB key of {} bytes", key.len())))?;
        let stripe = &self.run.stripes[(key_number % VERSION_STRIPES as u64) as usize];
        while stripe
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.kv.wait_busy().await;
        }
        let version = self.run.version.fetch_add(1, Ordering::Relaxed) + 1;
        let mut stamped = value.to_vec();
        if stamped.len() < STAMP_BYTES {
            stamped.resize(STAMP_BYTES, 0);
        }
        stamped[8..16].copy_from_slice(&version.to_le_bytes());
        stamped[16..24].copy_from_slice(&version_check(key_number, version).to_le_bytes());
        let result = self.kv.put(table, key, &stamped).await;
        stripe.store(false, Ordering::Release);
        result?;
        ack(format_args!("U {key_number} {version}"))
    }
}

impl<K: Kv> Kv for Acking<'_, K> {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        self.kv.get(table, key, out).await
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        if self.run.versioned && table == 0 {
            self.versioned_put(table, key, value).await
        } else {
            self.kv.put(table, key, value).await
        }
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        self.kv.delete(table, key).await
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        self.kv.commit(batch).await?;
        self.ack_new_order(batch)
    }
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        self.kv.commit_releasing(batch, applied).await?;
        self.ack_new_order(batch)
    }
    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        self.kv.scan(table, start, f).await
    }
    async fn scan_expecting(
        &self,
        table: u32,
        start: &[u8],
        entries_expected: usize,
        f: &mut ScanFn<'_>,
    ) -> Result<(), KvError> {
        self.kv
            .scan_expecting(table, start, entries_expected, f)
            .await
    }
    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        self.kv.scan_rev(table, start, f).await
    }
    async fn get_many(
        &self,
        table: u32,
        keys: &[Vec<u8>],
        found: &mut GetManyFn<'_>,
    ) -> Result<(), KvError> {
        self.kv.get_many(table, keys, found).await
    }
    fn page_reads(&self) -> Option<u64> {
        self.kv.page_reads()
    }
    async fn wait_busy(&self) {
        self.kv.wait_busy().await
    }
    async fn idle_until(&self, deadline: Instant) {
        self.kv.idle_until(deadline).await
    }
}

/// What the parent read from the child's stdout.
#[derive(Default)]
struct Acks {
    /// Acknowledgement lines.
    count: u64,
    /// `puts`: the last acknowledged put number of each thread.
    puts: Vec<Option<u64>>,
    /// `ycsb-a`: the highest acknowledged version of each key number.
    versions: HashMap<u64, u64>,
    /// `tpcc`: the acknowledged New-Orders (warehouse, district, order).
    new_orders: Vec<(u32, u32, u32)>,
}

impl Acks {
    /// Takes one line; a line cut short by the kill does not parse and is
    /// ignored.
    fn take(&mut self, line: &str) {
        let mut parts = line.split(' ');
        let kind = parts.next();
        let numbers: Vec<u64> = parts.map_while(|p| p.parse().ok()).collect();
        match (kind, numbers.as_slice()) {
            (Some("A"), &[thread, i]) if (thread as usize) < self.puts.len() => {
                let last = &mut self.puts[thread as usize];
                *last = Some(last.map_or(i, |l| l.max(i)));
            }
            (Some("U"), &[key, version]) => {
                let highest = self.versions.entry(key).or_insert(0);
                *highest = (*highest).max(version);
            }
            (Some("N"), &[w, d, o]) => {
                let part = |n: u64| u32::try_from(n).ok();
                match (part(w), part(d), part(o)) {
                    (Some(w), Some(d), Some(o)) => self.new_orders.push((w, d, o)),
                    _ => return,
                }
            }
            _ => return,
        }
        self.count += 1;
    }
}

/// How much of a log file holds log: its length, but no more than its
/// allocated bytes (RocksDB preallocates past the end).
fn log_length(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |meta| meta.len().min(meta.blocks() * 512))
}

/// How much of a preallocated, zero-filled log file holds log: up to its
/// last non-zero byte (WiredTiger's log files are 100 MiB from the start).
fn log_written(path: &Path) -> u64 {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 1 << 20;
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let mut end = file.metadata().map_or(0, |meta| meta.len());
    let mut buffer = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buffer[..(end - start) as usize];
        if file.read_exact_at(chunk, start).is_err() {
            return end;
        }
        if let Some(last) = chunk.iter().rposition(|&byte| byte != 0) {
            return start + last as u64 + 1;
        }
        end = start;
    }
    0
}

/// The sum of `measure` over the files under `path` whose name `is_log`
/// accepts.
fn log_bytes_under(path: &Path, is_log: fn(&str) -> bool, measure: fn(&Path) -> u64) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => log_bytes_under(&entry.path(), is_log, measure),
            Ok(_) if is_log(&entry.file_name().to_string_lossy()) => measure(&entry.path()),
            _ => 0,
        })
        .sum()
}

/// A peer's log on disk (the stand-in for its data replayed) and what it
/// counts; None for flashtree, which says what it replayed.
fn peer_log(engine: &str, dir: &Path) -> Option<(Option<u64>, &'static str)> {
    Some(match engine {
        "rocksdb" => (
            Some(log_bytes_under(dir, |name| name.ends_with(".log"), log_length)),
            "WAL files (*.log) on disk before the reopen",
        ),
        "wiredtiger" => (
            Some(log_bytes_under(
                dir,
                |name| name.starts_with("WiredTigerLog."),
                log_written,
            )),
            "log files (WiredTigerLog.*, preallocated) up to their last non-zero byte, before the reopen",
        ),
        "fjall" => (
            Some(log_bytes_under(dir, |name| name.ends_with(".jnl"), log_length)),
            "journal files (*.jnl) on disk before the reopen",
        ),
        "lmdb" => (
            None,
            "no log: copy-on-write B-tree, opens at its last synced meta page",
        ),
        "redb" => (
            None,
            "no log: copy-on-write B-tree file (after an unclean shutdown it rebuilds its allocator state)",
        ),
        _ => return None,
    })
}

/// The parent's check after the reopen: the first read (timed), every
/// acknowledged commit, and for TPC-C the consistency conditions. Runs on
/// one task.
struct VerifyBody {
    check: Verify,
}

enum Verify {
    Ycsb(HashMap<u64, u64>),
    Tpcc {
        workload: Workload,
        new_orders: Vec<(u32, u32, u32)>,
    },
}

struct Verified {
    first_read_at: Instant,
    checked: u64,
    lost: u64,
    /// TPC-C: the consistency conditions' outcome.
    consistency: Option<Result<(), String>>,
}

impl TaskBody for VerifyBody {
    type Out = Result<Verified, String>;
    async fn run<K: Kv>(&self, kv: &K, _task_index: usize, _task_count: usize) -> Self::Out {
        let verified: Result<Verified, KvError> = async {
            let mut out = Vec::new();
            match &self.check {
                Verify::Ycsb(versions) => {
                    kv.get(0, &ycsb::record_key(0), &mut out).await?;
                    let first_read_at = Instant::now();
                    let mut lost = 0;
                    for (&key, &acked) in versions {
                        let found = kv.get(0, &key.to_be_bytes(), &mut out).await?;
                        let stored = if found { stamped_version(key, &out) } else { 0 };
                        lost += (stored < acked) as u64;
                    }
                    Ok(Verified {
                        first_read_at,
                        checked: versions.len() as u64,
                        lost,
                        consistency: None,
                    })
                }
                Verify::Tpcc {
                    workload,
                    new_orders,
                } => {
                    kv.get(tpcc::table::WAREHOUSE, &tpcc::key(&[1]), &mut out)
                        .await?;
                    let first_read_at = Instant::now();
                    let mut lost = 0;
                    for &(w, d, o) in new_orders {
                        lost += !new_order_is_there(kv, w, d, o, &mut out).await? as u64;
                    }
                    let consistency = workload.check(kv).await.map_err(|e| e.to_string());
                    Ok(Verified {
                        first_read_at,
                        checked: new_orders.len() as u64,
                        lost,
                        consistency: Some(consistency),
                    })
                }
            }
        }
        .await;
        verified.map_err(|e| e.to_string())
    }
}

/// True if New-Order (w, d, o) is all there: its ORDER row, `O_OL_CNT`
/// ORDER-LINE rows, its ORDER-CUSTOMER entry, and its NEW-ORDER row unless
/// a Delivery has since delivered it (set its carrier, in the same batch
/// that deleted the row).
async fn new_order_is_there<K: Kv>(
    kv: &K,
    w: u32,
    d: u32,
    o: u32,
    out: &mut Vec<u8>,
) -> Result<bool, KvError> {
    let order_key = tpcc::key(&[w, d, o]);
    if !kv.get(tpcc::table::ORDER, &order_key, out).await? {
        return Ok(false);
    }
    let order = Order::decode(out)?;
    let lines = tpcc::scan_prefix(
        kv,
        tpcc::table::ORDER_LINE,
        &order_key,
        &order_key,
        false,
        usize::MAX,
    )
    .await?;
    let new_order_row = kv.get(tpcc::table::NEW_ORDER, &order_key, out).await?;
    let customer = u32::try_from(order.c_id).unwrap_or(u32::MAX);
    let by_customer = kv
        .get(
            tpcc::table::ORDER_CUSTOMER,
            &tpcc::key(&[w, d, customer, o]),
            out,
        )
        .await?;
    Ok(lines.len() as i64 == order.ol_cnt
        && by_customer
        && (new_order_row || order.carrier_id != 0))
}

/// Starts the writing child of `engine`, waits until it is ready, lets it
/// write for `--seconds`, kills it, and returns what it acknowledged and
/// for how long it wrote.
fn write_and_kill(spec: &KillSpec, engine: &str) -> Result<(Acks, f64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(KILL_CHILD_ENV, engine)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the writing child: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    // Read acknowledgements on a thread, so that the kill comes on time
    // however fast they arrive.
    let (ready_tx, ready_rx) = mpsc::channel();
    let threads = spec.threads;
    let reader = std::thread::spawn(move || {
        let mut acks = Acks {
            puts: vec![None; threads],
            ..Acks::default()
        };
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if line == "READY" {
                let _ = ready_tx.send(Instant::now());
            } else {
                acks.take(&line);
            }
        }
        acks
    });
    let ended_early = |child: &mut std::process::Child, when: &str| {
        let status = child
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        format!("{engine}: the writing child ended {when} ({status})")
    };
    // The load (ycsb-a, tpcc) comes before READY; the clock starts there.
    let ready_at = loop {
        match ready_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(at) => break at,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(_)) = child.try_wait() {
                    return Err(ended_early(&mut child, "before it was ready"));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(ended_early(&mut child, "before it was ready"));
            }
        }
    };
    let bar = crate::util::progress_bar((spec.seconds * 10.0) as u64, engine);
    while ready_at.elapsed().as_secs_f64() < spec.seconds {
        if let Ok(Some(_)) = child.try_wait() {
            bar.finish_and_clear();
            return Err(ended_early(&mut child, "early"));
        }
        std::thread::sleep(Duration::from_millis(100));
        bar.inc(1);
    }
    bar.finish_and_clear();
    child.kill().map_err(|e| format!("{engine}: kill: {e}"))?;
    let writing_seconds = ready_at.elapsed().as_secs_f64();
    let _ = child.wait();
    let acks = reader.join().map_err(|_| "the reader panicked")?;
    Ok((acks, writing_seconds))
}

/// `puts`: reads every key back (with the handle of [`Opened::with_handle`]).
fn verify_puts(
    spec: &KillSpec,
    opened: &Opened,
    open_start: Instant,
    last: &[Option<u64>],
) -> Result<(f64, u64, u64), String> {
    let per_thread = keys_per_thread(spec);
    opened.with_handle(|handle| {
        handle.get(&key_of(0))?;
        let first_read_seconds = open_start.elapsed().as_secs_f64();
        let (mut lost, mut checked) = (0u64, 0u64);
        for (thread, last) in last.iter().enumerate() {
            let Some(last) = *last else { continue };
            for slot in 0..per_thread.min(last + 1) {
                // The last version of this key at or before `last`.
                let acked = last - (last + per_thread - slot) % per_thread;
                let key = key_of(thread as u64 * per_thread + slot);
                let stored = handle.get(&key)?.and_then(|v| {
                    v.get(..8)
                        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                });
                checked += 1;
                if stored.is_none_or(|version| version < acked) {
                    lost += 1;
                }
            }
        }
        Ok::<_, String>((first_read_seconds, lost, checked))
    })?
}

fn run_engine(spec: &KillSpec, engine: &str) -> Result<KillRow, String> {
    let dir = spec.dir.join(engine);
    let _ = std::fs::remove_dir_all(&dir);
    let workload = spec.workload()?;
    let tables = workload.as_ref().map_or(1, Workload::table_count);
    let (acks, writing_seconds) = write_and_kill(spec, engine)?;
    let peer_log = peer_log(engine, &dir);
    let bytes_on_disk = flashtree_peers::space::disk_usage(&dir)?.allocated_bytes;
    let open_start = Instant::now();
    let opened = Opened::open(
        engine,
        &config(spec, engine, tables, DurabilityMode::Sync),
        spec.threads,
    )
    .map_err(|e| format!("{engine}: reopen after the kill: {e}"))?;
    let reopen_seconds = open_start.elapsed().as_secs_f64();
    let (first_read_seconds, lost, checked, consistency) = match workload {
        None => {
            let (first_read_seconds, lost, checked) =
                verify_puts(spec, &opened, open_start, &acks.puts)?;
            (first_read_seconds, lost, checked, None)
        }
        Some(workload) => {
            let check = match workload {
                Workload::Tpcc(_) => Verify::Tpcc {
                    workload,
                    new_orders: acks.new_orders,
                },
                _ => Verify::Ycsb(acks.versions),
            };
            let verified = opened
                .run_body(1, Arc::new(VerifyBody { check }))?
                .pop()
                .ok_or("the check ran on no task")??;
            let first_read_seconds = verified
                .first_read_at
                .duration_since(open_start)
                .as_secs_f64();
            (
                first_read_seconds,
                verified.lost,
                verified.checked,
                verified.consistency,
            )
        }
    };
    let (replayed, replayed_what, groups) = match &opened {
        Opened::Flashtree(e) => {
            let recovery = e.db().stats().recovery;
            (
                Some(recovery.log_bytes),
                "log bytes recovery read (DbStats::recovery)",
                Some(recovery.groups),
            )
        }
        _ => {
            let (bytes, what) = peer_log.ok_or_else(|| format!("unknown engine {engine:?}"))?;
            (bytes, what, None)
        }
    };
    opened.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(KillRow {
        engine: engine.to_string(),
        workload: spec.workload.name().to_string(),
        durability: flashtree_peers::adapters::durability(engine, DurabilityMode::Sync).into(),
        acknowledged_commits: acks.count,
        acknowledged_commits_per_sec: acks.count as f64 / writing_seconds.max(1e-9),
        reopen_seconds,
        first_read_seconds,
        data_replayed_bytes: replayed,
        data_replayed_what: replayed_what.to_string(),
        log_groups_replayed: groups,
        bytes_on_disk,
        keys_checked: checked,
        lost_acknowledged_commits: lost,
        consistency_checks: consistency
            .as_ref()
            .map(|c| if c.is_ok() { "held" } else { "failed" }.to_string()),
        consistency_error: consistency.and_then(Result::err),
    })
}

/// Runs the kill test on every engine of `spec`, prints one table (or JSON
/// lines), and fails if any engine lost an acknowledged commit or broke a
/// TPC-C consistency condition.
pub fn run(spec: &KillSpec) -> Result<(), String> {
    spec.workload()?;
    let mut rows = Vec::new();
    for engine in &spec.engines {
        rows.push(run_engine(spec, engine)?);
    }
    if spec.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row).map_err(|e| e.to_string())?);
        }
    } else {
        print_table(&rows);
    }
    let mut failures: Vec<String> = rows
        .iter()
        .filter(|r| r.lost_acknowledged_commits > 0)
        .map(|r| {
            format!(
                "{} lost {} acknowledged commits",
                r.engine, r.lost_acknowledged_commits
            )
        })
        .collect();
    failures.extend(rows.iter().filter_map(|r| {
        let error = r.consistency_error.as_ref()?;
        Some(format!("{}: {error}", r.engine))
    }));
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn print_table(rows: &[KillRow]) {
    let what = match rows.first().map(|r| r.workload.as_str()) {
        Some("tpcc") => {
            "acknowledged: New-Orders; checked: New-Orders (order, lines, index, new-order row); \
             consistency: TPC-C conditions 1-4 after the reopen"
        }
        Some("ycsb-a") => "acknowledged: updates; checked: keys updated",
        _ => "acknowledged: puts; checked: keys written",
    };
    println!(
        "{:<12} {:<8} {:>10} {:>10} {:>9} {:>12} {:>11} {:>11} {:>9} {:>6} {:>11}",
        "engine",
        "workload",
        "acked",
        "acked/s",
        "reopen s",
        "first read s",
        "replayed MB",
        "MB on disk",
        "checked",
        "lost",
        "consistency"
    );
    for r in rows {
        let replayed = r
            .data_replayed_bytes
            .map_or("no log".to_string(), |b| format!("{:.2}", b as f64 / 1e6));
        println!(
            "{:<12} {:<8} {:>10} {:>10.0} {:>9.3} {:>12.3} {:>11} {:>11.1} {:>9} {:>6} {:>11}",
            r.engine,
            r.workload,
            r.acknowledged_commits,
            r.acknowledged_commits_per_sec,
            r.reopen_seconds,
            r.first_read_seconds,
            replayed,
            r.bytes_on_disk as f64 / 1e6,
            r.keys_checked,
            r.lost_acknowledged_commits,
            r.consistency_checks.as_deref().unwrap_or("-")
        );
    }
    println!("{what}");
    println!("replayed:");
    for r in rows {
        let groups = r
            .log_groups_replayed
            .map_or(String::new(), |g| format!(", {g} log groups"));
        println!("  {}: {}{groups}", r.engine, r.data_replayed_what);
    }
    println!("durability sync for every engine:");
    for r in rows {
        println!("  {}: {}", r.engine, r.durability);
    }
    for r in rows {
        if let Some(error) = &r.consistency_error {
            println!("{}: {error}", r.engine);
        }
    }
}
