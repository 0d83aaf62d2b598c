//! Peer engine adapters. Each opens under `EngineConfig::dir`, sizes its
//! cache to `EngineConfig::memory_bytes`, sets its log and syncs to
//! `EngineConfig::durability` (the nearest setting it has; [`durability`]
//! says which), and hands out one [`crate::Kv`] handle per thread.

pub mod fjall;
pub mod lmdb;
pub mod redb;
pub mod rocks;
pub mod wiredtiger;

use crate::engine::{DurabilityMode, Engine, EngineConfig};

/// Names of the built-in peer engines.
pub const PEER_NAMES: [&str; 5] = ["rocksdb", "wiredtiger", "lmdb", "redb", "fjall"];

/// Most page cache a peer with a cache of its own may keep beside it inside
/// its memory cgroup: room to stage writes and reads, not a second cache.
pub const PAGE_CACHE_BESIDE_CACHE_BYTES_MAX: u64 = 16 << 20;

/// Opens the peer engine `name`.
pub fn open_peer(name: &str, config: &EngineConfig) -> Result<Box<dyn Engine>, String> {
    std::fs::create_dir_all(&config.dir)
        .map_err(|e| format!("cannot create {}: {e}", config.dir.display()))?;
    match name {
        "rocksdb" => Ok(Box::new(rocks::RocksEngine::open(config)?)),
        "wiredtiger" => Ok(Box::new(wiredtiger::WtEngine::open(config)?)),
        "lmdb" => Ok(Box::new(lmdb::LmdbEngine::open(config)?)),
        "redb" => Ok(Box::new(redb::RedbEngine::open(config)?)),
        "fjall" => Ok(Box::new(fjall::FjallEngine::open(config)?)),
        other => Err(format!(
            "unknown engine {other:?}: built-in peers are {}",
            PEER_NAMES.join(", ")
        )),
    }
}

/// True if peer `name` reads through mmap or the OS page cache (no direct
/// I/O), so the driver must run it in a memory cgroup, entered before the
/// engine opens (the cgroup charges what the process touches from then on).
/// Agrees with [`Engine::needs_memory_cgroup`] of the opened engine.
pub fn needs_memory_cgroup(name: &str) -> bool {
    page_cache_bytes(name, 0).is_some()
}

/// The page cache peer `name` may hold inside its memory cgroup when its
/// budget is `memory_bytes` (None: no cgroup, the engine does direct I/O).
/// LMDB has no cache of its own: its page cache is its cache and gets the
/// budget. redb and fjall already hold the budget in their own caches
/// (anonymous memory, which the cgroup's limit follows), so their page
/// cache gets only an eighth of the budget, at most
/// [`PAGE_CACHE_BESIDE_CACHE_BYTES_MAX`].
pub fn page_cache_bytes(name: &str, memory_bytes: u64) -> Option<u64> {
    match name {
        "lmdb" => Some(memory_bytes),
        "redb" | "fjall" => Some((memory_bytes / 8).min(PAGE_CACHE_BESIDE_CACHE_BYTES_MAX)),
        _ => None,
    }
}

/// The cache peer `name` sets to the budget `memory_bytes`, for the report.
pub fn cache_setting(name: &str, memory_bytes: u64) -> String {
    match name {
        "lmdb" => "no cache of its own (reads through mmap)".to_string(),
        _ => format!("engine cache = budget {memory_bytes} B"),
    }
}

/// True when engine `name`'s files, once loaded in one durability mode,
/// may serve a run in another (`bench compare --reuse-data`). Not so for
/// the peers: WiredTiger data loaded with logging off and then run with it
/// on lost every acknowledged commit after a kill (`bench recover
/// --workload tpcc`), and the others are not known to be safe. flashtree's
/// clean close writes every dirty page in every mode, and a logged open
/// starts its logs from that state.
pub fn load_serves_every_durability(name: &str) -> bool {
    name == "flashtree"
}

/// What engine `name` (a peer or flashtree) does for durability in `mode`:
/// the report's per-engine line. An engine that lacks the mode runs the
/// nearest one, and the line says so.
pub fn durability(name: &str, mode: DurabilityMode) -> &'static str {
    use DurabilityMode::*;
    // flashtree-hash is flashtree with hash trees: the same log.
    let name = if name == "flashtree-hash" {
        "flashtree"
    } else {
        name
    };
    match (name, mode) {
        ("flashtree", None) => "Durability::None: no log; dirty pages reach the store at eviction and close",
        ("flashtree", Buffered) => {
            "Durability::Buffered { max_delay_ms: 10 }: per-worker logs written within 10 ms; a commit returns before"
        }
        ("flashtree", Sync) => {
            "Durability::Sync: a commit returns once its log records are durable (group commit; LogWrites::Auto: writes then an fdatasync through the worker's I/O channel, or RWF_DSYNC writes from its thread when it would only wait)"
        }
        ("rocksdb", None) => "WAL off (WriteOptions::disable_wal)",
        ("rocksdb", Buffered) => "WAL on, WriteOptions::sync=false (log written to the OS at each write, not synced)",
        ("rocksdb", Sync) => "WAL on, WriteOptions::sync=true (one fsync per write group)",
        ("wiredtiger", None) => "log=(enabled=false): commits durable only at checkpoints and close",
        ("wiredtiger", Buffered) => "log=(enabled=true), transaction_sync=(enabled=false)",
        ("wiredtiger", Sync) => "log=(enabled=true), transaction_sync=(enabled=true,method=fsync)",
        ("lmdb", None) => "MDB_NOSYNC|MDB_NOMETASYNC: no sync at commit",
        ("lmdb", Buffered) => {
            "MDB_NOMETASYNC: data pages synced at commit, the meta page not (a crash may undo the last commit)"
        }
        ("lmdb", Sync) => "default flags: data pages and meta page synced at every commit",
        ("redb", None) => "Durability::None at every commit (redb has no log; durable at close)",
        ("redb", Buffered) => {
            "Durability::None at every commit (redb 4 has no buffered mode: the nearest; durable at close)"
        }
        ("redb", Sync) => "Durability::Immediate at every commit (fsync per commit)",
        ("fjall", None) => {
            "journal ON (fjall cannot turn it off), appended through a user-space buffer \
             (manual_journal_persist), no sync at commit"
        }
        ("fjall", Buffered) => "journal flushed to the OS at every commit (PersistMode::Buffer), not synced",
        ("fjall", Sync) => "journal fdatasync'd at every commit (PersistMode::SyncData)",
        _ => "unknown engine",
    }
}

/// Prepends the 4-byte big-endian table id to `key` (single-keyspace engines).
pub(crate) fn prefixed_key(buffer: &mut Vec<u8>, table: u32, key: &[u8]) {
    buffer.clear();
    buffer.extend_from_slice(&table.to_be_bytes());
    buffer.extend_from_slice(key);
}

/// Name of table `table` in engines with named tables.
pub(crate) fn table_name(table: u32) -> String {
    format!("t{table}")
}
