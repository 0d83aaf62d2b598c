//! A page that a writer may be changing while it is read: the view an
//! optimistic latch ([`super::GuardO::racy_page`]) hands out.
//!
//! # Contract
//! - No Rust reference to the page's bytes is ever made. A shared reference
//!   (`&[u8]`) to bytes that change meanwhile is undefined behaviour: the
//!   compiler may assume they are stable, read them twice or once, and
//!   derive facts from one read that a second read contradicts, however the
//!   version check ends.
//! - Each read is one `read_volatile` of at most 8 bytes through a raw
//!   pointer, done exactly once where the code does it: the compiler may
//!   neither repeat, merge nor drop it, nor assume two reads agree.
//! - Reads are bounds-checked here: one that would pass the 4096-byte frame
//!   returns zeros, so offsets and lengths read from a page mid-change
//!   cannot take a reader outside its frame.
//! - Every value read is untrusted until the optimistic latch validates;
//!   the node read paths (`btree::node::NodeView`) keep it bounded.
//!
//! # The limit
//! Rust's memory model has no non-atomic read that may race a write: a
//! volatile read racing the writer's plain stores is still a data race in
//! its terms, and only atomic accesses on both sides would remove it.
//! Volatile reads are what crossbeam's seqlock (`AtomicCell`'s fallback)
//! does for the same reason: they keep the optimizer from exploiting the
//! race (no reference, no assumed stability, each load done once), and on
//! x86-64 such a load of a racing byte returns some value the byte held.
//! Miri checks the node code only on one thread (`scripts/miri-node.sh`);
//! its data-race detector would flag any test of a reader racing a writer.

use crate::io::PAGE_SIZE;
use std::cell::UnsafeCell;
use std::marker::PhantomData;

/// The bytes of one frame, read only through volatile loads (see the
/// module docs). `Copy`: it is a pointer.
#[derive(Clone, Copy)]
pub struct RacyPage<'a> {
    /// First byte of a frame of `PAGE_SIZE` bytes, readable for `'a`.
    start: *const u8,
    /// The frame outlives `'a`; its bytes may change (`UnsafeCell`).
    frame: PhantomData<&'a UnsafeCell<[u8; PAGE_SIZE]>>,
}

// SAFETY: a `RacyPage` only reads, through volatile loads of bytes that
// stay allocated for `'a`; doing so from another thread is no different
// from doing it on this one (the races it tolerates are the same).
unsafe impl Send for RacyPage<'_> {}
// SAFETY: as for `Send`: shared use only reads.
unsafe impl Sync for RacyPage<'_> {}

impl<'a> RacyPage<'a> {
    /// A view of the `PAGE_SIZE` bytes at `start`.
    ///
    /// # Safety
    /// `start` must be valid for reads of `PAGE_SIZE` bytes for all of
    /// `'a` (allocated and mapped; other threads may write them meanwhile).
    #[inline]
    pub(crate) unsafe fn from_raw(start: *const u8) -> RacyPage<'a> {
        debug_assert!(!start.is_null());
        RacyPage {
            start,
            frame: PhantomData,
        }
    }

    /// The `N` bytes at `at`, read once with one volatile load; zeros when
    /// they would pass the page's end. `N` is at most 8.
    #[inline(always)]
    pub fn read<const N: usize>(self, at: usize) -> [u8; N] {
        const { assert!(N <= 8, "a racy read is at most one word") };
        if at > PAGE_SIZE - N {
            return [0; N];
        }
        // SAFETY: `at + N <= PAGE_SIZE`, so the bytes lie inside the frame,
        // which `from_raw`'s contract keeps readable for `'a`. `[u8; N]` has
        // alignment 1, so any address is aligned for it, and every bit
        // pattern is a valid `[u8; N]`. No reference is made, and the load
        // is done exactly once (see the module docs for the race).
        unsafe { std::ptr::read_volatile(self.start.add(at).cast::<[u8; N]>()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inside_the_page_and_zeros_past_it() {
        let page: Box<[u8; PAGE_SIZE]> = Box::new(std::array::from_fn(|i| i as u8));
        // SAFETY: the box outlives the view and nothing writes it meanwhile.
        let racy = unsafe { RacyPage::from_raw(page.as_ptr()) };
        assert_eq!(racy.read::<1>(0), [0]);
        assert_eq!(racy.read::<2>(PAGE_SIZE - 2), [254, 255]);
        assert_eq!(
            racy.read::<8>(PAGE_SIZE - 8),
            [248, 249, 250, 251, 252, 253, 254, 255]
        );
        assert_eq!(racy.read::<8>(PAGE_SIZE - 7), [0; 8]);
        assert_eq!(racy.read::<4>(usize::MAX), [0; 4]);
        assert_eq!(racy.read::<1>(PAGE_SIZE), [0]);
    }
}
