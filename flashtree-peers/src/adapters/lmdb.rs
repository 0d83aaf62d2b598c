//! LMDB (Debian liblmdb-dev, 0.9.x) through a small hand-written FFI.
//!
//! Settings: sync flags per `EngineConfig::durability` (`none`:
//! `MDB_NOSYNC | MDB_NOMETASYNC`; `buffered`: `MDB_NOMETASYNC`; `sync`:
//! LMDB's default, both synced at commit), `MDB_NOTLS`, `MDB_NORDAHEAD` (random reads larger
//! than memory, as LMDB's docs advise), map size 1 TiB (sparse), one named
//! database per table, one write transaction per write or batch, a reset /
//! renewed read transaction per read. LMDB reads through mmap and the page
//! cache, so it has no cache of its own to size: the driver bounds it with a
//! memory cgroup of the budget (see [`crate::cgroup`]).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr;

use crate::engine::{
    run_job_on_threads, Concurrency, DurabilityMode, Engine, EngineConfig, HandleSource,
};
use crate::job::{Job, TaskStats};
use crate::kv::{check_table, Kv, KvBatch, KvError, ScanFn};

const ENGINE: &str = "lmdb";
const MAP_BYTES: usize = 1 << 40;
const MDB_NOSYNC: c_uint = 0x10000;
const MDB_RDONLY: c_uint = 0x20000;
const MDB_NOMETASYNC: c_uint = 0x40000;
const MDB_NOTLS: c_uint = 0x200000;
const MDB_NORDAHEAD: c_uint = 0x800000;
const MDB_CREATE: c_uint = 0x40000;
const MDB_NOTFOUND: c_int = -30798;
const MDB_GET_CURRENT: c_int = 4;
const MDB_LAST: c_int = 6;
const MDB_NEXT: c_int = 8;
const MDB_PREV: c_int = 12;
const MDB_SET_RANGE: c_int = 17;

#[repr(C)]
struct MdbEnv {
    _private: [u8; 0],
}
#[repr(C)]
struct MdbTxn {
    _private: [u8; 0],
}
#[repr(C)]
struct MdbCursor {
    _private: [u8; 0],
}
#[repr(C)]
struct MdbVal {
    size: usize,
    data: *mut c_void,
}

impl MdbVal {
    fn of(bytes: &[u8]) -> MdbVal {
        MdbVal {
            size: bytes.len(),
            data: bytes.as_ptr() as *mut c_void,
        }
    }
    fn empty() -> MdbVal {
        MdbVal {
            size: 0,
            data: ptr::null_mut(),
        }
    }
    /// # Safety
    /// `self` must point at `size` readable bytes valid for `'a`.
    unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.size == 0 {
            return &[];
        }
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(self.data.cast::<u8>(), self.size) }
    }
}

#[link(name = "lmdb")]
extern "C" {
    fn mdb_version(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> *const c_char;
    fn mdb_strerror(code: c_int) -> *const c_char;
    fn mdb_env_create(env: *mut *mut MdbEnv) -> c_int;
    fn mdb_env_set_mapsize(env: *mut MdbEnv, size: usize) -> c_int;
    fn mdb_env_set_maxdbs(env: *mut MdbEnv, dbs: c_uint) -> c_int;
    fn mdb_env_set_maxreaders(env: *mut MdbEnv, readers: c_uint) -> c_int;
    fn mdb_env_open(env: *mut MdbEnv, path: *const c_char, flags: c_uint, mode: u32) -> c_int;
    fn mdb_env_sync(env: *mut MdbEnv, force: c_int) -> c_int;
    fn mdb_env_close(env: *mut MdbEnv);
    fn mdb_txn_begin(
        env: *mut MdbEnv,
        parent: *mut MdbTxn,
        flags: c_uint,
        txn: *mut *mut MdbTxn,
    ) -> c_int;
    fn mdb_txn_commit(txn: *mut MdbTxn) -> c_int;
    fn mdb_txn_abort(txn: *mut MdbTxn);
    fn mdb_txn_reset(txn: *mut MdbTxn);
    fn mdb_txn_renew(txn: *mut MdbTxn) -> c_int;
    fn mdb_dbi_open(
        txn: *mut MdbTxn,
        name: *const c_char,
        flags: c_uint,
        dbi: *mut c_uint,
    ) -> c_int;
    fn mdb_get(txn: *mut MdbTxn, dbi: c_uint, key: *mut MdbVal, data: *mut MdbVal) -> c_int;
    fn mdb_put(
        txn: *mut MdbTxn,
        dbi: c_uint,
        key: *mut MdbVal,
        data: *mut MdbVal,
        flags: c_uint,
    ) -> c_int;
    fn mdb_del(txn: *mut MdbTxn, dbi: c_uint, key: *mut MdbVal, data: *mut MdbVal) -> c_int;
    fn mdb_cursor_open(txn: *mut MdbTxn, dbi: c_uint, cursor: *mut *mut MdbCursor) -> c_int;
    fn mdb_cursor_get(
        cursor: *mut MdbCursor,
        key: *mut MdbVal,
        data: *mut MdbVal,
        op: c_int,
    ) -> c_int;
    fn mdb_cursor_close(cursor: *mut MdbCursor);
}

fn error_text(code: c_int) -> String {
    // SAFETY: mdb_strerror returns a static NUL-terminated string for any code.
    let text = unsafe { CStr::from_ptr(mdb_strerror(code)) };
    format!("{} (code {code})", text.to_string_lossy())
}

fn check(code: c_int) -> Result<(), KvError> {
    if code == 0 {
        Ok(())
    } else {
        Err(KvError::Engine {
            engine: ENGINE,
            message: error_text(code),
        })
    }
}

/// An open LMDB environment with one database per table.
pub struct LmdbEngine {
    env: *mut MdbEnv,
    dbis: Vec<c_uint>,
    settings: String,
}

// SAFETY: an MDB_env may be shared by threads; with MDB_NOTLS every
// transaction object belongs to one handle, used by one thread.
unsafe impl Send for LmdbEngine {}
// SAFETY: as above.
unsafe impl Sync for LmdbEngine {}

impl LmdbEngine {
    /// Opens or creates the environment under `config.dir/lmdb`.
    pub fn open(config: &EngineConfig) -> Result<Self, String> {
        let path = config.dir.join("lmdb");
        std::fs::create_dir_all(&path).map_err(|e| format!("lmdb: {}: {e}", path.display()))?;
        let path_c = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| "lmdb: data directory contains a NUL byte".to_string())?;
        let mut env = ptr::null_mut();
        let fail = |what: &str, code: c_int| {
            format!("lmdb: {what}: {} (needs liblmdb-dev)", error_text(code))
        };
        // SAFETY: env is an out-pointer.
        let code = unsafe { mdb_env_create(&mut env) };
        if code != 0 {
            return Err(fail("mdb_env_create", code));
        }
        let engine = LmdbEngine {
            env,
            dbis: Vec::new(),
            settings: String::new(),
        };
        let readers = (config.threads_max + 16) as c_uint;
        let sync_flags = match config.durability {
            DurabilityMode::None => MDB_NOSYNC | MDB_NOMETASYNC,
            DurabilityMode::Buffered => MDB_NOMETASYNC,
            DurabilityMode::Sync => 0,
        };
        let flags = sync_flags | MDB_NOTLS | MDB_NORDAHEAD;
        // SAFETY: env was created above and is not yet open.
        unsafe {
            for (what, code) in [
                ("set_mapsize", mdb_env_set_mapsize(env, MAP_BYTES)),
                (
                    "set_maxdbs",
                    mdb_env_set_maxdbs(env, config.table_count + 1),
                ),
                ("set_maxreaders", mdb_env_set_maxreaders(env, readers)),
                ("open", mdb_env_open(env, path_c.as_ptr(), flags, 0o644)),
            ] {
                if code != 0 {
                    return Err(fail(what, code));
                }
            }
        }
        let mut engine = engine;
        engine.dbis = engine
            .open_tables(config.table_count)
            .map_err(|e| format!("lmdb: {e}"))?;
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: out-pointers are valid; the result is a static string.
        unsafe { mdb_version(&mut major, &mut minor, &mut patch) };
        engine.settings = format!(
            "LMDB {major}.{minor}.{patch}: {}, MDB_NOTLS|MDB_NORDAHEAD, \
             map 1TiB, one write txn per update or batch, reads through mmap (page cache)",
            super::durability(ENGINE, config.durability)
        );
        Ok(engine)
    }

    fn open_tables(&self, table_count: u32) -> Result<Vec<c_uint>, KvError> {
        let mut txn = ptr::null_mut();
        // SAFETY: env is open; txn is an out-pointer.
        check(unsafe { mdb_txn_begin(self.env, ptr::null_mut(), 0, &mut txn) })?;
        let mut dbis = Vec::with_capacity(table_count as usize);
        for table in 0..table_count {
            let name = CString::new(super::table_name(table)).expect("no NUL");
            let mut dbi = 0;
            // SAFETY: txn is a live write transaction; name outlives the call.
            let code = unsafe { mdb_dbi_open(txn, name.as_ptr(), MDB_CREATE, &mut dbi) };
            if code != 0 {
                // SAFETY: txn is live and not used again.
                unsafe { mdb_txn_abort(txn) };
                return Err(check(code).unwrap_err());
            }
            dbis.push(dbi);
        }
        // SAFETY: txn is live; commit frees it.
        check(unsafe { mdb_txn_commit(txn) })?;
        Ok(dbis)
    }
}

impl Drop for LmdbEngine {
    fn drop(&mut self) {
        if !self.env.is_null() {
            // SAFETY: all handles (transactions) are gone; the env is closed once.
            unsafe { mdb_env_close(self.env) };
        }
    }
}

/// One thread's LMDB handle: a reusable read transaction.
pub struct LmdbHandle<'a> {
    engine: &'a LmdbEngine,
    read_txn: *mut MdbTxn,
    read_txn_active: Cell<bool>,
}

/// Handles borrow the engine; the source type carries the lifetime.
pub struct LmdbSource<'a>(pub &'a LmdbEngine);

impl<'a> HandleSource for LmdbSource<'a> {
    type Handle = LmdbHandle<'a>;
    fn open_handle(&self) -> Result<LmdbHandle<'a>, String> {
        let mut txn = ptr::null_mut();
        // SAFETY: env is open; MDB_NOTLS lets each handle own its reader slot.
        let code = unsafe { mdb_txn_begin(self.0.env, ptr::null_mut(), MDB_RDONLY, &mut txn) };
        if code != 0 {
            return Err(format!("lmdb: read transaction: {}", error_text(code)));
        }
        // SAFETY: txn is live; reset until first use.
        unsafe { mdb_txn_reset(txn) };
        Ok(LmdbHandle {
            engine: self.0,
            read_txn: txn,
            read_txn_active: Cell::new(false),
        })
    }
}

impl Drop for LmdbHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: the read transaction belongs to this handle; abort frees it.
        unsafe { mdb_txn_abort(self.read_txn) };
    }
}

impl LmdbHandle<'_> {
    fn dbi(&self, table: u32) -> Result<c_uint, KvError> {
        check_table(table, self.engine.dbis.len() as u32)?;
        Ok(self.engine.dbis[table as usize])
    }

    /// Starts the read snapshot (renews the reset transaction).
    fn begin_read(&self) -> Result<*mut MdbTxn, KvError> {
        debug_assert!(!self.read_txn_active.get());
        // SAFETY: the transaction was reset by open_handle or end_read.
        check(unsafe { mdb_txn_renew(self.read_txn) })?;
        self.read_txn_active.set(true);
        Ok(self.read_txn)
    }

    fn end_read(&self) {
        // SAFETY: the transaction is active; reset releases its snapshot.
        unsafe { mdb_txn_reset(self.read_txn) };
        self.read_txn_active.set(false);
    }

    /// Runs `body` inside one committed write transaction.
    fn write<T>(&self, body: impl FnOnce(*mut MdbTxn) -> Result<T, KvError>) -> Result<T, KvError> {
        let mut txn = ptr::null_mut();
        // SAFETY: env is open; LMDB serialises writers with its own mutex.
        check(unsafe { mdb_txn_begin(self.engine.env, ptr::null_mut(), 0, &mut txn) })?;
        match body(txn) {
            // SAFETY: txn is live; commit frees it.
            Ok(value) => check(unsafe { mdb_txn_commit(txn) }).map(|()| value),
            Err(error) => {
                // SAFETY: txn is live; abort frees it.
                unsafe { mdb_txn_abort(txn) };
                Err(error)
            }
        }
    }

    fn scan_impl(
        &self,
        table: u32,
        start: &[u8],
        f: &mut ScanFn<'_>,
        reverse: bool,
    ) -> Result<(), KvError> {
        let dbi = self.dbi(table)?;
        let txn = self.begin_read()?;
        let result = Self::scan_in(txn, dbi, start, f, reverse);
        self.end_read();
        result
    }

    fn scan_in(
        txn: *mut MdbTxn,
        dbi: c_uint,
        start: &[u8],
        f: &mut ScanFn<'_>,
        reverse: bool,
    ) -> Result<(), KvError> {
        let mut cursor = ptr::null_mut();
        // SAFETY: txn is an active read transaction.
        check(unsafe { mdb_cursor_open(txn, dbi, &mut cursor) })?;
        let (mut key, mut value) = (MdbVal::of(start), MdbVal::empty());
        // SAFETY: cursor is open; key points at `start`, which outlives the call.
        let mut code = unsafe { mdb_cursor_get(cursor, &mut key, &mut value, MDB_SET_RANGE) };
        if reverse {
            code = Self::back_to_at_most(cursor, start, code, &mut key, &mut value);
        }
        let step = if reverse { MDB_PREV } else { MDB_NEXT };
        while code == 0 {
            // SAFETY: LMDB keeps returned data valid until the transaction ends.
            let (key_bytes, value_bytes) = unsafe { (key.bytes(), value.bytes()) };
            if !f(key_bytes, value_bytes) {
                break;
            }
            // SAFETY: cursor is positioned.
            code = unsafe { mdb_cursor_get(cursor, &mut key, &mut value, step) };
        }
        // SAFETY: cursor is open and closed once.
        unsafe { mdb_cursor_close(cursor) };
        if code == 0 || code == MDB_NOTFOUND {
            Ok(())
        } else {
            check(code)
        }
    }

    /// After SET_RANGE (first key >= start), moves to the last key <= start.
    fn back_to_at_most(
        cursor: *mut MdbCursor,
        start: &[u8],
        code: c_int,
        key: &mut MdbVal,
        value: &mut MdbVal,
    ) -> c_int {
        // SAFETY: cursor is open; key/value are valid out-parameters.
        unsafe {
            if code == MDB_NOTFOUND {
                return mdb_cursor_get(cursor, key, value, MDB_LAST);
            }
            if code == 0 && key.bytes() != start {
                return mdb_cursor_get(cursor, key, value, MDB_PREV);
            }
            if code == 0 {
                return mdb_cursor_get(cursor, key, value, MDB_GET_CURRENT);
            }
        }
        code
    }
}

impl Kv for LmdbHandle<'_> {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        let dbi = self.dbi(table)?;
        let txn = self.begin_read()?;
        let (mut key_val, mut value) = (MdbVal::of(key), MdbVal::empty());
        // SAFETY: txn is active; key outlives the call.
        let code = unsafe { mdb_get(txn, dbi, &mut key_val, &mut value) };
        out.clear();
        if code == 0 {
            // SAFETY: value is valid until the read transaction ends below.
            out.extend_from_slice(unsafe { value.bytes() });
        }
        self.end_read();
        match code {
            0 => Ok(true),
            MDB_NOTFOUND => Ok(false),
            code => check(code).map(|()| false),
        }
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let dbi = self.dbi(table)?;
        self.write(|txn| {
            let (mut key_val, mut value_val) = (MdbVal::of(key), MdbVal::of(value));
            // SAFETY: txn is a live write transaction; key and value outlive it.
            check(unsafe { mdb_put(txn, dbi, &mut key_val, &mut value_val, 0) })
        })
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        let dbi = self.dbi(table)?;
        self.write(|txn| {
            let mut key_val = MdbVal::of(key);
            // SAFETY: txn is a live write transaction; key outlives the call.
            match unsafe { mdb_del(txn, dbi, &mut key_val, ptr::null_mut()) } {
                0 => Ok(true),
                MDB_NOTFOUND => Ok(false),
                code => check(code).map(|()| false),
            }
        })
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        let dbis = batch
            .iter()
            .map(|(table, _, _)| self.dbi(table))
            .collect::<Result<Vec<c_uint>, KvError>>()?;
        self.write(|txn| {
            for ((_, key, value), &dbi) in batch.iter().zip(&dbis) {
                let mut key_val = MdbVal::of(key);
                // SAFETY: txn is a live write transaction; key and value
                // outlive the calls.
                let code = unsafe {
                    match value {
                        Some(value) => {
                            let mut value_val = MdbVal::of(value);
                            mdb_put(txn, dbi, &mut key_val, &mut value_val, 0)
                        }
                        None => mdb_del(txn, dbi, &mut key_val, ptr::null_mut()),
                    }
                };
                if code != MDB_NOTFOUND {
                    check(code)?;
                }
            }
            Ok(())
        })
    }
    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        self.scan_impl(table, start, f, false)
    }
    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        self.scan_impl(table, start, f, true)
    }
    async fn idle_until(&self, deadline: std::time::Instant) {
        crate::engine::sleep_until(deadline);
    }
}

impl Engine for LmdbEngine {
    fn name(&self) -> &str {
        ENGINE
    }
    fn settings(&self) -> String {
        self.settings.clone()
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Threads
    }
    fn run_job(&self, job: &Job<'_>, threads: usize) -> Result<Vec<TaskStats>, String> {
        run_job_on_threads(&LmdbSource(self), job, threads)
    }
    fn needs_memory_cgroup(&self) -> bool {
        true
    }
    fn close(mut self: Box<Self>) -> Result<(), String> {
        // SAFETY: env is open; force a sync since commits did not.
        let code = unsafe { mdb_env_sync(self.env, 1) };
        // SAFETY: no handle is alive; the env is closed once.
        unsafe { mdb_env_close(self.env) };
        self.env = ptr::null_mut();
        if code == 0 {
            Ok(())
        } else {
            Err(format!("lmdb: sync at close: {}", error_text(code)))
        }
    }
}
