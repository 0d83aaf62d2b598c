//! Point lookups that tasks queue for their worker, which runs them
//! together once it has polled its ready tasks (`tree::LookupPlan::Batch`).
//!
//! A lookup in a tree larger than the CPU's caches waits for memory at
//! every level: for the node's header and slots, then for the entry its
//! search ends at. One lookup at a time, those waits follow one another; a
//! yield before each lets other tasks run meanwhile, but a task switch
//! (leaving and re-entering every future of the task's stack) costs about
//! as much as the miss it hides. Here each task switches once per lookup:
//! it queues the lookup and parks, and the worker's loop, after its round
//! of ready tasks, runs every queued lookup in groups whose memory accesses
//! overlap (`tree::lookup_batch`), then wakes their tasks. The worker
//! thread's `tree::LookupTuner` decides per epoch of lookups whether this
//! is quicker than descending alone.
//!
//! Everything here belongs to one worker thread: the queue is thread-local,
//! and only that worker's tasks and loop use it.

use crate::btree::tree::{self, BatchedLookup, LookupStop};
use crate::buffer::{BufferManager, PageId};
use crate::sched::{current_task, park_current, TaskId};
use std::cell::RefCell;
use std::task::Poll;

/// One queued lookup, or a free entry.
#[derive(Default)]
struct Entry {
    /// The task that waits for it.
    task: TaskId,
    lookup: BatchedLookup,
    /// Waiting for the next batch.
    queued: bool,
    /// Its task's future was dropped while it was queued: the batch frees
    /// the entry without running it.
    abandoned: bool,
}

/// This worker's queued lookups.
#[derive(Default)]
struct LookupQueue {
    entries: Vec<Entry>,
    free: Vec<usize>,
    queued_count: usize,
}

thread_local! {
    static QUEUE: RefCell<LookupQueue> = RefCell::new(LookupQueue::default());
}

/// Looks `key` up in the tree of `root` in this worker's next batch:
/// queues it, parks the task until the worker ran the batch, and returns
/// its outcome (as `tree::lookup_interleaved`'s). The value is written to
/// `out` (replacing its contents) when found.
pub(crate) async fn batched(
    root: PageId,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, LookupStop> {
    let task = current_task().expect("a batched lookup outside a task");
    let ticket = Ticket::queue(task, root, key, out);
    let outcome = std::future::poll_fn(|_| match ticket.take_outcome() {
        Some(outcome) => Poll::Ready(outcome),
        None => {
            // Woken by the batch (or, spuriously, by something else).
            park_current();
            Poll::Pending
        }
    })
    .await;
    ticket.finish(out);
    outcome
}

/// A task's claim on a queue entry; dropping it before [`Ticket::finish`]
/// (the task's future was dropped) abandons the entry.
struct Ticket {
    index: usize,
    finished: bool,
}

impl Ticket {
    /// Queues a lookup; `out`'s buffer moves into the entry (and the
    /// entry's spare buffer into `out`) until [`Ticket::finish`].
    fn queue(task: TaskId, root: PageId, key: &[u8], out: &mut Vec<u8>) -> Ticket {
        QUEUE.with(|q| {
            let mut q = q.borrow_mut();
            let index = match q.free.pop() {
                Some(index) => index,
                None => {
                    q.entries.push(Entry::default());
                    q.entries.len() - 1
                }
            };
            let entry = &mut q.entries[index];
            assert!(!entry.queued, "a free lookup entry was still queued");
            entry.task = task;
            entry.lookup.root = root;
            entry.lookup.key.clear();
            entry.lookup.key.extend_from_slice(key);
            std::mem::swap(&mut entry.lookup.out, out);
            entry.lookup.outcome = None;
            entry.queued = true;
            entry.abandoned = false;
            q.queued_count += 1;
            Ticket {
                index,
                finished: false,
            }
        })
    }

    /// The outcome, once the batch ran.
    fn take_outcome(&self) -> Option<Result<bool, LookupStop>> {
        QUEUE.with(|q| q.borrow_mut().entries[self.index].lookup.outcome.take())
    }

    /// Gives `out` its buffer back (with the value, if found) and frees
    /// the entry.
    fn finish(mut self, out: &mut Vec<u8>) {
        QUEUE.with(|q| {
            let mut q = q.borrow_mut();
            let entry = &mut q.entries[self.index];
            debug_assert!(!entry.queued);
            std::mem::swap(&mut entry.lookup.out, out);
            q.free.push(self.index);
        });
        self.finished = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // (`try_with`: the thread may be ending, its queue already gone.)
        let _ = QUEUE.try_with(|q| {
            let mut q = q.borrow_mut();
            let entry = &mut q.entries[self.index];
            if entry.queued {
                entry.abandoned = true;
            } else {
                q.free.push(self.index);
            }
        });
    }
}

/// Runs every lookup this worker's tasks queued since the last call
/// (`tree::lookup_batch`) and wakes their tasks. Called by the worker loop
/// when no task is running.
pub(crate) fn run_batch(bm: &BufferManager, wake: &mut dyn FnMut(TaskId)) {
    QUEUE.with(|q| {
        let mut q = q.borrow_mut();
        if q.queued_count == 0 {
            return;
        }
        let q = &mut *q;
        let mut batch: Vec<&mut BatchedLookup> = q
            .entries
            .iter_mut()
            .filter(|e| e.queued && !e.abandoned)
            .map(|e| &mut e.lookup)
            .collect();
        tree::lookup_batch(bm, &mut batch);
        drop(batch);
        for (index, entry) in q.entries.iter_mut().enumerate() {
            if !entry.queued {
                continue;
            }
            entry.queued = false;
            if entry.abandoned {
                entry.lookup.outcome = None;
                q.free.push(index);
            } else {
                debug_assert!(entry.lookup.outcome.is_some());
                wake(entry.task);
            }
        }
        q.queued_count = 0;
    });
}
