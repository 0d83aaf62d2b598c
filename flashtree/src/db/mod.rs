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

mod meta;
mod reply;
mod worker;

pub use meta::{MAX_TREES, MAX_TREE_NAME_BYTES};
pub use reply::Reply;

use crate::btree::node::{MAX_ENTRY_BYTES, MAX_KEY_BYTES};
use crate::btree::tree::{self, Direction, ScanBatch, ScanStep};
use crate::buffer::{
    BufferConfig, BufferManager, LoadStart, OpError, PageId, Restart, MIN_FRAMES_PER_WORKER,
};
use crate::error::{Error, Result};
use crate::io::{
    AlignedBuf, BackendKind, IoChannel, IoConfig, IoRequest, Storage, StorageConfig, PAGE_SIZE,
};
use crate::sched::Executor;
use reply::reply_pair;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use worker::{run_op, Job, TaskReads, WorkerShared};

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
        }
    }
}

/// A named B+-tree in a store. A small copyable handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    root: PageId,
}

/// Counters of the whole engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct DbStats {
    /// Pages read from the devices.
    pub page_reads: u64,
    /// Pages written to the devices.
    pub page_writes: u64,
    /// Pages evicted from the pool.
    pub evictions: u64,
    /// Pool size in bytes.
    pub pool_bytes: u64,
    /// Pages allocated in the store (its size is this × 4096).
    pub pages_allocated: u64,
}

/// A worker thread; it returns the result of its final flush.
type WorkerThread = JoinHandle<Result<()>>;

struct DbInner {
    bm: Arc<BufferManager>,
    workers: Arc<Vec<WorkerShared>>,
    shutdown: Arc<AtomicBool>,
    trees: Mutex<Vec<(String, PageId)>>,
    next_worker: AtomicUsize,
}

/// An open store. Dropping it closes it (errors then go to stderr; call
/// [`Db::close`] to see them).
pub struct Db {
    inner: Arc<DbInner>,
    threads: Mutex<Vec<WorkerThread>>,
    closed: AtomicBool,
    notes: Vec<String>,
    /// The store's files, each under an exclusive `flock` until the Db is
    /// dropped (after `close` marked the store closed).
    _locks: Vec<std::fs::File>,
}

impl Db {
    /// Opens or creates the store in directory `dir` (file `dir/data.ft`).
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Db> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::InvalidArgument(format!("cannot create {}: {e}", dir.display())))?;
        Db::open_devices(&[dir.join("data.ft")], options)
    }

    /// Opens or creates a store striped (RAID0) over these files or devices.
    ///
    /// One [`Db`] at a time may have a store open: the files are locked
    /// ([`Error::InUse`] otherwise). A store that was open when its process
    /// crashed or was killed is refused with [`Error::NotClosedCleanly`]:
    /// flashtree has no write-ahead log, so such a store's pages may be
    /// inconsistent with each other.
    pub fn open_devices(paths: &[PathBuf], options: Options) -> Result<Db> {
        validate_options(&options)?;
        let locks = lock_store(paths)?;
        let is_new = paths.iter().all(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.len() == 0)
                .unwrap_or(true)
        });
        let mut config = StorageConfig::new(paths.to_vec());
        config.chunk_bytes = options.chunk_bytes;
        config.direct = options.direct_io;
        config.min_capacity_bytes = if is_new { 16 << 20 } else { 0 };
        let storage = Arc::new(Storage::open(&config)?);
        let (meta, free) = if is_new {
            let meta = meta::Meta {
                next_pid: 1,
                free_list_head: None,
                trees: Vec::new(),
                in_use: false,
            };
            write_meta(&storage, &meta, &[])?;
            (meta, Vec::new())
        } else {
            read_meta(&storage)?
        };
        if meta.in_use {
            return Err(Error::NotClosedCleanly(format!(
                "{} was open in a process that ended without closing it (a crash or a kill). flashtree has no write-ahead log yet, so the pages written before that may be inconsistent with each other; recreate the store (delete these files) or restore a copy",
                list_paths(paths)
            )));
        }
        let bm = Arc::new(BufferManager::new(
            storage.clone(),
            &BufferConfig {
                pool_bytes: options.pool_bytes,
                workers: options.workers,
                max_store_bytes: options.max_store_bytes,
                free_target_pct: options.free_target_pct,
                dirty_spare_rounds: options.dirty_spare_rounds,
                hot_spare_rounds: options.hot_spare_rounds,
            },
        )?);
        bm.set_allocation(meta.next_pid, free)?;
        // From here on pages may be written: mark the store in use first.
        let in_use = meta::Meta {
            in_use: true,
            ..meta.clone()
        };
        write_meta_page(&storage, &in_use)?;
        let inner = Arc::new(DbInner {
            bm: bm.clone(),
            workers: Arc::new(
                (0..options.workers)
                    .map(|_| WorkerShared::default())
                    .collect(),
            ),
            shutdown: Arc::new(AtomicBool::new(false)),
            trees: Mutex::new(meta.trees.clone()),
            next_worker: AtomicUsize::new(0),
        });
        let (threads, notes) = match start_workers(&inner, &options) {
            Ok(started) => started,
            Err(e) => {
                // The workers that started have stopped, and no request
                // ran: the store is as closed as it was.
                let _ = write_meta_page(&storage, &meta);
                return Err(e);
            }
        };
        Ok(Db {
            inner,
            threads: Mutex::new(threads),
            closed: AtomicBool::new(false),
            notes,
            _locks: locks,
        })
    }

    /// Notes from start-up (I/O fallbacks), one per worker at most.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Worker threads.
    pub fn worker_count(&self) -> usize {
        self.inner.workers.len()
    }

    /// The tree named `name`, created empty if it does not exist.
    pub fn tree(&self, name: &str) -> Result<Tree> {
        if name.is_empty() || name.len() > MAX_TREE_NAME_BYTES {
            return Err(Error::InvalidArgument(format!(
                "tree name must be 1..={MAX_TREE_NAME_BYTES} bytes, got {}",
                name.len()
            )));
        }
        let mut trees = self.inner.trees.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, root)) = trees.iter().find(|(n, _)| n == name) {
            return Ok(Tree { root: *root });
        }
        if trees.len() >= MAX_TREES {
            return Err(Error::Full(format!(
                "a store holds at most {MAX_TREES} named trees"
            )));
        }
        let root = self.call(0, |ctx| async move {
            run_op(&ctx.reads, |wb| {
                let bm = ctx.inner.bm.clone();
                let mut page = wb.alloc_page(&bm)?;
                tree::init_root(page.page_mut());
                Ok(page.pid())
            })
            .await
        })??;
        trees.push((name.to_string(), root));
        Ok(Tree { root })
    }

    /// Names of the trees in the store.
    pub fn tree_names(&self) -> Vec<String> {
        self.inner
            .trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The value of `key`, if present.
    pub fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_async(tree, key)?.wait()
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

    /// Inserts or replaces `key`.
    pub fn put(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_async(tree, key, value)?.wait()
    }

    /// Like [`Db::put`], as a future.
    pub fn put_async(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<Reply<Result<()>>> {
        check_entry(key, value)?;
        let (key, value) = (key.to_vec(), value.to_vec());
        self.submit(self.pick_worker(), move |ctx| async move {
            ctx.put(tree, &key, &value).await
        })
    }

    /// Removes `key`; true if it was present.
    pub fn delete(&self, tree: Tree, key: &[u8]) -> Result<bool> {
        check_key(key)?;
        let key = key.to_vec();
        self.submit(self.pick_worker(), move |ctx| async move {
            ctx.delete(tree, &key).await
        })?
        .wait()
    }

    /// Looks up many keys at once, as concurrent tasks spread over all
    /// workers. Results are in the order of `keys`.
    pub fn multi_get(&self, tree: Tree, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let replies: Vec<_> = keys
            .iter()
            .map(|k| self.get_async(tree, k))
            .collect::<Result<_>>()?;
        replies.into_iter().map(Reply::wait).collect()
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
            stats.page_writes += w.page_writes.load(Ordering::Relaxed);
            stats.evictions += w.evictions.load(Ordering::Relaxed);
        }
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
        self.call(0, move |ctx| async move {
            let freed: std::collections::HashSet<PageId> =
                ctx.inner.bm.free_page_ids().into_iter().collect();
            let mut seen = std::collections::HashSet::new();
            let mut leaf_depth: Option<usize> = None;
            let mut stack = vec![(tree.root, Vec::new(), Vec::new(), 0usize)];
            let mut shape = TreeShape::default();
            while let Some((pid, lower, upper, depth)) = stack.pop() {
                if pid == 0 || freed.contains(&pid) || !seen.insert(pid) {
                    return Err(Error::Corrupt(format!(
                        "page {pid} is referenced twice, is page 0 or is free"
                    )));
                }
                let report = run_op(&ctx.reads, |_| {
                    tree::check_node(&ctx.inner.bm, pid, &lower, &upper)
                })
                .await?;
                if report.is_leaf {
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
        })?
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
        for handle in self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let result = handle
                .join()
                .unwrap_or_else(|_| Err(Error::Unsupported("a worker thread panicked".into())));
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let bm = &self.inner.bm;
        let trees = self
            .inner
            .trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let meta = meta::Meta {
            next_pid: bm.next_page_id(),
            free_list_head: None,
            trees,
            in_use: false,
        };
        write_meta(bm.storage(), &meta, &bm.free_page_ids())
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

    /// Runs one task on `worker` and waits for it.
    fn call<T, F, Fut>(&self, worker: usize, make: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(TaskCtx) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
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
                match tree::lookup(bm, tree.root, keys[index].as_ref(), &mut value) {
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
                    Err(OpError::Restart(Restart::Retry | Restart::NoFrame)) => {
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

    /// Inserts or replaces `key`.
    pub async fn put(&self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        check_entry(key, value)?;
        let bm = &self.inner.bm;
        // Taken out while the put runs: other tasks cannot see it, and this
        // task's own puts do not overlap.
        let last_key = self.last_puts.borrow_mut().take(tree.root);
        let previous_key = last_key.as_deref();
        let result = run_op(&self.reads, |wb| {
            tree::insert(bm, wb, tree.root, key, value, previous_key)
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
        let bm = &self.inner.bm;
        let found = run_op(&self.reads, |_| tree::remove(bm, tree.root, key)).await?;
        if found {
            // The merge inside `remove` gives up when a neighbour is not in
            // memory; this loads it, so that deletes shrink the tree even
            // with a small pool. The merge is optional: it gives up after 64
            // restarts (a bound against thrashing a pool too small for the
            // working set of all tasks).
            let mut attempts_left = 64u32;
            run_op(&self.reads, |_| {
                if attempts_left == 0 {
                    return Ok(());
                }
                attempts_left -= 1;
                tree::merge_underfull(bm, tree.root, key)
            })
            .await?;
        }
        Ok(found)
    }

    /// Calls `f` on entries from `start` in `direction` until it returns
    /// false. `f` sees keys and values in place, under a shared latch of
    /// their leaf (writers of that leaf wait): keep it short. It goes from
    /// leaf to leaf through their parent, descending from the root only
    /// when the parent changed or a new parent begins.
    pub async fn scan(
        &self,
        tree: Tree,
        start: &[u8],
        direction: Direction,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let bm = &self.inner.bm;
        let mut from = start.to_vec();
        let mut cursor = None;
        let mut key = Vec::new();
        loop {
            let step = run_op(&self.reads, |_| {
                tree::scan_leaf_visit(
                    bm,
                    tree.root,
                    &mut from,
                    direction,
                    &mut cursor,
                    &mut key,
                    &mut f,
                )
            })
            .await?;
            if step != ScanStep::Next {
                return Ok(());
            }
        }
    }
}

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
            let fetched = self.db.submit(worker, move |ctx| async move {
                let mut batch = ScanBatch::default();
                let bm = &ctx.inner.bm;
                run_op(&ctx.reads, |_| {
                    tree::scan_leaf(bm, tree.root, &from, direction, &mut batch)
                })
                .await?;
                Ok(batch)
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
    Ok(())
}

fn start_workers(
    inner: &Arc<DbInner>,
    options: &Options,
) -> Result<(Vec<WorkerThread>, Vec<String>)> {
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
        let (bm, shared, shutdown, io) = (
            inner.bm.clone(),
            inner.workers.clone(),
            inner.shutdown.clone(),
            io_config.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("flashtree-w{w}"))
            .spawn(move || worker::worker_main(bm, shared, w, io, shutdown, tx));
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

/// Page-sized synchronous I/O on the storage, for metadata at open/close.
fn sync_page_io(
    storage: &Arc<Storage>,
    write: bool,
    pid: PageId,
    buf: &mut AlignedBuf,
) -> Result<()> {
    let mut channel = IoChannel::new(
        storage.clone(),
        &IoConfig {
            backend: BackendKind::Sync,
            depth: 1,
            ..IoConfig::default()
        },
    )?;
    let offset = pid * PAGE_SIZE as u64;
    let req = if write {
        IoRequest::write(offset, buf.as_ptr(), PAGE_SIZE as u32, 0)
    } else {
        IoRequest::read(offset, buf.as_mut_ptr(), PAGE_SIZE as u32, 0)
    };
    // SAFETY: buf outlives the channel, which completes the request below.
    unsafe { channel.push(req) }?;
    let mut done = Vec::new();
    channel.wait(1, &mut done)?;
    done.pop().expect("one completion").result?;
    Ok(())
}

/// The paths, for messages.
fn list_paths(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// How long [`lock_store`] retries a store that another Db holds.
const LOCK_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Opens every path (creating missing files) and takes an exclusive
/// `flock` on it, waiting at most [`LOCK_WAIT_MAX`]. The store stays locked while the
/// returned files are open. The lock is advisory: it keeps out other
/// flashtree Dbs, in this process or another, not other programs.
fn lock_store(paths: &[PathBuf]) -> Result<Vec<std::fs::File>> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let mut files: Vec<std::fs::File> = Vec::with_capacity(paths.len());
    let mut identities: Vec<(u64, u64)> = Vec::with_capacity(paths.len());
    for path in paths {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::Unsupported(format!("open {}: {e}", path.display())))?;
        let stat = file
            .metadata()
            .map_err(|e| Error::Unsupported(format!("stat {}: {e}", path.display())))?;
        let identity = (stat.dev(), stat.ino());
        if identities.contains(&identity) {
            return Err(Error::InvalidArgument(format!(
                "{} is listed twice among the store's files",
                path.display()
            )));
        }
        identities.push(identity);
        // A child process between fork and exec holds copies of the
        // parent's descriptors, locks included, for a moment after the
        // parent closed a Db: a conflict is retried for a while before it
        // is reported.
        let deadline = std::time::Instant::now() + LOCK_WAIT_MAX;
        let locked = loop {
            // SAFETY: flock on a descriptor this function owns; no memory involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            let error = std::io::Error::last_os_error();
            let busy = rc != 0 && error.raw_os_error() == Some(libc::EWOULDBLOCK);
            if !busy || std::time::Instant::now() >= deadline {
                break if rc == 0 { Ok(()) } else { Err(error) };
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        if let Err(e) = locked {
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                Error::InUse(format!(
                    "{} is open in another flashtree Db (in this process or another); close that one first",
                    path.display()
                ))
            } else {
                Error::Unsupported(format!("flock {}: {e}", path.display()))
            });
        }
        files.push(file);
    }
    Ok(files)
}

fn read_meta(storage: &Arc<Storage>) -> Result<(meta::Meta, Vec<PageId>)> {
    let mut buf = AlignedBuf::new(PAGE_SIZE);
    sync_page_io(storage, false, 0, &mut buf)
        .map_err(|e| Error::Corrupt(format!("cannot read the metadata page: {e}")))?;
    let page: &[u8; PAGE_SIZE] = (&buf[..]).try_into().expect("one page");
    let meta = meta::decode_meta(page)?;
    let mut free = Vec::new();
    let mut next = meta.free_list_head;
    let mut hops = 0u64;
    while let Some(pid) = next {
        hops += 1;
        if pid >= meta.next_pid || hops > meta.next_pid {
            return Err(Error::Corrupt(format!("free list points to page {pid}")));
        }
        sync_page_io(storage, false, pid, &mut buf)?;
        let page: &[u8; PAGE_SIZE] = (&buf[..]).try_into().expect("one page");
        let (n, ids) = meta::decode_free_list_page(page, pid)?;
        free.push(pid);
        free.extend(ids);
        next = n;
    }
    Ok((meta, free))
}

/// Writes the free list and the metadata page, then syncs every device.
fn write_meta(storage: &Arc<Storage>, meta: &meta::Meta, free: &[PageId]) -> Result<()> {
    let (head, pages) = meta::encode_free_list(free);
    let mut buf = AlignedBuf::new(PAGE_SIZE);
    for (pid, page) in pages {
        buf.copy_from_slice(&page[..]);
        sync_page_io(storage, true, pid, &mut buf)?;
    }
    // Every page the metadata page describes is durable before it is.
    sync_devices(storage)?;
    let meta = meta::Meta {
        free_list_head: head,
        ..meta.clone()
    };
    write_meta_page(storage, &meta)
}

/// Writes the metadata page as `meta` says (its free-list head included),
/// then syncs every device.
fn write_meta_page(storage: &Arc<Storage>, meta: &meta::Meta) -> Result<()> {
    let mut buf = AlignedBuf::new(PAGE_SIZE);
    let page: &mut [u8; PAGE_SIZE] = (&mut buf[..]).try_into().expect("one page");
    meta::encode_meta(meta, page);
    sync_page_io(storage, true, 0, &mut buf)?;
    sync_devices(storage)
}

/// fsync (fdatasync) every device of the store.
fn sync_devices(storage: &Arc<Storage>) -> Result<()> {
    let mut channel = IoChannel::new(
        storage.clone(),
        &IoConfig {
            backend: BackendKind::Sync,
            depth: 8,
            ..IoConfig::default()
        },
    )?;
    let mut done = Vec::new();
    for device in 0..storage.device_count() {
        // SAFETY: syncs carry no buffer.
        unsafe { channel.push(IoRequest::sync(device, true, device as u64)) }?;
        channel.wait(1, &mut done)?;
    }
    for c in done {
        c.result?;
    }
    Ok(())
}
