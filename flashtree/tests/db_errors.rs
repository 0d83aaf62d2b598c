//! Bad input and bad stores get clear errors, never panics: keys and entries
//! beyond the limits, bad tree names and options, a store written with
//! another page size, a corrupt metadata page, a file that is not a store,
//! a corrupt data page, direct I/O on tmpfs (refused with a message
//! naming O_DIRECT where the kernel refuses it), a task that panics, a
//! store open in another Db, and one left open by a process that ended.

use flashtree::buffer::seal_page;
use flashtree::db::{Db, Options, ScanDirection};
use flashtree::io::layout::HEAD_BYTES;
use flashtree::Error;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

const PAGE: usize = 4096;

fn tiny(workers: usize, pages: u64) -> Options {
    Options {
        pool_bytes: pages * 4096,
        workers,
        wal_bytes_per_worker: 4 << 20,
        checkpoint_log_bytes: 1 << 20,
        ..Options::default()
    }
}

fn unlogged(options: Options) -> Options {
    Options {
        durability: flashtree::db::Durability::None,
        ..options
    }
}

fn expect_invalid<T>(result: flashtree::Result<T>, needle: &str) {
    match result.map(|_| ()) {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}")
        }
        other => panic!("expected InvalidArgument({needle}), got {other:?}"),
    }
}

#[test]
fn keys_values_and_tree_names_beyond_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 16)).unwrap();
    let t = db.tree("t").unwrap();
    expect_invalid(db.put(t, b"", b"v"), "empty key");
    expect_invalid(db.get(t, b""), "empty key");
    expect_invalid(db.delete(t, b""), "empty key");
    let long = [7u8; 257];
    expect_invalid(db.put(t, &long, b"v"), "257 bytes");
    expect_invalid(db.get(t, &long), "257 bytes");
    expect_invalid(db.delete(t, &long), "257 bytes");
    expect_invalid(db.put(t, &[1; 256], &[2; 769]), "1025 bytes");
    expect_invalid(db.put(t, b"k", &[2; 1024]), "1025 bytes");
    // Exactly at the limits is fine.
    db.put(t, &[1; 256], &[2; 768]).unwrap();
    db.put(t, b"k", &[3; 1023]).unwrap();
    assert_eq!(db.get(t, &[1; 256]).unwrap(), Some(vec![2; 768]));
    expect_invalid(db.tree(""), "tree name");
    expect_invalid(db.tree(&"n".repeat(65)), "65");
    db.tree(&"n".repeat(64)).unwrap();
    // Nothing bad reached the tree.
    assert_eq!(db.check_tree(t).unwrap().1, 2);
    assert_eq!(db.range(t, None, ScanDirection::Forward).count(), 2);
    db.close().unwrap();
}

#[test]
fn options_below_the_minimum() {
    let dir = tempfile::tempdir().unwrap();
    expect_invalid(
        Db::open(
            dir.path(),
            Options {
                workers: 0,
                ..tiny(1, 16)
            },
        ),
        "workers",
    );
    expect_invalid(Db::open(dir.path(), tiny(2, 15)), "below the minimum");
    expect_invalid(Db::open(dir.path(), tiny(1, 0)), "below the minimum");
    // The refused opens left nothing that breaks a valid open.
    let db = Db::open(dir.path(), tiny(2, 16)).unwrap();
    let t = db.tree("t").unwrap();
    db.put(t, b"k", b"v").unwrap();
    db.close().unwrap();
}

/// A store with one tree holding `n` entries, closed.
fn make_store(dir: &Path, n: u32) {
    let db = Db::open(dir, tiny(1, 64)).unwrap();
    let t = db.tree("data").unwrap();
    for i in 0..n {
        db.put(t, &i.to_be_bytes(), &[i as u8; 100]).unwrap();
    }
    db.close().unwrap();
}

fn read_page(path: &Path, pid: u64) -> [u8; PAGE] {
    let mut page = [0u8; PAGE];
    let file = std::fs::File::open(path).unwrap();
    file.read_exact_at(&mut page, HEAD_BYTES + pid * PAGE as u64)
        .unwrap();
    page
}

fn write_page(path: &Path, pid: u64, page: &[u8; PAGE]) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(page, HEAD_BYTES + pid * PAGE as u64)
        .unwrap();
    file.sync_all().unwrap();
}

#[test]
fn store_with_another_page_size() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 10);
    let data = dir.path().join("data.ft");
    let mut meta = read_page(&data, 0);
    assert_eq!(&meta[24..32], b"FLASHTRE");
    meta[36..40].copy_from_slice(&8192u32.to_le_bytes());
    seal_page(&mut meta, 0);
    write_page(&data, 0, &meta);
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::Unsupported(msg)) => {
            assert!(msg.contains("8192-byte pages"), "{msg}");
            assert!(msg.contains("4096"), "{msg}");
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn corrupt_metadata_page() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 10);
    let data = dir.path().join("data.ft");
    let mut meta = read_page(&data, 0);
    meta[41] ^= 0x10; // inside next_pid; the checksum no longer matches
    write_page(&data, 0, &meta);
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::Corrupt(msg)) => {
            assert!(msg.contains("metadata page"), "{msg}");
            assert!(msg.contains("checksum"), "{msg}");
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn file_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let junk: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(dir.path().join("data.ft"), &junk).unwrap();
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::Corrupt(msg)) => assert!(msg.contains("not a flashtree store"), "{msg}"),
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
    // The file was not touched.
    assert_eq!(std::fs::read(dir.path().join("data.ft")).unwrap(), junk);
}

#[test]
fn corrupt_data_page_is_reported_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let n = 3000u32;
    make_store(dir.path(), n);
    let data = dir.path().join("data.ft");
    let pages = (std::fs::metadata(&data).unwrap().len() - HEAD_BYTES) / PAGE as u64;
    // A leaf (page kind 1 at offset 4) that is not the root (page 1).
    let leaf = (2..pages)
        .find(|&pid| {
            let page = read_page(&data, pid);
            u16::from_le_bytes([page[4], page[5]]) == 1 && page_is_sealed_as(&page, pid)
        })
        .expect("a leaf on disk");
    let mut page = read_page(&data, leaf);
    for b in &mut page[2000..2010] {
        *b ^= 0xA5;
    }
    write_page(&data, leaf, &page);
    let db = Db::open(dir.path(), tiny(1, 16)).unwrap();
    let t = db.tree("data").unwrap();
    let needle = format!("page {leaf}");
    let mut corrupt_reads = 0;
    for i in 0..n {
        match db.get(t, &i.to_be_bytes()) {
            Ok(Some(v)) => assert_eq!(v, vec![i as u8; 100]),
            Ok(None) => panic!("key {i} vanished"),
            Err(Error::Corrupt(msg)) => {
                assert!(msg.contains(&needle), "{msg} does not name {needle}");
                corrupt_reads += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(corrupt_reads > 0, "the keys of leaf {leaf} must fail");
    assert!(corrupt_reads < n, "only one leaf is damaged");
    match db.check_tree(t) {
        Err(Error::Corrupt(msg)) => assert!(msg.contains(&needle), "{msg}"),
        other => panic!("check_tree must report the damage, got {other:?}"),
    }
    let scanned: Vec<_> = db.range(t, None, ScanDirection::Forward).collect();
    assert!(
        scanned.iter().any(|r| r.is_err()),
        "a full scan must hit the damaged leaf"
    );
    // The engine still works for the rest, and closes cleanly.
    let healthy = (0..n)
        .find(|i| db.get(t, &i.to_be_bytes()).is_ok())
        .expect("a healthy key");
    db.put(t, &healthy.to_be_bytes(), b"after").unwrap();
    assert_eq!(
        db.get(t, &healthy.to_be_bytes()).unwrap(),
        Some(b"after".to_vec())
    );
    db.close().unwrap();
}

#[test]
fn direct_io_on_tmpfs_is_refused_clearly() {
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = Options {
        direct_io: true,
        ..tiny(1, 16)
    };
    // Kernels before 6.6 refuse O_DIRECT on tmpfs; newer ones accept it,
    // and then the store must simply work.
    match Db::open(dir.path(), options) {
        Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
        Ok(db) => {
            let t = db.tree("t").unwrap();
            db.put(t, b"direct", b"v").unwrap();
            assert_eq!(db.get(t, b"direct").unwrap(), Some(b"v".to_vec()));
            db.close().unwrap();
        }
    }
    // Without direct I/O the same place works.
    let db = Db::open(
        dir.path().join("buffered"),
        Options {
            direct_io: false,
            ..tiny(1, 16)
        },
    )
    .unwrap();
    let t = db.tree("t").unwrap();
    db.put(t, b"k", b"v").unwrap();
    assert_eq!(db.get(t, b"k").unwrap(), Some(b"v".to_vec()));
    db.close().unwrap();
}

/// A task of `Db::run` that panics (here: user code) is dropped; the other
/// tasks finish, `run` reports `TaskPanicked` instead of waiting forever,
/// and the store keeps working.
#[test]
fn panicking_task_fails_its_run_not_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 32)).unwrap();
    let tree = db.tree("t").unwrap();
    let tasks_per_worker = 8;
    let result = db.run(tasks_per_worker, move |ctx| async move {
        let owner = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u32;
        for i in 0..500u32 {
            let key = [owner.to_be_bytes(), i.to_be_bytes()].concat();
            ctx.put(tree, &key, &[owner as u8; 100]).await.unwrap();
            if owner == 5 && i == 100 {
                panic!("task 5 fails on purpose");
            }
        }
    });
    assert!(
        matches!(result, Err(Error::TaskPanicked)),
        "expected TaskPanicked, got {result:?}"
    );
    for owner in (0..2 * tasks_per_worker as u32).filter(|&o| o != 5) {
        let key = [owner.to_be_bytes(), 499u32.to_be_bytes()].concat();
        assert_eq!(db.get(tree, &key).unwrap(), Some(vec![owner as u8; 100]));
    }
    let key = [5u32.to_be_bytes(), 100u32.to_be_bytes()].concat();
    assert!(
        db.get(tree, &key).unwrap().is_some(),
        "written before the panic"
    );
    db.put(tree, b"after", b"works").unwrap();
    db.run(2, |_| async {}).unwrap();
    db.check_tree(tree).unwrap();
    db.close().unwrap();
}

/// Bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), written
/// out here so that the test does not share code with the engine.
fn crc32c_reference(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn page_checksum_is_crc32c_of_the_page_id_and_the_bytes_after_it() {
    // The on-disk format: stores written by any build must verify in any
    // other, whatever CRC implementation computes it.
    assert_eq!(crc32c_reference(b"123456789"), 0xE306_9283);
    let mut page = [0u8; PAGE];
    for (i, b) in page.iter_mut().enumerate() {
        *b = (i * 7 + i / 13) as u8;
    }
    seal_page(&mut page, 77);
    assert!(page_is_sealed_as(&page, 77));
    // The same bytes are not page 78's: a misdirected write is caught.
    assert!(!page_is_sealed_as(&page, 78));
}

/// Whether `page`'s checksum is that of page `pid`: CRC-32C of the page id
/// (8 bytes, little-endian) followed by bytes 4..4096.
fn page_is_sealed_as(page: &[u8], pid: u64) -> bool {
    let mut covered = pid.to_le_bytes().to_vec();
    covered.extend_from_slice(&page[4..PAGE]);
    u32::from_le_bytes(page[0..4].try_into().unwrap()) == crc32c_reference(&covered)
}

#[test]
fn a_store_open_in_one_db_is_refused_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 16)).unwrap();
    let t = db.tree("t").unwrap();
    db.put(t, b"k", b"v").unwrap();
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::InUse(msg)) => assert!(msg.contains("data.ft"), "{msg}"),
        other => panic!("expected InUse, got {:?}", other.map(|_| ())),
    }
    // The refused open changed nothing, and closing releases the lock.
    assert_eq!(db.get(t, b"k").unwrap(), Some(b"v".to_vec()));
    db.close().unwrap();
    let db = Db::open(dir.path(), tiny(1, 16)).unwrap();
    let t = db.tree("t").unwrap();
    assert_eq!(db.get(t, b"k").unwrap(), Some(b"v".to_vec()));
    // Dropping without `close` closes (and unlocks) too.
    drop(db);
    Db::open(dir.path(), tiny(1, 16)).unwrap().close().unwrap();
}

#[test]
fn a_file_listed_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ft");
    let link = dir.path().join("b.ft");
    std::fs::write(&path, b"").unwrap();
    std::fs::hard_link(&path, &link).unwrap();
    for paths in [[path.clone(), path.clone()], [path.clone(), link]] {
        expect_invalid(Db::open_devices(&paths, tiny(1, 16)), "listed twice");
    }
}

/// Set in the child process of the test below: the store it opens and
/// leaves open.
const CRASH_STORE_ENV: &str = "FLASHTREE_TEST_CRASH_STORE";

/// A store open without a log (`Durability::None`) when its process ended
/// cannot be trusted: it is refused. (With a log it is recovered: see the
/// crash tests.)
#[test]
fn a_store_left_open_by_a_process_that_ended_is_refused() {
    if let Some(dir) = std::env::var_os(CRASH_STORE_ENV) {
        // The child: writes, then ends without closing the store, as a
        // crash or a kill would (exit runs no destructors).
        let db = Db::open(&dir, unlogged(tiny(1, 16))).unwrap();
        let t = db.tree("data").unwrap();
        for i in 0..2000u32 {
            db.put(t, &i.to_be_bytes(), &[1; 100]).unwrap();
        }
        std::process::exit(0);
    }
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 10);
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_store_left_open_by_a_process_that_ended_is_refused",
            "--test-threads=1",
        ])
        .env(CRASH_STORE_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    // Refused, and the refusal wrote nothing: refused again.
    for _ in 0..2 {
        match Db::open(dir.path(), tiny(1, 16)) {
            Err(Error::NotClosedCleanly(msg)) => {
                assert!(msg.contains("data.ft"), "{msg}");
                assert!(msg.contains("crash"), "{msg}");
            }
            other => panic!("expected NotClosedCleanly, got {:?}", other.map(|_| ())),
        }
    }
}

/// Defect: a data file truncated to 0 bytes opened as a new, empty store.
#[test]
fn a_data_file_truncated_to_nothing_is_corrupt_not_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 200);
    let data = dir.path().join("data.ft");
    OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(0)
        .unwrap();
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::Corrupt(msg)) => assert!(msg.contains("data.ft"), "{msg}"),
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
    // Shortened by one page: also refused, not read as missing pages.
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 200);
    let data = dir.path().join("data.ft");
    let len = std::fs::metadata(&data).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len - PAGE as u64)
        .unwrap();
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::Corrupt(msg)) => assert!(msg.contains("data.ft"), "{msg}"),
        Ok(db) => {
            // The file may be preallocated past the last page in use; then
            // every record must still be there.
            let t = db.tree("data").unwrap();
            for i in 0..200u32 {
                assert_eq!(
                    db.get(t, &i.to_be_bytes()).unwrap(),
                    Some(vec![i as u8; 100])
                );
            }
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
}

/// Defect: garbage appended to the data file (a length that is not a
/// multiple of the page size) tripped an assertion on the first growth.
#[test]
fn a_data_file_with_a_partial_page_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 50);
    let data = dir.path().join("data.ft");
    let mut file = OpenOptions::new().append(true).open(&data).unwrap();
    std::io::Write::write_all(&mut file, &[0xAB; 100]).unwrap();
    drop(file);
    match Db::open(dir.path(), tiny(1, 16)) {
        Err(Error::Corrupt(msg)) => {
            assert!(msg.contains("data.ft") && msg.contains("multiple"), "{msg}")
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn opening_a_missing_store_without_create_if_missing_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing-here");
    let options = Options {
        create_if_missing: false,
        ..tiny(1, 16)
    };
    expect_invalid(Db::open(&path, options), "no store at");
    assert!(!path.exists(), "a failed open created the directory");
}

#[test]
fn a_checkpoint_slot_of_another_format_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path(), 100);
    let mut changed = 0;
    for slot in ["data.ft.ckpt0", "data.ft.ckpt1"] {
        let path = dir.path().join(slot);
        let Ok(mut bytes) = std::fs::read(&path) else {
            continue;
        };
        if bytes.len() < 16 || &bytes[4..8] != b"FTCK" {
            continue;
        }
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let crc = crc32c_reference(&bytes[4..len]);
        bytes[0..4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        changed += 1;
    }
    assert!(changed > 0, "no checkpoint slot found");
    expect_invalid(Db::open(dir.path(), tiny(1, 32)), "format version 1");
}

#[test]
fn a_batch_is_limited_by_the_pages_it_changes_not_by_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        wal_buffer_bytes: 1 << 20,
        wal_bytes_per_worker: 16 << 20,
        ..tiny(1, 4096)
    };
    let db = Db::open(dir.path(), options).unwrap();
    let t = db.tree("t").unwrap();
    // 1,000 small sorted entries change a few dozen leaves: they commit,
    // although 3 full pages per entry would not fit the 1 MiB log buffer
    // (the bound used to be per entry, and such a batch waited for ever).
    let mut small = flashtree::db::WriteBatch::new();
    for i in 0..1000u32 {
        small.put(t, &i.to_be_bytes(), &[7u8; 100]).unwrap();
    }
    db.write(&small, Default::default()).unwrap();
    // 1,000 entries of 900 bytes fill about 250 leaves: more full pages
    // than the log buffer takes in one group. A clear error, no change.
    let mut large = flashtree::db::WriteBatch::new();
    for i in 0..1000u32 {
        large
            .put(t, &(1_000_000 + i).to_be_bytes(), &[9u8; 900])
            .unwrap();
    }
    expect_invalid(db.write(&large, Default::default()), "split the batch");
    assert_eq!(db.get(t, &1_000_000u32.to_be_bytes()).unwrap(), None);
    assert_eq!(
        db.get(t, &999u32.to_be_bytes()).unwrap(),
        Some(vec![7u8; 100])
    );
    // The store goes on; the same records in smaller batches commit.
    for chunk in 0..10u32 {
        let mut part = flashtree::db::WriteBatch::new();
        for i in chunk * 100..(chunk + 1) * 100 {
            part.put(t, &(1_000_000 + i).to_be_bytes(), &[9u8; 900])
                .unwrap();
        }
        db.write(&part, Default::default()).unwrap();
    }
    assert_eq!(db.range(t, None, ScanDirection::Forward).count(), 2000);
    db.check().unwrap();
    db.close().unwrap();
}
