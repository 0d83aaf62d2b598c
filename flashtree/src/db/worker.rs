//! Worker threads: one per core, each with its own executor, buffer part
//! and I/O channel. The loop (Haas & Leis (VLDB 2023) §3.3, figure 9):
//!
//! 1. take new jobs from the inbox (they spawn tasks);
//! 2. run every ready task once;
//! 3. submit the I/O the tasks queued, in one batch;
//! 4. evict if free frames are below the target (dirty pages are written
//!    asynchronously), and submit those writes;
//! 5. poll completions (blocking only when I/O is in flight and no task is
//!    ready, or every ready task is busy-waiting) and wake the tasks whose
//!    pages arrived.
//!
//! A worker with no tasks and no I/O sleeps on its inbox; there is no other
//! thread in the engine.

use crate::buffer::{step, Block, LoadStart, OpError, Restart, WorkerBuffer, WorkerIoStats};
use crate::error::{Error, Result};
use crate::io::IoConfig;
use crate::sched::{current_task, park_current, yield_busy, Executor, TaskId};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Poll;

/// Work handed to a worker: it runs on the worker thread and spawns tasks.
pub(crate) type Job = Box<dyn FnOnce(&mut Executor) + Send>;

/// What other threads share with one worker.
#[derive(Default)]
pub(crate) struct WorkerShared {
    queue: Mutex<VecDeque<Job>>,
    queued: AtomicUsize,
    signal: Condvar,
    /// A wake without a job arrived (set under `queue`'s lock): the
    /// worker has something to look at, such as a checkpoint's round.
    woken: AtomicBool,
    pub(crate) page_reads: AtomicU64,
    pub(crate) read_ahead_reads: AtomicU64,
    pub(crate) read_runs: AtomicU64,
    pub(crate) page_writes: AtomicU64,
    pub(crate) page_writes_hot: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) log_groups: AtomicU64,
    pub(crate) log_syncs: AtomicU64,
    pub(crate) log_bytes: AtomicU64,
    pub(crate) log_record_bytes: AtomicU64,
    pub(crate) log_image_bytes: AtomicU64,
    pub(crate) log_room_waits: AtomicU64,
    pub(crate) frame_waits: AtomicU64,
    pub(crate) leaf_rebalances: AtomicU64,
    pub(crate) checkpoint_writes_held: AtomicU64,
    /// Some task of this worker waits for a commit to become durable:
    /// workers whose log becomes durable wake this one.
    commit_waiting: AtomicBool,
    /// The store is closing and this worker has nothing left to do (no
    /// task, job, I/O or unflushed log). Once set it stays set: no job can
    /// arrive after the close began. A worker leaves only when every
    /// worker is stopping and no checkpoint runs, since a busy worker may
    /// yet need its part of one.
    stopping: AtomicBool,
}

impl WorkerShared {
    pub(crate) fn push(&self, job: Job) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.push_back(job);
        self.queued.fetch_add(1, Ordering::Release);
        self.signal.notify_one();
    }

    pub(crate) fn wake(&self) {
        let _queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.woken.store(true, Ordering::Release);
        self.signal.notify_one();
    }

    fn take_jobs(&self, out: &mut Vec<Job>) {
        if self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.queued.store(0, Ordering::Release);
        out.extend(queue.drain(..));
    }

    /// Sleeps until a job or a wake arrives. A wake that came since the
    /// last sleep ends it at once: it may be for something the worker
    /// decided before it fell asleep there was nothing to do about (another
    /// worker's checkpoint needs this one's part, and waited for it).
    fn sleep_until_job(&self, shutdown: &AtomicBool) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        while queue.is_empty()
            && !shutdown.load(Ordering::Acquire)
            && !self.woken.swap(false, Ordering::AcqRel)
        {
            queue = self.signal.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Sleeps until a job or a wake arrives, at most `timeout`.
    fn sleep_briefly(&self, timeout: std::time::Duration) {
        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.is_empty() && !self.woken.swap(false, Ordering::AcqRel) {
            let _ = self.signal.wait_timeout(queue, timeout);
        }
    }

    fn publish(&self, wb: &WorkerBuffer) {
        let stats: &WorkerIoStats = &wb.stats;
        self.page_reads.store(stats.page_reads, Ordering::Relaxed);
        self.read_ahead_reads
            .store(stats.read_ahead_reads, Ordering::Relaxed);
        self.read_runs.store(stats.read_runs, Ordering::Relaxed);
        self.page_writes.store(stats.page_writes, Ordering::Relaxed);
        self.page_writes_hot
            .store(stats.page_writes_hot, Ordering::Relaxed);
        self.evictions.store(stats.evictions, Ordering::Relaxed);
        self.log_room_waits
            .store(stats.log_room_waits, Ordering::Relaxed);
        self.frame_waits.store(stats.frame_waits, Ordering::Relaxed);
        self.leaf_rebalances
            .store(stats.leaf_rebalances, Ordering::Relaxed);
        self.checkpoint_writes_held
            .store(stats.checkpoint_writes_held, Ordering::Relaxed);
        if let Some(log) = wb.log() {
            self.log_groups.store(log.stats.groups, Ordering::Relaxed);
            self.log_syncs.store(log.stats.syncs, Ordering::Relaxed);
            self.log_bytes
                .store(log.stats.blocks_written * 4096, Ordering::Relaxed);
            self.log_record_bytes
                .store(log.stats.record_bytes, Ordering::Relaxed);
            self.log_image_bytes
                .store(log.stats.image_bytes, Ordering::Relaxed);
        }
    }
}

thread_local! {
    static LOCAL: Cell<*mut WorkerBuffer> = const { Cell::new(std::ptr::null_mut()) };
    static LOCAL_IN_USE: Cell<bool> = const { Cell::new(false) };
    /// The buffer manager instance whose worker this thread is (`u64::MAX`:
    /// none; instances count from 0).
    static WORKER_OF: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// True on a worker thread of the store whose buffer manager is
/// `instance`: a blocking call of that store made here would wait for a
/// worker this thread may be, and never return.
pub(crate) fn on_worker_of(instance: u64) -> bool {
    WORKER_OF.with(|w| w.get()) == instance
}

/// Sets a worker's `stopping` flag when its thread leaves `worker_main`,
/// and fails the store if it leaves by a panic.
struct MarkStopped<'a> {
    shared: &'a WorkerShared,
    bm: Arc<crate::buffer::BufferManager>,
}

impl Drop for MarkStopped<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.bm.wal().fail("a worker thread panicked".into());
        }
        self.shared.stopping.store(true, Ordering::Release);
    }
}

/// Runs `f` with this worker's buffer part. Only inside a task on a worker.
pub(crate) fn with_local<R>(f: impl FnOnce(&mut WorkerBuffer) -> R) -> R {
    let ptr = LOCAL.with(|l| l.get());
    assert!(
        !ptr.is_null(),
        "flashtree task code running outside a worker"
    );
    let reentered = LOCAL_IN_USE.with(|u| u.replace(true));
    debug_assert!(!reentered, "with_local re-entered");
    /// Clears the in-use flag also when `f` panics (the executor catches
    /// task panics and goes on).
    struct InUse;
    impl Drop for InUse {
        fn drop(&mut self) {
            LOCAL_IN_USE.with(|u| u.set(false));
        }
    }
    let _in_use = InUse;
    // SAFETY: the worker loop set the pointer to a WorkerBuffer it owns for
    // the thread's lifetime and touches it only between task polls; tasks
    // borrow it only inside this call, never across an await, and the
    // re-entry flag rules out two borrows at once.
    f(unsafe { &mut *ptr })
}

/// Starts reading `pid` for the current task without waiting for it; on
/// `Started`, wait with [`reads_done`].
pub(crate) fn start_read(pid: u64) -> Result<LoadStart> {
    let task = current_task().expect("start_read outside a task");
    with_local(|wb| wb.start_load(pid, Some(task)))
}

/// Reads `pids` ahead of need, runs of consecutive ids in one request each
/// (see [`WorkerBuffer::read_ahead`]); false when it stopped early.
pub(crate) fn read_ahead(pids: &[u64]) -> Result<bool> {
    with_local(|wb| wb.read_ahead(pids))
}

/// A task's page misses, kept by its `TaskCtx`.
#[derive(Default)]
pub(crate) struct TaskReads {
    /// A page had to be read or waited for since `TaskCtx::take_missed`.
    pub(crate) missed: Cell<bool>,
    /// Page reads this task started.
    pub(crate) started: Cell<u64>,
    /// Pages this task missed (read, or waited for).
    pub(crate) misses: Cell<u64>,
}

impl TaskReads {
    /// Notes a miss; `read_started` when this task's own read went out.
    pub(crate) fn note_miss(&self, read_started: bool) {
        self.missed.set(true);
        self.misses.set(self.misses.get() + 1);
        self.started
            .set(self.started.get() + u64::from(read_started));
    }
}

/// Brings `pid` into memory (or waits for whoever is loading it).
pub(crate) async fn load_page(pid: u64, reads: &TaskReads) -> Result<()> {
    let start = start_read(pid)?;
    reads.note_miss(matches!(start, LoadStart::Started));
    match start {
        LoadStart::Started => reads_done().await,
        LoadStart::Resident => Ok(()),
        LoadStart::Loading => {
            wait_loaded(pid).await;
            Ok(())
        }
        LoadStart::Busy | LoadStart::NoFrame => {
            yield_busy().await;
            Ok(())
        }
    }
}

/// Waits, parked, until `pid` is no longer being read in by another task
/// (of this worker or another one). Its reader may fail; the caller
/// restarts and finds out.
pub(crate) async fn wait_loaded(pid: u64) {
    let task = current_task().expect("wait_loaded outside a task");
    let mut registered = false;
    std::future::poll_fn(|_| {
        if registered {
            // Only the loop's wake of the waiters polls a parked task, and
            // it unregisters the task first.
            debug_assert!(!with_local(|wb| wb.is_load_waiter(task)));
            return Poll::Ready(());
        }
        if with_local(|wb| wb.wait_for_load(pid, task)) {
            registered = true;
            park_current();
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await
}

/// Waits until every read the current task started has completed; returns
/// the first error among them.
pub(crate) async fn reads_done() -> Result<()> {
    let task = current_task().expect("reads_done outside a task");
    std::future::poll_fn(|_| {
        if with_local(|wb| wb.task_reads_in_flight(task)) == 0 {
            Poll::Ready(())
        } else {
            // Every completion of this task's reads wakes it.
            park_current();
            Poll::Pending
        }
    })
    .await;
    let mut first_error = None;
    while let Some(e) = with_local(|wb| wb.take_load_error(task)) {
        first_error.get_or_insert(e);
    }
    first_error.map_or(Ok(()), Err)
}

/// Runs a synchronous tree operation to completion: loads what it misses,
/// yields on conflicts, restarts; counts its misses in `reads`.
pub(crate) async fn run_op<T>(
    reads: &TaskReads,
    mut op: impl FnMut(&mut WorkerBuffer) -> std::result::Result<T, OpError>,
) -> Result<T> {
    loop {
        match with_local(&mut op) {
            Ok(v) => return Ok(v),
            Err(OpError::Fatal(e)) => return Err(e),
            Err(OpError::Restart(Restart::Load(pid))) => load_page(pid, reads).await?,
            Err(OpError::Restart(Restart::Loading(pid))) => {
                reads.note_miss(false);
                wait_loaded(pid).await
            }
            Err(OpError::Restart(Restart::LogFull)) => {
                wait_log_room(step::MAX_STEP_RECORD_BYTES).await
            }
            Err(OpError::Restart(Restart::Retry | Restart::NoFrame)) => yield_busy().await,
        }
    }
}

/// [`run_op`] for operations that change pages under the log: each attempt
/// is one logged step (`buffer::step`): its changes become one log group.
/// Without a log it is [`run_op`].
pub(crate) async fn run_logged_op<T>(
    reads: &TaskReads,
    logged: bool,
    mut op: impl FnMut(&mut WorkerBuffer) -> std::result::Result<T, OpError>,
) -> Result<T> {
    if !logged {
        return run_op(reads, op).await;
    }
    run_op(reads, |wb| {
        wb.manager().wal().check()?;
        if !wb.log_has_room(step::MAX_STEP_RECORD_BYTES) {
            return Err(Restart::LogFull.into());
        }
        step::begin_step();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(wb)));
        match outcome {
            Ok(result) => {
                step::end_step(wb, true);
                result
            }
            Err(panic) => {
                // Pages may have changed without a log record: release the
                // latches and stop the store (reopening recovers).
                step::end_step(wb, false);
                wb.manager()
                    .wal()
                    .fail("a task panicked inside a logged change".into());
                std::panic::resume_unwind(panic)
            }
        }
    })
    .await
}

/// Waits until log group `seq` is durable; an error if the store failed.
pub(crate) async fn wait_durable(seq: u64) -> Result<()> {
    let task = current_task().expect("wait_durable outside a task");
    std::future::poll_fn(|_| {
        let (failed, durable) = with_local(|wb| {
            let wal = wb.manager().wal();
            (wal.has_failed(), seq < wal.durable_below())
        });
        if durable {
            return Poll::Ready(Ok(()));
        }
        if failed {
            return Poll::Ready(Err(with_local(|wb| wb.manager().wal().failure_error())));
        }
        with_local(|wb| wb.wait_durable(seq, task));
        park_current();
        Poll::Pending
    })
    .await
}

/// Waits, parked, until this worker's log has room for a group of
/// `record_bytes` (it starts a flush of what the log holds; room comes when
/// that completes, or when a checkpoint lets the log reuse its blocks), or
/// the store failed: the caller's next step finds out.
pub(crate) async fn wait_log_room(record_bytes: usize) {
    park_unless(|wb, task| {
        if wb.manager().wal().has_failed() || wb.log_has_room(record_bytes) {
            return true;
        }
        wb.flush_log(true);
        wb.wait_log_room(record_bytes, task);
        false
    })
    .await
}

/// Waits, parked, until this worker has `frames` free frames (eviction
/// keeps that many free meanwhile), or the store failed: the caller's next
/// step finds out.
pub(crate) async fn wait_free_frames(frames: usize) {
    park_unless(|wb, task| {
        if wb.manager().wal().has_failed() || wb.free_frame_count() >= frames {
            return true;
        }
        wb.wait_free_frames(frames, task);
        false
    })
    .await
}

/// Parks the current task until the worker loop wakes it, unless
/// `ready_or_register` returns true (nothing to wait for); when it returns
/// false it has registered the task with the waiters the loop wakes.
async fn park_unless(mut ready_or_register: impl FnMut(&mut WorkerBuffer, TaskId) -> bool) {
    let task = current_task().expect("a wait outside a task");
    let mut registered = false;
    std::future::poll_fn(|_| {
        if registered {
            // Only the loop's wake of the waiters polls a parked task.
            return Poll::Ready(());
        }
        if with_local(|wb| ready_or_register(wb, task)) {
            return Poll::Ready(());
        }
        registered = true;
        park_current();
        Poll::Pending
    })
    .await
}

/// How long a worker whose tasks all wait for another worker's log sleeps
/// before it looks again (that worker also wakes it when its log syncs).
const COMMIT_WAIT_SLEEP: std::time::Duration = std::time::Duration::from_micros(200);

/// What a worker thread starts with.
pub(crate) struct WorkerStart {
    pub bm: Arc<crate::buffer::BufferManager>,
    pub shared: Arc<Vec<WorkerShared>>,
    /// This worker's index.
    pub index: usize,
    pub io_config: IoConfig,
    /// Its log (None: `Durability::None`).
    pub log: Option<crate::wal::writer::LogWriter>,
    /// How it writes its log.
    pub log_writes: crate::wal::LogWrites,
    pub checkpoints: super::checkpoint::CheckpointDriver,
    pub shutdown: Arc<AtomicBool>,
    /// Where start-up is reported: the I/O notes, or the error.
    pub started: std::sync::mpsc::Sender<Result<Vec<String>>>,
}

/// The body of worker thread `start.index`. Reports start-up through `started`;
/// returns the result of the final flush: the block where its log's next
/// group would start (the close checkpoint's start for this log).
pub(crate) fn worker_main(start: WorkerStart) -> Result<u64> {
    let WorkerStart {
        bm,
        shared,
        index,
        io_config,
        log,
        log_writes,
        mut checkpoints,
        shutdown,
        started,
    } = start;
    let mut wb = match WorkerBuffer::new(bm, index, &io_config) {
        Ok(wb) => wb,
        Err(e) => {
            let _ = started.send(Err(e));
            return Ok(0);
        }
    };
    if let Some(log) = log {
        if let Err(e) = wb.set_log(log, log_writes) {
            let _ = started.send(Err(e));
            return Ok(0);
        }
    }
    let _ = started.send(Ok(wb.io_notes().to_vec()));
    let bm_instance = wb.manager().instance();
    // However the loop ends, the other workers may leave at the close;
    // a worker thread that panicked fails the store first (a checkpoint
    // waiting for its part would otherwise keep them).
    let _stopped = MarkStopped {
        shared: &shared[index],
        bm: wb.manager_arc(),
    };
    let wb_ptr = Box::into_raw(Box::new(wb));
    LOCAL.with(|l| l.set(wb_ptr));
    WORKER_OF.with(|w| w.set(bm_instance));
    let me = &shared[index];
    let mut exec = Executor::new();
    let mut jobs = Vec::new();
    let mut loop_error: Option<Error> = None;
    let mut durable_events = 0;
    loop {
        me.take_jobs(&mut jobs);
        for job in jobs.drain(..) {
            job(&mut exec);
        }
        exec.fire_timers();
        exec.run_ready();
        // SAFETY: no task is running; the loop is the only user now.
        let wb = unsafe { &mut *wb_ptr };
        if wb.log().is_some() {
            wb.set_log_overlap_hint(
                exec.ready_count() > 0
                    || exec.next_timer().is_some_and(|deadline| {
                        deadline <= std::time::Instant::now() + LOG_OVERLAP_WINDOW
                    }),
            );
        }
        if let Err(e) = step_io(wb, &mut exec) {
            eprintln!("flashtree worker {index}: I/O error: {e}");
            wb.manager().wal().fail(format!("worker {index}: {e}"));
            loop_error.get_or_insert(e);
        }
        // A stopping worker starts no checkpoint: the others may have left.
        if checkpoints.step(wb, !me.stopping.load(Ordering::Acquire)) {
            for (w, other) in shared.iter().enumerate() {
                if w != index {
                    other.wake();
                }
            }
        }
        wb.wake_commit_waiters(&mut |task| exec.wake(task));
        wb.wake_log_room_waiters(&mut |task| exec.wake(task));
        wb.wake_frame_waiters(&mut |task| exec.wake(task));
        if wb.log_durable_events != durable_events {
            durable_events = wb.log_durable_events;
            for (w, other) in shared.iter().enumerate() {
                if w != index && other.commit_waiting.load(Ordering::Acquire) {
                    other.wake();
                }
            }
        }
        me.commit_waiting
            .store(wb.commit_waiter_count() > 0, Ordering::Release);
        me.publish(wb);
        if exec.task_count() == 0 && wb.io_in_flight() == 0 {
            if wb.log().is_some_and(|log| !log.is_quiet()) && !wb.manager().wal().has_failed() {
                // Buffered commits: an idle worker flushes at once.
                wb.flush_log(true);
                continue;
            }
            if checkpoints.needs_me(wb) {
                // A checkpoint waits for this worker's part (also while the
                // store closes: a busy worker's log may need it for room).
                me.sleep_briefly(COMMIT_WAIT_SLEEP);
                continue;
            }
            if shutdown.load(Ordering::Acquire) && me.queued.load(Ordering::Acquire) == 0 {
                me.stopping.store(true, Ordering::Release);
                // The flags first, then the phase: a worker that started a
                // checkpoint set its flag after, and none starts one once
                // its flag is set.
                let all_stopping = shared.iter().all(|w| w.stopping.load(Ordering::Acquire));
                let wal = wb.manager().wal();
                if wal.has_failed() || (all_stopping && checkpoints.idle(wb)) {
                    break;
                }
                me.sleep_briefly(COMMIT_WAIT_SLEEP);
                continue;
            }
            me.sleep_until_job(&shutdown);
        } else if exec.ready_count() == 0
            && wb.io_in_flight() == 0
            && (wb.commit_waiter_count() > 0 || wb.log_room_waiter_count() > 0)
        {
            // Commits wait for another worker's log, or for log room that
            // another worker's part of a checkpoint frees.
            me.sleep_briefly(COMMIT_WAIT_SLEEP);
        } else if exec.ready_count() == 0 && wb.io_in_flight() == 0 {
            if let Some(deadline) = exec.next_timer() {
                // Tasks sleep (`sched::sleep_until`): so does the worker,
                // until the first deadline, a job or a wake.
                let wait = deadline.saturating_duration_since(std::time::Instant::now());
                if !wait.is_zero() && !checkpoints.needs_me(wb) {
                    me.sleep_briefly(wait);
                }
            }
        }
    }
    // SAFETY: all tasks are done; reclaim the box made above.
    let mut wb = unsafe { Box::from_raw(wb_ptr) };
    LOCAL.with(|l| l.set(std::ptr::null_mut()));
    WORKER_OF.with(|w| w.set(u64::MAX));
    let flushed = wb.flush_dirty();
    me.publish(&wb);
    let next_block = wb.log().map_or(0, |log| log.next_block());
    drop(wb);
    match loop_error {
        Some(e) => Err(e),
        None => flushed.map(|()| next_block),
    }
}

/// A task sleeping until at most this far ahead counts as work a log
/// flush through the channel overlaps with (`LogWrites::Auto`): a flush
/// takes about 0.1 ms on this machine's disk.
const LOG_OVERLAP_WINDOW: std::time::Duration = std::time::Duration::from_millis(1);

/// How late a sleeping task may wake when the worker waits for I/O: the
/// tasks due within this window wake together, one wake-up of the worker
/// for all (as Linux's default timer slack of 50 µs does for threads). A
/// wake-up per deadline cost more CPU than the commits of an open loop.
const TIMER_SLACK: std::time::Duration = std::time::Duration::from_micros(50);

fn step_io(wb: &mut WorkerBuffer, exec: &mut Executor) -> Result<()> {
    wb.submit()?;
    if wb.needs_eviction() {
        wb.evict();
        wb.submit()?;
    }
    // Block for completions when no task can move without them: none is
    // ready, or every ready one waits (yield_busy) for a latch, a lock or a
    // frame that another task, or I/O, has to release.
    // Busy-waiters, and tasks parked on another worker's read, wait for one
    // completion only: what they wait for may come from another worker.
    let block = if wb.io_in_flight() == 0 {
        Block::No
    } else if exec.ready_count() == 0 && wb.load_waiter_count() == 0 && exec.next_timer().is_none()
    {
        Block::Batch
    } else if exec.ready_count() == 0 || exec.only_busy_waiters_ready() {
        // A sleeping task wakes at its deadline, not at the next completion.
        match exec.next_timer() {
            Some(deadline) => Block::OneUntil(deadline + TIMER_SLACK),
            None => Block::One,
        }
    } else {
        Block::No
    };
    wb.poll(block, &mut |task| exec.wake(task))?;
    Ok(())
}
