//! Free pages go back to the device: after a checkpoint lists pages as
//! free, the store punches holes for them in its data file, so the file's
//! allocated blocks shrink; reusing them later loses nothing.

use flashtree::db::{Db, Options, WriteBatch, WriteOptions};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn options() -> Options {
    Options {
        pool_bytes: 48 * 4096,
        workers: 1,
        wal_bytes_per_worker: 8 << 20,
        checkpoint_log_bytes: 1 << 20,
        ..Options::default()
    }
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn value(i: u64, round: u8) -> Vec<u8> {
    let mut v = vec![round; 900];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// Blocks the store's data file holds on disk, in bytes.
fn allocated_bytes(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("data.ft")).unwrap().blocks() * 512
}

fn put_range(db: &Db, keys: std::ops::Range<u64>, round: u8) {
    let t = db.tree("main").unwrap();
    let mut batch = WriteBatch::new();
    for i in keys {
        batch.put(t, &key(i), &value(i, round)).unwrap();
        if batch.len() == 8 {
            db.write(&batch, WriteOptions::default()).unwrap();
            batch = WriteBatch::new();
        }
    }
    db.write(&batch, WriteOptions::default()).unwrap();
}

fn delete_range(db: &Db, keys: std::ops::Range<u64>) {
    let t = db.tree("main").unwrap();
    let mut batch = WriteBatch::new();
    for i in keys {
        batch.delete(t, &key(i)).unwrap();
        if batch.len() == 8 {
            db.write(&batch, WriteOptions::default()).unwrap();
            batch = WriteBatch::new();
        }
    }
    db.write(&batch, WriteOptions::default()).unwrap();
}

fn expect(db: &Db, keys: std::ops::Range<u64>, round: Option<u8>) {
    let t = db.tree("main").unwrap();
    for i in keys {
        assert_eq!(
            db.get(t, &key(i)).unwrap(),
            round.map(|r| value(i, r)),
            "key {i}"
        );
    }
}

#[test]
fn deleting_half_the_records_gives_their_pages_back_at_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let n = 8_000u64;
    {
        let db = Db::open(dir.path(), options()).unwrap();
        put_range(&db, 0..n, 1);
        db.close().unwrap();
    }
    let full = allocated_bytes(dir.path());
    let pages_bytes;
    {
        let db = Db::open(dir.path(), options()).unwrap();
        pages_bytes = db.stats().pages_allocated * 4096;
        delete_range(&db, 0..n / 2);
        db.close().unwrap();
        // The close's checkpoint lists the freed pages.
    }
    let half = allocated_bytes(dir.path());
    let returned = full.saturating_sub(half);
    eprintln!(
        "data file blocks: {full} bytes with {pages_bytes} bytes of pages, {half} after deleting half ({returned} returned)"
    );
    // The file also holds space preallocated past its pages; about half of
    // the pages must come back.
    assert!(
        returned * 10 >= pages_bytes * 4,
        "deleting half the records returned {returned} of {pages_bytes} bytes of pages"
    );
    let db = Db::open(dir.path(), options()).unwrap();
    expect(&db, 0..n / 2, None);
    expect(&db, n / 2..n, Some(1));
    let report = db.check().unwrap();
    assert!(report.pages_free > 0, "{report:?}");
    db.close().unwrap();
}

/// Pages freed while the store runs are discarded by the checkpoints its
/// log volume starts, and the store then allocates them again: every key
/// keeps its latest value, across reopens and `check`.
#[test]
fn discarded_pages_are_reused_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let n = 4_000u64;
    let db = Db::open(dir.path(), options()).unwrap();
    for round in 1..=4u8 {
        put_range(&db, 0..n, round);
        delete_range(&db, 0..n * 3 / 4);
        // More log, so that checkpoints (1 MiB of log each) complete
        // while the freed pages wait.
        put_range(&db, n..n + 500, round);
        expect(&db, 0..n * 3 / 4, None);
        expect(&db, n * 3 / 4..n + 500, Some(round));
    }
    let discarded = db.stats().pages_discarded;
    assert!(discarded > 0, "no page was discarded");
    db.check().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    expect(&db, 0..n * 3 / 4, None);
    expect(&db, n * 3 / 4..n + 500, Some(4));
    db.check().unwrap();
    db.close().unwrap();
}
