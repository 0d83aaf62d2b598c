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
use crate::io::layout::{self, Decoded, DevicePlan, SlotPlace, Superblock};
use crate::io::{
    AlignedBuf, IoChannel, IoRequest, Storage, StorageConfig, StoreLock, Vfs, Window, PAGE_SIZE,
};
use crate::wal::format::{
    checkpoint_version_is_read, Checkpoint, BLOCK_BYTES, CHECKPOINT_VERSION,
    CHECKPOINT_VERSION_OLDEST_READ, FLAG_UNLOGGED_OPEN,
};
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

/// Where a store's parts are: data devices, checkpoint slots and logs.
pub(crate) struct StoreFiles {
    pub(crate) data: Vec<PathBuf>,
    pub(crate) slots: SlotPlace,
    /// The superblock of each data device.
    pub(crate) layout: Vec<Superblock>,
}

impl StoreFiles {
    fn new(data: &[PathBuf], layout: Vec<Superblock>) -> StoreFiles {
        let slots = if layout[0].regions_on_devices() {
            SlotPlace::Region {
                start: layout[0].regions.checkpoint.start,
                bytes: layout[0].checkpoint_slot_bytes,
            }
        } else {
            SlotPlace::Files([beside(&data[0], ".ckpt0"), beside(&data[0], ".ckpt1")])
        };
        StoreFiles {
            data: data.to_vec(),
            slots,
            layout,
        }
    }

    /// Whether the logs and slots are regions of the devices.
    fn on_devices(&self) -> bool {
        self.layout[0].regions_on_devices()
    }

    fn log_file(&self, worker: usize) -> PathBuf {
        beside(&self.data[0], &format!(".wal{worker}"))
    }

    /// The temporary file of a store on files (bulk loads sort through it).
    pub(crate) fn temp_file(&self) -> PathBuf {
        beside(&self.data[0], ".tmp")
    }

    /// The temp regions of a store on block devices, as windows (those
    /// with any bytes).
    fn temp_windows(&self) -> Vec<Window> {
        self.layout
            .iter()
            .enumerate()
            .filter(|(_, sb)| sb.regions.temp.bytes > 0)
            .map(|(d, sb)| Window {
                device: d,
                start: sb.regions.temp.start,
                bytes: sb.regions.temp.bytes,
                label: PathBuf::from(format!("{} (temp)", self.data[d].display())),
            })
            .collect()
    }

    /// The log of `worker` as a window of a device (regions on devices).
    fn log_window(&self, worker: usize) -> Window {
        let sb = &self.layout[0];
        let n = self.data.len() as u32;
        let (device, at) = layout::log_place(worker as u32, n, sb.log_bytes);
        let region = self.layout[device as usize].regions.log;
        Window {
            device: device as usize,
            start: region.start + at,
            bytes: sb.log_bytes,
            label: PathBuf::from(format!(
                "{} (log {worker})",
                self.data[device as usize].display()
            )),
        }
    }
}

/// The file beside the first data file `first` with `suffix` added to its
/// name (`data.ft.ckpt0`, `data.ft.wal1`).
fn beside(first: &std::path::Path, suffix: &str) -> PathBuf {
    let mut name = first.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
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
    /// The temporary space: (storage device index, bytes: None for a file
    /// that grows), in order.
    pub(crate) temp: Vec<(usize, Option<u64>)>,
}

/// The newest valid checkpoint of the two slots.
pub(crate) fn read_checkpoint(storage: &Storage, slots: &SlotPlace) -> Result<Option<Checkpoint>> {
    let mut best: Option<Checkpoint> = None;
    for k in 0..2 {
        if let Some(bytes) = slots.read(storage, k)? {
            if let Some(version) =
                Checkpoint::checked_version(&bytes).filter(|&v| !checkpoint_version_is_read(v))
            {
                return Err(Error::InvalidArgument(format!(
                    "{}: checkpoint format version {version}; this build reads versions {CHECKPOINT_VERSION_OLDEST_READ} to {CHECKPOINT_VERSION} (the store was written by another flashtree version)",
                    slots.name(storage, k)
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
    storage: &Storage,
    slots: &SlotPlace,
    checkpoint: &Checkpoint,
) -> Result<()> {
    slots.write(
        storage,
        (checkpoint.number % 2) as usize,
        &checkpoint.encode(),
    )
}

/// Opens the data devices alone, from offset 0, to read their heads.
fn open_raw(paths: &[PathBuf], options: &Options) -> Result<Storage> {
    let mut config = StorageConfig::new(paths.to_vec());
    config.chunk_bytes = options.chunk_bytes;
    config.direct = options.direct_io;
    config.vfs = options.vfs.clone();
    config.create = false;
    Storage::open(&config)
}

/// The first [`layout::PROBE_BYTES`] of each data device (fewer when it is
/// shorter).
fn read_heads(raw: &Storage) -> Result<Vec<Vec<u8>>> {
    let mut heads = Vec::new();
    for d in 0..raw.data_device_count() {
        let mut buf = AlignedBuf::new(layout::PROBE_BYTES);
        let n = raw.read_at(d, 0, &mut buf)?;
        heads.push(buf[..n].to_vec());
    }
    Ok(heads)
}

/// The superblocks of an existing store, checked against each other and
/// the order the devices were given in; None when no device has one.
fn existing_layout(paths: &[PathBuf], heads: &[Vec<u8>]) -> Result<Option<Vec<Superblock>>> {
    let decoded: Vec<Decoded> = heads.iter().map(|h| layout::decode_head(h)).collect();
    let Some(first_valid) = decoded.iter().position(|d| matches!(d, Decoded::Valid(_))) else {
        return Ok(None);
    };
    let Decoded::Valid(reference) = decoded[first_valid] else {
        unreachable!("position found a valid one");
    };
    let mut layout = Vec::with_capacity(paths.len());
    for (i, (d, path)) in decoded.iter().zip(paths).enumerate() {
        let sb = match d {
            Decoded::Valid(sb) => *sb,
            Decoded::Invalid(why) => {
                return Err(Error::Corrupt(format!(
                    "{} has no valid flashtree superblock ({why}), but {} belongs to store {:#x}: a device of the store is damaged, or devices of different stores were given",
                    path.display(),
                    paths[first_valid].display(),
                    reference.store_id
                )))
            }
        };
        if sb.store_id != reference.store_id {
            return Err(Error::InvalidArgument(format!(
                "{} belongs to store {:#x}, {} to store {:#x}: give the devices of one store",
                path.display(),
                sb.store_id,
                paths[first_valid].display(),
                reference.store_id
            )));
        }
        if sb.device_count as usize != paths.len() {
            return Err(Error::InvalidArgument(format!(
                "{} is device {} of a store of {} devices; {} were given ({})",
                path.display(),
                sb.device_index,
                sb.device_count,
                paths.len(),
                list_paths(paths)
            )));
        }
        if sb.device_index as usize != i {
            return Err(Error::InvalidArgument(format!(
                "{} is device {} of the store but was given as device {i}: give the devices in the order the store was created with",
                path.display(),
                sb.device_index
            )));
        }
        if sb.regions_on_devices() != reference.regions_on_devices() {
            return Err(Error::Corrupt(format!(
                "{} and {} disagree on where the store's logs are",
                path.display(),
                paths[first_valid].display()
            )));
        }
        layout.push(sb);
    }
    Ok(Some(layout))
}

/// A new store's layout, after checking that the devices may be written:
/// files must be empty; block devices need
/// [`Options::create_on_block_devices`] and, when they hold something
/// recognizable (a partition table, a file system, another store),
/// [`Options::force_create`].
fn new_layout(
    raw: &Storage,
    paths: &[PathBuf],
    heads: &[Vec<u8>],
    options: &Options,
) -> Result<Vec<Superblock>> {
    let store_id = rand::random::<u64>() | 1;
    let blocks: Vec<bool> = (0..paths.len()).map(|d| raw.is_block_device(d)).collect();
    if blocks.iter().any(|&b| b) {
        if let Some(d) = blocks.iter().position(|&b| !b) {
            return Err(Error::InvalidArgument(format!(
                "{} is a file but {} a block device: a store's devices are all files or all block devices",
                paths[d].display(),
                paths[blocks.iter().position(|&b| b).expect("one is")].display()
            )));
        }
        if !options.create_on_block_devices {
            return Err(Error::InvalidArgument(format!(
                "no flashtree store on {} (no superblock): creating one erases the device{}; set Options::create_on_block_devices (flashtree --create) to do so",
                list_paths(paths),
                if paths.len() > 1 { "s" } else { "" }
            )));
        }
        for (head, path) in heads.iter().zip(paths) {
            if let Some(what) = layout::signature(head) {
                if !options.force_create {
                    return Err(Error::InvalidArgument(format!(
                        "{} holds {what}: refusing to create a store over it; set Options::force_create (flashtree --create --force) to erase it",
                        path.display()
                    )));
                }
            }
        }
        let device_bytes: Vec<u64> = (0..paths.len())
            .map(|d| raw.device_len(d))
            .collect::<Result<_>>()?;
        let total: u64 = device_bytes.iter().sum();
        let log_count = options
            .workers
            .max(std::thread::available_parallelism().map_or(1, |n| n.get()));
        // The logs take at most a quarter of the devices: a device too
        // small for the default 256 MiB per log gets smaller rings.
        let log_share = (total / 4 / log_count as u64).max(1 << 20) / PAGE_SIZE as u64;
        let plan = DevicePlan {
            log_count: log_count as u32,
            log_bytes: options
                .wal_bytes_per_worker
                .min(log_share * PAGE_SIZE as u64),
            temp_bytes: options
                .temp_region_bytes
                .unwrap_or((total / 32).min(4 << 30) / PAGE_SIZE as u64 * PAGE_SIZE as u64),
            chunk_bytes: options.chunk_bytes,
        };
        return layout::plan_devices(store_id, &device_bytes, &plan).map_err(Error::Full);
    }
    Ok(layout::plan_files(
        store_id,
        paths.len() as u32,
        options.chunk_bytes,
    ))
}

/// Writes both superblock copies of every device, each durable before the
/// next.
fn write_superblocks(raw: &Storage, layout: &[Superblock]) -> Result<()> {
    for (d, sb) in layout.iter().enumerate() {
        let mut buf = AlignedBuf::new(layout::SUPERBLOCK_BYTES);
        buf.copy_from_slice(&sb.encode());
        for at in layout::SUPERBLOCK_OFFSETS {
            raw.write_at_synced(d, at, &buf)?;
        }
    }
    Ok(())
}

/// Plans a new store's layout and writes its superblocks.
fn create_layout(
    raw: &Storage,
    paths: &[PathBuf],
    heads: &[Vec<u8>],
    options: &Options,
) -> Result<StoreFiles> {
    let layout = new_layout(raw, paths, heads, options)?;
    write_superblocks(raw, &layout)?;
    Ok(StoreFiles::new(paths, layout))
}

/// Opens (or creates) the store of `options` on the data files `paths`.
pub(crate) fn open_store(paths: &[PathBuf], options: &Options) -> Result<Opened> {
    let vfs = options.vfs.clone();
    let lock = vfs.lock(paths, options.create_if_missing)?;
    let raw = open_raw(paths, options)?;
    let heads = read_heads(&raw)?;
    let started = Instant::now();
    let on_block_devices = (0..paths.len()).all(|d| raw.is_block_device(d));
    let forced = options.create_on_block_devices && options.force_create && on_block_devices;
    let found = match existing_layout(paths, &heads) {
        // Forced creation erases devices whatever they hold, also parts
        // of a store given out of order or damaged; a creation on files
        // cut short may have written some files' superblocks only.
        Err(_) if forced => None,
        Err(_) if !on_block_devices && interrupted_creation(&vfs, paths)? => None,
        other => other?,
    };
    // The store there with its last checkpoint, or the layout of a new one.
    let (files, checkpoint) = match found {
        Some(layout) => {
            let files = StoreFiles::new(paths, layout);
            match read_checkpoint(&raw, &files.slots)? {
                Some(c) => (files, Some(c)),
                None => {
                    check_creatable(&raw, paths, &files, options)?;
                    (create_layout(&raw, paths, &heads, options)?, None)
                }
            }
        }
        None => {
            check_no_store(&raw, paths, &heads, options)?;
            (create_layout(&raw, paths, &heads, options)?, None)
        }
    };
    drop(raw);
    let log_count = match &checkpoint {
        Some(c) => c.log_starts.len().max(options.workers),
        None => options.workers,
    };
    if files.on_devices() && log_count > files.layout[0].log_count as usize {
        return Err(Error::InvalidArgument(format!(
            "the store on {} has room for {} logs (set when it was created), one per worker; open it with at most {} workers",
            list_paths(paths),
            files.layout[0].log_count,
            files.layout[0].log_count
        )));
    }
    if let Some(c) = &checkpoint {
        check_data_lengths(&vfs, &files, c, options.chunk_bytes)?;
    }
    let mut config = StorageConfig::new(paths.to_vec());
    config.chunk_bytes = options.chunk_bytes;
    config.direct = options.direct_io;
    config.vfs = vfs.clone();
    config.data_start_bytes = files
        .layout
        .iter()
        .map(|sb| sb.regions.data.start)
        .collect();
    let temp: Vec<(usize, Option<u64>)>;
    if files.on_devices() {
        config.windows = (0..log_count).map(|w| files.log_window(w)).collect();
        let windows = files.temp_windows();
        temp = windows
            .iter()
            .enumerate()
            .map(|(k, w)| (paths.len() + log_count + k, Some(w.bytes)))
            .collect();
        config.windows.extend(windows);
    } else {
        config.extra_files = (0..log_count).map(|w| files.log_file(w)).collect();
        config.extra_files.push(files.temp_file());
        temp = vec![(paths.len() + log_count, None)];
    }
    config.min_capacity_bytes = if checkpoint.is_none() && !files.on_devices() {
        NEW_STORE_BYTES
    } else {
        0
    };
    let storage = Arc::new(Storage::open(&config)?);
    let first_log_device = paths.len();
    let log_blocks = if files.on_devices() {
        files.layout[0].log_bytes / BLOCK_BYTES as u64
    } else {
        options.wal_bytes_per_worker / BLOCK_BYTES as u64
    };
    let mut recovery = RecoveryStats::default();
    let mut next = match checkpoint {
        None => create(&storage, files.layout[0].store_id)?,
        Some(c) => {
            let store_id = read_meta(&storage)?;
            if store_id != c.store_id || store_id != files.layout[0].store_id {
                return Err(Error::Corrupt(format!(
                    "{} belongs to store {:#x}, its checkpoint to store {:#x}, its superblock to store {:#x}",
                    paths[0].display(),
                    store_id,
                    c.store_id,
                    files.layout[0].store_id
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
    // The slots get room for a checkpoint of every page the store holds
    // (the buffer manager grows it with the store). On a full file system
    // this open goes on with the room they have, which the checkpoint
    // below needs more of only if the free list grew past it.
    let pages = next
        .next_pid
        .max(storage.capacity_bytes() / PAGE_SIZE as u64);
    match files.slots.reserve(
        &storage,
        layout::checkpoint_bytes_most(pages, options.workers as u32),
    ) {
        Ok(()) | Err(Error::Full(_)) => {}
        Err(e) => return Err(e),
    }
    write_checkpoint(&storage, &files.slots, &next)?;
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
        temp,
    })
}

/// No device has a superblock: an error unless every device may take a
/// new store (files that are empty; block devices, which
/// [`new_layout`] checks).
fn check_no_store(
    raw: &Storage,
    paths: &[PathBuf],
    heads: &[Vec<u8>],
    options: &Options,
) -> Result<()> {
    if (0..paths.len()).any(|d| raw.is_block_device(d)) {
        // Creation on block devices has its own option (`new_layout`).
        return Ok(());
    }
    if interrupted_creation(raw.vfs(), paths)? {
        return check_may_create(paths, options);
    }
    for (head, path) in heads.iter().zip(paths) {
        if head.is_empty() {
            continue;
        }
        return Err(match layout::signature(head) {
            Some(what) if what.contains("version 4") => Error::Unsupported(format!(
                "{} holds {what}: this build reads format version 5 (a superblock at the head of every data file); recreate the store and load it again",
                path.display()
            )),
            _ => Error::Corrupt(format!(
                "{} holds data but no flashtree superblock: it is not a flashtree store, or its head was overwritten",
                path.display()
            )),
        });
    }
    // Empty data files beside checkpoint slots: the data was lost.
    for suffix in [".ckpt0", ".ckpt1"] {
        let slot = beside(&paths[0], suffix);
        if raw.vfs().len(&slot)?.unwrap_or(0) > 0 {
            return Err(Error::Corrupt(format!(
                "{} holds no flashtree superblock but {} holds a checkpoint: the data file was emptied or replaced",
                paths[0].display(),
                slot.display()
            )));
        }
    }
    check_may_create(paths, options)
}

/// No store is there: an error unless [`Options::create_if_missing`].
fn check_may_create(paths: &[PathBuf], options: &Options) -> Result<()> {
    if !options.create_if_missing {
        return Err(Error::InvalidArgument(format!(
            "no store at {} (set Options::create_if_missing to create one)",
            list_paths(paths)
        )));
    }
    Ok(())
}

/// The devices have superblocks but no checkpoint. On files, a store may
/// be created again when the data holds nothing but a metadata page (a
/// creation that crashed before its first checkpoint); on block devices
/// only with [`Options::force_create`].
fn check_creatable(
    raw: &Storage,
    paths: &[PathBuf],
    files: &StoreFiles,
    options: &Options,
) -> Result<()> {
    if files.on_devices() {
        if !(options.create_on_block_devices && options.force_create) {
            return Err(Error::Corrupt(format!(
                "{} holds a flashtree superblock (store {:#x}) but no valid checkpoint: a creation that stopped before its first checkpoint, or damage; set Options::create_on_block_devices and Options::force_create (flashtree --create --force) to make a new store over it",
                list_paths(paths),
                files.layout[0].store_id
            )));
        }
        return Ok(());
    }
    if !interrupted_creation(raw.vfs(), paths)? {
        return Err(Error::Corrupt(format!(
            "{} holds data but the store has no valid checkpoint slot ({}.ckpt0 or .ckpt1): the slots were deleted or damaged",
            list_paths(paths),
            paths[0].display()
        )));
    }
    check_may_create(paths, options)
}

/// True when a creation of a store on files stopped before its first
/// checkpoint was durable, so nothing was acknowledged and the store may be
/// created again: no slot holds a valid checkpoint, the logs hold only
/// zeros, and the data files hold nothing but what creation writes (each
/// superblock copy and the metadata page whole, torn or missing; a tear
/// keeps or drops whole 512-byte sectors, and everything these write past
/// their first sector is zero) and zeros.
fn interrupted_creation(vfs: &Vfs, paths: &[PathBuf]) -> Result<bool> {
    for k in 0..2 {
        if let Some(bytes) = vfs.read_all(&beside(&paths[0], &format!(".ckpt{k}")))? {
            if Checkpoint::decode(&bytes).is_some() {
                return Ok(false);
            }
        }
    }
    for w in 0.. {
        let Some(bytes) = vfs.read_all(&beside(&paths[0], &format!(".wal{w}")))? else {
            break;
        };
        if !is_zero(&bytes) {
            return Ok(false);
        }
    }
    // A block written by creation: its first sector zero or carrying
    // `magic` at `magic_at`, the rest zero.
    let written_by_creation = |block: &[u8], magic: &[u8], magic_at: usize| {
        let (first, rest) = block.split_at(block.len().min(512));
        is_zero(rest)
            && (is_zero(first) || first.get(magic_at..magic_at + magic.len()) == Some(magic))
    };
    for (d, path) in paths.iter().enumerate() {
        let Some(bytes) = vfs.read_all(path)? else {
            continue;
        };
        let mut at = 0;
        let mut blocks = vec![
            (layout::SUPERBLOCK_MAGIC.as_slice(), 4),
            (layout::SUPERBLOCK_MAGIC.as_slice(), 4),
        ];
        if d == 0 {
            blocks.push((meta::MAGIC.as_slice(), 24));
        }
        for (magic, magic_at) in blocks {
            let block = &bytes[at.min(bytes.len())..(at + PAGE_SIZE).min(bytes.len())];
            if !written_by_creation(block, magic, magic_at) {
                return Ok(false);
            }
            at += PAGE_SIZE;
        }
        if !is_zero(bytes.get(at..).unwrap_or(&[])) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// Refuses data files that cannot hold the store the checkpoint describes.
fn check_data_lengths(
    vfs: &Vfs,
    files: &StoreFiles,
    c: &Checkpoint,
    chunk_bytes: u64,
) -> Result<()> {
    let paths = &files.data;
    let n = paths.len() as u64;
    let need_bytes = c.next_pid * PAGE_SIZE as u64;
    // The bytes device `d` must hold for pages below next_pid.
    let stripe = chunk_bytes * n;
    let full_stripes = need_bytes / stripe;
    let rest = need_bytes % stripe;
    for (d, path) in paths.iter().enumerate() {
        let in_rest = rest.saturating_sub(d as u64 * chunk_bytes).min(chunk_bytes);
        let need = full_stripes * chunk_bytes + in_rest;
        if files.on_devices() {
            let region = files.layout[d].regions.data.bytes;
            if region < need {
                return Err(Error::Corrupt(format!(
                    "the data region of {} holds {region} bytes but the store's pages need {need}",
                    path.display()
                )));
            }
            continue;
        }
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
        let need = files.layout[d].regions.data.start + need;
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
fn create(storage: &Arc<Storage>, store_id: u64) -> Result<Checkpoint> {
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
