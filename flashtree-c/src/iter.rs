//! Iterators over a tree in key order (or reverse key order).

use crate::db::{ft_db, ft_tree_id, Store};
use crate::{bytes, ffi, ffi_value, ft_status, handle, handle_mut, Failure, FtResult, Out};
use engine::db::{Db, ScanDirection, Tree};
use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::Arc;

/// Records an iterator fetches per call into the engine.
const ITER_FETCH: usize = 256;

/// An iterator over one tree (opaque). Made by ft_iter_new, freed by
/// ft_iter_free. It fetches records in chunks as it goes, and sees changes
/// made to the parts of the tree it has not reached yet.
pub struct ft_iter {
    store: Arc<Store>,
    tree: Tree,
    reverse: bool,
    /// Where the next fetch starts (None: the first key, or the last one
    /// going backward), and whether a key equal to it was returned already.
    from: Option<Vec<u8>>,
    skip_equal: bool,
    fetched: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// The record the last ft_iter_next returned (its pointers point here).
    current: (Vec<u8>, Vec<u8>),
    done: bool,
}

impl ft_iter {
    /// Fetches the next records (at most ITER_FETCH).
    fn fetch(&mut self, db: &Db) -> FtResult {
        let direction = if self.reverse {
            ScanDirection::Backward
        } else {
            ScanDirection::Forward
        };
        for entry in db.range(self.tree, self.from.as_deref(), direction) {
            let (key, value) = entry?;
            if self.skip_equal && self.from.as_deref() == Some(key.as_slice()) {
                continue;
            }
            self.from = Some(key.clone());
            self.skip_equal = true;
            self.fetched.push_back((key, value));
            if self.fetched.len() == ITER_FETCH {
                return Ok(());
            }
        }
        self.done = true;
        Ok(())
    }
}

/// Sets *iter to an iterator over `tree`: forward (`reverse` 0) over the
/// keys >= `start` in ascending order, or backward (`reverse` nonzero) over
/// the keys <= `start` in descending order. `start` NULL (with `start_len`
/// 0) starts at the first key, or at the last one going backward. The
/// start key is copied.
///
/// # Safety
/// `db` must be NULL or an open handle; `start` NULL or `start_len`
/// readable bytes; `iter` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ft_iter_new(
    db: *const ft_db,
    tree: ft_tree_id,
    start: *const u8,
    start_len: usize,
    reverse: c_int,
    iter: *mut *mut ft_iter,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `iter` is NULL or writable.
        let out = unsafe { Out::new(iter, "iter (the out-pointer)") }?;
        out.set(std::ptr::null_mut());
        // SAFETY: the caller guarantees `db` is NULL or an open handle and
        // `start` NULL or `start_len` bytes unchanged during the call.
        let (store, from) =
            unsafe { (&handle(db, "db")?.store, bytes(start, start_len, "start")?) };
        let tree = store.tree(tree)?;
        // Fails now (not at the first ft_iter_next) when the store is closed.
        store.with_db(|_| Ok(()))?;
        out.set(Box::into_raw(Box::new(ft_iter {
            store: store.clone(),
            tree,
            reverse: reverse != 0,
            from: (!start.is_null()).then(|| from.to_vec()),
            skip_equal: false,
            fetched: VecDeque::new(),
            current: (Vec::new(), Vec::new()),
            done: false,
        })));
        Ok(())
    })
}

/// Moves to the next record. FT_OK: *key and *value point to its key and
/// value (owned by the iterator, valid until its next ft_iter_next or
/// ft_iter_free; never NULL), *key_len and *value_len are their lengths.
/// FT_NOT_FOUND: no more records (and it stays so). Any of the four
/// out-pointers may be NULL when that part is not wanted. After another
/// failure (an I/O error, FT_CLOSED) the iterator is where it was.
///
/// # Safety
/// `iter` must be NULL or a live iterator no other thread is using; the
/// out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ft_iter_next(
    iter: *mut ft_iter,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `iter` is NULL or a live iterator
        // used by nobody else now, and each out-pointer NULL or writable.
        let (it, key, key_len, value, value_len) = unsafe {
            (
                handle_mut(iter, "iter")?,
                Out::optional(key),
                Out::optional(key_len),
                Out::optional(value),
                Out::optional(value_len),
            )
        };
        if it.fetched.is_empty() && !it.done {
            let store = it.store.clone();
            store.with_db(|db| it.fetch(db))?;
        }
        let Some(record) = it.fetched.pop_front() else {
            return Err(Failure::new(ft_status::FT_NOT_FOUND, "no more records"));
        };
        it.current = record;
        let (k, v) = &it.current;
        if let Some(o) = key {
            o.set(k.as_ptr());
        }
        if let Some(o) = key_len {
            o.set(k.len());
        }
        if let Some(o) = value {
            o.set(v.as_ptr());
        }
        if let Some(o) = value_len {
            o.set(v.len());
        }
        Ok(())
    })
}

/// Frees an iterator (NULL is ignored); the pointers it returned become
/// invalid.
///
/// # Safety
/// `iter` must be NULL or an iterator from ft_iter_new not freed yet and
/// not in use.
#[no_mangle]
pub unsafe extern "C" fn ft_iter_free(iter: *mut ft_iter) {
    ffi_value((), || {
        if !iter.is_null() {
            // SAFETY: not NULL; the caller guarantees it came from
            // ft_iter_new (Box::into_raw), is not freed yet and not in use.
            drop(unsafe { Box::from_raw(iter) });
        }
    })
}
