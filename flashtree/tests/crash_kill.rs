//! Real crashes: a child process commits random batches with
//! `Durability::Sync` and reports each acknowledged one; the parent kills
//! it with SIGKILL at a random moment, reopens the store and checks that
//! the store holds exactly the batches before some point that is not before
//! the last acknowledged one (all of a batch or none of it), then lets the
//! next child go on from there. The last of the trees is a hash tree
//! (`Db::hash_tree`), and batches mix it with the B+-trees. Each child
//! writes its log one of the three
//! ways (`LogWrites::Auto`, `Inline` or `Channel`), picked at random per
//! kill. After every [`COMPACT_EVERY`]th batch the child compacts one of
//! the B+-trees (`Db::compact`, in turn), right after reporting the batch:
//! the parent kills as soon as it reads a report, so some kills land in
//! the middle of a compaction (its moves logged, not synced).
//!
//! The same series runs on a store on two loop devices (RAID0, regions
//! for its logs and checkpoint slots) when the tests run as root; without
//! root it prints why it skips.
//!
//! `cargo test` runs 20 kills (10 on the loop devices). A long series:
//! `FLASHTREE_KILLS=1000 cargo test --release -p flashtree --test crash_kill -- --nocapture`
//! (`FLASHTREE_KILL_SEED` picks the seed; a failure prints the command that
//! replays its series).

use flashtree::db::{Db, LogWrites, Options, Tree, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
#[path = "common/loops.rs"]
mod loops;

const CHILD_ENV: &str = "FLASHTREE_KILL_CHILD";
/// Trees of the store: B+-trees `t0`, `t1`, `t2` and the hash tree `h3`.
const TREES: usize = 4;
const KEYS: u32 = 3000;
/// The child compacts a B+-tree after every this many batches.
const COMPACT_EVERY: u64 = 6;

fn options() -> Options {
    Options {
        pool_bytes: 64 * 4096,
        workers: 2,
        wal_bytes_per_worker: 2 << 20,
        checkpoint_log_bytes: 256 << 10,
        ..Options::default()
    }
}

/// The model: per tree, key → value.
type Model = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;

/// One entry of batch `n` of series `seed`: (tree, key, value or delete).
fn batch_entries(seed: u64, n: u64) -> Vec<(usize, Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = StdRng::seed_from_u64(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let count = rng.random_range(1..=8);
    (0..count)
        .map(|_| {
            let tree = rng.random_range(0..TREES);
            let key = rng.random_range(0..KEYS).to_be_bytes().to_vec();
            let value = rng.random_bool(0.75).then(|| {
                let len = rng.random_range(0..200);
                let mut v = n.to_le_bytes().to_vec();
                v.extend((0..len).map(|i| (i as u8) ^ (n as u8)));
                v
            });
            (tree, key, value)
        })
        .collect()
}

fn apply(model: &mut Model, seed: u64, n: u64) {
    for (tree, key, value) in batch_entries(seed, n) {
        match value {
            Some(v) => {
                model[tree].insert(key, v);
            }
            None => {
                model[tree].remove(&key);
            }
        }
    }
}

fn trees(db: &Db) -> Vec<Tree> {
    common::trees_with_hash(db, TREES).unwrap()
}

/// Every tree's contents (a hash tree's by a lookup of every key the
/// batches use: it has no ordered scan).
fn contents(db: &Db) -> Model {
    common::contents_probing(db, &trees(db), KEYS).unwrap()
}

/// Opens the store at `target`: a directory, or block devices joined
/// by `+` (created only with `create`).
fn open(target: &str, options: Options, create: bool) -> flashtree::Result<Db> {
    if target.starts_with("/dev/") {
        let devices: Vec<PathBuf> = target.split('+').map(PathBuf::from).collect();
        let options = Options {
            create_on_block_devices: create,
            ..options
        };
        return Db::open_devices(&devices, options);
    }
    Db::open(Path::new(target), options)
}

/// The child: commits batches `from..` until it is killed.
fn child(target: &str, seed: u64, from: u64, log_writes: LogWrites) {
    let options = Options {
        log_writes,
        ..options()
    };
    let db = open(target, options, false).unwrap();
    let trees = trees(&db);
    for n in from.. {
        let mut batch = WriteBatch::new();
        for (tree, key, value) in batch_entries(seed, n) {
            match value {
                Some(v) => batch.put(trees[tree], &key, &v).unwrap(),
                None => batch.delete(trees[tree], &key).unwrap(),
            }
        }
        db.write(&batch, WriteOptions::default()).unwrap();
        println!("ACK {n}");
        if (n + 1) % COMPACT_EVERY == 0 {
            // The B+-trees in turn (the last tree, a hash tree, has no key
            // order: `Db::compact` refuses it).
            let tree = trees[((n / COMPACT_EVERY) % (TREES as u64 - 1)) as usize];
            let stats = db.compact(tree).unwrap();
            println!("COMPACTED {n} {}", stats.leaves_moved);
        }
    }
}

/// The batch number and the leaves moved a `COMPACTED n leaves` line
/// reports.
fn compacted(line: &str) -> Option<(u64, u64)> {
    let (_, rest) = line.rsplit_once("COMPACTED ")?;
    let (n, leaves) = rest.trim().split_once(' ')?;
    Some((
        n.parse().expect("a batch number after COMPACTED"),
        leaves.parse().expect("a leaf count after COMPACTED n"),
    ))
}

/// The batch number an `ACK n` line reports (libtest may print its own
/// words in front of the child's first line).
fn acked(line: &str) -> Option<u64> {
    let (_, n) = line.rsplit_once("ACK ")?;
    Some(n.trim().parse().expect("a batch number after ACK"))
}

#[test]
fn killed_processes_lose_no_acknowledged_batch() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.split(',');
        let target = parts.next().unwrap().to_string();
        let seed: u64 = parts.next().unwrap().parse().unwrap();
        let from: u64 = parts.next().unwrap().parse().unwrap();
        let log_writes: LogWrites = parts.next().unwrap().parse().unwrap();
        child(&target, seed, from, log_writes);
        return;
    }
    let kills: u64 = std::env::var("FLASHTREE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    series(
        &dir.path().display().to_string(),
        kills,
        "crash_kill",
        false,
    );
}

#[test]
fn killed_processes_on_two_loop_devices_lose_no_acknowledged_batch() {
    let dir = tempfile::tempdir().unwrap();
    let devices = match loops::make(dir.path(), 2, 48 << 20) {
        Ok(devices) => devices,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let kills: u64 = std::env::var("FLASHTREE_DEVICE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let target: Vec<String> = devices
        .iter()
        .map(|d| d.path.display().to_string())
        .collect();
    series(
        &target.join("+"),
        kills,
        "crash_kill killed_processes_on_two_loop_devices",
        true,
    );
}

/// Kills `kills` children committing to the store at `target`, checking
/// the store after each.
fn series(target: &str, kills: u64, test: &str, devices: bool) {
    let seed: u64 = std::env::var("FLASHTREE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let kills_var = if devices {
        "FLASHTREE_DEVICE_KILLS"
    } else {
        "FLASHTREE_KILLS"
    };
    let (file, filter) = test.split_once(' ').unwrap_or((test, ""));
    let replay = format!(
        "{kills_var}={kills} FLASHTREE_KILL_SEED={seed} cargo test --release -p flashtree --test {file} -- --nocapture {filter}"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: Model = vec![BTreeMap::new(); TREES];
    // Batches below `next` are in the model (and in the store).
    let mut next = 0u64;
    // Create the store and its trees before the first child.
    let db = open(target, options(), true).unwrap();
    trees(&db);
    db.close().unwrap();
    let mut acked_total = 0u64;
    // Compactions the children reported done, and the leaves they moved.
    let (mut compactions, mut leaves_moved) = (0u64, 0u64);
    // Kills that landed in a compaction (or right before it began).
    let mut kills_in_compaction = 0u64;
    for kill in 0..kills {
        let log_writes =
            [LogWrites::Auto, LogWrites::Inline, LogWrites::Channel][rng.random_range(0..3)];
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "killed_processes_lose_no_acknowledged_batch",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!("{target},{seed},{next},{}", log_writes.name()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let wait_for = rng.random_range(0..40u64);
        let mut last_acked: Option<u64> = None;
        let mut last_compacted: Option<u64> = None;
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Kill after `wait_for` acknowledgements (or when the child ends).
        let mut seen = 0;
        while seen < wait_for {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some((n, leaves)) = compacted(&line) {
                        compactions += 1;
                        leaves_moved += leaves;
                        last_compacted = Some(n);
                    } else if let Some(n) = acked(&line) {
                        last_acked = Some(n);
                        seen += 1;
                    }
                }
                _ => break,
            }
        }
        child.kill().unwrap();
        // Acknowledgements printed before the kill still count.
        for line in lines.map_while(|l| l.ok()) {
            if let Some((n, leaves)) = compacted(&line) {
                compactions += 1;
                leaves_moved += leaves;
                last_compacted = Some(n);
            } else if let Some(n) = acked(&line) {
                last_acked = Some(n);
            }
        }
        // Killed after a batch that a compaction follows, before the
        // compaction reported: in the middle of it (or just before it).
        if last_acked.is_some_and(|n| (n + 1) % COMPACT_EVERY == 0 && last_compacted != last_acked)
        {
            kills_in_compaction += 1;
        }
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "kill {kill}: the child ended by itself: {status}; replay: {replay}"
        );
        let db = open(target, options(), false)
            .unwrap_or_else(|e| panic!("kill {kill}: reopen failed: {e}; replay: {replay}"));
        let found = contents(&db);
        // The store holds batches below some k >= last acknowledged + 1.
        let must_reach = last_acked.map_or(next, |n| n + 1);
        while next < must_reach {
            apply(&mut model, seed, next);
            next += 1;
        }
        if found != model {
            // The batch after the last acknowledged one may be there too.
            let mut with_next = model.clone();
            apply(&mut with_next, seed, next);
            assert!(
                found == with_next,
                "kill {kill}: the store after recovery is not the state after batch {} or {} (last acknowledged: {last_acked:?}); replay: {replay}",
                next.wrapping_sub(1),
                next
            );
            model = with_next;
            next += 1;
        }
        acked_total += last_acked.map_or(0, |n| n + 1).saturating_sub(acked_total);
        for t in trees(&db) {
            db.check_tree(t)
                .unwrap_or_else(|e| panic!("kill {kill}: tree check: {e}; replay: {replay}"));
        }
        db.close().unwrap();
    }
    eprintln!(
        "{kills} kills of a store on {target}, {next} batches in the store, {acked_total} acknowledged, {compactions} compactions done ({leaves_moved} leaves moved), {kills_in_compaction} kills during a compaction (seed {seed})"
    );
}
