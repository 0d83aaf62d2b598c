//! Stores on raw block devices: loop devices over files (`losetup`), when
//! the tests run as root; otherwise each test prints why it skips. The
//! devices are created, refused when they hold something else, refused in
//! the wrong order or from another store, and reopened.

use flashtree::db::{BulkLoadOptions, Db, Options, ScanDirection};
use flashtree::io::layout::HEAD_BYTES;
use flashtree::Error;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

#[path = "common/full.rs"]
mod full;
#[path = "common/loops.rs"]
mod loops;

fn options(create: bool) -> Options {
    Options {
        pool_bytes: 48 * 4096,
        workers: 1,
        wal_bytes_per_worker: 1 << 20,
        checkpoint_log_bytes: 256 << 10,
        create_on_block_devices: create,
        ..Options::default()
    }
}

/// Two loop devices of 32 MiB, or None (after printing why).
fn two_devices(dir: &std::path::Path) -> Option<Vec<loops::LoopDevice>> {
    match loops::make(dir, 2, 32 << 20) {
        Ok(devices) => Some(devices),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn paths(devices: &[loops::LoopDevice]) -> Vec<PathBuf> {
    devices.iter().map(|d| d.path.clone()).collect()
}

fn fill(db: &Db, n: u32) {
    let t = db.tree("t").unwrap();
    for i in 0..n {
        db.put(t, &i.to_be_bytes(), &[i as u8; 300]).unwrap();
    }
}

fn expect_invalid(result: flashtree::Result<Db>, needles: &[&str]) {
    match result {
        Err(Error::InvalidArgument(msg)) => {
            for needle in needles {
                assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
            }
        }
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(_) => panic!("expected InvalidArgument, the store opened"),
    }
}

#[test]
fn a_store_on_two_devices_is_created_only_when_asked_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let paths = paths(&devices);
    // A device without a store: an error naming it, nothing written.
    expect_invalid(
        Db::open_devices(&paths, options(false)),
        &[
            "no flashtree store",
            &paths[0].display().to_string(),
            "create_on_block_devices",
        ],
    );
    let db = Db::open_devices(&paths, options(true)).unwrap();
    fill(&db, 5000);
    db.close().unwrap();
    let db = Db::open_devices(&paths, options(false)).unwrap();
    let t = db.tree("t").unwrap();
    for i in 0..5000u32 {
        assert_eq!(
            db.get(t, &i.to_be_bytes()).unwrap(),
            Some(vec![i as u8; 300])
        );
    }
    db.check().unwrap();
    // The logs are regions of the devices: nothing beside them in /dev.
    let log_beside = format!("{}.wal0", paths[0].display());
    assert!(!std::path::Path::new(&log_beside).exists());
    db.close().unwrap();
    // Asked to create over an existing store, it opens it instead.
    let db = Db::open_devices(&paths, options(true)).unwrap();
    assert!(db
        .get(db.tree("t").unwrap(), &7u32.to_be_bytes())
        .unwrap()
        .is_some());
    db.close().unwrap();
}

#[test]
fn devices_in_the_wrong_order_or_from_another_store_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let sub = dir.path().join("other");
    std::fs::create_dir(&sub).unwrap();
    let Some(others) = two_devices(&sub) else {
        return;
    };
    let paths = paths(&devices);
    let other_paths = self::paths(&others);
    Db::open_devices(&paths, options(true))
        .unwrap()
        .close()
        .unwrap();
    Db::open_devices(&other_paths, options(true))
        .unwrap()
        .close()
        .unwrap();
    let swapped = vec![paths[1].clone(), paths[0].clone()];
    expect_invalid(
        Db::open_devices(&swapped, options(false)),
        &["is device 1 of the store but was given as device 0"],
    );
    let mixed = vec![paths[0].clone(), other_paths[1].clone()];
    expect_invalid(
        Db::open_devices(&mixed, options(false)),
        &["belongs to store", "give the devices of one store"],
    );
    expect_invalid(
        Db::open_devices(&paths[..1], options(false)),
        &["of a store of 2 devices; 1 were given"],
    );
    // Both still open as they were.
    Db::open_devices(&paths, options(false))
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn a_device_holding_a_file_system_is_refused_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let paths = paths(&devices);
    let mkfs = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&paths[1])
        .status();
    if !mkfs.is_ok_and(|s| s.success()) {
        // No mkfs here: write the ext4 magic itself (at byte 1080).
        let dev = std::fs::OpenOptions::new()
            .write(true)
            .open(&paths[1])
            .unwrap();
        dev.write_all_at(&[0x53, 0xEF], 1080).unwrap();
        dev.sync_all().unwrap();
    }
    expect_invalid(
        Db::open_devices(&paths, options(true)),
        &[
            &paths[1].display().to_string(),
            "ext2/3/4 file system",
            "force_create",
        ],
    );
    // Nothing was written: device 0 still has no superblock.
    let mut head = vec![0u8; HEAD_BYTES as usize];
    let dev0 = std::fs::File::open(&paths[0]).unwrap();
    dev0.read_exact_at(&mut head, 0).unwrap();
    assert!(head.iter().all(|&b| b == 0), "device 0 was written");
    let forced = Options {
        force_create: true,
        ..options(true)
    };
    let db = Db::open_devices(&paths, forced).unwrap();
    fill(&db, 100);
    db.close().unwrap();
}

#[test]
fn a_file_and_a_block_device_do_not_make_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let file = dir.path().join("data.ft");
    let mixed = vec![devices[0].path.clone(), file];
    expect_invalid(
        Db::open_devices(&mixed, options(true)),
        &["is a file but", "a block device"],
    );
}

#[test]
fn a_device_of_a_store_overwritten_is_named_and_only_force_recreates() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let paths = paths(&devices);
    let db = Db::open_devices(&paths, options(true)).unwrap();
    fill(&db, 100);
    db.close().unwrap();
    // Something else writes over device 1's head.
    let dev = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[1])
        .unwrap();
    dev.write_all_at(&vec![0x5a; HEAD_BYTES as usize], 0)
        .unwrap();
    dev.sync_all().unwrap();
    for create in [false, true] {
        match Db::open_devices(&paths, options(create)) {
            Err(Error::Corrupt(msg)) => {
                assert!(msg.contains(&*paths[1].display().to_string()), "{msg}");
                assert!(msg.contains("no valid flashtree superblock"), "{msg}");
            }
            Err(e) => panic!("expected Corrupt, got {e}"),
            Ok(_) => panic!("a store with a damaged device opened"),
        }
    }
    let forced = Options {
        force_create: true,
        ..options(true)
    };
    let db = Db::open_devices(&paths, forced).unwrap();
    assert!(
        db.tree_names().is_empty(),
        "forced creation makes a new store"
    );
    db.close().unwrap();
}

#[test]
fn a_full_data_region_refuses_writes_and_keeps_the_store_usable() {
    let dir = tempfile::tempdir().unwrap();
    let devices = match loops::make(dir.path(), 1, 12 << 20) {
        Ok(devices) => devices,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let paths = paths(&devices);
    let db = Db::open_devices(&paths, options(true)).unwrap();
    let t = db.tree("t").unwrap();
    let written = full::fill_until_full(&db, t);
    // Deletes still work and make room again.
    for i in 0..written / 2 {
        db.delete(t, &i.to_be_bytes()).unwrap();
    }
    db.put(t, b"after", b"room again").unwrap();
    db.close().unwrap();
    let db = Db::open_devices(&paths, options(false)).unwrap();
    let t = db.tree("t").unwrap();
    assert_eq!(db.get(t, b"after").unwrap(), Some(b"room again".to_vec()));
    assert_eq!(
        db.get(t, &(written - 1).to_be_bytes()).unwrap(),
        Some(vec![(written - 1) as u8; 1000])
    );
    db.check().unwrap();
    db.close().unwrap();
}

/// Sectors a block device has discarded (`/sys/block/NAME/stat`, field
/// 14), or None where the kernel does not count them.
fn discarded_sectors(device: &std::path::Path) -> Option<u64> {
    let name = device.file_name()?.to_string_lossy().to_string();
    let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).ok()?;
    stat.split_whitespace().nth(13)?.parse().ok()
}

#[test]
fn log_blocks_before_a_checkpoint_go_back_to_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let paths = paths(&devices);
    let Some(before) = discarded_sectors(&paths[0]) else {
        eprintln!("skipped: /sys/block/*/stat has no discard counts here");
        return;
    };
    let db = Db::open_devices(&paths, options(true)).unwrap();
    // Puts only: no page is freed, so only log blocks are discarded.
    fill(&db, 8000);
    let stats = db.stats();
    assert!(stats.checkpoints > 3, "{stats:?}");
    assert_eq!(stats.pages_discarded, 0, "{stats:?}");
    assert!(stats.log_bytes_discarded > 0, "{stats:?}");
    db.close().unwrap();
    let after = discarded_sectors(&paths[0]).unwrap();
    assert!(
        (after - before) * 512 >= stats.log_bytes_discarded,
        "the device counted {} discarded bytes, the store {}",
        (after - before) * 512,
        stats.log_bytes_discarded
    );
    // Nothing recovery needs was discarded.
    let db = Db::open_devices(&paths, options(false)).unwrap();
    let t = db.tree("t").unwrap();
    for i in (0..8000u32).step_by(7) {
        assert_eq!(
            db.get(t, &i.to_be_bytes()).unwrap(),
            Some(vec![i as u8; 300])
        );
    }
    db.close().unwrap();
}

/// Keys 0..n as 4-byte big-endian numbers in a scrambled order (7919 is
/// prime to every n used here), each with a value made from its number.
fn scrambled_records(n: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let k = (u64::from(i) * 7919 % u64::from(n)) as u32;
            (k.to_be_bytes().to_vec(), vec![(k % 251) as u8; 80])
        })
        .collect()
}

#[test]
fn a_bulk_load_sorts_through_the_temp_regions_of_two_devices() {
    let dir = tempfile::tempdir().unwrap();
    let Some(devices) = two_devices(dir.path()) else {
        return;
    };
    let paths = paths(&devices);
    let sort = BulkLoadOptions {
        sort_memory_bytes: Some(128 << 10),
        ..BulkLoadOptions::default()
    };
    let db = Db::open_devices(&paths, options(true)).unwrap();
    let discarded_before: Vec<Option<u64>> = paths
        .iter()
        .map(|p| discarded_sectors(p.as_path()))
        .collect();
    // 6,007 records of 84 bytes (about 0.5 MB) through 128 KiB of sort
    // memory: runs in the temp regions (1 MiB of each 32 MiB device),
    // then a merge.
    let n = 6_007u32;
    let t = db.tree("t").unwrap();
    let stats = db
        .bulk_load_with(t, scrambled_records(n).into_iter().map(Ok), &sort)
        .unwrap();
    assert_eq!(stats.records, u64::from(n), "{stats:?}");
    assert!(stats.runs > 1 && stats.temp_bytes_written > 0, "{stats:?}");
    // The temp blocks went back to the devices (where the kernel counts;
    // this load's runs fit the first device's region).
    let discarded_after: Vec<Option<u64>> = paths
        .iter()
        .map(|p| discarded_sectors(p.as_path()))
        .collect();
    if discarded_before
        .iter()
        .chain(&discarded_after)
        .all(Option::is_some)
    {
        let sum = |v: &[Option<u64>]| v.iter().flatten().sum::<u64>();
        assert!(
            sum(&discarded_after) > sum(&discarded_before),
            "no temp block discarded after the load"
        );
    }
    // A load too large for the temp regions: Error::Full, the tree
    // untouched, the store usable.
    let u = db.tree("u").unwrap();
    match db.bulk_load_with(u, scrambled_records(60_000).into_iter().map(Ok), &sort) {
        Err(Error::Full(msg)) => assert!(msg.contains("temporary space"), "{msg}"),
        other => panic!("expected Error::Full, got {other:?}"),
    }
    assert_eq!(db.range(u, None, ScanDirection::Forward).count(), 0);
    db.put(u, b"after", b"the failed load").unwrap();
    db.close().unwrap();
    let db = Db::open_devices(&paths, options(false)).unwrap();
    let t = db.tree("t").unwrap();
    for (key, value) in scrambled_records(n) {
        assert_eq!(db.get(t, &key).unwrap(), Some(value), "key {key:?}");
    }
    let scanned: Vec<Vec<u8>> = db
        .range(t, None, ScanDirection::Forward)
        .map(|r| r.unwrap().0)
        .collect();
    assert!(scanned
        .iter()
        .map(|k| u32::from_be_bytes(k[..4].try_into().unwrap()))
        .eq(0..n));
    let u = db.tree("u").unwrap();
    assert_eq!(
        db.get(u, b"after").unwrap(),
        Some(b"the failed load".to_vec())
    );
    assert_eq!(db.check().unwrap().pages_leaked, 0);
    db.close().unwrap();
}
