//! Injected I/O errors on the simulated disk: a fixed workload (create a
//! store, commit batches, read them back, close, reopen, read, write more)
//! runs once to count its disk operations, then again for every operation
//! index N with operation N failing (`EIO`). Every call must return correct
//! data or an error (never wrong data, a panic or a hang); after the first
//! error the process "dies" (a crash of the disk), and a reopen must
//! recover a state that holds every acknowledged batch, is the state after
//! a prefix of the batches, and passes `Db::check`.
//!
//! `cargo test` fails every 7th index (debug builds are slow); every index:
//! `FLASHTREE_FAULT_ALL=1 cargo test --release -p flashtree --test io_faults -- --nocapture`
//! (one index: `FLASHTREE_FAULT_INDEX=N`). A failure prints its replay.

mod common;

use common::{apply, contents, Batch, Model};
use flashtree::db::{Db, Options, ScanDirection, Tree, WriteBatch, WriteOptions};
use flashtree::io::sim::{FaultKind, SimConfig, SimDisk};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TREES: usize = 2;
const BATCHES: usize = 300;
const STORE: &str = "/sim/faults";
const SEED: u64 = 0xF417;
const KEYS: u32 = 600;

fn options(disk: &Arc<SimDisk>, create: bool) -> Options {
    common::sim_options(disk, 40, create)
}

/// The workload's batches: the same for every run.
fn batches() -> Vec<Batch> {
    let mut rng = StdRng::seed_from_u64(SEED);
    (0..BATCHES)
        .map(|n| {
            (0..rng.random_range(1..=6))
                .map(|_| {
                    let tree = rng.random_range(0..TREES);
                    let key = rng.random_range(0..KEYS).to_be_bytes().to_vec();
                    let value = rng.random_bool(0.8).then(|| {
                        let mut v = (n as u64).to_le_bytes().to_vec();
                        v.resize(rng.random_range(8..400), n as u8);
                        v
                    });
                    (tree, key, value)
                })
                .collect()
        })
        .collect()
}

fn trees(db: &Db) -> flashtree::Result<Vec<Tree>> {
    common::trees(db, TREES)
}

/// What one run saw.
#[derive(Default)]
struct Outcome {
    /// Batches acknowledged before the first error.
    acknowledged: usize,
    /// The first error, if any.
    error: Option<String>,
    /// The store was created (the first open returned).
    created: bool,
    /// Reads that returned data differing from the model.
    wrong: Vec<String>,
}

/// Reads every key of the model and scans every tree; wrong data goes to
/// `wrong`, an error ends the check.
fn verify_reads(
    db: &Db,
    t: &[Tree],
    model: &Model,
    wrong: &mut Vec<String>,
) -> flashtree::Result<()> {
    for (i, &tree) in t.iter().enumerate() {
        for key in (0..KEYS).map(|k| k.to_be_bytes().to_vec()) {
            let got = db.get(tree, &key)?;
            if got.as_ref() != model[i].get(&key) {
                wrong.push(format!(
                    "get tree {i} key {key:?}: {:?}",
                    got.map(|v| v.len())
                ));
            }
        }
        let scanned: BTreeMap<Vec<u8>, Vec<u8>> = db
            .range(tree, None, ScanDirection::Forward)
            .collect::<flashtree::Result<_>>()?;
        if scanned != model[i] {
            wrong.push(format!("scan of tree {i} differs from the model"));
        }
    }
    Ok(())
}

/// The workload; stops at the first error.
fn workload(disk: &Arc<SimDisk>, all: &[Batch], outcome: &mut Outcome) -> flashtree::Result<()> {
    let path = Path::new(STORE);
    let mut model: Model = vec![BTreeMap::new(); TREES];
    let db = Db::open(path, options(disk, true))?;
    outcome.created = true;
    let mut t = trees(&db)?;
    let mut db = Some(db);
    for (n, batch) in all.iter().enumerate() {
        let d = db.as_ref().expect("open");
        let mut wb = WriteBatch::new();
        for (tree, key, value) in batch {
            match value {
                Some(v) => wb.put(t[*tree], key, v)?,
                None => wb.delete(t[*tree], key)?,
            }
        }
        d.write(&wb, WriteOptions::default())?;
        apply(&mut model, batch);
        outcome.acknowledged = n + 1;
        if n % 60 == 59 {
            verify_reads(d, &t, &model, &mut outcome.wrong)?;
        }
        if n == BATCHES / 2 {
            db.take().expect("open").close()?;
            let reopened = Db::open(path, options(disk, false))?;
            t = trees(&reopened)?;
            verify_reads(&reopened, &t, &model, &mut outcome.wrong)?;
            db = Some(reopened);
        }
    }
    let d = db.take().expect("open");
    verify_reads(&d, &t, &model, &mut outcome.wrong)?;
    d.close()
}

/// One run with operation `fail_at` failing (None: no fault). Returns the
/// disk's operation count after the workload, or a violation.
fn run(fail_at: Option<u64>, all: &[Batch]) -> Result<(u64, bool), String> {
    let disk = SimDisk::new(SimConfig::new(SEED));
    if let Some(index) = fail_at {
        disk.fail_op(index, FaultKind::Any);
    }
    let mut outcome = Outcome::default();
    let result = workload(&disk, all, &mut outcome);
    let ops = disk.op_count();
    if let Err(e) = &result {
        outcome.error = Some(e.to_string());
    }
    if !outcome.wrong.is_empty() {
        return Err(format!("wrong data: {:?}", outcome.wrong));
    }
    if fail_at.is_some() && disk.injected_faults() == 0 {
        return Ok((ops, false)); // the index was past the workload's end
    }
    if fail_at.is_none() {
        if let Some(e) = outcome.error {
            return Err(format!("the workload fails without a fault: {e}"));
        }
        return Ok((ops, false));
    }
    // The process dies: unsynced writes land at random.
    disk.fail_all_from(disk.op_count(), FaultKind::Any);
    disk.crash();
    disk.clear_faults();
    let path = Path::new(STORE);
    let db = match Db::open(path, options(&disk, false)) {
        Ok(db) => db,
        // The fault hit the creation itself: the store may not exist.
        Err(_) if !outcome.created => return Ok((ops, outcome.error.is_some())),
        Err(e) => {
            return Err(format!(
                "reopen after the fault: {e} (first error: {:?})",
                outcome.error
            ))
        }
    };
    let t = trees(&db).map_err(|e| format!("trees after the fault: {e}"))?;
    let found = contents(&db, &t).map_err(|e| format!("scan after the fault: {e}"))?;
    let mut state: Model = vec![BTreeMap::new(); TREES];
    let mut matched = false;
    for n in 0..=all.len() {
        if n >= outcome.acknowledged && state == found {
            matched = true;
            break;
        }
        if n < all.len() {
            apply(&mut state, &all[n]);
        }
    }
    if !matched {
        return Err(format!(
            "after the fault and a reopen the store is not a prefix holding the {} acknowledged batches (first error: {:?})",
            outcome.acknowledged, outcome.error
        ));
    }
    db.check()
        .map_err(|e| format!("check after the fault: {e}"))?;
    db.close()
        .map_err(|e| format!("close after the fault: {e}"))?;
    Ok((ops, outcome.error.is_some()))
}

#[test]
fn every_failed_io_returns_an_error_or_correct_data_and_recovers() {
    let all = batches();
    let (ops, _) = run(None, &all).unwrap();
    assert!(ops >= 1000, "the workload makes only {ops} disk operations");
    let indices: Vec<u64> = match std::env::var("FLASHTREE_FAULT_INDEX")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(index) => vec![index],
        None if std::env::var_os("FLASHTREE_FAULT_ALL").is_some() => (0..ops).collect(),
        None => (0..ops).step_by(7).collect(),
    };
    // A watchdog: a run that takes too long is a hang.
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let done = Arc::new(AtomicBool::new(false));
    {
        let (current, done) = (current.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = u64::MAX;
            let mut stuck = 0;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let now = current.load(Ordering::Relaxed);
                stuck = if now == last { stuck + 1 } else { 0 };
                last = now;
                if stuck > 120 {
                    eprintln!("io_faults: index {now} hangs; replay: FLASHTREE_FAULT_INDEX={now} cargo test --release -p flashtree --test io_faults -- --nocapture");
                    std::process::abort();
                }
            }
        });
    }
    let (mut tried, mut errors, mut failures) = (0u64, 0u64, Vec::new());
    for &index in &indices {
        current.store(index, Ordering::Relaxed);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| run(Some(index), &all)));
        let replay = format!(
            "FLASHTREE_FAULT_INDEX={index} cargo test --release -p flashtree --test io_faults -- --nocapture"
        );
        tried += 1;
        match result {
            Ok(Ok((_, errored))) => {
                errors += u64::from(errored);
                if !errored {
                    eprintln!("io_faults: index {index}: the fault surfaced as no error");
                }
            }
            Ok(Err(violation)) => {
                eprintln!("io_faults: index {index}: {violation}; replay: {replay}");
                failures.push(index);
            }
            Err(_) => {
                eprintln!("io_faults: index {index} panicked; replay: {replay}");
                failures.push(index);
            }
        }
        if failures.len() >= 5 {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    eprintln!(
        "io_faults: workload of {ops} disk operations; {tried} indices failed in turn, {errors} runs saw an error, {} violations (wrong data, no recovery or panics)",
        failures.len()
    );
    assert!(failures.is_empty(), "failing indices: {failures:?}");
}

/// A creation cut short (an I/O error at any operation of the first open,
/// then a crash that drops or tears what was not synced) leaves nothing
/// acknowledged, so opening with `create_if_missing` again must make the
/// store, not refuse a half-written head as someone else's data.
#[test]
fn a_creation_cut_short_at_any_operation_is_created_again() {
    let path = Path::new(STORE);
    let ops = {
        let disk = SimDisk::new(SimConfig::new(1));
        let db = Db::open(path, options(&disk, true)).unwrap();
        drop(db);
        disk.op_count()
    };
    for index in 0..ops {
        for seed in 0..32u64 {
            let replay = format!("index {index}, crash seed {seed}");
            let disk = SimDisk::new(SimConfig::new(seed));
            disk.fail_op(index, FaultKind::Any);
            let db = Db::open(path, options(&disk, true)).ok();
            common::crash_process(&disk, db, false);
            let db = Db::open(path, options(&disk, true))
                .unwrap_or_else(|e| panic!("{replay}: opening again: {e}"));
            let t = db.tree("t").unwrap();
            db.put(t, b"k", b"v").unwrap();
            db.close().unwrap();
            let db = Db::open(path, options(&disk, false)).unwrap();
            let t = db.tree("t").unwrap();
            assert_eq!(db.get(t, b"k").unwrap(), Some(b"v".to_vec()), "{replay}");
            db.close().unwrap();
        }
    }
}
