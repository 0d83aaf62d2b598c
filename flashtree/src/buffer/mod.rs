//! The buffer manager: 4 KiB frames caching pages of the [`Storage`].
//!
//! * **Page table.** One state word per page id ([`state`]) and one frame
//!   index per page id, both in reserved virtual memory: translating a page
//!   id to a frame is one array lookup. State and version share the word
//!   (vmcache), giving optimistic, shared and exclusive latches.
//! * **Frames** are a fixed pool of `pool_bytes`, partitioned among the
//!   workers: each worker owns a contiguous range of frames, its free list
//!   and its clock hand, so no two workers contend on eviction or frame
//!   allocation. Any worker may read or latch a page in any frame.
//! * **Misses.** A task that misses claims the page by CAS evicted→loading
//!   (the page-state array is the table of reads in flight: a second task
//!   that misses the same page sees `loading` and waits instead of reading),
//!   takes a frame from its worker's free list, pushes the read on its
//!   worker's channel and parks. The worker loop completes the read, checks
//!   the page's checksum and id, publishes the frame and wakes the task.
//! * **Eviction** is worker work (Haas & Leis (VLDB 2023) §3.3): when a worker's free frames
//!   fall below its target, its clock sweeps its own frames in a batch:
//!   unlocked pages are marked, marked pages are latched exclusively and
//!   either evicted (clean) or written asynchronously (dirty) and evicted
//!   when the write completes. Two refinements: a dirty page is passed over
//!   for `dirty_spare_rounds` marked rounds (clean pages go first), and
//!   every page is spared one marked round per use counted in its *heat*
//!   (up to `hot_spare_rounds`): a per-page-id count of reads and of clock
//!   rounds that found it referenced, halving every few pools' worth of
//!   reads and kept across evictions (a frequency-aware clock, after GCLOCK
//!   and LRU-K: a page wanted every few rounds outlives pages read once,
//!   which a reference bit alone cannot tell apart, and a page read back
//!   again and again is recognised as hot).
//!
//! Nothing here blocks: every latch is a try-operation, and the tree
//! reports [`Restart`] so that the calling task yields, waits for a load or
//! for frames, and restarts its operation.

mod free;
mod lazy;
pub mod page;
mod racy;
pub(crate) mod state;
pub mod step;

pub use page::{
    page_checksum, seal_page, verify_page, PAGE_HEADER_BYTES, PAGE_KIND_HASH_DIR, PAGE_KIND_INNER,
    PAGE_KIND_LEAF,
};
pub use racy::RacyPage;

use crate::error::{Error, Result};
use crate::io::{IoChannel, IoCompletion, IoConfig, IoRequest, Storage, WriteClass, PAGE_SIZE};

/// Uses lately (the heat count) from which a page's writes are hot
/// ([`WriteClass::DataHot`]): more than the one read that brought it in.
const HOT_PAGE_HEAT: u32 = 2;
use crate::sched::TaskId;
use crate::wal::format::GroupParts;
use crate::wal::writer::{LogWriter, LOG_TAG};
use crate::wal::WalShared;
use lazy::LazyArray;
use state::{
    make, readable, state_of, version_of, PageState, EVICTED, LOADING, LOCKED, MARKED, UNLOCKED,
};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A page number; page `p` lives at logical byte offset `p * 4096`.
pub type PageId = u64;

/// Frame slot holds no page.
const NO_PAGE: u64 = u64::MAX;
/// Frame's page was freed; its owner returns the frame to its free list.
const FREED_PAGE: u64 = u64::MAX - 1;
/// A worker with nothing to run waits for in-flight I/O / this many completions.
const WAIT_BATCH_DIVISOR: usize = 16;
/// Page-table frame slot of a freed page: a stale reference to it (read
/// from a parent before the page was merged away) must not load it from
/// disk; the task restarts and finds the parent changed.
const FREED_SLOT: u32 = u32::MAX;
/// Bit of a request's user_data marking a write-back.
const WRITE_TAG: u64 = 1 << 63;
/// Bit of a request's user_data marking the write of a page that stays in
/// memory (close, checkpoints).
const FLUSH_TAG: u64 = 1 << 62;
/// Most dirty pages a checkpoint's page pass looks at per worker loop.
const CHECKPOINT_PAGES_PER_STEP: usize = 256;
/// Most frames a checkpoint's page pass scans for dirty pages per worker
/// loop.
const CHECKPOINT_SCAN_FRAMES_PER_STEP: usize = 4096;
/// Frames whose dirty pages a checkpoint sorts and writes together: pages
/// of neighbouring ids among them go out in one write.
const CHECKPOINT_WINDOW_FRAMES: usize = 65_536;
/// Most pages in one checkpoint write (64 KiB; a write also stays inside
/// one stripe chunk).
const CHECKPOINT_RUN_PAGES: usize = 16;
/// Most checkpoint writes in flight per worker.
const CHECKPOINT_WRITES_IN_FLIGHT: usize = 4;
/// Most pages in the checkpoint writes in flight per worker while some of
/// its tasks wait for their commits to become durable (one full run).
/// Each log sync flushes the device's write cache, page writes included,
/// and a checkpoint begins with a burst of page images in the log (each
/// page's first change after its start): the page pass then leaves the
/// rest of the device to the log (see `docs/ARCHITECTURE.md`,
/// Checkpoints). Short runs of scattered pages still go out several at a
/// time, as an out-of-memory store's pass needs; a full run waits until
/// nothing else is in flight rather than go out in pieces.
const CHECKPOINT_PAGES_IN_FLIGHT_WHILE_COMMITS_WAIT: usize = CHECKPOINT_RUN_PAGES;
/// Bit of a request's user_data marking a checkpoint's write of a run of
/// pages (the low bits: the staging slot).
const CHECKPOINT_WRITE_TAG: u64 = 1 << 59;
/// Bit of a request's user_data marking a checkpoint's sync of a data
/// device.
const CHECKPOINT_SYNC_TAG: u64 = 1 << 60;
/// Groups with frees remembered by `BufferManager::note_group_frees`
/// beyond which the durable ones are dropped.
const RECENT_FREES_PRUNE_AT: usize = 1024;
/// Bit of a request's user_data marking a read of a run of consecutive
/// pages into a staging buffer (the low bits: the staging slot).
const READ_RUN_TAG: u64 = 1 << 58;
/// Most pages in one run read (64 KiB; with several data devices a read
/// also stays inside one stripe chunk).
pub const READ_RUN_MOST_PAGES: usize = 16;
/// Run reads in flight per worker at most.
const READ_RUNS_IN_FLIGHT: usize = 8;

/// Latches page `pid` in `frame` exclusively and seals it for a
/// checkpoint's write, if it is still there, dirty, unlatched, and
/// changed only by durable groups.
fn claim_for_checkpoint(
    bm: &BufferManager,
    pid: PageId,
    frame: u32,
    durable_below: u64,
) -> Claim<'_> {
    let here = |bm: &BufferManager| {
        bm.frame_pid[frame as usize].load(Ordering::Acquire) == pid
            && bm.frame_dirty[frame as usize].load(Ordering::Relaxed)
    };
    if !here(bm) {
        return Claim::Clean;
    }
    let state = bm.state(pid);
    let word = state.load();
    if !matches!(state_of(word), UNLOCKED | MARKED) || !state.try_lock_x(word) {
        return Claim::Later;
    }
    if !here(bm) {
        state.unlock_x_into(UNLOCKED);
        return Claim::Clean;
    }
    // SAFETY: the exclusive latch is held; it is released when the
    // checkpoint's write of the page completes (or fails to start).
    let page = unsafe { &mut *(bm.frame_ptr(frame) as *mut [u8; PAGE_SIZE]) };
    if page::page_lsn(page) >= durable_below {
        state.unlock_x_into(UNLOCKED);
        return Claim::Later;
    }
    seal_page(page, pid);
    Claim::Latched(page)
}

/// True when pages `a` and `b` lie in the same stripe chunk of
/// `chunk_bytes` (one request may span neighbouring pages only there).
fn same_chunk(a: PageId, b: PageId, chunk_bytes: u64) -> bool {
    (a * PAGE_SIZE as u64) / chunk_bytes == (b * PAGE_SIZE as u64) / chunk_bytes
}

/// What a checkpoint's page pass found a page to be.
enum Claim<'a> {
    /// Gone from its frame, or clean: nothing to write.
    Clean,
    /// Latched by a task, or changed by a group not durable yet.
    Later,
    /// Exclusively latched and sealed, ready to be written.
    Latched(&'a [u8; PAGE_SIZE]),
}

/// Why a tree operation must stop and restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// The page is not in memory: load it, then restart.
    Load(PageId),
    /// A latch conflict: yield, then restart.
    Retry,
    /// Another task is reading the page in: wait until its read is done
    /// (the task parks, see [`WorkerBuffer::wait_for_load`]), then restart.
    Loading(PageId),
    /// No free frame for a new page: yield (eviction runs), then restart.
    NoFrame,
    /// No room in the log for the step's group: yield (the log flushes,
    /// a checkpoint frees log space), then restart.
    LogFull,
}

/// The outcome of a failed page operation.
#[derive(Debug)]
pub enum OpError {
    /// Not an error: restart after doing what it says.
    Restart(Restart),
    /// A real error, returned to the caller.
    Fatal(Error),
}

impl From<Restart> for OpError {
    fn from(r: Restart) -> Self {
        OpError::Restart(r)
    }
}

impl From<Error> for OpError {
    fn from(e: Error) -> Self {
        OpError::Fatal(e)
    }
}

/// Sizing of the buffer manager.
#[derive(Clone, Debug)]
pub struct BufferConfig {
    /// Bytes of frames (a multiple of 4096).
    pub pool_bytes: u64,
    /// Workers the frames are partitioned among.
    pub workers: usize,
    /// Largest store the page table can address.
    pub max_store_bytes: u64,
    /// Percent of a worker's frames it keeps free (eviction target).
    pub free_target_pct: u32,
    /// Clock rounds a marked dirty page is passed over before it is written
    /// and evicted: clean pages go first.
    pub dirty_spare_rounds: u8,
    /// Most marked clock rounds a page is passed over for its heat: the uses
    /// counted lately (0: plain second chance).
    pub hot_spare_rounds: u8,
}

/// Heat counts halve every this many pools' worth of page reads: long
/// enough to remember a page read back once every few clock rounds, short
/// enough to forget a hot spot that moved.
const HEAT_EPOCH_POOLS: u64 = 4;

/// Frames smallest partition a worker may have.
pub const MIN_FRAMES_PER_WORKER: u64 = 8;

/// One frame of the pool: a page-aligned page (zero bits are valid).
#[repr(C, align(4096))]
struct Frame([u8; PAGE_SIZE]);

/// The page table entry of one page id (16 bytes).
#[repr(C)]
struct PageEntry {
    state: PageState,
    /// Frame index + 1 (0: not in a frame).
    frame: AtomicU32,
    /// How often the page was wanted lately, kept across evictions: the
    /// epoch of the last update (high 16 bits) and a count (low 16 bits)
    /// that halves per epoch since. See [`BufferManager::bump_heat`].
    heat: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<PageEntry>() == 16);

/// The shared part of the buffer manager.
pub struct BufferManager {
    storage: Arc<Storage>,
    _pool: LazyArray<Frame>,
    pool_ptr: *mut u8,
    frame_count: u32,
    /// Per page id: its state word and frame, side by side so that a
    /// lookup touches one cache line per page for both.
    pages: LazyArray<PageEntry>,
    /// Per page id: the sequence number of the last group that logged the
    /// page's full (or fresh) image since the store was opened (0: none),
    /// kept across evictions: the page read back is the page as that group
    /// and the deltas after it left it, so its next change may log a delta
    /// again (when the image is above the floor) instead of a full image.
    /// Read and written under the page's exclusive latch; 0 again when the
    /// page id is allocated anew. Apart from `pages`, whose entries readers
    /// touch on every level of a descent: 16 bytes each, 4 per cache line.
    image_seqs: LazyArray<AtomicU64>,
    frame_pid: Box<[AtomicU64]>,
    frame_dirty: Box<[AtomicBool]>,
    partitions: Vec<(u32, u32)>,
    free_target_pct: u32,
    dirty_spare_rounds: u8,
    hot_spare_rounds: u8,
    /// The clock of the heat epochs: each worker adds one per
    /// `HEAT_EPOCH_POOLS` × its frames of page reads, so an epoch (this ÷
    /// the workers) is about `HEAT_EPOCH_POOLS` pools' worth of reads by
    /// all workers, without a shared update per read.
    heat_ticks: AtomicU64,
    next_pid: AtomicU64,
    /// The checkpoint slots have room for a checkpoint of a store of this
    /// many pages ([`BufferManager::reserve_checkpoint_room`]).
    checkpoint_room_pages: AtomicU64,
    free_pids: Mutex<free::FreePages>,
    /// Pages freed since the pool was made ([`GuardX::free`]); see
    /// [`BufferManager::pages_freed`].
    pages_freed: OwnLine,
    /// Tells this manager from every other one made in the process.
    instance: u64,
    /// Page ids freed by logged groups that may not be durable yet, by
    /// group (see [`BufferManager::durably_free`]); recorded before they
    /// reach `free_pids`.
    recent_frees: Mutex<Vec<(u64, Vec<PageId>)>>,
    /// Pages handed to the devices as discarded ([`BufferManager::discard_free_pages`]).
    pages_discarded: AtomicU64,
    /// Cleared when a device refuses a discard (a file system without hole
    /// punching): later checkpoints do not try again.
    discard_works: std::sync::atomic::AtomicBool,
    write_error: Mutex<Option<String>>,
    wal: Arc<WalShared>,
}

/// Wakes the waiters whose wait `ready` says is over (all of them when the
/// store failed: they find out) and keeps the others.
fn wake_ready(
    waiters: &mut Vec<(usize, TaskId)>,
    failed: bool,
    ready: impl Fn(usize) -> bool,
    wake: &mut dyn FnMut(TaskId),
) {
    waiters.retain(|&(amount, task)| {
        let go = failed || ready(amount);
        if go {
            wake(task);
        }
        !go
    });
}

/// A word on a cache line of its own: every lookup reads it, and the
/// fields beside it (the free list's lock) are written by every worker.
#[repr(align(64))]
struct OwnLine(AtomicU64);

// SAFETY: pool_ptr points into `_pool`, owned by this struct; every access to
// frame memory follows the latch protocol of the page that occupies it.
unsafe impl Send for BufferManager {}
// SAFETY: as above; all other fields are Sync.
unsafe impl Sync for BufferManager {}

/// How much the store grows when a page is allocated beyond its end. The
/// growth is zero-filled (see `Storage::grow_to`) on the allocating worker,
/// which runs none of its tasks meanwhile: 8 MiB takes about 6 ms on the
/// development VM's disk (`dd if=/dev/zero of=F bs=1M count=8 oflag=direct`:
/// 1.4 GB/s), where a step of
/// a quarter of a 1.4 GB store stalled the worker for about 0.2 s.
pub const STORE_GROW_STEP_BYTES: u64 = 8 << 20;

impl BufferManager {
    /// Records that group `seq` logged the full image of page `pid` (the
    /// caller holds its exclusive latch).
    pub(crate) fn set_image_seq(&self, pid: PageId, seq: u64) {
        self.image_seqs
            .get(pid as usize)
            .store(seq, Ordering::Relaxed);
    }

    /// Allocates the pool and page table.
    pub fn new(
        storage: Arc<Storage>,
        config: &BufferConfig,
        wal: Arc<WalShared>,
    ) -> Result<BufferManager> {
        let frames = config.pool_bytes / PAGE_SIZE as u64;
        let workers = config.workers.max(1) as u64;
        if frames < MIN_FRAMES_PER_WORKER * workers || frames > u64::from(u32::MAX - 1) {
            return Err(Error::InvalidArgument(format!(
                "pool of {} bytes gives {frames} frames; need at least {} per worker ({workers} workers) and fewer than 2^32",
                config.pool_bytes, MIN_FRAMES_PER_WORKER
            )));
        }
        let max_pages = (config.max_store_bytes / PAGE_SIZE as u64).max(16) as usize;
        let no_memory = || {
            Error::Unsupported(format!(
                "cannot reserve the page table for {} bytes (lower max_store_bytes)",
                config.max_store_bytes
            ))
        };
        let pages = LazyArray::new(max_pages).ok_or_else(no_memory)?;
        let image_seqs = LazyArray::new(max_pages).ok_or_else(no_memory)?;
        let pool: LazyArray<Frame> = LazyArray::new(frames as usize).ok_or_else(|| {
            Error::Unsupported(format!("cannot map a pool of {} bytes", config.pool_bytes))
        })?;
        let pool_ptr = pool.as_ptr().cast::<u8>();
        let per_worker = frames / workers;
        let partitions = (0..workers)
            .map(|w| {
                let end = if w + 1 == workers {
                    frames
                } else {
                    (w + 1) * per_worker
                };
                ((w * per_worker) as u32, end as u32)
            })
            .collect();
        Ok(BufferManager {
            storage,
            _pool: pool,
            pool_ptr,
            frame_count: frames as u32,
            heat_ticks: AtomicU64::new(0),
            pages,
            image_seqs,
            frame_pid: (0..frames).map(|_| AtomicU64::new(NO_PAGE)).collect(),
            frame_dirty: (0..frames).map(|_| AtomicBool::new(false)).collect(),
            partitions,
            free_target_pct: config.free_target_pct.clamp(1, 50),
            dirty_spare_rounds: config.dirty_spare_rounds,
            hot_spare_rounds: config.hot_spare_rounds,
            next_pid: AtomicU64::new(0),
            checkpoint_room_pages: AtomicU64::new(0),
            free_pids: Mutex::new(free::FreePages::default()),
            pages_freed: OwnLine(AtomicU64::new(0)),
            instance: {
                static INSTANCES: AtomicU64 = AtomicU64::new(0);
                INSTANCES.fetch_add(1, Ordering::Relaxed)
            },
            recent_frees: Mutex::new(Vec::new()),
            pages_discarded: AtomicU64::new(0),
            discard_works: std::sync::atomic::AtomicBool::new(true),
            write_error: Mutex::new(None),
            wal,
        })
    }

    /// The log's shared state.
    pub fn wal(&self) -> &Arc<WalShared> {
        &self.wal
    }

    /// The storage below.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// Frames in the pool.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    /// The pool memory, for registering with io_uring.
    pub fn pool_region(&self) -> (*mut u8, usize) {
        (self.pool_ptr, self.frame_count as usize * PAGE_SIZE)
    }

    /// Pages freed so far. A page leaves its tree only by being freed, so
    /// a reader that found a page in a tree may take it to be there still
    /// while this count is unchanged, if it reads the count before it
    /// found the page and again after it validated what it read there
    /// (the free counts before the id can be allocated again).
    pub fn pages_freed(&self) -> u64 {
        self.pages_freed.0.load(Ordering::Acquire)
    }

    /// A number no other buffer manager of this process has.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// Page ids below this have been allocated.
    pub fn next_page_id(&self) -> PageId {
        self.next_pid.load(Ordering::Acquire)
    }

    /// Sets allocation state when opening a store.
    pub fn set_allocation(&self, next_pid: PageId, free_pids: Vec<PageId>) -> Result<()> {
        if next_pid as usize > self.pages.len() {
            return Err(Error::InvalidArgument(format!(
                "store has {next_pid} pages, more than max_store_bytes allows"
            )));
        }
        self.next_pid.store(next_pid, Ordering::Release);
        *self.free_pids.lock().unwrap_or_else(|e| e.into_inner()) = free::FreePages::new(free_pids);
        Ok(())
    }

    /// The free page ids (reserved ones included) and the next page id,
    /// read together: a checkpoint lists a bulk load's reservation as free
    /// exactly when its next page id covers it.
    pub fn allocation_snapshot(&self) -> (Vec<PageId>, PageId) {
        let free = self.free_pids.lock().unwrap_or_else(|e| e.into_inner());
        (free.all(), self.next_pid.load(Ordering::Acquire))
    }

    /// Records that logged group `seq` frees `pids` (call it before they
    /// go to the free list).
    pub(crate) fn note_group_frees(&self, seq: u64, pids: &[PageId]) {
        let mut recent = self.recent_frees.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= RECENT_FREES_PRUNE_AT {
            let durable = self.wal.durable_below();
            recent.retain(|(s, _)| *s >= durable);
        }
        recent.push((seq, pids.to_vec()));
    }

    /// One past the last group that freed pages so far (0: none since the
    /// durable ones were dropped).
    pub fn frees_logged_below(&self) -> u64 {
        let recent = self.recent_frees.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().map(|&(seq, _)| seq + 1).max().unwrap_or(0)
    }

    /// `free` (an [`BufferManager::allocation_snapshot`]'s list, taken
    /// before this call) without the ids that groups at or past
    /// `durable_below` freed: a checkpoint lists a page as free only once
    /// the group that freed it is durable. A crash may lose that group,
    /// and the recovery from the checkpoint would then find the page free
    /// and still in its tree. (Recovery replays every durable group from
    /// the checkpoint's `seq_start` on, which frees them again.)
    pub fn durably_free(&self, free: &mut Vec<PageId>, durable_below: u64) {
        let mut recent = self.recent_frees.lock().unwrap_or_else(|e| e.into_inner());
        recent.retain(|(s, _)| *s >= durable_below);
        if recent.is_empty() {
            return;
        }
        let pending: std::collections::HashSet<PageId> = recent
            .iter()
            .flat_map(|(_, pids)| pids.iter().copied())
            .collect();
        free.retain(|pid| !pending.contains(pid));
    }

    /// Reserves `count` new consecutive page ids past the end of the store
    /// for a bulk load (the store grows to hold them, without zero-filling:
    /// the load writes them) and returns the first. Until
    /// [`BufferManager::end_reservation`] they are free for checkpoints
    /// but neither allocatable nor discarded (`buffer::free`).
    pub fn reserve_pages(&self, count: u64) -> Result<PageId> {
        let mut free = self.free_pids.lock().unwrap_or_else(|e| e.into_inner());
        let mut first = self.next_pid.load(Ordering::Acquire);
        loop {
            let end = first
                .checked_add(count)
                .filter(|&end| end as usize <= self.pages.len())
                .ok_or_else(|| {
                    Error::Full(format!(
                        "{count} pages after page {first} reach max_store_bytes"
                    ))
                })?;
            let need_bytes = end * PAGE_SIZE as u64;
            if need_bytes > self.storage.capacity_bytes() {
                self.storage.grow_to_unfilled(need_bytes)?;
            }
            self.reserve_checkpoint_room(end)?;
            match self.next_pid.compare_exchange_weak(
                first,
                end,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => first = now,
            }
        }
        for pid in first..first + count {
            // New ids: nothing logged of them in this open counts.
            self.set_image_seq(pid, 0);
        }
        free.reserve(first, count);
        Ok(first)
    }

    /// Takes `pid`, which [`BufferManager::reserve_pages`] reserved, into
    /// use (the rest stays reserved). Call it in the logged step that
    /// first logs the page, as a bulk load's commit ends its reservation:
    /// a checkpoint then either lists the id as free and is older than
    /// that group, or does not list it.
    pub fn take_reserved(&self, pid: PageId) -> bool {
        self.free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_reserved(pid)
    }

    /// Frees the ids of `first..first + count` that are still reserved
    /// (those [`BufferManager::take_reserved`] did not take).
    pub fn release_reserved(&self, first: PageId, count: u64) {
        self.free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release_reserved(first, count);
    }

    /// Ends the reservation at `first`: its first `used` ids are in use
    /// (the load committed), the rest go to the free list.
    pub fn end_reservation(&self, first: PageId, used: u64) {
        self.free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end_reservation(first, used);
    }

    /// The freed page ids (for persisting at close).
    pub fn free_page_ids(&self) -> Vec<PageId> {
        self.free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .all()
    }

    /// Gives the devices back the pages that the checkpoint just completed
    /// lists as free (`free_at_checkpoint`, sorted) and that are still
    /// free, unless an earlier call did (see `buffer::free`): holes punched
    /// in files, ranges discarded on block devices. A device that refuses
    /// (no hole punching) turns discards off for this open; the pages stay
    /// free either way, so this never fails the store.
    pub fn discard_free_pages(&self, free_at_checkpoint: &[PageId]) {
        if !self.discard_works.load(Ordering::Relaxed) || self.storage.is_read_only() {
            return;
        }
        let pids = self
            .free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_for_discard(free_at_checkpoint);
        if pids.is_empty() {
            return;
        }
        let done = self.storage.discard_pages(&pids);
        self.free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .discard_done(done.is_ok());
        match done {
            Ok(_) => {
                self.pages_discarded
                    .fetch_add(pids.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.discard_works.store(false, Ordering::Relaxed);
                eprintln!("flashtree: freed pages are no longer discarded: {e}");
            }
        }
    }

    /// Pages discarded since open.
    pub fn pages_discarded(&self) -> u64 {
        self.pages_discarded.load(Ordering::Relaxed)
    }

    /// The first write-back error, if any: the store is then unsafe to trust.
    pub fn write_error(&self) -> Option<String> {
        self.write_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    #[inline]
    fn state(&self, pid: PageId) -> &PageState {
        &self.pages.get(pid as usize).state
    }

    #[inline]
    fn frame_slot(&self, pid: PageId) -> &AtomicU32 {
        &self.pages.get(pid as usize).frame
    }

    #[inline]
    fn frame_ptr(&self, frame: u32) -> *mut u8 {
        debug_assert!(frame < self.frame_count);
        // SAFETY: frame < frame_count keeps the pointer inside the pool.
        unsafe { self.pool_ptr.add(frame as usize * PAGE_SIZE) }
    }

    /// Frame holding `pid`, if any (must be re-validated by the caller).
    #[inline]
    fn frame_of(&self, pid: PageId) -> Option<u32> {
        let f = self.frame_slot(pid).load(Ordering::Acquire);
        (f != 0 && f <= self.frame_count).then(|| f - 1)
    }

    fn check_pid(&self, pid: PageId) -> std::result::Result<(), OpError> {
        if pid >= self.next_page_id() || pid as usize >= self.pages.len() {
            return Err(self.beyond_allocated(pid));
        }
        Ok(())
    }

    /// The error of a reference to `pid`, a page beyond those allocated
    /// (out of line: the lookup path only branches to it).
    #[cold]
    #[inline(never)]
    fn beyond_allocated(&self, pid: PageId) -> OpError {
        OpError::Fatal(Error::Corrupt(format!(
            "reference to page {pid}, beyond the {} allocated",
            self.next_page_id()
        )))
    }

    /// True when the page is readable and nobody changed or evicted it
    /// since `stamp` was taken (every change and every eviction bumps the
    /// version, which survives eviction, so a reload does not reset it).
    #[inline]
    pub fn unchanged_since(&self, stamp: Stamp) -> bool {
        let word = self.state(stamp.pid).load();
        version_of(word) == stamp.version && readable(word)
    }

    /// Counts one more use of `pid` in its heat (a read, or a clock round
    /// that found it referenced) and returns the new count. Counts halve
    /// every epoch (see `heat_ticks`), so they measure recent
    /// rounds of use, and they outlive evictions, so a page that is read
    /// back again and again is recognised as hot, which a per-frame
    /// reference bit cannot do. Load and store, not an atomic update: two
    /// workers bumping one page at once lose a count, which only matters
    /// as a heuristic.
    fn bump_heat(&self, pid: PageId) -> u32 {
        let epoch = (self.heat_ticks.load(Ordering::Relaxed) / self.partitions.len() as u64) as u32
            & 0xFFFF;
        let heat = &self.pages.get(pid as usize).heat;
        let word = heat.load(Ordering::Relaxed);
        let age = epoch.wrapping_sub(word >> 16) & 0xFFFF;
        let count = ((word & 0xFFFF) >> age.min(16)) + 1;
        let count = count.min(0xFFFF);
        heat.store(epoch << 16 | count, Ordering::Relaxed);
        count
    }

    /// The heat of `pid` now (its recent uses, halved per epoch since the
    /// last count), without counting a use.
    fn heat_of(&self, pid: PageId) -> u32 {
        let epoch = (self.heat_ticks.load(Ordering::Relaxed) / self.partitions.len() as u64) as u32
            & 0xFFFF;
        let word = self.pages.get(pid as usize).heat.load(Ordering::Relaxed);
        let age = epoch.wrapping_sub(word >> 16) & 0xFFFF;
        (word & 0xFFFF) >> age.min(16)
    }

    /// The write class of page `pid`: hot when it was used at least
    /// [`HOT_PAGE_HEAT`] times lately, else cold.
    fn data_class(&self, pid: PageId) -> WriteClass {
        if self.heat_of(pid) >= HOT_PAGE_HEAT {
            WriteClass::DataHot
        } else {
            WriteClass::DataCold
        }
    }

    /// Optimistic latch: no write to shared memory on the fast path.
    #[inline]
    pub fn fix_optimistic(&self, pid: PageId) -> std::result::Result<GuardO<'_>, OpError> {
        // The page's entry looked up once (one bounds check; `check_pid`
        // and then `state` and `frame_of` took three: the atomic load of
        // the allocation bound between them made the compiler reload the
        // length), and the error paths out of line.
        let Some(entry) = self.pages.try_get(pid as usize) else {
            return Err(self.beyond_allocated(pid));
        };
        if pid >= self.next_page_id() {
            return Err(self.beyond_allocated(pid));
        }
        let state = &entry.state;
        let word = state.load();
        if !readable(word) {
            return Err(not_readable(pid, word));
        }
        let f = entry.frame.load(Ordering::Acquire);
        if f == 0 || f > self.frame_count {
            return Err(Restart::Retry.into());
        }
        let frame = f - 1;
        state.touch(word);
        Ok(GuardO {
            bm: self,
            pid,
            version: version_of(word),
            frame,
        })
    }

    /// Shared latch.
    pub fn fix_shared(&self, pid: PageId) -> std::result::Result<GuardS<'_>, OpError> {
        self.check_pid(pid)?;
        let state = self.state(pid);
        let word = state.load();
        match state_of(word) {
            EVICTED => return Err(Restart::Load(pid).into()),
            LOADING => return Err(Restart::Loading(pid).into()),
            _ => {}
        }
        if !state.try_lock_s() {
            return Err(Restart::Retry.into());
        }
        match self.frame_of(pid) {
            Some(frame) => Ok(GuardS {
                bm: self,
                pid,
                frame,
            }),
            None => {
                state.unlock_s();
                Err(Restart::Retry.into())
            }
        }
    }

    /// Exclusive latch.
    pub fn fix_exclusive(&self, pid: PageId) -> std::result::Result<GuardX<'_>, OpError> {
        self.fix_optimistic(pid)?.upgrade()
    }

    /// Marked rounds the clock spares a page of heat `heat`: one per use
    /// counted besides the current one, up to `hot_spare_rounds`.
    fn spare_rounds_for(&self, heat: u32) -> u8 {
        heat.saturating_sub(1).min(u32::from(self.hot_spare_rounds)) as u8
    }

    fn alloc_pid(&self) -> Result<PageId> {
        if let Some(pid) = self
            .free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
        {
            return Ok(pid);
        }
        // An id is taken only once the storage holds its page: a store
        // that cannot grow (a full block device or file system) fails the
        // allocation with `Error::Full` and keeps every id it handed out
        // addressable, so checkpoints never list a page past its end.
        let mut pid = self.next_pid.load(Ordering::Acquire);
        loop {
            if pid as usize >= self.pages.len() {
                return Err(Error::Full(format!("{pid} pages reach max_store_bytes")));
            }
            let need_bytes = (pid + 1) * PAGE_SIZE as u64;
            let have_bytes = self.storage.capacity_bytes();
            if need_bytes > have_bytes {
                self.storage
                    .grow_to(need_bytes.max(have_bytes + STORE_GROW_STEP_BYTES))
                    .or_else(|e| self.storage.grow_to(need_bytes).map_err(|_| e))?;
            }
            self.reserve_checkpoint_room(pid + 1)?;
            match self.next_pid.compare_exchange_weak(
                pid,
                pid + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(pid),
                Err(now) => pid = now,
            }
        }
    }

    /// Makes the checkpoint slots hold a checkpoint of a store of `pages`
    /// pages (its free list may list every one) before a page id reaches
    /// past what they hold: a checkpoint then never needs space from the
    /// file system, and a full one fails the allocation with `Error::Full`,
    /// not a checkpoint (which would stop the store, and its reopen). Slots
    /// grow with the store's capacity, a step at a time.
    fn reserve_checkpoint_room(&self, pages: PageId) -> Result<()> {
        if pages <= self.checkpoint_room_pages.load(Ordering::Acquire) {
            return Ok(());
        }
        let slots = self
            .wal
            .checkpoints
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(place) = slots.as_ref() else {
            return Ok(());
        };
        let step_pages = STORE_GROW_STEP_BYTES / PAGE_SIZE as u64;
        let target = pages
            .max(self.storage.capacity_bytes() / PAGE_SIZE as u64)
            .next_multiple_of(step_pages);
        let logs = self.partitions.len() as u32;
        place.reserve(
            &self.storage,
            crate::io::layout::checkpoint_bytes_most(target, logs),
        )?;
        self.checkpoint_room_pages
            .fetch_max(target, Ordering::AcqRel);
        Ok(())
    }

    /// A page write failed: recorded, and the store fails (a failed write
    /// is never retried and trusted).
    fn record_write_error(&self, message: String) {
        let mut slot = self.write_error.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(message.clone());
        }
        self.wal.fail(format!("a page write failed: {message}"));
    }
}

/// A page id and the version an optimistic reader saw: see
/// [`BufferManager::unchanged_since`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The page.
    pub pid: PageId,
    version: u64,
}

/// Why an optimistic fix of `pid`, whose state word is `word` (not
/// readable), restarts (out of line: the lookup path only branches to it).
#[cold]
#[inline(never)]
fn not_readable(pid: PageId, word: u64) -> OpError {
    match state_of(word) {
        EVICTED => Restart::Load(pid),
        LOADING => Restart::Loading(pid),
        _ => Restart::Retry,
    }
    .into()
}

/// An optimistic latch: read, then [`GuardO::validate`]; a failed validation
/// means the read may have seen garbage and the operation restarts.
pub struct GuardO<'a> {
    bm: &'a BufferManager,
    pid: PageId,
    version: u64,
    frame: u32,
}

impl<'a> GuardO<'a> {
    /// The page id.
    pub fn pid(&self) -> PageId {
        self.pid
    }

    /// The page's bytes, which a writer may be changing meanwhile: read
    /// through volatile loads, never through a reference ([`RacyPage`]), and
    /// nothing read is to be trusted before [`GuardO::validate`] succeeds.
    #[inline]
    pub fn racy_page(&self) -> RacyPage<'_> {
        // SAFETY: the frame is part of the pool, mapped for the manager's
        // lifetime, which outlives this borrow of the guard; `frame_ptr`
        // points to its first of `PAGE_SIZE` bytes.
        unsafe { RacyPage::from_raw(self.bm.frame_ptr(self.frame)) }
    }

    /// True when nobody changed or evicted the page since the fix.
    #[inline]
    pub fn validate(&self) -> bool {
        self.bm.unchanged_since(self.stamp())
    }

    /// The page id and version this guard saw, to validate later without
    /// holding the guard (e.g. across a page load).
    #[inline]
    pub fn stamp(&self) -> Stamp {
        Stamp {
            pid: self.pid,
            version: self.version,
        }
    }

    /// Asks the CPU to fetch the page's first 1 KiB (header and the start of
    /// the slot array) and its last cache line (a node's fences, whose
    /// lower one holds the prefix a search compares first) into cache,
    /// without waiting for them.
    #[inline]
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let frame = self.bm.frame_ptr(self.frame) as *const i8;
            // A loop with a constant bound, unrolled into 16 prefetch
            // instructions on one base register (a chained iterator was
            // not unrolled: about 6 instructions a line).
            for line in 0..16 {
                // SAFETY: prefetching is a hint; `line * 64 < PAGE_SIZE`, so
                // the address lies inside the frame, and it is never
                // dereferenced here.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(frame.add(line * 64)) };
            }
            // SAFETY: as above; the page's last line.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(frame.add(PAGE_SIZE - 64)) };
        }
    }

    /// Asks the CPU to fetch the first `lines` (at most 64) 64-byte cache
    /// lines of the page, without waiting for them.
    #[inline]
    pub fn prefetch_lines(&self, lines: usize) {
        self.prefetch_bytes(0, lines.saturating_mul(64));
    }

    /// Asks the CPU to fetch the cache lines of the page's bytes `at..at +
    /// len` (clamped to the page), without waiting for them. Any `at` and
    /// `len` are accepted: they may come from a page read under an
    /// optimistic latch.
    #[inline]
    pub fn prefetch_bytes(&self, at: usize, len: usize) {
        let end = at.saturating_add(len).min(PAGE_SIZE);
        let mut line = at.min(PAGE_SIZE) & !63;
        #[cfg(target_arch = "x86_64")]
        while line < end {
            // SAFETY: prefetching is a hint; `line < end <= PAGE_SIZE`, so
            // the address lies inside the frame, and it is never
            // dereferenced here.
            unsafe {
                let ptr = self.bm.frame_ptr(self.frame).add(line);
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    ptr as *const i8,
                );
            }
            line += 64;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (line, end);
    }

    /// [`GuardO::validate`] as a restart.
    #[inline]
    pub fn check(&self) -> std::result::Result<(), Restart> {
        if self.validate() {
            Ok(())
        } else {
            Err(Restart::Retry)
        }
    }

    /// Turns the optimistic latch into an exclusive one if nothing changed.
    pub fn upgrade(self) -> std::result::Result<GuardX<'a>, OpError> {
        let state = self.bm.state(self.pid);
        let word = state.load();
        if version_of(word) != self.version || !state.try_lock_x(word) {
            return Err(Restart::Retry.into());
        }
        Ok(GuardX {
            bm: self.bm,
            pid: self.pid,
            frame: self.frame,
            modified: false,
        })
    }
}

/// A shared latch: the page does not change while it is held.
pub struct GuardS<'a> {
    bm: &'a BufferManager,
    pid: PageId,
    frame: u32,
}

impl GuardS<'_> {
    /// The page id.
    pub fn pid(&self) -> PageId {
        self.pid
    }

    /// The page bytes, stable while the latch is held.
    pub fn page(&self) -> &[u8; PAGE_SIZE] {
        // SAFETY: a shared latch excludes writers and eviction.
        unsafe { &*(self.bm.frame_ptr(self.frame) as *const [u8; PAGE_SIZE]) }
    }
}

impl Drop for GuardS<'_> {
    fn drop(&mut self) {
        self.bm.state(self.pid).unlock_s();
    }
}

/// An exclusive latch: the holder alone reads and writes the page. Inside
/// a logged step ([`step`]) dropping it keeps the latch until the step's
/// group is logged.
pub struct GuardX<'a> {
    bm: &'a BufferManager,
    pid: PageId,
    frame: u32,
    /// `page_mut` was called: the step logs the page's image.
    modified: bool,
}

impl GuardX<'_> {
    /// The page id.
    pub fn pid(&self) -> PageId {
        self.pid
    }

    /// The page bytes.
    pub fn page(&self) -> &[u8; PAGE_SIZE] {
        // SAFETY: the exclusive latch excludes all writers.
        unsafe { &*(self.bm.frame_ptr(self.frame) as *const [u8; PAGE_SIZE]) }
    }

    /// The sequence number of the last group that logged this page's full
    /// image since the store was opened (0: none; see `BufferManager::image_seqs`).
    pub fn image_seq(&self) -> u64 {
        self.bm
            .image_seqs
            .get(self.pid as usize)
            .load(Ordering::Relaxed)
    }

    /// Records that group `seq` logged this page's full image.
    pub fn set_image_seq(&mut self, seq: u64) {
        self.bm.set_image_seq(self.pid, seq);
    }

    /// The page bytes for writing; marks the page dirty.
    pub fn page_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        self.modified = true;
        self.bm.frame_dirty[self.frame as usize].store(true, Ordering::Relaxed);
        // SAFETY: the exclusive latch excludes every other access that is
        // trusted; optimistic readers validate and discard what they read.
        unsafe { &mut *(self.bm.frame_ptr(self.frame) as *mut [u8; PAGE_SIZE]) }
    }

    /// Frees the page: its id goes to the free list, its frame back to the
    /// owning worker on its next clock sweep.
    pub fn free(self) {
        let bm = self.bm;
        // Counted before the id can be taken again (see `pages_freed`).
        bm.pages_freed.0.fetch_add(1, Ordering::AcqRel);
        bm.frame_dirty[self.frame as usize].store(false, Ordering::Relaxed);
        bm.frame_slot(self.pid).store(FREED_SLOT, Ordering::Release);
        bm.frame_pid[self.frame as usize].store(FREED_PAGE, Ordering::Release);
        bm.state(self.pid).unlock_x_into(EVICTED);
        if !step::defer_free(self.pid) {
            bm.free_pids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(&[self.pid]);
        }
        std::mem::forget(self);
    }

    /// True when `page_mut` was called on this guard.
    pub fn is_modified(&self) -> bool {
        self.modified
    }
}

impl Drop for GuardX<'_> {
    fn drop(&mut self) {
        if !step::defer_unlock(self.pid, self.frame, self.modified) {
            self.bm.state(self.pid).unlock_x_into(UNLOCKED);
        }
    }
}

/// What starting a load found.
#[derive(Debug, PartialEq, Eq)]
pub enum LoadStart {
    /// The page is in memory already.
    Resident,
    /// This task's read was submitted; it will be woken.
    Started,
    /// Another task (maybe on another worker) is reading it in: wait with
    /// [`WorkerBuffer::wait_for_load`].
    Loading,
    /// Latched, or being freed: yield and try again.
    Busy,
    /// No free frame or I/O slot now: yield and try again.
    NoFrame,
}

/// How [`WorkerBuffer::poll`] may wait for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Reap what has arrived.
    No,
    /// Wait for a batch (a sixteenth of what is in flight, at least one):
    /// nothing can run until completions arrive.
    Batch,
    /// Wait for one: tasks are busy-waiting for something a completion, or
    /// another worker, may release soon.
    One,
    /// Wait for one, but not past this time (a sleeping task's deadline).
    OneUntil(std::time::Instant),
}

/// Counters of one worker.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkerIoStats {
    /// Pages read.
    pub page_reads: u64,
    /// Of `page_reads`, pages read ahead for a scan (no task waited).
    pub read_ahead_reads: u64,
    /// Reads of several consecutive pages in one request (read ahead).
    pub read_runs: u64,
    /// Pages written back.
    pub page_writes: u64,
    /// Of `page_writes`, pages written as hot ([`WriteClass::DataHot`]).
    pub page_writes_hot: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Dirty pages whose write waited for the log (write-ahead rule).
    pub wal_deferred_writes: u64,
    /// Times a task parked because the log had no room for its group.
    pub log_room_waits: u64,
    /// Times a task parked until the worker had the free frames its step
    /// needs at once (a batch that splits several leaves).
    pub frame_waits: u64,
    /// Full leaves that moved entries to a neighbour instead of splitting
    /// (a batch step that rolled back afterwards counts too).
    pub leaf_rebalances: u64,
    /// Steps in which a checkpoint's page pass stopped early because tasks
    /// waited for their commits and its writes in flight held 16 pages, or
    /// the next run would not fit beside them.
    pub checkpoint_writes_held: u64,
}

/// Most requests on a worker's inline log channel: a flush writes at
/// most a few runs of blocks (see `wal::writer`).
const LOG_CHANNEL_DEPTH: u32 = 64;

/// Log flushes through the channel none of which, of the last few, took
/// less than this, nor less than 4 times the shortest recent one made by
/// the worker's thread, are not worth the overlap they buy
/// (`LogWrites::Auto`): the kernel completes the channel's data-sync
/// writes late (see `LogWrites`).
const CHANNEL_FLUSH_SLOW_US: f64 = 1000.0;

/// How often `LogWrites::Auto` sends a flush through a channel it found
/// slow, to measure it again.
const CHANNEL_FLUSH_REMEASURE: std::time::Duration = std::time::Duration::from_millis(100);

/// True when `LogWrites::Auto` may send a flush through the channel for
/// the overlap: its flushes are not much slower than the thread's own, or
/// have not been measured yet, or are due to be measured again.
fn channel_flushes_pay(latency: &crate::wal::writer::FlushLatency) -> bool {
    let Some(channel_us) = latency.channel.us else {
        return true;
    };
    let slow = channel_us > CHANNEL_FLUSH_SLOW_US.max(4.0 * latency.inline.us.unwrap_or(0.0));
    !slow
        || latency
            .channel_last
            .is_none_or(|t| t.elapsed() >= CHANNEL_FLUSH_REMEASURE)
}

/// One worker's part of the buffer manager: its frames, free list, clock
/// hand and I/O channel. Lives on the worker thread.
pub struct WorkerBuffer {
    /// Declared first so it drops (waiting for in-flight I/O) before `bm`,
    /// which may own the pool the I/O targets, and before `log`, whose ring
    /// the log writes read.
    channel: IoChannel,
    /// The channel of inline log writes (synchronous backend; None: the
    /// log writes through `channel`). Nothing is in flight on it between
    /// calls, so its drop order does not matter.
    log_channel: Option<IoChannel>,
    /// Completions of `log_channel`, reused between flushes.
    log_completions: Vec<IoCompletion>,
    /// How the log is written.
    log_writes: crate::wal::LogWrites,
    /// Set by the worker loop: tasks can run while a log flush is in
    /// flight (`LogWrites::Auto`).
    log_overlap_hint: bool,
    /// This worker's log (None without a log).
    log: Option<LogWriter>,
    worker: usize,
    bm: Arc<BufferManager>,
    first_frame: u32,
    end_frame: u32,
    free_frames: Vec<u32>,
    clock_hand: u32,
    free_target: usize,
    /// Tasks parked until this worker has the given number of free frames
    /// (a batch step that allocates several pages at once): eviction keeps
    /// that many free while they wait.
    frame_waiters: Vec<(usize, TaskId)>,
    /// The task waiting for the read into each of this worker's frames.
    read_waiters: Vec<Option<TaskId>>,
    /// Per task id: reads it started that have not completed.
    task_reads_in_flight: Vec<u32>,
    /// Tasks parked until a page that another task is reading in (on this
    /// worker or another) is no longer LOADING.
    load_waiters: Vec<(PageId, TaskId)>,
    /// Tasks parked until the log has room for a group of the given record
    /// bytes (a flush or a checkpoint makes it): waiting there, not
    /// retrying their step every loop round, leaves the CPU to the
    /// checkpoint they wait for.
    log_room_waiters: Vec<(usize, TaskId)>,
    /// Per frame: rounds the clock found this dirty page marked and let it
    /// stay, up to `dirty_spare_rounds` (clean pages go first: evicting a
    /// dirty one costs a write, and writing a page that is updated again
    /// soon, or reading back one that is read again soon, is wasted).
    dirty_spared: Vec<u8>,
    /// Per frame: marked rounds left to spare the page, set from its heat
    /// when it is loaded and whenever the hand finds it referenced, spent
    /// one per round the hand finds it unreferenced.
    clock_credit: Vec<u8>,
    /// Per frame: loaded (or allocated) since the hand last passed, so the
    /// reference the hand finds is the load's, already counted.
    frame_fresh: Vec<bool>,
    /// Page reads until this worker's next `heat_ticks` tick.
    heat_tick_countdown: u64,
    writes_in_flight: usize,
    /// The log's durable frontier as of the current clock batch.
    durable_below: u64,
    /// Times the log became durable further (read by the worker loop).
    pub log_durable_events: u64,
    /// Tasks waiting for a group to become durable: (group, task).
    commit_waiters: std::collections::BinaryHeap<std::cmp::Reverse<(u64, TaskId)>>,
    /// A checkpoint's page pass over this worker's frames: the next frame
    /// to scan for dirty pages (None: the scan is over or not running).
    checkpoint_cursor: Option<u32>,
    /// The dirty pages (page, frame) of the window scanned last, sorted by
    /// page id, and how many of them the pass has looked at.
    checkpoint_pending: Vec<(PageId, u32)>,
    checkpoint_pending_at: usize,
    /// A window's scan is under way (over several steps).
    checkpoint_scanning: bool,
    /// Pages the pass found latched or ahead of the log: tried again.
    checkpoint_retry: Vec<(PageId, u32)>,
    /// Staging buffers of the checkpoint's writes, each with the latched
    /// pages (page, frame) its write in flight holds (empty: free).
    checkpoint_bufs: Vec<crate::io::AlignedBuf>,
    checkpoint_slots: Vec<Vec<(PageId, u32)>>,
    /// Staging buffers of run reads (`read_ahead`), each with the pages
    /// (page, frame) its read in flight loads (empty: free).
    read_run_bufs: Vec<crate::io::AlignedBuf>,
    read_run_slots: Vec<Vec<(PageId, u32)>>,
    /// Checkpoint writes in flight.
    checkpoint_writes_in_flight: usize,
    /// A checkpoint's data-device syncs in flight, and the first error.
    checkpoint_syncs_in_flight: usize,
    checkpoint_sync_error: Option<String>,
    completions: Vec<IoCompletion>,
    load_errors: Vec<(TaskId, Error)>,
    /// Counters.
    pub stats: WorkerIoStats,
}

impl WorkerBuffer {
    /// The buffer part of worker `worker`, with its own I/O channel.
    pub fn new(
        bm: Arc<BufferManager>,
        worker: usize,
        io_config: &IoConfig,
    ) -> Result<WorkerBuffer> {
        let (first_frame, end_frame) = bm.partitions[worker];
        let frames = (end_frame - first_frame) as usize;
        let mut channel = IoChannel::new(bm.storage.clone(), io_config)?;
        let (ptr, len) = bm.pool_region();
        // SAFETY: the pool lives in `bm`, which this WorkerBuffer keeps alive
        // for longer than the channel (field order: channel drops first).
        unsafe { channel.register_buffers(&[(ptr, len)]) };
        let free_target = (frames * bm.free_target_pct as usize / 100).max(2);
        Ok(WorkerBuffer {
            channel,
            log_channel: None,
            log_completions: Vec::new(),
            log_writes: crate::wal::LogWrites::Channel,
            log_overlap_hint: false,
            log: None,
            worker,
            first_frame,
            end_frame,
            free_frames: (first_frame..end_frame).rev().collect(),
            clock_hand: first_frame,
            free_target,
            frame_waiters: Vec::new(),
            read_waiters: vec![None; frames],
            task_reads_in_flight: Vec::new(),
            dirty_spared: vec![0; frames],
            clock_credit: vec![0; frames],
            frame_fresh: vec![false; frames],
            heat_tick_countdown: frames as u64 * HEAT_EPOCH_POOLS,
            writes_in_flight: 0,
            durable_below: 0,
            log_durable_events: 0,
            commit_waiters: std::collections::BinaryHeap::new(),
            checkpoint_cursor: None,
            checkpoint_pending: Vec::new(),
            checkpoint_pending_at: 0,
            checkpoint_scanning: false,
            checkpoint_retry: Vec::new(),
            checkpoint_bufs: Vec::new(),
            checkpoint_slots: Vec::new(),
            read_run_bufs: Vec::new(),
            read_run_slots: Vec::new(),
            checkpoint_writes_in_flight: 0,
            checkpoint_syncs_in_flight: 0,
            checkpoint_sync_error: None,
            completions: Vec::with_capacity(io_config.depth as usize),
            load_errors: Vec::new(),
            load_waiters: Vec::new(),
            log_room_waiters: Vec::new(),
            stats: WorkerIoStats::default(),
            bm,
        })
    }

    /// The shared manager.
    pub fn manager(&self) -> &BufferManager {
        &self.bm
    }

    /// The worker this part belongs to.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The shared manager, as an owned handle (guards borrow it while
    /// `self` is used mutably).
    pub fn manager_arc(&self) -> Arc<BufferManager> {
        self.bm.clone()
    }

    /// Registers `task` to be woken once group `seq` is durable (or the
    /// store failed).
    pub fn wait_durable(&mut self, seq: u64, task: TaskId) {
        self.commit_waiters.push(std::cmp::Reverse((seq, task)));
    }

    /// Tasks waiting for their commit to become durable.
    pub fn commit_waiter_count(&self) -> usize {
        self.commit_waiters.len()
    }

    /// Wakes the commit waiters whose group is durable (all of them when
    /// the store failed: they find out). Returns how many.
    pub fn wake_commit_waiters(&mut self, wake: &mut dyn FnMut(TaskId)) -> usize {
        if self.commit_waiters.is_empty() {
            return 0;
        }
        let failed = self.bm.wal.has_failed();
        let durable_below = self.bm.wal.durable_below();
        // A min-heap by group number: the loop looks only at the waiters it
        // wakes (thousands may wait while a slow sync runs).
        let mut woken = 0;
        while let Some(&std::cmp::Reverse((seq, task))) = self.commit_waiters.peek() {
            if !failed && seq >= durable_below {
                break;
            }
            self.commit_waiters.pop();
            wake(task);
            woken += 1;
        }
        woken
    }

    /// Registers `task` to be woken once the log has room for a group of
    /// `record_bytes` (or the store failed).
    pub fn wait_log_room(&mut self, record_bytes: usize, task: TaskId) {
        self.log_room_waiters.push((record_bytes, task));
        self.stats.log_room_waits += 1;
    }

    /// Tasks waiting for room in the log.
    pub fn log_room_waiter_count(&self) -> usize {
        self.log_room_waiters.len()
    }

    /// Wakes the tasks waiting for log room that now fit (all of them when
    /// the store failed: they find out).
    pub fn wake_log_room_waiters(&mut self, wake: &mut dyn FnMut(TaskId)) {
        if self.log_room_waiters.is_empty() {
            return;
        }
        let failed = self.bm.wal.has_failed();
        let mut waiters = std::mem::take(&mut self.log_room_waiters);
        wake_ready(&mut waiters, failed, |bytes| self.log_has_room(bytes), wake);
        self.log_room_waiters = waiters;
    }

    /// Gives this worker its log, written as `writes` says.
    pub fn set_log(&mut self, log: LogWriter, writes: crate::wal::LogWrites) -> Result<()> {
        if writes != crate::wal::LogWrites::Channel {
            self.log_channel = Some(IoChannel::blocking(
                self.bm.storage.clone(),
                LOG_CHANNEL_DEPTH,
            )?);
        }
        self.log_writes = writes;
        self.log = Some(log);
        Ok(())
    }

    /// Tells `LogWrites::Auto` whether tasks can run while a log flush is
    /// in flight (the worker loop sets it before each round of I/O).
    pub fn set_log_overlap_hint(&mut self, tasks_can_run: bool) {
        self.log_overlap_hint = tasks_can_run;
    }

    /// The log, if any.
    pub fn log(&self) -> Option<&LogWriter> {
        self.log.as_ref()
    }

    /// The log, if any, for changes.
    pub fn log_mut(&mut self) -> Option<&mut LogWriter> {
        self.log.as_mut()
    }

    /// True when a group of `record_bytes` can be appended now (always
    /// true without a log).
    pub fn log_has_room(&self, record_bytes: usize) -> bool {
        match &self.log {
            None => true,
            Some(log) => log.room_for(record_bytes, self.bm.wal.reclaim_floor(self.worker)),
        }
    }

    /// The largest group (record bytes) this worker's log can ever take
    /// (`usize::MAX` without a log).
    pub fn log_max_record_bytes(&self) -> usize {
        self.log
            .as_ref()
            .map_or(usize::MAX, |log| log.max_record_bytes())
    }

    /// See [`LogWriter::assign_seq`].
    pub fn assign_log_seq(&mut self) -> u64 {
        let wal = self.bm.wal.clone();
        self.log
            .as_mut()
            .expect("a logged step without a log")
            .assign_seq(&wal)
    }

    /// See [`LogWriter::append`].
    pub fn append_log_group(&mut self, parts: &GroupParts<'_>) {
        self.log
            .as_mut()
            .expect("a logged step without a log")
            .append(parts)
    }

    /// Starts a log flush if one is due (or `force`): through the worker's
    /// channel, or made on this thread ([`crate::wal::LogWrites`]), when
    /// the flush is done, and its groups durable once every earlier flush
    /// completed, on return.
    pub fn flush_log(&mut self, force: bool) {
        let Some(log) = &mut self.log else {
            return;
        };
        // `Auto`: through the channel when the worker has something to
        // overlap the flush with: page reads in flight (a store out of
        // memory under load), or tasks that can run before it completes
        // (`log_overlap_hint`, from the executor: ready tasks, or sleepers
        // due soon, as in an open loop). Else on this thread, which would
        // only wait. Page writes in flight (eviction, checkpoints) do not
        // count: they wake no task. Where the channel's flushes take far
        // longer than the thread's own (see `LogWrites`), only reads send
        // a flush to the channel, and a flush goes there now and then to
        // measure it again.
        let reads_in_flight = self
            .channel
            .in_flight()
            .saturating_sub(self.writes_in_flight + self.checkpoint_writes_in_flight);
        let use_channel = match self.log_writes {
            crate::wal::LogWrites::Inline => false,
            crate::wal::LogWrites::Channel => true,
            crate::wal::LogWrites::Auto => {
                reads_in_flight > 0
                    || (self.log_overlap_hint && channel_flushes_pay(&log.flush_latency))
            }
        };
        let inline = match &mut self.log_channel {
            Some(inline) if !use_channel => inline,
            _ => {
                log.maybe_flush(&mut self.channel, &self.bm.wal, force);
                return;
            }
        };
        log.maybe_flush(inline, &self.bm.wal, force);
        // (`push` may have performed some of them already.)
        if inline.in_flight() == 0 {
            return;
        }
        // The synchronous backend performs the writes here, each durable
        // when it returns (`RWF_DSYNC`); their completions follow at once.
        if let Err(e) = inline.submit() {
            self.bm.wal.fail(format!("log {}: {e}", self.worker));
        }
        let mut done = std::mem::take(&mut self.log_completions);
        if let Err(e) = inline.poll(&mut done) {
            self.bm.wal.fail(format!("log {}: {e}", self.worker));
        }
        for c in done.drain(..) {
            if log.complete(c, &self.bm.wal, inline) {
                self.log_durable_events += 1;
            }
        }
        self.log_completions = done;
    }

    /// Writes and syncs everything appended to the log, waiting for it
    /// (close and checkpoints). Fails when the store failed.
    pub fn flush_log_blocking(&mut self) -> Result<()> {
        let mut wake_none = |_t: TaskId| {};
        while self.log.as_ref().is_some_and(|log| !log.is_quiet()) {
            self.bm.wal.check()?;
            self.flush_log(true);
            self.channel.submit()?;
            let mut done = Vec::new();
            if self.channel.in_flight() > 0 {
                self.channel.wait(1, &mut done)?;
            }
            for c in done {
                self.complete(c, &mut wake_none);
            }
        }
        self.bm.wal.check()
    }

    /// Notes of the I/O channel (fallbacks).
    pub fn io_notes(&self) -> &[String] {
        self.channel.notes()
    }

    /// Reads and writes in flight.
    pub fn io_in_flight(&self) -> usize {
        self.channel.in_flight()
    }

    /// Starts loading `pid` for `task` (see [`LoadStart`]); with no task,
    /// a read ahead: nobody is woken by its completion, and a failed read
    /// leaves the page evicted, for whoever needs it to read (and fail)
    /// again.
    pub fn start_load(&mut self, pid: PageId, task: Option<TaskId>) -> Result<LoadStart> {
        let frame = match self.claim_for_load(pid)? {
            Ok(frame) => frame,
            Err(found) => return Ok(found),
        };
        let req = IoRequest::read(
            pid * PAGE_SIZE as u64,
            self.bm.frame_ptr(frame),
            PAGE_SIZE as u32,
            u64::from(frame),
        );
        // SAFETY: the frame is ours (taken from the free list) and holds a
        // page in LOADING state: nobody trusts its bytes until completion.
        if let Err(e) = unsafe { self.channel.push(req) } {
            self.unclaim_load(pid, frame);
            return Err(e.into());
        }
        self.read_waiters[(frame - self.first_frame) as usize] = task;
        match task {
            Some(task) => {
                let task_index = task as usize;
                if task_index >= self.task_reads_in_flight.len() {
                    self.task_reads_in_flight.resize(task_index + 1, 0);
                }
                self.task_reads_in_flight[task_index] += 1;
            }
            None => self.stats.read_ahead_reads += 1,
        }
        self.stats.page_reads += 1;
        Ok(LoadStart::Started)
    }

    /// Takes a free frame for reading `pid` and marks the page LOADING
    /// (same version): `Ok(Ok(frame))`, or `Ok(Err(what was found))`
    /// when it is not to be read now (in memory, being read, latched,
    /// freed, or no frame or channel room).
    fn claim_for_load(&mut self, pid: PageId) -> Result<std::result::Result<u32, LoadStart>> {
        if let Err(OpError::Fatal(e)) = self.bm.check_pid(pid) {
            return Err(e);
        }
        let state = self.bm.state(pid);
        let word = state.load();
        match state_of(word) {
            EVICTED if self.bm.frame_slot(pid).load(Ordering::Acquire) == FREED_SLOT => {
                return Ok(Err(LoadStart::Busy))
            }
            EVICTED => {}
            LOADING => return Ok(Err(LoadStart::Loading)),
            LOCKED => return Ok(Err(LoadStart::Busy)),
            _ => return Ok(Err(LoadStart::Resident)),
        }
        if self.channel.free() == 0 {
            return Ok(Err(LoadStart::NoFrame));
        }
        let Some(frame) = self.free_frames.pop() else {
            return Ok(Err(LoadStart::NoFrame));
        };
        if !state.cas(word, make(LOADING, version_of(word))) {
            self.free_frames.push(frame);
            return Ok(Err(LoadStart::Busy));
        }
        self.bm.frame_pid[frame as usize].store(pid, Ordering::Release);
        self.heat_tick_countdown -= 1;
        if self.heat_tick_countdown == 0 {
            self.heat_tick_countdown =
                u64::from(self.end_frame - self.first_frame) * HEAT_EPOCH_POOLS;
            self.bm.heat_ticks.fetch_add(1, Ordering::Relaxed);
        }
        let heat = self.bm.bump_heat(pid);
        let local = (frame - self.first_frame) as usize;
        self.clock_credit[local] = self.bm.spare_rounds_for(heat);
        self.frame_fresh[local] = true;
        Ok(Ok(frame))
    }

    /// Undoes [`WorkerBuffer::claim_for_load`] when the read could not be
    /// sent: the page is evicted again (a new version) and the frame free.
    fn unclaim_load(&mut self, pid: PageId, frame: u32) {
        self.bm.frame_pid[frame as usize].store(NO_PAGE, Ordering::Release);
        self.free_frames.push(frame);
        // LOADING kept the version it was claimed with; only the claimer
        // changes a LOADING page's state.
        let state = self.bm.state(pid);
        let version = version_of(state.load());
        state.0.store(make(EVICTED, version + 1), Ordering::Release);
    }

    /// Reads `pids` ahead of need (no task waits for them; see
    /// [`WorkerBuffer::start_load`] with no task). Runs of consecutive ids
    /// that are all on the device (and lie in one stripe chunk, when there
    /// are several data devices) go in one read each, of up to [`READ_RUN_MOST_PAGES`] pages, through a
    /// staging buffer; pages in memory or being read are skipped. Returns
    /// false when it stopped early (no frame, no room in the channel, or
    /// a page latched), true when every page was handled.
    pub fn read_ahead(&mut self, pids: &[PageId]) -> Result<bool> {
        if self.read_run_slots.is_empty() {
            self.read_run_bufs = (0..READ_RUNS_IN_FLIGHT)
                .map(|_| crate::io::AlignedBuf::new(READ_RUN_MOST_PAGES * PAGE_SIZE))
                .collect();
            self.read_run_slots = vec![Vec::new(); READ_RUNS_IN_FLIGHT];
        }
        // With several data devices a request stays inside one stripe
        // chunk; on one device the chunks lie in order.
        let chunk_bytes = match self.bm.storage().data_device_count() {
            1 => u64::MAX,
            _ => self.bm.storage().chunk_bytes(),
        };
        let mut at = 0;
        while at < pids.len() {
            // The run of consecutive ids from `at`.
            let first = pids[at];
            let mut len = 1;
            while at + len < pids.len()
                && len < READ_RUN_MOST_PAGES
                && pids[at + len] == first + len as u64
                && same_chunk(first, pids[at + len], chunk_bytes)
            {
                len += 1;
            }
            let slot = self.read_run_slots.iter().position(|p| p.is_empty());
            let (Some(slot), true) = (slot, len > 1) else {
                // One page, or no staging buffer free: page by page.
                for &pid in &pids[at..at + len] {
                    match self.start_load(pid, None)? {
                        LoadStart::Started | LoadStart::Loading | LoadStart::Resident => {}
                        LoadStart::Busy | LoadStart::NoFrame => return Ok(false),
                    }
                }
                at += len;
                continue;
            };
            // Claim the run's pages that are on the device; a page in
            // memory or being read ends the run (the rest is tried next).
            let mut pages = std::mem::take(&mut self.read_run_slots[slot]);
            let mut stopped = false;
            let mut taken = 0;
            for &pid in &pids[at..at + len] {
                match self.claim_for_load(pid)? {
                    Ok(frame) => {
                        pages.push((pid, frame));
                        taken += 1;
                    }
                    Err(LoadStart::Resident | LoadStart::Loading) if pages.is_empty() => {
                        taken += 1;
                    }
                    Err(LoadStart::Resident | LoadStart::Loading) => break,
                    Err(LoadStart::Busy | LoadStart::NoFrame | LoadStart::Started) => {
                        stopped = true;
                        break;
                    }
                }
            }
            at += taken;
            if pages.is_empty() {
                self.read_run_slots[slot] = pages;
                if stopped {
                    return Ok(false);
                }
                continue;
            }
            let req = IoRequest::read(
                pages[0].0 * PAGE_SIZE as u64,
                self.read_run_bufs[slot].as_mut_ptr(),
                (pages.len() * PAGE_SIZE) as u32,
                READ_RUN_TAG | slot as u64,
            );
            // SAFETY: the staging buffer belongs to the slot, which stays
            // busy (its page list non-empty) until the read completes; the
            // buffers live as long as the worker, which waits for its I/O
            // before it ends. The pages are LOADING: nobody trusts their
            // frames until the completion fills them.
            if let Err(e) = unsafe { self.channel.push(req) } {
                for &(pid, frame) in &pages {
                    self.unclaim_load(pid, frame);
                }
                pages.clear();
                self.read_run_slots[slot] = pages;
                return Err(e.into());
            }
            for &(_, frame) in &pages {
                self.read_waiters[(frame - self.first_frame) as usize] = None;
            }
            let n = pages.len() as u64;
            self.stats.page_reads += n;
            self.stats.read_ahead_reads += n;
            if n > 1 {
                self.stats.read_runs += 1;
            }
            self.read_run_slots[slot] = pages;
            if stopped {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Reads `task` started that have not completed (each completion wakes
    /// the task).
    pub fn task_reads_in_flight(&self, task: TaskId) -> u32 {
        self.task_reads_in_flight
            .get(task as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Parks-to-be: registers `task` to be woken once `pid` is no longer
    /// being read in (by any worker). Returns false, registering nothing,
    /// if it is not being read in now.
    pub fn wait_for_load(&mut self, pid: PageId, task: TaskId) -> bool {
        if (pid as usize) >= self.bm.pages.len() || state_of(self.bm.state(pid).load()) != LOADING {
            return false;
        }
        self.load_waiters.push((pid, task));
        true
    }

    /// Wakes the tasks of [`WorkerBuffer::wait_for_load`] whose page is no
    /// longer being read in. A page read by another worker is noticed here
    /// too: the check is on the page's state, not on this worker's
    /// completions.
    fn wake_load_waiters(&mut self, wake: &mut dyn FnMut(TaskId)) -> usize {
        let bm = &*self.bm;
        let before = self.load_waiters.len();
        self.load_waiters.retain(|&(pid, task)| {
            if state_of(bm.state(pid).load()) == LOADING {
                return true;
            }
            wake(task);
            false
        });
        before - self.load_waiters.len()
    }

    /// True if `task` is registered by [`WorkerBuffer::wait_for_load`].
    pub fn is_load_waiter(&self, task: TaskId) -> bool {
        self.load_waiters.iter().any(|&(_, t)| t == task)
    }

    /// Tasks waiting for another task's read (see
    /// [`WorkerBuffer::wait_for_load`]).
    pub fn load_waiter_count(&self) -> usize {
        self.load_waiters.len()
    }

    /// The error of a failed load for `task`, if any (taken once).
    pub fn take_load_error(&mut self, task: TaskId) -> Option<Error> {
        let i = self.load_errors.iter().position(|(t, _)| *t == task)?;
        Some(self.load_errors.swap_remove(i).1)
    }

    /// Allocates a new page, exclusively latched and zeroed.
    /// `bm` must be this worker's manager; it gives the guard its lifetime
    /// independently of `self`.
    pub fn alloc_page<'b>(
        &mut self,
        bm: &'b BufferManager,
    ) -> std::result::Result<GuardX<'b>, OpError> {
        self.alloc_page_with(bm, None)
    }

    /// [`WorkerBuffer::alloc_page`] of the reserved id `pid`
    /// ([`BufferManager::reserve_pages`]), which it takes into use
    /// ([`BufferManager::take_reserved`]; call it inside the logged step
    /// that logs the page). `Fatal` if no reservation holds `pid`.
    pub fn alloc_reserved_page<'b>(
        &mut self,
        bm: &'b BufferManager,
        pid: PageId,
    ) -> std::result::Result<GuardX<'b>, OpError> {
        self.alloc_page_with(bm, Some(pid))
    }

    fn alloc_page_with<'b>(
        &mut self,
        bm: &'b BufferManager,
        reserved: Option<PageId>,
    ) -> std::result::Result<GuardX<'b>, OpError> {
        assert!(
            std::ptr::eq(bm, &*self.bm),
            "alloc_page with a foreign buffer manager"
        );
        let Some(&frame) = self.free_frames.last() else {
            // An operation that needs more new pages at once than eviction
            // keeps free (a batch whose step splits several leaves) waits
            // for them: see [`WorkerBuffer::wait_free_frames`].
            return Err(Restart::NoFrame.into());
        };
        let pid = match reserved {
            None => bm.alloc_pid()?,
            Some(pid) => {
                if !bm.take_reserved(pid) {
                    return Err(OpError::Fatal(Error::InvalidArgument(format!(
                        "page {pid} is not reserved"
                    ))));
                }
                pid
            }
        };
        self.free_frames.pop();
        self.clock_credit[(frame - self.first_frame) as usize] = 0;
        self.frame_fresh[(frame - self.first_frame) as usize] = true;
        let state = bm.state(pid);
        let word = state.load();
        debug_assert_eq!(state_of(word), EVICTED, "allocated page {pid} is in memory");
        // SAFETY: the frame came from our free list: no one else uses it.
        unsafe { std::ptr::write_bytes(bm.frame_ptr(frame), 0, PAGE_SIZE) };
        bm.frame_pid[frame as usize].store(pid, Ordering::Release);
        bm.frame_dirty[frame as usize].store(true, Ordering::Relaxed);
        // A new page: whatever an earlier page of this id logged is moot.
        bm.set_image_seq(pid, 0);
        bm.frame_slot(pid).store(frame + 1, Ordering::Release);
        state
            .0
            .store(make(LOCKED, version_of(word) + 1), Ordering::Release);
        Ok(GuardX {
            bm,
            pid,
            frame,
            modified: true,
        })
    }

    /// Starts a due log flush, then submits queued I/O in one batch.
    pub fn submit(&mut self) -> Result<usize> {
        self.flush_log(false);
        self.channel.submit()
    }

    /// Frames eviction keeps free (or being written) now: the free target,
    /// or more while a task waits for more ([`WorkerBuffer::wait_free_frames`]).
    fn free_target_now(&self) -> usize {
        self.free_target.max(self.frames_waited_for())
    }

    /// The most free frames a parked task waits for (0: none waits).
    fn frames_waited_for(&self) -> usize {
        self.frame_waiters
            .iter()
            .map(|&(frames, _)| frames)
            .max()
            .unwrap_or(0)
    }

    /// This worker's frames.
    pub fn frame_count(&self) -> usize {
        (self.end_frame - self.first_frame) as usize
    }

    /// This worker's free frames now.
    pub fn free_frame_count(&self) -> usize {
        self.free_frames.len()
    }

    /// Registers `task` to be woken once this worker has `frames` free
    /// frames (or the store failed). Eviction keeps that many free while
    /// it waits, so a step that needs several new pages at once finds
    /// them all when it runs again. The caller bounds `frames` well below
    /// [`WorkerBuffer::frame_count`].
    pub fn wait_free_frames(&mut self, frames: usize, task: TaskId) {
        debug_assert!(
            frames <= self.frame_count() / 2,
            "waits for {frames} frames"
        );
        self.frame_waiters.push((frames, task));
        self.stats.frame_waits += 1;
    }

    /// Wakes the tasks waiting for free frames that are there now (all of
    /// them when the store failed: they find out).
    pub fn wake_frame_waiters(&mut self, wake: &mut dyn FnMut(TaskId)) {
        if self.frame_waiters.is_empty() {
            return;
        }
        let failed = self.bm.wal.has_failed();
        let free = self.free_frames.len();
        wake_ready(
            &mut self.frame_waiters,
            failed,
            |frames| free >= frames,
            wake,
        );
    }

    /// Frees `guard`'s page, which this worker allocated in a step that
    /// is being rolled back, and gives its frame back to the free list at
    /// once (not at the clock's next pass over it), so that the step's
    /// retry finds as many free frames as it had.
    pub fn free_new_page(&mut self, guard: GuardX<'_>) {
        let frame = guard.frame;
        assert!(
            std::ptr::eq(guard.bm, &*self.bm)
                && (self.first_frame..self.end_frame).contains(&frame),
            "free_new_page of a frame another worker owns"
        );
        guard.free();
        self.bm.frame_pid[frame as usize].store(NO_PAGE, Ordering::Release);
        self.free_frames.push(frame);
    }

    /// Whether eviction should run now.
    pub fn needs_eviction(&self) -> bool {
        self.free_frames.len() + self.writes_in_flight < self.free_target_now()
    }

    /// One clock batch over this worker's frames, if below the free target.
    pub fn evict(&mut self) {
        if !self.needs_eviction() {
            return;
        }
        let frames = (self.end_frame - self.first_frame) as usize;
        // Half the target again, so that eviction runs in batches; and
        // what a waiting task needs, exactly.
        let goal = (self.free_target + self.free_target / 2 + 1).max(self.frames_waited_for());
        let Some(mut wanted) = goal.checked_sub(self.free_frames.len() + self.writes_in_flight)
        else {
            return;
        };
        let mut scanned = 0;
        self.durable_below = self.bm.wal.durable_below();
        // Two sweeps honour the second chance; if they free nothing (every
        // page touched again meanwhile, e.g. a tiny pool of hot inner
        // nodes), a third sweep evicts any unlatched page so that tasks
        // waiting for a frame always make progress.
        while wanted > 0 && scanned < 3 * frames && self.channel.free() > 0 {
            let frame = self.clock_hand;
            self.clock_hand = if frame + 1 == self.end_frame {
                self.first_frame
            } else {
                frame + 1
            };
            let force = scanned >= 2 * frames;
            scanned += 1;
            if self.evict_frame(frame, force) {
                wanted -= 1;
            }
        }
    }

    /// Ages or evicts one frame; true when a frame is (or will be) freed.
    fn evict_frame(&mut self, frame: u32, force: bool) -> bool {
        let bm = &*self.bm;
        let pid = bm.frame_pid[frame as usize].load(Ordering::Acquire);
        if pid == NO_PAGE {
            return false;
        }
        if pid == FREED_PAGE {
            bm.frame_pid[frame as usize].store(NO_PAGE, Ordering::Release);
            self.free_frames.push(frame);
            return true;
        }
        if !force && matches!(page_kind(bm, frame), PAGE_KIND_INNER | PAGE_KIND_HASH_DIR) {
            // Inner nodes are on every path: evicting one makes every task
            // reload it. Only the forced sweep takes them (as LeanStore
            // keeps inner nodes with resident children).
            return false;
        }
        let state = bm.state(pid);
        let word = state.load();
        let local = (frame - self.first_frame) as usize;
        match state_of(word) {
            UNLOCKED if !force => {
                self.dirty_spared[local] = 0;
                // The first pass after a load only notes the page (the load
                // counted); each later pass that finds it referenced again
                // counts one more use.
                if !std::mem::replace(&mut self.frame_fresh[local], false) {
                    let heat = bm.bump_heat(pid);
                    self.clock_credit[local] = bm.spare_rounds_for(heat);
                }
                let _ = state.cas(word, make(MARKED, version_of(word)));
                false
            }
            MARKED if !force && self.clock_credit[local] > 0 => {
                self.clock_credit[local] -= 1;
                false
            }
            MARKED
                if !force
                    && self.dirty_spared[local] < bm.dirty_spare_rounds
                    && bm.frame_dirty[frame as usize].load(Ordering::Relaxed) =>
            {
                self.dirty_spared[local] += 1;
                false
            }
            UNLOCKED | MARKED if state.try_lock_x(word) => {
                self.dirty_spared[local] = 0;
                debug_assert_eq!(bm.frame_of(pid), Some(frame));
                if bm.frame_dirty[frame as usize].load(Ordering::Relaxed) {
                    self.write_back(pid, frame)
                } else {
                    self.drop_page(pid, frame);
                    true
                }
            }
            _ => false,
        }
    }

    /// Pushes the write of an exclusively latched dirty page, if the log
    /// records of its last change are durable (the write-ahead rule:
    /// otherwise it stays dirty and is tried again later).
    fn write_back(&mut self, pid: PageId, frame: u32) -> bool {
        let ptr = self.bm.frame_ptr(frame);
        // SAFETY: we hold the page's exclusive latch.
        let page = unsafe { &mut *(ptr as *mut [u8; PAGE_SIZE]) };
        if page::page_lsn(page) >= self.durable_below || self.bm.wal.has_failed() {
            self.bm.state(pid).unlock_x_into(UNLOCKED);
            self.stats.wal_deferred_writes += 1;
            return false;
        }
        seal_page(page, pid);
        let class = self.bm.data_class(pid);
        let req = IoRequest::write(
            pid * PAGE_SIZE as u64,
            ptr,
            PAGE_SIZE as u32,
            WRITE_TAG | u64::from(frame),
        )
        .with_class(class);
        // SAFETY: the page stays exclusively latched until the completion.
        match unsafe { self.channel.push(req) } {
            Ok(()) => {
                self.writes_in_flight += 1;
                self.stats.page_writes += 1;
                self.stats.page_writes_hot += u64::from(class == WriteClass::DataHot);
                true
            }
            Err(_) => {
                self.bm.state(pid).unlock_x_into(UNLOCKED);
                false
            }
        }
    }

    /// Evicts an exclusively latched clean page and frees its frame.
    fn drop_page(&mut self, pid: PageId, frame: u32) {
        let bm = &*self.bm;
        bm.frame_slot(pid).store(0, Ordering::Release);
        bm.frame_pid[frame as usize].store(NO_PAGE, Ordering::Release);
        bm.state(pid).unlock_x_into(EVICTED);
        self.free_frames.push(frame);
        self.stats.evictions += 1;
    }

    /// Reaps completions without blocking (or, per `block`, blocking for a
    /// batch or for one), waking the tasks whose pages arrived.
    pub fn poll(&mut self, block: Block, wake: &mut dyn FnMut(TaskId)) -> Result<usize> {
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        // A page another worker read may have arrived: its waiters need no
        // completion of ours, so do not block for one.
        let woken = if self.load_waiters.is_empty() {
            0
        } else {
            self.wake_load_waiters(wake)
        };
        if block != Block::No && woken == 0 && self.channel.in_flight() > 0 {
            // Wait for a batch, not for one completion: fewer syscalls per
            // I/O at a latency cost of a few completions' spacing.
            let min = match block {
                Block::Batch => (self.channel.in_flight() / WAIT_BATCH_DIVISOR).max(1),
                _ => 1,
            };
            let timeout = match block {
                Block::OneUntil(deadline) => {
                    Some(deadline.saturating_duration_since(std::time::Instant::now()))
                }
                _ => None,
            };
            if timeout.is_some_and(|t| t.is_zero()) {
                self.channel.poll(&mut completions)?;
            } else {
                self.channel.wait_timeout(min, timeout, &mut completions)?;
            }
        } else {
            self.channel.poll(&mut completions)?;
        }
        let count = completions.len();
        let log_syncs = self.log.as_ref().map_or(0, |log| log.syncs_issued());
        for c in completions.drain(..) {
            self.complete(c, wake);
        }
        self.completions = completions;
        if self.log.as_ref().map_or(0, |log| log.syncs_issued()) != log_syncs {
            // A log flush's writes completed and its sync was queued: send
            // it now, not after the next round of tasks.
            self.channel.submit()?;
        }
        if !self.load_waiters.is_empty() {
            self.wake_load_waiters(wake);
        }
        Ok(count)
    }

    fn complete(&mut self, c: IoCompletion, wake: &mut dyn FnMut(TaskId)) {
        if c.user_data & CHECKPOINT_SYNC_TAG != 0 {
            self.checkpoint_syncs_in_flight -= 1;
            if let Err(e) = c.result {
                self.checkpoint_sync_error.get_or_insert(e.to_string());
            }
            return;
        }
        if c.user_data & CHECKPOINT_WRITE_TAG != 0 {
            // A checkpoint's write of a run of pages that stay in memory.
            let slot = (c.user_data & !CHECKPOINT_WRITE_TAG) as usize;
            let mut pages = std::mem::take(&mut self.checkpoint_slots[slot]);
            assert!(!pages.is_empty(), "checkpoint write slot {slot} was free");
            if let Err(e) = &c.result {
                self.bm.record_write_error(e.to_string());
            }
            for &(pid, frame) in &pages {
                if c.result.is_ok() {
                    self.bm.frame_dirty[frame as usize].store(false, Ordering::Relaxed);
                }
                self.bm.state(pid).unlock_x_into(UNLOCKED);
            }
            pages.clear();
            self.checkpoint_slots[slot] = pages;
            self.checkpoint_writes_in_flight -= 1;
            return;
        }
        if c.user_data & FLUSH_TAG != 0 {
            // A page write of a close's flush (drained there first).
            self.complete_flush_write(c);
            return;
        }
        if c.user_data & LOG_TAG != 0 {
            let log = self.log.as_mut().expect("a log completion without a log");
            if log.complete(c, &self.bm.wal, &mut self.channel) {
                self.log_durable_events += 1;
            }
            return;
        }
        if c.user_data & READ_RUN_TAG != 0 {
            let slot = (c.user_data & !READ_RUN_TAG) as usize;
            let mut pages = std::mem::take(&mut self.read_run_slots[slot]);
            assert!(!pages.is_empty(), "read run slot {slot} was free");
            for (i, &(pid, frame)) in pages.iter().enumerate() {
                let result = match &c.result {
                    Ok(()) => {
                        let from = &self.read_run_bufs[slot][i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
                        // SAFETY: the page is LOADING and its frame was
                        // claimed for this read: the loader alone touches it.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                from.as_ptr(),
                                self.bm.frame_ptr(frame),
                                PAGE_SIZE,
                            )
                        };
                        Ok(())
                    }
                    Err(e) => Err(e.clone()),
                };
                self.finish_load(pid, frame, result, wake);
            }
            pages.clear();
            self.read_run_slots[slot] = pages;
            return;
        }
        let frame = (c.user_data & !WRITE_TAG) as u32;
        let bm = &*self.bm;
        let pid = bm.frame_pid[frame as usize].load(Ordering::Acquire);
        if c.user_data & WRITE_TAG != 0 {
            self.writes_in_flight -= 1;
            match c.result {
                Ok(()) => {
                    bm.frame_dirty[frame as usize].store(false, Ordering::Relaxed);
                    self.drop_page(pid, frame);
                }
                Err(e) => {
                    bm.record_write_error(e.to_string());
                    bm.state(pid).unlock_x_into(UNLOCKED);
                }
            }
            return;
        }
        self.finish_load(pid, frame, c.result, wake);
    }

    /// A read of `pid` into `frame` completed with `result`: checks the
    /// page and makes it resident, or evicts it again on an error (kept
    /// for the task that waited, if any); wakes that task.
    fn finish_load(
        &mut self,
        pid: PageId,
        frame: u32,
        result: std::result::Result<(), crate::io::IoError>,
        wake: &mut dyn FnMut(TaskId),
    ) {
        let bm = &*self.bm;
        let waiter = self.read_waiters[(frame - self.first_frame) as usize].take();
        if let Some(task) = waiter {
            debug_assert!(self.task_reads_in_flight[task as usize] > 0);
            self.task_reads_in_flight[task as usize] -= 1;
        }
        let outcome = match result {
            Ok(()) => {
                // SAFETY: the page is LOADING and the read has completed: the
                // loader alone may look at the frame.
                verify_page(
                    unsafe { &*(bm.frame_ptr(frame) as *const [u8; PAGE_SIZE]) },
                    pid,
                )
            }
            Err(e) => Err(e.into()),
        };
        let state = bm.state(pid);
        let version = version_of(state.load());
        match outcome {
            Ok(()) => {
                bm.frame_dirty[frame as usize].store(false, Ordering::Relaxed);
                bm.frame_slot(pid).store(frame + 1, Ordering::Release);
                state
                    .0
                    .store(make(UNLOCKED, version + 1), Ordering::Release);
            }
            Err(e) => {
                bm.frame_pid[frame as usize].store(NO_PAGE, Ordering::Release);
                self.free_frames.push(frame);
                state.0.store(make(EVICTED, version + 1), Ordering::Release);
                if let Some(task) = waiter {
                    self.load_errors.push((task, e));
                }
            }
        }
        if let Some(task) = waiter {
            wake(task);
        }
    }

    /// Starts syncing every data device through this worker's channel (a
    /// checkpoint's finish; the worker goes on running tasks meanwhile).
    pub fn begin_checkpoint_sync(&mut self) -> Result<()> {
        debug_assert_eq!(self.checkpoint_syncs_in_flight, 0);
        self.checkpoint_sync_error = None;
        for device in 0..self.bm.storage().data_device_count() {
            // SAFETY: a sync carries no buffer.
            unsafe {
                self.channel
                    .push(IoRequest::sync(device, true, CHECKPOINT_SYNC_TAG))
            }?;
            self.checkpoint_syncs_in_flight += 1;
        }
        self.channel.submit()?;
        Ok(())
    }

    /// The syncs of [`WorkerBuffer::begin_checkpoint_sync`]: None while
    /// some are in flight, then their outcome.
    pub fn checkpoint_sync_outcome(&mut self) -> Option<Result<()>> {
        if self.checkpoint_syncs_in_flight > 0 {
            return None;
        }
        Some(match self.checkpoint_sync_error.take() {
            None => Ok(()),
            Some(e) => Err(Error::Failed(format!("syncing the data files: {e}"))),
        })
    }

    /// Starts this worker's part of a checkpoint: every page dirty in its
    /// frames is written (and stays in memory), in steps of
    /// [`WorkerBuffer::checkpoint_flush_step`].
    pub fn begin_checkpoint_flush(&mut self) {
        debug_assert_eq!(self.checkpoint_writes_in_flight, 0);
        self.checkpoint_cursor = Some(self.first_frame);
        self.checkpoint_pending.clear();
        self.checkpoint_pending_at = 0;
        self.checkpoint_scanning = false;
        self.checkpoint_retry.clear();
        if self.checkpoint_slots.is_empty() {
            self.checkpoint_bufs = (0..CHECKPOINT_WRITES_IN_FLIGHT)
                .map(|_| crate::io::AlignedBuf::new(CHECKPOINT_RUN_PAGES * PAGE_SIZE))
                .collect();
            self.checkpoint_slots = vec![Vec::new(); CHECKPOINT_WRITES_IN_FLIGHT];
        }
    }

    /// One step of a checkpoint's page pass. The pass scans this worker's
    /// frames a window at a time for dirty pages, sorts them by page id,
    /// and writes runs of neighbouring pages in one write each (up to 64
    /// KiB) through a staging buffer: on a device with a volatile write
    /// cache, a stream of small random writes makes every log sync wait
    /// much longer than the same bytes written in large sequential runs.
    /// While tasks of this worker wait for their commits, the writes in
    /// flight hold at most one run's worth of pages (16) between them,
    /// else up to four runs.
    /// A page stays exclusively latched until its write completes (its
    /// frame cannot be evicted or changed meanwhile). A page latched by a
    /// task, or changed by a group that is not durable yet (the
    /// write-ahead rule), is tried again later. Returns true once every
    /// page dirty when the pass began has been written (or found clean)
    /// and no write is in flight.
    pub fn checkpoint_flush_step(&mut self) -> bool {
        let bm = self.bm.clone();
        if self.checkpoint_scanning || self.checkpoint_pending_at == self.checkpoint_pending.len() {
            if !self.checkpoint_scanning {
                self.checkpoint_pending.clear();
                self.checkpoint_pending_at = 0;
                self.checkpoint_scanning = true;
            }
            if !self.scan_checkpoint_window(&bm) {
                return false; // the window's scan goes on next step
            }
            self.checkpoint_scanning = false;
            if self.checkpoint_pending.is_empty() {
                std::mem::swap(&mut self.checkpoint_pending, &mut self.checkpoint_retry);
            }
            self.checkpoint_pending.sort_unstable();
        }

        let durable_below = bm.wal.durable_below();
        let chunk_bytes = bm.storage().chunk_bytes();
        let mut examined = 0;
        // Commits waiting for the log get most of the device.
        let commits_wait = !self.commit_waiters.is_empty();
        // Keep room in the channel for the tasks' reads and the log.
        while examined < CHECKPOINT_PAGES_PER_STEP
            && self.checkpoint_pending_at < self.checkpoint_pending.len()
            && self.channel.free() > 16
        {
            let in_flight: usize = self.checkpoint_slots.iter().map(Vec::len).sum();
            let run_pages = if commits_wait {
                let room = CHECKPOINT_PAGES_IN_FLIGHT_WHILE_COMMITS_WAIT.saturating_sub(in_flight);
                // A run longer than the room waits for it rather than go
                // out in pieces. The pending pages are sorted and distinct:
                // when the one `room` places on is `room` ids on, in the
                // same chunk, so are all between.
                let pending = &self.checkpoint_pending[self.checkpoint_pending_at..];
                let run_cut = in_flight > 0
                    && room < CHECKPOINT_RUN_PAGES
                    && pending.get(room).is_some_and(|&(pid, _)| {
                        let first = pending[0].0;
                        pid == first + room as u64 && same_chunk(first, pid, chunk_bytes)
                    });
                if room == 0 || run_cut {
                    self.stats.checkpoint_writes_held += 1;
                    break;
                }
                room.min(CHECKPOINT_RUN_PAGES)
            } else {
                CHECKPOINT_RUN_PAGES
            };
            let Some(slot) = self
                .checkpoint_slots
                .iter()
                .position(|pages| pages.is_empty())
            else {
                break;
            };
            let mut pages = std::mem::take(&mut self.checkpoint_slots[slot]);
            let buf = &mut self.checkpoint_bufs[slot];
            while pages.len() < run_pages && examined < CHECKPOINT_PAGES_PER_STEP {
                let Some(&(pid, frame)) = self.checkpoint_pending.get(self.checkpoint_pending_at)
                else {
                    break;
                };
                if let Some(&(first, _)) = pages.first() {
                    let next = first + pages.len() as u64;
                    if pid != next || !same_chunk(first, pid, chunk_bytes) {
                        break;
                    }
                }
                self.checkpoint_pending_at += 1;
                examined += 1;
                match claim_for_checkpoint(&bm, pid, frame, durable_below) {
                    Claim::Clean => {}
                    Claim::Later => self.checkpoint_retry.push((pid, frame)),
                    Claim::Latched(page) => {
                        let at = pages.len() * PAGE_SIZE;
                        buf[at..at + PAGE_SIZE].copy_from_slice(&page[..]);
                        pages.push((pid, frame));
                    }
                }
            }
            if pages.is_empty() {
                self.checkpoint_slots[slot] = pages;
                continue;
            }
            // One write of consecutive pages: hot when any of them is.
            let class = if pages
                .iter()
                .any(|&(pid, _)| self.bm.data_class(pid) == WriteClass::DataHot)
            {
                WriteClass::DataHot
            } else {
                WriteClass::DataCold
            };
            assert!(
                !commits_wait
                    || in_flight + pages.len() <= CHECKPOINT_PAGES_IN_FLIGHT_WHILE_COMMITS_WAIT,
                "checkpoint writes of {} pages in flight while commits wait",
                in_flight + pages.len()
            );
            let req = IoRequest::write(
                pages[0].0 * PAGE_SIZE as u64,
                buf.as_mut_ptr(),
                (pages.len() * PAGE_SIZE) as u32,
                CHECKPOINT_WRITE_TAG | slot as u64,
            )
            .with_class(class);
            // SAFETY: the staging buffer belongs to the slot, which stays
            // busy (its page list non-empty) until the write completes, and
            // is neither written nor freed meanwhile (the buffers live as
            // long as the worker, which waits for its I/O before it ends).
            match unsafe { self.channel.push(req) } {
                Ok(()) => {
                    self.checkpoint_writes_in_flight += 1;
                    self.stats.page_writes += pages.len() as u64;
                    if class == WriteClass::DataHot {
                        self.stats.page_writes_hot += pages.len() as u64;
                    }
                    self.checkpoint_slots[slot] = pages;
                }
                Err(_) => {
                    for &(pid, _) in &pages {
                        bm.state(pid).unlock_x_into(UNLOCKED);
                    }
                    self.checkpoint_retry.append(&mut pages);
                    self.checkpoint_slots[slot] = pages;
                    break;
                }
            }
        }
        self.checkpoint_cursor.is_none()
            && self.checkpoint_pending_at == self.checkpoint_pending.len()
            && self.checkpoint_retry.is_empty()
            && self.checkpoint_writes_in_flight == 0
    }

    /// Scans frames for dirty pages into `checkpoint_pending`, up to the
    /// end of the current window; true when the window (or the last one)
    /// has been scanned.
    fn scan_checkpoint_window(&mut self, bm: &BufferManager) -> bool {
        let Some(mut frame) = self.checkpoint_cursor else {
            return true;
        };
        let window_end = (self.first_frame as usize
            + ((frame - self.first_frame) as usize / CHECKPOINT_WINDOW_FRAMES + 1)
                * CHECKPOINT_WINDOW_FRAMES)
            .min(self.end_frame as usize) as u32;
        let step_end = window_end.min(frame.saturating_add(CHECKPOINT_SCAN_FRAMES_PER_STEP as u32));
        while frame < step_end {
            let pid = bm.frame_pid[frame as usize].load(Ordering::Acquire);
            if pid < FREED_PAGE && bm.frame_dirty[frame as usize].load(Ordering::Relaxed) {
                self.checkpoint_pending.push((pid, frame));
            }
            frame += 1;
        }
        self.checkpoint_cursor = (frame < self.end_frame).then_some(frame);
        frame == window_end
    }

    /// Writes back every dirty page in this worker's frames and waits.
    /// Pages stay in memory, clean. Call with no task running.
    pub fn flush_dirty(&mut self) -> Result<()> {
        let mut wake_none = |_t: TaskId| {};
        let bm = self.bm.clone();
        // The write-ahead rule: the log goes first, this worker's and every
        // other's (a page here may hold another worker's change; the others
        // flush theirs as they stop too).
        self.flush_log_blocking()?;
        let mut durable_below = bm.wal.durable_below();
        while self.log.is_some() && durable_below < bm.wal.next_seq() {
            bm.wal.check()?;
            std::thread::sleep(std::time::Duration::from_micros(100));
            durable_below = bm.wal.durable_below();
        }
        for frame in self.first_frame..self.end_frame {
            let pid = bm.frame_pid[frame as usize].load(Ordering::Acquire);
            if pid >= FREED_PAGE || !bm.frame_dirty[frame as usize].load(Ordering::Relaxed) {
                continue;
            }
            // SAFETY: a racy read of the LSN is checked again below under
            // the latch; no task runs while the worker flushes.
            let lsn = page::page_lsn(unsafe { &*(bm.frame_ptr(frame) as *const [u8; PAGE_SIZE]) });
            if lsn >= durable_below {
                return Err(Error::Failed(format!(
                    "page {pid} changed by log group {lsn}, which is not durable"
                )));
            }
            let state = bm.state(pid);
            let word = state.load();
            if !state.try_lock_x(word) {
                return Err(Error::InvalidArgument(format!(
                    "page {pid} is latched during flush"
                )));
            }
            let ptr = bm.frame_ptr(frame);
            // SAFETY: exclusive latch held.
            seal_page(unsafe { &mut *(ptr as *mut [u8; PAGE_SIZE]) }, pid);
            while self.channel.free() == 0 {
                self.drain_flush_writes(&mut wake_none)?;
            }
            let class = bm.data_class(pid);
            let req = IoRequest::write(
                pid * PAGE_SIZE as u64,
                ptr,
                PAGE_SIZE as u32,
                u64::from(frame) | FLUSH_TAG,
            )
            .with_class(class);
            // SAFETY: latched until its completion is drained below.
            unsafe { self.channel.push(req) }?;
            self.stats.page_writes += 1;
            self.stats.page_writes_hot += u64::from(class == WriteClass::DataHot);
        }
        while self.channel.in_flight() > 0 {
            self.drain_flush_writes(&mut wake_none)?;
        }
        match self.bm.write_error() {
            Some(e) => Err(Error::Unsupported(format!("a page write failed: {e}"))),
            None => Ok(()),
        }
    }

    fn drain_flush_writes(&mut self, wake: &mut dyn FnMut(TaskId)) -> Result<()> {
        let mut done = Vec::new();
        self.channel.wait(1, &mut done)?;
        for c in done {
            if c.user_data & FLUSH_TAG == 0 {
                self.complete(c, wake);
            } else {
                self.complete_flush_write(c);
            }
        }
        Ok(())
    }

    /// A close's write of one page, in place, latched until now.
    fn complete_flush_write(&mut self, c: IoCompletion) {
        let frame = (c.user_data & !FLUSH_TAG) as u32;
        let pid = self.bm.frame_pid[frame as usize].load(Ordering::Acquire);
        match c.result {
            Ok(()) => self.bm.frame_dirty[frame as usize].store(false, Ordering::Relaxed),
            Err(e) => self.bm.record_write_error(e.to_string()),
        }
        self.bm.state(pid).unlock_x_into(UNLOCKED);
    }
}

/// The page kind in a frame's header. The frame may be changing under us;
/// a stale kind only changes which page is evicted, never correctness.
fn page_kind(bm: &BufferManager, frame: u32) -> u16 {
    let ptr = bm.frame_ptr(frame);
    // SAFETY: two bytes inside the frame; a racy read yields some u16, which
    // is only used as an eviction hint.
    let bytes = unsafe {
        [
            std::ptr::read_volatile(ptr.add(4)),
            std::ptr::read_volatile(ptr.add(5)),
        ]
    };
    u16::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {

    #[test]
    fn auto_sends_flushes_to_the_channel_unless_it_is_found_slow() {
        use crate::wal::writer::{FlushLatency, WindowMin, FLUSH_WINDOW};
        let window = |us: f64| WindowMin {
            us: Some(us),
            ..WindowMin::default()
        };
        let now = std::time::Instant::now();
        // Not measured yet: try the channel.
        assert!(channel_flushes_pay(&FlushLatency::default()));
        // Quick, or slow only as the thread's own are: the channel.
        let quick = FlushLatency {
            inline: window(100.0),
            channel: window(150.0),
            channel_last: Some(now),
        };
        assert!(channel_flushes_pay(&quick));
        let slow_device = FlushLatency {
            inline: window(3000.0),
            channel: window(5000.0),
            channel_last: Some(now),
        };
        assert!(channel_flushes_pay(&slow_device));
        // Over 1 ms and over 4 times the thread's: not until re-measured.
        let late = FlushLatency {
            inline: window(100.0),
            channel: window(4000.0),
            channel_last: Some(now),
        };
        assert!(!channel_flushes_pay(&late));
        let due = FlushLatency {
            channel_last: Some(now - CHANNEL_FLUSH_REMEASURE),
            ..late
        };
        assert!(channel_flushes_pay(&due));
        // The window keeps the shortest of its flushes.
        let mut w = WindowMin::default();
        for i in 0..FLUSH_WINDOW {
            assert_eq!(w.us, None);
            w.record(if i == 3 { 90.0 } else { 5000.0 });
        }
        assert_eq!(w.us, Some(90.0));
    }
    use super::*;
    use crate::io::StorageConfig;
    use std::os::unix::fs::FileExt;

    /// A buffer manager over a file holding sealed pages 0..pages, each
    /// filled with its page id, and one worker's part with `frames` frames.
    fn store(dir: &tempfile::TempDir, pages: u64, frames: u64) -> WorkerBuffer {
        let path = dir.path().join("data");
        let file = std::fs::File::create(&path).unwrap();
        for pid in 0..pages {
            let mut page = [pid as u8; PAGE_SIZE];
            seal_page(&mut page, pid);
            file.write_all_at(&page, pid * PAGE_SIZE as u64).unwrap();
        }
        drop(file);
        let storage = Arc::new(Storage::open(&StorageConfig::new([path])).unwrap());
        let bm = BufferManager::new(
            storage,
            &BufferConfig {
                pool_bytes: frames * PAGE_SIZE as u64,
                workers: 1,
                max_store_bytes: 1 << 30,
                free_target_pct: 2,
                dirty_spare_rounds: 3,
                hot_spare_rounds: 16,
            },
            Arc::new(WalShared::new(crate::wal::Durability::None, 1, 1)),
        )
        .unwrap();
        bm.set_allocation(pages, Vec::new()).unwrap();
        WorkerBuffer::new(Arc::new(bm), 0, &IoConfig::default()).unwrap()
    }

    /// A task that finds the page it needs being read in by another task
    /// waits for that read (it is woken with the reader) instead of
    /// starting a second read or being polled until the page arrives.
    #[test]
    fn a_task_waits_for_the_read_another_task_started() {
        let dir = tempfile::tempdir().unwrap();
        let mut wb = store(&dir, 12, 16);
        let (reader, waiter, other) = (1, 2, 3);
        assert!(matches!(
            wb.start_load(5, Some(reader)),
            Ok(LoadStart::Started)
        ));
        assert!(matches!(
            wb.start_load(5, Some(waiter)),
            Ok(LoadStart::Loading)
        ));
        assert!(matches!(
            wb.bm.fix_optimistic(5),
            Err(OpError::Restart(Restart::Loading(5)))
        ));
        assert!(wb.wait_for_load(5, waiter));
        assert!(!wb.wait_for_load(6, other), "page 6 is not being read");
        assert_eq!(wb.load_waiter_count(), 1);
        let mut woken = Vec::new();
        while woken.len() < 2 {
            wb.poll(Block::Batch, &mut |task| woken.push(task)).unwrap();
        }
        woken.sort_unstable();
        assert_eq!(woken, vec![reader, waiter]);
        assert_eq!(wb.load_waiter_count(), 0);
        assert_eq!(wb.stats.page_reads, 1, "one read for both tasks");
        let guard = wb.bm.fix_optimistic(5).expect("page 5 is in memory");
        let page = guard.racy_page();
        assert!((16..PAGE_SIZE).all(|at| page.read::<1>(at) == [5]));
    }
}
