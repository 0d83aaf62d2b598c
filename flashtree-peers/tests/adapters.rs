//! Every peer adapter against the BTreeMap model.

use flashtree_peers::adapters::rocks::RocksEngine;
use flashtree_peers::testing::model_check;
use flashtree_peers::{block_on, EngineConfig, HandleSource};

fn config(dir: &std::path::Path) -> EngineConfig {
    EngineConfig {
        dir: dir.to_path_buf(),
        memory_bytes: 16 << 20,
        table_count: 3,
        threads_max: 8,
        cores: Vec::new(),
    }
}

fn run_model<S: HandleSource>(source: &S) {
    let handle = source.open_handle().expect("open handle");
    block_on(model_check(&handle, 3, 4000, 42)).expect("model check");
}

#[test]
fn rocksdb_matches_model() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let engine = RocksEngine::open(&config(dir.path())).expect("open rocksdb");
    run_model(&engine);
}

#[test]
fn wiredtiger_matches_model() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let engine = flashtree_peers::adapters::wiredtiger::WtEngine::open(&config(dir.path()))
        .expect("open wiredtiger");
    run_model(&engine);
}

#[test]
fn lmdb_matches_model() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let engine =
        flashtree_peers::adapters::lmdb::LmdbEngine::open(&config(dir.path())).expect("open lmdb");
    run_model(&flashtree_peers::adapters::lmdb::LmdbSource(&engine));
}
