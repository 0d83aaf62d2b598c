//! A page that a writer may be changing while it is read: the view an
//! optimistic latch ([`super::GuardO::racy_page`]) hands out.
//!
//! # Contract
//! - No Rust reference to the page's bytes is ever made. A shared reference
//!   (`&[u8]`) to bytes that change meanwhile is undefined behaviour: the
//!   compiler may assume they are stable, read them twice or once, and
//!   derive facts from one read that a second read contradicts, however the
//!   version check ends.
//! - Each read is one `read_volatile` of 1, 2, 4 or 8 bytes through a raw
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
use std::cmp::Ordering;
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

    /// The `N` (1, 2, 4 or 8) bytes at `at`, read once with one volatile
    /// load; zeros when they would pass the page's end.
    #[inline(always)]
    pub fn read<const N: usize>(self, at: usize) -> [u8; N] {
        const {
            assert!(
                N == 1 || N == 2 || N == 4 || N == 8,
                "a racy read is one word"
            )
        };
        if at > PAGE_SIZE - N {
            return [0; N];
        }
        // SAFETY: checked just above: `at + N <= PAGE_SIZE`.
        unsafe { self.read_in_page(at) }
    }

    /// The `N` (1, 2, 4 or 8) bytes at `at`, read once with one volatile
    /// load, without the check of [`RacyPage::read`] (for a binary search,
    /// whose slot indices are bounded by a clamped count).
    ///
    /// # Safety
    /// `at + N <= PAGE_SIZE`.
    #[inline(always)]
    pub unsafe fn read_in_page<const N: usize>(self, at: usize) -> [u8; N] {
        const {
            assert!(
                N == 1 || N == 2 || N == 4 || N == 8,
                "a racy read is one word"
            )
        };
        debug_assert!(at <= PAGE_SIZE - N);
        let mut bytes = [0; N];
        // SAFETY: the caller keeps `at + N <= PAGE_SIZE`, so the `N` bytes
        // lie inside the frame, which `from_raw`'s contract keeps readable
        // for `'a`. `Unaligned<_>` has alignment 1, so any address is
        // aligned for it, and every bit pattern is a valid integer. No
        // reference is made, and the load is done exactly once (see the
        // module docs for the race). (A volatile load of a `[u8; N]`
        // compiles to `N` one-byte loads; one of an unaligned integer is
        // one `mov` on x86-64.)
        unsafe {
            let word = self.start.add(at);
            match N {
                1 => bytes[..1].copy_from_slice(&[std::ptr::read_volatile(word)]),
                2 => bytes[..2].copy_from_slice(&volatile_word::<u16>(word).to_ne_bytes()),
                4 => bytes[..4].copy_from_slice(&volatile_word::<u32>(word).to_ne_bytes()),
                _ => bytes[..8].copy_from_slice(&volatile_word::<u64>(word).to_ne_bytes()),
            }
        }
        bytes
    }

    /// Bytes `at..at + len` (`len` clamped to 8) as a big-endian integer
    /// padded with zeros on the right, read by one volatile load of the 8
    /// bytes at `at` (or, near the page's end, of the page's last 8 bytes);
    /// 0 when `len` is 0 or the range passes the page's end. Such integers
    /// order like the bytes they hold when one of two is not a proper
    /// prefix of the other (ties need the lengths).
    #[inline(always)]
    pub fn read_be_padded(self, at: usize, len: usize) -> u64 {
        let len = len.min(8);
        if len == 0 || !in_page(at, len) {
            return 0;
        }
        let from = at.min(PAGE_SIZE - 8);
        // SAFETY: `from + 8 <= PAGE_SIZE`: inside the frame; a `u64` is
        // valid for any bits.
        let word = u64::from_be(unsafe { volatile_word::<u64>(self.start.add(from)) });
        // `at - from < 8` (`at + len <= PAGE_SIZE`, `len >= 1`), and
        // `len` is 1..=8: both shifts are below 64.
        (word << (8 * (at - from))) & (u64::MAX << (64 - 8 * len))
    }

    /// How bytes `at..at + len` order against `key` (as `Ord for [u8]`,
    /// 8 bytes at a time as big-endian words, then byte by byte); the
    /// range reads as empty if it passes the page's end. Each byte is read
    /// once; the loops are bounded by `len.min(key.len())`.
    #[inline]
    pub fn compare(self, at: usize, len: usize, key: &[u8]) -> Ordering {
        let len = if in_page(at, len) { len } else { 0 };
        let common = len.min(key.len());
        let (key_words, key_tail) = key[..common].as_chunks::<8>();
        for (i, word) in key_words.iter().enumerate() {
            // SAFETY: `at + 8 * i + 8 <= at + common <= PAGE_SIZE`
            // (`in_page` above): inside the frame; a `u64` is valid for
            // any bits.
            let page_word = unsafe { volatile_word::<u64>(self.start.add(at + 8 * i)) };
            let key_word = u64::from_ne_bytes(*word);
            if page_word != key_word {
                return u64::from_be(page_word).cmp(&u64::from_be(key_word));
            }
        }
        let done = 8 * key_words.len();
        for (i, byte) in key_tail.iter().enumerate() {
            // SAFETY: `at + done + i < at + common <= PAGE_SIZE`: inside
            // the frame.
            let page_byte = unsafe { std::ptr::read_volatile(self.start.add(at + done + i)) };
            if page_byte != *byte {
                return page_byte.cmp(byte);
            }
        }
        len.cmp(&key.len())
    }

    /// Appends bytes `at..at + len` to `out`; nothing if the range passes
    /// the page's end. Read by volatile loads of 16 bytes (one `movups` on
    /// x86-64, whose SSE2 is always there), the last one ending at the
    /// range's end and so overlapping the one before unless `len` is a
    /// multiple of 16; below 16 bytes, two overlapping loads of 8, then
    /// bytes one by one below 8. A byte two loads cover is read twice and
    /// written twice, the second time last: under a race the two reads may
    /// disagree, and the copy is as untrusted as any other read until the
    /// latch validates. A row's value is copied with a few loads, not one
    /// per byte, and with no loop for the tail.
    #[inline]
    pub fn copy_into(self, at: usize, len: usize, out: &mut Vec<u8>) {
        if !in_page(at, len) {
            return;
        }
        out.reserve(len);
        let old_len = out.len();
        // SAFETY: `at + len <= PAGE_SIZE` (`in_page`), and each load below
        // starts at or after `at` and ends at or before `at + len`, so it
        // lies inside the frame; the loaded types are valid for any bits.
        // `reserve` made room for `len` bytes after `old_len`; every one of
        // them is written (some twice) before `set_len` makes them part of
        // the vector.
        unsafe {
            let (from, to) = (self.start.add(at), out.as_mut_ptr().add(old_len));
            #[cfg(target_arch = "x86_64")]
            if len >= 16 {
                use std::arch::x86_64::__m128i;
                let mut done = 0;
                while done + 16 < len {
                    let block = volatile_word::<__m128i>(from.add(done));
                    std::ptr::write_unaligned(to.add(done).cast::<__m128i>(), block);
                    done += 16;
                }
                let last = len - 16;
                let block = volatile_word::<__m128i>(from.add(last));
                std::ptr::write_unaligned(to.add(last).cast::<__m128i>(), block);
                out.set_len(old_len + len);
                return;
            }
            let mut done = 0;
            while done + 8 < len {
                let word = volatile_word::<u64>(from.add(done));
                std::ptr::write_unaligned(to.add(done).cast::<u64>(), word);
                done += 8;
            }
            if len >= 8 {
                let last = len - 8;
                let word = volatile_word::<u64>(from.add(last));
                std::ptr::write_unaligned(to.add(last).cast::<u64>(), word);
            } else {
                while done < len {
                    to.add(done).write(std::ptr::read_volatile(from.add(done)));
                    done += 1;
                }
            }
            out.set_len(old_len + len);
        }
    }
}

/// True if `at..at + len` lies inside a page (no overflow on garbage).
#[inline(always)]
fn in_page(at: usize, len: usize) -> bool {
    at <= PAGE_SIZE && len <= PAGE_SIZE - at
}

/// An integer at any address: `repr(packed)` makes its alignment 1.
#[repr(C, packed)]
#[derive(Clone, Copy)]
struct Unaligned<T>(T);

/// One volatile load of the integer (or SSE2 vector) at `at`, whatever its
/// alignment.
///
/// # Safety
/// `at` must be valid for reads of `size_of::<T>()` bytes, and every bit
/// pattern of them must be a valid `T` (true of the integer and vector
/// types used here).
#[inline(always)]
unsafe fn volatile_word<T: Copy>(at: *const u8) -> T {
    // SAFETY: the caller's contract; `Unaligned<T>` has alignment 1, so
    // `at` is aligned for it. The field is copied out by value.
    unsafe { std::ptr::read_volatile(at.cast::<Unaligned<T>>()) }.0
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
        // SAFETY: inside the page.
        assert_eq!(
            unsafe { racy.read_in_page::<4>(PAGE_SIZE - 4) },
            [252, 253, 254, 255]
        );
        assert_eq!(racy.read_be_padded(1, 3), 0x0102_0300_0000_0000);
        assert_eq!(racy.read_be_padded(8, 8), 0x0809_0a0b_0c0d_0e0f);
        assert_eq!(racy.read_be_padded(8, 20), 0x0809_0a0b_0c0d_0e0f);
        assert_eq!(racy.read_be_padded(PAGE_SIZE - 2, 2), 0xfeff_0000_0000_0000);
        assert_eq!(racy.read_be_padded(PAGE_SIZE - 1, 2), 0);
        assert_eq!(racy.read_be_padded(5, 0), 0);
        for at in [0, 3, PAGE_SIZE - 130, PAGE_SIZE - 17] {
            for len in 0..=(PAGE_SIZE - at).min(130) {
                let mut out = vec![7u8];
                racy.copy_into(at, len, &mut out);
                assert_eq!(out[0], 7);
                assert_eq!(&out[1..], &page[at..at + len], "at {at} len {len}");
            }
        }
        let mut out = Vec::new();
        racy.copy_into(PAGE_SIZE - 4, 5, &mut out);
        assert!(out.is_empty(), "a range past the end copies nothing");
        for at in PAGE_SIZE - 12..PAGE_SIZE {
            for len in 1..=(PAGE_SIZE - at).min(8) {
                let mut expected = [0u8; 8];
                expected[..len].copy_from_slice(&page[at..at + len]);
                assert_eq!(racy.read_be_padded(at, len), u64::from_be_bytes(expected));
            }
        }
    }
}
