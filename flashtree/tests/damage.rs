//! Damaged files: a store with known content (on the simulated disk, so
//! that thousands of trials are fast) is damaged at random (bit flips,
//! zeroed, swapped or copied 4 KiB blocks, garbage, truncation, removed
//! files, both checkpoint slots hit) in its data file, logs or checkpoint
//! slots; then it is opened (`create_if_missing` off), every known key is
//! read, every B+-tree scanned (the hash tree's entries counted instead:
//! it has no scan) and `Db::check` run.
//!
//! # Oracle
//! Two stores are damaged: one closed cleanly, and one whose process
//! "died" after its last commit (every write kept, so recovery replays the
//! log). Every call must return an error or correct data; never a panic, a
//! hang or wrong data. Correct data is the model after all batches, with
//! one exception: in the crashed store, each batch was committed with
//! `Sync` by one thread, so it is its own log flush, and damage to the last
//! flush cannot be told from a flush the crash cut short (the README's
//! Limits say so); the state after all batches but the last is correct
//! there too. A get that returns a value for a key must return the model's
//! value; a get that returns "absent" must match the model; a scan that
//! completes must return exactly the model's entries.
//!
//! `cargo test` runs 300 trials. Any number:
//! `FLASHTREE_DAMAGE_TRIALS=10000 cargo test --release -p flashtree --test damage -- --nocapture`
//! (`FLASHTREE_DAMAGE_SEED=N` replays one trial; a failure prints it).

mod common;

use common::Model;
use flashtree::db::{Db, Options, ScanDirection, Tree, WriteBatch, WriteOptions};
use flashtree::io::sim::{SimConfig, SimDisk};
use flashtree::io::Vfs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TREES: usize = 3;
const STORE: &str = "/sim/damaged";
const BLOCK: usize = 4096;

fn options(disk: &Arc<SimDisk>, create: bool) -> Options {
    Options {
        pool_bytes: 48 * 4096,
        workers: 1,
        wal_bytes_per_worker: 1 << 20,
        wal_buffer_bytes: 1 << 20,
        checkpoint_log_bytes: 256 << 10,
        create_if_missing: create,
        vfs: Vfs::Sim(disk.clone()),
        ..Options::default()
    }
}

/// Every file of a store: path → bytes.
type Files = Vec<(PathBuf, Vec<u8>)>;

/// The last tree is a hash tree.
fn trees(db: &Db) -> flashtree::Result<Vec<Tree>> {
    common::trees_with_hash(db, TREES)
}

/// A base store: (files, model after all batches, model before the last).
struct Base {
    files: Files,
    full: Model,
    before_last: Model,
    crashed: bool,
}

fn build_base(crashed: bool) -> Base {
    let disk = SimDisk::new(SimConfig::new(7));
    let path = Path::new(STORE);
    let db = Db::open(path, options(&disk, true)).unwrap();
    let t = trees(&db).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut model: Model = vec![BTreeMap::new(); TREES];
    let mut before_last = model.clone();
    for n in 0..300u32 {
        let mut batch = WriteBatch::new();
        before_last = model.clone();
        for _ in 0..rng.random_range(1..=8) {
            let tree = rng.random_range(0..TREES);
            let key = rng.random_range(0..1500u32).to_be_bytes().to_vec();
            if rng.random_bool(0.85) {
                let mut value = n.to_le_bytes().to_vec();
                value.resize(rng.random_range(4..200), (n % 251) as u8);
                batch.put(t[tree], &key, &value).unwrap();
                model[tree].insert(key, value);
            } else {
                batch.delete(t[tree], &key).unwrap();
                model[tree].remove(&key);
            }
        }
        db.write(&batch, WriteOptions::default()).unwrap();
    }
    if crashed {
        // The process dies with every write on the disk: recovery replays.
        common::crash_process(&disk, Some(db), true);
    } else {
        db.close().unwrap();
    }
    let files = disk
        .list()
        .into_iter()
        .map(|p| {
            let bytes = disk.durable_bytes(&p).unwrap();
            (p, bytes)
        })
        .collect();
    Base {
        files,
        full: model,
        before_last,
        crashed,
    }
}

/// Applies one random kind of damage; returns its description.
fn damage(files: &mut Files, rng: &mut StdRng) -> String {
    let which = rng.random_range(0..files.len());
    let (path, bytes) = &mut files[which];
    let name = path.display().to_string();
    // Damage where the file holds something (the data file and the logs
    // are preallocated, mostly zeros).
    let blocks = bytes
        .chunks(BLOCK)
        .rposition(|b| b.iter().any(|&x| x != 0))
        .map_or(bytes.len() / BLOCK, |last| last + 1)
        .min(bytes.len() / BLOCK);
    let kind = rng.random_range(0..9);
    if bytes.is_empty() && kind != 6 {
        return format!("{name}: empty, left alone");
    }
    let block = rng.random_range(0..blocks.max(1));
    let at = block * BLOCK;
    let end = (at + BLOCK).min(bytes.len());
    match kind {
        0 => {
            let flips = rng.random_range(1..=8);
            for _ in 0..flips {
                let byte = rng.random_range(at..end);
                bytes[byte] ^= 1 << rng.random_range(0..8);
            }
            format!("{name}: {flips} bit flips in block {block}")
        }
        1 => {
            bytes[at..end].fill(0);
            format!("{name}: block {block} zeroed")
        }
        2 if blocks >= 2 => {
            let other = rng.random_range(0..blocks);
            let (a, b) = (block.min(other), block.max(other));
            if a != b {
                let (left, right) = bytes.split_at_mut(b * BLOCK);
                left[a * BLOCK..(a + 1) * BLOCK].swap_with_slice(&mut right[..BLOCK]);
            }
            format!("{name}: blocks {a} and {b} swapped")
        }
        3 if blocks >= 2 => {
            let from = rng.random_range(0..blocks);
            let copy = bytes[from * BLOCK..(from + 1) * BLOCK].to_vec();
            bytes[at..at + BLOCK].copy_from_slice(&copy);
            format!("{name}: block {from} copied over block {block}")
        }
        4 => {
            let start = rng.random_range(at..end);
            let len = rng.random_range(1..=(end - start).max(1)).min(end - start);
            rng.fill(&mut bytes[start..start + len]);
            format!("{name}: {len} garbage bytes at {start}")
        }
        5 => {
            let len = if rng.random_bool(0.5) {
                rng.random_range(0..bytes.len())
            } else {
                block * BLOCK
            };
            bytes.truncate(len);
            format!("{name}: truncated to {len} bytes")
        }
        6 => {
            let extra = rng.random_range(1..3 * BLOCK);
            let mut garbage = vec![0u8; extra];
            rng.fill(&mut garbage[..]);
            bytes.extend_from_slice(&garbage);
            format!("{name}: {extra} garbage bytes appended")
        }
        7 => {
            files.remove(which);
            format!("{name}: removed")
        }
        _ => {
            // Both checkpoint slots.
            let mut hit = Vec::new();
            for (p, b) in files.iter_mut() {
                if p.to_string_lossy().contains(".ckpt") && !b.is_empty() {
                    let at = rng.random_range(0..b.len().min(BLOCK));
                    b[at] ^= 0x40;
                    hit.push(format!("{}@{at}", p.display()));
                }
            }
            format!("both slots flipped: {hit:?}")
        }
    }
}

#[derive(Default)]
struct Tally {
    trials: u64,
    refused: u64,
    reads_with_errors: u64,
    correct_reads: u64,
    wrong: Vec<String>,
}

/// One trial: damage a copy of `base`, open, read everything.
fn trial(base: &Base, seed: u64, tally: &mut Tally) -> Result<String, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut files = base.files.clone();
    let mut what = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        what.push(damage(&mut files, &mut rng));
    }
    let what = what.join("; ");
    let disk = SimDisk::new(SimConfig::new(seed));
    for (path, bytes) in files {
        disk.replace_durable(&path, bytes);
    }
    tally.trials += 1;
    let db = match Db::open(Path::new(STORE), options(&disk, false)) {
        Ok(db) => db,
        Err(_) => {
            tally.refused += 1;
            return Ok(what);
        }
    };
    let t = match trees(&db) {
        Ok(t) => t,
        Err(_) => {
            tally.reads_with_errors += 1;
            return Ok(what);
        }
    };
    // The models this trial may show: all batches, or (crashed store) all
    // but the last.
    let models: Vec<&Model> = if base.crashed {
        vec![&base.full, &base.before_last]
    } else {
        vec![&base.full]
    };
    // Which models every answer so far agrees with.
    let mut agree = vec![true; models.len()];
    let mut wrong = |message: String| tally.wrong.push(format!("seed {seed} ({what}): {message}"));
    for tree in 0..TREES {
        for k in 0..1500u32 {
            let key = k.to_be_bytes().to_vec();
            match db.get(t[tree], &key) {
                Ok(got) => {
                    for (m, model) in models.iter().enumerate() {
                        agree[m] &= got.as_ref() == model[tree].get(&key);
                    }
                    if !agree.iter().any(|&a| a) {
                        wrong(format!(
                            "get tree {tree} key {k}: {:?} bytes",
                            got.map(|v| v.len())
                        ));
                        return Err("wrong data".into());
                    }
                    tally.correct_reads += 1;
                }
                Err(_) => tally.reads_with_errors += 1,
            }
        }
        if t[tree].is_hash() {
            // No scan: its entry count against the models' (the gets above
            // checked every key of the key space).
            match db.check_tree(t[tree]) {
                Ok((_, entries)) => {
                    for (m, model) in models.iter().enumerate() {
                        agree[m] &= entries == model[tree].len() as u64;
                    }
                    if !agree.iter().any(|&a| a) {
                        wrong(format!("hash tree {tree}: {entries} entries"));
                        return Err("wrong data".into());
                    }
                    tally.correct_reads += 1;
                }
                Err(_) => tally.reads_with_errors += 1,
            }
            continue;
        }
        let scanned: flashtree::Result<BTreeMap<Vec<u8>, Vec<u8>>> =
            db.range(t[tree], None, ScanDirection::Forward).collect();
        match scanned {
            Ok(entries) => {
                for (m, model) in models.iter().enumerate() {
                    agree[m] &= entries == model[tree];
                }
                if !agree.iter().any(|&a| a) {
                    wrong(format!("scan of tree {tree}: {} entries", entries.len()));
                    return Err("wrong data".into());
                }
                tally.correct_reads += 1;
            }
            Err(_) => tally.reads_with_errors += 1,
        }
    }
    let _ = db.check();
    let _ = db.close();
    Ok(what)
}

#[test]
fn damaged_files_give_errors_or_correct_data() {
    let bases = [build_base(false), build_base(true)];
    let (first, count) = match std::env::var("FLASHTREE_DAMAGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => (seed, 1),
        None => (
            std::env::var("FLASHTREE_DAMAGE_FIRST_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(rand::random::<u64>),
            std::env::var("FLASHTREE_DAMAGE_TRIALS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(300u64),
        ),
    };
    eprintln!("damage: seeds {first}..{}", first.wrapping_add(count));
    let current = Arc::new(AtomicU64::new(first));
    let done = Arc::new(AtomicBool::new(false));
    {
        let (current, done) = (current.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut last, mut stuck) = (u64::MAX, 0);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let now = current.load(Ordering::Relaxed);
                stuck = if now == last { stuck + 1 } else { 0 };
                last = now;
                if stuck > 60 {
                    eprintln!("damage: seed {now} hangs; replay: FLASHTREE_DAMAGE_SEED={now} cargo test --release -p flashtree --test damage -- --nocapture");
                    std::process::abort();
                }
            }
        });
    }
    let mut tally = Tally::default();
    let mut panics = Vec::new();
    for i in 0..count {
        let seed = first.wrapping_add(i);
        current.store(seed, Ordering::Relaxed);
        // Even seeds damage the cleanly closed store, odd ones the crashed one.
        let base = &bases[(seed % 2) as usize];
        let replay = format!(
            "FLASHTREE_DAMAGE_SEED={seed} cargo test --release -p flashtree --test damage -- --nocapture"
        );
        match std::panic::catch_unwind(AssertUnwindSafe(|| trial(base, seed, &mut tally))) {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => eprintln!("damage: {}; replay: {replay}", tally.wrong.last().unwrap()),
            Err(_) => {
                eprintln!("damage: seed {seed} panicked; replay: {replay}");
                panics.push(seed);
            }
        }
        if tally.wrong.len() + panics.len() >= 5 {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    eprintln!(
        "damage: {} trials, {} opens refused, {} reads with errors, {} correct reads, {} wrong data, {} panics, 0 hangs",
        tally.trials,
        tally.refused,
        tally.reads_with_errors,
        tally.correct_reads,
        tally.wrong.len(),
        panics.len()
    );
    assert!(
        tally.wrong.is_empty() && panics.is_empty(),
        "wrong data: {:?}; panics: {panics:?}",
        tally.wrong
    );
}
