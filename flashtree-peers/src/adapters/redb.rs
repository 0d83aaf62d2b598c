//! redb (the `redb` crate, 4.5): a copy-on-write B-tree in one file, in Rust.
//!
//! Settings, following redb's documentation: `Builder::set_cache_size` = the
//! memory budget (redb's one cache: read cache plus a write buffer of at
//! most half of it); one redb table per workload table (`t0`, `t1`, ...)
//! with byte-string keys and values (memcmp order); one write transaction
//! per put, delete or batch, committed with `Durability::None` for the
//! `none` and `buffered` modes (redb has no log to turn off: such a commit
//! is not fsynced and its pages may stay in the write buffer; they become
//! durable at `Database::close`) and `Durability::Immediate` for `sync`;
//! one read transaction per get or scan. redb has one writer at a time:
//! write transactions queue for it. redb reads its file with pread through
//! the OS page cache (no direct I/O), so the driver runs it in a memory
//! cgroup (see [`super::page_cache_bytes`]).

use std::sync::Arc;

use ::redb::{
    AccessGuard, Builder, Database, Durability, ReadOnlyTable, ReadableDatabase, StorageError,
    Table, TableDefinition,
};

use super::table_name;
use crate::engine::{
    run_job_on_threads, Concurrency, DurabilityMode, Engine, EngineConfig, HandleSource,
};
use crate::job::{Job, TaskStats};
use crate::kv::{check_table, Kv, KvBatch, KvError, ScanFn};

const ENGINE: &str = "redb";
/// Version of the `redb` crate in Cargo.lock (the report names it).
const VERSION: &str = "4.5";
/// Smallest cache, whatever the budget.
const CACHE_BYTES_MIN: u64 = 1 << 20;

type Bytes = &'static [u8];
type Entry = (AccessGuard<'static, Bytes>, AccessGuard<'static, Bytes>);

fn engine_error(error: impl std::fmt::Display) -> KvError {
    KvError::Engine {
        engine: ENGINE,
        message: error.to_string(),
    }
}

fn definition(name: &str) -> TableDefinition<'_, Bytes, Bytes> {
    TableDefinition::new(name)
}

/// An open redb database with one table per workload table.
pub struct RedbEngine {
    db: Arc<Database>,
    tables: Arc<[String]>,
    durability: Durability,
    settings: String,
}

/// redb's setting for `mode` (redb 4 has only None and Immediate).
fn redb_durability(mode: DurabilityMode) -> Durability {
    match mode {
        DurabilityMode::None | DurabilityMode::Buffered => Durability::None,
        DurabilityMode::Sync => Durability::Immediate,
    }
}

impl RedbEngine {
    /// Opens or creates the database file `config.dir/redb/data.redb`.
    pub fn open(config: &EngineConfig) -> Result<Self, String> {
        let dir = config.dir.join("redb");
        std::fs::create_dir_all(&dir).map_err(|e| format!("redb: {}: {e}", dir.display()))?;
        let path = dir.join("data.redb");
        let cache_bytes = config.memory_bytes.max(CACHE_BYTES_MIN);
        let cache_bytes_usize = usize::try_from(cache_bytes)
            .map_err(|_| format!("redb: cache of {cache_bytes} B does not fit in memory"))?;
        let db = Builder::new()
            .set_cache_size(cache_bytes_usize)
            .create(&path)
            .map_err(|e| format!("redb: cannot open {}: {e}", path.display()))?;
        let tables: Arc<[String]> = (0..config.table_count).map(table_name).collect();
        let create = || -> Result<(), KvError> {
            let mut txn = db.begin_write().map_err(engine_error)?;
            txn.set_durability(Durability::None).map_err(engine_error)?;
            for name in tables.iter() {
                txn.open_table(definition(name)).map_err(engine_error)?;
            }
            txn.commit().map_err(engine_error)
        };
        create().map_err(|e| format!("redb: creating {} tables: {e}", tables.len()))?;
        let settings = format!(
            "redb {VERSION}: cache={cache_bytes}B (read cache + write buffer <= half), \
             one table per workload table, one write txn per put/delete or batch: {}, \
             one read txn per get/scan, single writer, reads via pread through the page cache",
            super::durability(ENGINE, config.durability)
        );
        Ok(RedbEngine {
            db: Arc::new(db),
            tables,
            durability: redb_durability(config.durability),
            settings,
        })
    }
}

/// One thread's redb handle.
pub struct RedbHandle {
    db: Arc<Database>,
    tables: Arc<[String]>,
    durability: Durability,
}

impl HandleSource for RedbEngine {
    type Handle = RedbHandle;
    fn open_handle(&self) -> Result<RedbHandle, String> {
        Ok(RedbHandle {
            db: Arc::clone(&self.db),
            tables: Arc::clone(&self.tables),
            durability: self.durability,
        })
    }
}

impl RedbHandle {
    fn name(&self, table: u32) -> Result<&str, KvError> {
        check_table(table, self.tables.len() as u32)?;
        Ok(&self.tables[table as usize])
    }

    /// `table` in a new read transaction (the table keeps it alive).
    fn read(&self, table: u32) -> Result<ReadOnlyTable<Bytes, Bytes>, KvError> {
        let name = self.name(table)?;
        let txn = self.db.begin_read().map_err(engine_error)?;
        txn.open_table(definition(name)).map_err(engine_error)
    }

    /// Runs `body` on `table` inside one write transaction committed with
    /// the engine's durability; an error aborts it (the transaction is dropped).
    fn write<T>(
        &self,
        table: u32,
        body: impl FnOnce(&mut Table<'_, Bytes, Bytes>) -> Result<T, StorageError>,
    ) -> Result<T, KvError> {
        let name = self.name(table)?;
        let mut txn = self.db.begin_write().map_err(engine_error)?;
        txn.set_durability(self.durability).map_err(engine_error)?;
        let value = {
            let mut opened = txn.open_table(definition(name)).map_err(engine_error)?;
            body(&mut opened).map_err(engine_error)?
        };
        txn.commit().map_err(engine_error)?;
        Ok(value)
    }
}

/// Calls `f` on each entry until it returns false.
fn visit(
    entries: impl Iterator<Item = Result<Entry, StorageError>>,
    f: &mut ScanFn<'_>,
) -> Result<(), KvError> {
    for entry in entries {
        let (key, value) = entry.map_err(engine_error)?;
        if !f(key.value(), value.value()) {
            break;
        }
    }
    Ok(())
}

impl Kv for RedbHandle {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        let opened = self.read(table)?;
        out.clear();
        match opened.get(key).map_err(engine_error)? {
            Some(value) => {
                out.extend_from_slice(value.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        self.write(table, |opened| opened.insert(key, value).map(drop))
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        self.write(table, |opened| opened.remove(key).map(|old| old.is_some()))
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        for (table, _, _) in batch.iter() {
            self.name(table)?;
        }
        let mut txn = self.db.begin_write().map_err(engine_error)?;
        txn.set_durability(self.durability).map_err(engine_error)?;
        // One table open at a time (redb refuses a table opened twice):
        // each table's entries in batch order.
        let mut tables: Vec<u32> = batch.iter().map(|(table, _, _)| table).collect();
        tables.sort_unstable();
        tables.dedup();
        for table in tables {
            let mut opened = txn
                .open_table(definition(&self.tables[table as usize]))
                .map_err(engine_error)?;
            for (_, key, value) in batch.iter().filter(|(t, _, _)| *t == table) {
                match value {
                    Some(value) => opened.insert(key, value).map(drop),
                    None => opened.remove(key).map(drop),
                }
                .map_err(engine_error)?;
            }
        }
        txn.commit().map_err(engine_error)
    }
    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        let opened = self.read(table)?;
        visit(opened.range(start..).map_err(engine_error)?, f)
    }
    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        let opened = self.read(table)?;
        visit(opened.range(..=start).map_err(engine_error)?.rev(), f)
    }
    async fn idle_until(&self, deadline: std::time::Instant) {
        crate::engine::sleep_until(deadline);
    }
}

impl Engine for RedbEngine {
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
    fn needs_memory_cgroup(&self) -> bool {
        true
    }
    fn close(self: Box<Self>) -> Result<(), String> {
        let db = Arc::try_unwrap(self.db)
            .map_err(|_| "redb: close while a handle is still open".to_string())?;
        // Makes the non-durable commits durable (one fsynced commit).
        db.close().map_err(|e| format!("redb: close: {e}"))
    }
}
