//! One worker's I/O channel to every device of a [`Storage`].
//!
//! The channel owns a slot table bounded by `depth`: a slot holds everything
//! needed to report a request (operation, device, offsets, length, the
//! caller's `user_data`) from the moment `push` accepts it until its
//! completion is handed out. The kernel sees only the slot index, so every
//! completion can be matched and reported, including those the kernel
//! refuses at submission.

use super::aio::AioBackend;
use super::sync::SyncBackend;
use super::uring::UringBackend;
use super::{
    BackendKind, IoConfig, IoError, IoErrorKind, IoOp, Storage, WriteClass, DIRECT_IO_ALIGN,
};
use crate::error::{Error, Result};
use std::marker::PhantomData;
use std::sync::Arc;

/// One request. `buf` must stay valid and untouched until the request's
/// completion has been returned by `poll` or `wait`.
#[derive(Clone, Copy, Debug)]
pub struct IoRequest {
    /// The operation.
    pub op: IoOp,
    /// Logical byte offset (for syncs: the device index).
    pub offset: u64,
    /// Buffer of `len` bytes (null for syncs).
    pub buf: *mut u8,
    /// Bytes to transfer (0 for syncs).
    pub len: u32,
    /// Returned unchanged in the completion (a task id, a frame id, …).
    pub user_data: u64,
    /// None: `offset` is a logical offset in the striped data space.
    /// Some(device): `offset` is an offset in that extra file (a device
    /// index past the data devices, see [`Storage::data_device_count`]).
    pub file: Option<u32>,
    /// What a write carries (reads and syncs: [`WriteClass::DataCold`],
    /// unused).
    pub class: WriteClass,
}

impl IoRequest {
    /// A read of `len` bytes at `offset` into `buf`.
    pub fn read(offset: u64, buf: *mut u8, len: u32, user_data: u64) -> IoRequest {
        IoRequest {
            op: IoOp::Read,
            offset,
            buf,
            len,
            user_data,
            file: None,
            class: WriteClass::DataCold,
        }
    }

    /// A write of `len` bytes from `buf` at `offset`.
    pub fn write(offset: u64, buf: *const u8, len: u32, user_data: u64) -> IoRequest {
        IoRequest {
            op: IoOp::Write,
            offset,
            buf: buf as *mut u8,
            len,
            user_data,
            file: None,
            class: WriteClass::DataCold,
        }
    }

    /// A read of `len` bytes at `offset` of extra file `device`.
    pub fn read_file(device: usize, offset: u64, buf: *mut u8, len: u32, user_data: u64) -> Self {
        IoRequest {
            file: Some(device as u32),
            ..IoRequest::read(offset, buf, len, user_data)
        }
    }

    /// A write of `len` bytes at `offset` of extra file `device` (class
    /// [`WriteClass::Log`], what extra files hold).
    pub fn write_file(
        device: usize,
        offset: u64,
        buf: *const u8,
        len: u32,
        user_data: u64,
    ) -> Self {
        IoRequest {
            file: Some(device as u32),
            class: WriteClass::Log,
            ..IoRequest::write(offset, buf, len, user_data)
        }
    }

    /// The same request carrying `class`.
    pub fn with_class(self, class: WriteClass) -> Self {
        IoRequest { class, ..self }
    }

    /// A write of `len` bytes at `offset` of extra file `device`, durable
    /// when it completes ([`IoOp::WriteDsync`]).
    pub fn write_file_dsync(
        device: usize,
        offset: u64,
        buf: *const u8,
        len: u32,
        user_data: u64,
    ) -> Self {
        IoRequest {
            op: IoOp::WriteDsync,
            ..IoRequest::write_file(device, offset, buf, len, user_data)
        }
    }

    /// An fdatasync of device `device` (or an fsync with `full`).
    pub fn sync(device: usize, full: bool, user_data: u64) -> IoRequest {
        let op = if full { IoOp::Fsync } else { IoOp::Fdatasync };
        IoRequest {
            op,
            offset: device as u64,
            buf: std::ptr::null_mut(),
            len: 0,
            user_data,
            file: None,
            class: WriteClass::DataCold,
        }
    }
}

/// The outcome of one request.
#[derive(Debug)]
pub struct IoCompletion {
    /// The request's `user_data`.
    pub user_data: u64,
    /// Ok when all bytes were transferred (or the sync succeeded).
    pub result: std::result::Result<(), IoError>,
}

/// A request from acceptance to completion.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) op: IoOp,
    pub(crate) offset: u64,
    pub(crate) device: u32,
    pub(crate) device_offset: u64,
    pub(crate) buf: *mut u8,
    pub(crate) len: u32,
    pub(crate) user_data: u64,
    pub(crate) class: WriteClass,
}

const EMPTY_SLOT: Slot = Slot {
    op: IoOp::Read,
    offset: 0,
    device: 0,
    device_offset: 0,
    buf: std::ptr::null_mut(),
    len: 0,
    user_data: 0,
    class: WriteClass::DataCold,
};

/// Kernel-facing part of a channel.
pub(crate) enum Backend {
    Uring(Box<UringBackend>),
    Aio(Box<AioBackend>),
    Sync(SyncBackend),
}

/// One worker's channel to all devices. Not `Sync`/`Send`-shared: each
/// worker thread builds and owns its own.
pub struct IoChannel {
    storage: Arc<Storage>,
    backend: Backend,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    /// Accepted by push but not yet handed to the kernel.
    queued_count: u32,
    submit_batch: u32,
    submit_busy_depth: u32,
    /// `IoConfig::max_submitted` resolved; usize::MAX = no limit.
    max_submitted: usize,
    notes: Vec<String>,
    _not_sync: PhantomData<*mut ()>,
}

impl IoChannel {
    /// Builds a channel with `config` on `storage`. Kernel features that are
    /// refused produce an error naming the flag (`Feature::On`) or a note and
    /// a fallback (`Feature::Auto`); see [`IoChannel::notes`].
    pub fn new(storage: Arc<Storage>, config: &IoConfig) -> Result<IoChannel> {
        if config.depth == 0 || config.depth > 65536 {
            return Err(Error::InvalidArgument(format!(
                "I/O depth {} out of range 1..=65536",
                config.depth
            )));
        }
        let mut notes = Vec::new();
        let mut max_submitted = match config
            .max_submitted
            .unwrap_or_else(|| storage.request_queue_capacity().unwrap_or(0))
        {
            0 => usize::MAX,
            n => n as usize,
        };
        // A simulated disk is reached through the synchronous backend.
        let kind = if storage.is_simulated() {
            BackendKind::Sync
        } else {
            config.backend
        };
        let backend = match kind {
            BackendKind::IoUring => {
                Backend::Uring(Box::new(UringBackend::new(&storage, config, &mut notes)?))
            }
            BackendKind::Libaio => Backend::Aio(Box::new(AioBackend::new(config.depth)?)),
            BackendKind::Sync => Backend::Sync(SyncBackend::new(config.depth)),
        };
        if let Backend::Uring(uring) = &backend {
            if uring.is_sqpoll() && max_submitted != usize::MAX {
                notes.push(format!(
                    "io_uring SQPOLL takes every queued request: no limit of {max_submitted} submitted requests"
                ));
                max_submitted = usize::MAX;
            }
        }
        Ok(IoChannel {
            storage,
            backend,
            slots: vec![EMPTY_SLOT; config.depth as usize],
            free_slots: (0..config.depth).rev().collect(),
            queued_count: 0,
            submit_batch: config.submit_batch,
            submit_busy_depth: config.submit_busy_depth,
            max_submitted,
            notes,
            _not_sync: PhantomData,
        })
    }

    /// A channel on the synchronous backend for one request at a time (open,
    /// recovery and tools: [`IoChannel::run`]), `depth` requests at most.
    pub fn blocking(storage: Arc<Storage>, depth: u32) -> Result<IoChannel> {
        IoChannel::new(
            storage,
            &IoConfig {
                backend: BackendKind::Sync,
                depth,
                ..IoConfig::default()
            },
        )
    }

    /// Runs `req` to its completion and returns its outcome; nothing else
    /// may be in flight on the channel.
    ///
    /// # Safety
    /// As for [`IoChannel::push`]; the buffer is free again on return.
    pub unsafe fn run(&mut self, req: IoRequest) -> Result<()> {
        debug_assert_eq!(self.in_flight(), 0, "run with other requests in flight");
        // SAFETY: the caller's contract; the completion is reaped below.
        unsafe { self.push(req) }?;
        let mut done = Vec::with_capacity(1);
        self.wait(1, &mut done)?;
        done.pop().expect("one completion").result?;
        Ok(())
    }

    /// Registers memory regions as io_uring fixed buffers; requests whose
    /// buffer lies inside one then use READ_FIXED/WRITE_FIXED. A no-op for
    /// other backends. Returns false (with a note) when the kernel refuses.
    ///
    /// # Safety
    /// Each region must stay allocated for the lifetime of the channel.
    pub unsafe fn register_buffers(&mut self, regions: &[(*mut u8, usize)]) -> bool {
        match &mut self.backend {
            // SAFETY: forwarded contract.
            Backend::Uring(uring) => unsafe { uring.register_buffers(regions, &mut self.notes) },
            _ => false,
        }
    }

    /// The backend in use.
    pub fn backend_kind(&self) -> BackendKind {
        match self.backend {
            Backend::Uring(_) => BackendKind::IoUring,
            Backend::Aio(_) => BackendKind::Libaio,
            Backend::Sync(_) => BackendKind::Sync,
        }
    }

    /// True when a write of the log is made durable by a sync request
    /// after it completed, not by the write itself (`RWF_DSYNC`): through
    /// io_uring, whose asynchronous data-sync writes a kernel work queue
    /// completed late here (see `wal::writer`), and on a simulated disk
    /// configured to test that path (`SimConfig::log_writes_then_sync`).
    pub fn log_writes_then_sync(&self) -> bool {
        match self.backend {
            Backend::Uring(_) => true,
            Backend::Aio(_) => false,
            Backend::Sync(_) => match self.storage.vfs() {
                super::Vfs::Sim(sim) => sim.log_writes_then_sync(),
                super::Vfs::Os => false,
            },
        }
    }

    /// Fallbacks and probe results worth telling the user.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The storage this channel writes to.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// Most requests in flight at once.
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    /// Requests accepted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// Requests accepted but not yet submitted.
    pub fn queued(&self) -> usize {
        self.queued_count as usize
    }

    /// Free places for new requests.
    pub fn free(&self) -> usize {
        self.free_slots.len()
    }

    /// Accepts a request into the next batch. Refuses (synchronously, without
    /// a completion) a full channel, a misaligned buffer/offset/length, an
    /// offset beyond capacity, or a bad device index.
    ///
    /// # Safety
    /// `req.buf` must be valid for `req.len` bytes (writable for reads) and
    /// stay valid and unaccessed by anyone else until this request's
    /// completion is returned from [`IoChannel::poll`] or [`IoChannel::wait`].
    pub unsafe fn push(&mut self, req: IoRequest) -> std::result::Result<(), IoError> {
        let slot = self.map_request(&req)?;
        let Some(index) = self.free_slots.pop() else {
            return Err(refused(&req, IoErrorKind::QueueFull));
        };
        self.slots[index as usize] = slot;
        let fd = self.storage.fd(slot.device as usize);
        match &mut self.backend {
            Backend::Uring(uring) => uring.queue(index, &slot, fd),
            Backend::Aio(aio) => aio.queue(index, &slot, fd),
            Backend::Sync(sync) => sync.queue(index),
        }
        self.queued_count += 1;
        let submitted_unfinished = self.in_flight() - self.queued_count as usize;
        let device_busy =
            self.submit_busy_depth > 0 && submitted_unfinished >= self.submit_busy_depth as usize;
        if self.submit_batch > 0 && self.queued_count >= self.submit_batch && !device_busy {
            // A failure here leaves the requests queued; the next explicit
            // submit reports it.
            let _ = self.submit();
        }
        Ok(())
    }

    fn map_request(&self, req: &IoRequest) -> std::result::Result<Slot, IoError> {
        if matches!(req.op, IoOp::Fsync | IoOp::Fdatasync) {
            if req.offset >= self.storage.device_count() as u64 {
                return Err(refused(req, IoErrorKind::OutOfRange));
            }
            return Ok(Slot {
                device: self.storage.io_device(req.offset as usize) as u32,
                device_offset: 0,
                ..slot_of(req)
            });
        }
        if self.storage.is_direct() && !(req.buf as usize).is_multiple_of(DIRECT_IO_ALIGN) {
            return Err(refused(req, IoErrorKind::Misaligned));
        }
        if req.buf.is_null() {
            return Err(refused(req, IoErrorKind::Misaligned));
        }
        let mapped = match req.file {
            None => self.storage.map(req.op, req.offset, req.len)?,
            Some(device) => self.storage.map_file(req.op, device, req.offset, req.len)?,
        };
        Ok(Slot {
            device: mapped.device,
            device_offset: mapped.device_offset,
            ..slot_of(req)
        })
    }

    /// Hands the queued requests to the kernel, oldest first, as many as
    /// `max_submitted` allows, in one batch (one syscall for io_uring and
    /// libaio; the sync backend performs them here). Returns how many were
    /// submitted. Requests the kernel refuses complete with an error.
    pub fn submit(&mut self) -> Result<usize> {
        let limit = self.submit_room();
        if limit == 0 {
            return Ok(0);
        }
        let submitted = match &mut self.backend {
            Backend::Uring(uring) => uring.submit(limit)?,
            Backend::Aio(aio) => aio.submit(limit)?,
            Backend::Sync(sync) => sync.submit(&self.slots, &self.storage, limit),
        };
        self.queued_count -= submitted as u32;
        Ok(submitted)
    }

    /// Queued requests that may go to the kernel now: all of them, or as
    /// many as keep the submitted, unfinished ones within `max_submitted`.
    fn submit_room(&self) -> usize {
        let queued = self.queued_count as usize;
        let unfinished = self.in_flight() - queued;
        queued.min(self.max_submitted.saturating_sub(unfinished))
    }

    /// Submitted requests that have not been reaped.
    pub fn submitted(&self) -> usize {
        self.in_flight() - self.queued_count as usize
    }

    /// Appends the completions that have arrived, without blocking.
    pub fn poll(&mut self, out: &mut Vec<IoCompletion>) -> Result<usize> {
        self.reap(0, None, out)
    }

    /// Submits what is queued (within `max_submitted`) and blocks until at
    /// least `min` completions have arrived (at most what is then
    /// submitted), appending them to `out`.
    pub fn wait(&mut self, min: usize, out: &mut Vec<IoCompletion>) -> Result<usize> {
        self.wait_timeout(min, None, out)
    }

    /// Like [`IoChannel::wait`], returning after `timeout` (if given) even
    /// when fewer than `min` completions arrived. Without the kernel's
    /// timed wait (io_uring before Linux 5.11) it waits not at all.
    pub fn wait_timeout(
        &mut self,
        min: usize,
        timeout: Option<std::time::Duration>,
        out: &mut Vec<IoCompletion>,
    ) -> Result<usize> {
        let limit = self.submit_room();
        let reapable = self.submitted() + limit;
        if let Backend::Uring(uring) = &mut self.backend {
            // One io_uring_enter both submits the queued requests and waits.
            let min = min.min(reapable);
            let before = out.len();
            let IoChannel {
                slots,
                free_slots,
                storage,
                queued_count,
                ..
            } = self;
            let submitted = uring.submit_and_reap(min, limit, timeout, &mut |index, res| {
                finish(slots, free_slots, storage, out, index, res)
            })?;
            *queued_count -= submitted as u32;
            return Ok(out.len() - before);
        }
        self.submit()?;
        let min = min.min(self.submitted());
        self.reap(min, timeout, out)
    }

    fn reap(
        &mut self,
        min: usize,
        timeout: Option<std::time::Duration>,
        out: &mut Vec<IoCompletion>,
    ) -> Result<usize> {
        let before = out.len();
        let IoChannel {
            backend,
            slots,
            free_slots,
            storage,
            ..
        } = self;
        let mut on_done =
            |index: u32, res: i64| finish(slots, free_slots, storage, out, index, res);
        match backend {
            Backend::Uring(uring) => {
                // `wait` takes its own path for io_uring; this is `poll`.
                debug_assert_eq!(min, 0);
                uring.reap_ready(&mut on_done)
            }
            Backend::Aio(aio) => aio.reap(min, timeout, &mut on_done)?,
            Backend::Sync(sync) => sync.reap(&mut on_done),
        }
        Ok(out.len() - before)
    }
}

impl Drop for IoChannel {
    /// Waits for everything in flight, so that no buffer is written by the
    /// kernel after the channel is gone.
    fn drop(&mut self) {
        let mut sink = Vec::new();
        let mut stalls = 0;
        while self.in_flight() > 0 && stalls < 1000 {
            sink.clear();
            match self.wait(1, &mut sink) {
                Ok(0) | Err(_) => stalls += 1,
                Ok(_) => {}
            }
        }
    }
}

fn slot_of(req: &IoRequest) -> Slot {
    Slot {
        op: req.op,
        offset: req.offset,
        device: 0,
        device_offset: 0,
        buf: req.buf,
        len: req.len,
        user_data: req.user_data,
        class: req.class,
    }
}

fn refused(req: &IoRequest, kind: IoErrorKind) -> IoError {
    IoError {
        op: req.op,
        path: None,
        offset: req.offset,
        device_offset: None,
        len: req.len,
        kind,
    }
}

/// Hands out the completion of slot `index` and frees the slot.
fn finish(
    slots: &[Slot],
    free_slots: &mut Vec<u32>,
    storage: &Storage,
    out: &mut Vec<IoCompletion>,
    index: u32,
    res: i64,
) {
    let slot = slots[index as usize];
    debug_assert!(!free_slots.contains(&index), "completion for a free slot");
    free_slots.push(index);
    out.push(IoCompletion {
        user_data: slot.user_data,
        result: check_result(&slot, res, storage),
    });
}

/// Turns a kernel result (bytes or -errno) into the completion's result.
fn check_result(slot: &Slot, res: i64, storage: &Storage) -> std::result::Result<(), IoError> {
    let kind = if res < 0 {
        IoErrorKind::Os(-res as i32)
    } else if res as u64 != u64::from(slot.len) {
        IoErrorKind::Short {
            done_bytes: res as u32,
        }
    } else {
        return Ok(());
    };
    Err(IoError {
        op: slot.op,
        path: Some(storage.device(slot.device as usize).path.clone()),
        offset: slot.offset,
        device_offset: Some(slot.device_offset),
        len: slot.len,
        kind,
    })
}
