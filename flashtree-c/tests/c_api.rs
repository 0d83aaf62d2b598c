//! The C API called from Rust through the rlib, as a C program would:
//! NULL handling, status codes and messages, and a round trip that
//! survives a close and a reopen.

#![deny(clippy::undocumented_unsafe_blocks)]

use flashtree_c::*;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::{null, null_mut};

const OK: c_int = ft_status::FT_OK as c_int;
const NOT_FOUND: c_int = ft_status::FT_NOT_FOUND as c_int;
const INVALID: c_int = ft_status::FT_INVALID_ARGUMENT as c_int;
const IN_USE: c_int = ft_status::FT_STORE_IN_USE as c_int;
const CLOSED: c_int = ft_status::FT_CLOSED as c_int;

fn last_error() -> String {
    // SAFETY: ft_last_error never returns NULL; the string is valid until
    // the next call into the library on this thread, and is copied here.
    unsafe { CStr::from_ptr(ft_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Small options: one worker, an 8 MiB pool, 1 MiB of log.
fn small_options() -> ft_options {
    let mut o = ft_options_default();
    o.workers = 1;
    o.pool_bytes = 8 << 20;
    o.wal_bytes_per_worker = 1 << 20;
    o.durability = ft_durability::FT_DURABILITY_SYNC as c_int;
    o
}

fn open_with(dir: &std::path::Path, options: &ft_options) -> (c_int, *mut ft_db) {
    let path = CString::new(dir.to_str().unwrap()).unwrap();
    let mut db = null_mut();
    // SAFETY: a NUL-terminated path, valid options and a writable out-pointer.
    let code = unsafe { ft_open(path.as_ptr(), options, &mut db) };
    (code, db)
}

fn open(dir: &std::path::Path) -> *mut ft_db {
    let (code, db) = open_with(dir, &small_options());
    assert_eq!(code, OK, "{}", last_error());
    assert!(!db.is_null());
    db
}

fn close(db: *mut ft_db) -> c_int {
    // SAFETY: `db` is NULL or from ft_open, and not used after this.
    unsafe { ft_close(db) }
}

fn tree_with(db: *const ft_db, name: &[u8]) -> (c_int, ft_tree_id) {
    let name = CString::new(name).unwrap();
    let mut id = 0;
    // SAFETY: `db` is NULL or open, `name` NUL-terminated, `id` writable.
    let code = unsafe { ft_tree(db, name.as_ptr(), &mut id) };
    (code, id)
}

fn tree(db: *const ft_db, name: &str) -> ft_tree_id {
    let (code, id) = tree_with(db, name.as_bytes());
    assert_eq!(code, OK, "{}", last_error());
    id
}

fn put(db: *const ft_db, tree: ft_tree_id, key: &[u8], value: &[u8]) -> c_int {
    // SAFETY: `db` is NULL or open; key and value are live slices.
    unsafe {
        ft_put(
            db,
            tree,
            key.as_ptr(),
            key.len(),
            value.as_ptr(),
            value.len(),
        )
    }
}

/// ft_get, with the value copied out and released.
fn get(db: *const ft_db, tree: ft_tree_id, key: &[u8]) -> (c_int, Option<Vec<u8>>) {
    let (mut ptr, mut len) = (null_mut(), 0usize);
    // SAFETY: `db` is NULL or open; `key` a live slice; outs writable.
    let code = unsafe { ft_get(db, tree, key.as_ptr(), key.len(), &mut ptr, &mut len) };
    if code != OK {
        assert!(ptr.is_null(), "a failed ft_get leaves *value NULL");
        assert_eq!(len, 0);
        return (code, None);
    }
    assert!(!ptr.is_null(), "ft_get's value is never NULL on FT_OK");
    // SAFETY: on FT_OK, `ptr` holds `len` bytes from the library.
    let value = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
    // SAFETY: `ptr` came from ft_get and is released once.
    unsafe { ft_free(ptr.cast()) };
    (code, Some(value))
}

fn delete(db: *const ft_db, tree: ft_tree_id, key: &[u8]) -> c_int {
    // SAFETY: `db` is NULL or open; `key` a live slice.
    unsafe { ft_delete(db, tree, key.as_ptr(), key.len()) }
}

fn batch_new(db: *const ft_db) -> *mut ft_batch {
    let mut batch = null_mut();
    // SAFETY: `db` is open and `batch` writable.
    let code = unsafe { ft_batch_new(db, &mut batch) };
    assert_eq!(code, OK, "{}", last_error());
    batch
}

fn batch_put(batch: *mut ft_batch, tree: ft_tree_id, key: &[u8], value: &[u8]) -> c_int {
    // SAFETY: `batch` is NULL or live and used by this thread only; key
    // and value are live slices.
    unsafe {
        ft_batch_put(
            batch,
            tree,
            key.as_ptr(),
            key.len(),
            value.as_ptr(),
            value.len(),
        )
    }
}

fn batch_delete(batch: *mut ft_batch, tree: ft_tree_id, key: &[u8]) -> c_int {
    // SAFETY: as batch_put.
    unsafe { ft_batch_delete(batch, tree, key.as_ptr(), key.len()) }
}

fn write(db: *const ft_db, batch: *const ft_batch, mode: ft_write_mode) -> c_int {
    // SAFETY: `db` and `batch` are NULL or live.
    unsafe { ft_write(db, batch, mode as c_int) }
}

fn batch_free(batch: *mut ft_batch) {
    // SAFETY: `batch` is NULL or from ft_batch_new, freed once.
    unsafe { ft_batch_free(batch) }
}

fn iter_new(
    db: *const ft_db,
    tree: ft_tree_id,
    start: Option<&[u8]>,
    reverse: bool,
) -> (c_int, *mut ft_iter) {
    let (ptr, len) = start.map_or((null(), 0), |s| (s.as_ptr(), s.len()));
    let mut iter = null_mut();
    // SAFETY: `db` is NULL or open; `start` NULL or a live slice; `iter`
    // writable.
    let code = unsafe { ft_iter_new(db, tree, ptr, len, c_int::from(reverse), &mut iter) };
    (code, iter)
}

/// Records as (key, value) pairs.
type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// Every record an iterator has left, copied; the status that ended it.
fn drain(iter: *mut ft_iter) -> (c_int, Records) {
    let mut records = Vec::new();
    loop {
        let (mut k, mut kl, mut v, mut vl) = (null(), 0usize, null(), 0usize);
        // SAFETY: `iter` is live and used by this thread only; the outs
        // are writable.
        let code = unsafe { ft_iter_next(iter, &mut k, &mut kl, &mut v, &mut vl) };
        if code != OK {
            return (code, records);
        }
        assert!(!k.is_null() && !v.is_null());
        // SAFETY: on FT_OK both point to their lengths of bytes, valid
        // until the next ft_iter_next.
        let record = unsafe {
            (
                std::slice::from_raw_parts(k, kl).to_vec(),
                std::slice::from_raw_parts(v, vl).to_vec(),
            )
        };
        records.push(record);
    }
}

fn iter_free(iter: *mut ft_iter) {
    // SAFETY: `iter` is NULL or from ft_iter_new, freed once.
    unsafe { ft_iter_free(iter) }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value of record {i}").into_bytes()
}

#[test]
fn null_pointers_give_invalid_argument_and_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = null_mut();
    // SAFETY: NULL path and options are allowed (refused); `db` writable.
    assert_eq!(unsafe { ft_open(null(), null(), &mut db) }, INVALID);
    assert!(db.is_null());
    assert!(last_error().contains("path is NULL"), "{}", last_error());
    let path = CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: a NULL out-pointer is refused before anything is opened.
    let code = unsafe { ft_open(path.as_ptr(), null(), null_mut()) };
    assert_eq!(code, INVALID);

    assert_eq!(get(null(), 1, b"k").0, INVALID);
    assert!(last_error().contains("db is NULL"), "{}", last_error());
    assert_eq!(put(null(), 1, b"k", b"v"), INVALID);
    assert_eq!(delete(null(), 1, b"k"), INVALID);
    assert_eq!(tree_with(null(), b"t").0, INVALID);
    assert_eq!(close(null_mut()), INVALID);
    // SAFETY: NULL handles are refused.
    unsafe {
        assert_eq!(ft_sync(null()), INVALID);
        assert_eq!(ft_batch_new(null(), &mut null_mut()), INVALID);
        assert_eq!(ft_batch_clear(null_mut()), INVALID);
        assert_eq!(ft_batch_len(null()), 0);
        assert_eq!(
            ft_iter_next(null_mut(), null_mut(), null_mut(), null_mut(), null_mut()),
            INVALID
        );
        // Freeing NULL is a no-op, as with free().
        ft_free(null_mut());
        ft_batch_free(null_mut());
        ft_iter_free(null_mut());
    }
    assert_eq!(batch_put(null_mut(), 1, b"k", b"v"), INVALID);
    assert_eq!(batch_delete(null_mut(), 1, b"k"), INVALID);
    assert_eq!(iter_new(null(), 1, None, false).0, INVALID);

    let db = open(dir.path());
    let users = tree(db, "users");
    // SAFETY: each call passes a NULL where a pointer is required, next to
    // otherwise valid arguments.
    unsafe {
        assert_eq!(ft_tree(db, null(), &mut 0), INVALID);
        assert!(last_error().contains("tree name is NULL"));
        assert_eq!(ft_tree(db, c"t".as_ptr(), null_mut()), INVALID);
        assert_eq!(
            ft_get(db, users, b"k".as_ptr(), 1, null_mut(), &mut 0),
            INVALID
        );
        assert_eq!(
            ft_get(db, users, b"k".as_ptr(), 1, &mut null_mut(), null_mut()),
            INVALID
        );
        assert_eq!(
            ft_get(db, users, null(), 3, &mut null_mut(), &mut 0),
            INVALID
        );
        assert!(last_error().contains("key is NULL but its length is 3"));
        assert_eq!(ft_put(db, users, b"k".as_ptr(), 1, null(), 5), INVALID);
        assert!(last_error().contains("value is NULL"));
        // A NULL value of length 0 is an empty value.
        assert_eq!(ft_put(db, users, b"empty".as_ptr(), 5, null(), 0), OK);
        assert_eq!(ft_write(db, null(), 0), INVALID);
        let mut iter = null_mut();
        assert_eq!(ft_iter_new(db, users, null(), 4, 0, &mut iter), INVALID);
        assert!(iter.is_null());
        assert_eq!(ft_iter_new(db, users, null(), 0, 0, null_mut()), INVALID);
        let (mut values, mut lens) = ([null_mut(); 2], [0usize; 2]);
        let keys = [b"a".as_ptr(), b"b".as_ptr()];
        assert_eq!(
            ft_multi_get(
                db,
                users,
                2,
                null(),
                [1, 1].as_ptr(),
                values.as_mut_ptr(),
                lens.as_mut_ptr()
            ),
            INVALID
        );
        assert_eq!(
            ft_multi_get(
                db,
                users,
                2,
                keys.as_ptr(),
                [1, 1].as_ptr(),
                null_mut(),
                lens.as_mut_ptr()
            ),
            INVALID
        );
        assert_eq!(
            ft_multi_get(db, users, 0, null(), null(), null_mut(), null_mut()),
            OK
        );
    }
    assert_eq!(get(db, users, b"empty"), (OK, Some(Vec::new())));
    assert_eq!(close(db), OK);
}

#[test]
fn bad_names_ids_keys_and_options_give_invalid_argument() {
    let (dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let db = open(dir.path());
    let other = open(other_dir.path());
    let users = tree(db, "users");
    let other_users = tree(other, "users");
    assert_ne!(users, other_users, "tree ids differ between stores");

    let (code, id) = tree_with(db, b"\xff\xfename");
    assert_eq!((code, id), (INVALID, 0));
    assert!(last_error().contains("not valid UTF-8"), "{}", last_error());
    assert_eq!(tree_with(db, b"").0, INVALID);
    assert_eq!(
        tree_with(db, &[b'n'; FT_MAX_TREE_NAME_BYTES + 1]).0,
        INVALID
    );
    assert_eq!(tree_with(db, &[b'n'; FT_MAX_TREE_NAME_BYTES]).0, OK);
    assert_eq!(tree(db, "users"), users, "the same name gives the same id");

    for bad in [0, other_users, users + 1000, u64::MAX] {
        assert_eq!(put(db, bad, b"k", b"v"), INVALID, "tree id {bad:#x}");
        assert!(last_error().contains("is not a tree of this store"));
    }
    assert_eq!(put(db, users, b"", b"v"), INVALID);
    assert!(last_error().contains("empty key"), "{}", last_error());
    assert_eq!(put(db, users, &[7; FT_MAX_KEY_BYTES + 1], b"v"), INVALID);
    assert_eq!(put(db, users, &[7; FT_MAX_KEY_BYTES], b"v"), OK);
    assert_eq!(put(db, users, b"k", &[1; FT_MAX_ENTRY_BYTES]), INVALID);
    assert_eq!(put(db, users, b"k", &[1; FT_MAX_ENTRY_BYTES - 1]), OK);

    let batch = batch_new(db);
    assert_eq!(batch_put(batch, other_users, b"k", b"v"), INVALID);
    assert_eq!(batch_put(batch, users, b"", b"v"), INVALID);
    // SAFETY: `batch` is live.
    let len = unsafe { ft_batch_len(batch) };
    assert_eq!(len, 0, "refused entries are not added");
    assert_eq!(batch_put(batch, users, b"a", b"1"), OK);
    // SAFETY: `db` and `batch` are live.
    assert_eq!(unsafe { ft_write(db, batch, 3) }, INVALID);
    assert!(last_error().contains("mode must be"), "{}", last_error());
    assert_eq!(
        write(other, batch, ft_write_mode::FT_WRITE_DEFAULT),
        INVALID
    );
    assert!(last_error().contains("another store"), "{}", last_error());
    assert_eq!(get(other, other_users, b"a").0, NOT_FOUND);
    batch_free(batch);

    assert_eq!(close(other), OK);
    assert_eq!(close(db), OK);

    let fresh = tempfile::tempdir().unwrap();
    let mut options = small_options();
    options.durability = 7;
    assert_eq!(open_with(fresh.path(), &options), (INVALID, null_mut()));
    assert!(
        last_error().contains("durability must be"),
        "{}",
        last_error()
    );
    options = small_options();
    options.workers = 0;
    assert_eq!(open_with(fresh.path(), &options).0, INVALID);
    options = small_options();
    options.durability = ft_durability::FT_DURABILITY_BUFFERED as c_int;
    options.max_delay_ms = 0;
    assert_eq!(open_with(fresh.path(), &options).0, INVALID);
    options = small_options();
    options.create_if_missing = 0;
    let missing = fresh.path().join("missing");
    assert_eq!(open_with(&missing, &options).0, INVALID);
    assert!(last_error().contains("missing"), "{}", last_error());
}

#[test]
fn a_second_open_of_a_store_gives_store_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let (code, second) = open_with(dir.path(), &small_options());
    assert_eq!((code, second), (IN_USE, null_mut()));
    let message = last_error();
    assert!(message.contains("store in use"), "{message}");
    assert!(message.contains(dir.path().to_str().unwrap()), "{message}");
    assert_eq!(close(db), OK);
    let again = open(dir.path());
    assert_eq!(close(again), OK);
}

#[test]
fn records_round_trip_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let users = tree(db, "users");
    let logs = tree(db, "logs");

    // Single calls.
    assert_eq!(put(db, users, b"alice", b"admin"), OK);
    assert_eq!(get(db, users, b"alice"), (OK, Some(b"admin".to_vec())));
    assert_eq!(
        get(db, logs, b"alice"),
        (NOT_FOUND, None),
        "trees are separate"
    );
    assert_eq!(last_error(), "key not found");
    assert_eq!(delete(db, users, b"alice"), OK);
    assert_eq!(delete(db, users, b"alice"), NOT_FOUND);
    assert_eq!(get(db, users, b"alice").0, NOT_FOUND);

    // Batches of 250 (a quarter of the single worker's 2048 frames is 512).
    let batch = batch_new(db);
    for chunk in 0..4 {
        for i in chunk * 250..(chunk + 1) * 250 {
            assert_eq!(batch_put(batch, users, &key(i), &value(i)), OK);
        }
        // SAFETY: `batch` is live.
        assert_eq!(unsafe { ft_batch_len(batch) }, 250);
        assert_eq!(
            write(db, batch, ft_write_mode::FT_WRITE_SYNC),
            OK,
            "{}",
            last_error()
        );
        // SAFETY: `batch` is live.
        assert_eq!(unsafe { ft_batch_clear(batch) }, OK);
    }
    assert_eq!(batch_delete(batch, users, &key(42)), OK);
    assert_eq!(batch_put(batch, logs, b"l1", b"deleted 42"), OK);
    assert_eq!(batch_delete(batch, users, b"never there"), OK);
    assert_eq!(write(db, batch, ft_write_mode::FT_WRITE_DEFAULT), OK);
    batch_free(batch);
    for i in 0..1000 {
        let expect = if i == 42 {
            (NOT_FOUND, None)
        } else {
            (OK, Some(value(i)))
        };
        assert_eq!(get(db, users, &key(i)), expect, "record {i}");
    }
    assert_eq!(get(db, logs, b"l1"), (OK, Some(b"deleted 42".to_vec())));

    // multi_get: found, missing, found.
    let wanted = [key(7), b"nope".to_vec(), key(999)];
    let ptrs: Vec<*const u8> = wanted.iter().map(|k| k.as_ptr()).collect();
    let lens: Vec<usize> = wanted.iter().map(Vec::len).collect();
    let (mut values, mut value_lens) = ([null_mut(); 3], [0usize; 3]);
    // SAFETY: three keys with their lengths; three writable outs each.
    let code = unsafe {
        ft_multi_get(
            db,
            users,
            3,
            ptrs.as_ptr(),
            lens.as_ptr(),
            values.as_mut_ptr(),
            value_lens.as_mut_ptr(),
        )
    };
    assert_eq!(code, OK, "{}", last_error());
    assert!(values[1].is_null() && value_lens[1] == 0);
    for (i, expect) in [(0, value(7)), (2, value(999))] {
        // SAFETY: a found value holds value_lens[i] bytes from the library.
        let got = unsafe { std::slice::from_raw_parts(values[i], value_lens[i]) };
        assert_eq!(got, expect.as_slice());
    }
    for v in values {
        // SAFETY: each is NULL or from ft_multi_get, released once.
        unsafe { ft_free(v.cast()) };
    }

    // Forward over everything: 999 records in ascending order.
    let (code, iter) = iter_new(db, users, None, false);
    assert_eq!(code, OK);
    let (end, records) = drain(iter);
    assert_eq!(end, NOT_FOUND);
    assert_eq!(last_error(), "no more records");
    let expect: Vec<_> = (0..1000)
        .filter(|&i| i != 42)
        .map(|i| (key(i), value(i)))
        .collect();
    assert_eq!(records, expect);
    assert_eq!(
        drain(iter),
        (NOT_FOUND, Vec::new()),
        "an ended iterator stays ended"
    );
    iter_free(iter);

    // Backward from key 500 (included) down to the first key.
    let (code, iter) = iter_new(db, users, Some(&key(500)), true);
    assert_eq!(code, OK);
    let (_, records) = drain(iter);
    let expect: Vec<_> = (0..=500)
        .rev()
        .filter(|&i| i != 42)
        .map(|i| (key(i), value(i)))
        .collect();
    assert_eq!(records, expect);
    iter_free(iter);

    // Forward from a key between two records, keys only.
    let (_, iter) = iter_new(db, users, Some(b"key00990x"), false);
    let mut keys = Vec::new();
    loop {
        let (mut k, mut kl) = (null(), 0usize);
        // SAFETY: `iter` is live; the value outs are NULL (not wanted).
        let code = unsafe { ft_iter_next(iter, &mut k, &mut kl, null_mut(), null_mut()) };
        if code != OK {
            assert_eq!(code, NOT_FOUND);
            break;
        }
        // SAFETY: on FT_OK `k` holds `kl` bytes until the next call.
        keys.push(unsafe { std::slice::from_raw_parts(k, kl) }.to_vec());
    }
    assert_eq!(keys, (991..1000).map(key).collect::<Vec<_>>());
    iter_free(iter);

    // SAFETY: `db` is open.
    assert_eq!(unsafe { ft_sync(db) }, OK);
    assert_eq!(close(db), OK);

    // Reopen without create: everything is there, under the same names.
    let mut options = small_options();
    options.create_if_missing = 0;
    let (code, db) = open_with(dir.path(), &options);
    assert_eq!(code, OK, "{}", last_error());
    let users = tree(db, "users");
    let (_, iter) = iter_new(db, users, None, false);
    let (_, records) = drain(iter);
    iter_free(iter);
    assert_eq!(records.len(), 999);
    assert_eq!(get(db, users, &key(999)), (OK, Some(value(999))));
    assert_eq!(get(db, users, &key(42)).0, NOT_FOUND);
    assert_eq!(
        get(db, tree(db, "logs"), b"l1"),
        (OK, Some(b"deleted 42".to_vec()))
    );
    assert_eq!(close(db), OK);
}

#[test]
fn batches_and_iterators_outlive_their_store_and_report_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let t = tree(db, "t");
    for i in 0..10 {
        assert_eq!(put(db, t, &key(i), &value(i)), OK);
    }
    let batch = batch_new(db);
    assert_eq!(batch_put(batch, t, b"late", b"1"), OK);
    let (_, iter) = iter_new(db, t, None, false);
    let (_, half) = iter_new(db, t, None, false);
    let (mut k, mut kl) = (null(), 0usize);
    // SAFETY: `half` is live; the value outs are not wanted.
    let code = unsafe { ft_iter_next(half, &mut k, &mut kl, null_mut(), null_mut()) };
    assert_eq!(code, OK);
    assert_eq!(close(db), OK);

    // The handles stay safe to use and to free after ft_close.
    assert_eq!(
        batch_put(batch, t, b"later", b"2"),
        OK,
        "filling needs no store"
    );
    let (code, _) = drain(iter);
    assert_eq!(code, CLOSED);
    assert!(last_error().contains("closed"), "{}", last_error());
    // `half` fetched all ten records at its first step: it hands out the
    // other nine and ends without needing the store.
    let (code, rest) = drain(half);
    assert_eq!((code, rest.len()), (NOT_FOUND, 9));
    batch_free(batch);
    iter_free(iter);
    iter_free(half);

    // The store was closed cleanly and reopens; the batch was never written.
    let db = open(dir.path());
    let t = tree(db, "t");
    assert_eq!(get(db, t, b"late").0, NOT_FOUND);
    assert_eq!(get(db, t, &key(9)), (OK, Some(value(9))));
    assert_eq!(close(db), OK);
}

/// A `*const ft_db` shared by threads.
#[derive(Clone, Copy)]
struct Shared(*const ft_db);
// SAFETY: the C API lets an ft_db be used from any number of threads at
// once (the engine's Db is Send + Sync, checked in the library); the
// handle outlives the threads (they are joined before ft_close).
unsafe impl Send for Shared {}

#[test]
fn one_store_serves_many_threads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = small_options();
    options.workers = 2;
    options.pool_bytes = 16 << 20;
    let (code, db) = open_with(dir.path(), &options);
    assert_eq!(code, OK, "{}", last_error());
    let t = tree(db, "t");
    let shared = Shared(db);
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            std::thread::spawn(move || {
                let db = shared;
                for i in w * 100..(w + 1) * 100 {
                    assert_eq!(put(db.0, t, &key(i), &value(i)), OK, "{}", last_error());
                    assert_eq!(get(db.0, t, &key(i)), (OK, Some(value(i))));
                }
                // A failure on this thread leaves the other threads' messages alone.
                assert_eq!(put(db.0, t, b"", b""), INVALID);
                assert!(last_error().contains("empty key"));
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let (_, iter) = iter_new(db, t, None, false);
    let (_, records) = drain(iter);
    iter_free(iter);
    assert_eq!(
        records,
        (0..400).map(|i| (key(i), value(i))).collect::<Vec<_>>()
    );
    assert_eq!(close(db), OK);
}

#[test]
fn version_and_status_names() {
    // SAFETY: both return static NUL-terminated strings.
    let (version, name) = unsafe {
        (
            CStr::from_ptr(ft_version()),
            CStr::from_ptr(ft_status_name(IN_USE)),
        )
    };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    assert_eq!(name.to_str().unwrap(), "FT_STORE_IN_USE");
    let message: *const c_char = ft_last_error();
    assert!(!message.is_null());
}

/// ft_compact moves the leaves of a tree filled in random order, a second
/// call moves none, and every record reads back.
#[test]
fn compact_moves_leaves_and_keeps_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let t = tree(db, "t");
    let keys: Vec<Vec<u8>> = (0..3000u64)
        .map(|i| {
            (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8)
                .to_be_bytes()
                .to_vec()
        })
        .collect();
    for k in &keys {
        assert_eq!(put(db, t, k, &[5u8; 400]), OK, "{}", last_error());
    }
    let mut moved = 0u64;
    // SAFETY: `db` is open and `moved` writable.
    let code = unsafe { ft_compact(db, t, &mut moved) };
    assert_eq!(code, OK, "{}", last_error());
    assert!(moved > 100, "{moved} leaves moved");
    // SAFETY: as above.
    assert_eq!(unsafe { ft_compact(db, t, &mut moved) }, OK);
    assert_eq!(moved, 0);
    // SAFETY: `db` is open; a NULL out-pointer is allowed.
    assert_eq!(unsafe { ft_compact(db, t, null_mut()) }, OK);
    for k in keys.iter().step_by(37) {
        assert_eq!(get(db, t, k), (OK, Some(vec![5u8; 400])));
    }
    assert_eq!(close(db), OK);
}
