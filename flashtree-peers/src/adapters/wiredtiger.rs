//! WiredTiger 3.2.1 (Debian libwiredtiger-dev) through the C shim in
//! `csrc/wt_shim.c`, with B-tree tables as in Haas & Leis (VLDB 2023).
//!
//! Settings: `cache_size` = the memory budget; `direct_io=[data]`; logging
//! and `transaction_sync` per `EngineConfig::durability` (see
//! [`super::durability`]); 4 KiB allocation, internal and leaf pages; no
//! compression; sessions at `isolation=read-uncommitted` (the least
//! isolation, Haas & Leis (VLDB 2023) §4.1); autocommit operations, and a
//! snapshot transaction per batch. Table N is `table:tN` with raw byte
//! keys/values.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;

use crate::engine::{
    run_job_on_threads, Concurrency, DurabilityMode, Engine, EngineConfig, HandleSource,
};
use crate::job::{Job, TaskStats};
use crate::kv::{check_table, Kv, KvBatch, KvError, ScanFn};

const ENGINE: &str = "wiredtiger";
/// Tables the shim supports (`WTS_TABLES_MAX` in the C file).
const TABLES_MAX: u32 = 64;
/// WiredTiger's smallest cache.
const CACHE_BYTES_MIN: u64 = 1 << 20;

#[repr(C)]
struct WtConnection {
    _private: [u8; 0],
}
#[repr(C)]
struct WtsSession {
    _private: [u8; 0],
}

extern "C" {
    fn wts_notfound() -> c_int;
    fn wts_strerror(code: c_int) -> *const c_char;
    fn wts_version() -> *const c_char;
    fn wts_open(home: *const c_char, config: *const c_char, out: *mut *mut WtConnection) -> c_int;
    fn wts_close(conn: *mut WtConnection) -> c_int;
    fn wts_create_tables(conn: *mut WtConnection, tables: c_int, config: *const c_char) -> c_int;
    fn wts_session_open(conn: *mut WtConnection, tables: c_int, out: *mut *mut WtsSession)
        -> c_int;
    fn wts_session_close(session: *mut WtsSession);
    fn wts_reset(session: *mut WtsSession, table: c_int) -> c_int;
    fn wts_get(
        session: *mut WtsSession,
        table: c_int,
        key: *const c_void,
        key_len: usize,
        value: *mut *const c_void,
        value_len: *mut usize,
    ) -> c_int;
    fn wts_put(
        session: *mut WtsSession,
        table: c_int,
        key: *const c_void,
        key_len: usize,
        value: *const c_void,
        value_len: usize,
    ) -> c_int;
    fn wts_delete(
        session: *mut WtsSession,
        table: c_int,
        key: *const c_void,
        key_len: usize,
    ) -> c_int;
    fn wts_write_batch_with(
        session: *mut WtsSession,
        count: usize,
        tables: *const c_int,
        keys: *const *const c_void,
        key_lens: *const usize,
        values: *const *const c_void,
        value_lens: *const usize,
        commit_config: *const c_char,
    ) -> c_int;
    fn wts_log_sync(session: *mut WtsSession) -> c_int;
    fn wts_seek(
        session: *mut WtsSession,
        table: c_int,
        key: *const c_void,
        key_len: usize,
        reverse: c_int,
    ) -> c_int;
    fn wts_step(session: *mut WtsSession, table: c_int, reverse: c_int) -> c_int;
    fn wts_current(
        session: *mut WtsSession,
        table: c_int,
        key: *mut *const c_void,
        key_len: *mut usize,
        value: *mut *const c_void,
        value_len: *mut usize,
    ) -> c_int;
}

fn error_text(code: c_int) -> String {
    // SAFETY: wiredtiger_strerror returns a static NUL-terminated string for any code.
    let text = unsafe { CStr::from_ptr(wts_strerror(code)) };
    format!("{} (code {code})", text.to_string_lossy())
}

fn engine_error(code: c_int) -> KvError {
    KvError::Engine {
        engine: ENGINE,
        message: error_text(code),
    }
}

/// An open WiredTiger connection.
pub struct WtEngine {
    connection: *mut WtConnection,
    table_count: u32,
    durability: DurabilityMode,
    settings: String,
}

// SAFETY: WT_CONNECTION is thread safe (WiredTiger docs: "all methods of
// WT_CONNECTION are thread safe"); sessions are opened per thread.
unsafe impl Send for WtEngine {}
// SAFETY: as above.
unsafe impl Sync for WtEngine {}

impl WtEngine {
    /// Opens or creates the database under `config.dir/wiredtiger`.
    pub fn open(config: &EngineConfig) -> Result<Self, String> {
        if config.table_count > TABLES_MAX {
            return Err(format!("wiredtiger: at most {TABLES_MAX} tables"));
        }
        let home = config.dir.join("wiredtiger");
        std::fs::create_dir_all(&home)
            .map_err(|e| format!("wiredtiger: {}: {e}", home.display()))?;
        let cache_bytes = config.memory_bytes.max(CACHE_BYTES_MIN);
        let sessions_max = config.threads_max + 16;
        let log_config = match config.durability {
            DurabilityMode::None => "log=(enabled=false)",
            DurabilityMode::Buffered => "log=(enabled=true),transaction_sync=(enabled=false)",
            DurabilityMode::Sync => {
                "log=(enabled=true),transaction_sync=(enabled=true,method=fsync)"
            }
        };
        let open_config = format!(
            "create,cache_size={cache_bytes}B,direct_io=[data],{log_config},\
             session_max={sessions_max},checkpoint_sync=false"
        );
        let table_config = "key_format=u,value_format=u,allocation_size=4KB,\
                            internal_page_max=4KB,leaf_page_max=4KB";
        let home_c = CString::new(home.to_string_lossy().as_bytes())
            .map_err(|_| "wiredtiger: data directory contains a NUL byte".to_string())?;
        let open_c = CString::new(open_config.clone()).expect("no NUL in config");
        let table_c = CString::new(table_config).expect("no NUL in config");
        let mut connection = ptr::null_mut();
        // SAFETY: all strings are NUL-terminated and outlive the call.
        let code = unsafe { wts_open(home_c.as_ptr(), open_c.as_ptr(), &mut connection) };
        if code != 0 {
            return Err(format!(
                "wiredtiger: cannot open {}: {} (needs libwiredtiger-dev)",
                home.display(),
                error_text(code)
            ));
        }
        // SAFETY: connection is open; table_config outlives the call.
        let code =
            unsafe { wts_create_tables(connection, config.table_count as c_int, table_c.as_ptr()) };
        if code != 0 {
            // SAFETY: connection is open and not used after this.
            unsafe { wts_close(connection) };
            return Err(format!(
                "wiredtiger: cannot create tables: {}",
                error_text(code)
            ));
        }
        // SAFETY: returns a static string.
        let version = unsafe { CStr::from_ptr(wts_version()) }
            .to_string_lossy()
            .into_owned();
        let settings = format!(
            "{version}: B-tree tables, cache_size={cache_bytes}B, direct_io=[data], \
             4KiB allocation/internal/leaf pages, no compression, \
             isolation=read-uncommitted, autocommit ops, a snapshot txn per batch, {}",
            super::durability(ENGINE, config.durability)
        );
        Ok(WtEngine {
            connection,
            table_count: config.table_count,
            durability: config.durability,
            settings,
        })
    }
}

impl Drop for WtEngine {
    fn drop(&mut self) {
        if !self.connection.is_null() {
            // SAFETY: all sessions (handles) borrow the engine and are closed by now.
            unsafe { wts_close(self.connection) };
        }
    }
}

/// One thread's WiredTiger session with a cursor per table.
pub struct WtHandle {
    session: *mut WtsSession,
    table_count: u32,
    durability: DurabilityMode,
}

impl Drop for WtHandle {
    fn drop(&mut self) {
        // SAFETY: the session was opened by wts_session_open and is closed once.
        unsafe { wts_session_close(self.session) };
    }
}

impl HandleSource for WtEngine {
    type Handle = WtHandle;
    fn open_handle(&self) -> Result<WtHandle, String> {
        let mut session = ptr::null_mut();
        // SAFETY: the connection is open for the engine's lifetime.
        let code =
            unsafe { wts_session_open(self.connection, self.table_count as c_int, &mut session) };
        if code != 0 {
            return Err(format!(
                "wiredtiger: cannot open a session: {}",
                error_text(code)
            ));
        }
        Ok(WtHandle {
            session,
            table_count: self.table_count,
            durability: self.durability,
        })
    }
}

impl WtHandle {
    /// Commits `batch` as one transaction; `commit_config` overrides the
    /// commit's configuration (None: the connection's).
    fn write_batch(&self, batch: &KvBatch, commit_config: Option<&CStr>) -> Result<(), KvError> {
        let count = batch.len();
        let (mut tables, mut keys, mut key_lens, mut values, mut value_lens) = (
            Vec::with_capacity(count),
            Vec::with_capacity(count),
            Vec::with_capacity(count),
            Vec::with_capacity(count),
            Vec::with_capacity(count),
        );
        for (table, key, value) in batch.iter() {
            check_table(table, self.table_count)?;
            tables.push(table as c_int);
            keys.push(key.as_ptr().cast::<c_void>());
            key_lens.push(key.len());
            values.push(value.map_or(ptr::null(), |v| v.as_ptr().cast::<c_void>()));
            value_lens.push(value.map_or(0, <[u8]>::len));
        }
        // SAFETY: session is this thread's; the five arrays hold `count`
        // entries each and, with the batch's bytes they point into, outlive
        // the call; a null value marks a delete; the config is a
        // NUL-terminated string or null.
        let code = unsafe {
            wts_write_batch_with(
                self.session,
                count,
                tables.as_ptr(),
                keys.as_ptr(),
                key_lens.as_ptr(),
                values.as_ptr(),
                value_lens.as_ptr(),
                commit_config.map_or(ptr::null(), CStr::as_ptr),
            )
        };
        if code == 0 {
            Ok(())
        } else {
            Err(engine_error(code))
        }
    }

    fn scan_impl(
        &self,
        table: u32,
        start: &[u8],
        f: &mut ScanFn<'_>,
        reverse: bool,
    ) -> Result<(), KvError> {
        check_table(table, self.table_count)?;
        let (t, direction) = (table as c_int, reverse as c_int);
        // SAFETY: session is this thread's; start outlives the call.
        let mut code = unsafe {
            wts_seek(
                self.session,
                t,
                start.as_ptr().cast(),
                start.len(),
                direction,
            )
        };
        while code == 0 {
            let (mut key, mut key_len, mut value, mut value_len) = (ptr::null(), 0, ptr::null(), 0);
            // SAFETY: the cursor is positioned; out-pointers are valid locals.
            code = unsafe {
                wts_current(
                    self.session,
                    t,
                    &mut key,
                    &mut key_len,
                    &mut value,
                    &mut value_len,
                )
            };
            if code != 0 {
                break;
            }
            // SAFETY: WiredTiger keeps key/value valid until the next cursor call.
            let (key, value) = unsafe {
                (
                    std::slice::from_raw_parts(key.cast::<u8>(), key_len),
                    std::slice::from_raw_parts(value.cast::<u8>(), value_len),
                )
            };
            if !f(key, value) {
                break;
            }
            // SAFETY: the cursor is positioned.
            code = unsafe { wts_step(self.session, t, direction) };
        }
        // SAFETY: resetting releases the cursor's position and pinned page.
        unsafe { wts_reset(self.session, t) };
        // SAFETY: pure function.
        if code == 0 || code == unsafe { wts_notfound() } {
            Ok(())
        } else {
            Err(engine_error(code))
        }
    }
}

impl Kv for WtHandle {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        check_table(table, self.table_count)?;
        let (mut value, mut value_len) = (ptr::null(), 0usize);
        // SAFETY: session is this thread's; key outlives the call.
        let code = unsafe {
            wts_get(
                self.session,
                table as c_int,
                key.as_ptr().cast(),
                key.len(),
                &mut value,
                &mut value_len,
            )
        };
        out.clear();
        if code == 0 {
            // SAFETY: value is valid until the next call on this cursor.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(value.cast::<u8>(), value_len)
            });
        }
        // SAFETY: resetting the cursor releases the page it pins.
        unsafe { wts_reset(self.session, table as c_int) };
        // SAFETY: pure function.
        match code {
            0 => Ok(true),
            code if code == unsafe { wts_notfound() } => Ok(false),
            code => Err(engine_error(code)),
        }
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        check_table(table, self.table_count)?;
        // SAFETY: session is this thread's; key and value outlive the call.
        let code = unsafe {
            wts_put(
                self.session,
                table as c_int,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
            )
        };
        if code == 0 {
            Ok(())
        } else {
            Err(engine_error(code))
        }
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        check_table(table, self.table_count)?;
        // SAFETY: session is this thread's; key outlives the call.
        let code =
            unsafe { wts_delete(self.session, table as c_int, key.as_ptr().cast(), key.len()) };
        // SAFETY: pure function.
        match code {
            0 => Ok(true),
            code if code == unsafe { wts_notfound() } => Ok(false),
            code => Err(engine_error(code)),
        }
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        self.write_batch(batch, None)
    }
    /// The transaction commits as in the mode (in `sync`, with `sync=off`:
    /// logged, not synced), `applied` runs, then in `sync`
    /// `log_flush(sync=on)` syncs the log up to its end. One log in commit
    /// order: a later commit that saw this batch is behind it.
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        let sync = self.durability == DurabilityMode::Sync;
        let committed = self.write_batch(batch, sync.then_some(c"sync=off"));
        applied();
        committed?;
        // SAFETY: session is this thread's.
        match sync.then(|| unsafe { wts_log_sync(self.session) }) {
            None | Some(0) => Ok(()),
            Some(code) => Err(engine_error(code)),
        }
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

impl Engine for WtEngine {
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
        run_job_on_threads(self, job, threads)
    }
    fn close(mut self: Box<Self>) -> Result<(), String> {
        let connection = std::mem::replace(&mut self.connection, ptr::null_mut());
        // SAFETY: no session is open (handles live only inside run_job).
        let code = unsafe { wts_close(connection) };
        if code == 0 {
            Ok(())
        } else {
            Err(format!("wiredtiger: close: {}", error_text(code)))
        }
    }
}
