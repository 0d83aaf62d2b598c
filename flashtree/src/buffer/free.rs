//! The free page ids of a store, and which of them went back to the device.
//!
//! A page id is freed when a tree drops its page (a merge, or a tree
//! emptied). Its bytes on the device are garbage from then on, and the
//! device may have them back: `Storage::discard_pages` punches a hole in a
//! file or discards the range of a block device. That is safe only for a
//! page that no recovery can read again. Recovery starts from the last
//! completed checkpoint, and a page that checkpoint lists as free is never
//! read from the device again: the log after the checkpoint brings any
//! later use of it as a full image, since a newly allocated page is always
//! logged whole. A page freed after that checkpoint may still be live for
//! recovery (the group that freed it may never reach the log), so it waits
//! for the next checkpoint.
//!
//! A bulk load *reserves* a range of new ids for the tree it builds. Until
//! its commit is logged they are in no tree, and a checkpoint lists them
//! as free (so that a crash before the commit leaves them free); but they
//! are neither allocatable nor discarded. The commit takes the ids it
//! used into use and frees the rest; a failed load frees them all.
//!
//! # Contract
//! * Every free id is in exactly one of `kept` (its old bytes still on the
//!   device), `discarding` (handed to a discard, not allocatable),
//!   `discarded`, or a reserved range.
//! * [`FreePages::take_for_discard`] hands out only ids that the caller's
//!   completed checkpoint lists as free and that are still free; the
//!   caller discards them, then returns them with
//!   [`FreePages::discard_done`]. Allocation never hands out an id in
//!   between.

use super::PageId;

/// The free page ids (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct FreePages {
    kept: Vec<PageId>,
    discarding: Vec<PageId>,
    discarded: Vec<PageId>,
    /// Ranges (first, count) reserved by bulk loads in progress.
    reserved: Vec<(PageId, u64)>,
}

impl FreePages {
    /// The free ids of a store just opened: none discarded yet (as far as
    /// this open knows; discarding a range twice is harmless).
    pub(crate) fn new(free: Vec<PageId>) -> FreePages {
        FreePages {
            kept: free,
            ..FreePages::default()
        }
    }

    /// An id to allocate: one whose bytes are still on the device first
    /// (no hole to fill), else a discarded one.
    pub(crate) fn pop(&mut self) -> Option<PageId> {
        self.kept.pop().or_else(|| self.discarded.pop())
    }

    /// Frees `pids`.
    pub(crate) fn extend(&mut self, pids: &[PageId]) {
        self.kept.extend_from_slice(pids);
    }

    /// Every free id (for a checkpoint, and for the store's checks),
    /// reserved ones included.
    pub(crate) fn all(&self) -> Vec<PageId> {
        let mut all = Vec::with_capacity(self.len());
        all.extend_from_slice(&self.kept);
        all.extend_from_slice(&self.discarding);
        all.extend_from_slice(&self.discarded);
        for &(first, count) in &self.reserved {
            all.extend(first..first + count);
        }
        all
    }

    /// How many ids are free (reserved ones included).
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
            + self.discarding.len()
            + self.discarded.len()
            + self
                .reserved
                .iter()
                .map(|&(_, n)| n as usize)
                .sum::<usize>()
    }

    /// Reserves the new ids `first..first + count` for a bulk load.
    pub(crate) fn reserve(&mut self, first: PageId, count: u64) {
        self.reserved.push((first, count));
    }

    /// Takes `pid` out of the reservation that holds it (it goes into
    /// use); the range shrinks, or splits in two. False when no
    /// reservation holds it.
    pub(crate) fn take_reserved(&mut self, pid: PageId) -> bool {
        let Some(i) = self
            .reserved
            .iter()
            .position(|&(first, count)| first <= pid && pid < first + count)
        else {
            return false;
        };
        let (first, count) = self.reserved.swap_remove(i);
        if pid > first {
            self.reserved.push((first, pid - first));
        }
        if pid + 1 < first + count {
            self.reserved.push((pid + 1, first + count - pid - 1));
        }
        true
    }

    /// Frees every id of `first..first + count` still reserved (what
    /// [`FreePages::take_reserved`] left of a reservation).
    pub(crate) fn release_reserved(&mut self, first: PageId, count: u64) {
        let end = first + count;
        let mut i = 0;
        while i < self.reserved.len() {
            let (f, n) = self.reserved[i];
            if f >= first && f + n <= end {
                self.reserved.swap_remove(i);
                self.kept.extend(f..f + n);
            } else {
                i += 1;
            }
        }
    }

    /// Ends the reservation of `first..`: its first `used` ids are taken
    /// into use (a committed load), the rest are free.
    pub(crate) fn end_reservation(&mut self, first: PageId, used: u64) {
        let Some(i) = self.reserved.iter().position(|&(f, _)| f == first) else {
            return; // ended already (a load whose commit was logged)
        };
        let (_, count) = self.reserved.swap_remove(i);
        debug_assert!(used <= count);
        self.kept.extend(first + used.min(count)..first + count);
    }

    /// Moves the kept ids that `free_at_checkpoint` (sorted) lists to
    /// `discarding` and returns them, sorted (when none, there is nothing
    /// to hand back with [`FreePages::discard_done`]).
    pub(crate) fn take_for_discard(&mut self, free_at_checkpoint: &[PageId]) -> Vec<PageId> {
        debug_assert!(free_at_checkpoint.windows(2).all(|w| w[0] <= w[1]));
        assert!(
            self.discarding.is_empty(),
            "two discards of free pages at once"
        );
        let (take, keep): (Vec<PageId>, Vec<PageId>) = self
            .kept
            .iter()
            .copied()
            .partition(|pid| free_at_checkpoint.binary_search(pid).is_ok());
        self.kept = keep;
        self.discarding = take;
        self.discarding.sort_unstable();
        self.discarding.clone()
    }

    /// The discard of the ids [`FreePages::take_for_discard`] handed out
    /// ended; `discarded`: whether it reached the device (else they stay
    /// kept).
    pub(crate) fn discard_done(&mut self, discarded: bool) {
        let ids = std::mem::take(&mut self.discarding);
        if discarded {
            self.discarded.extend(ids);
        } else {
            self.kept.extend(ids);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_free_at_the_checkpoint_and_still_free_are_discarded() {
        let mut free = FreePages::new(vec![3, 9, 4]);
        free.extend(&[20]); // freed after the checkpoint
        assert_eq!(free.take_for_discard(&[2, 3, 4, 9]), vec![3, 4, 9]);
        // Not allocatable while discarding.
        assert_eq!(free.pop(), Some(20));
        assert_eq!(free.pop(), None);
        let mut all = free.all();
        all.sort_unstable();
        assert_eq!(all, vec![3, 4, 9]);
        free.discard_done(true);
        // Discarded ids are not taken again.
        assert!(free.take_for_discard(&[3, 4, 9]).is_empty());
        free.discard_done(true);
        assert_eq!(free.len(), 3);
        let mut popped: Vec<PageId> = std::iter::from_fn(|| free.pop()).collect();
        popped.sort_unstable();
        assert_eq!(popped, vec![3, 4, 9]);
    }

    #[test]
    fn ids_taken_from_a_reservation_leave_the_rest_reserved() {
        let mut free = FreePages::new(vec![]);
        free.reserve(10, 5);
        assert!(free.take_reserved(10));
        assert!(free.take_reserved(12));
        assert!(!free.take_reserved(12));
        assert!(!free.take_reserved(15));
        let mut all = free.all();
        all.sort_unstable();
        assert_eq!(all, vec![11, 13, 14]);
        assert_eq!(free.pop(), None);
        free.release_reserved(10, 5);
        let mut kept = vec![];
        while let Some(pid) = free.pop() {
            kept.push(pid);
        }
        kept.sort_unstable();
        assert_eq!(kept, vec![11, 13, 14]);
    }

    #[test]
    fn reserved_ids_are_free_for_checkpoints_but_not_allocatable_nor_discarded() {
        let mut free = FreePages::new(vec![2]);
        free.reserve(10, 4);
        assert_eq!(free.len(), 5);
        let mut all = free.all();
        all.sort_unstable();
        assert_eq!(all, vec![2, 10, 11, 12, 13]);
        assert_eq!(free.take_for_discard(&[2, 10, 11, 12, 13]), vec![2]);
        free.discard_done(true);
        assert_eq!(free.pop(), Some(2));
        assert_eq!(free.pop(), None);
        // A commit that used 3 of the 4 ids frees the last one.
        free.end_reservation(10, 3);
        assert_eq!(free.all(), vec![13]);
        assert_eq!(free.pop(), Some(13));
    }

    #[test]
    fn a_failed_discard_keeps_the_ids() {
        let mut free = FreePages::new(vec![5, 6]);
        assert_eq!(free.take_for_discard(&[5, 6]), vec![5, 6]);
        free.discard_done(false);
        assert_eq!(free.take_for_discard(&[5, 6]), vec![5, 6]);
    }
}
