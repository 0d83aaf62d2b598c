//! The synchronous backend: pread/pwrite/fsync performed at submit time.
//! It is the baseline against which the asynchronous backends are measured,
//! and the backend of every channel on a simulated disk.

use super::channel::Slot;
use super::Storage;
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
            // SAFETY: push's contract keeps slot.buf valid for len bytes
            // until the completion is reaped, which happens after this call.
            let res = unsafe { storage.perform(slot) };
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
