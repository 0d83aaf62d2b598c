//! Crashes on the simulated disk (`flashtree::io::sim`): per seed, a store
//! with a tiny buffer pool and a small log runs random batches over three
//! trees (two B+-trees and a hash tree, batches mixing them; now and then a
//! run of large batches into one B+-tree), now and then compacting a
//! B+-tree between them (`Db::compact`: its leaves move to new page ids in
//! logged steps that free the old ids, not synced); at random points the
//! disk crashes (each unsynced write is kept, dropped or torn at 512-byte
//! sectors, in any order), sometimes right after a compaction or in the
//! middle of one, sometimes again in the middle of the recovery that
//! follows; after every reopen the store
//! must hold every acknowledged batch, equal the state after some prefix
//! of the batches issued (a batch all there or not at all), and pass
//! `Db::check`.
//!
//! `cargo test` runs 200 seeds. Any number:
//! `FLASHTREE_SIM_SEEDS=100000 cargo test --release -p flashtree --test crash_sim -- --nocapture`
//! (`FLASHTREE_SIM_FIRST_SEED` picks the first; one seed:
//! `FLASHTREE_SIM_SEED=N`). A failure prints the command that replays it.

mod common;

use common::{apply, contents_probing, Batch, Model};
use flashtree::db::{
    CompactStats, Db, Durability, LogWrites, Options, Tree, WriteBatch, WriteOptions,
};
use flashtree::io::sim::{FaultKind, SimConfig, SimDisk};
use flashtree::io::Vfs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TREES: usize = 3;
const STORE: &str = "/sim/store";
/// A seed that runs longer than this is reported as a hang.
const SEED_TIME_MAX: Duration = Duration::from_secs(120);

fn options(disk: &Arc<SimDisk>, create: bool) -> Options {
    Options {
        pool_bytes: 48 * 4096,
        workers: 1,
        durability: Durability::Sync,
        wal_bytes_per_worker: 1 << 20,
        wal_buffer_bytes: 1 << 20,
        checkpoint_log_bytes: 128 << 10,
        create_if_missing: create,
        vfs: Vfs::Sim(disk.clone()),
        ..Options::default()
    }
}

/// A batch of puts of large values at random keys of B+-tree `tree`, as
/// many as a batch may hold in this pool. A run of them now and then
/// gives some trees more leaves than a compaction moves in one step
/// (`btree::compact::MOVES_PER_STEP`) and than the pool holds, scattered
/// over the store.
fn bulk_batch(rng: &mut StdRng, tree: usize, keys: u32, number: usize) -> Batch {
    (0..BULK_ENTRIES)
        .map(|_| {
            let key = rng.random_range(0..keys).to_be_bytes().to_vec();
            let len = rng.random_range(100..400);
            let mut v = (number as u64).to_le_bytes().to_vec();
            v.extend((0..len).map(|i| (i as u8) ^ (number as u8)));
            (tree, key, Some(v))
        })
        .collect()
}

fn random_batch(rng: &mut StdRng, keys: u32, number: usize) -> Batch {
    if rng.random_bool(0.15) {
        // A range of adjacent keys deleted: leaves empty, merge and free
        // their pages, which checkpoints then discard.
        let tree = rng.random_range(0..TREES);
        let first = rng.random_range(0..keys);
        return (first..(first + 8).min(keys))
            .map(|key| (tree, key.to_be_bytes().to_vec(), None))
            .collect();
    }
    let count = rng.random_range(1..=8);
    (0..count)
        .map(|_| {
            let tree = rng.random_range(0..TREES);
            let key = rng.random_range(0..keys).to_be_bytes().to_vec();
            let value = rng.random_bool(0.75).then(|| {
                let len = rng.random_range(0..300);
                let mut v = (number as u64).to_le_bytes().to_vec();
                v.extend((0..len).map(|i| (i as u8) ^ (number as u8)));
                v
            });
            (tree, key, value)
        })
        .collect()
}

/// The last tree is a hash tree.
fn trees(db: &Db) -> flashtree::Result<Vec<Tree>> {
    common::trees_with_hash(db, TREES)
}

/// Compacts one of the B+-trees of `t`, picked at random (the last tree,
/// a hash tree, has no key order: `Db::compact` refuses it).
fn compact_random(rng: &mut StdRng, db: &Db, t: &[Tree]) -> flashtree::Result<CompactStats> {
    let tree = t[rng.random_range(0..TREES - 1)];
    debug_assert!(!tree.is_hash());
    db.compact(tree)
}

/// Crashes the disk under a live `db`: from now on the old process can
/// change nothing; its unsynced writes land at random.
fn crash(disk: &SimDisk, db: Option<Db>) {
    common::crash_process(disk, db, false);
}

#[derive(Default)]
struct Totals {
    seeds: u64,
    crashes: u64,
    crashes_in_recovery: u64,
    crashes_in_close: u64,
    acknowledged: u64,
    batches_recovered: u64,
    /// Full leaves that moved entries to a neighbour instead of splitting
    /// (`DbStats::leaf_rebalances`, as the stores published it before
    /// their crashes): the crashes land among such steps too.
    leaf_rebalances: u64,
    /// Free pages given back to the disk (`DbStats::pages_discarded`, as
    /// published before the crashes): a discard is a write of zeros that a
    /// crash may keep, tear or drop, so the crashes land among them too.
    pages_discarded: u64,
    /// Compactions that ended before their crash (`Db::compact` returned
    /// its statistics), the leaves they moved, and the leaves they filled
    /// from a neighbour or emptied into one.
    compactions: u64,
    leaves_moved: u64,
    leaves_filled: u64,
    /// Crashes in the middle of a compaction: the disk fails from a random
    /// operation of the compaction or of the log flush after it on, then
    /// crashes.
    crashes_in_compaction: u64,
    /// Of those, the ones in which an operation failed before the crash
    /// (else the fault was past the flush: a crash right after it).
    disk_failed_in_compaction: u64,
    /// Of those, the compactions that returned the disk's error.
    compactions_failed: u64,
}

/// The probability that a batch starts a run of [`bulk_batch`]es, their
/// number, and the entries of each (a batch needs a leaf in memory per
/// entry: a quarter of the 48-page pool).
const BULK_RUN: f64 = 0.01;
const BULK_RUN_BATCHES: std::ops::RangeInclusive<u32> = 10..=25;
const BULK_ENTRIES: usize = 12;
/// Between two batches, the probability of a compaction.
const COMPACT_BETWEEN_BATCHES: f64 = 0.04;
/// Before a crash, the probability of a compaction, and then of a crash
/// in the middle of it (else right after it).
const COMPACT_BEFORE_CRASH: f64 = 0.35;
const CRASH_IN_COMPACTION: f64 = 0.5;
/// The disk fails from a random one of this many operations on.
const COMPACT_FAULT_OPS: u64 = 16;

/// Runs one seed; Err describes the first violation.
fn run_seed(seed: u64, totals: &mut Totals) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut config = SimConfig::new(seed);
    config.keep_probability = rng.random_range(0.0..1.0);
    config.tear_probability = rng.random_range(0.0..1.0);
    // Half the seeds write the log as io_uring does: plain writes, then an
    // `fdatasync` once they completed; the others with `RWF_DSYNC`.
    config.log_writes_then_sync = rng.random_bool(0.5);
    let disk = SimDisk::new(config);
    // Buffered: unsynced batches stay in the log buffer until a synced
    // write (or the delay) flushes them.
    let durability = if rng.random_bool(0.5) {
        Durability::Sync
    } else {
        Durability::Buffered { max_delay_ms: 1000 }
    };
    // Every way of writing the log: on the worker's thread, or through
    // its channel (both the simulated disk's synchronous backend, but
    // different completion paths in the worker).
    let log_writes = [LogWrites::Auto, LogWrites::Inline, LogWrites::Channel][(seed % 3) as usize];
    let options = |create| Options {
        durability,
        log_writes,
        ..options(&disk, create)
    };
    let keys = rng.random_range(20..400);
    let path = Path::new(STORE);
    // The batches the store holds (a prefix of those issued).
    let mut history: Vec<Batch> = Vec::new();
    let mut model: Model = vec![BTreeMap::new(); TREES];
    let db = Db::open(path, options(true)).map_err(|e| format!("create: {e}"))?;
    trees(&db).map_err(|e| format!("create trees: {e}"))?;
    db.close()
        .map_err(|e| format!("close after creation: {e}"))?;
    let cycles = rng.random_range(1..=4);
    for cycle in 0..cycles {
        let db = Db::open(path, options(false)).map_err(|e| format!("cycle {cycle}: open: {e}"))?;
        let t = trees(&db).map_err(|e| format!("cycle {cycle}: trees: {e}"))?;
        let batches = rng.random_range(0..80);
        let mut issued: Vec<Batch> = Vec::new();
        let mut acknowledged = 0;
        let (mut bulk_left, mut bulk_tree) = (0, 0);
        for _ in 0..batches {
            let number = history.len() + issued.len();
            if bulk_left == 0 && rng.random_bool(BULK_RUN) {
                bulk_left = rng.random_range(BULK_RUN_BATCHES);
                bulk_tree = rng.random_range(0..TREES - 1);
            }
            let batch = if bulk_left > 0 {
                bulk_left -= 1;
                bulk_batch(&mut rng, bulk_tree, keys, number)
            } else {
                random_batch(&mut rng, keys, number)
            };
            let mut wb = WriteBatch::new();
            for (tree, key, value) in &batch {
                match value {
                    Some(v) => wb.put(t[*tree], key, v),
                    None => wb.delete(t[*tree], key),
                }
                .map_err(|e| format!("batch building: {e}"))?;
            }
            let sync = rng.random_bool(0.9);
            issued.push(batch);
            db.write(&wb, WriteOptions { sync: Some(sync) })
                .map_err(|e| format!("cycle {cycle}: write: {e}"))?;
            if sync {
                acknowledged = issued.len();
            } else if rng.random_bool(0.5) {
                // The second step of an early lock release (the benchmark
                // adapter's `commit_releasing`, in a `Sync` store): an
                // empty synced write makes every earlier batch durable.
                db.write(&WriteBatch::new(), WriteOptions { sync: Some(true) })
                    .map_err(|e| format!("cycle {cycle}: empty synced write: {e}"))?;
                acknowledged = issued.len();
            }
            if rng.random_bool(COMPACT_BETWEEN_BATCHES) {
                // Its moves are logged but not synced: the next synced
                // write (or an eviction, or a checkpoint) makes them
                // durable, or the crash keeps, tears or drops them.
                let s = compact_random(&mut rng, &db, &t)
                    .map_err(|e| format!("cycle {cycle}: compact: {e}"))?;
                totals.compactions += 1;
                totals.leaves_moved += s.leaves_moved;
                totals.leaves_filled += s.leaves_filled + s.leaves_emptied;
            }
        }
        totals.acknowledged += acknowledged as u64;
        let mut crashed_in_compaction = false;
        if rng.random_bool(COMPACT_BEFORE_CRASH) {
            if rng.random_bool(CRASH_IN_COMPACTION) {
                // The disk dies at a random operation of the compaction
                // (its leaf loads, the evictions, log writes and
                // checkpoint its moves cause), of the log flush after it,
                // or, past their last, at the crash.
                totals.crashes_in_compaction += 1;
                crashed_in_compaction = true;
                let before = disk.op_count();
                let faults = disk.injected_faults();
                disk.fail_all_from(
                    before + rng.random_range(0..COMPACT_FAULT_OPS),
                    FaultKind::Any,
                );
                match compact_random(&mut rng, &db, &t) {
                    Ok(s) => {
                        totals.compactions += 1;
                        totals.leaves_moved += s.leaves_moved;
                        totals.leaves_filled += s.leaves_filled + s.leaves_emptied;
                    }
                    Err(_) => totals.compactions_failed += 1,
                }
                // The log flush that carries its last moves (an empty
                // synced write: no batch of its own, so whether it fails
                // changes nothing the checks expect).
                let _ = db.write(&WriteBatch::new(), WriteOptions { sync: Some(true) });
                if disk.injected_faults() > faults {
                    totals.disk_failed_in_compaction += 1;
                }
            } else {
                let s = compact_random(&mut rng, &db, &t)
                    .map_err(|e| format!("cycle {cycle}: compact before the crash: {e}"))?;
                totals.compactions += 1;
                totals.leaves_moved += s.leaves_moved;
                totals.leaves_filled += s.leaves_filled + s.leaves_emptied;
            }
        }
        let stats = db.stats();
        totals.leaf_rebalances += stats.leaf_rebalances;
        totals.pages_discarded += stats.pages_discarded;
        totals.crashes += 1;
        if crashed_in_compaction {
            crash(&disk, Some(db));
        } else if rng.random_bool(0.2) {
            // Crash in the middle of a close: its log flush, its page
            // writes, its data sync or one of its two checkpoint slots.
            totals.crashes_in_close += 1;
            disk.fail_all_from(disk.op_count() + rng.random_range(0..40), FaultKind::Any);
            let _ = db.close();
            crash(&disk, None);
        } else {
            crash(&disk, Some(db));
        }
        if rng.random_bool(0.3) {
            // Crash again in the middle of the recovery: every operation
            // from a random one on fails.
            totals.crashes_in_recovery += 1;
            disk.fail_all_from(disk.op_count() + rng.random_range(0..60), FaultKind::Any);
            let reopened = Db::open(path, options(false)).ok();
            crash(&disk, reopened);
        }
        let db = Db::open(path, options(false))
            .map_err(|e| format!("cycle {cycle}: reopen after the crash: {e}"))?;
        let t = trees(&db).map_err(|e| format!("cycle {cycle}: trees after the crash: {e}"))?;
        let found =
            contents_probing(&db, &t, keys).map_err(|e| format!("cycle {cycle}: scan: {e}"))?;
        // Some prefix of the issued batches, at least the acknowledged ones.
        let mut prefix = None;
        let mut state = model.clone();
        for (n, batch) in issued.iter().enumerate() {
            if n >= acknowledged && state == found {
                prefix = Some(n);
                break;
            }
            apply(&mut state, batch);
        }
        if prefix.is_none() && state == found {
            prefix = Some(issued.len());
        }
        let Some(prefix) = prefix else {
            if std::env::var_os("FLASHTREE_SIM_VERBOSE").is_some() {
                describe_difference(&state, &found);
                eprintln!("recovery: {:?}", db.stats().recovery);
                for (n, b) in issued.iter().enumerate() {
                    eprintln!(
                        "batch {n}: {:?}",
                        b.iter()
                            .map(|(t, k, v)| (t, k, v.as_ref().map(Vec::len)))
                            .collect::<Vec<_>>()
                    );
                }
            }
            return Err(format!(
                "cycle {cycle}: after the crash the store is not the state after any prefix of the {} batches issued from {acknowledged} acknowledged on ({} entries found)",
                issued.len(),
                found.iter().map(BTreeMap::len).sum::<usize>()
            ));
        };
        totals.batches_recovered += prefix as u64;
        for batch in issued.drain(..prefix) {
            apply(&mut model, &batch);
            history.push(batch);
        }
        db.check()
            .map_err(|e| format!("cycle {cycle}: check after recovery: {e}"))?;
        db.close()
            .map_err(|e| format!("cycle {cycle}: close after recovery: {e}"))?;
    }
    totals.seeds += 1;
    Ok(())
}

/// Prints how `found` differs from `expected` (`FLASHTREE_SIM_VERBOSE`).
fn describe_difference(expected: &Model, found: &Model) {
    for (t, (e, f)) in expected.iter().zip(found).enumerate() {
        for (k, v) in e {
            match f.get(k) {
                None => eprintln!("tree {t} key {k:?}: missing (expected {} bytes)", v.len()),
                Some(w) if w != v => eprintln!(
                    "tree {t} key {k:?}: value of batch {:?}, expected batch {:?}",
                    w.get(..8),
                    v.get(..8)
                ),
                _ => {}
            }
        }
        for k in f.keys().filter(|k| !e.contains_key(*k)) {
            eprintln!("tree {t} key {k:?}: present, expected absent");
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[test]
fn crashes_lose_no_acknowledged_batch_and_leave_a_prefix() {
    let (first, count) = match env_u64("FLASHTREE_SIM_SEED") {
        Some(seed) => (seed, 1),
        None => (
            env_u64("FLASHTREE_SIM_FIRST_SEED").unwrap_or_else(rand::random),
            env_u64("FLASHTREE_SIM_SEEDS").unwrap_or(200),
        ),
    };
    eprintln!("crash_sim: seeds {first}..{}", first.wrapping_add(count));
    // A watchdog: a seed that runs too long is a hang.
    let current = Arc::new(AtomicU64::new(first));
    let started = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    {
        let (current, started) = (current.clone(), started.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let since = epoch.elapsed().as_secs() - started.load(Ordering::Relaxed);
            if since > SEED_TIME_MAX.as_secs() {
                let seed = current.load(Ordering::Relaxed);
                eprintln!(
                    "crash_sim: seed {seed} runs for more than {SEED_TIME_MAX:?} (a hang); replay: FLASHTREE_SIM_SEED={seed} cargo test --release -p flashtree --test crash_sim -- --nocapture"
                );
                std::process::abort();
            }
        });
    }
    let mut totals = Totals::default();
    let mut failures = Vec::new();
    let mut panics = 0u64;
    for i in 0..count {
        let seed = first.wrapping_add(i);
        current.store(seed, Ordering::Relaxed);
        started.store(epoch.elapsed().as_secs(), Ordering::Relaxed);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| run_seed(seed, &mut totals)));
        let replay = format!(
            "FLASHTREE_SIM_SEED={seed} cargo test --release -p flashtree --test crash_sim -- --nocapture"
        );
        match result {
            Ok(Ok(())) => {}
            Ok(Err(violation)) => {
                eprintln!("crash_sim: seed {seed}: {violation}; replay: {replay}");
                failures.push(seed);
            }
            Err(_) => {
                eprintln!("crash_sim: seed {seed} panicked; replay: {replay}");
                panics += 1;
                failures.push(seed);
            }
        }
        if failures.len() >= 5 {
            break;
        }
        if count >= 1000 && (i + 1) % 1000 == 0 {
            eprintln!("crash_sim: {} seeds done, {} failed", i + 1, failures.len());
        }
    }
    eprintln!(
        "crash_sim: {} seeds passed, {} failed ({panics} panics); {} crashes ({} during a close, {} during a compaction: the disk failed in {} of them, {} compactions returning its error; {} during recovery); {} acknowledged batches, 0 lost in passing seeds; {} batches recovered; {} leaf rebalances; {} pages discarded; {} compactions, {} leaves moved, {} filled or emptied",
        totals.seeds,
        failures.len(),
        totals.crashes,
        totals.crashes_in_close,
        totals.crashes_in_compaction,
        totals.disk_failed_in_compaction,
        totals.compactions_failed,
        totals.crashes_in_recovery,
        totals.acknowledged,
        totals.batches_recovered,
        totals.leaf_rebalances,
        totals.pages_discarded,
        totals.compactions,
        totals.leaves_moved,
        totals.leaves_filled
    );
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
    // The workload reaches the step that moves entries between leaves
    // (counted once the stores published their statistics).
    if totals.seeds >= 100 {
        assert!(
            totals.leaf_rebalances > 0,
            "no leaf moved entries to a neighbour in {} seeds",
            totals.seeds
        );
        assert!(
            totals.pages_discarded > 0,
            "no free page was discarded in {} seeds",
            totals.seeds
        );
        // Compactions moved leaves before crashes.
        assert!(
            totals.leaves_moved > 0,
            "no compaction moved a leaf in {} seeds ({} compactions)",
            totals.seeds,
            totals.compactions
        );
        assert!(
            totals.leaves_filled > 0,
            "no compaction filled a leaf in {} seeds ({} compactions)",
            totals.seeds,
            totals.compactions
        );
    }
}

/// The log's ring size comes from the checkpoint, not from the options or
/// the file's length: a store reopened with other log sizes (smaller or
/// larger), written until its log wraps and crashed again, finds every
/// commit.
#[test]
fn recovery_with_other_log_sizes_finds_every_commit() {
    for new_wal_bytes in [1u64 << 20, 4 << 20] {
        let disk = SimDisk::new(SimConfig::new(5));
        let path = Path::new(STORE);
        let mut model: Model = vec![BTreeMap::new(); TREES];
        let mut rng = StdRng::seed_from_u64(9);
        let mut number = 0;
        for (wal_bytes, create) in [
            (2u64 << 20, true),
            (new_wal_bytes, false),
            (new_wal_bytes, false),
        ] {
            let o = Options {
                wal_bytes_per_worker: wal_bytes,
                checkpoint_log_bytes: wal_bytes / 2,
                ..options(&disk, create)
            };
            let db = Db::open(path, o).unwrap();
            let t = trees(&db).unwrap();
            assert!(
                contents_probing(&db, &t, 300).unwrap() == model,
                "reopened with {wal_bytes}-byte logs, the store lost commits"
            );
            db.check().unwrap();
            // Enough log to wrap the ring past its first lap.
            for _ in 0..400 {
                let batch = random_batch(&mut rng, 300, number);
                number += 1;
                let mut wb = WriteBatch::new();
                for (tree, key, value) in &batch {
                    match value {
                        Some(v) => wb.put(t[*tree], key, v).unwrap(),
                        None => wb.delete(t[*tree], key).unwrap(),
                    }
                }
                db.write(&wb, WriteOptions::default()).unwrap();
                apply(&mut model, &batch);
            }
            crash(&disk, Some(db));
        }
    }
}
