//! fjall (the `fjall` crate, 3.1): an LSM-tree (lsm-tree 3.1) in Rust.
//!
//! Settings, following fjall's documentation: block cache (`cache_size`) =
//! the memory budget; one keyspace (fjall's column family) per workload
//! table; 4 KiB data blocks, bloom filters (L0 1e-4 false positives, deeper
//! levels 10 bits/key), L0/L1 index and L0 filter blocks pinned, leveled
//! compaction (all fjall's defaults); no compression (the crate is built
//! without its `lz4` feature, as RocksDB and WiredTiger run uncompressed);
//! memtables of budget/8 within fjall's recommended 8-64 MiB; 2 worker
//! threads for flushes and compactions (RocksDB's 2 background jobs).
//!
//! Durability: fjall's journal (its WAL) cannot be turned off. With
//! `manual_journal_persist` every put and delete is appended to the journal
//! in a user-space buffer that goes to the OS when full, with no write
//! system call and no fsync per operation; fjall fsyncs a journal only when
//! it seals it (memtable rotation) and the adapter persists it with
//! `PersistMode::SyncAll` at close. So fjall still writes every update
//! twice (journal and table files), which WAL-off RocksDB does not. That is
//! the `none` mode; `buffered` persists the journal with
//! `PersistMode::Buffer` after every commit, `sync` with
//! `PersistMode::SyncData`. A batch is a fjall `WriteBatch`.
//!
//! A delete first asks the tree whether the key exists (the LSM delete is
//! blind; one bloom-filtered read, as the RocksDB adapter does). fjall reads
//! its files with pread through the OS page cache (no direct I/O), so the
//! driver runs it in a memory cgroup (see [`super::page_cache_bytes`]).

use std::sync::Arc;

use ::fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::table_name;
use crate::engine::{
    run_job_on_threads, Concurrency, DurabilityMode, Engine, EngineConfig, HandleSource,
};
use crate::job::{Job, TaskStats};
use crate::kv::{check_table, Kv, KvBatch, KvError, ScanFn};

const ENGINE: &str = "fjall";
/// Version of the `fjall` crate in Cargo.lock (the report names it).
const VERSION: &str = "3.1";
/// Smallest block cache, whatever the budget.
const CACHE_BYTES_MIN: u64 = 1 << 20;
/// Smallest memtable: the low end of fjall's recommended 8-64 MiB.
const MEMTABLE_BYTES_MIN: u64 = 8 << 20;
/// Largest memtable: the high end of fjall's recommended 8-64 MiB.
const MEMTABLE_BYTES_MAX: u64 = 64 << 20;
/// Flush and compaction threads.
const WORKER_THREADS: usize = 2;
/// Longest key lsm-tree accepts (it panics on longer ones).
const KEY_BYTES_MAX: usize = u16::MAX as usize;
/// Longest value lsm-tree accepts (it panics on longer ones).
const VALUE_BYTES_MAX: usize = u32::MAX as usize;

fn engine_error(error: ::fjall::Error) -> KvError {
    KvError::Engine {
        engine: ENGINE,
        message: error.to_string(),
    }
}

/// An open fjall database with one keyspace per workload table.
pub struct FjallEngine {
    db: Database,
    keyspaces: Arc<[Keyspace]>,
    /// How a commit persists the journal (None: it does not).
    persist: Option<PersistMode>,
    settings: String,
}

impl FjallEngine {
    /// Opens or creates the database under `config.dir/fjall`.
    pub fn open(config: &EngineConfig) -> Result<Self, String> {
        let path = config.dir.join("fjall");
        let cache_bytes = config.memory_bytes.max(CACHE_BYTES_MIN);
        let memtable_bytes =
            (config.memory_bytes / 8).clamp(MEMTABLE_BYTES_MIN, MEMTABLE_BYTES_MAX);
        let db = Database::builder(&path)
            .cache_size(cache_bytes)
            .manual_journal_persist(true)
            .worker_threads(WORKER_THREADS)
            .open()
            .map_err(|e| format!("fjall: cannot open {}: {e}", path.display()))?;
        let options = || {
            KeyspaceCreateOptions::default()
                .manual_journal_persist(true)
                .max_memtable_size(memtable_bytes)
        };
        let keyspaces = (0..config.table_count)
            .map(|table| db.keyspace(&table_name(table), options))
            .collect::<Result<Arc<[Keyspace]>, _>>()
            .map_err(|e| format!("fjall: creating {} keyspaces: {e}", config.table_count))?;
        let settings = format!(
            "fjall {VERSION}: block cache={cache_bytes}B, one keyspace per table, 4KiB blocks, \
             bloom (L0 fpr 1e-4, then 10 bits/key), L0/L1 index + L0 filter pinned, \
             leveled compaction, no compression, memtable={memtable_bytes}B per keyspace, \
             worker_threads={WORKER_THREADS}, manual_journal_persist: {}, \
             delete = exists check + remove, reads via pread through the page cache",
            super::durability(ENGINE, config.durability)
        );
        let persist = match config.durability {
            DurabilityMode::None => None,
            DurabilityMode::Buffered => Some(PersistMode::Buffer),
            DurabilityMode::Sync => Some(PersistMode::SyncData),
        };
        Ok(FjallEngine {
            db,
            keyspaces,
            persist,
            settings,
        })
    }
}

/// One thread's fjall handle.
pub struct FjallHandle {
    db: Database,
    keyspaces: Arc<[Keyspace]>,
    persist: Option<PersistMode>,
}

impl HandleSource for FjallEngine {
    type Handle = FjallHandle;
    fn open_handle(&self) -> Result<FjallHandle, String> {
        Ok(FjallHandle {
            db: self.db.clone(),
            keyspaces: Arc::clone(&self.keyspaces),
            persist: self.persist,
        })
    }
}

impl FjallHandle {
    fn write_batch(
        &self,
        batch: &KvBatch,
        persist: Option<PersistMode>,
    ) -> Result<::fjall::OwnedWriteBatch, KvError> {
        let mut write_batch = self.db.batch().durability(persist);
        for (table, key, value) in batch.iter() {
            let keyspace = self.keyspace(table, key)?;
            match value {
                Some(value) => {
                    check_len("value", value, VALUE_BYTES_MAX)?;
                    write_batch.insert(keyspace, key, value);
                }
                None => write_batch.remove(keyspace, key),
            }
        }
        Ok(write_batch)
    }

    /// Persists the journal as the durability mode asks, after a commit.
    fn persist(&self) -> Result<(), KvError> {
        match self.persist {
            Some(mode) => self.db.persist(mode).map_err(engine_error),
            None => Ok(()),
        }
    }

    /// The keyspace of `table`, once `key` is known to be short enough.
    fn keyspace(&self, table: u32, key: &[u8]) -> Result<&Keyspace, KvError> {
        check_table(table, self.keyspaces.len() as u32)?;
        check_len("key", key, KEY_BYTES_MAX)?;
        Ok(&self.keyspaces[table as usize])
    }
}

fn check_len(what: &'static str, bytes: &[u8], limit_bytes: usize) -> Result<(), KvError> {
    if bytes.len() <= limit_bytes {
        Ok(())
    } else {
        Err(KvError::TooLarge {
            what,
            len_bytes: bytes.len(),
            limit_bytes,
        })
    }
}

/// Calls `f` on each entry until it returns false.
fn visit(entries: impl Iterator<Item = ::fjall::Guard>, f: &mut ScanFn<'_>) -> Result<(), KvError> {
    for entry in entries {
        let (key, value) = entry.into_inner().map_err(engine_error)?;
        if !f(&key, &value) {
            break;
        }
    }
    Ok(())
}

impl Kv for FjallHandle {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        let keyspace = self.keyspace(table, key)?;
        out.clear();
        match keyspace.get(key).map_err(engine_error)? {
            Some(value) => {
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        check_len("value", value, VALUE_BYTES_MAX)?;
        self.keyspace(table, key)?
            .insert(key, value)
            .map_err(engine_error)?;
        self.persist()
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        let keyspace = self.keyspace(table, key)?;
        let existed = keyspace.contains_key(key).map_err(engine_error)?;
        if existed {
            keyspace.remove(key).map_err(engine_error)?;
            self.persist()?;
        }
        Ok(existed)
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        self.write_batch(batch, self.persist)?
            .commit()
            .map_err(engine_error)
    }
    /// The batch is committed to the journal's buffer, `applied` runs, then
    /// the journal is persisted as the mode says: one journal in commit
    /// order, so a later commit that saw this batch is behind it.
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        let committed = self
            .write_batch(batch, None)
            .and_then(|b| b.commit().map_err(engine_error));
        applied();
        committed?;
        self.persist()
    }
    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        visit(self.keyspace(table, start)?.range(start..), f)
    }
    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        visit(self.keyspace(table, start)?.range(..=start).rev(), f)
    }
    async fn idle_until(&self, deadline: std::time::Instant) {
        crate::engine::sleep_until(deadline);
    }
}

impl Engine for FjallEngine {
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
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| format!("fjall: persist at close: {e}"))
    }
}
