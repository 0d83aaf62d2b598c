//! One worker's part in checkpoints (the protocol: `wal::checkpoint`).

use crate::buffer::WorkerBuffer;
use crate::error::Result;
use crate::wal::checkpoint::Phase;
use crate::wal::format::Checkpoint;

/// What a worker remembers between loop iterations about checkpoints.
pub(crate) struct CheckpointDriver {
    worker: usize,
    /// A checkpoint starts when this worker's log holds this many blocks
    /// since the last one.
    threshold_blocks: u64,
    /// The last round this worker did its part of.
    done_round: u64,
    /// Round 2's page pass runs.
    flushing: bool,
    /// This worker finishes the checkpoint.
    finishing: bool,
    /// The finish's data syncs are in flight.
    syncing: bool,
    /// The finish waits until the log is durable below this (set when the
    /// last page pass ended; see `Phase::Finishing` in `step`).
    finish_durable_below: u64,
}

impl CheckpointDriver {
    pub(crate) fn new(worker: usize, threshold_bytes: u64) -> CheckpointDriver {
        CheckpointDriver {
            worker,
            threshold_blocks: (threshold_bytes / 4096).max(1),
            done_round: 0,
            flushing: false,
            finishing: false,
            syncing: false,
            finish_durable_below: 0,
        }
    }

    /// No checkpoint runs (or the store has no log).
    pub(crate) fn idle(&self, wb: &WorkerBuffer) -> bool {
        wb.log().is_none() || wb.manager().wal().checkpoints.phase().0 == Phase::Idle
    }

    /// True when a checkpoint waits for this worker: it must not sleep.
    pub(crate) fn needs_me(&self, wb: &WorkerBuffer) -> bool {
        if wb.log().is_none() {
            return false;
        }
        let wal = wb.manager().wal();
        if wal.has_failed() {
            return false;
        }
        match wal.checkpoints.phase() {
            (Phase::Idle, _) => false,
            (Phase::Finishing, _) => self.finishing,
            (_, round) => self.done_round != round,
        }
    }

    /// Does whatever this worker has to do for checkpoints now; true when
    /// the others must be woken: it started one, began its round 2 (an
    /// idle worker that did its round 1 sleeps until woken: without the
    /// wake, a checkpoint that another worker's full log waits for would
    /// never finish), or finished one (tasks may wait for the log room it
    /// freed). Errors fail
    /// the store (the checkpoint is abandoned; the previous one holds).
    pub(crate) fn step(&mut self, wb: &mut WorkerBuffer, may_start: bool) -> bool {
        let bm = wb.manager_arc();
        let wal = bm.wal();
        let Some(log) = wb.log() else {
            return false;
        };
        if wal.has_failed() {
            return false;
        }
        let control = &wal.checkpoints;
        let (phase, round) = control.phase();
        match phase {
            Phase::Idle => {
                let used = log.blocks_in_use(wal.reclaim_floor(self.worker));
                if may_start && used >= self.threshold_blocks {
                    return control.try_start();
                }
            }
            Phase::Round1 if self.done_round != round => {
                let log = wb.log_mut().expect("a log");
                log.seal_tail();
                let start = log.next_block();
                self.done_round = round;
                return control.ack_round1(self.worker, start, || wal.next_seq());
            }
            Phase::Round2 if self.done_round != round => {
                if !self.flushing {
                    wb.begin_checkpoint_flush();
                    self.flushing = true;
                }
                if wb.checkpoint_flush_step() {
                    self.flushing = false;
                    self.done_round = round;
                    self.finishing = control.ack_round2();
                    if self.finishing {
                        // Every worker's page pass has ended. A pass skips a
                        // page freed before it got there, and a freed page's
                        // changes live on in the pages its freeing group
                        // changed (a merge's neighbour, a compaction's moved
                        // copy), which the pass may have found clean, or new:
                        // their group must be durable before the slot claims
                        // the changes before `seq_start` are on disk, else a
                        // crash that lost it loses them.
                        self.finish_durable_below =
                            control.seq_start().max(bm.frees_logged_below());
                    }
                }
            }
            Phase::Finishing if self.finishing => {
                if wal.durable_below() < self.finish_durable_below {
                    wb.flush_log(true);
                    return false;
                }
                // The data files' syncs go through this worker's channel,
                // so its tasks go on committing while the device flushes.
                if !self.syncing {
                    if let Err(e) = wb.begin_checkpoint_sync() {
                        self.fail(wb, e);
                        return false;
                    }
                    self.syncing = true;
                }
                let synced = match wb.checkpoint_sync_outcome() {
                    None => return false,
                    Some(outcome) => outcome,
                };
                self.syncing = false;
                self.finishing = false;
                match synced.and_then(|()| finish(wb)) {
                    Ok(()) => {
                        control.finish(true);
                        return true;
                    }
                    Err(e) => self.fail(wb, e),
                }
            }
            _ => {}
        }
        false
    }
}

impl CheckpointDriver {
    /// The checkpoint failed: the store fails (the previous one holds).
    fn fail(&mut self, wb: &WorkerBuffer, e: crate::error::Error) {
        self.syncing = false;
        self.finishing = false;
        let wal = wb.manager().wal();
        wal.fail(format!("checkpoint: {e}"));
        wal.checkpoints.finish(false);
    }
}

/// Gives the log blocks `from..to` of worker `w`'s ring (of `ring_blocks`
/// blocks) back to a block device: the checkpoint just made durable starts
/// that log at `to`, so recovery never reads them again (the ring would
/// overwrite them next anyway). A failed discard stops the rest: the
/// blocks stay as they are, which is always safe.
fn discard_log_blocks(
    bm: &crate::buffer::BufferManager,
    w: usize,
    from: u64,
    to: u64,
    ring_blocks: u64,
) {
    if ring_blocks == 0 || to <= from {
        return;
    }
    let block = crate::wal::format::BLOCK_BYTES as u64;
    let storage = bm.storage();
    let device = storage.data_device_count() + w;
    // At most one turn of the ring, split where it wraps.
    let from = from.max(to.saturating_sub(ring_blocks));
    let mut at = from;
    while at < to {
        let in_ring = at % ring_blocks;
        let n = (to - at).min(ring_blocks - in_ring);
        if storage
            .discard_log_range(device, in_ring * block, n * block)
            .is_err()
        {
            return;
        }
        at += n;
    }
}

/// Writes the checkpoint slot (the data files are synced); then the logs
/// may reuse the blocks before their start blocks, and the devices may
/// have back the pages the checkpoint lists as free.
fn finish(wb: &mut WorkerBuffer) -> Result<()> {
    let bm = wb.manager_arc();
    let wal = bm.wal();
    let control = &wal.checkpoints;
    let starts = control.starts();
    let trees = wal
        .catalog
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (mut free, next_pid) = bm.allocation_snapshot();
    // Only pages whose freeing group is durable: a later group (at or past
    // `seq_start`, which recovery replays) may yet be lost in a crash.
    bm.durably_free(&mut free, wal.durable_below());
    free.sort_unstable();
    let mut last = control.last.lock().unwrap_or_else(|e| e.into_inner());
    let last_log_blocks = last.log_blocks;
    let checkpoint = Checkpoint {
        number: last.number + 1,
        seq_start: control.seq_start(),
        next_pid,
        log_starts: starts.clone(),
        trees,
        free,
        flags: 0,
        ..last.clone()
    };
    let slots = control
        .slots
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .expect("checkpoint slots set at open");
    slots.write(
        bm.storage(),
        (checkpoint.number % 2) as usize,
        &checkpoint.encode(),
    )?;
    let free_at_checkpoint = checkpoint.free.clone();
    *last = checkpoint;
    drop(last);
    let log_blocks = last_log_blocks;
    for (w, start) in starts.into_iter().enumerate() {
        let floor = wal.reclaim_floor(w);
        wal.set_reclaim_floor(w, start);
        discard_log_blocks(&bm, w, floor, start, log_blocks);
    }
    // No recovery reads a page this checkpoint lists as free again.
    bm.discard_free_pages(&free_at_checkpoint);
    Ok(())
}
