//! `Db::hash_entries`: every entry of a hash tree, each once, through a
//! pool of a few dozen pages (buckets read from disk, splits, directory
//! growth), also while another thread writes to the tree.

use flashtree::db::{Db, Durability, Options};
use flashtree::Error;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

fn options(pool_pages: u64) -> Options {
    Options {
        pool_bytes: pool_pages * 4096,
        workers: 2,
        wal_bytes_per_worker: 8 << 20,
        checkpoint_log_bytes: 2 << 20,
        durability: Durability::Buffered { max_delay_ms: 5 },
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:07}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("v{round}-{i}").into_bytes();
    v.resize(40 + (i % 60) as usize, b'.');
    v
}

/// Every entry `hash_entries` hands over, failing on a key seen twice.
fn walk(db: &Db, tree: flashtree::db::Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut seen = BTreeMap::new();
    db.hash_entries(tree, |k, v| {
        let again = seen.insert(k.to_vec(), v.to_vec());
        assert!(
            again.is_none(),
            "key {:?} handed over twice",
            String::from_utf8_lossy(k)
        );
        true
    })
    .unwrap();
    seen
}

#[test]
fn hash_entries_returns_every_entry_once_through_a_tiny_pool() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(48)).unwrap();
    let tree = db.hash_tree("h").unwrap();
    let mut model = BTreeMap::new();
    // Enough rows for hundreds of buckets (the root's 512 slots fill and
    // move down) in a pool of 48 pages.
    for i in 0..40_000u32 {
        db.put(tree, &key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    for i in (0..40_000u32).step_by(3) {
        db.delete(tree, &key(i)).unwrap();
        model.remove(&key(i));
    }
    assert_eq!(walk(&db, tree), model);
    // `f` returning false stops the walk.
    let mut calls = 0;
    db.hash_entries(tree, |_, _| {
        calls += 1;
        calls < 10
    })
    .unwrap();
    assert_eq!(calls, 10);
    // After a reopen (buckets come from disk).
    db.close().unwrap();
    let db = Db::open(dir.path(), options(48)).unwrap();
    let tree = db.hash_tree("h").unwrap();
    assert_eq!(walk(&db, tree), model);
    // An empty hash tree, and a B+-tree (refused: it has a scan).
    let empty = db.hash_tree("empty").unwrap();
    assert!(walk(&db, empty).is_empty());
    let btree = db.tree("b").unwrap();
    assert!(matches!(
        db.hash_entries(btree, |_, _| true),
        Err(Error::Unsupported(_))
    ));
    db.close().unwrap();
}

#[test]
fn hash_entries_sees_each_untouched_entry_once_while_another_thread_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(64)).unwrap();
    let tree = db.hash_tree("h").unwrap();
    // Entries no one touches during the walks: each must come back once.
    let stable: BTreeMap<Vec<u8>, Vec<u8>> = (0..3_000u32).map(|i| (key(i), value(i, 0))).collect();
    for (k, v) in &stable {
        db.put(tree, k, v).unwrap();
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The writer grows the tree (splits, directory doublings) and
        // deletes some of what it put, all outside the stable keys.
        scope.spawn(|| {
            let mut i = 1_000_000u32;
            while !stop.load(Ordering::Relaxed) && i < 1_060_000 {
                db.put(tree, &key(i), &value(i, 1)).unwrap();
                if i.is_multiple_of(4) {
                    db.delete(tree, &key(i - 2)).unwrap();
                }
                i += 1;
            }
        });
        for _ in 0..10 {
            let seen = walk(&db, tree);
            for (k, v) in &stable {
                assert_eq!(
                    seen.get(k),
                    Some(v),
                    "stable key {:?} missing or wrong in a walk during writes",
                    String::from_utf8_lossy(k)
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    db.close().unwrap();
}
