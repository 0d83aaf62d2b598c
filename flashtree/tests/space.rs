//! A full file system: the store's data file cannot grow. Writes that need
//! a new page fail with `Error::Full`; the store stays usable for reads
//! and deletes, and whether the process then closes or crashes, it reopens
//! with every acknowledged write (a page id is handed out only once the
//! file holds its page, so no checkpoint names a page past the file's end,
//! and once the checkpoint slots have room for a free list of every page,
//! so deletes that free pages never need space for a checkpoint).

use flashtree::db::{Db, Options};
use flashtree::io::sim::{SimConfig, SimDisk};
use flashtree::io::Vfs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;
#[path = "common/full.rs"]
mod full;

const STORE: &str = "/sim/store";

fn options(disk: &Arc<SimDisk>) -> Options {
    Options {
        pool_bytes: 48 * 4096,
        workers: 1,
        wal_bytes_per_worker: 1 << 20,
        checkpoint_log_bytes: 256 << 10,
        vfs: Vfs::Sim(disk.clone()),
        ..Options::default()
    }
}

#[test]
fn a_full_file_system_refuses_writes_and_the_store_reopens_after_close_or_crash() {
    for crash in [false, true] {
        let mut config = SimConfig::new(11);
        // The data file starts at 16 MiB; the logs take 1 MiB each.
        config.space_bytes = 20 << 20;
        let disk = SimDisk::new(config);
        let db = Db::open(Path::new(STORE), options(&disk)).unwrap();
        let t = db.tree("t").unwrap();
        let written = full::fill_until_full(&db, t);
        for i in 0..written / 4 {
            db.delete(t, &i.to_be_bytes()).unwrap();
        }
        if crash {
            common::crash_process(&disk, Some(db), false);
        } else {
            db.close().unwrap();
        }
        let db = Db::open(Path::new(STORE), options(&disk))
            .unwrap_or_else(|e| panic!("reopen after a full disk (crash: {crash}): {e}"));
        let t = db.tree("t").unwrap();
        for i in written / 4..written {
            assert_eq!(
                db.get(t, &i.to_be_bytes()).unwrap(),
                Some(vec![i as u8; 1000]),
                "key {i} (crash: {crash})"
            );
        }
        db.check().unwrap();
        db.close().unwrap();
    }
}

/// Takes every byte the simulated file system has left, as another
/// program filling the disk would.
fn take_all_space(disk: &SimDisk) {
    let id = disk
        .open(&PathBuf::from("/sim/other-program"), true)
        .unwrap();
    let (mut have, mut step) = (disk.len(id), 1u64 << 30);
    while step > 0 {
        if disk.set_len(id, have + step).is_ok() {
            have += step;
        } else {
            step /= 2;
        }
    }
    assert!(disk.set_len(id, have + 1).is_err(), "space left");
}

#[test]
fn deletes_on_a_full_file_system_free_pages_without_space_for_checkpoints() {
    for crash in [false, true] {
        let mut config = SimConfig::new(12);
        config.space_bytes = 20 << 20;
        let disk = SimDisk::new(config);
        let db = Db::open(Path::new(STORE), options(&disk)).unwrap();
        let t = db.tree("t").unwrap();
        let written = full::fill_until_full(&db, t);
        take_all_space(&disk);
        // Freeing most pages makes the checkpoints' free list many times
        // longer than any checkpoint before; close and recovery write one.
        let kept_from = written - written / 8;
        for i in 0..kept_from {
            db.delete(t, &i.to_be_bytes())
                .unwrap_or_else(|e| panic!("delete {i} (crash: {crash}): {e}"));
        }
        // Far more than the free list a slot file held before (a few
        // pages: far from all of the file system's last chunk).
        let free = db.check().unwrap().pages_free;
        assert!(free > 2000, "only {free} pages free");
        if crash {
            common::crash_process(&disk, Some(db), false);
        } else {
            db.close().unwrap();
        }
        let db = Db::open(Path::new(STORE), options(&disk))
            .unwrap_or_else(|e| panic!("reopen (crash: {crash}): {e}"));
        let t = db.tree("t").unwrap();
        for i in (0..kept_from).step_by(7) {
            assert_eq!(db.get(t, &i.to_be_bytes()).unwrap(), None, "key {i}");
        }
        for i in kept_from..written {
            assert_eq!(
                db.get(t, &i.to_be_bytes()).unwrap(),
                Some(vec![i as u8; 1000]),
                "key {i} (crash: {crash})"
            );
        }
        db.check().unwrap();
        db.close().unwrap();
    }
}
