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
