//! Opening a store: creating it, or finding its last checkpoint, replaying
//! the logs after it (recovery) and starting a new log epoch; and writing
//! checkpoints.
//!
//! # Files
//! For data files `d0, d1, …` (RAID0), the store also has `d0.ckpt0` and
//! `d0.ckpt1` (the two checkpoint slots: the one with the higher valid
//! number wins, so a torn slot write loses nothing) and one log per worker,
//! `d0.wal0`, `d0.wal1`, … (preallocated rings of 4 KiB blocks).
//!
//! # Contract
//! * Creating a store is a decision: only with `create_if_missing`, and
//!   only when no checkpoint slot exists and the data files are missing or
//!   empty (or hold just a metadata page: a creation that crashed before
//!   its first checkpoint). A store whose data files are shorter than its
//!   checkpoint says, or whose length is not a multiple of the page size,
//!   is [`Error::Corrupt`].
//! * Every open writes a new checkpoint with a new log epoch before any
//!   worker starts: blocks of earlier epochs never count as log again.
//! * Recovery writes each page the replayed groups changed as they left it
//!   (its last full image in the log plus the deltas after it; never older
//!   than the disk's copy, by the write-ahead rule), which also repairs torn
//!   pages; it can be interrupted and run again.

use super::meta;
use super::Options;
use crate::buffer::page::seal_page;
use crate::buffer::PageId;
use crate::error::{Error, Result};
use crate::io::{
    AlignedBuf, IoChannel, IoRequest, Storage, StorageConfig, StoreLock, Vfs, PAGE_SIZE,
};
use crate::wal::format::{Checkpoint, BLOCK_BYTES, CHECKPOINT_VERSION, FLAG_UNLOGGED_OPEN};
use crate::wal::recovery::{self, LogFile};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Bytes a new store's data file starts with.
const NEW_STORE_BYTES: u64 = 16 << 20;

/// What recovery did at open.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecoveryStats {
    /// Wall time of recovery (log scan, page writes, syncs), microseconds.
    pub micros: u64,
    /// Log bytes read.
    pub log_bytes: u64,
    /// Log groups applied.
    pub groups: u64,
    /// Log groups found after a missing one (never durable; not applied).
    pub groups_dropped: u64,
    /// Pages written from log images.
    pub pages_written: u64,
}

/// The store's file names.
pub(crate) struct StoreFiles {
    pub(crate) data: Vec<PathBuf>,
    pub(crate) slots: [PathBuf; 2],
}

impl StoreFiles {
    pub(crate) fn new(data: &[PathBuf]) -> StoreFiles {
        let with = |suffix: &str| {
            let mut name = data[0].clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        StoreFiles {
            data: data.to_vec(),
            slots: [with(".ckpt0"), with(".ckpt1")],
        }
    }

    pub(crate) fn log(&self, worker: usize) -> PathBuf {
        let mut name = self.data[0].clone().into_os_string();
        name.push(format!(".wal{worker}"));
        PathBuf::from(name)
    }
}

/// An open store, ready for workers.
pub(crate) struct Opened {
    pub(crate) storage: Arc<Storage>,
    pub(crate) lock: StoreLock,
    pub(crate) files: StoreFiles,
    /// The checkpoint written by this open (its new log epoch).
    pub(crate) checkpoint: Checkpoint,
    /// Storage device index of log 0 (log `w` is this + `w`).
    pub(crate) first_log_device: usize,
    /// Blocks per log file.
    pub(crate) log_blocks: u64,
    pub(crate) recovery: RecoveryStats,
}

/// The newest valid checkpoint of the two slots.
pub(crate) fn read_checkpoint(vfs: &Vfs, files: &StoreFiles) -> Result<Option<Checkpoint>> {
    let mut best: Option<Checkpoint> = None;
    for slot in &files.slots {
        if let Some(bytes) = vfs.read_all(slot)? {
            if let Some(version) =
                Checkpoint::checked_version(&bytes).filter(|&v| v != CHECKPOINT_VERSION)
            {
                return Err(Error::InvalidArgument(format!(
                    "{}: checkpoint format version {version}; this build reads version {CHECKPOINT_VERSION} (the store was written by another flashtree version)",
                    slot.display()
                )));
            }
            if let Some(c) = Checkpoint::decode(&bytes) {
                if best.as_ref().is_none_or(|b| c.number > b.number) {
                    best = Some(c);
                }
            }
        }
    }
    Ok(best)
}

/// Writes `checkpoint` into its slot (`number % 2`) and syncs it.
pub(crate) fn write_checkpoint(
    vfs: &Vfs,
    files: &StoreFiles,
    checkpoint: &Checkpoint,
) -> Result<()> {
    let slot = &files.slots[(checkpoint.number % 2) as usize];
    vfs.write_synced(slot, &checkpoint.encode())
}

/// Opens (or creates) the store of `options` on the data files `paths`.
pub(crate) fn open_store(paths: &[PathBuf], options: &Options) -> Result<Opened> {
    let vfs = options.vfs.clone();
    let files = StoreFiles::new(paths);
    let lock = vfs.lock(paths, options.create_if_missing)?;
    let existing = read_checkpoint(&vfs, &files)?;
    let started = Instant::now();
    let (checkpoint, log_count) = match existing {
        Some(c) => {
            let logs = c.log_starts.len();
            (Some(c), logs.max(options.workers))
        }
        None => {
            check_creatable(&vfs, paths, options)?;
            (None, options.workers)
        }
    };
    if let Some(c) = &checkpoint {
        check_data_lengths(&vfs, paths, c, options.chunk_bytes)?;
    }
    let mut config = StorageConfig::new(paths.to_vec());
    config.chunk_bytes = options.chunk_bytes;
    config.direct = options.direct_io;
    config.vfs = vfs.clone();
    config.extra_files = (0..log_count).map(|w| files.log(w)).collect();
    config.min_capacity_bytes = if checkpoint.is_none() {
        NEW_STORE_BYTES
    } else {
        0
    };
    let storage = Arc::new(Storage::open(&config)?);
    let first_log_device = paths.len();
    let log_blocks = options.wal_bytes_per_worker / BLOCK_BYTES as u64;
    let mut recovery = RecoveryStats::default();
    let mut next = match checkpoint {
        None => create(&storage)?,
        Some(c) => {
            let store_id = read_meta(&storage)?;
            if store_id != c.store_id {
                return Err(Error::Corrupt(format!(
                    "{} belongs to store {:#x}, its checkpoint to store {store_id:#x}",
                    paths[0].display(),
                    c.store_id
                )));
            }
            if c.flags & FLAG_UNLOGGED_OPEN != 0 {
                return Err(Error::NotClosedCleanly(format!(
                    "{} was open without a log (Durability::None) in a process that ended without closing it (a crash or a kill): its pages may be inconsistent with each other; recreate the store or restore a copy",
                    list_paths(paths)
                )));
            }
            recover(&storage, &c, first_log_device, options, &mut recovery)?
        }
    };
    // The new epoch: the logs start empty; the old ones are never read again.
    next.number += 1;
    next.log_epoch = rand::random::<u64>() | 1;
    next.log_starts = vec![0; options.workers];
    if options.durability.is_logged() {
        next.log_blocks = log_blocks;
        next.flags = 0;
        for w in 0..options.workers {
            storage.preallocate_file(first_log_device + w, log_blocks * BLOCK_BYTES as u64)?;
        }
    } else {
        // No log is written, and a crash of this open is never recovered
        // (`FLAG_UNLOGGED_OPEN`): no log space is taken (a later logged
        // open preallocates its own; log files an earlier one left stay
        // as they are, unread).
        next.log_blocks = 0;
        next.flags = FLAG_UNLOGGED_OPEN;
    }
    write_checkpoint(&vfs, &files, &next)?;
    if recovery.groups > 0 || recovery.groups_dropped > 0 {
        recovery.micros = started.elapsed().as_micros() as u64;
    }
    Ok(Opened {
        storage,
        lock,
        files,
        checkpoint: next,
        first_log_device,
        log_blocks,
        recovery,
    })
}

/// A store may be created here: nothing but empty data files, or a
/// metadata page alone (a creation that crashed before its checkpoint).
fn check_creatable(vfs: &Vfs, paths: &[PathBuf], options: &Options) -> Result<()> {
    let mut holds_data = false;
    for path in paths {
        if vfs.len(path)?.unwrap_or(0) > 0 {
            holds_data = true;
        }
    }
    if holds_data && !only_a_metadata_page(vfs, paths)? {
        return Err(Error::Corrupt(format!(
            "{} holds data but the store has no checkpoint slot ({}.ckpt0 or .ckpt1): the slots were deleted, or this is not a flashtree store of this version",
            list_paths(paths),
            paths[0].display()
        )));
    }
    if !options.create_if_missing {
        return Err(Error::InvalidArgument(format!(
            "no store at {} (set Options::create_if_missing to create one)",
            list_paths(paths)
        )));
    }
    Ok(())
}

/// True when the first data file begins with a valid metadata page and
/// every other page of every data file is zero: a creation that stopped
/// before its first checkpoint, when no change could have been made.
fn only_a_metadata_page(vfs: &Vfs, paths: &[PathBuf]) -> Result<bool> {
    let Some(bytes) = vfs.read_all(&paths[0])? else {
        return Ok(false);
    };
    if bytes.len() < PAGE_SIZE {
        return Ok(false);
    }
    let page: &[u8; PAGE_SIZE] = bytes[..PAGE_SIZE].try_into().expect("a page");
    if meta::decode_meta(page).is_err() || bytes[PAGE_SIZE..].iter().any(|&b| b != 0) {
        return Ok(false);
    }
    for path in &paths[1..] {
        if let Some(bytes) = vfs.read_all(path)? {
            if bytes.iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Refuses data files that cannot hold the store the checkpoint describes.
fn check_data_lengths(
    vfs: &Vfs,
    paths: &[PathBuf],
    c: &Checkpoint,
    chunk_bytes: u64,
) -> Result<()> {
    let n = paths.len() as u64;
    let need_bytes = c.next_pid * PAGE_SIZE as u64;
    // The bytes device `d` must hold for pages below next_pid.
    let stripe = chunk_bytes * n;
    let full_stripes = need_bytes / stripe;
    let rest = need_bytes % stripe;
    for (d, path) in paths.iter().enumerate() {
        let Some(len) = vfs.len(path)? else {
            return Err(Error::Corrupt(format!(
                "{} is missing: the store's checkpoint lists it",
                path.display()
            )));
        };
        if len % PAGE_SIZE as u64 != 0 {
            return Err(Error::Corrupt(format!(
                "{} is {len} bytes long, not a multiple of the page size {PAGE_SIZE}: bytes were appended or cut off by something other than flashtree",
                path.display()
            )));
        }
        let in_rest = rest.saturating_sub(d as u64 * chunk_bytes).min(chunk_bytes);
        let need = full_stripes * chunk_bytes + in_rest;
        if len < need {
            return Err(Error::Corrupt(format!(
                "{} is {len} bytes long but the store's pages need {need}: the file was truncated",
                path.display()
            )));
        }
    }
    Ok(())
}

fn read_meta(storage: &Arc<Storage>) -> Result<u64> {
    let mut buf = AlignedBuf::new(PAGE_SIZE);
    page_io(storage, false, 0, &mut buf)
        .map_err(|e| Error::Corrupt(format!("cannot read the metadata page: {e}")))?;
    meta::decode_meta((&buf[..]).try_into().expect("a page"))
}

/// Writes the metadata page of a new store and returns its first
/// checkpoint (number 0: the caller writes number 1).
fn create(storage: &Arc<Storage>) -> Result<Checkpoint> {
    let store_id = rand::random::<u64>() | 1;
    let mut buf = AlignedBuf::new(PAGE_SIZE);
    meta::encode_meta(store_id, (&mut buf[..]).try_into().expect("a page"));
    page_io(storage, true, 0, &mut buf)?;
    sync_data(storage)?;
    Ok(Checkpoint {
        number: 0,
        store_id,
        log_epoch: 0,
        seq_start: 1,
        next_pid: 1,
        log_starts: Vec::new(),
        log_blocks: 0,
        trees: Vec::new(),
        free: Vec::new(),
        flags: 0,
    })
}

/// Replays the logs after checkpoint `c`; returns the state to start the
/// next epoch from.
fn recover(
    storage: &Arc<Storage>,
    c: &Checkpoint,
    first_log_device: usize,
    options: &Options,
    stats: &mut RecoveryStats,
) -> Result<Checkpoint> {
    let mut found = Vec::new();
    let mut log_bytes = 0u64;
    let mut total_bytes = 0u64;
    let logs: Vec<LogFile> = c
        .log_starts
        .iter()
        .enumerate()
        .map(|(w, &start)| {
            let device = first_log_device + w;
            let file_bytes = storage.device_len(device).unwrap_or(0);
            // Every open preallocates the logs before its checkpoint says
            // how long they are: a shorter log lost blocks.
            let file_blocks = c.log_blocks;
            if file_bytes < file_blocks * BLOCK_BYTES as u64 {
                return Err(Error::Corrupt(format!(
                    "log {} has {file_bytes} bytes, but its checkpoint says it holds {file_blocks} blocks of {BLOCK_BYTES} bytes",
                    storage.device_path(device).display()
                )));
            }
            Ok(LogFile {
                device,
                file_blocks,
                start_block: start,
            })
        })
        .collect::<Result<_>>()?;
    for log in &logs {
        total_bytes += log.file_blocks * BLOCK_BYTES as u64;
    }
    for (w, log) in logs.iter().enumerate() {
        if log.file_blocks == 0 {
            if log.start_block == 0 {
                continue; // an empty log that never held a block
            }
            return Err(Error::Corrupt(format!(
                "log {} is missing or empty but its checkpoint starts it at block {}",
                storage.device_path(log.device).display(),
                log.start_block
            )));
        }
        let base = log_bytes;
        let (groups, bytes) = recovery::scan_log(storage, w, log, c.log_epoch, &mut |done| {
            if let Some(progress) = &options.recovery_progress {
                (progress.0)(base + done, total_bytes);
            }
        })?;
        log_bytes += bytes;
        found.extend(groups);
    }
    let replay = recovery::replay(c, found, log_bytes)?;
    stats.log_bytes = replay.log_bytes;
    stats.groups = replay.groups;
    stats.groups_dropped = replay.groups_dropped;
    if replay.next_pid * PAGE_SIZE as u64 > storage.capacity_bytes() {
        storage.grow_to(replay.next_pid * PAGE_SIZE as u64)?;
    }
    // Every page is written, without reading the disk's copy first: by
    // the write-ahead rule a page on disk carries only changes of groups
    // below the durable frontier, all of which are below the cut, so the
    // page as the replayed groups left it is never older than the disk's.
    // Pages of one chunk with consecutive ids go out in one write.
    let mut pids: Vec<PageId> = replay.images.keys().copied().collect();
    pids.sort_unstable();
    let pages_per_chunk = (options.chunk_bytes / PAGE_SIZE as u64).max(1);
    let mut channel = IoChannel::blocking(storage.clone(), 1)?;
    let mut buf = AlignedBuf::new(pages_per_chunk as usize * PAGE_SIZE);
    let mut i = 0;
    while i < pids.len() {
        let first = pids[i];
        let mut n = 0usize;
        while i + n < pids.len()
            && pids[i + n] == first + n as u64
            && (first + n as u64) / pages_per_chunk == first / pages_per_chunk
        {
            let pid = pids[i + n];
            let page: &mut [u8; PAGE_SIZE] = (&mut buf[n * PAGE_SIZE..(n + 1) * PAGE_SIZE])
                .try_into()
                .expect("a page");
            replay.image_into(pid, page);
            seal_page(page, pid);
            n += 1;
        }
        let req = IoRequest::write(
            first * PAGE_SIZE as u64,
            buf.as_ptr(),
            (n * PAGE_SIZE) as u32,
            0,
        );
        // SAFETY: buf is ours and outlives the request, which `run` completes.
        unsafe { channel.run(req) }?;
        stats.pages_written += n as u64;
        i += n;
    }
    sync_data(storage)?;
    Ok(Checkpoint {
        number: c.number,
        store_id: c.store_id,
        log_epoch: c.log_epoch,
        seq_start: replay.cut,
        next_pid: replay.next_pid,
        log_starts: Vec::new(),
        log_blocks: 0,
        trees: replay.trees,
        free: replay.free,
        flags: 0,
    })
}

/// One synchronous page read or write.
pub(crate) fn page_io(
    storage: &Arc<Storage>,
    write: bool,
    pid: PageId,
    buf: &mut AlignedBuf,
) -> Result<()> {
    let mut channel = IoChannel::blocking(storage.clone(), 1)?;
    let offset = pid * PAGE_SIZE as u64;
    let req = if write {
        IoRequest::write(offset, buf.as_ptr(), PAGE_SIZE as u32, 0)
    } else {
        IoRequest::read(offset, buf.as_mut_ptr(), PAGE_SIZE as u32, 0)
    };
    // SAFETY: buf is ours and outlives the request, which `run` completes.
    unsafe { channel.run(req) }
}

/// fsync every data device of the store.
pub(crate) fn sync_data(storage: &Arc<Storage>) -> Result<()> {
    let mut channel = IoChannel::blocking(storage.clone(), 1)?;
    for device in 0..storage.data_device_count() {
        // SAFETY: a sync carries no buffer.
        unsafe { channel.run(IoRequest::sync(device, true, 0)) }.map_err(|e| match e {
            Error::Io(e) => Error::Failed(e.to_string()),
            e => e,
        })?;
    }
    Ok(())
}

/// The paths, for messages.
pub(crate) fn list_paths(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}
