//! Reading the logs back after a crash: which groups survive, and what they
//! say about pages, the catalog and the free list.
//!
//! # Contract
//! * [`scan_log`] reads one log from the checkpoint's start block, block by
//!   block (checksum, epoch and block number must match), and stops at the
//!   first block that does not. That block ends the log when it belongs to
//!   the unsynced tail; when a later block of the same epoch says it was
//!   written after that block was durable (its synced-through number is
//!   past it), the log is damaged where it had been durable:
//!   [`Error::Corrupt`] names the file and offset.
//! * [`replay`] takes the groups of all logs and keeps those numbered below
//!   the *cut*: the first number at or above the checkpoint's `seq_start`
//!   that no log holds (a group that never became durable). Every group a
//!   `Sync` commit acknowledged is below the cut (it was durable with every
//!   lower number). The result is the state after a prefix of the groups.
//! * Replay is idempotent: a crash during recovery recovers again from the
//!   same checkpoint and logs, and writes the same pages.

use super::format::{
    apply_delta, decode_group, open_block, Checkpoint, PageForm, BLOCK_BYTES, BLOCK_HEADER_BYTES,
    MAX_RECORD_BYTES, RECORD_HEADER_BYTES,
};
use crate::buffer::PageId;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoChannel, IoRequest, Storage, PAGE_SIZE};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Blocks read per request while scanning.
const SCAN_READ_BLOCKS: u64 = 1024;

/// Where one log lives and where its replay starts.
#[derive(Clone, Debug)]
pub struct LogFile {
    /// Storage device index of the log file.
    pub device: usize,
    /// Blocks in the file.
    pub file_blocks: u64,
    /// The block to start at.
    pub start_block: u64,
}

/// One group found in a log, with its body.
pub struct FoundGroup {
    /// Which log.
    pub log: usize,
    /// The record body (read from intact blocks, decoded once).
    pub body: Vec<u8>,
    /// Its sequence number.
    pub seq: u64,
}

/// What the scans and the replay found.
#[derive(Debug, Default)]
pub struct Replay {
    /// Groups below this number are applied.
    pub cut: u64,
    /// Groups applied.
    pub groups: u64,
    /// Groups found but not applied (at or above the cut).
    pub groups_dropped: u64,
    /// Log bytes read.
    pub log_bytes: u64,
    /// Every page the applied groups changed: its last full image and the
    /// deltas after it.
    pub images: HashMap<PageId, PageReplay>,
    /// The bodies of the applied groups.
    pub bodies: Vec<Vec<u8>>,
    /// The catalog after the applied groups.
    pub trees: Vec<(String, PageId)>,
    /// The free list after the applied groups.
    pub free: Vec<PageId>,
    /// Page ids below this are allocated.
    pub next_pid: PageId,
}

/// Where the applied groups left one page: (index in `Replay::bodies`,
/// offset) of its last full image, and (body, offset, bytes) of the delta
/// runs after it, in log order.
#[derive(Debug)]
pub struct PageReplay {
    /// The last full image (body, offset); None: a page of zeros (the
    /// last image was fresh, its runs the first delta).
    base: Option<(usize, usize)>,
    deltas: Vec<(usize, usize, usize)>,
}

impl Replay {
    /// Writes the page `pid` (one of `images`' keys) as the applied groups
    /// left it into `out`.
    pub fn image_into(&self, pid: PageId, out: &mut [u8; PAGE_SIZE]) {
        let page = &self.images[&pid];
        match page.base {
            Some((body, offset)) => {
                out.copy_from_slice(&self.bodies[body][offset..offset + PAGE_SIZE])
            }
            None => out.fill(0),
        }
        for &(body, offset, bytes) in &page.deltas {
            apply_delta(out, &self.bodies[body][offset..offset + bytes]);
        }
    }
}

/// Windows the read-ahead thread of [`scan_log`] may hold ready.
const SCAN_READ_AHEAD_WINDOWS: usize = 2;

/// Reads log `log` (of `epoch`) from its start block and returns its
/// groups in log order; `progress` gets bytes read so far. A scoped
/// thread reads the next windows while this one parses (open only; it
/// ends with the scan).
pub fn scan_log(
    storage: &Arc<Storage>,
    log_index: usize,
    log: &LogFile,
    epoch: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<(Vec<FoundGroup>, u64)> {
    let new_channel = || IoChannel::blocking(storage.clone(), 1);
    let path = storage.device_path(log.device).display().to_string();
    let mut channel = new_channel()?;
    let mut buf = AlignedBuf::new(SCAN_READ_BLOCKS as usize * BLOCK_BYTES);
    let mut stream: Vec<u8> = Vec::new();
    let mut groups = Vec::new();
    let mut block = log.start_block;
    let mut bytes_read = 0u64;
    let end_block = std::thread::scope(|scope| -> Result<u64> {
        // Windows in order from the start block: (first block, blocks, buffer).
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(u64, u64, AlignedBuf)>>(
            SCAN_READ_AHEAD_WINDOWS,
        );
        let (spare_tx, spare_rx) = std::sync::mpsc::channel::<AlignedBuf>();
        for _ in 0..SCAN_READ_AHEAD_WINDOWS + 1 {
            spare_tx
                .send(AlignedBuf::new(SCAN_READ_BLOCKS as usize * BLOCK_BYTES))
                .expect("receiver alive");
        }
        let reader = scope.spawn(move || {
            let mut channel = match new_channel() {
                Ok(c) => c,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let mut first = log.start_block;
            // The whole ring at most.
            while first - log.start_block < log.file_blocks {
                let Ok(mut window) = spare_rx.recv() else {
                    return; // the scan ended
                };
                let read = read_window(&mut channel, log, &mut window, first);
                let failed = read.is_err();
                if ready_tx.send(read.map(|n| (first, n, window))).is_err() || failed {
                    return;
                }
                first += read_window_len(log, first);
            }
        });
        let mut window: Option<(u64, u64, AlignedBuf)> = None;
        let end = loop {
            let in_window = window
                .as_ref()
                .is_some_and(|&(first, n, _)| block >= first && block < first + n);
            if !in_window {
                if let Some((_, _, old)) = window.take() {
                    let _ = spare_tx.send(old);
                }
                let next = ready_rx
                    .recv()
                    .map_err(|_| Error::Corrupt(format!("log {path}: read-ahead ended early")))??;
                debug_assert!(block >= next.0 && block < next.0 + next.1);
                bytes_read += next.1 * BLOCK_BYTES as u64;
                progress(bytes_read);
                window = Some(next);
            }
            let (first, _, buf) = window.as_ref().expect("a window");
            let at = ((block - first) as usize) * BLOCK_BYTES;
            let bytes = &buf[at..at + BLOCK_BYTES];
            match open_block(bytes) {
                Some(h) if h.epoch == epoch && h.block_no == block => {
                    stream.extend_from_slice(
                        &bytes[BLOCK_HEADER_BYTES..BLOCK_HEADER_BYTES + h.used as usize],
                    );
                    take_records(&mut stream, log_index, &mut groups, &path, block)?;
                    block += 1;
                }
                _ => break block,
            }
            if block - log.start_block >= log.file_blocks {
                break block; // read the whole ring
            }
        };
        // Stop the reader: it waits for a spare buffer or a free slot.
        drop(spare_tx);
        drop(ready_rx);
        reader.join().expect("log read-ahead thread");
        Ok(end)
    })?;
    check_tail(log, epoch, end_block, &mut channel, &mut buf, &path)?;
    Ok((groups, bytes_read))
}

/// Blocks of the read window starting at block `first` (it ends at the
/// end of the file).
fn read_window_len(log: &LogFile, first: u64) -> u64 {
    SCAN_READ_BLOCKS.min(log.file_blocks - first % log.file_blocks)
}

/// Reads the window of blocks from block `first` into `buf`; returns how
/// many blocks it holds.
fn read_window(
    channel: &mut IoChannel,
    log: &LogFile,
    buf: &mut AlignedBuf,
    first: u64,
) -> Result<u64> {
    let n = read_window_len(log, first);
    debug_assert!(buf.len() >= n as usize * BLOCK_BYTES);
    let req = IoRequest::read_file(
        log.device,
        (first % log.file_blocks) * BLOCK_BYTES as u64,
        buf.as_mut_ptr(),
        (n as usize * BLOCK_BYTES) as u32,
        0,
    );
    // SAFETY: buf is ours and outlives the request, which `run` completes.
    unsafe { channel.run(req) }?;
    Ok(n)
}

/// Moves the complete records at the front of `stream` into `groups`.
fn take_records(
    stream: &mut Vec<u8>,
    log: usize,
    groups: &mut Vec<FoundGroup>,
    path: &str,
    block: u64,
) -> Result<()> {
    let mut at = 0;
    while stream.len() - at >= RECORD_HEADER_BYTES {
        // The second word is reserved (a version-2 log kept the body's
        // CRC there; the blocks' CRCs cover every byte either way).
        let len = u32::from_le_bytes(stream[at..at + 4].try_into().expect("4")) as usize;
        if len > MAX_RECORD_BYTES {
            return Err(Error::Corrupt(format!(
                "log {path}: a record of {len} bytes in block {block}"
            )));
        }
        if stream.len() - at - RECORD_HEADER_BYTES < len {
            break;
        }
        let body = &stream[at + RECORD_HEADER_BYTES..at + RECORD_HEADER_BYTES + len];
        let group = decode_group(body).map_err(|e| {
            Error::Corrupt(format!("log {path}, record ending in block {block}: {e}"))
        })?;
        groups.push(FoundGroup {
            log,
            seq: group.seq,
            body: body.to_vec(),
        });
        at += RECORD_HEADER_BYTES + len;
    }
    stream.drain(..at);
    Ok(())
}

/// The log ended at `end_block`: make sure that block was not durable,
/// i.e. no block of the epoch numbered after it says it was written after
/// it was durable. Blocks are looked for at every position from
/// `end_block`'s own on (a later lap of the ring may have overwritten it:
/// the checkpoint is older than the log, e.g. because the newer slot is
/// damaged) and wherever they lie (an authentic block proves it even when
/// damage copied it elsewhere).
fn check_tail(
    log: &LogFile,
    epoch: u64,
    end_block: u64,
    channel: &mut IoChannel,
    buf: &mut AlignedBuf,
    path: &str,
) -> Result<()> {
    let limit = log.file_blocks.min(4096);
    let mut block = end_block;
    while block < end_block + limit {
        let n = read_window(channel, log, buf, block)?;
        for i in 0..n {
            let at = i as usize * BLOCK_BYTES;
            let Some(h) = open_block(&buf[at..at + BLOCK_BYTES]) else {
                continue;
            };
            if h.epoch == epoch && h.block_no > end_block && h.synced_through > end_block {
                return Err(Error::Corrupt(format!(
                    "log {path} is damaged at offset {} (block {end_block}), which had been durable: block {} was written after it",
                    (end_block % log.file_blocks) * BLOCK_BYTES as u64,
                    h.block_no
                )));
            }
        }
        block += n;
    }
    Ok(())
}

/// Applies the groups found in all logs on top of `checkpoint`: the cut,
/// the newest page images below it, the catalog and the free list.
pub fn replay(checkpoint: &Checkpoint, found: Vec<FoundGroup>, log_bytes: u64) -> Result<Replay> {
    let seqs: HashSet<u64> = found.iter().map(|g| g.seq).collect();
    if seqs.len() != found.len() {
        return Err(Error::Corrupt(
            "two log groups have the same sequence number".into(),
        ));
    }
    let mut cut = checkpoint.seq_start.max(1);
    while seqs.contains(&cut) {
        cut += 1;
    }
    let mut ordered: BTreeMap<u64, FoundGroup> = BTreeMap::new();
    for g in found {
        ordered.insert(g.seq, g);
    }
    let mut replay = Replay {
        cut,
        log_bytes,
        trees: checkpoint.trees.clone(),
        next_pid: checkpoint.next_pid,
        ..Replay::default()
    };
    let mut free: HashSet<PageId> = checkpoint.free.iter().copied().collect();
    // Page ids at or above the checkpoint's next page id that an applied
    // group names (each is taken into use with its image, freed, or in a
    // taken range): the others were allocated after the checkpoint by a
    // step whose group was lost, or reserved by a bulk load that never
    // committed, and are free.
    let mut named: HashSet<PageId> = HashSet::new();
    let mut taken: Vec<(PageId, u64)> = Vec::new();
    let mut note_named = |pid: PageId| {
        if pid >= checkpoint.next_pid {
            named.insert(pid);
        }
    };
    for (seq, found) in ordered {
        if seq >= cut {
            replay.groups_dropped += 1;
            continue;
        }
        replay.groups += 1;
        // Decoded once already, when the log was scanned.
        let group = decode_group(&found.body)?;
        if let Some((root, name)) = group.catalog.clone() {
            if !replay.trees.iter().any(|(n, _)| *n == name) {
                replay.trees.push((name, root));
            }
            replay.next_pid = replay.next_pid.max(root + 1);
            note_named(root);
        }
        for &pid in &group.freed {
            free.insert(pid);
            replay.next_pid = replay.next_pid.max(pid + 1);
            note_named(pid);
        }
        for &(first, count) in &group.allocated {
            for pid in first..first + count {
                free.remove(&pid);
            }
            replay.next_pid = replay.next_pid.max(first + count);
            taken.push((first, count));
        }
        let body_index = replay.bodies.len();
        for &(pid, form) in &group.pages {
            free.remove(&pid);
            replay.next_pid = replay.next_pid.max(pid + 1);
            note_named(pid);
            match form {
                PageForm::Full(offset) => {
                    let page = replay.images.entry(pid).or_insert(PageReplay {
                        base: None,
                        deltas: Vec::new(),
                    });
                    page.base = Some((body_index, offset));
                    page.deltas.clear();
                }
                PageForm::Fresh(offset, bytes) => {
                    let page = replay.images.entry(pid).or_insert(PageReplay {
                        base: None,
                        deltas: Vec::new(),
                    });
                    page.base = None;
                    page.deltas.clear();
                    page.deltas.push((body_index, offset, bytes));
                }
                PageForm::Delta(offset, bytes) => match replay.images.get_mut(&pid) {
                    Some(page) => page.deltas.push((body_index, offset, bytes)),
                    None => {
                        return Err(Error::Corrupt(format!(
                            "log group {seq} changes page {pid} by a delta, but no full image of the page precedes it since the checkpoint"
                        )))
                    }
                },
            }
        }
        drop(group);
        replay.bodies.push(found.body);
    }
    taken.sort_unstable();
    for pid in checkpoint.next_pid..replay.next_pid {
        let in_taken = match taken.partition_point(|&(first, _)| first <= pid) {
            0 => false,
            i => pid < taken[i - 1].0 + taken[i - 1].1,
        };
        if !in_taken && !named.contains(&pid) {
            free.insert(pid);
        }
    }
    let mut free: Vec<PageId> = free.into_iter().collect();
    free.sort_unstable();
    replay.free = free;
    Ok(replay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::{GroupParts, PageChange};

    fn found(seq: u64, parts: &GroupParts<'_>) -> FoundGroup {
        let mut bytes = Vec::new();
        parts.encode_into(&mut bytes);
        FoundGroup {
            log: 0,
            body: bytes[RECORD_HEADER_BYTES..].to_vec(),
            seq,
        }
    }

    fn checkpoint(next_pid: PageId, free: Vec<PageId>) -> Checkpoint {
        Checkpoint {
            number: 1,
            store_id: 1,
            log_epoch: 1,
            seq_start: 1,
            next_pid,
            log_starts: vec![0],
            log_blocks: 16,
            trees: Vec::new(),
            free,
            flags: 0,
        }
    }

    #[test]
    fn ids_past_the_checkpoint_that_no_group_names_are_free() {
        // Pages 10..20 were reserved (a bulk load that never committed) or
        // allocated by a lost step; a later group allocated page 20.
        let image = Box::new([1u8; PAGE_SIZE]);
        let pages = [(20u64, PageChange::Full(&image))];
        let parts = GroupParts {
            seq: 1,
            catalog: None,
            freed: &[12],
            allocated: &[],
            pages: &pages,
        };
        let replay = replay(&checkpoint(10, vec![3]), vec![found(1, &parts)], 0).unwrap();
        assert_eq!(replay.next_pid, 21);
        let mut want: Vec<PageId> = vec![3];
        want.extend(10..20);
        assert_eq!(replay.free, want);
    }

    #[test]
    fn an_allocating_group_takes_its_range_off_the_free_list() {
        // A checkpoint taken during a bulk load lists its reserved pages
        // 10..30 as free; the load's commit used 10..25.
        let image = Box::new([1u8; PAGE_SIZE]);
        let pages = [(2u64, PageChange::Full(&image))];
        let parts = GroupParts {
            seq: 1,
            catalog: None,
            freed: &[],
            allocated: &[(10, 15)],
            pages: &pages,
        };
        let free: Vec<PageId> = (10..30).collect();
        let replay = replay(&checkpoint(30, free), vec![found(1, &parts)], 0).unwrap();
        assert_eq!(replay.free, (25..30).collect::<Vec<_>>());
        // Past the checkpoint's end: the range is named, the rest is free.
        let replay = replay_past(&parts);
        assert_eq!(replay.next_pid, 25);
        assert_eq!(replay.free, Vec::<PageId>::new());
    }

    fn replay_past(parts: &GroupParts<'_>) -> Replay {
        replay(&checkpoint(10, Vec::new()), vec![found(1, parts)], 0).unwrap()
    }
}
