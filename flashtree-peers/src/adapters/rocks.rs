//! RocksDB through the `rocksdb` crate, linked to Debian's librocksdb
//! (librocksdb-dev 7.8.3; `ROCKSDB_LIB_DIR` in `.cargo/config.toml`).
//!
//! Settings, following RocksDB's tuning guide for point lookups: block cache
//! (LRU) = the memory budget, with index and filter blocks charged to it;
//! 4 KiB blocks; 10 bits/key whole-key bloom filters; hash index inside data
//! blocks; direct I/O for reads and for flush/compaction; no compression;
//! dynamic level sizes. Durability per `EngineConfig::durability`: WAL off
//! (`none`), WAL on without sync (`buffered`), or `WriteOptions::sync`
//! (`sync`: RocksDB's write group shares one fsync among the threads that
//! wait for it). Tables share one keyspace: each key is prefixed by its
//! 4-byte big-endian table id.

use std::cell::RefCell;
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DataBlockIndexType, Options, ReadOptions,
    WriteBatch, WriteOptions, DB,
};

use super::prefixed_key;
use crate::engine::{
    run_job_on_threads, Concurrency, DurabilityMode, Engine, EngineConfig, EngineCounters,
    HandleSource,
};
use crate::job::{Job, TaskStats};
use crate::kv::{check_table, Kv, KvBatch, KvError, ScanFn};

const ENGINE: &str = "rocksdb";
/// Smallest memtable, whatever the budget.
const WRITE_BUFFER_BYTES_MIN: u64 = 4 << 20;
/// Largest memtable, whatever the budget.
const WRITE_BUFFER_BYTES_MAX: u64 = 64 << 20;

/// An open RocksDB database.
pub struct RocksEngine {
    db: Arc<DB>,
    table_count: u32,
    durability: DurabilityMode,
    /// Statistics (for the WAL sync count), kept alive with the database.
    options: Options,
    settings: String,
}

fn engine_error(error: rocksdb::Error) -> KvError {
    KvError::Engine {
        engine: ENGINE,
        message: error.into_string(),
    }
}

impl RocksEngine {
    /// Opens or creates the database under `config.dir`.
    pub fn open(config: &EngineConfig) -> Result<Self, String> {
        let cache_bytes = config.memory_bytes.max(1 << 20);
        let write_buffer_bytes =
            (config.memory_bytes / 8).clamp(WRITE_BUFFER_BYTES_MIN, WRITE_BUFFER_BYTES_MAX);
        let cache = Cache::new_lru_cache(cache_bytes as usize)
            .map_err(|e| format!("rocksdb: block cache: {e}"))?;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_block_size(4096);
        table.set_bloom_filter(10.0, false);
        table.set_whole_key_filtering(true);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
        table.set_format_version(5);
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_block_based_table_factory(&table);
        options.set_use_direct_reads(true);
        options.set_use_direct_io_for_flush_and_compaction(true);
        options.set_compression_type(DBCompressionType::None);
        options.set_write_buffer_size(write_buffer_bytes as usize);
        options.set_max_write_buffer_number(2);
        options.set_max_background_jobs(2);
        options.set_max_open_files(-1);
        options.set_level_compaction_dynamic_level_bytes(true);
        options.set_memtable_whole_key_filtering(true);
        options.set_memtable_prefix_bloom_ratio(0.02);
        if config.durability != DurabilityMode::None {
            // For the WAL sync count (the ticker rocksdb.wal.synced).
            options.enable_statistics();
        }
        let path = config.dir.join("rocksdb");
        let db = DB::open(&options, &path).map_err(|e| {
            format!(
                "rocksdb: cannot open {}: {e} (needs librocksdb-dev)",
                path.display()
            )
        })?;
        let settings = format!(
            "rocksdb 7.8 (Debian librocksdb): block_cache={cache_bytes}B LRU, 4KiB blocks, \
             bloom 10 bits/key, index+filter in cache, data-block hash index, \
             use_direct_reads, direct I/O flush/compaction, no compression, \
             write_buffer={write_buffer_bytes}B x2, background_jobs=2, {}, \
             one Get per key of a batch (batched MultiGet read twice the blocks per TPC-C transaction)",
            super::durability(ENGINE, config.durability)
        );
        Ok(RocksEngine {
            db: Arc::new(db),
            table_count: config.table_count,
            durability: config.durability,
            options,
            settings,
        })
    }
}

/// One thread's RocksDB handle.
pub struct RocksHandle {
    db: Arc<DB>,
    table_count: u32,
    durability: DurabilityMode,
    write_options: WriteOptions,
    /// WAL on, not synced: the first step of `commit_releasing` in `sync`.
    unsynced_write_options: WriteOptions,
    /// Made once per handle: `DB::get_pinned` makes and frees one per call.
    read_options: ReadOptions,
    key_buffer: RefCell<Vec<u8>>,
}

impl HandleSource for RocksEngine {
    type Handle = RocksHandle;
    fn open_handle(&self) -> Result<RocksHandle, String> {
        // RocksDB counts every Get into a thread-local PerfContext unless
        // told not to (its default level is "count"); nothing here reads
        // it, and db_bench turns it off (`--perf_level=1`) too.
        rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::Disable);
        let mut write_options = WriteOptions::default();
        match self.durability {
            DurabilityMode::None => write_options.disable_wal(true),
            DurabilityMode::Buffered => write_options.set_sync(false),
            DurabilityMode::Sync => write_options.set_sync(true),
        }
        let mut unsynced_write_options = WriteOptions::default();
        unsynced_write_options.set_sync(false);
        Ok(RocksHandle {
            db: Arc::clone(&self.db),
            table_count: self.table_count,
            durability: self.durability,
            write_options,
            unsynced_write_options,
            read_options: ReadOptions::default(),
            key_buffer: RefCell::new(Vec::with_capacity(64)),
        })
    }
}

impl RocksHandle {
    fn write_batch(&self, batch: &KvBatch) -> Result<WriteBatch, KvError> {
        let mut write_batch = WriteBatch::default();
        let mut full_key = self.key_buffer.borrow_mut();
        for (table, key, value) in batch.iter() {
            check_table(table, self.table_count)?;
            prefixed_key(&mut full_key, table, key);
            match value {
                Some(value) => write_batch.put(&full_key[..], value),
                None => write_batch.delete(&full_key[..]),
            }
        }
        Ok(write_batch)
    }

    fn scan_impl(
        &self,
        table: u32,
        start: &[u8],
        f: &mut ScanFn<'_>,
        reverse: bool,
    ) -> Result<(), KvError> {
        check_table(table, self.table_count)?;
        let prefix = table.to_be_bytes();
        let mut read_options = ReadOptions::default();
        read_options.fill_cache(true);
        let mut iterator = self.db.raw_iterator_opt(read_options);
        let mut key = self.key_buffer.borrow_mut();
        prefixed_key(&mut key, table, start);
        if reverse {
            iterator.seek_for_prev(&key[..]);
        } else {
            iterator.seek(&key[..]);
        }
        while let (Some(full_key), Some(value)) = (iterator.key(), iterator.value()) {
            if !full_key.starts_with(&prefix) || !f(&full_key[4..], value) {
                break;
            }
            if reverse {
                iterator.prev();
            } else {
                iterator.next();
            }
        }
        iterator.status().map_err(engine_error)
    }
}

impl Kv for RocksHandle {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        check_table(table, self.table_count)?;
        let mut full_key = self.key_buffer.borrow_mut();
        prefixed_key(&mut full_key, table, key);
        out.clear();
        match self
            .db
            .get_pinned_opt(&full_key[..], &self.read_options)
            .map_err(engine_error)?
        {
            Some(value) => {
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        check_table(table, self.table_count)?;
        let mut full_key = self.key_buffer.borrow_mut();
        prefixed_key(&mut full_key, table, key);
        self.db
            .put_opt(&full_key[..], value, &self.write_options)
            .map_err(engine_error)
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        check_table(table, self.table_count)?;
        let mut full_key = self.key_buffer.borrow_mut();
        prefixed_key(&mut full_key, table, key);
        // The LSM delete is blind; the answer costs one read (bloom-filtered).
        let existed = self
            .db
            .get_pinned_opt(&full_key[..], &self.read_options)
            .map_err(engine_error)?
            .is_some();
        if existed {
            self.db
                .delete_opt(&full_key[..], &self.write_options)
                .map_err(engine_error)?;
        }
        Ok(existed)
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        self.db
            .write_opt(self.write_batch(batch)?, &self.write_options)
            .map_err(engine_error)
    }
    /// The batch goes to the WAL and the memtable as in the mode (in
    /// `sync`, unsynced), `applied` runs, then in `sync` `FlushWAL(sync)`
    /// syncs the WAL up to its end. One WAL in write order: a later commit
    /// that saw this batch is behind it in the WAL.
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        let sync = self.durability == DurabilityMode::Sync;
        let options = if sync {
            &self.unsynced_write_options
        } else {
            &self.write_options
        };
        let written = self.db.write_opt(self.write_batch(batch)?, options);
        applied();
        written.map_err(engine_error)?;
        if sync {
            self.db.flush_wal(true).map_err(engine_error)?;
        }
        Ok(())
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

/// The count of ticker `rocksdb.wal.synced` in RocksDB's statistics text
/// (a line `rocksdb.wal.synced COUNT : 123`).
fn wal_syncs(statistics: &str) -> Option<u64> {
    ticker(statistics, "rocksdb.wal.synced")
}

/// The count of the ticker `name` in the text of `Options::get_statistics`.
fn ticker(statistics: &str, name: &str) -> Option<u64> {
    statistics.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(" COUNT : ")?
            .trim()
            .parse()
            .ok()
    })
}

impl Engine for RocksEngine {
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
    fn counters(&self) -> EngineCounters {
        let statistics = self.options.get_statistics();
        EngineCounters {
            log_syncs: statistics.as_deref().and_then(wal_syncs),
            log_bytes: statistics
                .as_deref()
                .and_then(|text| ticker(text, "rocksdb.wal.bytes")),
            ..EngineCounters::default()
        }
    }
    fn compact(&self) -> Result<Option<String>, String> {
        // A manual compaction of the whole key range (`CompactRange`), as
        // `ldb compact` makes: every level's files merged down, so a scan
        // seeks fewer sorted runs.
        self.db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(Some("CompactRange over the whole key range".into()))
    }

    fn close(self: Box<Self>) -> Result<(), String> {
        self.db
            .flush()
            .map_err(|e| format!("rocksdb: flush at close: {e}"))
    }
}

#[cfg(test)]
mod ticker_tests {
    use super::{ticker, wal_syncs};

    #[test]
    fn tickers_are_read_by_exact_name() {
        let text = "rocksdb.wal.synced COUNT : 12\nrocksdb.wal.bytes COUNT : 4096\nrocksdb.wal.bytes.extra COUNT : 1\n";
        assert_eq!(wal_syncs(text), Some(12));
        assert_eq!(ticker(text, "rocksdb.wal.bytes"), Some(4096));
        assert_eq!(ticker(text, "rocksdb.wal"), None);
        assert_eq!(ticker(text, "rocksdb.missing"), None);
    }
}
