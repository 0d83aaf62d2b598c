//! One worker's log: an in-memory ring of 4 KiB blocks that groups are
//! appended to, written to the worker's log file with writes that are
//! durable when they complete (`RWF_DSYNC`: one request per run of blocks,
//! where a write followed by `fdatasync` took two), except through
//! io_uring, where the writes are plain and an `fdatasync` of the log file
//! follows once they all completed (an asynchronous `RWF_DSYNC` write is
//! completed by a kernel work queue, which ran 4 ms late here whenever the
//! other core was busy; io_uring runs the `fdatasync` on its own workers,
//! which share the worker's CPU). The writes go through
//! the channel the caller passes: by default a synchronous one, so the
//! worker's thread makes them itself (`LogWrites::Inline`), else the
//! worker's io_uring or libaio channel (`LogWrites::Channel`).
//!
//! # Contract
//! * Owned by one worker (inside its `WorkerBuffer`); never shared.
//! * [`LogWriter::room_for`] must say yes before a step that may append a
//!   group of that size begins: the group's sequence number is taken only
//!   when the group is appended, and every number taken is appended (the
//!   numbers stay dense, which recovery relies on).
//! * A flush seals the blocks appended since the last one (the last one
//!   possibly partial: later records start in a fresh block, so a block is
//!   written once and a torn rewrite can never hurt durable records) and
//!   writes them with `RWF_DSYNC`. Up to [`MAX_FLUSHES_IN_FLIGHT`] flushes
//!   are in flight at once; groups appended while they are wait for the
//!   next one (group commit). Flushes may complete in any order, but blocks
//!   become durable (and their groups acknowledged) only in log order: a
//!   flush counts once every flush before it completed. Each block records
//!   the durable end of the log when it was sealed (`synced_through`), so
//!   recovery tells a later flush that landed before an earlier one that a
//!   crash cut short from damage.
//! * Blocks the last completed checkpoint still needs are never
//!   overwritten: `room_for` refuses instead, and the caller waits for a
//!   checkpoint.
//! * An error of a log write or sync is final: the store fails
//!   ([`WalShared::fail`]) and this log writes nothing more.

use super::format::{
    record_header, seal_block, BlockHeader, GroupParts, BLOCK_BYTES, BLOCK_HEADER_BYTES,
    BLOCK_PAYLOAD_BYTES, RECORD_HEADER_BYTES,
};
use super::{Durability, WalShared};
use crate::io::{AlignedBuf, IoChannel, IoCompletion, IoRequest};
use std::collections::VecDeque;
use std::time::Instant;

/// Bit of a request's user_data marking a log request.
pub const LOG_TAG: u64 = 1 << 61;
/// Most blocks one write request carries.
const BLOCKS_PER_WRITE: u64 = 256;
/// Most flushes of one log in flight at once. More let a commit start its
/// flush without waiting for the one before to complete (and, through
/// io_uring, a later flush's sync make an earlier one durable when the
/// earlier one's sync is slow); each flush pads its last block, so every
/// one costs at least a block of log. 4 against 2: `bench commit`'s open
/// loop p99 1.4–5.1 ms against 2.8–6.9 ms, in alternating runs.
pub const MAX_FLUSHES_IN_FLIGHT: usize = 4;
/// The bits of a log request's user_data that number its flush.
const FLUSH_NUMBER_MASK: u64 = (1 << 32) - 1;

/// Bit of a log request's user_data marking an `fdatasync` of the log
/// file (its low 32 bits number it among the log's syncs).
const LOG_SYNC_BIT: u64 = 1 << 32;

/// One flush in flight: its writes cover the blocks below `upto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Flight {
    upto: u64,
    /// Writes not yet completed.
    writes_left: u32,
    /// Its writes are plain ones: an `fdatasync` of the log file issued
    /// after they all completed makes them durable.
    sync_after_writes: bool,
    /// Syncs issued before its writes all completed (one issued later,
    /// numbered above this, covers them).
    writes_done_after: u64,
    /// Its writes completed and no sync was issued since: the next
    /// `maybe_flush` issues one (the channel had no room).
    sync_pending: bool,
    /// Durable once its writes completed (a data-sync write, or a covering
    /// sync completed).
    synced: bool,
    /// When its writes were handed to the channel.
    started: Instant,
    /// Made by the worker's own thread (a synchronous channel).
    inline: bool,
}

/// The shortest of the last [`FLUSH_WINDOW`] flush times, in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowMin {
    /// The shortest of the last complete window (None before one).
    pub us: Option<f64>,
    pub(crate) window_min_us: f64,
    pub(crate) window_count: u32,
}

/// Flushes per [`WindowMin`] window.
pub const FLUSH_WINDOW: u32 = 16;

impl WindowMin {
    pub(crate) fn record(&mut self, us: f64) {
        self.window_min_us = if self.window_count == 0 {
            us
        } else {
            self.window_min_us.min(us)
        };
        self.window_count += 1;
        if self.window_count == FLUSH_WINDOW {
            self.us = Some(self.window_min_us);
            self.window_count = 0;
        }
    }
}

/// How long this log's flushes take, per way of writing them: from a
/// flush's writes being handed to the channel to the flush's completion
/// being handled. `LogWrites::Auto` compares the two by their shortest
/// recent times, which a busy or noisy device leaves short as long as
/// some flushes are quick, and which a kernel that completes every
/// channel write late shows at once.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlushLatency {
    /// Flushes made by the worker's thread.
    pub inline: WindowMin,
    /// Flushes through the worker's asynchronous channel.
    pub channel: WindowMin,
    /// When the last flush through the channel completed.
    pub channel_last: Option<Instant>,
}

impl FlushLatency {
    fn record(&mut self, inline: bool, us: f64, now: Instant) {
        if inline {
            self.inline.record(us);
        } else {
            self.channel_last = Some(now);
            self.channel.record(us);
        }
    }
}

/// Counters of one log.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogStats {
    /// Groups appended.
    pub groups: u64,
    /// Bytes of records appended.
    pub record_bytes: u64,
    /// Of those, the payload bytes of page images (full or fresh): what
    /// repairs a torn page, logged at a page's first change after a
    /// checkpoint and for the halves of a split.
    pub image_bytes: u64,
    /// Blocks written.
    pub blocks_written: u64,
    /// Flushes completed (each makes the log durable up to its end, as a
    /// sync would).
    pub syncs: u64,
}

/// One worker's log.
pub struct LogWriter {
    worker: usize,
    /// Storage device index of the log file.
    device: usize,
    file_blocks: u64,
    epoch: u64,
    ring: AlignedBuf,
    ring_blocks: u64,
    /// Blocks below this are durable.
    durable_block: u64,
    /// Blocks below this were sealed and handed to a flush.
    sealed_to: u64,
    /// The block being appended to, and its payload bytes used.
    tail_block: u64,
    tail_used: usize,
    /// `ring_offset(tail_block)`, kept (a division per appended piece
    /// showed in profiles otherwise).
    tail_offset: usize,
    /// Groups not yet durable: (sequence number, first block after their
    /// last byte's block), in append order.
    undurable: VecDeque<(u64, u64)>,
    /// Flushes in flight, in log order; the first is number `first_flight`.
    flights: VecDeque<Flight>,
    first_flight: u64,
    /// A write failed: nothing more is written.
    failed: bool,
    /// When the oldest unflushed group was appended.
    oldest_unflushed: Option<Instant>,
    /// The number taken by `assign_seq` for the group being appended.
    assigned: Option<u64>,
    /// Syncs of the log file issued (flushes through io_uring).
    syncs_issued: u64,
    /// Counters.
    pub stats: LogStats,
    /// How long flushes take.
    pub flush_latency: FlushLatency,
}

impl LogWriter {
    /// A log writing to storage device `device` (a file of `file_blocks`
    /// blocks) in epoch `epoch`, starting at block `first_block`, with an
    /// in-memory ring of `ring_bytes`.
    pub fn new(
        worker: usize,
        device: usize,
        file_blocks: u64,
        epoch: u64,
        first_block: u64,
        ring_bytes: usize,
    ) -> LogWriter {
        let ring_blocks = (ring_bytes / BLOCK_BYTES).max(16) as u64;
        assert!(file_blocks >= 16, "a log file holds at least 16 blocks");
        LogWriter {
            worker,
            device,
            file_blocks,
            epoch,
            ring: AlignedBuf::new(ring_blocks as usize * BLOCK_BYTES),
            ring_blocks,
            durable_block: first_block,
            sealed_to: first_block,
            tail_block: first_block,
            tail_used: 0,
            tail_offset: (first_block % ring_blocks) as usize * BLOCK_BYTES,
            undurable: VecDeque::new(),
            flights: VecDeque::new(),
            first_flight: 0,
            failed: false,
            oldest_unflushed: None,
            assigned: None,
            syncs_issued: 0,
            stats: LogStats::default(),
            flush_latency: FlushLatency::default(),
        }
    }

    /// The largest group (record bytes) that can ever be appended.
    pub fn max_record_bytes(&self) -> usize {
        let blocks = self.ring_blocks.min(self.file_blocks) / 2;
        (blocks as usize - 2) * BLOCK_PAYLOAD_BYTES
    }

    /// The block the next group starts in or after (recovery of a
    /// checkpoint taken now starts here, once [`LogWriter::seal_tail`] ran).
    pub fn next_block(&self) -> u64 {
        if self.tail_used == 0 {
            self.tail_block
        } else {
            self.tail_block + 1
        }
    }

    /// Ends the partial tail block: the next group starts in a new block.
    pub fn seal_tail(&mut self) {
        if self.tail_used > 0 {
            self.end_tail_block();
        }
    }

    /// Records the tail block's used bytes in its header (sealed with the
    /// checksum at flush) and moves to the next block.
    fn end_tail_block(&mut self) {
        let at = self.ring_offset(self.tail_block);
        self.ring[at + 32..at + 34].copy_from_slice(&(self.tail_used as u16).to_le_bytes());
        self.tail_block += 1;
        self.tail_used = 0;
        self.tail_offset = self.ring_offset(self.tail_block);
    }

    /// True when a group of `record_bytes` can be appended now without
    /// overwriting blocks still needed (in memory or in the file).
    pub fn room_for(&self, record_bytes: usize, reclaim_floor: u64) -> bool {
        let end = self.tail_block
            + (self.tail_used + record_bytes).div_ceil(BLOCK_PAYLOAD_BYTES) as u64
            + 1;
        end - self.durable_block <= self.ring_blocks
            && end - reclaim_floor.min(self.durable_block) <= self.file_blocks
    }

    /// Blocks of the file in use since `reclaim_floor`.
    pub fn blocks_in_use(&self, reclaim_floor: u64) -> u64 {
        self.next_block() - reclaim_floor.min(self.next_block())
    }

    /// The file's size in blocks.
    pub fn file_blocks(&self) -> u64 {
        self.file_blocks
    }

    /// True when groups are waiting to become durable.
    pub fn has_undurable(&self) -> bool {
        !self.undurable.is_empty()
    }

    /// Syncs of the log file issued so far (flushes through io_uring).
    pub fn syncs_issued(&self) -> u64 {
        self.syncs_issued
    }

    /// True when nothing is appended that is not durable and no flush runs.
    pub fn is_quiet(&self) -> bool {
        self.undurable.is_empty() && (self.flights.is_empty() || self.failed)
    }

    /// Takes the sequence number of the group the caller appends next
    /// with [`LogWriter::append`] (before anything else is appended: the
    /// caller stamps its pages' LSNs in between).
    pub fn assign_seq(&mut self, wal: &WalShared) -> u64 {
        debug_assert!(
            self.assigned.is_none(),
            "two numbers assigned for one group"
        );
        let seq = wal.assign_seq(self.worker, self.has_undurable());
        self.assigned = Some(seq);
        seq
    }

    /// Appends the group `parts`, whose `seq` came from
    /// [`LogWriter::assign_seq`]. The caller checked [`LogWriter::room_for`].
    pub fn append(&mut self, parts: &GroupParts<'_>) {
        let assigned = self.assigned.take();
        assert_eq!(
            assigned,
            Some(parts.seq),
            "a group appended without its number"
        );
        // The record is built in place in the ring: its header (the body's
        // length is known before the body is encoded), then the body
        // straight from the page images. No checksum of its own: the CRC
        // of every block it spans covers it (see FORMAT.md, "Records").
        let body_bytes = parts.body_bytes();
        self.append_bytes(&record_header(body_bytes));
        let body_at = self.tail_position();
        parts.encode_body(|piece| self.append_bytes(piece));
        debug_assert_eq!(self.bytes_since(body_at), body_bytes);
        self.finish_group(parts.seq, RECORD_HEADER_BYTES + body_bytes);
        self.stats.image_bytes += parts.image_bytes() as u64;
    }

    /// Where the next appended byte goes: (block, payload offset).
    fn tail_position(&self) -> (u64, usize) {
        (self.tail_block, self.tail_used)
    }

    /// Payload bytes appended since `from` (a [`LogWriter::tail_position`]).
    fn bytes_since(&self, (block, used): (u64, usize)) -> usize {
        (self.tail_block - block) as usize * BLOCK_PAYLOAD_BYTES + self.tail_used - used
    }

    /// Calls `f` on the ring's payload bytes `from.. from + bytes` (appended
    /// already), one contiguous piece per block.
    #[cfg(test)]
    fn for_each_segment(&self, from: (u64, usize), bytes: usize, mut f: impl FnMut(&[u8])) {
        let (mut block, mut used) = from;
        let mut left = bytes;
        while left > 0 {
            let n = (BLOCK_PAYLOAD_BYTES - used).min(left);
            let at = self.ring_offset(block) + BLOCK_HEADER_BYTES + used;
            f(&self.ring[at..at + n]);
            left -= n;
            block += 1;
            used = 0;
        }
    }

    fn finish_group(&mut self, seq: u64, bytes: usize) {
        let last_block = if self.tail_used == 0 {
            self.tail_block - 1
        } else {
            self.tail_block
        };
        debug_assert!(self.undurable.back().is_none_or(|&(s, _)| s < seq));
        self.undurable.push_back((seq, last_block + 1));
        self.oldest_unflushed.get_or_insert_with(Instant::now);
        self.stats.groups += 1;
        self.stats.record_bytes += bytes as u64;
    }

    #[inline(always)]
    fn append_bytes(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.tail_offset, self.ring_offset(self.tail_block));
        let at = self.tail_offset + BLOCK_HEADER_BYTES + self.tail_used;
        if self.tail_used + bytes.len() < BLOCK_PAYLOAD_BYTES {
            // The common case: the piece fits the tail block with room to
            // spare (inlined, so a small piece of known length is a move).
            debug_assert!(self.tail_block - self.durable_block < self.ring_blocks);
            self.ring[at..at + bytes.len()].copy_from_slice(bytes);
            self.tail_used += bytes.len();
        } else {
            self.append_bytes_across(bytes);
        }
    }

    /// [`LogWriter::append_bytes`] of a piece that fills the tail block.
    #[inline(never)]
    fn append_bytes_across(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            debug_assert!(self.tail_block - self.durable_block < self.ring_blocks);
            let room = BLOCK_PAYLOAD_BYTES - self.tail_used;
            let n = room.min(bytes.len());
            let at = self.tail_offset + BLOCK_HEADER_BYTES;
            self.ring[at + self.tail_used..at + self.tail_used + n].copy_from_slice(&bytes[..n]);
            self.tail_used += n;
            bytes = &bytes[n..];
            if self.tail_used == BLOCK_PAYLOAD_BYTES {
                self.end_tail_block();
            }
        }
    }

    fn ring_offset(&self, block: u64) -> usize {
        (block % self.ring_blocks) as usize * BLOCK_BYTES
    }

    /// Starts a flush if fewer than [`MAX_FLUSHES_IN_FLIGHT`] run and the
    /// policy (or `force`) asks for one.
    pub fn maybe_flush(&mut self, channel: &mut IoChannel, wal: &WalShared, force: bool) {
        if !self.failed {
            self.issue_sync(channel, wal);
        }
        if self.failed
            || self.oldest_unflushed.is_none()
            || self.flights.len() >= MAX_FLUSHES_IN_FLIGHT
        {
            return;
        }
        let due = force
            || match wal.durability() {
                Durability::Sync => true,
                Durability::Buffered { max_delay_ms } => {
                    self.oldest_unflushed
                        .is_some_and(|t| t.elapsed().as_millis() as u64 >= u64::from(max_delay_ms))
                        || (self.tail_block - self.durable_block) * 2 >= self.ring_blocks
                }
                Durability::None => false,
            };
        if due {
            self.start_flush(channel, wal);
        }
    }

    fn start_flush(&mut self, channel: &mut IoChannel, wal: &WalShared) {
        self.seal_tail();
        let (from, upto) = (self.sealed_to, self.tail_block);
        if from == upto {
            return;
        }
        // Runs contiguous both in the ring and in the file.
        let mut runs = Vec::new();
        let mut block = from;
        while block < upto {
            let ring_left = self.ring_blocks - block % self.ring_blocks;
            let file_left = self.file_blocks - block % self.file_blocks;
            let n = (upto - block)
                .min(ring_left)
                .min(file_left)
                .min(BLOCKS_PER_WRITE);
            runs.push((block, n));
            block += n;
        }
        if channel.free() < runs.len() {
            return; // next loop
        }
        for b in from..upto {
            let header = BlockHeader {
                epoch: self.epoch,
                block_no: b,
                synced_through: self.durable_block,
                used: {
                    let at = self.ring_offset(b);
                    u16::from_le_bytes([self.ring[at + 32], self.ring[at + 33]])
                },
                worker: self.worker as u16,
            };
            let at = self.ring_offset(b);
            seal_block(&mut self.ring[at..at + BLOCK_BYTES], &header);
        }
        let number = self.first_flight + self.flights.len() as u64;
        let sync_after_writes = channel.log_writes_then_sync();
        for &(start, n) in &runs {
            let at = self.ring_offset(start);
            let offset = (start % self.file_blocks) * BLOCK_BYTES as u64;
            let write = if sync_after_writes {
                IoRequest::write_file
            } else {
                IoRequest::write_file_dsync
            };
            let req = write(
                self.device,
                offset,
                self.ring[at..].as_ptr(),
                (n as usize * BLOCK_BYTES) as u32,
                LOG_TAG | (number & FLUSH_NUMBER_MASK),
            );
            // SAFETY: the ring blocks below `upto` are not touched again
            // until their flush completes (appends go to later blocks, and
            // the ring never wraps onto undurable blocks: `room_for`).
            if let Err(e) = unsafe { channel.push(req) } {
                wal.fail(format!("log write refused: {e}"));
                self.failed = true;
                return;
            }
        }
        self.stats.blocks_written += upto - from;
        self.sealed_to = upto;
        self.oldest_unflushed = None;
        self.flights.push_back(Flight {
            upto,
            writes_left: runs.len() as u32,
            sync_after_writes,
            writes_done_after: 0,
            sync_pending: false,
            synced: !sync_after_writes,
            started: Instant::now(),
            inline: channel.backend_kind() == crate::io::BackendKind::Sync,
        });
    }

    /// Issues one `fdatasync` of the log file for the flights whose writes
    /// completed since the last one was issued, if any; with no room in the
    /// channel, the next `maybe_flush` tries again.
    fn issue_sync(&mut self, channel: &mut IoChannel, wal: &WalShared) {
        if !self.flights.iter().any(|f| f.sync_pending) || channel.free() == 0 {
            return;
        }
        let number = self.syncs_issued + 1;
        let req = IoRequest::sync(
            self.device,
            false,
            LOG_TAG | LOG_SYNC_BIT | (number & FLUSH_NUMBER_MASK),
        );
        // SAFETY: a sync request has no buffer.
        match unsafe { channel.push(req) } {
            Ok(()) => {
                self.syncs_issued = number;
                for flight in self.flights.iter_mut() {
                    flight.sync_pending = false;
                }
            }
            Err(e) => {
                wal.fail(format!("log sync refused: {e}"));
                self.failed = true;
            }
        }
    }

    /// Handles the completion of one of this log's requests. Returns true
    /// when groups became durable.
    pub fn complete(&mut self, c: IoCompletion, wal: &WalShared, channel: &mut IoChannel) -> bool {
        debug_assert!(c.user_data & LOG_TAG != 0);
        if let Err(e) = c.result {
            wal.fail(format!("log {} failed: {e}", self.worker));
            self.failed = true;
            return false;
        }
        let now = Instant::now();
        if c.user_data & LOG_SYNC_BIT != 0 {
            // A sync: durable are the flights whose writes all completed
            // before it was issued (numbers wrap at the mask).
            let behind = self
                .syncs_issued
                .wrapping_sub(c.user_data & FLUSH_NUMBER_MASK)
                & FLUSH_NUMBER_MASK;
            let number = self.syncs_issued - behind;
            for flight in self.flights.iter_mut() {
                if !flight.synced && flight.writes_left == 0 && flight.writes_done_after < number {
                    flight.synced = true;
                    let us = now.duration_since(flight.started).as_secs_f64() * 1e6;
                    self.flush_latency.record(flight.inline, us, now);
                }
            }
        } else {
            // A write of the flight it names (numbers wrap at the mask).
            let index = (c.user_data & FLUSH_NUMBER_MASK).wrapping_sub(self.first_flight)
                & FLUSH_NUMBER_MASK;
            let Some(flight) = self.flights.get_mut(index as usize) else {
                debug_assert!(false, "completion of an unknown log flush {index}");
                return false;
            };
            debug_assert!(flight.writes_left > 0);
            flight.writes_left -= 1;
            if flight.writes_left == 0 {
                if flight.sync_after_writes {
                    // Now the sync that makes them durable.
                    flight.writes_done_after = self.syncs_issued;
                    flight.sync_pending = true;
                    self.issue_sync(channel, wal);
                } else {
                    let us = now.duration_since(flight.started).as_secs_f64() * 1e6;
                    self.flush_latency.record(flight.inline, us, now);
                }
            }
        }
        let mut durable = false;
        while self
            .flights
            .front()
            .is_some_and(|f| f.writes_left == 0 && f.synced)
        {
            let flight = self.flights.pop_front().expect("checked");
            self.first_flight += 1;
            self.stats.syncs += 1;
            self.durable_block = flight.upto;
            durable = true;
        }
        if !durable {
            return false;
        }
        while self
            .undurable
            .front()
            .is_some_and(|&(_, end)| end <= self.durable_block)
        {
            self.undurable.pop_front();
        }
        wal.set_low(
            self.worker,
            self.undurable.front().map_or(u64::MAX, |&(seq, _)| seq),
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{BackendKind, IoConfig, Storage, StorageConfig};
    use std::sync::Arc;

    /// Appends one empty group and starts a flush for it.
    fn commit_one(log: &mut LogWriter, channel: &mut IoChannel, wal: &WalShared) {
        let seq = log.assign_seq(wal);
        log.append(&GroupParts {
            seq,
            catalog: None,
            freed: &[],
            allocated: &[],
            pages: &[],
        });
        log.maybe_flush(channel, wal, false);
    }

    #[test]
    fn records_built_in_the_ring_are_the_encoded_records() {
        use crate::wal::format::{PageChange, PageRuns};
        let wal = WalShared::new(Durability::Sync, 1, 1);
        let mut log = LogWriter::new(0, 0, 64, 1, 0, 64 * BLOCK_BYTES);
        let mut expected = Vec::new();
        let mut page = Box::new([0u8; crate::io::PAGE_SIZE]);
        for i in 0..40usize {
            let before = page.clone();
            for (k, b) in page
                .iter_mut()
                .enumerate()
                .skip(i * 97 % 4000)
                .step_by(i % 7 + 1)
                .take(i * 13 % 300 + 1)
            {
                *b = (k + i) as u8;
            }
            let runs = PageRuns::plan((i % 3 != 0).then_some(&*before), &page);
            let mut pages = vec![(7u64, runs.change(&page))];
            if i % 5 == 0 {
                pages.push((8, PageChange::Full(&before)));
            }
            let seq = log.assign_seq(&wal);
            let name = "t".repeat(i);
            let parts = GroupParts {
                seq,
                catalog: (i % 4 == 1).then_some((9, name.as_str())),
                freed: &[3, 4][..i % 3],
                allocated: &[],
                pages: &pages,
            };
            parts.encode_into(&mut expected);
            log.append(&parts);
            // Pad the tail now and then, so that record headers fall on
            // every position relative to block ends.
            if i % 6 == 5 {
                log.append_bytes(&vec![0; i * 31 % 100]);
                expected.extend_from_slice(&vec![0; i * 31 % 100]);
            }
        }
        assert!(log.tail_block > 4, "records span blocks");
        let mut stream = Vec::new();
        log.for_each_segment((0, 0), expected.len(), |s| stream.extend_from_slice(s));
        assert!(stream == expected, "the ring holds the encoded records");
        assert_eq!(
            log.stats.record_bytes as usize,
            expected.len()
                - (0..40)
                    .filter(|i| i % 6 == 5)
                    .map(|i| i * 31 % 100)
                    .sum::<usize>()
        );
    }

    #[test]
    fn flushes_completing_out_of_order_count_only_in_log_order() {
        let (_dir, mut log, mut channel, wal) = test_log(BackendKind::Sync, 8);
        for _ in 0..MAX_FLUSHES_IN_FLIGHT + 1 {
            commit_one(&mut log, &mut channel, &wal);
        }
        // The last group waits: the flushes in flight are at the limit.
        assert_eq!(log.flights.len(), MAX_FLUSHES_IN_FLIGHT);
        let mut done = Vec::new();
        while done.len() < MAX_FLUSHES_IN_FLIGHT {
            channel.wait(1, &mut done).unwrap();
        }
        // The later flushes complete first: nothing is durable yet.
        let first = done.remove(0);
        for later in done.into_iter().rev() {
            assert!(!log.complete(later, &wal, &mut channel));
        }
        assert_eq!(log.durable_block, 0);
        assert_eq!(wal.durable_below(), 1, "no group acknowledged");
        // Then the first: every flush's groups are durable at once.
        assert!(log.complete(first, &wal, &mut channel));
        assert_eq!(log.durable_block, MAX_FLUSHES_IN_FLIGHT as u64);
        assert_eq!(log.stats.syncs, MAX_FLUSHES_IN_FLIGHT as u64);
        assert_eq!(wal.durable_below(), MAX_FLUSHES_IN_FLIGHT as u64 + 1);
        // The waiting group goes out now, as the next flush.
        log.maybe_flush(&mut channel, &wal, false);
        assert_eq!(log.flights.len(), 1);
    }

    /// A log with a channel of `backend` and `depth` on a fresh file.
    fn test_log(
        backend: BackendKind,
        depth: u32,
    ) -> (tempfile::TempDir, LogWriter, IoChannel, WalShared) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StorageConfig::new([dir.path().join("data")]);
        cfg.min_capacity_bytes = 1 << 16;
        cfg.extra_files = vec![dir.path().join("log")];
        let storage = Arc::new(Storage::open(&cfg).unwrap());
        let device = storage.data_device_count();
        storage
            .preallocate_file(device, 64 * BLOCK_BYTES as u64)
            .unwrap();
        let io = IoConfig {
            backend,
            depth,
            ..IoConfig::default()
        };
        let channel = IoChannel::new(storage, &io).unwrap();
        let wal = WalShared::new(Durability::Sync, 1, 1);
        let log = LogWriter::new(0, device, 64, 1, 0, 64 * BLOCK_BYTES);
        (dir, log, channel, wal)
    }

    /// Waits for `n` completions of `channel`.
    fn completions(channel: &mut IoChannel, n: usize) -> Vec<IoCompletion> {
        channel.submit().unwrap();
        let mut done = Vec::new();
        while done.len() < n {
            channel.wait(1, &mut done).unwrap();
        }
        done
    }

    #[test]
    fn a_sync_covers_every_flush_whose_writes_completed_before_it_was_issued() {
        for later_write_first in [false, true] {
            let (_dir, mut log, mut channel, wal) = test_log(BackendKind::IoUring, 8);
            commit_one(&mut log, &mut channel, &wal);
            commit_one(&mut log, &mut channel, &wal);
            assert_eq!(log.flights.len(), 2);
            let mut writes = completions(&mut channel, 2);
            writes.sort_by_key(|c| c.user_data & FLUSH_NUMBER_MASK);
            if later_write_first {
                writes.reverse();
            }
            // Each write completion issues a sync: the first covers the
            // flush whose write completed first, the second both.
            for write in writes {
                assert!(!log.complete(write, &wal, &mut channel));
            }
            let mut syncs = completions(&mut channel, 2);
            syncs.sort_by_key(|c| c.user_data & FLUSH_NUMBER_MASK);
            let second = syncs.pop().unwrap();
            let first = syncs.pop().unwrap();
            if later_write_first {
                // The first sync covers only the later flush: nothing is
                // durable before the earlier one is.
                assert!(!log.complete(first, &wal, &mut channel));
                assert_eq!(wal.durable_below(), 1);
                assert!(log.complete(second, &wal, &mut channel));
            } else {
                // The second sync, completing first, covers both.
                assert!(log.complete(second, &wal, &mut channel));
                assert_eq!(log.durable_block, 2);
                assert!(
                    !log.complete(first, &wal, &mut channel),
                    "nothing left to cover"
                );
            }
            assert_eq!(log.durable_block, 2);
            assert_eq!(wal.durable_below(), 3, "both groups acknowledged");
            assert!(log.flights.is_empty());
        }
    }

    #[test]
    fn through_io_uring_a_flush_is_durable_only_after_its_sync() {
        let (_dir, mut log, mut channel, wal) = test_log(BackendKind::IoUring, 8);
        let device = log.device;
        commit_one(&mut log, &mut channel, &wal);
        channel.submit().unwrap();
        assert!(log.flights[0].sync_after_writes);
        // The write completes: not durable yet; the sync goes out.
        let mut done = Vec::new();
        channel.wait(1, &mut done).unwrap();
        let write = done.pop().unwrap();
        assert_eq!(
            write.user_data & LOG_SYNC_BIT,
            0,
            "the write completes first"
        );
        assert!(!log.complete(write, &wal, &mut channel));
        assert_eq!(log.durable_block, 0);
        assert_eq!(
            wal.durable_below(),
            1,
            "no group acknowledged before the sync"
        );
        assert_eq!(channel.in_flight(), 1, "the sync was issued");
        channel.submit().unwrap();
        channel.wait(1, &mut done).unwrap();
        let sync = done.pop().unwrap();
        assert_ne!(sync.user_data & LOG_SYNC_BIT, 0);
        assert!(log.complete(sync, &wal, &mut channel));
        assert_eq!(log.durable_block, 1);
        assert_eq!(wal.durable_below(), 2, "the group is acknowledged");
        assert!(
            log.flush_latency.channel.us.is_none(),
            "one flush: no window yet"
        );
        // A sync that finds the channel full waits for the next maybe_flush.
        let mut small = IoChannel::new(
            channel.storage().clone(),
            &IoConfig {
                backend: BackendKind::IoUring,
                depth: 1,
                ..IoConfig::default()
            },
        )
        .unwrap();
        commit_one(&mut log, &mut small, &wal);
        small.submit().unwrap();
        small.wait(1, &mut done).unwrap();
        let write = done.pop().unwrap();
        // Hold the one slot with another request, as a page read would.
        let mut buf = crate::io::AlignedBuf::new(BLOCK_BYTES);
        // SAFETY: `buf` outlives the request, which is waited for below.
        unsafe {
            small
                .push(IoRequest::read_file(
                    device,
                    0,
                    buf.as_mut_ptr(),
                    BLOCK_BYTES as u32,
                    7,
                ))
                .unwrap()
        };
        assert!(!log.complete(write, &wal, &mut small));
        assert!(log.flights[0].sync_pending, "no room: the sync waits");
        small.submit().unwrap();
        small.wait(1, &mut done).unwrap();
        assert_eq!(done.pop().unwrap().user_data, 7);
        log.maybe_flush(&mut small, &wal, false);
        assert!(!log.flights[0].sync_pending);
        small.submit().unwrap();
        small.wait(1, &mut done).unwrap();
        assert!(log.complete(done.pop().unwrap(), &wal, &mut small));
        assert_eq!(wal.durable_below(), 3);
    }
}
