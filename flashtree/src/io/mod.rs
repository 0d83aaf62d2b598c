//! The I/O layer: asynchronous page reads, writes and syncs on a RAID0 set of
//! files or block devices.
//!
//! * [`Storage`] opens (and creates and grows) the devices and maps a logical
//!   byte offset to (device, device offset) by striping chunks round-robin.
//!   It is shared by all workers (`Arc<Storage>`); it holds only file
//!   descriptors, so sharing costs nothing on the I/O path.
//! * [`Vfs`] is where files live: the operating system, or a simulated disk
//!   ([`sim::SimDisk`]) that tests crash, tear and fail at will. Every file
//!   operation of the engine (creation, locking, length, growth, reads,
//!   writes, syncs) goes through it.
//! * [`IoChannel`] is one worker's channel to every device (the all-to-all
//!   model of Haas & Leis (VLDB 2023) §3.4). It is `!Sync` and owned by one thread: no lock
//!   and no cross-thread message is on the I/O path. Three backends sit
//!   behind it: io_uring (default), libaio (raw syscalls) and synchronous
//!   pread/pwrite (the baseline).
//!
//! Protocol: [`IoChannel::push`] queues a request (checked for alignment and
//! range, refused synchronously if bad), [`IoChannel::submit`] hands all
//! queued requests to the kernel in one batch, and [`IoChannel::poll`] /
//! [`IoChannel::wait`] reap completions. Once `push` has accepted a request,
//! exactly one [`IoCompletion`] with its `user_data` is delivered, also when
//! the kernel refuses the submission. The caller keeps the buffer alive and
//! untouched until then; dropping a channel waits for everything in flight.

mod aio;
mod buf;
mod channel;
pub mod layout;
pub mod sim;
mod storage;
mod sync;
mod uring;
mod vfs;

pub use buf::AlignedBuf;
pub use channel::{IoChannel, IoCompletion, IoRequest};
pub use storage::{Storage, StorageConfig, Window};
pub use vfs::{StoreLock, Vfs};

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The page size of the engine, in bytes.
pub const PAGE_SIZE: usize = 4096;

/// Alignment (bytes) of buffers, offsets and lengths for direct I/O. 512 is
/// the logical block size of every device this runs on; page I/O is 4096.
pub const DIRECT_IO_ALIGN: usize = 512;

/// What a write carries, by how long it lives on the device: the class a
/// device that places writes by lifetime (write streams, FDP) would keep
/// apart. Every write request has one ([`IoRequest::class`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteClass {
    /// A data page the buffer pool counts as hot (used again lately).
    DataHot,
    /// Any other data page.
    DataCold,
    /// Log blocks: rewritten one turn of their ring later.
    Log,
    /// Temporary data.
    Temp,
    /// Superblocks and checkpoint slots.
    Meta,
}

impl WriteClass {
    /// Every class, in report order.
    pub const ALL: [WriteClass; 5] = [
        WriteClass::Log,
        WriteClass::DataHot,
        WriteClass::DataCold,
        WriteClass::Temp,
        WriteClass::Meta,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            WriteClass::DataHot => "hot data",
            WriteClass::DataCold => "cold data",
            WriteClass::Log => "log",
            WriteClass::Temp => "temp",
            WriteClass::Meta => "meta",
        }
    }
}

/// Which kernel interface a channel uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// io_uring through the `io-uring` crate (the default).
    IoUring,
    /// Linux native AIO (io_setup/io_submit/io_getevents) through raw syscalls.
    Libaio,
    /// Blocking pread/pwrite at submit time: the baseline.
    Sync,
}

impl BackendKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::IoUring => "io_uring",
            BackendKind::Libaio => "libaio",
            BackendKind::Sync => "sync",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "io_uring" | "iouring" | "uring" => Ok(BackendKind::IoUring),
            "libaio" | "aio" => Ok(BackendKind::Libaio),
            "sync" | "psync" => Ok(BackendKind::Sync),
            _ => Err(format!(
                "unknown I/O backend '{s}' (expected io_uring, libaio or sync)"
            )),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An optional kernel feature: never, always (error if refused), or when the
/// kernel and device accept it (fall back and say so otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// Do not use it.
    Off,
    /// Use it; refusing it is an error that names the flag.
    On,
    /// Use it if it works, else fall back and record a note.
    Auto,
}

impl std::str::FromStr for Feature {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "off" | "false" | "no" => Ok(Feature::Off),
            "on" | "true" | "yes" => Ok(Feature::On),
            "auto" => Ok(Feature::Auto),
            _ => Err(format!("expected off, on or auto, got '{s}'")),
        }
    }
}

/// Configuration of one I/O channel.
#[derive(Clone, Debug)]
pub struct IoConfig {
    /// Kernel interface.
    pub backend: BackendKind,
    /// Most requests in flight (queued plus submitted) on this channel.
    pub depth: u32,
    /// io_uring: completion polling (needs a polling-capable NVMe driver).
    pub iopoll: Feature,
    /// io_uring: a kernel thread polls the submission queue.
    pub sqpoll: Feature,
    /// io_uring: register the devices' file descriptors with the ring.
    pub register_files: bool,
    /// io_uring: memory regions to register as fixed buffers; requests whose
    /// buffer lies inside one use READ_FIXED / WRITE_FIXED.
    pub register_buffers: bool,
    /// `push` submits by itself once this many requests are queued. Small
    /// batches keep the device busy sooner: on this machine's virtio disk,
    /// batches of 4 give 86k IOPS at depth 32 where one batch per loop gives
    /// 69k (`flashtree iobench --batch 4,1000`). 0 = only explicit submits.
    pub submit_batch: u32,
    /// `push` stops submitting by itself while at least this many submitted
    /// requests are unfinished: the device has work queued, so the rest wait
    /// for the caller's next `submit`, one larger batch. On this machine's
    /// virtio disk at depth 128 that costs 2.4 instead of 3.5 µs of CPU per
    /// read at the same IOPS (`flashtree iobench --batch 4,0`). 0 = never
    /// stop (always batches of `submit_batch`).
    pub submit_busy_depth: u32,
    /// Most submitted requests unfinished in the kernel at once; the others
    /// wait in the channel and go out as earlier ones finish. A block device
    /// queues `nr_requests` requests (256 for this machine's virtio disk);
    /// a submitter beyond that sleeps in the kernel until one finishes and
    /// dispatches to the device itself. `None` (default): the disks'
    /// [`Storage::request_queue_capacity`] (`Db` divides it among its
    /// workers), no limit where it is unknown. `Some(0)`: no limit.
    pub max_submitted: Option<u32>,
}

impl Default for IoConfig {
    fn default() -> Self {
        IoConfig {
            backend: BackendKind::IoUring,
            depth: 128,
            iopoll: Feature::Off,
            sqpoll: Feature::Off,
            register_files: true,
            register_buffers: true,
            submit_batch: 4,
            submit_busy_depth: 64,
            max_submitted: None,
        }
    }
}

/// The operation of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// Read `len` bytes at a logical offset into the buffer.
    Read,
    /// Write `len` bytes from the buffer at a logical offset.
    Write,
    /// A write that is durable when it completes (`RWF_DSYNC`: the data
    /// and the metadata needed to read it back, as a write followed by
    /// `fdatasync` of the range, in one request and one round trip).
    WriteDsync,
    /// fsync(2) one device (the request's `offset` is the device index).
    Fsync,
    /// fdatasync(2) one device (the request's `offset` is the device index).
    Fdatasync,
}

impl IoOp {
    fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::WriteDsync => "write (dsync)",
            IoOp::Fsync => "fsync",
            IoOp::Fdatasync => "fdatasync",
        }
    }
}

/// What went wrong with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoErrorKind {
    /// The kernel returned this errno.
    Os(i32),
    /// Fewer bytes than asked were transferred (0 for a read past the end).
    Short {
        /// Bytes transferred.
        done_bytes: u32,
    },
    /// Buffer, offset or length not aligned for direct I/O.
    Misaligned,
    /// The offset lies beyond the storage's capacity.
    OutOfRange,
    /// The channel already holds `depth` requests.
    QueueFull,
}

/// A failed request: the operation, the file, the offset and the cause.
#[derive(Clone, Debug)]
pub struct IoError {
    /// The operation.
    pub op: IoOp,
    /// The device file (None when the request never reached a device).
    pub path: Option<Arc<Path>>,
    /// The logical offset in the storage (bytes).
    pub offset: u64,
    /// The offset in the device file (bytes), when mapped.
    pub device_offset: Option<u64>,
    /// Requested length (bytes).
    pub len: u32,
    /// The cause.
    pub kind: IoErrorKind,
}

impl IoError {
    /// The errno, if the kernel reported one.
    pub fn errno(&self) -> Option<i32> {
        match self.kind {
            IoErrorKind::Os(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} bytes at offset {}",
            self.op.name(),
            self.len,
            self.offset
        )?;
        if let Some(path) = &self.path {
            write!(f, " of {}", path.display())?;
            if let Some(dev) = self.device_offset {
                if dev != self.offset {
                    write!(f, " (device offset {dev})")?;
                }
            }
        }
        f.write_str(" failed: ")?;
        match &self.kind {
            IoErrorKind::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
            IoErrorKind::Short { done_bytes: 0 } if self.op == IoOp::Read => {
                f.write_str("read past the end of the file")
            }
            IoErrorKind::Short { done_bytes } => {
                write!(f, "short transfer ({done_bytes} of {} bytes)", self.len)
            }
            IoErrorKind::Misaligned => write!(
                f,
                "buffer, offset and length must be multiples of {DIRECT_IO_ALIGN} bytes for direct I/O"
            ),
            IoErrorKind::OutOfRange => f.write_str("offset beyond the storage capacity"),
            IoErrorKind::QueueFull => f.write_str("channel queue full (depth reached)"),
        }
    }
}

impl std::error::Error for IoError {}
