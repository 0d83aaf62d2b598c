//! The public API: [`Db`], named [`Tree`]s, blocking calls from any thread,
//! futures for other runtimes, and [`Db::run`] for many concurrent tasks.
//!
//! ```no_run
//! use flashtree::db::{Db, Options};
//! let db = Db::open("/tmp/store", Options::default())?;
//! let users = db.tree("users")?;
//! db.put(users, b"alice", b"admin")?;
//! assert_eq!(db.get(users, b"alice")?, Some(b"admin".to_vec()));
//! // Throughput: 256 tasks on each worker, each doing its own lookups.
//! db.run(256, move |ctx| async move {
//!     let mut value = Vec::new();
//!     let _ = ctx.get(users, b"alice", &mut value).await;
//! })?;
//! db.close()?;
//! # Ok::<(), flashtree::Error>(())
//! ```

mod batch;
mod bulk;
mod checkpoint;
mod compact;
mod meta;
mod open;
mod reply;
mod worker;

pub use crate::wal::{Durability, LogWrites};
pub use batch::{WriteBatch, MAX_BATCH_ENTRIES};
pub use bulk::{BulkLoadOptions, BulkLoadStats};
pub use compact::CompactStats;
pub use meta::{MAX_TREES, MAX_TREE_NAME_BYTES};
pub use open::RecoveryStats;
pub use reply::Reply;

use crate::btree::hash;
use crate::btree::node::{MAX_ENTRY_BYTES, MAX_KEY_BYTES};
use crate::btree::tree::{self, Direction, ScanBatch, ScanStep};
use crate::buffer::{
    BufferConfig, BufferManager, LoadStart, OpError, PageId, Restart, MIN_FRAMES_PER_WORKER,
};
use crate::error::{Error, Result};
use crate::io::{IoConfig, Vfs, PAGE_SIZE};
use crate::sched::Executor;
use crate::wal::writer::LogWriter;
use crate::wal::WalShared;
use batch::BatchStop;
use reply::reply_pair;
use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use worker::{run_logged_op, run_op, Job, TaskReads, WorkerShared};

pub use crate::btree::tree::Direction as ScanDirection;

/// How to open a store. `Options::default()` suits most uses.
#[derive(Clone, Debug)]
pub struct Options {
    /// Buffer pool size in bytes (default 128 MiB; at least 8 pages per worker).
    pub pool_bytes: u64,
    /// Worker threads (default: one per available core).
    pub workers: usize,
    /// I/O settings of each worker's channel (backend, depth, io_uring flags).
    pub io: IoConfig,
    /// RAID0 stripe unit in bytes (default 64 KiB).
    pub chunk_bytes: u64,
    /// Largest store the page table can address (default 1 TiB).
    pub max_store_bytes: u64,
    /// Percent of each worker's frames kept free by eviction (default 2).
    pub free_target_pct: u32,
    /// Clock rounds a dirty page is passed over before it is written and
    /// evicted (default 3): clean pages are evicted first, so a page updated
    /// again soon is written once, and one read again soon stays.
    pub dirty_spare_rounds: u8,
    /// Most clock rounds an unreferenced page is passed over for its recent
    /// uses (default 16): the clock spares a page one round per use counted
    /// lately (reads, and rounds that found it referenced; counted per page
    /// id, across evictions), so pages used often outlive pages read once.
    /// 0 = plain second chance.
    pub hot_spare_rounds: u8,
    /// Use O_DIRECT (default true).
    pub direct_io: bool,
    /// When a write is durable (default [`Durability::Sync`]).
    pub durability: Durability,
    /// How each worker writes its log (default [`LogWrites::Auto`]: on
    /// the worker's thread when it has nothing else to do, else through
    /// its I/O channel).
    pub log_writes: LogWrites,
    /// Create the store when there is none (default true). Without it,
    /// opening a path with no store is an error.
    pub create_if_missing: bool,
    /// Bytes of each worker's log file (default 256 MiB; at least 1 MiB).
    /// A ring: the space before the last checkpoint is reused. On block
    /// devices the logs are regions sized when the store is created (for
    /// `max(workers, cores)` logs, together at most a quarter of the
    /// devices) and kept after; `checkpoint_log_bytes` is then capped at
    /// half a ring.
    pub wal_bytes_per_worker: u64,
    /// Bytes of each worker's in-memory log buffer (default 8 MiB): the
    /// most that can wait for a log write, and twice the largest group.
    pub wal_buffer_bytes: usize,
    /// A checkpoint starts when a worker's log holds this many bytes since
    /// the last one (default 64 MiB, a quarter of the default log; at most
    /// half of `wal_bytes_per_worker`, so lower it with a smaller log). It
    /// bounds the log that recovery replays.
    pub checkpoint_log_bytes: u64,
    /// Where the files live (default: the operating system; tests use a
    /// simulated disk).
    pub vfs: Vfs,
    /// Create a store on block devices that hold no store (default false):
    /// creation erases them, so it is a decision (`flashtree --create`).
    /// Files are created under [`Options::create_if_missing`] alone.
    pub create_on_block_devices: bool,
    /// With `create_on_block_devices`: create even over a device that
    /// holds a partition table, a file system or another store (default
    /// false: such a device is refused, naming what it holds).
    pub force_create: bool,
    /// Temporary space of a new store on block devices, over all devices
    /// (default None: 1/32 of their bytes, at most 4 GiB). Files keep
    /// temporary data in files beside the store.
    pub temp_region_bytes: Option<u64>,
    /// Called during recovery with (log bytes read, log bytes in all logs).
    pub recovery_progress: Option<RecoveryProgress>,
}

/// A callback for recovery progress: (bytes read, total bytes).
#[derive(Clone)]
pub struct RecoveryProgress(pub Arc<dyn Fn(u64, u64) + Send + Sync>);

impl std::fmt::Debug for RecoveryProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecoveryProgress(..)")
    }
}

/// Per-call write settings.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOptions {
    /// Some(true): return only once the write is durable; Some(false):
    /// return once it is logged in memory; None: as the store's
    /// [`Options::durability`] says.
    pub sync: Option<bool>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pool_bytes: 128 << 20,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            io: IoConfig {
                depth: 512,
                ..IoConfig::default()
            },
            chunk_bytes: 64 * 1024,
            max_store_bytes: 1 << 40,
            free_target_pct: 2,
            dirty_spare_rounds: 3,
            hot_spare_rounds: 16,
            direct_io: true,
            durability: Durability::Sync,
            log_writes: LogWrites::Auto,
            create_if_missing: true,
            wal_bytes_per_worker: 256 << 20,
            wal_buffer_bytes: 8 << 20,
            checkpoint_log_bytes: 64 << 20,
            vfs: Vfs::Os,
            create_on_block_devices: false,
            force_create: false,
            temp_region_bytes: None,
            recovery_progress: None,
        }
    }
}

/// A named tree in a store: a B+-tree ([`Db::tree`]) or a hash index
/// ([`Db::hash_tree`]). A small copyable handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    root: PageId,
    /// A hash tree (`btree::hash`): no ordered scans.
    hash: bool,
}

impl Tree {
    /// True for a hash tree (created by [`Db::hash_tree`]).
    pub fn is_hash(&self) -> bool {
        self.hash
    }
}

/// Counters of the whole engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct DbStats {
    /// Pages read from the devices.
    pub page_reads: u64,
    /// Of `page_reads`, leaves a scan read ahead of need.
    pub read_ahead_reads: u64,
    /// Requests that read several consecutive pages at once (a scan's
    /// read-ahead of neighbouring leaves).
    pub read_runs: u64,
    /// Pages written to the devices.
    pub page_writes: u64,
    /// Of `page_writes`, pages written as hot data
    /// ([`crate::io::WriteClass::DataHot`]: used again lately, by the
    /// pool's heat counts; a checkpoint's write of consecutive pages is
    /// hot when one of them is); the rest are cold.
    pub page_writes_hot: u64,
    /// Pages evicted from the pool.
    pub evictions: u64,
    /// Pool size in bytes.
    pub pool_bytes: u64,
    /// Pages allocated in the store (its size is this × 4096).
    pub pages_allocated: u64,
    /// Log groups appended (each a batch or a structure change).
    pub log_groups: u64,
    /// Log syncs completed (`fdatasync` of a log file).
    pub log_syncs: u64,
    /// Log bytes written (whole blocks).
    pub log_bytes: u64,
    /// Bytes of the records appended to the logs (full page images and
    /// deltas; `log_bytes` adds the padding of partly filled blocks).
    pub log_record_bytes: u64,
    /// Of `log_record_bytes`, the page images (full, or the nonzero runs
    /// of a mostly empty page) that recovery rebuilds a page from, torn
    /// or not: one at each page's first change after a checkpoint, and
    /// the pages a split or a move of entries rewrites.
    pub log_image_bytes: u64,
    /// Checkpoints completed since open (the one written at open counts).
    pub checkpoints: u64,
    /// Free pages given back to the devices since open (holes punched in
    /// files, `BLKDISCARD` on block devices), after a checkpoint listed
    /// them as free.
    pub pages_discarded: u64,
    /// Log bytes given back to block devices after checkpoints (the
    /// blocks before each log's new start; log files keep theirs).
    pub log_bytes_discarded: u64,
    /// Times a commit waited (parked) for room in its worker's log, which
    /// a log flush or a checkpoint makes: a log too small for the write
    /// rate shows here (raise `wal_bytes_per_worker`).
    pub log_room_waits: u64,
    /// Times a batch waited (parked) until its worker had the free frames
    /// its step needs at once: the new pages of the leaves it splits.
    pub frame_waits: u64,
    /// Full leaves that moved entries to a neighbour instead of splitting
    /// (a batch step that rolled back afterwards counts too).
    pub leaf_rebalances: u64,
    /// Steps in which a checkpoint's page pass stopped early so that the
    /// log, which commits waited for, had the device: while a worker's
    /// tasks wait for commits, its checkpoint writes in flight hold at
    /// most 16 pages between them (else up to four runs of 16).
    pub checkpoint_writes_held: u64,
    /// What recovery did at open.
    pub recovery: RecoveryStats,
}

/// A worker thread; it returns the result of its final flush (its log's
/// next block).
type WorkerThread = JoinHandle<Result<u64>>;

struct DbInner {
    bm: Arc<BufferManager>,
    workers: Arc<Vec<WorkerShared>>,
    shutdown: Arc<AtomicBool>,
    next_worker: AtomicUsize,
    /// True when changes are logged.
    logged: bool,
    /// Frames per worker (bounds the size of a batch).
    frames_per_worker: u64,
}

/// What the Db remembers of its open.
struct StoreState {
    files: open::StoreFiles,
    recovery: RecoveryStats,
}

/// An open store. Dropping it closes it (errors then go to stderr; call
/// [`Db::close`] to see them).
pub struct Db {
    inner: Arc<DbInner>,
    threads: Mutex<Vec<WorkerThread>>,
    closed: AtomicBool,
    notes: Vec<String>,
    state: Mutex<StoreState>,
    /// The store's temporary space: (storage device, bytes; None: a file
    /// that grows), for bulk loads.
    temp: Vec<(usize, Option<u64>)>,
    /// Held by the bulk load in progress (one at a time: they share the
    /// temporary space).
    bulk: Mutex<()>,
    /// Held while a tree is created (one at a time, so that two callers
    /// cannot both create one name). Never taken on a worker thread, so it
    /// may be held across a call into a worker; the catalog's own lock may
    /// not (a worker's checkpoint takes it).
    tree_creation: Mutex<()>,
    /// The store's data files, locked until the Db is dropped (after
    /// `close` wrote its checkpoint).
    _lock: crate::io::StoreLock,
    /// Per tree root: true for a hash tree (its root page's kind, read
    /// once).
    tree_kinds: Mutex<std::collections::HashMap<PageId, bool>>,
}

impl Db {
    /// Opens or creates the store in directory `dir` (file `dir/data.ft`).
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        let dir = dir.as_ref();
        if options.vfs.is_simulated() {
            // The simulated disk has no directories.
        } else if options.create_if_missing {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::InvalidArgument(format!("cannot create {}: {e}", dir.display()))
            })?;
        } else if !dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "no store at {}: no such directory (set Options::create_if_missing to create one)",
                dir.display()
            )));
        }
        Db::open_devices(&[dir.join("data.ft")], options)
    }

    /// Opens or creates a store striped (RAID0) over these files or devices.
    ///
    /// One [`Db`] at a time may have a store open: the files are locked
    /// ([`Error::InUse`] otherwise). A store whose process crashed or was
    /// killed is recovered from its log (see [`DbStats::recovery`]). A
    /// store that was open without a log ([`Durability::None`]) when its
    /// process ended is refused with [`Error::NotClosedCleanly`].
    pub fn open_devices(paths: &[PathBuf], options: Options) -> Result<Db> {
        validate_options(&options)?;
        let opened = open::open_store(paths, &options)?;
        // A store on block devices has the log rings it was created with:
        // checkpoints start by half a ring at the latest.
        let ring_bytes = opened.log_blocks * crate::wal::format::BLOCK_BYTES as u64;
        let options = Options {
            checkpoint_log_bytes: options.checkpoint_log_bytes.min(ring_bytes / 2).max(1),
            ..options
        };
        let checkpoint = &opened.checkpoint;
        let wal = Arc::new(WalShared::new(
            options.durability,
            options.workers,
            checkpoint.seq_start,
        ));
        *wal.catalog.lock().unwrap_or_else(|e| e.into_inner()) = checkpoint.trees.clone();
        *wal.checkpoints
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = checkpoint.clone();
        *wal.checkpoints
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(opened.files.slots.clone());
        let bm = Arc::new(BufferManager::new(
            opened.storage.clone(),
            &BufferConfig {
                pool_bytes: options.pool_bytes,
                workers: options.workers,
                max_store_bytes: options.max_store_bytes,
                free_target_pct: options.free_target_pct,
                dirty_spare_rounds: options.dirty_spare_rounds,
                hot_spare_rounds: options.hot_spare_rounds,
            },
            wal,
        )?);
        bm.set_allocation(checkpoint.next_pid, checkpoint.free.clone())?;
        let frames_per_worker = u64::from(bm.frame_count()) / options.workers as u64;
        let inner = Arc::new(DbInner {
            bm: bm.clone(),
            workers: Arc::new(
                (0..options.workers)
                    .map(|_| WorkerShared::default())
                    .collect(),
            ),
            shutdown: Arc::new(AtomicBool::new(false)),
            next_worker: AtomicUsize::new(0),
            logged: options.durability.is_logged(),
            frames_per_worker,
        });
        let logs = (0..options.workers)
            .map(|w| {
                options.durability.is_logged().then(|| {
                    LogWriter::new(
                        w,
                        opened.first_log_device + w,
                        opened.log_blocks,
                        checkpoint.log_epoch,
                        0,
                        options.wal_buffer_bytes,
                    )
                })
            })
            .collect();
        // A bulk load cut short by a crash may have left runs in the
        // temporary file: nothing reads them again.
        for &(device, bytes) in &opened.temp {
            if bytes.is_none() && opened.storage.device_len(device)? > 0 {
                opened.storage.release_temp(device, 0)?;
            }
        }
        let (threads, notes) = start_workers(&inner, &options, logs)?;
        Ok(Db {
            inner,
            threads: Mutex::new(threads),
            closed: AtomicBool::new(false),
            notes,
            state: Mutex::new(StoreState {
                files: opened.files,
                recovery: opened.recovery,
            }),
            temp: opened.temp,
            bulk: Mutex::new(()),
            tree_creation: Mutex::new(()),
            _lock: opened.lock,
            tree_kinds: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// How writes are placed by their lifetime on the store's devices
    /// ([`crate::io::Storage::placement`]).
    pub fn placement(&self) -> &str {
        self.inner.bm.storage().placement()
    }

    /// The store's layout on each data device: its superblock (regions,
    /// logs, checkpoint slot size), with the device's path.
    pub fn layout(&self) -> Vec<(std::path::PathBuf, crate::io::layout::Superblock)> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .files
            .data
            .iter()
            .cloned()
            .zip(state.files.layout.iter().copied())
            .collect()
    }

    /// Bytes of the last checkpoint written (as it lies in its slot).
    pub fn checkpoint_bytes(&self) -> u64 {
        let last = self
            .inner
            .bm
            .wal()
            .checkpoints
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .encode()
            .len();
        last as u64
    }

    /// Notes from start-up (I/O fallbacks), one per worker at most.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Worker threads.
    pub fn worker_count(&self) -> usize {
        self.inner.workers.len()
    }

    /// The tree named `name`, created empty as a B+-tree if it does not
    /// exist. An existing hash tree of that name is returned as it is
    /// (see [`Tree::is_hash`]).
    pub fn tree(&self, name: &str) -> Result<Tree> {
        self.open_tree(name, false)
    }

    /// The hash tree named `name`, created empty if it does not exist: an
    /// index of extendible hashing over 4 KiB pages with get, put, delete
    /// and get_many (and batches, also mixed with B+-trees), and no
    /// ordered scan (a scan is `Error::Unsupported`). A B+-tree of that
    /// name is `Error::InvalidArgument`.
    pub fn hash_tree(&self, name: &str) -> Result<Tree> {
        let tree = self.open_tree(name, true)?;
        if !tree.hash {
            return Err(Error::InvalidArgument(format!(
                "tree {name:?} exists as a B+-tree, not a hash tree"
            )));
        }
        Ok(tree)
    }

    /// Whether the tree rooted at `root` is a hash tree: from its root
    /// page's kind, read once and remembered.
    fn root_is_hash(&self, root: PageId) -> Result<bool> {
        if let Some(&hash) = self
            .tree_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&root)
        {
            return Ok(hash);
        }
        let hash = self.call(0, move |ctx| async move {
            run_op(&ctx.reads, |_| hash::root_is_hash(&ctx.inner.bm, root)).await
        })??;
        self.tree_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(root, hash);
        Ok(hash)
    }

    fn open_tree(&self, name: &str, as_hash: bool) -> Result<Tree> {
        if name.is_empty() || name.len() > MAX_TREE_NAME_BYTES {
            return Err(Error::InvalidArgument(format!(
                "tree name must be 1..={MAX_TREE_NAME_BYTES} bytes, got {}",
                name.len()
            )));
        }
        let _creating = self.tree_creation.lock().unwrap_or_else(|e| e.into_inner());
        let wal = self.inner.bm.wal().clone();
        // The catalog's lock is held only briefly, never across the call
        // below: worker 0 may be finishing a checkpoint, which takes it on
        // the worker's thread (holding it here deadlocked a store).
        let (existing, tree_count) = {
            let trees = wal.catalog.lock().unwrap_or_else(|e| e.into_inner());
            let existing = trees.iter().find(|(n, _)| n == name).map(|&(_, root)| root);
            (existing, trees.len())
        };
        if let Some(root) = existing {
            return Ok(Tree {
                root,
                hash: self.root_is_hash(root)?,
            });
        }
        if tree_count >= MAX_TREES {
            return Err(Error::Full(format!(
                "a store holds at most {MAX_TREES} named trees"
            )));
        }
        let owned_name = name.to_string();
        let root = self.call(0, move |ctx| async move {
            let logged = ctx.inner.logged;
            run_logged_op(&ctx.reads, logged, |wb| {
                let bm = ctx.inner.bm.clone();
                let mut page = wb.alloc_page(&bm)?;
                if as_hash {
                    let mut bucket = match wb.alloc_page(&bm) {
                        Ok(bucket) => bucket,
                        Err(e) => {
                            page.free();
                            return Err(e);
                        }
                    };
                    let bucket_pid = bucket.pid();
                    hash::init_hash_root(page.page_mut(), bucket_pid, bucket.page_mut());
                } else {
                    tree::init_root(page.page_mut());
                }
                if logged {
                    crate::buffer::step::step_catalog(page.pid(), &owned_name);
                }
                // In the catalog in the same step as its log record (nothing
                // after this fails): a checkpoint that covers the record's
                // group lists the tree.
                bm.wal()
                    .catalog
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((owned_name.clone(), page.pid()));
                Ok(page.pid())
            })
            .await
        })??;
        self.tree_kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(root, as_hash);
        if self.inner.logged {
            // The tree exists once its group is durable.
            self.sync()?;
        }
        Ok(Tree {
            root,
            hash: as_hash,
        })
    }

    /// Names of the trees in the store.
    pub fn tree_names(&self) -> Vec<String> {
        self.inner
            .bm
            .wal()
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The value of `key`, if present. When every page on the way is in
    /// memory the lookup runs on the calling thread (see
    /// [`Db::get_on_caller`]); otherwise a worker does it, reading what is
    /// missing.
    pub fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let mut value = Vec::new();
        if let Some(found) = self.get_on_caller(tree, key, &mut value) {
            return Ok(found.then_some(value));
        }
        self.refuse_inside_own_task()?;
        self.get_async(tree, key)?.wait()
    }

    /// Looks `key` up on the calling thread through optimistic latches:
    /// version snapshots validated after every read, no latch taken and no
    /// I/O, as a worker's tasks read (readers never block writers, and a
    /// lookup that overlapped a change retries). `None` when a page on the
    /// way is not in memory, or a writer got in the way
    /// [`CALLER_LOOKUP_TRIES`] times: the caller then hands the key to a
    /// worker. Sending a lookup of resident pages to a worker and waiting
    /// for its reply costs several times the lookup itself.
    fn get_on_caller(&self, tree: Tree, key: &[u8], value: &mut Vec<u8>) -> Option<bool> {
        for _ in 0..CALLER_LOOKUP_TRIES {
            let looked = if tree.hash {
                hash::lookup(&self.inner.bm, tree.root, key, value)
            } else {
                tree::lookup(&self.inner.bm, tree.root, key, value)
            };
            match looked {
                Ok(found) => return Some(found),
                Err(OpError::Restart(Restart::Retry)) => continue,
                // Not in memory, being read, or an error: a worker's lookup
                // reads the page or reports the error.
                Err(_) => return None,
            }
        }
        None
    }

    /// Like [`Db::get`], as a future usable from any async runtime.
    pub fn get_async(&self, tree: Tree, key: &[u8]) -> Result<Reply<Result<Option<Vec<u8>>>>> {
        check_key(key)?;
        let key = key.to_vec();
        self.submit(self.pick_worker(), move |ctx| async move {
            let mut value = Vec::new();
            Ok(ctx.get(tree, &key, &mut value).await?.then_some(value))
        })
    }

    /// Inserts or replaces `key`. With [`Durability::Sync`] it returns once
    /// the change is durable.
    pub fn put(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.refuse_inside_own_task()?;
        self.put_async(tree, key, value)?.wait()
    }

    /// Applies `batch` atomically: after a crash either all of it or none
    /// of it is there. Returns as `options` and the store's durability
    /// say. From any thread.
    pub fn write(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()> {
        self.refuse_inside_own_task()?;
        self.write_async(batch, options)?.wait()
    }

    /// Like [`Db::write`], as a future.
    pub fn write_async(
        &self,
        batch: &WriteBatch,
        options: WriteOptions,
    ) -> Result<Reply<Result<()>>> {
        batch::check_batch_size(batch.len(), self.inner.frames_per_worker)?;
        let batch = batch.clone();
        self.submit(self.pick_worker(), move |ctx| async move {
            ctx.write_with(&batch, options).await.map(|_| ())
        })
    }

    /// Waits until every change acknowledged so far is durable (a no-op
    /// without a log).
    pub fn sync(&self) -> Result<()> {
        self.refuse_inside_own_task()?;
        if !self.inner.logged {
            return Ok(());
        }
        let target = self.inner.bm.wal().next_seq();
        let replies: Vec<_> = (0..self.worker_count())
            .map(|w| {
                self.submit(w, move |_ctx| async move {
                    worker::with_local(|wb| wb.flush_log(true));
                    if target > 1 {
                        worker::wait_durable(target - 1).await?;
                    }
                    Ok(())
                })
            })
            .collect::<Result<_>>()?;
        for reply in replies {
            reply.wait()?;
        }
        Ok(())
    }

    /// Like [`Db::put`], as a future.
    pub fn put_async(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<Reply<Result<()>>> {
        check_entry(key, value)?;
        let (key, value) = (key.to_vec(), value.to_vec());
        self.submit(self.pick_worker(), move |ctx| async move {
            ctx.put(tree, &key, &value).await
        })
    }

    /// Removes `key`; true if it was present. Durable as [`Db::put`].
    pub fn delete(&self, tree: Tree, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        self.refuse_inside_own_task()?;
        let key = key.to_vec();
        self.submit(self.pick_worker(), move |ctx| async move {
            ctx.delete(tree, &key).await
        })?
        .wait()
    }

    /// Looks up many keys at once, as concurrent tasks spread over all
    /// workers. Results are in the order of `keys`. Each worker gets one
    /// message with its share of the keys and runs up to
    /// [`MULTI_GET_TASKS`] tasks over it (a miss waits for its read while
    /// the other tasks go on); one reply per worker, not per key.
    ///
    /// Keys whose pages are all in memory are looked up on the calling
    /// thread first (see [`Db::get_on_caller`]); only the others go to the
    /// workers.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        tree: Tree,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let mut values: Vec<Option<Vec<u8>>> = vec![None; keys.len()];
        self.multi_get_each(tree, keys, |i, value| values[i] = value.map(<[u8]>::to_vec))?;
        Ok(values)
    }

    /// Like [`Db::multi_get`], handing each value to `found(i, value)`
    /// instead of returning it (`value` is `None` when `keys[i]` is
    /// absent), so a caller that copies values elsewhere (into one buffer,
    /// into another language's objects) allocates nothing per key. `found`
    /// runs on the calling thread once per key, not in key order: first
    /// for the keys whose pages are in memory, then for the others as the
    /// workers answer. On an error `found` may have run for some keys.
    pub fn multi_get_each<K: AsRef<[u8]>>(
        &self,
        tree: Tree,
        keys: &[K],
        mut found: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        for key in keys {
            check_key(key.as_ref())?;
        }
        let mut missed: Vec<usize> = Vec::new();
        let mut value = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match self.get_on_caller(tree, key.as_ref(), &mut value) {
                Some(true) => found(i, Some(&value)),
                Some(false) => found(i, None),
                None => missed.push(i),
            }
        }
        if missed.is_empty() {
            return Ok(());
        }
        self.refuse_inside_own_task()?;
        let share = missed.len().div_ceil(self.worker_count());
        let missed_keys: Arc<Vec<Vec<u8>>> =
            Arc::new(missed.iter().map(|&i| keys[i].as_ref().to_vec()).collect());
        let replies: Vec<_> = (0..missed_keys.len())
            .step_by(share)
            .enumerate()
            .map(|(worker, start)| {
                let end = (start + share).min(missed_keys.len());
                self.get_share(worker, tree, missed_keys.clone(), start..end)
            })
            .collect::<Result<_>>()?;
        let mut next = missed.iter();
        for reply in replies {
            for value in reply.wait()? {
                let &i = next.next().expect("one value per missed key");
                found(i, value.as_deref());
            }
        }
        Ok(())
    }

    /// One worker's share `range` of a [`Db::multi_get`].
    fn get_share(
        &self,
        worker: usize,
        tree: Tree,
        keys: Arc<Vec<Vec<u8>>>,
        range: std::ops::Range<usize>,
    ) -> Result<Reply<Result<Values>>> {
        /// What the share's tasks hold together (on the worker's thread).
        struct Share {
            keys: Arc<Vec<Vec<u8>>>,
            start: usize,
            next: std::cell::Cell<usize>,
            end: usize,
            values: RefCell<Vec<Option<Vec<u8>>>>,
            error: RefCell<Option<Error>>,
            tasks_left: std::cell::Cell<usize>,
            sender: RefCell<Option<reply::ReplySender<Result<Values>>>>,
        }
        let (sender, reply) = reply_pair(|| Err(Error::TaskPanicked));
        let inner = self.inner.clone();
        self.push_job(
            worker,
            Box::new(move |exec: &mut Executor| {
                let tasks = range.len().clamp(1, MULTI_GET_TASKS);
                let share = std::rc::Rc::new(Share {
                    keys,
                    start: range.start,
                    next: std::cell::Cell::new(range.start),
                    end: range.end,
                    values: RefCell::new(vec![None; range.len()]),
                    error: RefCell::new(None),
                    tasks_left: std::cell::Cell::new(tasks),
                    sender: RefCell::new(Some(sender)),
                });
                for _ in 0..tasks {
                    let share = share.clone();
                    let ctx = TaskCtx {
                        inner: inner.clone(),
                        worker,
                        task: 0,
                        reads: TaskReads::default(),
                        last_puts: RefCell::new(LastPuts::default()),
                    };
                    exec.spawn(async move {
                        let mut value = Vec::new();
                        loop {
                            let i = share.next.get();
                            if i >= share.end || share.error.borrow().is_some() {
                                break;
                            }
                            share.next.set(i + 1);
                            match ctx.get(tree, &share.keys[i], &mut value).await {
                                Ok(found) => {
                                    share.values.borrow_mut()[i - share.start] =
                                        found.then(|| std::mem::take(&mut value));
                                }
                                Err(e) => {
                                    share.error.borrow_mut().get_or_insert(e);
                                    break;
                                }
                            }
                        }
                        share.tasks_left.set(share.tasks_left.get() - 1);
                        if share.tasks_left.get() == 0 {
                            let outcome = match share.error.borrow_mut().take() {
                                Some(e) => Err(e),
                                None => Ok(share.values.take()),
                            };
                            if let Some(sender) = share.sender.borrow_mut().take() {
                                sender.send(outcome);
                            }
                        }
                    });
                }
            }),
        )?;
        Ok(reply)
    }

    /// Entries from `start` on (`None`: from the first key going forward, or
    /// the last going backward), in key order or reverse key order. The
    /// iterator fetches one leaf at a time; it sees concurrent changes made
    /// to leaves it has not reached yet.
    pub fn range(&self, tree: Tree, start: Option<&[u8]>, direction: Direction) -> RangeIter<'_> {
        let start = match (start, direction) {
            (Some(s), _) => s.to_vec(),
            (None, Direction::Forward) => Vec::new(),
            (None, Direction::Backward) => vec![0xFF; MAX_KEY_BYTES + 1],
        };
        RangeIter {
            db: self,
            tree,
            direction,
            next: Some(start),
            batch: VecDeque::new(),
        }
    }

    /// Runs `tasks_per_worker` tasks on every worker, each made by `make_task`
    /// on its worker thread, and returns when all have finished. This is the
    /// way to keep hundreds of I/Os in flight per core. If a task panics it
    /// is dropped, the others run to the end, and the result is
    /// [`Error::TaskPanicked`].
    pub fn run<F, Fut>(&self, tasks_per_worker: usize, make_task: F) -> Result<()>
    where
        F: Fn(TaskCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.refuse_inside_own_task()?;
        let make_task = Arc::new(make_task);
        let workers = self.worker_count();
        let total = workers * tasks_per_worker;
        if total == 0 {
            return Ok(());
        }
        let remaining = Arc::new(AtomicUsize::new(total));
        let (sender, reply) = reply_pair::<Result<()>>(|| Err(Error::TaskPanicked));
        let sender = Arc::new(Mutex::new(Some(sender)));
        let panicked = Arc::new(AtomicBool::new(false));
        for w in 0..workers {
            let (inner, make_task, remaining, sender, panicked) = (
                self.inner.clone(),
                make_task.clone(),
                remaining.clone(),
                sender.clone(),
                panicked.clone(),
            );
            self.push_job(
                w,
                Box::new(move |exec: &mut Executor| {
                    for t in 0..tasks_per_worker {
                        let ctx = TaskCtx {
                            inner: inner.clone(),
                            worker: w,
                            task: t,
                            reads: TaskReads::default(),
                            last_puts: RefCell::new(LastPuts::default()),
                        };
                        let task = make_task(ctx);
                        let done = TaskDone {
                            finished: false,
                            remaining: remaining.clone(),
                            sender: sender.clone(),
                            panicked: panicked.clone(),
                        };
                        exec.spawn(async move {
                            // The whole guard moves in (not just a field), so
                            // it drops with the task.
                            let mut done = done;
                            task.await;
                            done.finished = true;
                        });
                    }
                }),
            )?;
        }
        reply.wait()
    }

    /// Engine counters.
    pub fn stats(&self) -> DbStats {
        let mut stats = DbStats {
            pool_bytes: u64::from(self.inner.bm.frame_count()) * PAGE_SIZE as u64,
            pages_allocated: self.inner.bm.next_page_id(),
            ..DbStats::default()
        };
        for w in self.inner.workers.iter() {
            stats.page_reads += w.page_reads.load(Ordering::Relaxed);
            stats.read_ahead_reads += w.read_ahead_reads.load(Ordering::Relaxed);
            stats.read_runs += w.read_runs.load(Ordering::Relaxed);
            stats.page_writes += w.page_writes.load(Ordering::Relaxed);
            stats.page_writes_hot += w.page_writes_hot.load(Ordering::Relaxed);
            stats.evictions += w.evictions.load(Ordering::Relaxed);
            stats.log_groups += w.log_groups.load(Ordering::Relaxed);
            stats.log_syncs += w.log_syncs.load(Ordering::Relaxed);
            stats.log_bytes += w.log_bytes.load(Ordering::Relaxed);
            stats.log_record_bytes += w.log_record_bytes.load(Ordering::Relaxed);
            stats.log_image_bytes += w.log_image_bytes.load(Ordering::Relaxed);
            stats.log_room_waits += w.log_room_waits.load(Ordering::Relaxed);
            stats.frame_waits += w.frame_waits.load(Ordering::Relaxed);
            stats.leaf_rebalances += w.leaf_rebalances.load(Ordering::Relaxed);
            stats.checkpoint_writes_held += w.checkpoint_writes_held.load(Ordering::Relaxed);
        }
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        stats.checkpoints = 1 + self.inner.bm.wal().checkpoints.completed();
        stats.pages_discarded = self.inner.bm.pages_discarded();
        stats.log_bytes_discarded = self.inner.bm.storage().log_bytes_discarded();
        stats.recovery = state.recovery;
        stats
    }

    /// Checks the invariants of `tree` (node layout, key order, fences of
    /// every node against its parent, which orders the keys of all leaves;
    /// all leaves at one depth; every page reached once, and none of them
    /// page 0 or a freed page) and returns (nodes, entries). An inner node
    /// may have a single child: merges do not redistribute, so one whose
    /// neighbours are too full to absorb it stays. Meant for a quiescent
    /// tree: concurrent writers may make it report errors that are not there.
    pub fn check_tree(&self, tree: Tree) -> Result<(u64, u64)> {
        let shape = self.check_tree_shape(tree)?;
        Ok((shape.inner_nodes + shape.leaves, shape.entries))
    }

    /// [`Db::check_tree`], returning node counts by kind.
    pub fn check_tree_shape(&self, tree: Tree) -> Result<TreeShape> {
        let freed: HashSet<PageId> = self.inner.bm.free_page_ids().into_iter().collect();
        let freed = Arc::new(freed);
        self.call(0, move |ctx| async move {
            let mut seen = HashSet::new();
            check_shape(&ctx, tree, &freed, &mut seen).await
        })?
    }

    /// Every entry of hash tree `tree`, in hash order (no key order),
    /// handed to `f(key, value)` on the calling thread; `f` returns false
    /// to stop. For dumps and copies of a hash tree, which has no scan.
    /// An entry present for the whole call is handed over exactly once,
    /// even while other threads write to the tree (each step reads one
    /// bucket's range of hashes at one moment); entries put or deleted
    /// meanwhile may or may not be. A B+-tree is `Error::Unsupported`
    /// (scan it with [`Db::range`]).
    pub fn hash_entries(&self, tree: Tree, mut f: impl FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        if !tree.hash {
            return Err(Error::Unsupported(format!(
                "the tree rooted at page {} is a B+-tree: scan it in key order instead",
                tree.root
            )));
        }
        /// Entries one call to a worker collects at most (about).
        const STEP_ENTRIES: usize = 4096;
        let mut from = Some(0u64);
        while let Some(h) = from {
            let (entries, next) = self.call(0, move |ctx| async move {
                let bm = &ctx.inner.bm;
                let mut entries = Vec::new();
                let mut at = Some(h);
                while let Some(h) = at {
                    if entries.len() >= STEP_ENTRIES {
                        break;
                    }
                    let mut bucket = Vec::new();
                    at = run_op(&ctx.reads, |_| {
                        bucket.clear();
                        hash::bucket_entries_at(bm, tree.root, h, &mut bucket)
                    })
                    .await?;
                    entries.append(&mut bucket);
                }
                Ok::<_, Error>((entries, at))
            })??;
            for (key, value) in &entries {
                if !f(key, value) {
                    return Ok(());
                }
            }
            from = next;
        }
        Ok(())
    }

    /// Checks the whole store, as `flashtree check` does: every tree (see
    /// [`Db::check_tree`]; every page is read, so its checksum is
    /// verified), no page in two trees, and the page accounting. Pages
    /// neither in a tree nor free are counted as leaked (a crash in the
    /// middle of a split or merge may leave some): space lost, not data.
    /// Meant for a quiescent store.
    pub fn check(&self) -> Result<CheckReport> {
        let catalog = self
            .inner
            .bm
            .wal()
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let free: HashSet<PageId> = self.inner.bm.free_page_ids().into_iter().collect();
        let pages_free = free.len() as u64;
        let freed = Arc::new(free);
        let allocated = self.inner.bm.next_page_id();
        let trees = self.call(0, move |ctx| async move {
            let mut seen = HashSet::new();
            let mut trees = Vec::new();
            for (name, root) in catalog {
                let shape = check_shape(&ctx, Tree { root, hash: false }, &freed, &mut seen)
                    .await
                    .map_err(|e| match e {
                        Error::Corrupt(m) => Error::Corrupt(format!("tree {name:?}: {m}")),
                        e => e,
                    })?;
                trees.push((name, shape));
            }
            Ok::<_, Error>((trees, seen.len() as u64))
        })??;
        let (trees, pages_in_trees) = trees;
        // Page 0 holds the store's metadata.
        let pages_accounted = 1 + pages_in_trees + pages_free;
        if pages_accounted > allocated {
            return Err(Error::Corrupt(format!(
                "{pages_accounted} pages in trees, free or metadata, but only {allocated} allocated"
            )));
        }
        Ok(CheckReport {
            trees,
            pages_allocated: allocated,
            pages_free,
            pages_in_trees,
            pages_leaked: allocated - pages_accounted,
        })
    }

    /// Writes back every dirty page and the metadata, syncs the devices and
    /// stops the workers. Reopening finds all data.
    pub fn close(self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.shutdown.store(true, Ordering::Release);
        for w in self.inner.workers.iter() {
            w.wake();
        }
        let mut first_error = None;
        let mut log_ends = Vec::new();
        for handle in self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let result = handle
                .join()
                .unwrap_or_else(|_| Err(Error::Unsupported("a worker thread panicked".into())));
            match result {
                Ok(next_block) => log_ends.push(next_block),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let bm = &self.inner.bm;
        if let Some(e) = first_error {
            bm.wal().fail(format!("closing: {e}"));
            return Err(e);
        }
        // A failed store writes no checkpoint: reopening recovers from disk.
        bm.wal().check()?;
        open::sync_data(bm.storage())?;
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = bm
            .wal()
            .checkpoints
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let trees = bm
            .wal()
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (mut free, next_pid) = bm.allocation_snapshot();
        free.sort_unstable();
        let checkpoint = crate::wal::format::Checkpoint {
            number: last.number + 1,
            seq_start: bm.wal().next_seq(),
            next_pid,
            log_starts: log_ends,
            trees,
            free,
            flags: 0,
            ..last.clone()
        };
        open::write_checkpoint(bm.storage(), &state.files.slots, &checkpoint)?;
        // The close checkpoint goes into the other slot too (after the
        // first is durable): a damaged slot then still leaves a clean close
        // behind, where otherwise recovery would fall back to the previous
        // checkpoint and replay the log, and a damaged last log flush would
        // lose acknowledged commits as if the process had crashed.
        state.files.slots.write(
            bm.storage(),
            ((checkpoint.number + 1) % 2) as usize,
            &checkpoint.encode(),
        )?;
        *last = checkpoint;
        // No recovery reads a page this checkpoint lists as free again.
        bm.discard_free_pages(&last.free);
        Ok(())
    }

    fn pick_worker(&self) -> usize {
        self.inner.next_worker.fetch_add(1, Ordering::Relaxed) % self.worker_count()
    }

    fn push_job(&self, worker: usize, job: Job) -> Result<()> {
        if self.inner.shutdown.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.inner.workers[worker].push(job);
        Ok(())
    }

    /// Spawns one task on `worker` and returns its result as a [`Reply`].
    fn submit<T, F, Fut>(&self, worker: usize, make: F) -> Result<Reply<Result<T>>>
    where
        T: Send + 'static,
        F: FnOnce(TaskCtx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + 'static,
    {
        let (sender, reply) = reply_pair(|| Err(Error::TaskPanicked));
        let inner = self.inner.clone();
        self.push_job(
            worker,
            Box::new(move |exec: &mut Executor| {
                let ctx = TaskCtx {
                    inner,
                    worker,
                    task: 0,
                    reads: TaskReads::default(),
                    last_puts: RefCell::new(LastPuts::default()),
                };
                let task = make(ctx);
                exec.spawn(async move { sender.send(task.await) });
            }),
        )?;
        Ok(reply)
    }

    /// Refuses a blocking call made on one of this store's worker threads
    /// (from inside a task of [`Db::run`]): it would wait for a worker the
    /// calling thread may itself be, and never return.
    fn refuse_inside_own_task(&self) -> Result<()> {
        if worker::on_worker_of(self.inner.bm.instance()) {
            return Err(Error::InvalidArgument(
                "a blocking Db call inside a task of this store's Db::run would wait for its own \
                 worker; use the TaskCtx methods, or await put_async/write_async/get_async"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Runs one task on `worker` and waits for it.
    fn call<T, F, Fut>(&self, worker: usize, make: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(TaskCtx) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        self.refuse_inside_own_task()?;
        let reply = self.submit(worker, move |ctx| async move { Ok(make(ctx).await) })?;
        reply.wait()
    }
}

/// Counts one task of [`Db::run`] as done when dropped: after it finished,
/// or when the executor dropped it because it panicked. The last one
/// reports, with an error if any task panicked.
struct TaskDone {
    finished: bool,
    remaining: Arc<AtomicUsize>,
    sender: Arc<Mutex<Option<reply::ReplySender<Result<()>>>>>,
    panicked: Arc<AtomicBool>,
}

impl Drop for TaskDone {
    fn drop(&mut self) {
        if !self.finished {
            self.panicked.store(true, Ordering::Release);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let sender = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(sender) = sender {
                sender.send(if self.panicked.load(Ordering::Acquire) {
                    Err(Error::TaskPanicked)
                } else {
                    Ok(())
                });
            }
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.close_inner() {
            eprintln!("flashtree: error while closing the store: {e}");
        }
    }
}

/// Node counts of a tree, from [`Db::check_tree_shape`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeShape {
    /// Inner nodes (the root counts here once it has children).
    pub inner_nodes: u64,
    /// Leaves.
    pub leaves: u64,
    /// Entries in all leaves.
    pub entries: u64,
    /// Leaves whose next leaf in key order is the next page id (B+-trees;
    /// `leaves - 1` when all lie in order, as after [`Db::compact`]).
    pub leaves_in_order: u64,
}

/// What [`Db::check`] found in a store that passed.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// Each tree's name and shape.
    pub trees: Vec<(String, TreeShape)>,
    /// Pages allocated (the store's size in pages, page 0 included).
    pub pages_allocated: u64,
    /// Pages on the free list.
    pub pages_free: u64,
    /// Pages in trees.
    pub pages_in_trees: u64,
    /// Pages neither in a tree, nor free, nor page 0.
    pub pages_leaked: u64,
}

/// A page a tree references, checked once: an error if it is page 0, free,
/// or `seen` already holds it.
fn claim_checked_page(
    pid: PageId,
    freed: &HashSet<PageId>,
    seen: &mut HashSet<PageId>,
) -> Result<()> {
    if pid == 0 || freed.contains(&pid) || !seen.insert(pid) {
        return Err(Error::Corrupt(format!(
            "page {pid} is referenced twice, is page 0 or is free"
        )));
    }
    Ok(())
}

/// Checks `tree`'s nodes (see [`Db::check_tree`]), adding its pages to
/// `seen`: a page already there is an error.
async fn check_shape(
    ctx: &TaskCtx,
    tree: Tree,
    freed: &HashSet<PageId>,
    seen: &mut HashSet<PageId>,
) -> Result<TreeShape> {
    let is_hash = run_op(&ctx.reads, |_| hash::root_is_hash(&ctx.inner.bm, tree.root)).await?;
    if is_hash {
        return check_hash_shape(ctx, tree.root, freed, seen).await;
    }
    let mut leaf_depth: Option<usize> = None;
    let mut stack = vec![(tree.root, Vec::new(), Vec::new(), 0usize)];
    let mut shape = TreeShape::default();
    // Leaves come in descending key order (the stack pops the last child
    // first): the one before is the next in key order.
    let mut next_leaf: Option<PageId> = None;
    while let Some((pid, lower, upper, depth)) = stack.pop() {
        claim_checked_page(pid, freed, seen)?;
        let report = run_op(&ctx.reads, |_| {
            tree::check_node(&ctx.inner.bm, pid, &lower, &upper)
        })
        .await?;
        if report.is_leaf {
            if next_leaf == Some(pid + 1) {
                shape.leaves_in_order += 1;
            }
            next_leaf = Some(pid);
            shape.leaves += 1;
            shape.entries += report.count as u64;
            if *leaf_depth.get_or_insert(depth) != depth {
                return Err(Error::Corrupt(format!(
                    "leaf {pid} at depth {depth}, another at {leaf_depth:?}"
                )));
            }
        } else {
            shape.inner_nodes += 1;
        }
        stack.extend(
            report
                .children
                .into_iter()
                .map(|(child, lo, up)| (child, lo, up, depth + 1)),
        );
    }
    Ok(shape)
}

/// [`check_shape`] of a hash tree: every directory page (kind, start bit
/// against its parent's slots, runs of slots) and every bucket (leaf
/// invariants, empty fences, every key hashing to the bucket's prefix),
/// each page reached once. Directory pages count as inner nodes, buckets
/// as leaves.
async fn check_hash_shape(
    ctx: &TaskCtx,
    root: PageId,
    freed: &HashSet<PageId>,
    seen: &mut HashSet<PageId>,
) -> Result<TreeShape> {
    let mut shape = TreeShape::default();
    // (page, is a directory page, hash prefix, prefix bits)
    let mut stack = vec![(root, true, 0u64, 0u32)];
    while let Some((pid, is_dir, prefix, bits)) = stack.pop() {
        claim_checked_page(pid, freed, seen)?;
        let bm = &ctx.inner.bm;
        if is_dir {
            let report = run_op(&ctx.reads, |_| hash::check_dir(bm, pid, prefix, bits)).await?;
            shape.inner_nodes += 1;
            stack.extend(
                report
                    .children
                    .into_iter()
                    .map(|(is_dir, child, prefix, bits)| (child, is_dir, prefix, bits)),
            );
        } else {
            let count = run_op(&ctx.reads, |_| hash::check_bucket(bm, pid, prefix, bits)).await?;
            shape.leaves += 1;
            shape.entries += count as u64;
        }
    }
    Ok(shape)
}

/// Trees whose last put key a task remembers.
const LAST_PUT_TREES: usize = 8;

/// The key of a task's last put into each of the trees it put into most
/// recently (at most [`LAST_PUT_TREES`], most recent last). Per tree, so
/// that a task appending to several trees in turn (a loader writing a row
/// and then its index entry) is still seen as appending to each.
#[derive(Default)]
struct LastPuts {
    entries: Vec<(PageId, Vec<u8>)>,
}

impl LastPuts {
    /// The last key put into `tree`.
    fn get(&self, tree: PageId) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(t, _)| *t == tree)
            .map(|(_, k)| k.as_slice())
    }

    /// Removes and returns the last key put into `tree`.
    fn take(&mut self, tree: PageId) -> Option<Vec<u8>> {
        let at = self.entries.iter().position(|(t, _)| *t == tree)?;
        Some(self.entries.remove(at).1)
    }

    /// Records `key` (reusing `buffer`) as the last put into `tree`.
    fn record(&mut self, tree: PageId, mut buffer: Vec<u8>, key: &[u8]) {
        debug_assert!(self.entries.iter().all(|(t, _)| *t != tree));
        if self.entries.len() == LAST_PUT_TREES {
            self.entries.remove(0);
        }
        buffer.clear();
        buffer.extend_from_slice(key);
        self.entries.push((tree, buffer));
    }
}

/// A task's handle to the engine, valid on the worker that runs the task.
pub struct TaskCtx {
    inner: Arc<DbInner>,
    worker: usize,
    task: usize,
    reads: TaskReads,
    /// The key of this task's last put per tree: lets splits recognise a
    /// task inserting ascending keys (see `tree::insert`).
    last_puts: RefCell<LastPuts>,
}

impl TaskCtx {
    /// The worker this task runs on.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The task's index among its worker's tasks in [`Db::run`].
    pub fn task_index(&self) -> usize {
        self.task
    }

    /// True if a page had to be read since the last call (and resets it).
    pub fn take_missed(&self) -> bool {
        self.reads.missed.replace(false)
    }

    /// Pages this task has read so far (reads it started; a page another
    /// task was loading is not counted again).
    pub fn page_reads(&self) -> u64 {
        self.reads.started.get()
    }

    /// Looks up `key`; copies the value into `value` and returns true if found.
    pub async fn get(&self, tree: Tree, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        check_key(key)?;
        let bm = &self.inner.bm;
        if tree.hash {
            match hash::lookup_interleaved(bm, tree.root, key, value).await {
                Ok(found) => return Ok(found),
                // Not in memory (the bucket, out of memory): read it now,
                // then the synchronous lookup (the directory is in memory).
                Err(OpError::Restart(Restart::Load(pid))) => {
                    worker::load_page(pid, &self.reads).await?;
                }
                Err(_) => {}
            }
            return run_op(&self.reads, |_| hash::lookup(bm, tree.root, key, value)).await;
        }
        match tree::lookup_interleaved(bm, tree.root, key, value).await {
            Ok(found) => return Ok(found),
            Err(tree::LookupStop::Miss { child, parent }) => {
                // Load it now, then go on from there; on any conflict the
                // restartable lookup below starts over from the root.
                worker::load_page(child, &self.reads).await?;
                if let Some(parent) = parent {
                    if let Ok(found) = tree::lookup_resume(bm, parent, child, key, value) {
                        return Ok(found);
                    }
                }
            }
            Err(tree::LookupStop::Restart(_)) => {}
        }
        run_op(&self.reads, |_| tree::lookup(bm, tree.root, key, value)).await
    }

    /// Looks up every key of `keys` and calls `found(index, value)` for
    /// each (`None`: absent), in no particular order. The pages the keys
    /// miss are read concurrently: a batch of lookups costs about one read
    /// latency, not one per key (like RocksDB's `MultiGet`). Each lookup is
    /// atomic on its own; the batch is not a snapshot.
    pub async fn get_many<K: AsRef<[u8]>>(
        &self,
        tree: Tree,
        keys: &[K],
        mut found: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        for key in keys {
            check_key(key.as_ref())?;
        }
        let bm = &self.inner.bm;
        let mut pending: Vec<usize> = (0..keys.len()).collect();
        let mut again = Vec::new();
        let mut value = Vec::new();
        while !pending.is_empty() {
            let (mut reads_started, mut must_yield) = (0usize, false);
            // A page another task is reading in, to wait for when this
            // round started no read of its own.
            let mut loading = None;
            let mut fatal = None;
            for &index in &pending {
                let looked = if tree.hash {
                    hash::lookup(bm, tree.root, keys[index].as_ref(), &mut value)
                } else {
                    tree::lookup(bm, tree.root, keys[index].as_ref(), &mut value)
                };
                match looked {
                    Ok(true) => found(index, Some(&value)),
                    Ok(false) => found(index, None),
                    Err(OpError::Fatal(e)) => {
                        fatal = Some(e);
                        break;
                    }
                    Err(OpError::Restart(Restart::Load(pid))) => {
                        let start = match worker::start_read(pid) {
                            Ok(start) => start,
                            Err(e) => {
                                fatal = Some(e);
                                break;
                            }
                        };
                        self.reads.note_miss(matches!(start, LoadStart::Started));
                        match start {
                            LoadStart::Started => reads_started += 1,
                            LoadStart::Resident => {}
                            LoadStart::Loading => loading = Some(pid),
                            LoadStart::Busy | LoadStart::NoFrame => must_yield = true,
                        }
                        again.push(index);
                    }
                    Err(OpError::Restart(Restart::Loading(pid))) => {
                        self.reads.note_miss(false);
                        loading = Some(pid);
                        again.push(index);
                    }
                    Err(OpError::Restart(Restart::Retry | Restart::NoFrame | Restart::LogFull)) => {
                        must_yield = true;
                        again.push(index);
                    }
                }
            }
            if let Some(e) = fatal {
                // Reads this round started still name this task: let them
                // finish before it goes (its id may be reused).
                if reads_started > 0 {
                    let _ = worker::reads_done().await;
                }
                return Err(e);
            }
            std::mem::swap(&mut pending, &mut again);
            again.clear();
            if reads_started > 0 {
                worker::reads_done().await?;
            } else if let Some(pid) = loading {
                worker::wait_loaded(pid).await;
            } else if must_yield {
                crate::sched::yield_busy().await;
            }
        }
        Ok(())
    }

    /// Inserts or replaces `key`. With a log it is a batch of one entry
    /// and returns as [`Options::durability`] says.
    pub async fn put(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        if self.inner.logged {
            let mut batch = WriteBatch::new();
            batch.put(tree, key, value)?;
            return self.write(&batch).await;
        }
        self.put_unlogged(tree, key, value).await
    }

    async fn put_unlogged(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        let bm = &self.inner.bm;
        if tree.hash {
            return run_op(&self.reads, |wb| {
                hash::insert(bm, wb, tree.root, (key, value))
            })
            .await;
        }
        // Taken out while the put runs: other tasks cannot see it, and this
        // task's own puts do not overlap.
        let last_key = self.last_puts.borrow_mut().take(tree.root);
        let previous_key = last_key.as_deref();
        // Both neighbours, at most.
        let mut neighbour_loads_left = 2;
        let result = run_op(&self.reads, |wb| {
            let kv = (key, value);
            tree::insert(
                bm,
                wb,
                tree.root,
                kv,
                previous_key,
                &mut neighbour_loads_left,
            )
        })
        .await;
        self.last_puts
            .borrow_mut()
            .record(tree.root, last_key.unwrap_or_default(), key);
        result
    }

    /// Removes `key`; true if it was present.
    pub async fn delete(&self, tree: Tree, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        if self.inner.logged {
            let mut batch = WriteBatch::new();
            batch.delete(tree, key)?;
            let found = self.write_with(&batch, WriteOptions::default()).await?;
            return Ok(found[0]);
        }
        self.delete_unlogged(tree, key).await
    }

    async fn delete_unlogged(&self, tree: Tree, key: &[u8]) -> Result<bool> {
        let bm = &self.inner.bm;
        if tree.hash {
            return run_op(&self.reads, |_| hash::remove(bm, tree.root, key)).await;
        }
        let found = run_op(&self.reads, |_| tree::remove(bm, tree.root, key)).await?;
        if found {
            self.merge_after_delete(tree, key).await?;
        }
        Ok(found)
    }

    /// Reads the pages on the way to every key of `batch` that are not in
    /// memory, concurrently: a batch of keys spread over a store larger
    /// than the pool waits for about one read per tree level, not one per
    /// leaf (the batch step restarts at each page it misses). The first
    /// round descends for every key from entry `from` on (the step that
    /// missed found the leaves of the entries before it in memory, so
    /// descending for them again would find nothing to read) and starts
    /// the reads it misses; each
    /// later round (up to `PREFETCH_ROUNDS` in all, one per level still
    /// missing) descends again only for the keys that missed in the round
    /// before, since the page just read may be an inner node whose child
    /// is missing too (see ARCHITECTURE, "The life of a commit"). Pages it
    /// reads may be evicted again before the step runs; the step then
    /// reads them one at a time, as without this.
    async fn prefetch_leaves(&self, batch: &WriteBatch, from: usize) -> Result<()> {
        const PREFETCH_ROUNDS: usize = 3;
        let bm = &self.inner.bm;
        let mut probe: Vec<usize> = (from..batch.len()).collect();
        for _ in 0..PREFETCH_ROUNDS {
            let (mut started, mut loading) = (0usize, None);
            let mut fatal = None;
            // The keys to descend for again in the next round.
            let mut missed = Vec::new();
            for (n, &i) in probe.iter().enumerate() {
                let (tree_root, key, _) = batch.entry(i);
                let descended = if batch.entry_tree(i).hash {
                    hash::find_bucket(bm, tree_root, hash::hash_key(key)).map(|_| ())
                } else {
                    tree::descend(bm, tree_root, key).map(|_| ())
                };
                let pid = match descended {
                    Err(OpError::Restart(Restart::Load(pid))) => pid,
                    Err(OpError::Restart(Restart::Loading(pid))) => {
                        loading = Some(pid);
                        missed.push(i);
                        continue;
                    }
                    Err(OpError::Fatal(e)) => {
                        fatal = Some(e);
                        break;
                    }
                    // The leaf is in memory, or a conflict: the step sorts it out.
                    _ => continue,
                };
                missed.push(i);
                match worker::start_read(pid) {
                    Ok(LoadStart::Started) => {
                        self.reads.note_miss(true);
                        started += 1;
                    }
                    Ok(LoadStart::Loading) => loading = Some(pid),
                    Ok(LoadStart::Resident) => {}
                    // No frame or no room in the channel now: the rest in
                    // the next round.
                    Ok(LoadStart::Busy | LoadStart::NoFrame) => {
                        missed.extend_from_slice(&probe[n + 1..]);
                        break;
                    }
                    Err(e) => {
                        fatal = Some(e);
                        break;
                    }
                }
            }
            if started > 0 {
                // Also when a fatal error stopped the round: the reads name
                // this task and must finish before it goes on.
                worker::reads_done().await?;
            } else if let Some(pid) = loading {
                worker::wait_loaded(pid).await;
            }
            if let Some(e) = fatal {
                return Err(e);
            }
            if started == 0 && loading.is_none() {
                break;
            }
            probe = missed;
        }
        Ok(())
    }

    /// The merge inside a removal gives up when a neighbour is not in
    /// memory; this loads it, so that deletes shrink the tree even with a
    /// small pool. The merge is optional: it gives up after 64 restarts (a
    /// bound against thrashing a pool too small for the working set of all
    /// tasks).
    async fn merge_after_delete(&self, tree: Tree, key: &[u8]) -> Result<()> {
        let bm = &self.inner.bm;
        let mut attempts_left = 64u32;
        run_logged_op(&self.reads, self.inner.logged, |_| {
            if attempts_left == 0 {
                return Ok(());
            }
            attempts_left -= 1;
            tree::merge_underfull(bm, tree.root, key)
        })
        .await
    }

    /// Applies `batch` atomically (all of it or none of it, also across a
    /// crash). With [`Durability::Sync`] the task waits, parked, until the
    /// batch is durable: one log flush covers the commits of every task
    /// waiting meanwhile (group commit).
    pub async fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_with(batch, WriteOptions::default())
            .await
            .map(|_| ())
    }

    /// [`TaskCtx::write`] with per-call options; returns, per entry,
    /// whether a delete found its key.
    pub async fn write_with(&self, batch: &WriteBatch, options: WriteOptions) -> Result<Vec<bool>> {
        if !self.inner.logged {
            return self.write_unlogged(batch).await;
        }
        batch::check_batch_size(batch.len(), self.inner.frames_per_worker)?;
        let bm = &self.inner.bm;
        if batch.is_empty() {
            // Nothing to apply or log (no step, so no wait for log room):
            // only the wait for the groups before it.
            bm.wal().check()?;
            self.wait_durable_through(bm.wal().next_seq() - 1, options)
                .await?;
            return Ok(Vec::new());
        }
        let mut prefetched = false;
        let mut neighbour_loads = 0;
        let mut located = 0;
        let mut first_step = true;
        let applied = loop {
            let step = {
                let last_puts = self.last_puts.borrow();
                let may_load_neighbour = neighbour_loads < NEIGHBOUR_LOADS_PER_WRITE_MOST;
                let probe = first_step && batch::probe_pays(batch.len());
                worker::with_local(|wb| {
                    batch::apply_step(
                        wb,
                        batch,
                        &last_puts,
                        may_load_neighbour,
                        probe,
                        &mut located,
                    )
                })
            };
            if first_step {
                first_step = false;
                batch::note_first_step(matches!(
                    step,
                    Err(BatchStop::Restart(Restart::Load(_) | Restart::Loading(_)))
                ));
            }
            match step {
                Ok(applied) => break applied,
                Err(BatchStop::Fatal(e)) => return Err(e),
                Err(BatchStop::Restart(Restart::Load(pid))) => {
                    if !prefetched && batch.len() > 1 {
                        // The first miss: read every missing leaf of the
                        // batch at once, not one per restart. The entries
                        // before the miss found theirs in memory.
                        prefetched = true;
                        self.prefetch_leaves(batch, located).await?;
                    } else {
                        worker::load_page(pid, &self.reads).await?
                    }
                }
                Err(BatchStop::Restart(Restart::Loading(pid))) => {
                    self.reads.note_miss(false);
                    worker::wait_loaded(pid).await
                }
                Err(BatchStop::LoadNeighbour(pid)) => {
                    neighbour_loads += 1;
                    worker::load_page(pid, &self.reads).await?
                }
                Err(BatchStop::NoLogRoom { record_bytes }) => {
                    worker::wait_log_room(record_bytes).await
                }
                Err(BatchStop::NoFrames { frames }) => worker::wait_free_frames(frames).await,
                Err(BatchStop::Restart(_)) => crate::sched::yield_busy().await,
                Err(BatchStop::HashFull { entry }) => {
                    // The bucket may have room for this entry alone (the
                    // batch's earlier entries filled it): always grow.
                    let (tree_root, key, _) = batch.entry(entry);
                    run_logged_op(&self.reads, true, |wb| {
                        hash::grow(bm, wb, tree_root, key, None)
                    })
                    .await?;
                }
                Err(BatchStop::ParentFull { entry, need_bytes }) => {
                    if need_bytes > PAGE_SIZE / 3 {
                        return Err(Error::InvalidArgument(format!(
                            "the batch splits so many leaves under one inner node that their separators ({need_bytes} bytes) would not fit it; split the batch"
                        )));
                    }
                    let (tree_root, key, _) = batch.entry(entry);
                    run_logged_op(&self.reads, true, |wb| {
                        tree::make_room_in_parent(bm, wb, tree_root, key, need_bytes)
                    })
                    .await?;
                }
            }
        };
        for i in 0..batch.len() {
            if let (tree_root, key, Some(_)) = batch.entry(i) {
                let old = self.last_puts.borrow_mut().take(tree_root);
                self.last_puts
                    .borrow_mut()
                    .record(tree_root, old.unwrap_or_default(), key);
            }
        }
        for &i in &applied.underfull {
            let (_, key, _) = batch.entry(i);
            self.merge_after_delete(batch.entry_tree(i), key).await?;
        }
        // A batch that changed nothing still makes every earlier group
        // durable, as a synced write does in other engines: the caller may
        // rely on it for its earlier unsynced writes.
        let last_seq = applied.seq.unwrap_or_else(|| bm.wal().next_seq() - 1);
        self.wait_durable_through(last_seq, options).await?;
        Ok(applied.found)
    }

    /// Waits, when `options` (or the store's durability) asks a write to
    /// be synced, until every group up to `last_seq` is durable.
    async fn wait_durable_through(&self, last_seq: u64, options: WriteOptions) -> Result<()> {
        let wal = self.inner.bm.wal();
        let wait = options.sync.unwrap_or(wal.durability() == Durability::Sync);
        if wait && last_seq > 0 {
            if wal.durability() != Durability::Sync {
                worker::with_local(|wb| wb.flush_log(true));
            }
            worker::wait_durable(last_seq).await?;
        }
        Ok(())
    }

    /// A batch without a log: entry by entry, not atomic.
    async fn write_unlogged(&self, batch: &WriteBatch) -> Result<Vec<bool>> {
        let mut found = vec![false; batch.len()];
        for (i, slot) in found.iter_mut().enumerate() {
            let (_, key, value) = batch.entry(i);
            let tree = batch.entry_tree(i);
            match value {
                Some(value) => self.put_unlogged(tree, key, value).await?,
                None => *slot = self.delete_unlogged(tree, key).await?,
            }
        }
        Ok(found)
    }

    /// Calls `f` on entries from `start` in `direction` until it returns
    /// false. `f` sees keys and values in place, under a shared latch of
    /// their leaf (writers of that leaf wait): keep it short. It goes from
    /// leaf to leaf through their parent, descending from the root only
    /// when the parent changed or a new parent begins.
    /// It reads no page ahead: see [`TaskCtx::scan_expecting`].
    pub async fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        direction: Direction,
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.scan_expecting(tree, start, direction, 0, f).await
    }

    /// [`TaskCtx::scan`] for a caller that expects to visit about
    /// `entries_expected` entries (e.g. a scan with a limit). Once the
    /// scan misses a page (it runs out of memory), it reads ahead, from
    /// the parent of the leaf it is on, the leaves that the entries still
    /// expected need at the entries per leaf seen so far, up to
    /// [`SCAN_READ_AHEAD_MOST_LEAVES`]: the scan then waits for about one
    /// round of reads rather than one read per leaf. A scan that stops
    /// earlier than expected leaves those reads wasted; `f` still decides
    /// where it stops.
    pub async fn scan_expecting(
        &self,
        tree: Tree,
        start: &[u8],
        direction: Direction,
        entries_expected: usize,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        refuse_scan(&self.inner, tree)?;
        let bm = &self.inner.bm;
        let mut from = start.to_vec();
        let mut cursor = None;
        let mut key = Vec::new();
        let mut ahead = Vec::new();
        let (mut entries, mut leaves) = (0usize, 0usize);
        let misses_at_start = self.reads.misses.get();
        let reads = &self.reads;
        // The next leaves are collected only by a scan that may read ahead
        // (it expects entries and has missed a page: after a miss, the
        // step runs again and collects them).
        let ahead_collected = || {
            if entries_expected > 0 && reads.misses.get() != misses_at_start {
                SCAN_READ_AHEAD_MOST_LEAVES
            } else {
                0
            }
        };
        loop {
            let mut visit = |k: &[u8], v: &[u8]| {
                entries += 1;
                f(k, v)
            };
            let step = run_op(&self.reads, |_| {
                tree::scan_leaf_visit(
                    bm,
                    tree.root,
                    &mut from,
                    direction,
                    &mut cursor,
                    &mut key,
                    (&mut ahead, ahead_collected()),
                    &mut visit,
                )
            })
            .await?;
            if step != ScanStep::Next {
                return Ok(());
            }
            leaves += 1;
            // The leaves the entries still expected need, at the entries
            // per leaf seen so far.
            let ahead_wanted = entries_expected
                .saturating_sub(entries)
                .div_ceil(entries.div_ceil(leaves).max(1));
            // Neighbouring leaves (consecutive page ids) go in one read.
            // An early stop (no frame or no room in the channel now) or a
            // bad page id is left to the scan, which finds out itself if
            // it needs the page.
            let wanted = ahead.len().min(ahead_wanted);
            if direction == Direction::Backward {
                ahead[..wanted].reverse();
            }
            let _ = worker::read_ahead(&ahead[..wanted]);
        }
    }
}

/// Most leaves a [`TaskCtx::scan`] reads ahead at once.
pub const SCAN_READ_AHEAD_MOST_LEAVES: usize = 16;

/// Values of a [`Db::multi_get`] (None: absent), in the order of its keys.
type Values = Vec<Option<Vec<u8>>>;

/// Most tasks one worker runs for its share of a [`Db::multi_get`].
pub const MULTI_GET_TASKS: usize = 64;

/// Times a lookup on the calling thread restarts after a latch conflict
/// before it hands the key to a worker.
const CALLER_LOOKUP_TRIES: usize = 4;

/// Most neighbour leaves one write loads to move entries there instead of
/// splitting a full leaf (`BatchStop::LoadNeighbour`): a batch of many
/// scattered inserts out of memory does not wait for a read per entry
/// that overflows; later overflows rebalance with neighbours in memory or
/// split.
const NEIGHBOUR_LOADS_PER_WRITE_MOST: usize = 4;

/// Iterator over a range, fetching one leaf per step from a worker.
pub struct RangeIter<'a> {
    db: &'a Db,
    tree: Tree,
    direction: Direction,
    next: Option<Vec<u8>>,
    batch: VecDeque<(Vec<u8>, Vec<u8>)>,
}

impl Iterator for RangeIter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.batch.is_empty() {
            let from = self.next.take()?;
            let (tree, direction) = (self.tree, self.direction);
            let worker = self.db.pick_worker();
            let fetched = self.db.refuse_inside_own_task().and_then(|()| {
                self.db.submit(worker, move |ctx| async move {
                    let mut batch = ScanBatch::default();
                    let bm = &ctx.inner.bm;
                    refuse_scan(&ctx.inner, tree)?;
                    run_op(&ctx.reads, |_| {
                        tree::scan_leaf(bm, tree.root, &from, direction, &mut batch)
                    })
                    .await?;
                    Ok(batch)
                })
            });
            match fetched.and_then(|r| r.wait()) {
                Ok(batch) => {
                    self.batch
                        .extend(batch.entries().map(|(k, v)| (k.to_vec(), v.to_vec())));
                    self.next = batch.next;
                }
                Err(e) => return Some(Err(e)),
            }
        }
        self.batch.pop_front().map(Ok)
    }
}

/// A scan of a hash tree is `Error::Unsupported`, naming the tree.
fn refuse_scan(inner: &DbInner, tree: Tree) -> Result<()> {
    if !tree.hash {
        return Ok(());
    }
    let name = inner
        .bm
        .wal()
        .catalog
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(_, root)| *root == tree.root)
        .map_or_else(
            || format!("rooted at page {}", tree.root),
            |(n, _)| format!("{n:?}"),
        );
    Err(Error::Unsupported(format!(
        "tree {name} is a hash tree: it has no key order to scan"
    )))
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("empty key".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

fn check_entry(key: &[u8], value: &[u8]) -> Result<()> {
    check_key(key)?;
    if key.len() + value.len() > MAX_ENTRY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "key + value of {} bytes exceeds the limit of {MAX_ENTRY_BYTES}",
            key.len() + value.len()
        )));
    }
    Ok(())
}

fn validate_options(options: &Options) -> Result<()> {
    if options.workers == 0 || options.workers > 1024 {
        return Err(Error::InvalidArgument(format!(
            "workers must be 1..=1024, got {}",
            options.workers
        )));
    }
    let min_pool = MIN_FRAMES_PER_WORKER * options.workers as u64 * PAGE_SIZE as u64;
    if options.pool_bytes < min_pool {
        return Err(Error::InvalidArgument(format!(
            "pool of {} bytes is below the minimum of {min_pool} for {} workers",
            options.pool_bytes, options.workers
        )));
    }
    if options.wal_bytes_per_worker < 1 << 20 || !options.wal_bytes_per_worker.is_multiple_of(4096)
    {
        return Err(Error::InvalidArgument(format!(
            "wal_bytes_per_worker must be a multiple of 4096 of at least 1 MiB, got {}",
            options.wal_bytes_per_worker
        )));
    }
    if options.wal_buffer_bytes < 1 << 20 {
        return Err(Error::InvalidArgument(format!(
            "wal_buffer_bytes must be at least 1 MiB, got {}",
            options.wal_buffer_bytes
        )));
    }
    if options.checkpoint_log_bytes == 0
        || options.checkpoint_log_bytes > options.wal_bytes_per_worker / 2
    {
        return Err(Error::InvalidArgument(format!(
            "checkpoint_log_bytes must be 1..={} (half the log), got {}",
            options.wal_bytes_per_worker / 2,
            options.checkpoint_log_bytes
        )));
    }
    if let Durability::Buffered { max_delay_ms: 0 } = options.durability {
        return Err(Error::InvalidArgument(
            "Durability::Buffered needs max_delay_ms of at least 1 (use Sync to wait for every commit)"
                .into(),
        ));
    }
    Ok(())
}

fn start_workers(
    inner: &Arc<DbInner>,
    options: &Options,
    logs: Vec<Option<LogWriter>>,
) -> Result<(Vec<WorkerThread>, Vec<String>)> {
    let mut logs = logs.into_iter();
    let mut threads = Vec::new();
    let mut notes = Vec::new();
    let mut io_config = options.io.clone();
    if io_config.max_submitted.is_none() {
        // The workers share the disks' request queues.
        let capacity = inner.bm.storage().request_queue_capacity();
        let per_worker = capacity.map_or(0, |c| (c / options.workers as u32).max(1));
        io_config.max_submitted = Some(per_worker);
        notes.push(match capacity {
            Some(c) => {
                format!("at most {per_worker} requests submitted per worker (the disks queue {c})")
            }
            None => "disk request queue size unknown: submissions not limited".into(),
        });
    }
    let stop_all = |threads: Vec<WorkerThread>| {
        inner.shutdown.store(true, Ordering::Release);
        for s in inner.workers.iter() {
            s.wake();
        }
        for t in threads {
            let _ = t.join();
        }
    };
    for w in 0..options.workers {
        let (tx, rx) = std::sync::mpsc::channel();
        let start = worker::WorkerStart {
            bm: inner.bm.clone(),
            shared: inner.workers.clone(),
            index: w,
            io_config: io_config.clone(),
            log: logs.next().flatten(),
            log_writes: options.log_writes,
            checkpoints: checkpoint::CheckpointDriver::new(w, options.checkpoint_log_bytes),
            shutdown: inner.shutdown.clone(),
            started: tx,
        };
        let spawned = std::thread::Builder::new()
            .name(format!("flashtree-w{w}"))
            .spawn(move || worker::worker_main(start));
        let handle = match spawned {
            Ok(handle) => handle,
            Err(e) => {
                stop_all(threads);
                return Err(Error::Unsupported(format!(
                    "cannot start a worker thread: {e}"
                )));
            }
        };
        threads.push(handle);
        match rx.recv() {
            Ok(Ok(worker_notes)) => {
                if w == 0 {
                    notes.extend(worker_notes);
                }
            }
            Ok(Err(e)) => {
                stop_all(threads);
                return Err(e);
            }
            Err(_) => {
                stop_all(threads);
                return Err(Error::Unsupported(
                    "a worker thread died during start-up".into(),
                ));
            }
        }
    }
    Ok((threads, notes))
}
