//! The synchronous backend: pread/pwrite/fsync performed at submit time.
//! It is the baseline against which the asynchronous backends are measured.

use super::channel::Slot;
use super::{IoOp, Storage};
use std::collections::VecDeque;

pub(crate) struct SyncBackend {
    queued: Vec<u32>,
    done: VecDeque<(u32, i64)>,
}

impl SyncBackend {
    pub(crate) fn new(depth: u32) -> SyncBackend {
        SyncBackend {
            queued: Vec::with_capacity(depth as usize),
            done: VecDeque::with_capacity(depth as usize),
        }
    }

    pub(crate) fn queue(&mut self, index: u32) {
        self.queued.push(index);
    }

    /// Performs up to `limit` queued requests (oldest first) now; returns
    /// how many.
    pub(crate) fn submit(&mut self, slots: &[Slot], storage: &Storage, limit: usize) -> usize {
        let count = self.queued.len().min(limit);
        for index in self.queued.drain(..count) {
            let slot = &slots[index as usize];
            let fd = storage.fd(slot.device as usize);
            let res = perform(slot, fd);
            self.done.push_back((index, res));
        }
        count
    }

    pub(crate) fn reap(&mut self, on_done: &mut dyn FnMut(u32, i64)) {
        while let Some((index, res)) = self.done.pop_front() {
            on_done(index, res);
        }
    }
}

fn perform(slot: &Slot, fd: i32) -> i64 {
    let off = slot.device_offset as libc::off_t;
    let len = slot.len as usize;
    loop {
        // SAFETY: push's contract keeps slot.buf valid for len bytes until
        // the completion is reaped, which happens after this call.
        let rc = unsafe {
            match slot.op {
                IoOp::Read => libc::pread(fd, slot.buf.cast(), len, off) as i64,
                IoOp::Write => libc::pwrite(fd, slot.buf.cast(), len, off) as i64,
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
