//! Opening and closing a store, trees, and single-key calls.

use crate::{bytes, ffi, ffi_value, handle, malloc_copy, slice, Failure, FtResult, Out};
use crate::{ft_status, FT_MAX_TREES};
use engine::db::{Db, Durability, Options, Tree};
use std::ffi::{c_char, c_int, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

// A `ft_db*` is used from many threads at once: the engine's Db must be
// shareable (Sync) and movable between threads (Send).
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Db>();
    shareable::<Store>();
};

/// When a write is durable (the field `durability` of ft_options).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ft_durability {
    /// No log (benchmarks): changes reach the disk when pages are evicted
    /// and at ft_close. A crash leaves the store unopenable
    /// (FT_NOT_CLOSED_CLEANLY).
    FT_DURABILITY_NONE = 0,
    /// A write returns when its changes are in memory; the log is written
    /// and synced at most max_delay_ms later. A crash loses at most the
    /// writes of that window, and never part of a batch.
    FT_DURABILITY_BUFFERED = 1,
    /// A write returns only once it would survive a power cut (the log is
    /// written durably, as fdatasync would make it). The default.
    FT_DURABILITY_SYNC = 2,
}

/// How to open a store. Start from ft_options_default() and change the
/// fields you need (so that fields added later keep their defaults when
/// you recompile).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ft_options {
    /// Buffer pool size in bytes (default 128 MiB; at least 32 KiB per
    /// worker).
    pub pool_bytes: u64,
    /// Bytes of each worker's log file, a preallocated ring (default
    /// 256 MiB; a multiple of 4096, at least 1 MiB). A checkpoint starts
    /// after a quarter of it, which bounds what recovery replays.
    pub wal_bytes_per_worker: u64,
    /// Worker threads (default: one per available core; 1 to 1024).
    pub workers: u32,
    /// One of ft_durability (default FT_DURABILITY_SYNC).
    pub durability: c_int,
    /// With FT_DURABILITY_BUFFERED, the longest a change waits in memory
    /// before its log write starts, in milliseconds (default 10; at least 1).
    pub max_delay_ms: u32,
    /// Nonzero: create the store if there is none (default 1). Zero: opening
    /// a directory without a store is FT_INVALID_ARGUMENT.
    pub create_if_missing: c_int,
    /// Nonzero: O_DIRECT I/O (default 1), which needs a file system that
    /// supports it (ext4, xfs; tmpfs only since Linux 6.6).
    pub direct_io: c_int,
}

/// The handle of a named tree, from ft_tree. Valid only with the ft_db it
/// came from, until that ft_db is closed. 0 is never a valid id.
pub type ft_tree_id = u64;

/// An open store (opaque). Made by ft_open, closed and freed by ft_close.
pub struct ft_db {
    pub(crate) store: Arc<Store>,
}

/// What a store's handles share: the engine (None once closed) and the
/// trees handed out as ids.
pub(crate) struct Store {
    db: RwLock<Option<Db>>,
    trees: RwLock<Vec<Tree>>,
    /// Tells this store's tree ids from other stores' ones.
    serial: u32,
}

/// Serial numbers of opened stores (the high half of their tree ids).
static NEXT_SERIAL: AtomicU32 = AtomicU32::new(1);

impl Store {
    /// Runs `f` on the open engine (FT_CLOSED once closed).
    pub(crate) fn with_db<T>(&self, f: impl FnOnce(&Db) -> FtResult<T>) -> FtResult<T> {
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(db) => f(db),
            None => Err(Failure::new(ft_status::FT_CLOSED, "the store is closed")),
        }
    }

    /// The tree an id names.
    pub(crate) fn tree(&self, id: ft_tree_id) -> FtResult<Tree> {
        let trees = self.trees.read().unwrap_or_else(|e| e.into_inner());
        let index = (id & u64::from(u32::MAX)) as usize;
        if id >> 32 == u64::from(self.serial) && (1..=trees.len()).contains(&index) {
            Ok(trees[index - 1])
        } else {
            Err(Failure::invalid(format!(
                "tree id {id:#x} is not a tree of this store (tree ids come from ft_tree on the same ft_db)"
            )))
        }
    }

    /// The id of a tree (the same id each time).
    fn tree_id(&self, tree: Tree) -> ft_tree_id {
        let mut trees = self.trees.write().unwrap_or_else(|e| e.into_inner());
        let index = match trees.iter().position(|t| *t == tree) {
            Some(i) => i,
            None => {
                trees.push(tree);
                trees.len() - 1
            }
        };
        debug_assert!(index < FT_MAX_TREES);
        (u64::from(self.serial) << 32) | (index as u64 + 1)
    }
}

/// The default options (those of the engine; see each field).
#[no_mangle]
pub extern "C" fn ft_options_default() -> ft_options {
    ffi_value(options_of(&Options::default()), || {
        options_of(&Options::default())
    })
}

fn options_of(o: &Options) -> ft_options {
    ft_options {
        pool_bytes: o.pool_bytes,
        wal_bytes_per_worker: o.wal_bytes_per_worker,
        workers: u32::try_from(o.workers).unwrap_or(1),
        durability: ft_durability::FT_DURABILITY_SYNC as c_int,
        max_delay_ms: 10,
        create_if_missing: c_int::from(o.create_if_missing),
        direct_io: c_int::from(o.direct_io),
    }
}

fn engine_options(o: &ft_options) -> FtResult<Options> {
    let durability = match o.durability {
        0 => Durability::None,
        1 => Durability::Buffered {
            max_delay_ms: o.max_delay_ms,
        },
        2 => Durability::Sync,
        other => {
            return Err(Failure::invalid(format!(
                "durability must be FT_DURABILITY_NONE (0), FT_DURABILITY_BUFFERED (1) or FT_DURABILITY_SYNC (2), got {other}"
            )))
        }
    };
    Ok(Options {
        pool_bytes: o.pool_bytes,
        workers: o.workers as usize,
        durability,
        create_if_missing: o.create_if_missing != 0,
        direct_io: o.direct_io != 0,
        wal_bytes_per_worker: o.wal_bytes_per_worker,
        checkpoint_log_bytes: o.wal_bytes_per_worker / 4,
        ..Options::default()
    })
}

/// Opens (or creates) the store in directory `path` (its data file is
/// path/data.ft). `options` NULL means ft_options_default(). On success
/// *db is the open store; otherwise it is NULL. A store whose process
/// crashed is recovered from its log first.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string; `options` NULL or a
/// valid ft_options; `db` NULL or valid for writing an ft_db pointer.
#[no_mangle]
pub unsafe extern "C" fn ft_open(
    path: *const c_char,
    options: *const ft_options,
    db: *mut *mut ft_db,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `db` is NULL or writable.
        let out = unsafe { Out::new(db, "db (the out-pointer)") }?;
        out.set(std::ptr::null_mut());
        if path.is_null() {
            return Err(Failure::invalid("path is NULL"));
        }
        // SAFETY: not NULL, and the caller guarantees a NUL-terminated
        // string that lives through the call.
        let path = Path::new(std::ffi::OsStr::from_bytes(
            unsafe { CStr::from_ptr(path) }.to_bytes(),
        ));
        // SAFETY: the caller guarantees `options` is NULL or valid.
        let options = match unsafe { options.as_ref() } {
            Some(o) => engine_options(o),
            None => engine_options(&ft_options_default()),
        }
        .map_err(|e| e.context(&path.display().to_string()))?;
        let engine = Db::open(path, options)
            .map_err(|e| Failure::from(e).context(&path.display().to_string()))?;
        let store = Store {
            db: RwLock::new(Some(engine)),
            trees: RwLock::new(Vec::new()),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        };
        out.set(Box::into_raw(Box::new(ft_db {
            store: Arc::new(store),
        })));
        Ok(())
    })
}

/// Closes the store: writes back what is in memory and a checkpoint, stops
/// its threads and releases its lock. Returns the first error of these
/// (the data is then recovered at the next open). The handle is freed in
/// every case (even on error): it must not be used again, and no other
/// call on it may be running. Its batches and iterators may still be freed
/// (or used, which gives FT_CLOSED).
///
/// # Safety
/// `db` must be NULL or a handle from ft_open not closed yet, with no
/// other call on it running or to come.
#[no_mangle]
pub unsafe extern "C" fn ft_close(db: *mut ft_db) -> c_int {
    ffi(|| {
        if db.is_null() {
            return Err(Failure::invalid("db is NULL"));
        }
        // SAFETY: not NULL; the caller guarantees it came from ft_open
        // (Box::into_raw), was not closed, and is used by nobody else now
        // or later, so we may take back the Box.
        let handle = unsafe { Box::from_raw(db) };
        let engine = handle
            .store
            .db
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match engine {
            Some(engine) => engine.close().map_err(Failure::from),
            None => Ok(()),
        }
    })
}

/// Sets *tree to the id of the tree named `name` (1 to
/// FT_MAX_TREE_NAME_BYTES bytes of UTF-8, NUL-terminated), creating the
/// tree empty if it does not exist (durably, unless the store has no log).
/// The same name gives the same id.
///
/// # Safety
/// `db` must be NULL or an open handle; `name` NULL or a NUL-terminated
/// string; `tree` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ft_tree(
    db: *const ft_db,
    name: *const c_char,
    tree: *mut ft_tree_id,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `tree` is NULL or writable.
        let out = unsafe { Out::new(tree, "tree (the out-pointer)") }?;
        out.set(0);
        // SAFETY: the caller guarantees `db` is NULL or an open handle.
        let store = &unsafe { handle(db, "db") }?.store;
        if name.is_null() {
            return Err(Failure::invalid("tree name is NULL"));
        }
        // SAFETY: not NULL, and the caller guarantees a NUL-terminated
        // string that lives through the call.
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|e| Failure::invalid(format!("tree name is not valid UTF-8: {e}")))?;
        let found = store.with_db(|db| Ok(db.tree(name)?))?;
        out.set(store.tree_id(found));
        Ok(())
    })
}

/// Looks up `key`. Found: FT_OK, *value is a copy of the value (release it
/// with ft_free; never NULL, even for an empty value) and *value_len its
/// length. Missing: FT_NOT_FOUND, *value NULL and *value_len 0 (as after
/// any other failure).
///
/// # Safety
/// `db` must be NULL or an open handle; `key` NULL or `key_len` readable
/// bytes; `value` and `value_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ft_get(
    db: *const ft_db,
    tree: ft_tree_id,
    key: *const u8,
    key_len: usize,
    value: *mut *mut u8,
    value_len: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees both are NULL or writable.
        let (value, value_len) = unsafe {
            (
                Out::new(value, "value (the out-pointer)")?,
                Out::new(value_len, "value_len")?,
            )
        };
        value.set(std::ptr::null_mut());
        value_len.set(0);
        // SAFETY: the caller guarantees `db` is NULL or an open handle, and
        // `key` NULL or `key_len` bytes that stay unchanged during the call.
        let (store, key) = unsafe { (&handle(db, "db")?.store, bytes(key, key_len, "key")?) };
        let tree = store.tree(tree)?;
        match store.with_db(|db| Ok(db.get(tree, key)?))? {
            Some(found) => {
                value.set(malloc_copy(&found)?);
                value_len.set(found.len());
                Ok(())
            }
            None => Err(Failure::new(ft_status::FT_NOT_FOUND, "key not found")),
        }
    })
}

/// Sets `key` to `value` (`value` may be NULL when `value_len` is 0). With
/// FT_DURABILITY_SYNC it returns once the change is durable.
///
/// # Safety
/// `db` must be NULL or an open handle; `key` and `value` NULL or
/// readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ft_put(
    db: *const ft_db,
    tree: ft_tree_id,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `db` is NULL or an open handle, and
        // `key` and `value` NULL or readable for their lengths, unchanged
        // during the call.
        let (store, key, value) = unsafe {
            (
                &handle(db, "db")?.store,
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
            )
        };
        let tree = store.tree(tree)?;
        store.with_db(|db| Ok(db.put(tree, key, value)?))
    })
}

/// Deletes `key`: FT_OK if it was there, FT_NOT_FOUND if not (nothing
/// changed). Durable as ft_put.
///
/// # Safety
/// `db` must be NULL or an open handle; `key` NULL or `key_len` readable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn ft_delete(
    db: *const ft_db,
    tree: ft_tree_id,
    key: *const u8,
    key_len: usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `db` is NULL or an open handle, and
        // `key` NULL or `key_len` bytes unchanged during the call.
        let (store, key) = unsafe { (&handle(db, "db")?.store, bytes(key, key_len, "key")?) };
        let tree = store.tree(tree)?;
        if store.with_db(|db| Ok(db.delete(tree, key)?))? {
            Ok(())
        } else {
            Err(Failure::new(ft_status::FT_NOT_FOUND, "key not found"))
        }
    })
}

/// Looks up `count` keys at once (concurrently, over all workers): key i
/// is keys[i] of key_lens[i] bytes. On FT_OK, values[i] is a copy of its
/// value (release each with ft_free) and value_lens[i] its length, or
/// values[i] is NULL and value_lens[i] 0 when the key is missing. On any
/// other status every values[i] is NULL. The arrays may be NULL when
/// `count` is 0.
///
/// # Safety
/// `db` must be NULL or an open handle; `keys` and `key_lens` NULL or
/// readable arrays of `count` elements (each key readable for its length);
/// `values` and `value_lens` NULL or writable arrays of `count` elements.
#[no_mangle]
pub unsafe extern "C" fn ft_multi_get(
    db: *const ft_db,
    tree: ft_tree_id,
    count: usize,
    keys: *const *const u8,
    key_lens: *const usize,
    values: *mut *mut u8,
    value_lens: *mut usize,
) -> c_int {
    ffi(|| {
        if count == 0 {
            return Ok(());
        }
        if count > isize::MAX as usize / size_of::<usize>() {
            return Err(Failure::invalid(format!("count {count} is too large")));
        }
        let outs = (0..count)
            .map(|i| {
                // SAFETY: the caller guarantees `values` and `value_lens` NULL
                // or arrays of `count` writable elements. NULL is refused by
                // Out::new at i = 0, which ends the collect before any other
                // i; otherwise element i < count is in bounds.
                unsafe {
                    Ok((
                        Out::new(values.wrapping_add(i), "values")?,
                        Out::new(value_lens.wrapping_add(i), "value_lens")?,
                    ))
                }
            })
            .collect::<FtResult<Vec<(Out<*mut u8>, Out<usize>)>>>()?;
        for (value, len) in &outs {
            value.set(std::ptr::null_mut());
            len.set(0);
        }
        // SAFETY: the caller guarantees `db` is NULL or an open handle, and
        // `keys` and `key_lens` NULL or arrays of `count` readable elements,
        // unchanged during the call.
        let (store, keys, key_lens) = unsafe {
            (
                &handle(db, "db")?.store,
                slice(keys, count, "keys")?,
                slice(key_lens, count, "key_lens")?,
            )
        };
        let keys: Vec<&[u8]> = keys
            .iter()
            .zip(key_lens)
            .map(|(&key, &len)| {
                // SAFETY: the caller guarantees each key readable for its
                // length during the call.
                unsafe { bytes(key, len, "a key") }
            })
            .collect::<FtResult<_>>()?;
        let tree = store.tree(tree)?;
        let found = store.with_db(|db| Ok(db.multi_get(tree, &keys)?))?;
        let mut copies = Vec::with_capacity(count);
        for value in &found {
            match value.as_deref().map(malloc_copy).transpose() {
                Ok(copy) => copies.push(copy),
                Err(e) => {
                    for ptr in copies.into_iter().flatten() {
                        // SAFETY: each came from malloc_copy and was not
                        // handed out.
                        unsafe { libc::free(ptr.cast()) };
                    }
                    return Err(e);
                }
            }
        }
        for ((value, len), (copy, found)) in outs.iter().zip(copies.into_iter().zip(&found)) {
            if let (Some(copy), Some(found)) = (copy, found) {
                value.set(copy);
                len.set(found.len());
            }
        }
        Ok(())
    })
}

/// Fills the leaves of `tree` from their neighbours and moves them to
/// consecutive page ids in key order (so that scans out of memory read
/// fewer pages, neighbouring leaves in one request) while the store stays
/// in use; *leaves_moved (if not NULL) gets how many moved (0 when already
/// in order). A hash tree gives FT_UNSUPPORTED.
///
/// # Safety
/// `db` must be NULL or an open handle; `leaves_moved` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ft_compact(
    db: *const ft_db,
    tree: ft_tree_id,
    leaves_moved: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `db` is NULL or an open handle.
        let store = &unsafe { handle(db, "db") }?.store;
        let tree = store.tree(tree)?;
        let stats = store.with_db(|db| Ok(db.compact(tree)?))?;
        if !leaves_moved.is_null() {
            // SAFETY: not NULL, and the caller guarantees it is writable.
            unsafe { leaves_moved.write(stats.leaves_moved) };
        }
        Ok(())
    })
}

/// Waits until every change acknowledged so far is durable (useful with
/// FT_DURABILITY_BUFFERED; a no-op without a log).
///
/// # Safety
/// `db` must be NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn ft_sync(db: *const ft_db) -> c_int {
    ffi(|| {
        // SAFETY: the caller guarantees `db` is NULL or an open handle.
        let store = &unsafe { handle(db, "db") }?.store;
        store.with_db(|db| Ok(db.sync()?))
    })
}
