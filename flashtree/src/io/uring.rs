//! The io_uring backend: one ring per channel for all devices, batched
//! submission, optional registered files and buffers, probed IOPOLL/SQPOLL.

use super::channel::Slot;
use super::{AlignedBuf, Feature, IoConfig, IoOp, Storage};
use crate::error::{Error, Result};
use io_uring::{opcode, squeue, types, IoUring};

/// `io_uring_enter` flag: wait for / reap completions (the crate keeps its
/// copy private). The CQ holds twice the ring's entries and the channel never
/// has more requests than entries, so it cannot overflow and needs no flush.
const IORING_ENTER_GETEVENTS: u32 = 1;
/// io_uring_enter's argument is an `io_uring_getevents_arg` (a timeout).
const IORING_ENTER_EXT_ARG: u32 = 1 << 3;

/// Most bytes one registered buffer may span (kernel limit: 1 GiB).
const FIXED_BUFFER_MAX_BYTES: usize = 1 << 30;

pub(crate) struct UringBackend {
    ring: IoUring,
    fixed_files: bool,
    /// (start address, length) of each registered buffer, by index.
    fixed_buffers: Vec<(usize, usize)>,
    /// SQEs pushed to the ring but not yet submitted.
    sq_pending: usize,
}

impl UringBackend {
    pub(crate) fn new(
        storage: &Storage,
        config: &IoConfig,
        notes: &mut Vec<String>,
    ) -> Result<Self> {
        let entries = config.depth.next_power_of_two();
        let mut sqpoll = config.sqpoll;
        let mut iopoll = config.iopoll;
        loop {
            let ring = match build_ring(entries, iopoll, sqpoll) {
                Ok(ring) => ring,
                Err(e) if sqpoll == Feature::Auto => {
                    notes.push(format!(
                        "io_uring SQPOLL (IORING_SETUP_SQPOLL) refused ({e}); running without it"
                    ));
                    sqpoll = Feature::Off;
                    continue;
                }
                Err(e) if sqpoll == Feature::On => {
                    return Err(Error::Unsupported(format!(
                        "io_uring SQPOLL (IORING_SETUP_SQPOLL) refused by the kernel: {e}"
                    )));
                }
                Err(e) if iopoll != Feature::Off => {
                    if iopoll == Feature::On {
                        return Err(Error::Unsupported(format!(
                            "io_uring IOPOLL (IORING_SETUP_IOPOLL) refused by the kernel: {e}"
                        )));
                    }
                    notes.push(format!("io_uring IOPOLL (IORING_SETUP_IOPOLL) refused ({e}); using interrupt-driven completions"));
                    iopoll = Feature::Off;
                    continue;
                }
                Err(e) => {
                    return Err(Error::Unsupported(format!(
                    "io_uring_setup failed: {e} (kernel without io_uring? try --backend libaio)"
                )))
                }
            };
            let mut backend = UringBackend {
                ring,
                fixed_files: false,
                fixed_buffers: Vec::new(),
                sq_pending: 0,
            };
            if iopoll != Feature::Off {
                if let Err(errno) = backend.probe_read(storage) {
                    let why = std::io::Error::from_raw_os_error(errno);
                    if iopoll == Feature::On {
                        return Err(Error::Unsupported(format!(
                            "io_uring IOPOLL (IORING_SETUP_IOPOLL) refused by the device {}: {why}; polled completions need an NVMe device with poll queues (nvme.poll_queues) and O_DIRECT",
                            storage.device_path(0).display()
                        )));
                    }
                    notes.push(format!(
                        "io_uring IOPOLL (IORING_SETUP_IOPOLL) refused by the device {} ({why}); using interrupt-driven completions",
                        storage.device_path(0).display()
                    ));
                    iopoll = Feature::Off;
                    continue;
                }
                notes.push("io_uring IOPOLL enabled".into());
            }
            if sqpoll != Feature::Off {
                notes.push("io_uring SQPOLL enabled".into());
            }
            if config.register_files {
                backend.register_files(storage, notes);
            }
            return Ok(backend);
        }
    }

    /// One read of the first 4 KiB of device 0, to see whether the device
    /// accepts the ring's flags (IOPOLL fails here with EOPNOTSUPP).
    fn probe_read(&mut self, storage: &Storage) -> std::result::Result<(), i32> {
        if storage.capacity_bytes() == 0 {
            return Ok(());
        }
        let mut buf = AlignedBuf::new(4096);
        let sqe = opcode::Read::new(types::Fd(storage.fd(0)), buf.as_mut_ptr(), 4096)
            .offset(0)
            .build()
            .user_data(0);
        // SAFETY: buf outlives the request: we wait for its completion below
        // before returning (or the ring is dropped, which cancels and waits).
        unsafe { self.ring.submission().push(&sqe).map_err(|_| libc::EBUSY)? };
        self.ring
            .submit_and_wait(1)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        let cqe = self.ring.completion().next().ok_or(libc::EIO)?;
        if cqe.result() < 0 {
            return Err(-cqe.result());
        }
        Ok(())
    }

    fn register_files(&mut self, storage: &Storage, notes: &mut Vec<String>) {
        let fds: Vec<i32> = (0..storage.device_count()).map(|i| storage.fd(i)).collect();
        match self.ring.submitter().register_files(&fds) {
            Ok(()) => self.fixed_files = true,
            Err(e) => notes.push(format!(
                "io_uring file registration refused ({e}); using plain descriptors"
            )),
        }
    }

    /// # Safety
    /// The regions must outlive the ring.
    pub(crate) unsafe fn register_buffers(
        &mut self,
        regions: &[(*mut u8, usize)],
        notes: &mut Vec<String>,
    ) -> bool {
        let mut iovecs = Vec::new();
        for &(ptr, len) in regions {
            let mut start = 0;
            while start < len {
                let piece = (len - start).min(FIXED_BUFFER_MAX_BYTES);
                // SAFETY: start < len keeps the pointer inside the region.
                let base = unsafe { ptr.add(start) };
                iovecs.push(libc::iovec {
                    iov_base: base.cast(),
                    iov_len: piece,
                });
                start += piece;
            }
        }
        if iovecs.len() > u16::MAX as usize {
            notes.push("too many buffer regions to register; using plain buffers".into());
            return false;
        }
        // SAFETY: the caller keeps the regions alive for the ring's lifetime.
        match unsafe { self.ring.submitter().register_buffers(&iovecs) } {
            Ok(()) => {
                self.fixed_buffers = iovecs
                    .iter()
                    .map(|v| (v.iov_base as usize, v.iov_len))
                    .collect();
                true
            }
            Err(e) => {
                notes.push(format!("io_uring buffer registration refused ({e}); using plain buffers (raise RLIMIT_MEMLOCK to enable)"));
                false
            }
        }
    }

    fn fixed_buffer_index(&self, buf: *mut u8, len: u32) -> Option<u16> {
        let start = buf as usize;
        let end = start + len as usize;
        self.fixed_buffers
            .iter()
            .position(|&(base, size)| start >= base && end <= base + size)
            .map(|i| i as u16)
    }

    pub(crate) fn queue(&mut self, index: u32, slot: &Slot, fd: i32) {
        let sqe = self.build_sqe(slot, fd).user_data(u64::from(index));
        // SAFETY: the SQ has at least `depth` entries and the channel never
        // holds more than `depth` requests, so there is room; the buffer's
        // validity until completion is the caller's contract of `push`.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        debug_assert!(pushed.is_ok(), "submission queue larger than depth");
        if pushed.is_err() {
            // Cannot happen by construction; flush and retry to stay correct.
            let _ = self.ring.submit();
            // SAFETY: as above.
            unsafe {
                self.ring
                    .submission()
                    .push(&sqe)
                    .expect("submission queue full after flush")
            };
        }
        self.sq_pending += 1;
    }

    fn build_sqe(&self, slot: &Slot, fd: i32) -> squeue::Entry {
        let device = slot.device;
        let off = slot.device_offset;
        macro_rules! target {
            ($make:expr) => {
                if self.fixed_files {
                    $make(types::Fixed(device))
                } else {
                    $make(types::Fd(fd))
                }
            };
        }
        match slot.op {
            IoOp::Read => match self.fixed_buffer_index(slot.buf, slot.len) {
                Some(b) => target!(|t| opcode::ReadFixed::new(t, slot.buf, slot.len, b)
                    .offset(off)
                    .build()),
                None => target!(|t| opcode::Read::new(t, slot.buf, slot.len).offset(off).build()),
            },
            IoOp::Write => match self.fixed_buffer_index(slot.buf, slot.len) {
                Some(b) => target!(|t| opcode::WriteFixed::new(t, slot.buf, slot.len, b)
                    .offset(off)
                    .build()),
                None => target!(|t| opcode::Write::new(t, slot.buf, slot.len)
                    .offset(off)
                    .build()),
            },
            IoOp::WriteDsync => match self.fixed_buffer_index(slot.buf, slot.len) {
                Some(b) => target!(|t| opcode::WriteFixed::new(t, slot.buf, slot.len, b)
                    .offset(off)
                    .rw_flags(libc::RWF_DSYNC)
                    .build()),
                None => target!(|t| opcode::Write::new(t, slot.buf, slot.len)
                    .offset(off)
                    .rw_flags(libc::RWF_DSYNC)
                    .build()),
            },
            IoOp::Fsync => target!(|t| opcode::Fsync::new(t).build()),
            IoOp::Fdatasync => target!(|t| opcode::Fsync::new(t)
                .flags(types::FsyncFlags::DATASYNC)
                .build()),
        }
    }

    /// Submits up to `limit` pending SQEs (oldest first) with one
    /// io_uring_enter. Transient refusals (EAGAIN, EBUSY, EINTR) leave them
    /// queued for the next call.
    pub(crate) fn submit(&mut self, limit: usize) -> Result<usize> {
        match self.enter(limit, 0) {
            Ok(n) => {
                let n = n.min(self.sq_pending);
                self.sq_pending -= n;
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(Error::Unsupported(format!(
                "io_uring_enter (submit) failed: {e}"
            ))),
        }
    }

    /// Reaps what has completed without waiting (waiting goes through
    /// [`UringBackend::submit_and_reap`]).
    pub(crate) fn reap_ready(&mut self, on_done: &mut dyn FnMut(u32, i64)) {
        if self.drain(on_done) > 0 {
            return;
        }
        // Polled rings only complete when asked to reap; with COOP_TASKRUN
        // finished requests are posted at the next kernel entry, and the
        // TASKRUN flag says some are waiting (a loop that is at its
        // submission limit may otherwise not enter the kernel for a while).
        if self.ring.params().is_setup_iopoll() || self.ring.submission().taskrun() {
            let _ = self.enter(0, 0);
            self.drain(on_done);
        }
    }

    /// True when a kernel thread polls the submission queue (it takes every
    /// SQE as soon as it is in the ring, so a submission limit cannot hold).
    pub(crate) fn is_sqpoll(&self) -> bool {
        self.ring.params().is_setup_sqpoll()
    }

    /// Submits up to `limit` pending SQEs and waits for `min` completions
    /// with as few io_uring_enter calls as possible (one in the common
    /// case). `min` must not exceed what will then be in the kernel. Returns
    /// how many requests were submitted.
    pub(crate) fn submit_and_reap(
        &mut self,
        min: usize,
        limit: usize,
        timeout: Option<std::time::Duration>,
        on_done: &mut dyn FnMut(u32, i64),
    ) -> Result<usize> {
        let pending_before = self.sq_pending;
        let mut reaped = self.drain(on_done);
        let mut limit = limit.min(self.sq_pending);
        while reaped < min || limit > 0 {
            let want = min.saturating_sub(reaped);
            let entered = match timeout {
                None => self.enter(limit, want),
                // Submit first, then wait with the timeout (a timed wait
                // that also submits may report the timeout, not the count).
                Some(_) if limit > 0 => self.enter(limit, 0),
                Some(timeout) if self.ring.params().is_feature_ext_arg() => {
                    match self.enter_timed(want, timeout) {
                        Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                            self.drain(on_done);
                            break;
                        }
                        entered => entered,
                    }
                }
                Some(_) => break,
            };
            match entered {
                Ok(n) => {
                    let n = n.min(limit);
                    self.sq_pending -= n;
                    limit -= n;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                    ) => {}
                Err(e) => {
                    return Err(Error::Unsupported(format!(
                        "io_uring_enter (submit and wait) failed: {e}"
                    )))
                }
            }
            reaped += self.drain(on_done);
            if want == 0 {
                break;
            }
        }
        Ok(pending_before - self.sq_pending)
    }

    /// One io_uring_enter: submits the oldest `to_submit` (at most the
    /// pending) SQEs and waits for `want` completions. Returns how many SQEs
    /// the kernel took.
    fn enter(&mut self, to_submit: usize, want: usize) -> std::io::Result<usize> {
        let to_submit = to_submit.min(self.sq_pending);
        let taskrun = self.ring.submission().taskrun();
        let params = self.ring.params();
        let submitter = self.ring.submitter();
        if params.is_setup_sqpoll() {
            // The kernel thread takes every SQE in the ring (the channel
            // sets no limit with SQPOLL); this call only wakes it or waits.
            // The crate returns what is still in the ring, not what was
            // taken: count everything pending as handed over.
            let pending = self.sq_pending;
            if want > 0 {
                submitter.submit_and_wait(want)?;
            } else {
                submitter.submit()?;
            }
            return Ok(pending);
        }
        let mut flags = 0;
        if want > 0 || params.is_setup_iopoll() || taskrun {
            flags |= IORING_ENTER_GETEVENTS;
        }
        if to_submit == 0 && flags == 0 {
            return Ok(0);
        }
        // SAFETY: no extra argument is passed; the SQEs handed over were
        // pushed by `queue`, whose buffers stay valid until completion (the
        // caller's contract of `IoChannel::push`).
        unsafe { submitter.enter::<libc::sigset_t>(to_submit as u32, want as u32, flags, None) }
    }

    /// One io_uring_enter that submits nothing and waits for `want`
    /// completions or `timeout` (ETIME), whichever comes first.
    fn enter_timed(&mut self, want: usize, timeout: std::time::Duration) -> std::io::Result<usize> {
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        let submitter = self.ring.submitter();
        // SAFETY: `args` is a live io_uring_getevents_arg (SubmitArgs is a
        // transparent wrapper of it) and stays alive for the call; no SQE is
        // handed over.
        unsafe {
            submitter.enter::<types::SubmitArgs<'_, '_>>(
                0,
                want as u32,
                IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                Some(&args),
            )
        }
    }

    fn drain(&mut self, on_done: &mut dyn FnMut(u32, i64)) -> usize {
        let mut count = 0;
        for cqe in self.ring.completion() {
            on_done(cqe.user_data() as u32, i64::from(cqe.result()));
            count += 1;
        }
        count
    }
}

fn build_ring(entries: u32, iopoll: Feature, sqpoll: Feature) -> std::io::Result<IoUring> {
    let mut builder = IoUring::builder();
    if iopoll != Feature::Off {
        builder.setup_iopoll();
    }
    if sqpoll != Feature::Off {
        builder.setup_sqpoll(1000);
    } else {
        builder.setup_single_issuer();
        builder.setup_coop_taskrun();
        builder.setup_taskrun_flag();
    }
    builder.setup_cqsize(entries * 2);
    builder.build(entries)
}
