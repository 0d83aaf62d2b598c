//! The libaio backend, through the raw Linux AIO syscalls (no maintained
//! crate exists): io_setup, io_submit, io_getevents, io_destroy.

use super::channel::Slot;
use super::IoOp;
use crate::error::{Error, Result};

/// Kernel `struct iocb` (x86_64/aarch64 little-endian layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// Kernel `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_FSYNC: u16 = 2;
const IOCB_CMD_FDSYNC: u16 = 3;

pub(crate) struct AioBackend {
    ctx: libc::c_ulong,
    /// One iocb per slot, at a stable address until its completion.
    iocbs: Vec<Iocb>,
    /// Pointers to queued iocbs, in push order, not yet accepted by io_submit.
    queued: Vec<*mut Iocb>,
    /// Requests the kernel refused at io_submit: (slot, -errno).
    refused: Vec<(u32, i64)>,
    events: Vec<IoEvent>,
}

impl AioBackend {
    pub(crate) fn new(depth: u32) -> Result<AioBackend> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the context id into ctx.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_setup,
                depth as libc::c_long,
                &mut ctx as *mut libc::c_ulong,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::Unsupported(format!(
                "io_setup({depth}) failed: {e} (raise /proc/sys/fs/aio-max-nr or lower the depth)"
            )));
        }
        Ok(AioBackend {
            ctx,
            iocbs: vec![Iocb::default(); depth as usize],
            queued: Vec::with_capacity(depth as usize),
            refused: Vec::new(),
            events: vec![IoEvent::default(); depth as usize],
        })
    }

    pub(crate) fn queue(&mut self, index: u32, slot: &Slot, fd: i32) {
        let opcode = match slot.op {
            IoOp::Read => IOCB_CMD_PREAD,
            IoOp::Write | IoOp::WriteDsync => IOCB_CMD_PWRITE,
            IoOp::Fsync => IOCB_CMD_FSYNC,
            IoOp::Fdatasync => IOCB_CMD_FDSYNC,
        };
        let iocb = &mut self.iocbs[index as usize];
        *iocb = Iocb {
            aio_data: u64::from(index),
            aio_lio_opcode: opcode,
            aio_fildes: fd as u32,
            aio_buf: slot.buf as u64,
            aio_nbytes: u64::from(slot.len),
            aio_offset: slot.device_offset as i64,
            aio_rw_flags: if slot.op == IoOp::WriteDsync {
                libc::RWF_DSYNC
            } else {
                0
            },
            ..Iocb::default()
        };
        self.queued.push(iocb as *mut Iocb);
    }

    /// io_submit of the oldest `limit` queued requests. A request the kernel refuses becomes
    /// an error completion; EAGAIN leaves the rest queued for the next call.
    pub(crate) fn submit(&mut self, limit: usize) -> Result<usize> {
        let mut done = 0;
        let end = self.queued.len().min(limit);
        while done < end {
            let rest = &mut self.queued[done..end];
            // SAFETY: each pointer addresses an iocb in self.iocbs, which is
            // never reallocated and stays untouched until its completion.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    rest.len() as libc::c_long,
                    rest.as_mut_ptr(),
                )
            };
            if rc > 0 {
                done += rc as usize;
                continue;
            }
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if rc == 0 || errno == libc::EAGAIN || errno == libc::EINTR {
                break;
            }
            // The first iocb was refused: complete it with the error.
            // SAFETY: the pointer is valid as above.
            let slot = unsafe { (*self.queued[done]).aio_data } as u32;
            self.refused.push((slot, -i64::from(errno)));
            done += 1;
        }
        self.queued.drain(..done);
        Ok(done)
    }

    pub(crate) fn reap(
        &mut self,
        min: usize,
        timeout: Option<std::time::Duration>,
        on_done: &mut dyn FnMut(u32, i64),
    ) -> Result<()> {
        let mut reaped = 0;
        for (slot, res) in self.refused.drain(..) {
            on_done(slot, res);
            reaped += 1;
        }
        let min = min.saturating_sub(reaped);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let limit = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        loop {
            let timeout: *const libc::timespec = match (&limit, min) {
                (_, 0) => &zero,
                (Some(limit), _) => limit,
                (None, _) => std::ptr::null(),
            };
            // SAFETY: events has room for events.len() entries; timeout is
            // null or points at a live timespec.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.ctx,
                    min as libc::c_long,
                    self.events.len() as libc::c_long,
                    self.events.as_mut_ptr(),
                    timeout,
                )
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(Error::Unsupported(format!("io_getevents failed: {e}")));
            }
            for event in &self.events[..rc as usize] {
                on_done(event.data as u32, event.res);
            }
            return Ok(());
        }
    }
}

impl Drop for AioBackend {
    fn drop(&mut self) {
        // SAFETY: destroys our own context; the channel drained it first.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
    }
}
