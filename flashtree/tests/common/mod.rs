//! What the crash, fault and damage tests share: the model of a store's
//! contents and the batches applied to it.
// Each test binary uses its own part of this module.
#![allow(dead_code)]

use flashtree::db::{Db, Options, ScanDirection, Tree};
use flashtree::io::sim::{FaultKind, SimDisk};
use flashtree::io::Vfs;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The process dies under a live `db`: from now on it can change nothing
/// on `disk` (every operation fails), the crash resolves its unsynced
/// writes (every one lands with `keep_all`, else each at random), and its
/// threads stop before anything opens the store again. A `Db` merely
/// leaked (`mem::forget`) would go on running after the crash, writing
/// pages, log and checkpoints into the store the next open recovers.
pub fn crash_process(disk: &SimDisk, db: Option<Db>, keep_all: bool) {
    disk.fail_all_from(disk.op_count(), FaultKind::Any);
    if keep_all {
        disk.crash_keep_all();
    } else {
        disk.crash();
    }
    drop(db);
    disk.clear_faults();
}

/// A store on the simulated `disk` with a pool of `pool_pages` pages, a
/// 1 MiB log and a checkpoint every 64 KiB of log: eviction, log
/// wrap-around and checkpoints all happen within a few hundred batches.
pub fn sim_options(disk: &Arc<SimDisk>, pool_pages: u64, create: bool) -> Options {
    Options {
        pool_bytes: pool_pages * 4096,
        workers: 1,
        wal_bytes_per_worker: 1 << 20,
        wal_buffer_bytes: 1 << 20,
        checkpoint_log_bytes: 64 << 10,
        create_if_missing: create,
        vfs: Vfs::Sim(disk.clone()),
        ..Options::default()
    }
}

/// Per tree, key → value.
pub type Model = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;
/// (tree, key, value or delete).
pub type Batch = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

/// Applies `batch` to `model`.
pub fn apply(model: &mut Model, batch: &Batch) {
    for (tree, key, value) in batch {
        match value {
            Some(v) => model[*tree].insert(key.clone(), v.clone()),
            None => model[*tree].remove(key),
        };
    }
}

/// The trees `t0`, `t1`, … of a store, `count` of them (created if new).
pub fn trees(db: &Db, count: usize) -> flashtree::Result<Vec<Tree>> {
    (0..count).map(|t| db.tree(&format!("t{t}"))).collect()
}

/// Everything `trees` hold.
pub fn contents(db: &Db, trees: &[Tree]) -> flashtree::Result<Model> {
    trees
        .iter()
        .map(|&t| db.range(t, None, ScanDirection::Forward).collect())
        .collect()
}

/// The trees of [`trees`], except that the last is a hash tree named
/// `h{count - 1}` (created if new).
pub fn trees_with_hash(db: &Db, count: usize) -> flashtree::Result<Vec<Tree>> {
    (0..count)
        .map(|t| {
            if t + 1 == count {
                db.hash_tree(&format!("h{t}"))
            } else {
                db.tree(&format!("t{t}"))
            }
        })
        .collect()
}

/// Everything `trees` hold, where keys are 4-byte big-endian numbers below
/// `key_ids`: B+-trees are scanned; a hash tree (no scan) is probed for
/// every such key, and its entry count (`Db::check_tree`) must match
/// what the probes found (an entry outside the key space is an error).
pub fn contents_probing(db: &Db, trees: &[Tree], key_ids: u32) -> flashtree::Result<Model> {
    trees
        .iter()
        .map(|&t| {
            if !t.is_hash() {
                return db.range(t, None, ScanDirection::Forward).collect();
            }
            let keys: Vec<Vec<u8>> = (0..key_ids).map(|k| k.to_be_bytes().to_vec()).collect();
            let values = db.multi_get(t, &keys)?;
            let found: BTreeMap<Vec<u8>, Vec<u8>> = keys
                .into_iter()
                .zip(values)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            let (_, entries) = db.check_tree(t)?;
            if entries != found.len() as u64 {
                return Err(flashtree::Error::Corrupt(format!(
                    "hash tree holds {entries} entries, {} of them in the key space",
                    found.len()
                )));
            }
            Ok(found)
        })
        .collect()
}
