//! Heap buffers aligned for direct I/O.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// A zeroed, page-aligned (4096-byte) heap buffer for O_DIRECT I/O.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`, like Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    const ALIGN: usize = 4096;

    /// Allocates `len_bytes` zeroed bytes aligned to 4096. `len_bytes` > 0.
    pub fn new(len_bytes: usize) -> AlignedBuf {
        assert!(len_bytes > 0, "AlignedBuf of zero bytes");
        let layout = Layout::from_size_align(len_bytes, Self::ALIGN).expect("buffer too large");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len: len_bytes,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Raw pointer for I/O requests.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Raw pointer for read-only use.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialized (zeroed) bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, Self::ALIGN).expect("layout was valid");
        // SAFETY: allocated in `new` with this exact layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
    }
}
