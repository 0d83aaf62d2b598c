use flashtree::db::{Db, Options, ScanDirection};

fn tiny(workers: usize, pages: u64) -> Options {
    Options {
        pool_bytes: pages * 4096,
        workers,
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
