//! A full file system: the store's data file cannot grow. Writes that need
//! a new page fail with `Error::Full`; the store stays usable for reads
//! and deletes, and whether the process then closes or crashes, it reopens
//! with every acknowledged write (a page id is handed out only once the
//! file holds its page, so no checkpoint names a page past the file's end,
//! and once the checkpoint slots have room for a free list of every page,
//! so deletes that free pages never need space for a checkpoint).

use flashtree::db::{Db, LogWrites, Options};
use flashtree::io::sim::{SimConfig, SimDisk};
use flashtree::io::Vfs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;
#[path = "common/full.rs"]
mod full;

const STORE: &str = "/sim/store";

fn options(disk: &Arc<SimDisk>, log_writes: LogWrites) -> Options {
    Options {
        log_writes,
        pool_bytes: 48 * 4096,
        workers: 1,
        wal_bytes_per_worker: 1 << 20,
        checkpoint_log_bytes: 256 << 10,
        vfs: Vfs::Sim(disk.clone()),
        ..Options::default()
    }
}

/// A simulated disk of 20 MiB: the data file starts at 16 MiB, the logs
/// take 1 MiB each.
fn config_20_mib(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(seed);
    config.space_bytes = 20 << 20;
    config
}

/// Fills a store on a file system of `config`'s size until a write fails
/// with `Error::Full`, deletes the rows below `deleted(written)`, closes it
/// or crashes (both, in turn), reopens it and checks every row and the
/// store. `fill_the_rest`: another program then takes the file system's
/// last bytes before the deletes. Returns the most pages free before a
/// close or crash.
fn fill_delete_reopen(
    config: SimConfig,
    log_writes: LogWrites,
    fill_the_rest: bool,
    deleted: &dyn Fn(u32) -> u32,
) -> u64 {
    let mut free_most = 0;
    for crash in [false, true] {
        let disk = SimDisk::new(config);
        let options = || options(&disk, log_writes);
        let db = Db::open(Path::new(STORE), options()).unwrap();
        let t = db.tree("t").unwrap();
        let written = full::fill_until_full(&db, t);
        if fill_the_rest {
            take_all_space(&disk);
        }
        let kept_from = deleted(written);
        for i in 0..kept_from {
            db.delete(t, &i.to_be_bytes())
                .unwrap_or_else(|e| panic!("delete {i} (crash: {crash}): {e}"));
        }
        free_most = free_most.max(db.check().unwrap().pages_free);
        if crash {
            common::crash_process(&disk, Some(db), false);
        } else {
            db.close().unwrap();
        }
        let db = Db::open(Path::new(STORE), options())
            .unwrap_or_else(|e| panic!("reopen after a full disk (crash: {crash}): {e}"));
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
    free_most
}

#[test]
fn a_full_file_system_refuses_writes_and_the_store_reopens_after_close_or_crash() {
    fill_delete_reopen(config_20_mib(11), LogWrites::Auto, false, &|written| {
        written / 4
    });
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
    // Freeing most pages makes the checkpoints' free list many times longer
    // than any checkpoint's before (a few pages, far from all of the file
    // system's last chunk); close and recovery write one.
    let free = fill_delete_reopen(config_20_mib(12), LogWrites::Auto, true, &|written| {
        written - written / 8
    });
    assert!(free > 2000, "only {free} pages free");
}

/// Full file systems of other sizes (the fill stops at another point of
/// the last chunk), each log-write mode, both ways of syncing the log, and
/// a few more rows deleted. `cargo test` runs 2 seeds; any number:
/// `FLASHTREE_SPACE_SEEDS=300 cargo test --release -p flashtree --test space -- full_file_systems_of_many_sizes`
/// (`FLASHTREE_SPACE_FIRST_SEED` picks the first). A failure names its
/// seed and the command that replays it.
#[test]
fn full_file_systems_of_many_sizes() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let first = env("FLASHTREE_SPACE_FIRST_SEED", 0);
    for seed in first..first + env("FLASHTREE_SPACE_SEEDS", 2) {
        let mut config = config_20_mib(seed);
        config.space_bytes += (seed % 17) * 12 * 1024;
        config.log_writes_then_sync = (seed / 3) % 2 == 1;
        let log_writes =
            [LogWrites::Auto, LogWrites::Inline, LogWrites::Channel][(seed % 3) as usize];
        let run = std::panic::catch_unwind(|| {
            fill_delete_reopen(config, log_writes, false, &|written| {
                written / 4 + (seed % 5) as u32
            })
        });
        if run.is_err() {
            panic!(
                "seed {seed} failed; replay: FLASHTREE_SPACE_FIRST_SEED={seed} FLASHTREE_SPACE_SEEDS=1 cargo test --release -p flashtree --test space -- full_file_systems_of_many_sizes --nocapture"
            );
        }
    }
}
