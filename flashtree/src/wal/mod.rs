//! The write-ahead log: one log per worker, groups of page images with a
//! store-wide dense sequence number, group commit, and the durable
//! frontier that commits and page write-backs wait for.
//!
//! # Contract
//! * A *group* is the unit of atomicity: the after-images of every page one
//!   step changed (a batch of puts and deletes, or one structure change: a
//!   split, a merge, a new tree), the pages it freed and a catalog entry.
//!   It is appended to the log of the worker that ran the step, while the
//!   step still holds the exclusive latches of all its pages, with the next
//!   value of the store's sequence counter ([`WalShared::assign_seq`]).
//!   So two groups that change one page are numbered in the order of the
//!   changes, and a group never sees a page half-way through another.
//! * Each worker writes its own log (`writer.rs`) through its own I/O
//!   channel: no lock is shared on the commit path, only the sequence
//!   counter (one atomic add per group) and one word per worker that says
//!   which of its groups are not yet durable.
//! * *Durable frontier*: every group with a sequence number below
//!   [`WalShared::durable_below`] is durable in its log. A `Sync` commit
//!   returns once its group is below the frontier; a dirty page is written
//!   back only when its LSN (the number of the last group that changed it)
//!   is below it (the write-ahead rule).
//! * Recovery (`recovery.rs`) replays the groups of every log from the last
//!   checkpoint in sequence order, up to the first number that is missing
//!   (a group that never became durable): the recovered state is the state
//!   after a prefix of the groups, and every acknowledged group is in it.
//! * A failed log write or sync is never retried: the store enters the
//!   failed state ([`WalShared::fail`]); every pending and later commit
//!   returns [`Error::Failed`], and reopening recovers from the disk.

pub mod checkpoint;
pub mod format;
pub mod recovery;
pub mod writer;

use crate::buffer::PageId;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// When a commit is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// A call returns only when its changes would survive a power cut
    /// (the log is written with `RWF_DSYNC`). The default, as in LMDB,
    /// redb and SQLite.
    Sync,
    /// A call returns when its changes are in the worker's log buffer; the
    /// log is written and synced at most `max_delay_ms` later. A crash loses
    /// at most the commits of that window, and never part of one.
    Buffered {
        /// Longest a change waits in memory before its log flush starts.
        max_delay_ms: u32,
    },
    /// No log (benchmarks): changes reach the disk at eviction and at
    /// `close`. A crash leaves the store unopenable
    /// ([`Error::NotClosedCleanly`]).
    None,
}

/// How a worker writes its log to disk. Every way writes the same blocks
/// and acknowledges a commit only when they are durable; they differ in
/// latency and in what the worker does meanwhile.
///
/// Through io_uring the log's writes are plain ones followed by an
/// `fdatasync` (an asynchronous `RWF_DSYNC` write, through io_uring or
/// libaio, took about 4 ms here whenever the core taking the disk's
/// interrupts was busy, against 0.1 ms from the thread itself); see
/// `docs/ARCHITECTURE.md`, "The life of a commit".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogWrites {
    /// Through the channel when the worker has something to overlap the
    /// flush with: page reads in flight, tasks ready, or tasks sleeping
    /// until less than 1 ms ahead (an open loop). On the worker's thread
    /// when it would only wait for the flush (every task waits for the
    /// commit): the shortest commit latency. Each log measures its
    /// flushes both ways; where none of the channel's last 16 took less
    /// than 1 ms, nor less than 4 times the thread's shortest, only page
    /// reads send a flush to the channel (and one goes there every 100 ms
    /// to measure it again).
    /// The default.
    #[default]
    Auto,
    /// Always on the worker's thread: one `pwritev2` per run of blocks;
    /// the worker waits for each flush before it runs its tasks again.
    Inline,
    /// Always through the worker's I/O channel (io_uring, libaio): the
    /// worker runs its tasks while the write is in flight.
    Channel,
}

impl LogWrites {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LogWrites::Auto => "auto",
            LogWrites::Inline => "inline",
            LogWrites::Channel => "channel",
        }
    }
}

impl std::str::FromStr for LogWrites {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<LogWrites, String> {
        match s {
            "auto" => Ok(LogWrites::Auto),
            "inline" => Ok(LogWrites::Inline),
            "channel" => Ok(LogWrites::Channel),
            other => Err(format!(
                "log writes must be \"auto\", \"inline\" or \"channel\", got {other:?}"
            )),
        }
    }
}

impl Durability {
    /// True when changes are logged.
    pub fn is_logged(self) -> bool {
        !matches!(self, Durability::None)
    }
}

/// A word per worker on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

/// What all workers share about the log.
pub struct WalShared {
    durability: Durability,
    /// The next sequence number to assign (numbers start at 1; LSN 0 means
    /// "never changed under the log").
    next_seq: AtomicU64,
    /// Per worker: a lower bound of the sequence numbers of its groups that
    /// are not durable (u64::MAX: none).
    lows: Box<[Padded]>,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    /// Named trees (name, root page), in creation order.
    pub catalog: Mutex<Vec<(String, PageId)>>,
    /// Per worker: the first block of its log that the last completed
    /// checkpoint still needs (blocks before it may be overwritten).
    reclaim_floors: Box<[Padded]>,
    /// The checkpoint in progress and the last one written.
    pub checkpoints: checkpoint::CheckpointControl,
}

impl WalShared {
    /// State for `workers` logs; the first group gets `next_seq`.
    pub fn new(durability: Durability, workers: usize, next_seq: u64) -> WalShared {
        assert!(next_seq >= 1, "sequence numbers start at 1");
        WalShared {
            durability,
            next_seq: AtomicU64::new(next_seq),
            lows: (0..workers)
                .map(|_| Padded(AtomicU64::new(u64::MAX)))
                .collect(),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            catalog: Mutex::new(Vec::new()),
            reclaim_floors: (0..workers).map(|_| Padded::default()).collect(),
            checkpoints: checkpoint::CheckpointControl::new(workers, next_seq),
        }
    }

    /// The durability of commits.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Number of logs (workers).
    pub fn log_count(&self) -> usize {
        self.lows.len()
    }

    /// Takes the next sequence number for a group that worker `worker`
    /// appends now. `worker_has_undurable` says whether the worker already
    /// has groups that are not durable (its low word then already bounds
    /// the new number).
    pub fn assign_seq(&self, worker: usize, worker_has_undurable: bool) -> u64 {
        if !worker_has_undurable {
            // Published before the number is taken: a reader that sees the
            // counter past our number also sees this bound (SeqCst).
            self.lows[worker]
                .0
                .store(self.next_seq.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        self.next_seq.fetch_add(1, Ordering::SeqCst)
    }

    /// Worker `worker`'s groups below `low` are durable (u64::MAX: all).
    pub fn set_low(&self, worker: usize, low: u64) {
        self.lows[worker].0.store(low, Ordering::SeqCst);
    }

    /// Every group numbered below this is durable.
    pub fn durable_below(&self) -> u64 {
        let next = self.next_seq.load(Ordering::SeqCst);
        self.lows
            .iter()
            .map(|l| l.0.load(Ordering::SeqCst))
            .fold(next, u64::min)
    }

    /// The next sequence number that will be assigned.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.load(Ordering::SeqCst)
    }

    /// Enters the failed state (the first cause is kept).
    pub fn fail(&self, cause: String) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if failure.is_none() {
            eprintln!("flashtree: the store stops: {cause}");
            *failure = Some(cause);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// True once the store failed.
    #[inline]
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Ok, or the failure as an error.
    pub fn check(&self) -> Result<()> {
        if !self.has_failed() {
            return Ok(());
        }
        Err(self.failure_error())
    }

    /// The failure as an error.
    pub fn failure_error(&self) -> Error {
        let failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        Error::Failed(failure.clone().unwrap_or_default())
    }

    /// The first block of worker `worker`'s log still needed.
    pub fn reclaim_floor(&self, worker: usize) -> u64 {
        self.reclaim_floors[worker].0.load(Ordering::Acquire)
    }

    /// Sets the first block of worker `worker`'s log still needed.
    pub fn set_reclaim_floor(&self, worker: usize, block: u64) {
        self.reclaim_floors[worker]
            .0
            .store(block, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_waits_for_every_worker() {
        let wal = WalShared::new(Durability::Sync, 2, 1);
        assert_eq!(wal.durable_below(), 1);
        let a = wal.assign_seq(0, false);
        let b = wal.assign_seq(1, false);
        let c = wal.assign_seq(0, true);
        assert_eq!((a, b, c), (1, 2, 3));
        assert_eq!(wal.durable_below(), 1);
        wal.set_low(0, u64::MAX);
        assert_eq!(wal.durable_below(), 2, "worker 1's group 2 is not durable");
        wal.set_low(1, u64::MAX);
        assert_eq!(wal.durable_below(), 4);
    }
}
