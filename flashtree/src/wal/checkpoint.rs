//! Checkpoints while the workers run: bounding the log that recovery
//! replays, and freeing log space for reuse.
//!
//! # Protocol
//! A checkpoint starts when a worker's log holds `checkpoint_log_bytes`
//! since the last one. No thread stops; each worker does its part from its
//! loop, between task polls:
//! 1. *Round 1*: each worker ends its partial log block and records where
//!    its log goes on (its start block). When the last worker has done so,
//!    the next sequence number is `seq_start`: every group numbered from it
//!    on lies after the start blocks.
//! 2. *Round 2*: each worker writes every page that is dirty in its frames
//!    (pages stay in memory; the write-ahead rule holds: a page waits for
//!    the log of its last change). Every change made before round 1 ended
//!    is then on disk, or in a log after a start block.
//! 3. *Finish*, by the worker that completed round 2: once every group
//!    below `seq_start` is durable, it syncs the data files, writes the
//!    checkpoint slot (start blocks, `seq_start`, the catalog, the free
//!    list, the next page id) and syncs it. Only then may the logs reuse the
//!    blocks before their start blocks.
//!
//! A checkpoint that does not finish (a crash) changes nothing: recovery
//! uses the previous slot, whose log blocks were not reused.

use super::format::Checkpoint;
use super::Padded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Where a checkpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// None runs.
    Idle,
    /// Workers record their log start blocks.
    Round1,
    /// Workers write their dirty pages.
    Round2,
    /// One worker waits for the log, then writes the slot.
    Finishing,
}

/// State of the running checkpoint, shared by the workers.
struct Control {
    phase: Phase,
    /// Increases with every round, so that a worker knows whether it did
    /// its part of the current one.
    round: u64,
    acks: usize,
    seq_start: u64,
}

/// The checkpoints of a store.
pub struct CheckpointControl {
    control: Mutex<Control>,
    /// Per worker: its log's start block recorded in round 1.
    starts: Box<[Padded]>,
    /// The last checkpoint written (the next one is numbered after it).
    pub last: Mutex<Checkpoint>,
    /// Where the two slots are.
    pub slots: Mutex<Option<crate::io::layout::SlotPlace>>,
    completed: AtomicU64,
    /// A page's change may be logged as a delta only if a full image of it
    /// was logged with a sequence number at least this (see `image_floor`).
    image_floor: AtomicU64,
}

impl CheckpointControl {
    /// The checkpoints of a store opened with `workers` logs whose groups
    /// are numbered from `next_seq` (after the start of the checkpoint that
    /// recovery used, so `next_seq` is the first image floor).
    pub(crate) fn new(workers: usize, next_seq: u64) -> CheckpointControl {
        CheckpointControl {
            control: Mutex::new(Control {
                phase: Phase::Idle,
                round: 0,
                acks: 0,
                seq_start: 0,
            }),
            starts: (0..workers).map(|_| Padded::default()).collect(),
            last: Mutex::new(Checkpoint::default()),
            slots: Mutex::new(None),
            completed: AtomicU64::new(0),
            image_floor: AtomicU64::new(next_seq.max(1)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The phase and round now.
    pub fn phase(&self) -> (Phase, u64) {
        let c = self.lock();
        (c.phase, c.round)
    }

    /// Starts a checkpoint unless one runs; true if this call started it.
    pub fn try_start(&self) -> bool {
        let mut c = self.lock();
        if c.phase != Phase::Idle {
            return false;
        }
        // Until round 1 fixes `seq_start`, every change logs a full image.
        self.image_floor.store(u64::MAX, Ordering::SeqCst);
        c.phase = Phase::Round1;
        c.round += 1;
        c.acks = 0;
        true
    }

    /// Worker `worker` recorded its start block (round 1). `next_seq`
    /// gives the next sequence number, read if this was the last worker.
    /// True when it was the last: round 2 begins, and every other worker
    /// must be woken to do its part (an idle one sleeps until woken).
    pub fn ack_round1(
        &self,
        worker: usize,
        start_block: u64,
        next_seq: impl FnOnce() -> u64,
    ) -> bool {
        self.starts[worker].0.store(start_block, Ordering::Release);
        let mut c = self.lock();
        debug_assert_eq!(c.phase, Phase::Round1);
        c.acks += 1;
        if c.acks == self.starts.len() {
            c.seq_start = next_seq();
            self.image_floor.store(c.seq_start, Ordering::SeqCst);
            c.phase = Phase::Round2;
            c.round += 1;
            c.acks = 0;
            return true;
        }
        false
    }

    /// Worker finished writing its pages (round 2). True when it was the
    /// last: it finishes the checkpoint.
    pub fn ack_round2(&self) -> bool {
        let mut c = self.lock();
        debug_assert_eq!(c.phase, Phase::Round2);
        c.acks += 1;
        if c.acks == self.starts.len() {
            c.phase = Phase::Finishing;
            return true;
        }
        false
    }

    /// The first sequence number the finishing checkpoint does not cover.
    pub fn seq_start(&self) -> u64 {
        self.lock().seq_start
    }

    /// The start blocks recorded in round 1.
    pub fn starts(&self) -> Vec<u64> {
        self.starts
            .iter()
            .map(|s| s.0.load(Ordering::Acquire))
            .collect()
    }

    /// The checkpoint was written (or abandoned): back to idle.
    pub fn finish(&self, written: bool) {
        let mut c = self.lock();
        c.phase = Phase::Idle;
        if written {
            self.completed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The smallest sequence number a page's last full image in the log
    /// must have for its next change to be logged as a delta.
    ///
    /// Recovery starts at the `seq_start` of the last written checkpoint
    /// and must find a full image of every page a replayed delta changes.
    /// A worker's groups logged before it acknowledges round 1 of a
    /// checkpoint number below that checkpoint's `seq_start` (it is read
    /// at the last acknowledgement), so they are not replayed from it;
    /// they read a floor at least the previous checkpoint's `seq_start`.
    /// Groups logged after the acknowledgement read `u64::MAX` (full
    /// images) until `seq_start` is known, and then `seq_start` or a later
    /// checkpoint's. The floor only grows, apart from the `u64::MAX` spans.
    pub fn image_floor(&self) -> u64 {
        self.image_floor.load(Ordering::SeqCst)
    }

    /// Checkpoints completed while the store was open.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }
}
