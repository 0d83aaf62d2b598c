//! Peer engine adapters. Each opens under `EngineConfig::dir`, sizes its
//! cache to `EngineConfig::memory_bytes`, turns the WAL/logging off, and
//! hands out one [`crate::Kv`] handle per thread.

pub mod lmdb;
pub mod rocks;
pub mod wiredtiger;

use crate::engine::{Engine, EngineConfig};

/// Names of the built-in peer engines.
pub const PEER_NAMES: [&str; 3] = ["rocksdb", "wiredtiger", "lmdb"];

/// Opens the peer engine `name`.
pub fn open_peer(name: &str, config: &EngineConfig) -> Result<Box<dyn Engine>, String> {
    std::fs::create_dir_all(&config.dir)
        .map_err(|e| format!("cannot create {}: {e}", config.dir.display()))?;
    match name {
        "rocksdb" => Ok(Box::new(rocks::RocksEngine::open(config)?)),
        "wiredtiger" => Ok(Box::new(wiredtiger::WtEngine::open(config)?)),
        "lmdb" => Ok(Box::new(lmdb::LmdbEngine::open(config)?)),
        other => Err(format!(
            "unknown engine {other:?}: built-in peers are {PEER_NAMES:?}"
        )),
    }
}

/// Prepends the 4-byte big-endian table id to `key` (single-keyspace engines).
pub(crate) fn prefixed_key(buffer: &mut Vec<u8>, table: u32, key: &[u8]) {
    buffer.clear();
    buffer.extend_from_slice(&table.to_be_bytes());
    buffer.extend_from_slice(key);
}
