use flashtree::db::{Db, Durability, Options, ScanDirection};

fn tiny(workers: usize, pages: u64) -> Options {
    Options {
        pool_bytes: pages * 4096,
        workers,
        wal_bytes_per_worker: 4 << 20,
        checkpoint_log_bytes: 1 << 20,
        ..Options::default()
    }
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

#[test]
fn smoke_insert_get_scan_delete_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u64;
    {
        let db = Db::open(dir.path(), tiny(2, 32)).unwrap();
        let t = db.tree("main").unwrap();
        for i in 0..n {
            db.put(t, &key(i * 7919 % n), &[i as u8; 100]).unwrap();
        }
        for i in (0..n).step_by(97) {
            let v = db.get(t, &key(i * 7919 % n)).unwrap().expect("present");
            assert_eq!(v, vec![i as u8; 100]);
        }
        let (nodes, entries) = db.check_tree(t).unwrap();
        assert_eq!(entries, n, "nodes {nodes}");
        let keys: Vec<_> = db
            .range(t, None, ScanDirection::Forward)
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(keys.len() as u64, n);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let back: Vec<_> = db
            .range(t, Some(&key(99)), ScanDirection::Backward)
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(back.len(), 100);
        for i in 0..n / 2 {
            assert!(db.delete(t, &key(i)).unwrap());
        }
        assert!(!db.delete(t, &key(0)).unwrap());
        let (_, entries) = db.check_tree(t).unwrap();
        assert_eq!(entries, n / 2);
        assert!(db.stats().page_reads > 0, "a 32-page pool must miss");
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), tiny(1, 16)).unwrap();
    let t = db.tree("main").unwrap();
    assert_eq!(db.get(t, &key(1)).unwrap(), None);
    assert_eq!(db.get(t, &key(n - 1)).unwrap().unwrap().len(), 100);
    let (_, entries) = db.check_tree(t).unwrap();
    assert_eq!(entries, n / 2);
}

/// Updating rows in place never splits: an ascending load leaves the leaves
/// full, and rewriting every row with a value of the same or a smaller size
/// keeps the node count (a replace reuses the old value's bytes).
#[test]
fn updates_of_full_leaves_do_not_split() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 32)).unwrap();
    let tree = db.tree("rows").unwrap();
    let rows = 6_000u64;
    for i in 0..rows {
        db.put(tree, &key(i), &[1u8; 310]).unwrap();
    }
    let (nodes_loaded, entries) = db.check_tree(tree).unwrap();
    assert_eq!(entries, rows);
    for i in (0..rows).rev() {
        db.put(tree, &key(i), &[2u8; 310]).unwrap();
    }
    for i in 0..rows {
        db.put(tree, &key(i), &[3u8; 300]).unwrap();
    }
    assert_eq!(db.check_tree(tree).unwrap(), (nodes_loaded, rows));
    for i in 0..rows {
        assert_eq!(db.get(tree, &key(i)).unwrap().unwrap(), vec![3u8; 300]);
    }
}

/// Page reads of a stream of reads of cold pages (each read once) with a
/// few hot rows read between them after a pseudo-random number of cold
/// reads, uniform in 1..=2 × `cold_per_hot_mean`, in a 64-page pool.
fn reads_with_hot_pages(hot_spare_rounds: u8, cold_per_hot_mean: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        hot_spare_rounds,
        ..tiny(1, 64)
    };
    let db = Db::open(dir.path(), options).unwrap();
    let (hot, cold) = (db.tree("hot").unwrap(), db.tree("cold").unwrap());
    // About 4 rows per page: the cold tree has ~1000 leaves, the hot one 2.
    let cold_rows = 4000u64;
    for i in 0..cold_rows {
        db.put(cold, &key(i), &[1; 900]).unwrap();
    }
    for i in 0..8 {
        db.put(hot, &key(i), &[2; 900]).unwrap();
    }
    let before = db.stats().page_reads;
    let mut random = 0x9E37_79B9_7F4A_7C15u64;
    let mut cold_reads = 0u64;
    for _ in 0..200 {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        for _ in 0..1 + random % (2 * cold_per_hot_mean) {
            // One row per cold page, and a page again only ~1000 reads later.
            let row = cold_reads * 4 % cold_rows;
            assert!(db.get(cold, &key(row)).unwrap().is_some());
            cold_reads += 1;
        }
        for i in 0..8 {
            assert!(db.get(hot, &key(i)).unwrap().is_some());
        }
    }
    (db.stats().page_reads - before, cold_reads)
}

/// The frequency-aware clock: pages read about once per sweep of the pool
/// stay in memory once they have been found referenced in a few sweeps,
/// where plain second chance evicts them whenever one gap between their
/// reads is longer than a sweep.
#[test]
fn clock_keeps_pages_read_every_few_rounds() {
    let (plain, cold_reads) = reads_with_hot_pages(0, 60);
    let (frequency_aware, cold_reads_again) =
        reads_with_hot_pages(Options::default().hot_spare_rounds, 60);
    assert_eq!(cold_reads, cold_reads_again, "the same stream");
    eprintln!("{cold_reads} cold reads; page reads: {plain} plain, {frequency_aware} with credits");
    assert!(
        frequency_aware + 100 < plain,
        "hot pages were not kept: {frequency_aware} reads with credits, {plain} without"
    );
}

/// Random inserts of rows of about a quarter page (4 fit in a leaf) keep
/// leaves well filled, with the log (batches) and without it, in a pool
/// far smaller than the tree (neighbours are read in to take entries):
/// a full leaf moves entries to a neighbour with room instead of
/// splitting, and a key that lands after a leaf's last key gets the
/// append split (everything stays left, the new page starts empty) only
/// when it lies near that key and far from the fence. The test prints
/// the figures (`-- --nocapture`).
#[test]
fn random_inserts_of_large_rows_keep_leaves_well_filled() {
    for durability in [Durability::Sync, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            durability,
            ..tiny(1, 256)
        };
        let db = Db::open(dir.path(), options).unwrap();
        let t = db.tree("rows").unwrap();
        let mut x = 12_345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            db.put(t, &(x ^ (x >> 29)).to_be_bytes(), &[7u8; 1000])
                .unwrap();
        }
        let shape = db.check_tree_shape(t).unwrap();
        assert_eq!(shape.entries, 20_000);
        let per_leaf = shape.entries as f64 / shape.leaves as f64;
        eprintln!("{durability:?}: {per_leaf:.2} entries per leaf ({shape:?})");
        assert!(
            per_leaf >= 3.2,
            "{durability:?}: {per_leaf:.2} entries per leaf ({shape:?})"
        );
        db.close().unwrap();
    }
}

/// Many tasks inserting large rows at random keys at once, with the log
/// and without it: every insert finishes (moving entries to a neighbour
/// must not let another task take the room it made: two tasks moving the
/// same entries back and forth, each inserting only after releasing the
/// latches, livelocked an unlogged load), every row is there, and the
/// leaves stay well filled.
#[test]
fn concurrent_random_inserts_of_large_rows_all_land() {
    for durability in [Durability::Sync, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            durability,
            ..tiny(2, 128)
        };
        let db = Db::open(dir.path(), options).unwrap();
        let t = db.tree("rows").unwrap();
        let (tasks_per_worker, rows_per_task) = (64usize, 150u64);
        db.run(tasks_per_worker, move |ctx| async move {
            let task = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            for i in 0..rows_per_task {
                let mut x = (task << 32 | i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                x ^= x >> 31;
                // Rows of 1,000 bytes, and of 300 (13 to a leaf): pairs of
                // leaves one row short of full are common.
                let len = if i % 2 == 0 { 1000 } else { 300 };
                ctx.put(t, &x.to_be_bytes(), &vec![task as u8; len])
                    .await
                    .unwrap();
            }
        })
        .unwrap();
        let shape = db.check_tree_shape(t).unwrap();
        let rows = 2 * tasks_per_worker as u64 * rows_per_task;
        assert_eq!(shape.entries, rows, "{durability:?}: {shape:?}");
        let per_leaf = shape.entries as f64 / shape.leaves as f64;
        eprintln!("{durability:?}: {per_leaf:.2} entries per leaf ({shape:?})");
        assert!(
            per_leaf >= 4.0,
            "{durability:?}: {per_leaf:.2} entries per leaf ({shape:?})"
        );
        db.close().unwrap();
    }
}

/// With the log on, a leaf's first change after a checkpoint logs its full
/// image and later changes log only the bytes they changed (a delta).
#[test]
fn repeated_changes_of_a_leaf_log_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 64)).unwrap();
    let t = db.tree("main").unwrap();
    for i in 0..20 {
        db.put(t, &key(i), &[1u8; 16]).unwrap();
    }
    // Stats are published by the worker's loop: let it go round.
    let settled = || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let stats = db.stats();
        (stats.log_record_bytes, stats.log_image_bytes)
    };
    let (before, images_before) = settled();
    // The new tree's leaf was logged as an image.
    assert!(images_before > 0 && images_before <= before);
    let updates = 200u64;
    for i in 0..updates {
        db.put(t, &key(i % 20), &[i as u8; 16]).unwrap();
    }
    let (after, images_after) = settled();
    let per_update = (after - before) / updates;
    assert!(
        per_update < 512,
        "an update of one small row logged {per_update} bytes"
    );
    assert_eq!(images_after, images_before, "the updates logged images");
    db.close().unwrap();
    let db = Db::open(dir.path(), tiny(1, 64)).unwrap();
    let t = db.tree("main").unwrap();
    for i in 0..20 {
        let expected = (updates - 20 + i) as u8;
        assert_eq!(db.get(t, &key(i)).unwrap(), Some(vec![expected; 16]));
    }
}

/// The size of the first log file of the store in `dir` (0 when absent).
fn first_log_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".wal0"))
        .map(|entry| entry.metadata().unwrap().len())
        .sum()
}

/// An open without a log (`Durability::None`) takes no log space; a
/// logged open after it preallocates its log and recovers its commits
/// after a crash-free reopen either way; an unlogged open after a logged
/// one leaves that log alone and reads everything back.
#[test]
fn unlogged_opens_take_no_log_space_and_alternate_with_logged_ones() {
    let dir = tempfile::tempdir().unwrap();
    let none = Options {
        durability: Durability::None,
        ..tiny(1, 64)
    };
    let db = Db::open(dir.path(), none.clone()).unwrap();
    let t = db.tree("t").unwrap();
    for i in 0..3000 {
        db.put(t, &key(i), &[1; 50]).unwrap();
    }
    db.close().unwrap();
    assert_eq!(
        first_log_bytes(dir.path()),
        0,
        "an unlogged open made a log"
    );
    let logged = tiny(1, 64);
    let db = Db::open(dir.path(), logged.clone()).unwrap();
    assert_eq!(first_log_bytes(dir.path()), logged.wal_bytes_per_worker);
    let t = db.tree("t").unwrap();
    for i in 3000..6000 {
        db.put(t, &key(i), &[2; 50]).unwrap();
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), none).unwrap();
    let t = db.tree("t").unwrap();
    for i in 0..6000 {
        let value = db.get(t, &key(i)).unwrap();
        assert_eq!(
            value,
            Some(vec![if i < 3000 { 1 } else { 2 }; 50]),
            "key {i}"
        );
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), logged).unwrap();
    db.check_tree(db.tree("t").unwrap()).unwrap();
    db.close().unwrap();
}

/// Point lookups look first in the leaf their worker found the key in last
/// (`btree::hint`). A leaf freed by a merge or a compaction and taken again
/// by another tree's split may then cover the same keys in that tree: a
/// lookup in the first tree must not answer from it. One worker (one set
/// of hints), a pool that holds both trees, and every key looked up before
/// and after each change, in both trees.
#[test]
fn lookups_never_answer_from_a_hinted_leaf_that_moved_to_another_tree() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 512)).unwrap();
    let a = db.tree("a").unwrap();
    let b = db.tree("b").unwrap();
    let n = 3_000u64;
    let value = |tree: u8, i: u64, round: u64| {
        let mut v = vec![tree; 100];
        v[..8].copy_from_slice(&(i ^ round << 32).to_be_bytes());
        v
    };
    let mut in_a: Vec<Option<Vec<u8>>> = (0..n).map(|i| Some(value(b'a', i, 0))).collect();
    let mut in_b: Vec<Option<Vec<u8>>> = vec![None; n as usize];
    for i in 0..n {
        db.put(a, &key(i), in_a[i as usize].as_ref().unwrap())
            .unwrap();
    }
    // In a task (`Db::get` looks up on the calling thread, without
    // hints), each key twice in a row: half the lookups find their leaf
    // through a hint, so the worker keeps using hints (it stops where few
    // hit).
    let check = |in_a: &[Option<Vec<u8>>], in_b: &[Option<Vec<u8>>], when: &str| {
        let expected = std::sync::Arc::new((in_a.to_vec(), in_b.to_vec(), when.to_string()));
        let wrong = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let w = wrong.clone();
        db.run(1, move |ctx| {
            let (expected, wrong) = (expected.clone(), w.clone());
            async move {
                let mut value = Vec::new();
                for i in 0..n {
                    for (tree, name, model) in [(a, "a", &expected.0), (b, "b", &expected.1)] {
                        for _ in 0..2 {
                            let found = ctx.get(tree, &key(i), &mut value).await.unwrap();
                            let got = found.then(|| value.clone());
                            if got != model[i as usize] {
                                wrong.lock().unwrap().push(format!(
                                    "tree {name}, key {i}, {}: {:?} (expected {:?})",
                                    expected.2,
                                    got.map(|v| v[..8].to_vec()),
                                    model[i as usize].as_ref().map(|v| v[..8].to_vec())
                                ));
                            }
                        }
                    }
                }
            }
        })
        .unwrap();
        let wrong = wrong.lock().unwrap();
        assert!(
            wrong.is_empty(),
            "{} wrong lookups, the first: {}",
            wrong.len(),
            wrong[0]
        );
    };
    check(&in_a, &in_b, "after the load");
    for round in 1..=6u64 {
        // Empty a third of tree a (its leaves merge and are freed) ...
        let third = (round % 3) * n / 3;
        for i in third..third + n / 3 {
            if in_a[i as usize].take().is_some() {
                assert!(db.delete(a, &key(i)).unwrap());
            }
        }
        if round % 2 == 0 {
            // ... or move all of its leaves (the old ids are freed).
            db.compact(a).unwrap();
        }
        // ... then fill the same keys into tree b, whose splits take the
        // freed ids, and back into tree a.
        for i in third..third + n / 3 {
            let v = value(b'b', i, round);
            db.put(b, &key(i), &v).unwrap();
            in_b[i as usize] = Some(v);
        }
        check(&in_a, &in_b, &format!("round {round}, after the moves"));
        for i in (third..third + n / 3).step_by(2) {
            let v = value(b'a', i, round);
            db.put(a, &key(i), &v).unwrap();
            in_a[i as usize] = Some(v);
        }
        check(&in_a, &in_b, &format!("round {round}, after the refill"));
    }
    db.check_tree(a).unwrap();
    db.check_tree(b).unwrap();
}
