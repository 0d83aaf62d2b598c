//! Every peer adapter against the BTreeMap model, plus what the driver
//! relies on: data survives `close`, and the memory cgroup decision made
//! by name before opening agrees with the opened engine.

use std::path::Path;

use flashtree_peers::adapters::fjall::FjallEngine;
use flashtree_peers::adapters::lmdb::{LmdbEngine, LmdbSource};
use flashtree_peers::adapters::redb::RedbEngine;
use flashtree_peers::adapters::rocks::RocksEngine;
use flashtree_peers::adapters::wiredtiger::WtEngine;
use flashtree_peers::adapters::{needs_memory_cgroup, open_peer, PEER_NAMES};
use flashtree_peers::testing::model_check;
use flashtree_peers::{block_on, DurabilityMode, Engine, EngineConfig, HandleSource, Kv};

fn config(dir: &Path) -> EngineConfig {
    config_in(dir, DurabilityMode::None)
}

fn config_in(dir: &Path, durability: DurabilityMode) -> EngineConfig {
    EngineConfig {
        dir: dir.to_path_buf(),
        memory_bytes: 16 << 20,
        table_count: 3,
        threads_max: 8,
        cores: Vec::new(),
        durability,
    }
}

fn run_model<S: HandleSource>(source: &S) {
    let handle = source.open_handle().expect("open handle");
    block_on(model_check(&handle, 3, 4000, 42)).expect("model check");
}

/// Opens an engine in a fresh directory and runs `body` on it.
fn on_fresh<E>(open: impl Fn(&EngineConfig) -> Result<E, String>, body: impl FnOnce(&E)) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let engine = open(&config(dir.path())).expect("open");
    body(&engine);
}

/// The model (with its batch commits) in the `buffered` and `sync` modes,
/// where each engine logs and syncs: fewer operations, since each syncs.
fn matches_model_in_logged_modes<E>(
    open: impl Fn(&EngineConfig) -> Result<E, String>,
    run: impl Fn(&E, usize),
) {
    for mode in [DurabilityMode::Buffered, DurabilityMode::Sync] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let engine = open(&config_in(dir.path(), mode)).expect("open");
        run(&engine, 600);
    }
}

fn run_model_ops<S: HandleSource>(source: &S, ops: usize) {
    let handle = source.open_handle().expect("open handle");
    block_on(model_check(&handle, 3, ops, 7)).expect("model check");
}

#[test]
fn every_peer_matches_model_when_logged_and_synced() {
    matches_model_in_logged_modes(RocksEngine::open, run_model_ops);
    matches_model_in_logged_modes(WtEngine::open, run_model_ops);
    matches_model_in_logged_modes(LmdbEngine::open, |engine, ops| {
        run_model_ops(&LmdbSource(engine), ops)
    });
    matches_model_in_logged_modes(RedbEngine::open, run_model_ops);
    matches_model_in_logged_modes(FjallEngine::open, run_model_ops);
}

/// In `sync` mode RocksDB syncs its WAL per write group, and the adapter
/// reads the count from RocksDB's statistics; with the WAL off it is 0.
#[test]
fn rocksdb_counts_its_wal_syncs() {
    for (mode, synced) in [(DurabilityMode::Sync, true), (DurabilityMode::None, false)] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let engine = RocksEngine::open(&config_in(dir.path(), mode)).expect("open");
        let handle = engine.open_handle().expect("handle");
        block_on(async {
            for i in 0..20u32 {
                handle.put(0, &i.to_be_bytes(), b"v").await.expect("put");
            }
        });
        let syncs = engine.counters().log_syncs.unwrap_or(0);
        if synced {
            assert!(syncs >= 20, "{syncs} WAL syncs for 20 synced puts");
        } else {
            assert_eq!(syncs, 0, "WAL off");
        }
    }
}

#[test]
fn rocksdb_matches_model() {
    on_fresh(RocksEngine::open, run_model);
}

#[test]
fn wiredtiger_matches_model() {
    on_fresh(WtEngine::open, run_model);
}

#[test]
fn lmdb_matches_model() {
    on_fresh(LmdbEngine::open, |engine| run_model(&LmdbSource(engine)));
}

#[test]
fn redb_matches_model() {
    on_fresh(RedbEngine::open, run_model);
}

#[test]
fn fjall_matches_model() {
    on_fresh(FjallEngine::open, run_model);
}

/// A key longer than some engines take (LMDB: 511 bytes, fjall: 65,535):
/// each peer stores it or refuses it with an error, never panics, and
/// stays usable.
fn huge_key_is_stored_or_refused<S: HandleSource>(source: &S) {
    let handle = source.open_handle().expect("open handle");
    let key = vec![7u8; 70_000];
    let mut out = Vec::new();
    block_on(async {
        if handle.put(0, &key, b"v").await.is_ok() {
            assert!(handle.get(0, &key, &mut out).await.expect("get"));
            assert_eq!(out, b"v");
        } else {
            let _ = handle.get(0, &key, &mut out).await;
            let _ = handle.delete(0, &key).await;
        }
        handle.put(0, b"k", b"after").await.expect("usable after");
        assert!(handle.get(0, b"k", &mut out).await.expect("get after"));
        assert_eq!(out, b"after");
    });
}

#[test]
fn huge_keys_are_stored_or_refused_never_a_panic() {
    on_fresh(RocksEngine::open, huge_key_is_stored_or_refused);
    on_fresh(WtEngine::open, huge_key_is_stored_or_refused);
    on_fresh(RedbEngine::open, huge_key_is_stored_or_refused);
    on_fresh(FjallEngine::open, huge_key_is_stored_or_refused);
    on_fresh(LmdbEngine::open, |engine| {
        huge_key_is_stored_or_refused(&LmdbSource(engine))
    });
}

const REOPEN_KEYS_COUNT: u32 = 300;

fn reopen_key(index: u32) -> [u8; 4] {
    index.to_be_bytes()
}

/// Writes, closes, opens again and reads: what was put and not deleted is
/// there, in its table, and nothing else (WAL/journal off or unsynced, so
/// `close` is what makes the data durable).
fn data_survives_close<E, F>(open: F)
where
    E: Engine + HandleSource,
    F: Fn(&EngineConfig) -> Result<E, String>,
{
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = config(dir.path());
    let engine = open(&config).expect("open");
    {
        let handle = engine.open_handle().expect("handle");
        block_on(async {
            for index in 0..REOPEN_KEYS_COUNT {
                handle
                    .put(1, &reopen_key(index), &[index as u8; 100])
                    .await?;
            }
            for index in (0..REOPEN_KEYS_COUNT).step_by(3) {
                assert!(handle.delete(1, &reopen_key(index)).await?);
            }
            handle.put(2, b"other", b"table").await
        })
        .expect("writes");
    }
    Box::new(engine).close().expect("close");
    let engine = open(&config).expect("open again");
    let handle = engine.open_handle().expect("handle");
    let mut out = Vec::new();
    block_on(async {
        for index in 0..REOPEN_KEYS_COUNT {
            let found = handle.get(1, &reopen_key(index), &mut out).await?;
            assert_eq!(found, index % 3 != 0, "key {index} after reopen");
            if found {
                assert_eq!(out, [index as u8; 100], "value of key {index}");
            }
            assert!(!handle.get(0, &reopen_key(index), &mut out).await?);
        }
        assert!(handle.get(2, b"other", &mut out).await?);
        assert_eq!(out, b"table");
        Ok::<_, flashtree_peers::KvError>(())
    })
    .expect("reads after reopen");
    drop(handle);
    Box::new(engine).close().expect("close again");
}

#[test]
fn rocksdb_keeps_data_across_close() {
    data_survives_close(RocksEngine::open);
}

#[test]
fn redb_keeps_data_across_close() {
    data_survives_close(RedbEngine::open);
}

#[test]
fn fjall_keeps_data_across_close() {
    data_survives_close(FjallEngine::open);
}

/// The driver enters the memory cgroup by name, before the engine opens;
/// the opened engine must agree that it reads through the page cache.
#[test]
fn memory_cgroup_by_name_agrees_with_each_engine() {
    for name in PEER_NAMES {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let engine = open_peer(name, &config(dir.path())).expect(name);
        assert_eq!(
            needs_memory_cgroup(name),
            engine.needs_memory_cgroup(),
            "{name}"
        );
        engine.close().expect(name);
    }
    for name in ["lmdb", "redb", "fjall"] {
        assert!(
            needs_memory_cgroup(name),
            "{name} reads through the page cache"
        );
    }
    for name in ["rocksdb", "wiredtiger"] {
        assert!(!needs_memory_cgroup(name), "{name} does direct I/O");
    }
}
