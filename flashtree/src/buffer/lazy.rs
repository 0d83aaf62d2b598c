//! A large zero-initialized array in reserved virtual memory: only the pages
//! that are touched take RAM. Used for the per-page-id tables, which are
//! sized for the largest store, not the current one.

use std::marker::PhantomData;

/// `len` values of `T`, all bits zero at first. `T` must be valid when all
/// its bits are zero (atomics of integers are).
pub(crate) struct LazyArray<T> {
    ptr: *mut T,
    len: usize,
    _owns: PhantomData<T>,
}

// SAFETY: the array only holds `T`s, which are shared across threads via &T.
unsafe impl<T: Sync> Sync for LazyArray<T> {}
// SAFETY: as above; ownership of the mapping moves with the value.
unsafe impl<T: Send> Send for LazyArray<T> {}

impl<T> LazyArray<T> {
    /// Reserves `len` zeroed elements. Returns None when the kernel refuses.
    pub(crate) fn new(len: usize) -> Option<LazyArray<T>> {
        assert!(len > 0);
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        // SAFETY: anonymous private mapping; no file, no fixed address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        if bytes >= 2 << 20 {
            // Huge pages for large tables and the frame pool: random
            // accesses then miss the TLB far less. Advice only: the kernel
            // may ignore it. Given before any page is touched.
            // SAFETY: changes paging hints of the mapping just made.
            unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
        }
        Some(LazyArray {
            ptr: ptr.cast(),
            len,
            _owns: PhantomData,
        })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first element's address.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Element `index`, or None beyond the end (one comparison, for
    /// callers that handle an index out of range themselves).
    #[inline]
    pub(crate) fn try_get(&self, index: usize) -> Option<&T> {
        // SAFETY: in bounds (checked first); the mapping is zeroed, and
        // all-zero is a valid T.
        (index < self.len).then(|| unsafe { &*self.ptr.add(index) })
    }

    #[inline]
    pub(crate) fn get(&self, index: usize) -> &T {
        assert!(index < self.len, "index {index} beyond {}", self.len);
        // SAFETY: in bounds; the mapping is zeroed, and all-zero is a valid T.
        unsafe { &*self.ptr.add(index) }
    }
}

impl<T> Drop for LazyArray<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len * std::mem::size_of::<T>()) };
    }
}
