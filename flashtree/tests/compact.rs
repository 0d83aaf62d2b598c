//! `Db::compact`: a tree's leaves filled and moved to consecutive page ids
//! in key order. The contents never change, the tree stays valid, a second pass
//! finds every parent in order, concurrent writers lose nothing, and
//! bounded scans of a compacted tree read neighbouring leaves in one
//! request (`DbStats::read_runs`). Tiny pools: the moves load, evict and
//! write back pages all the time.

use flashtree::db::{Db, Durability, Options, ScanDirection, Tree};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn tiny(workers: usize, pages: u64, durability: Durability) -> Options {
    Options {
        pool_bytes: pages * 4096,
        workers,
        wal_bytes_per_worker: 8 << 20,
        checkpoint_log_bytes: 1 << 20,
        durability,
        ..Options::default()
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn key(i: u64) -> [u8; 8] {
    (i * 3).to_be_bytes()
}

/// Rows of 300–900 bytes: a few to a leaf, so a few thousand make a tree
/// of hundreds of leaves under several parents.
fn value(i: u64, round: u64) -> Vec<u8> {
    vec![(i.wrapping_add(round) % 251) as u8; 300 + (splitmix(i ^ round) % 600) as usize]
}

/// Inserts `count` keys in a random order; returns the model.
fn load_random(db: &Db, tree: Tree, count: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut order: Vec<u64> = (0..count).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (splitmix(i as u64) % (i as u64 + 1)) as usize);
    }
    let mut model = BTreeMap::new();
    for &i in &order {
        db.put(tree, &key(i), &value(i, 0)).unwrap();
        model.insert(key(i).to_vec(), value(i, 0));
    }
    model
}

fn contents(db: &Db, tree: Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.range(tree, None, ScanDirection::Forward)
        .collect::<flashtree::Result<_>>()
        .unwrap()
}

/// Compaction of a randomly loaded tree moves its leaves, changes no
/// entry, keeps the tree valid across a reopen, and a second pass finds
/// every parent's leaves in order (so the first made them consecutive).
#[test]
fn compaction_keeps_every_entry_and_puts_leaves_in_order() {
    for durability in [Durability::Sync, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), tiny(1, 40, durability)).unwrap();
        let tree = db.tree("t").unwrap();
        let model = load_random(&db, tree, 3_000);
        let shape = db.check_tree_shape(tree).unwrap();
        assert!(
            shape.leaves_in_order * 4 < shape.leaves,
            "{durability:?}: random inserts left {shape:?}"
        );
        let leaves_before = shape.leaves;
        let first = db.compact(tree).unwrap();
        let shape = db.check_tree_shape(tree).unwrap();
        // The leaves were filled: fewer of them (random inserts leave
        // them about 85% full).
        assert!(
            first.leaves_filled + first.leaves_emptied > 0,
            "{durability:?}: {first:?}"
        );
        assert!(
            shape.leaves * 100 <= leaves_before * 95,
            "{durability:?}: {leaves_before} leaves before, {shape:?} after"
        );
        assert_eq!(
            shape.leaves_in_order,
            shape.leaves - 1,
            "{durability:?}: {shape:?}"
        );
        assert!(first.parents > 1, "{durability:?}: {first:?}");
        assert!(first.leaves_moved > 100, "{durability:?}: {first:?}");
        assert_eq!(first.parents_changed, 0, "{durability:?}: {first:?}");
        assert_eq!(contents(&db, tree), model, "{durability:?}");
        db.check_tree(tree).unwrap();
        let images_before = db.stats().log_image_bytes;
        let second = db.compact(tree).unwrap();
        // A compaction with nothing to do changes no page: it logs no
        // page image.
        assert_eq!(
            db.stats().log_image_bytes,
            images_before,
            "{durability:?}: a compaction that moved nothing logged pages"
        );
        assert_eq!(second.leaves_moved, 0, "{durability:?}: {second:?}");
        assert_eq!(
            (second.leaves_filled, second.leaves_emptied),
            (0, 0),
            "{durability:?}: {second:?}"
        );
        assert_eq!(
            second.parents_in_order, second.parents,
            "{durability:?}: {second:?}"
        );
        assert_eq!(db.check().unwrap().pages_leaked, 0, "{durability:?}");
        db.close().unwrap();
        let db = Db::open(dir.path(), tiny(1, 40, durability)).unwrap();
        let tree = db.tree("t").unwrap();
        assert_eq!(contents(&db, tree), model, "{durability:?} after reopen");
        assert_eq!(db.check().unwrap().pages_leaked, 0, "{durability:?}");
        db.close().unwrap();
    }
}

/// Bounded scans of a compacted tree out of memory read neighbouring
/// leaves in one request each, and return exactly their ranges.
#[test]
fn bounded_scans_of_a_compacted_tree_read_runs_of_leaves() {
    const KEYS: u64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 64, Durability::Sync)).unwrap();
    let tree = db.tree("t").unwrap();
    load_random(&db, tree, KEYS);
    db.compact(tree).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), tiny(1, 64, Durability::Sync)).unwrap();
    let tree = db.tree("t").unwrap();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let f = failures.clone();
    db.run(4, move |ctx| {
        let f = f.clone();
        async move {
            let me = ctx.task_index() as u64;
            for round in 0..10u64 {
                let r = splitmix(me * 1_009 + round);
                let from = r % KEYS;
                let len = 20 + (r >> 20) % 100;
                let want: Vec<u64> = (from..KEYS.min(from + len)).collect();
                let mut got = Vec::new();
                let mut bad = None;
                let result = ctx
                    .scan_expecting(
                        tree,
                        &key(from),
                        ScanDirection::Forward,
                        len as usize,
                        |k, v| {
                            let i = u64::from_be_bytes(k.try_into().unwrap_or([0xFF; 8])) / 3;
                            if v != value(i, 0).as_slice() {
                                bad = Some(i);
                                return false;
                            }
                            got.push(i);
                            (got.len() as u64) < len
                        },
                    )
                    .await;
                let problem = match (result, bad) {
                    (Err(e), _) => Some(format!("scan: {e}")),
                    (_, Some(i)) => Some(format!("wrong value of key {i}")),
                    _ if got != want => Some(format!("{} keys, want {}", got.len(), want.len())),
                    _ => None,
                };
                if let Some(p) = problem {
                    f.lock()
                        .unwrap()
                        .push(format!("task {me} round {round}: {p}"));
                    return;
                }
            }
        }
    })
    .unwrap();
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let stats = db.stats();
    assert!(
        stats.read_runs > 0,
        "no run of leaves was read in one request: {stats:?}"
    );
    db.close().unwrap();
}

/// Writers change the tree while it is compacted (splits and merges of
/// the parents being moved): no write is lost and the tree stays valid.
#[test]
fn compaction_loses_nothing_to_concurrent_writers() {
    const KEYS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), tiny(2, 48, Durability::Sync)).unwrap());
    let tree = db.tree("t").unwrap();
    let mut model = load_random(&db, tree, KEYS);
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            let mut changes = Vec::new();
            for round in 1..=3_000u64 {
                let i = splitmix(round * 7) % (KEYS * 2);
                if round % 5 == 0 {
                    db.delete(tree, &key(i)).unwrap();
                    changes.push((key(i).to_vec(), None));
                } else {
                    db.put(tree, &key(i), &value(i, round)).unwrap();
                    changes.push((key(i).to_vec(), Some(value(i, round))));
                }
            }
            changes
        })
    };
    let mut passes = Vec::new();
    while !writer.is_finished() || passes.is_empty() {
        passes.push(db.compact(tree).unwrap());
    }
    for (k, v) in writer.join().unwrap() {
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
    assert_eq!(contents(&db, tree), model, "passes: {passes:?}");
    db.check_tree(tree).unwrap();
    assert!(
        passes.iter().map(|p| p.leaves_moved).sum::<u64>() > 0,
        "{passes:?}"
    );
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
}

#[test]
fn compaction_of_a_hash_tree_is_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 40, Durability::Sync)).unwrap();
    let tree = db.hash_tree("h").unwrap();
    db.put(tree, b"k", b"v").unwrap();
    assert!(matches!(
        db.compact(tree),
        Err(flashtree::Error::Unsupported(_))
    ));
    db.close().unwrap();
}
