//! Write batches: puts and deletes over any trees of one store, applied
//! all or nothing by ft_write.

use crate::db::{ft_db, ft_tree_id, Store};
use crate::{bytes, ffi, ffi_value, handle, handle_mut, Failure, FtResult, Out};
use engine::db::{WriteBatch, WriteOptions};
use std::ffi::c_int;
use std::sync::Arc;

/// When ft_write returns (its `mode`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ft_write_mode {
    /// As the store's durability says (ft_options.durability).
    FT_WRITE_DEFAULT = 0,
    /// Once the batch is durable, whatever the store's durability (no
    /// effect without a log).
    FT_WRITE_SYNC = 1,
    /// Once the batch is logged in memory (durable within max_delay_ms,
    /// or at the next ft_sync).
    FT_WRITE_NO_SYNC = 2,
}

/// A batch of puts and deletes for one store (opaque). Made by
/// ft_batch_new, freed by ft_batch_free.
pub struct ft_batch {
    store: Arc<Store>,
    batch: WriteBatch,
}

/// Sets *batch to a new empty batch for the store `db` (its trees only).
///
/// # Safety
/// `db` must be NULL or an open handle; `batch` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ft_batch_new(db: *const ft_db, batch: *mut *mut ft_batch) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `batch` is NULL or writable.
        let out = unsafe { Out::new(batch, "batch (the out-pointer)") }?;
        out.set(std::ptr::null_mut());
        // SAFETY: the caller guarantees `db` is NULL or an open handle.
        let store = unsafe { handle(db, "db") }?.store.clone();
        out.set(Box::into_raw(Box::new(ft_batch {
            store,
            batch: WriteBatch::new(),
        })));
        Ok(())
    })
}

/// Adds a put of `key` = `value` into `tree` (`value` may be NULL when
/// `value_len` is 0). Entries apply in order: a later entry for the same
/// key wins. A key or value beyond the limits, or more than
/// FT_MAX_BATCH_ENTRIES entries, is refused here (FT_INVALID_ARGUMENT) and
/// the batch is unchanged.
///
/// # Safety
/// `batch` must be NULL or a live batch no other thread is using; `key`
/// and `value` NULL or readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ft_batch_put(
    batch: *mut ft_batch,
    tree: ft_tree_id,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `batch` is NULL or a live batch used
        // by nobody else now, and `key` and `value` NULL or readable for
        // their lengths, unchanged during the call.
        let (b, key, value) = unsafe {
            (
                handle_mut(batch, "batch")?,
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
            )
        };
        let tree = b.store.tree(tree)?;
        Ok(b.batch.put(tree, key, value)?)
    })
}

/// Adds a delete of `key` from `tree` (a missing key is no error when the
/// batch is written).
///
/// # Safety
/// `batch` must be NULL or a live batch no other thread is using; `key`
/// NULL or `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ft_batch_delete(
    batch: *mut ft_batch,
    tree: ft_tree_id,
    key: *const u8,
    key_len: usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `batch` is NULL or a live batch used
        // by nobody else now, and `key` NULL or `key_len` readable bytes.
        let (b, key) = unsafe { (handle_mut(batch, "batch")?, bytes(key, key_len, "key")?) };
        let tree = b.store.tree(tree)?;
        Ok(b.batch.delete(tree, key)?)
    })
}

/// Entries in the batch (0 for NULL).
///
/// # Safety
/// `batch` must be NULL or a live batch no other thread is changing.
#[no_mangle]
pub unsafe extern "C" fn ft_batch_len(batch: *const ft_batch) -> usize {
    // SAFETY: the caller guarantees `batch` is NULL or a live batch that
    // nobody changes during the call.
    ffi_value(0, || unsafe { batch.as_ref() }.map_or(0, |b| b.batch.len()))
}

/// Removes every entry, so the batch can be filled again.
///
/// # Safety
/// `batch` must be NULL or a live batch no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn ft_batch_clear(batch: *mut ft_batch) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `batch` is NULL or a live batch used
        // by nobody else now.
        unsafe { handle_mut(batch, "batch") }?.batch.clear();
        Ok(())
    })
}

/// Frees a batch (NULL is ignored). Its entries are not written.
///
/// # Safety
/// `batch` must be NULL or a batch from ft_batch_new not freed yet and
/// not in use.
#[no_mangle]
pub unsafe extern "C" fn ft_batch_free(batch: *mut ft_batch) {
    ffi_value((), || {
        if !batch.is_null() {
            // SAFETY: not NULL; the caller guarantees it came from
            // ft_batch_new (Box::into_raw), is not freed yet and not in use.
            drop(unsafe { Box::from_raw(batch) });
        }
    })
}

/// Applies `batch` to `db` atomically: after a crash either all of it or
/// none of it is there. `mode` is one of ft_write_mode. The batch is left
/// as it was (write it again, clear it or free it). A batch too large for
/// the store (more entries than a quarter of a worker's pool frames, or
/// too many leaves at once) is refused with FT_INVALID_ARGUMENT and
/// nothing of it is applied: split it.
///
/// # Safety
/// `db` must be NULL or an open handle; `batch` NULL or a live batch no
/// other thread is changing.
#[no_mangle]
pub unsafe extern "C" fn ft_write(db: *const ft_db, batch: *const ft_batch, mode: c_int) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `db` is NULL or an open handle and
        // `batch` NULL or a live batch nobody changes during the call.
        let (store, b) = unsafe { (&handle(db, "db")?.store, handle(batch, "batch")?) };
        if !Arc::ptr_eq(store, &b.store) {
            return Err(Failure::invalid(
                "the batch belongs to another store (ft_batch_new was given another ft_db)",
            ));
        }
        let options = write_options(mode)?;
        store.with_db(|db| Ok(db.write(&b.batch, options)?))
    })
}

fn write_options(mode: c_int) -> FtResult<WriteOptions> {
    let sync = match mode {
        0 => None,
        1 => Some(true),
        2 => Some(false),
        other => {
            return Err(Failure::invalid(format!(
                "mode must be FT_WRITE_DEFAULT (0), FT_WRITE_SYNC (1) or FT_WRITE_NO_SYNC (2), got {other}"
            )))
        }
    };
    Ok(WriteOptions { sync })
}
