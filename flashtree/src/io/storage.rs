//! RAID0 storage: N files or block devices exposed as one logical byte space.
//!
//! Logical offset `o` lies in chunk `c = o / chunk_bytes`, which lives on
//! device `c % N` at device offset `(c / N) * chunk_bytes + o % chunk_bytes`.
//! A request must not cross a chunk boundary when there are several data
//! devices (page I/O never does, because `chunk_bytes` is a multiple of
//! the page size); on one, the chunks lie in order and a request may span
//! several.
//!
//! Files are created and preallocated (fallocate) as needed and can grow;
//! block devices have a fixed size and are refused when too small or when
//! their size is not a multiple of the chunk.
//!
//! Besides the striped data devices, a storage may hold *extra files*
//! (the write-ahead logs and the checkpoint slots): each is a device of its
//! own, addressed by device index (`data_device_count() + i`) and a plain
//! file offset, never striped. On block devices the logs and checkpoint
//! slots are *windows* instead: regions of a data device (see
//! [`super::layout`]), addressed like extra files by a device index past
//! them, with offsets inside the region. A data device may begin with a
//! head (the superblock copies and those regions): its pages start at its
//! `data_start` offset. Every file operation (open, create, length,
//! growth, reads, writes, syncs) goes through the storage's [`Vfs`]: the
//! operating system's files, or a [`super::sim::SimDisk`] in tests.

use super::sim::{SimDisk, SimFileId};
use super::vfs::Vfs;
use super::{AlignedBuf, IoError, IoErrorKind, IoOp, DIRECT_IO_ALIGN, PAGE_SIZE};
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How to open the storage.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// One path per device: regular files (created if missing) or block devices.
    pub paths: Vec<PathBuf>,
    /// Stripe unit in bytes: a multiple of 4096. Default 64 KiB.
    pub chunk_bytes: u64,
    /// Open with O_DIRECT (bypass the page cache). Default true.
    pub direct: bool,
    /// Open read-only.
    pub read_only: bool,
    /// Create missing files. Default true.
    pub create: bool,
    /// Make the logical capacity at least this many bytes (files are
    /// preallocated; block devices must be large enough).
    pub min_capacity_bytes: u64,
    /// Files outside the striped data space (logs, checkpoint slots): device
    /// `paths.len() + i` is `extra_files[i]`. Created when missing if
    /// `create` is set.
    pub extra_files: Vec<PathBuf>,
    /// Regions of data devices addressed as extra files: device
    /// `paths.len() + extra_files.len() + i` is `windows[i]`.
    pub windows: Vec<Window>,
    /// Device offset where each data device's pages start (empty: 0 on
    /// every device).
    pub data_start_bytes: Vec<u64>,
    /// Where the files live: the operating system or a simulated disk.
    pub vfs: Vfs,
}

impl StorageConfig {
    /// Defaults for the given device paths.
    pub fn new<P: Into<PathBuf>>(paths: impl IntoIterator<Item = P>) -> StorageConfig {
        StorageConfig {
            paths: paths.into_iter().map(Into::into).collect(),
            chunk_bytes: 64 * 1024,
            direct: true,
            read_only: false,
            create: true,
            min_capacity_bytes: 0,
            extra_files: Vec::new(),
            windows: Vec::new(),
            data_start_bytes: Vec::new(),
            vfs: Vfs::Os,
        }
    }
}

/// A region of a data device addressed as a device of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// The data device (index into `paths`).
    pub device: usize,
    /// Device offset of the region's first byte.
    pub start: u64,
    /// The region's length.
    pub bytes: u64,
    /// A name for messages, e.g. `/dev/loop0 (log 1)`.
    pub label: PathBuf,
}

/// The open file behind a device.
#[derive(Debug)]
pub(crate) enum DeviceFile {
    /// A file or block device of the operating system.
    Os(File),
    /// A file of a simulated disk.
    Sim(Arc<SimDisk>, SimFileId),
}

/// One device of the RAID0 set, or one extra file.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) path: Arc<Path>,
    pub(crate) file: DeviceFile,
    pub(crate) is_block_device: bool,
}

impl Device {
    /// The current length of the file (bytes).
    fn len(&self) -> Result<u64> {
        match &self.file {
            DeviceFile::Os(file) => {
                if self.is_block_device {
                    return block_device_bytes(file, &self.path);
                }
                Ok(file
                    .metadata()
                    .map_err(|e| env_error(&self.path, "stat", e))?
                    .len())
            }
            DeviceFile::Sim(sim, id) => Ok(sim.len(*id)),
        }
    }
}

/// A RAID0 set of devices. Shared by all workers; each worker builds its own
/// [`super::IoChannel`] on it.
#[derive(Debug)]
pub struct Storage {
    /// The data devices (striped), then the extra files.
    devices: Vec<Device>,
    /// How many of `devices` are striped data devices.
    data_count: usize,
    /// Regions of data devices addressed as devices past `devices`.
    windows: Vec<Window>,
    /// Where each data device's pages start.
    data_start: Vec<u64>,
    vfs: Vfs,
    chunk_bytes: u64,
    direct: bool,
    read_only: bool,
    /// Logical bytes addressable now (a multiple of chunk_bytes × N).
    capacity_bytes: AtomicU64,
    /// Serializes growth (a cold path).
    grow_lock: Mutex<()>,
    /// How writes are placed by lifetime on these devices (see
    /// [`Storage::placement`]).
    placement: String,
    /// Bytes of log regions discarded ([`Storage::discard_log_range`]).
    log_bytes_discarded: AtomicU64,
}

/// Where a logical range lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub(crate) device: u32,
    pub(crate) device_offset: u64,
}

/// Requests the block layer queues at once for the disk `major:minor` (a
/// partition's disk): `queue/nr_requests` per hardware queue, times the
/// hardware queues under `mq/`. None for devices without blk-mq queues
/// (device-mapper, md): their own `nr_requests` limits nothing.
fn nr_requests_of(major: u32, minor: u32) -> Option<u32> {
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let disk = [base.clone(), base.join("..")]
        .into_iter()
        .find(|dir| dir.join("queue/nr_requests").exists())?;
    let per_queue: u32 = std::fs::read_to_string(disk.join("queue/nr_requests"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let hardware_queues = std::fs::read_dir(disk.join("mq"))
        .ok()?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .count() as u32;
    (per_queue > 0 && hardware_queues > 0).then(|| per_queue.saturating_mul(hardware_queues))
}

impl Storage {
    /// Opens (creating and preallocating as configured) the devices.
    pub fn open(config: &StorageConfig) -> Result<Storage> {
        validate_config(config)?;
        let mut devices = Vec::with_capacity(config.paths.len() + config.extra_files.len());
        for path in config.paths.iter().chain(&config.extra_files) {
            devices.push(open_device(path, config)?);
        }
        let placement = set_write_life_hints(&devices, config.paths.len());
        let data_start = if config.data_start_bytes.is_empty() {
            vec![0; config.paths.len()]
        } else {
            config.data_start_bytes.clone()
        };
        let storage = Storage {
            devices,
            data_count: config.paths.len(),
            windows: config.windows.clone(),
            data_start,
            vfs: config.vfs.clone(),
            chunk_bytes: config.chunk_bytes,
            direct: config.direct,
            read_only: config.read_only,
            capacity_bytes: AtomicU64::new(0),
            grow_lock: Mutex::new(()),
            placement,
            log_bytes_discarded: AtomicU64::new(0),
        };
        let per_device_bytes = storage.smallest_device_bytes()?;
        let stripe_bytes = config.chunk_bytes * storage.data_count as u64;
        storage.capacity_bytes.store(
            per_device_bytes / config.chunk_bytes * stripe_bytes,
            Ordering::Release,
        );
        if config.min_capacity_bytes > storage.capacity_bytes() {
            storage.grow_to(config.min_capacity_bytes)?;
        }
        Ok(storage)
    }

    /// Requests the kernel's block layer queues at once for the disks under
    /// this set: the sum of `queue/nr_requests` in sysfs over the distinct
    /// disks that hold the files or are the devices. Submitting more than
    /// this blocks the submitter in the kernel until a request finishes
    /// (and makes it dispatch and notify the device itself). None when a
    /// disk's queue is not found (e.g. tmpfs, overlay or no sysfs).
    pub fn request_queue_capacity(&self) -> Option<u32> {
        let mut disks: Vec<(u32, u32)> = Vec::new();
        for device in &self.devices[..self.data_count] {
            let DeviceFile::Os(file) = &device.file else {
                return None;
            };
            let meta = file.metadata().ok()?;
            use std::os::unix::fs::MetadataExt;
            let dev = if device.is_block_device {
                meta.rdev()
            } else {
                meta.dev()
            };
            let disk = (libc::major(dev), libc::minor(dev));
            if !disks.contains(&disk) {
                disks.push(disk);
            }
        }
        let mut total: u32 = 0;
        for (major, minor) in disks {
            total = total.saturating_add(nr_requests_of(major, minor)?);
        }
        (total > 0).then_some(total)
    }

    /// Number of devices: the striped data devices and the extra files.
    pub fn device_count(&self) -> usize {
        self.devices.len() + self.windows.len()
    }

    /// The device that I/O on device `index` goes to: a window's data
    /// device, else `index` itself.
    pub(crate) fn io_device(&self, index: usize) -> usize {
        match index.checked_sub(self.devices.len()) {
            Some(w) => self.windows[w].device,
            None => index,
        }
    }

    /// Whether data device `index` is a block device.
    pub fn is_block_device(&self, index: usize) -> bool {
        self.devices[index].is_block_device
    }

    /// Number of striped data devices (the first devices).
    pub fn data_device_count(&self) -> usize {
        self.data_count
    }

    /// The file system the devices live on.
    pub fn vfs(&self) -> &Vfs {
        &self.vfs
    }

    /// The current length in bytes of device `index`'s file.
    pub fn device_len(&self, index: usize) -> Result<u64> {
        match index.checked_sub(self.devices.len()) {
            Some(w) => Ok(self.windows[w].bytes),
            None => self.devices[index].len(),
        }
    }

    /// Makes extra file `index` (a device index past the data devices) at
    /// least `bytes` long: preallocated and zero-filled, so that later
    /// writes into it change no file size (an `fdatasync` then needs no
    /// metadata update). Call before any channel writes to it.
    pub fn preallocate_file(&self, index: usize, bytes: u64) -> Result<()> {
        assert!(
            index >= self.data_count,
            "preallocate_file on a data device"
        );
        if let Some(w) = index.checked_sub(self.devices.len()) {
            let window = &self.windows[w];
            if window.bytes < bytes {
                return Err(Error::InvalidArgument(format!(
                    "{} holds {} bytes, {bytes} asked for (its size was set when the store was created)",
                    window.label.display(),
                    window.bytes
                )));
            }
            return Ok(());
        }
        let device = &self.devices[index];
        let len = device.len()?;
        if len >= bytes {
            return Ok(());
        }
        match &device.file {
            DeviceFile::Os(file) => {
                fallocate(file, &device.path, len, bytes - len)?;
                write_zeros(file, &device.path, len, bytes)
            }
            DeviceFile::Sim(sim, id) => {
                sim.set_len(*id, bytes).map_err(|e| {
                    env_error(&device.path, "extend", std::io::Error::from_raw_os_error(e))
                })?;
                sim.sync(*id).map_err(|e| {
                    env_error(&device.path, "sync", std::io::Error::from_raw_os_error(e))
                })
            }
        }
    }

    /// The path of device `index`.
    pub fn device_path(&self, index: usize) -> &Path {
        match index.checked_sub(self.devices.len()) {
            Some(w) => &self.windows[w].label,
            None => &self.devices[index].path,
        }
    }

    /// Stripe unit in bytes.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Whether the devices were opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Logical bytes addressable now.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes.load(Ordering::Acquire)
    }

    /// Grows the logical capacity to at least `bytes` by extending (and
    /// preallocating) the files. Block devices cannot grow: an error says so.
    pub fn grow_to(&self, bytes: u64) -> Result<()> {
        self.grow(bytes, true)
    }

    /// [`Storage::grow_to`] for space that is about to be written whole in
    /// large sequential writes (a bulk load): files are preallocated but
    /// not zero-filled, which would write every byte twice.
    pub fn grow_to_unfilled(&self, bytes: u64) -> Result<()> {
        self.grow(bytes, false)
    }

    fn grow(&self, bytes: u64, zero_fill: bool) -> Result<()> {
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        if bytes <= self.capacity_bytes() {
            return Ok(());
        }
        if self.read_only {
            return Err(Error::InvalidArgument(
                "cannot grow storage opened read-only".into(),
            ));
        }
        let n = self.data_count as u64;
        let stripe_bytes = self.chunk_bytes * n;
        let stripes = bytes.div_ceil(stripe_bytes);
        for (index, device) in self.devices[..self.data_count].iter().enumerate() {
            let per_device_bytes = self.data_start[index] + stripes * self.chunk_bytes;
            if device.is_block_device {
                let have = device.len()?;
                if have < per_device_bytes {
                    return Err(Error::Full(format!(
                        "block device {} has {have} bytes, {per_device_bytes} needed",
                        device.path.display()
                    )));
                }
                continue;
            }
            let len = device.len()?;
            if len >= per_device_bytes {
                continue;
            }
            match &device.file {
                DeviceFile::Os(file) => {
                    fallocate(file, &device.path, len, per_device_bytes - len)?;
                    if zero_fill {
                        write_zeros(file, &device.path, len, per_device_bytes)?;
                    }
                }
                DeviceFile::Sim(sim, id) => sim.set_len(*id, per_device_bytes).map_err(|e| {
                    if e == libc::ENOSPC {
                        Error::Full(format!(
                            "no space left to grow {} to {per_device_bytes} bytes",
                            device.path.display()
                        ))
                    } else {
                        env_error(&device.path, "extend", std::io::Error::from_raw_os_error(e))
                    }
                })?,
            }
        }
        self.capacity_bytes
            .store(stripes * stripe_bytes, Ordering::Release);
        Ok(())
    }

    /// Tells the devices that the pages `pids` (logical page numbers,
    /// sorted, no duplicates) hold nothing: `FALLOC_FL_PUNCH_HOLE` on
    /// files (their length stays), `BLKDISCARD` on block devices, a write
    /// of zeros on a simulated disk (which a crash may keep, tear or drop,
    /// as a discard may or may not reach the flash). Pages past the
    /// capacity are skipped. Contiguous pages on a device go in one call.
    /// Returns the bytes discarded. The caller makes sure that no page
    /// given is in use, nor can be until this returns.
    pub fn discard_pages(&self, pids: &[u64]) -> Result<u64> {
        debug_assert!(pids.windows(2).all(|w| w[0] < w[1]));
        let page = PAGE_SIZE as u64;
        // (device, start, end) of the open range.
        let mut open: Option<(u32, u64, u64)> = None;
        let mut bytes = 0;
        for &pid in pids {
            let Ok(mapped) = self.map(IoOp::Write, pid * page, PAGE_SIZE as u32) else {
                continue;
            };
            let (device, at) = (mapped.device, mapped.device_offset);
            match &mut open {
                Some((d, _, end)) if *d == device && *end == at => *end += page,
                _ => {
                    if let Some((d, start, end)) = open.take() {
                        bytes += self.discard_range(d as usize, start, end)?;
                    }
                    open = Some((device, at, at + page));
                }
            }
        }
        if let Some((d, start, end)) = open {
            bytes += self.discard_range(d as usize, start, end)?;
        }
        Ok(bytes)
    }

    /// Tells a block device that bytes `offset..offset + len` of log
    /// window `index` hold nothing (`BLKDISCARD`), and returns the bytes
    /// discarded. Log files and simulated disks are left as they are
    /// (returns 0): a log file is a preallocated ring, and a hole punched
    /// in it would make its next write allocate blocks, which its
    /// `fdatasync` would then have to make durable too. The caller makes
    /// sure that recovery can never need those bytes.
    pub fn discard_log_range(&self, index: usize, offset: u64, len: u64) -> Result<u64> {
        let Some(w) = index.checked_sub(self.devices.len()) else {
            return Ok(0);
        };
        let window = &self.windows[w];
        if len == 0 || !self.devices[window.device].is_block_device {
            return Ok(0);
        }
        assert!(
            offset + len <= window.bytes,
            "log discard past the end of {}",
            window.label.display()
        );
        let start = window.start + offset;
        let bytes = self.discard_range(window.device, start, start + len)?;
        self.log_bytes_discarded.fetch_add(bytes, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Gives back the temporary space a bulk load used: bytes
    /// `0..used` of temp device `index` (an extra file, or a window of a
    /// block device's temp region). A file is cut to length 0 (its blocks
    /// go back to the file system); a block device's range is discarded
    /// (`BLKDISCARD`). Returns the bytes given back.
    pub fn release_temp(&self, index: usize, used: u64) -> Result<u64> {
        assert!(index >= self.data_count, "release_temp on a data device");
        if let Some(w) = index.checked_sub(self.devices.len()) {
            let window = &self.windows[w];
            let len = used.min(window.bytes);
            if len == 0 || !self.devices[window.device].is_block_device {
                return Ok(0);
            }
            return self.discard_range(window.device, window.start, window.start + len);
        }
        let device = &self.devices[index];
        let len = device.len()?;
        match &device.file {
            DeviceFile::Os(file) => file
                .set_len(0)
                .map_err(|e| env_error(&device.path, "truncate", e))?,
            DeviceFile::Sim(sim, id) => sim.set_len(*id, 0).map_err(|e| {
                env_error(
                    &device.path,
                    "truncate",
                    std::io::Error::from_raw_os_error(e),
                )
            })?,
        }
        Ok(len)
    }

    /// Bytes of log regions discarded since open.
    pub fn log_bytes_discarded(&self) -> u64 {
        self.log_bytes_discarded.load(Ordering::Relaxed)
    }

    /// Discards bytes `start..end` of data device `index`.
    fn discard_range(&self, index: usize, start: u64, end: u64) -> Result<u64> {
        let device = &self.devices[index];
        let len = end - start;
        match &device.file {
            DeviceFile::Os(file) => {
                if device.is_block_device {
                    // BLKDISCARD = _IO(0x12, 119); the argument is
                    // [offset, length] in bytes.
                    const BLKDISCARD: libc::c_ulong = 0x1277;
                    let range: [u64; 2] = [start, len];
                    // SAFETY: the ioctl reads two u64s from `range`, which
                    // lives across the call.
                    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
                    if rc != 0 {
                        return Err(env_error(
                            &device.path,
                            "BLKDISCARD",
                            std::io::Error::last_os_error(),
                        ));
                    }
                } else {
                    // SAFETY: plain syscall on an open descriptor; no memory
                    // is passed.
                    let rc = unsafe {
                        libc::fallocate(
                            file.as_raw_fd(),
                            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                            start as i64,
                            len as i64,
                        )
                    };
                    if rc != 0 {
                        return Err(env_error(
                            &device.path,
                            "fallocate(PUNCH_HOLE)",
                            std::io::Error::last_os_error(),
                        ));
                    }
                }
            }
            DeviceFile::Sim(sim, id) => {
                sim.write(*id, start, &vec![0u8; len as usize])
                    .map_err(|e| {
                        env_error(
                            &device.path,
                            "discard",
                            std::io::Error::from_raw_os_error(e),
                        )
                    })?;
            }
        }
        Ok(len)
    }

    /// Reads `buf.len()` bytes at device offset `offset` of device `index`
    /// (raw: a data device's own offset, not a page's logical one; or an
    /// extra file, or a window), outside any channel, for superblocks and
    /// checkpoint slots. Returns the bytes read: fewer at the end of a
    /// file.
    pub fn read_at(&self, index: usize, offset: u64, buf: &mut AlignedBuf) -> Result<usize> {
        let n = self.raw_io(IoOp::Read, index, offset, buf.as_mut_ptr(), buf.len())?;
        Ok(n)
    }

    /// Writes `buf` at device offset `offset` of device `index` (raw, as
    /// [`Storage::read_at`]) and makes it durable (`fdatasync`). An error
    /// is final: what the device holds there is unknown.
    pub fn write_at_synced(&self, index: usize, offset: u64, buf: &AlignedBuf) -> Result<()> {
        let n = self.raw_io(
            IoOp::Write,
            index,
            offset,
            buf.as_ptr().cast_mut(),
            buf.len(),
        )?;
        if n != buf.len() {
            return Err(Error::Failed(format!(
                "write of {} bytes at {offset} of {}: {n} written",
                buf.len(),
                self.device_path(index).display()
            )));
        }
        self.raw_io(IoOp::Fdatasync, index, 0, std::ptr::null_mut(), 0)
            .map(|_| ())
    }

    fn raw_io(
        &self,
        op: IoOp,
        index: usize,
        offset: u64,
        buf: *mut u8,
        len: usize,
    ) -> Result<usize> {
        let (device, device_offset) = match index.checked_sub(self.devices.len()) {
            Some(w) => {
                let window = &self.windows[w];
                if offset + len as u64 > window.bytes {
                    return Err(Error::Corrupt(format!(
                        "{} bytes at {offset} lie past the end of {} ({} bytes)",
                        len,
                        window.label.display(),
                        window.bytes
                    )));
                }
                (window.device, window.start + offset)
            }
            None => (index, offset),
        };
        let slot = super::channel::Slot {
            op,
            offset,
            device: device as u32,
            device_offset,
            buf,
            len: len as u32,
            user_data: 0,
            class: super::WriteClass::Meta,
        };
        // SAFETY: the callers pass a buffer valid for `len` bytes (an
        // AlignedBuf they hold across the call; none for a sync).
        let rc = unsafe { self.perform(&slot) };
        if rc < 0 {
            let e = std::io::Error::from_raw_os_error(-rc as i32);
            let what = match op {
                IoOp::Read => "read",
                IoOp::Fdatasync | IoOp::Fsync => "sync",
                _ => "write",
            };
            let message = format!(
                "{what} at {offset} of {}: {e}",
                self.device_path(index).display()
            );
            return Err(match op {
                IoOp::Read => Error::Unsupported(message),
                _ => Error::Failed(message),
            });
        }
        Ok(rc as usize)
    }

    /// The raw file descriptor of device `index` (for channels); -1 for a
    /// simulated file (whose channels use the synchronous backend).
    pub(crate) fn fd(&self, index: usize) -> RawFd {
        match &self.devices[self.io_device(index)].file {
            DeviceFile::Os(file) => file.as_raw_fd(),
            DeviceFile::Sim(..) => -1,
        }
    }

    /// Performs one request synchronously (the synchronous backend, and
    /// every request on a simulated disk). Returns bytes transferred (0 for
    /// a sync) or -errno.
    ///
    /// # Safety
    /// `slot.buf` must be valid for `slot.len` bytes (writable for reads).
    pub(crate) unsafe fn perform(&self, slot: &super::channel::Slot) -> i64 {
        let device = &self.devices[slot.device as usize];
        let len = slot.len as usize;
        match &device.file {
            DeviceFile::Sim(sim, id) => {
                if matches!(slot.op, IoOp::Write | IoOp::WriteDsync) {
                    sim.note_write_class(*id, slot.device_offset, len as u64, slot.class);
                }
                let result = match slot.op {
                    IoOp::Read => {
                        // SAFETY: the caller's contract.
                        let buf = unsafe { std::slice::from_raw_parts_mut(slot.buf, len) };
                        sim.read(*id, slot.device_offset, buf).map(|n| n as i64)
                    }
                    IoOp::Write => {
                        // SAFETY: the caller's contract.
                        let buf = unsafe { std::slice::from_raw_parts(slot.buf, len) };
                        sim.write(*id, slot.device_offset, buf).map(|n| n as i64)
                    }
                    IoOp::WriteDsync => {
                        // SAFETY: the caller's contract.
                        let buf = unsafe { std::slice::from_raw_parts(slot.buf, len) };
                        // Two operations of the disk, so that a crash or a
                        // fault may fall between them (the write then
                        // stays pending: dropped or torn by a crash).
                        sim.write(*id, slot.device_offset, buf).and_then(|n| {
                            sim.sync_range(*id, slot.device_offset, n as u64)
                                .map(|()| n as i64)
                        })
                    }
                    IoOp::Fsync | IoOp::Fdatasync => sim.sync(*id).map(|()| 0),
                };
                result.unwrap_or_else(|errno| -i64::from(errno))
            }
            DeviceFile::Os(file) => {
                let fd = file.as_raw_fd();
                let off = slot.device_offset as libc::off_t;
                loop {
                    // SAFETY: the caller keeps slot.buf valid for len bytes.
                    let rc = unsafe {
                        match slot.op {
                            IoOp::Read => libc::pread(fd, slot.buf.cast(), len, off) as i64,
                            IoOp::Write => libc::pwrite(fd, slot.buf.cast(), len, off) as i64,
                            IoOp::WriteDsync => {
                                let iov = libc::iovec {
                                    iov_base: slot.buf.cast(),
                                    iov_len: len,
                                };
                                libc::pwritev2(fd, &iov, 1, off, libc::RWF_DSYNC) as i64
                            }
                            IoOp::Fsync => libc::fsync(fd) as i64,
                            IoOp::Fdatasync => libc::fdatasync(fd) as i64,
                        }
                    };
                    if rc >= 0 {
                        return rc;
                    }
                    let errno = std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO);
                    if errno != libc::EINTR {
                        return -i64::from(errno);
                    }
                }
            }
        }
    }

    /// How writes are placed by their lifetime, for reports: the
    /// per-file write-life hints (`F_SET_RW_HINT`: the logs short-lived,
    /// the data medium) where the kernel took them, else why nothing is.
    /// This machine's virtio disk offers no write streams (its
    /// `queue/max_write_streams` is 0) and no FDP, so the hints are all
    /// there is; a device that ignores them (most do) loses nothing.
    pub fn placement(&self) -> &str {
        &self.placement
    }

    /// True when opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// True when the devices are files of a simulated disk.
    pub fn is_simulated(&self) -> bool {
        matches!(self.vfs, Vfs::Sim(_))
    }

    pub(crate) fn device(&self, index: usize) -> &Device {
        &self.devices[index]
    }

    /// Maps a logical range to its device. Checks alignment (for direct I/O),
    /// range and, with several data devices, that the request stays inside
    /// one chunk.
    pub(crate) fn map(
        &self,
        op: IoOp,
        offset: u64,
        len: u32,
    ) -> std::result::Result<Mapped, IoError> {
        let fail = |kind| IoError {
            op,
            path: None,
            offset,
            device_offset: None,
            len,
            kind,
        };
        let align = if self.direct {
            DIRECT_IO_ALIGN as u64
        } else {
            1
        };
        if !offset.is_multiple_of(align) || u64::from(len) % align != 0 || len == 0 {
            return Err(fail(IoErrorKind::Misaligned));
        }
        let end = offset + u64::from(len);
        let chunk = offset / self.chunk_bytes;
        let n = self.data_count as u64;
        if n > 1 && (end - 1) / self.chunk_bytes != chunk {
            return Err(fail(IoErrorKind::Misaligned));
        }
        if end > self.capacity_bytes() && !matches!(op, IoOp::Read) {
            return Err(fail(IoErrorKind::OutOfRange));
        }
        if n == 1 {
            return Ok(Mapped {
                device: 0,
                device_offset: self.data_start[0] + offset,
            });
        }
        let device = (chunk % n) as usize;
        Ok(Mapped {
            device: device as u32,
            device_offset: self.data_start[device]
                + (chunk / n) * self.chunk_bytes
                + offset % self.chunk_bytes,
        })
    }

    /// Maps a request on extra file `device` at file offset `offset`:
    /// checks the device index and the alignment for direct I/O.
    pub(crate) fn map_file(
        &self,
        op: IoOp,
        device: u32,
        offset: u64,
        len: u32,
    ) -> std::result::Result<Mapped, IoError> {
        let fail = |kind| IoError {
            op,
            path: None,
            offset,
            device_offset: None,
            len,
            kind,
        };
        if (device as usize) < self.data_count || device as usize >= self.device_count() {
            return Err(fail(IoErrorKind::OutOfRange));
        }
        let align = if self.direct {
            DIRECT_IO_ALIGN as u64
        } else {
            1
        };
        if !offset.is_multiple_of(align) || u64::from(len) % align != 0 || len == 0 {
            return Err(fail(IoErrorKind::Misaligned));
        }
        if let Some(w) = (device as usize).checked_sub(self.devices.len()) {
            let window = &self.windows[w];
            if offset + u64::from(len) > window.bytes {
                return Err(fail(IoErrorKind::OutOfRange));
            }
            return Ok(Mapped {
                device: window.device as u32,
                device_offset: window.start + offset,
            });
        }
        Ok(Mapped {
            device,
            device_offset: offset,
        })
    }

    fn smallest_device_bytes(&self) -> Result<u64> {
        let mut smallest = u64::MAX;
        for (index, device) in self.devices[..self.data_count].iter().enumerate() {
            let start = self.data_start[index];
            let bytes = if device.is_block_device {
                let have = device.len()?;
                if start == 0 && have % self.chunk_bytes != 0 {
                    return Err(Error::Unsupported(format!(
                        "block device {} has {have} bytes, not a multiple of the chunk size {}",
                        device.path.display(),
                        self.chunk_bytes
                    )));
                }
                have.saturating_sub(start)
            } else {
                device.len()?.saturating_sub(start)
            };
            smallest = smallest.min(bytes);
        }
        Ok(smallest)
    }
}

fn validate_config(config: &StorageConfig) -> Result<()> {
    if config.paths.is_empty() {
        return Err(Error::InvalidArgument("no device paths given".into()));
    }
    if config.chunk_bytes == 0 || !config.chunk_bytes.is_multiple_of(PAGE_SIZE as u64) {
        return Err(Error::InvalidArgument(format!(
            "chunk size {} is not a positive multiple of the page size {PAGE_SIZE}",
            config.chunk_bytes
        )));
    }
    if !config.data_start_bytes.is_empty() && config.data_start_bytes.len() != config.paths.len() {
        return Err(Error::InvalidArgument(format!(
            "{} data start offsets for {} devices",
            config.data_start_bytes.len(),
            config.paths.len()
        )));
    }
    if config
        .data_start_bytes
        .iter()
        .any(|s| !s.is_multiple_of(PAGE_SIZE as u64))
    {
        return Err(Error::InvalidArgument(format!(
            "data start offsets {:?} are not multiples of the page size",
            config.data_start_bytes
        )));
    }
    for window in &config.windows {
        if window.device >= config.paths.len()
            || !window.start.is_multiple_of(PAGE_SIZE as u64)
            || !window.bytes.is_multiple_of(PAGE_SIZE as u64)
        {
            return Err(Error::InvalidArgument(format!(
                "region {} is not a page-aligned range of a data device",
                window.label.display()
            )));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for path in config.paths.iter().chain(&config.extra_files) {
        if !seen.insert(path) {
            return Err(Error::InvalidArgument(format!(
                "device {} is listed twice",
                path.display()
            )));
        }
    }
    Ok(())
}

fn open_device(path: &Path, config: &StorageConfig) -> Result<Device> {
    if let Vfs::Sim(sim) = &config.vfs {
        let create = config.create && !config.read_only;
        let id = sim
            .open(path, create)
            .map_err(|e| env_error(path, "open", std::io::Error::from_raw_os_error(e)))?;
        return Ok(Device {
            path: Arc::from(path),
            file: DeviceFile::Sim(sim.clone(), id),
            is_block_device: false,
        });
    }
    let mut options = OpenOptions::new();
    options.read(true).write(!config.read_only);
    if config.create && !config.read_only {
        options.create(true);
    }
    if config.direct {
        options.custom_flags(libc::O_DIRECT);
    }
    let file = options.open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::EINVAL) && config.direct {
            Error::Unsupported(format!(
                "{}: the file system refuses O_DIRECT (tmpfs does); put the store on another file system or disable direct I/O",
                path.display()
            ))
        } else {
            env_error(path, "open", e)
        }
    })?;
    let is_block_device = file
        .metadata()
        .map_err(|e| env_error(path, "stat", e))?
        .file_type()
        .is_block_device();
    Ok(Device {
        path: Arc::from(path),
        file: DeviceFile::Os(file),
        is_block_device,
    })
}

/// `RWH_WRITE_LIFE_SHORT` and `RWH_WRITE_LIFE_MEDIUM` of `<linux/fcntl.h>`.
const WRITE_LIFE_SHORT: u64 = 2;
const WRITE_LIFE_MEDIUM: u64 = 3;

/// Tags each file with the lifetime of what is written to it: the data
/// devices (`devices[..data_count]`) medium, the extra files (the logs)
/// short, which is how long a log block lives before its ring comes round.
/// Returns what applied, for [`Storage::placement`].
fn set_write_life_hints(devices: &[Device], data_count: usize) -> String {
    // F_SET_RW_HINT = F_LINUX_SPECIFIC_BASE (1024) + 12.
    const F_SET_RW_HINT: libc::c_int = 1036;
    if let Some(device) = devices.iter().find(|d| d.is_block_device) {
        // A hint is per inode: the regions of a device (its log, temp
        // and data) would all get one. Write streams per region would
        // need a device offering them (`queue/max_write_streams`).
        return format!(
            "none (block device {}: write-life hints are per inode, which its regions share; no write streams)",
            device.path.display()
        );
    }
    let mut refused = None;
    for (index, device) in devices.iter().enumerate() {
        let DeviceFile::Os(file) = &device.file else {
            return "none (simulated disk)".into();
        };
        let hint: u64 = if index < data_count {
            WRITE_LIFE_MEDIUM
        } else {
            WRITE_LIFE_SHORT
        };
        // SAFETY: the fcntl reads one u64 from `hint`, which outlives the
        // call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), F_SET_RW_HINT, &hint as *const u64) };
        if rc != 0 && refused.is_none() {
            refused = Some(format!(
                "{}: {}",
                device.path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    match refused {
        None => "per-file write-life hints (F_SET_RW_HINT: logs short, data medium)".into(),
        Some(why) => format!("none (F_SET_RW_HINT refused: {why})"),
    }
}

/// An error from the environment while opening or sizing a device.
fn env_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::Unsupported(format!("{what} {}: {e}", path.display()))
}

fn block_device_bytes(file: &File, path: &Path) -> Result<u64> {
    // BLKGETSIZE64 = _IOR(0x12, 114, size_t)
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut bytes: u64 = 0;
    // SAFETY: the ioctl writes one u64 into `bytes`, which outlives the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut bytes as *mut u64) };
    if rc != 0 {
        return Err(env_error(
            path,
            "BLKGETSIZE64",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(bytes)
}

/// Bytes written per call when zero-filling new space.
const ZERO_FILL_CHUNK_BYTES: usize = 1 << 20;

/// Writes zeros over `[start, end)` (page-aligned), in large sequential
/// writes. fallocate leaves *unwritten* extents; when pages are later
/// written into them one at a time in eviction order, ext4 converts and
/// splits them page by page, and its in-memory extent-status tree of the
/// file grows large: looking it up on every direct read cost 5–6% of the
/// CPU of a lookup. Written extents stay few and large.
fn write_zeros(file: &File, path: &Path, start: u64, end: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    // A file whose length is not a multiple of the page size (bytes
    // appended by something else) is filled from the page that holds its
    // end: direct I/O needs aligned offsets, and those bytes lie beyond the
    // addressable capacity anyway.
    let start = start - start % PAGE_SIZE as u64;
    assert!(end.is_multiple_of(PAGE_SIZE as u64) && start <= end);
    let zeros = super::AlignedBuf::new(ZERO_FILL_CHUNK_BYTES);
    let mut offset = start;
    while offset < end {
        let len = (end - offset).min(ZERO_FILL_CHUNK_BYTES as u64) as usize;
        file.write_all_at(&zeros[..len], offset)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) => Error::Full(format!(
                    "no space left to grow {} to {end} bytes",
                    path.display()
                )),
                _ => env_error(path, "zero-fill", e),
            })?;
        offset += len as u64;
    }
    Ok(())
}

/// Allocates `[offset, offset + len)` of `file` (the file grows to its end):
/// `Error::Full` when the file system has no room.
pub(crate) fn fallocate(file: &File, path: &Path, offset: u64, len: u64) -> Result<()> {
    // SAFETY: plain syscall on an open descriptor; no memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset as i64, len as i64) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // Some file systems have no fallocate: extend the file instead.
        return file
            .set_len(offset + len)
            .map_err(|e| env_error(path, "extend", e));
    }
    if e.raw_os_error() == Some(libc::ENOSPC) {
        return Err(Error::Full(format!(
            "no space left to grow {} to {} bytes",
            path.display(),
            offset + len
        )));
    }
    Err(env_error(path, "fallocate", e))
}
