//! Concurrency tests: many tasks on 2 workers (`Db::run`) inserting,
//! deleting and scanning with a tiny pool, on disjoint and on overlapping key
//! ranges; the blocking API from several OS threads at once; `multi_get`;
//! and the futures of `get_async`/`put_async` driven by a hand-written
//! `block_on` (a foreign runtime).
//!
//! Tasks never panic (a panic would take down a worker thread); they record
//! what went wrong in a shared list that the test checks afterwards.

use flashtree::db::{Db, Options, ScanDirection, Tree, TreeShape};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

fn tiny(workers: usize, pages: u64) -> Options {
    Options {
        pool_bytes: pages * 4096,
        workers,
        wal_bytes_per_worker: 4 << 20,
        checkpoint_log_bytes: 1 << 20,
        ..Options::default()
    }
}

/// Shared list of failures seen inside tasks.
#[derive(Clone, Default)]
struct Failures(Arc<Mutex<Vec<String>>>);

impl Failures {
    fn add(&self, what: String) {
        let mut list = self.0.lock().unwrap();
        if list.len() < 20 {
            list.push(what);
        }
    }

    fn assert_none(&self) {
        let list = self.0.lock().unwrap();
        assert!(list.is_empty(), "failures in tasks:\n{}", list.join("\n"));
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key `i` of the range owned by `owner`: 2-byte owner, then a long shared
/// middle, then the index, so that prefix truncation is exercised too.
fn owned_key(owner: u64, i: u64) -> Vec<u8> {
    let mut key = (owner as u16).to_be_bytes().to_vec();
    key.extend_from_slice(&[b'-'; 20]);
    key.extend_from_slice(&(i as u32).to_be_bytes());
    key
}

/// A value that says who wrote it and for which key, so that any surviving
/// value can be traced to a write; its length varies with the writer.
fn value_for(key: &[u8], writer: u64, round: u64) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.extend_from_slice(key);
    v.extend_from_slice(&writer.to_be_bytes());
    v.extend_from_slice(&round.to_be_bytes());
    let pad = (splitmix(writer ^ (round << 32)) % 300) as usize;
    v.extend(std::iter::repeat_n(writer as u8, pad));
    v
}

/// The (writer, round) a value claims, if it is well formed for `key`.
fn parse_value(key: &[u8], v: &[u8]) -> Option<(u64, u64)> {
    let n = u16::from_be_bytes(v.get(..2)?.try_into().ok()?) as usize;
    if v.get(2..2 + n)? != key {
        return None;
    }
    let writer = u64::from_be_bytes(v.get(2 + n..10 + n)?.try_into().ok()?);
    let round = u64::from_be_bytes(v.get(10 + n..18 + n)?.try_into().ok()?);
    (v == value_for(key, writer, round).as_slice()).then_some((writer, round))
}

/// Everything in `tree`, by a forward scan, checking strict key order.
fn scan_all(db: &Db, tree: Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut previous: Option<Vec<u8>> = None;
    for entry in db.range(tree, None, ScanDirection::Forward) {
        let (k, v) = entry.expect("scan");
        if let Some(p) = &previous {
            assert!(p < &k, "scan out of order: {p:?} then {k:?}");
        }
        previous = Some(k.clone());
        out.insert(k, v);
    }
    out
}

/// Each task owns a key range: it inserts in a scrambled order, deletes
/// some, overwrites some, and checks its range exactly by point lookups and
/// by scans in both directions while the other tasks change their ranges.
fn disjoint_ranges(tasks_per_worker: usize, keys_per_task: u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 32)).unwrap();
    let tree = db.tree("disjoint").unwrap();
    let failures = Failures::default();
    let f = failures.clone();
    db.run(tasks_per_worker, move |ctx| {
        let f = f.clone();
        async move {
            let owner = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            let n = keys_per_task;
            let mut expected: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            // Insert in a scrambled order (7919 is prime, n is not a multiple).
            for j in 0..n {
                let i = (j * 7919) % n;
                let key = owned_key(owner, i);
                let value = value_for(&key, owner, 0);
                if let Err(e) = ctx.put(tree, &key, &value).await {
                    return f.add(format!("task {owner}: put: {e}"));
                }
                expected.insert(key, value);
            }
            // Delete two thirds, overwrite every 5th of the rest.
            for i in 0..n {
                let key = owned_key(owner, i);
                if i % 3 != 0 {
                    match ctx.delete(tree, &key).await {
                        Ok(true) => {
                            expected.remove(&key);
                        }
                        Ok(false) => f.add(format!("task {owner}: delete of {i} found nothing")),
                        Err(e) => return f.add(format!("task {owner}: delete: {e}")),
                    }
                } else if i % 5 == 0 {
                    let value = value_for(&key, owner, 1);
                    if let Err(e) = ctx.put(tree, &key, &value).await {
                        return f.add(format!("task {owner}: overwrite: {e}"));
                    }
                    expected.insert(key, value);
                }
            }
            // Point lookups of every key, present or not.
            let mut value = Vec::new();
            for i in 0..n {
                let key = owned_key(owner, i);
                match ctx.get(tree, &key, &mut value).await {
                    Ok(found) => {
                        let want = expected.get(&key);
                        if found != want.is_some() || (found && Some(&value) != want) {
                            f.add(format!("task {owner}: get {i}: found {found}"));
                        }
                    }
                    Err(e) => return f.add(format!("task {owner}: get: {e}")),
                }
            }
            // Scans of the own range, both ways.
            let first = owned_key(owner, 0);
            let last = owned_key(owner, u64::from(u32::MAX));
            let mut forward = Vec::new();
            let scanned = ctx
                .scan(tree, &first, ScanDirection::Forward, |k, v| {
                    if k > last.as_slice() {
                        return false;
                    }
                    forward.push((k.to_vec(), v.to_vec()));
                    true
                })
                .await;
            let mut backward = Vec::new();
            let scanned_back = ctx
                .scan(tree, &last, ScanDirection::Backward, |k, v| {
                    if k < first.as_slice() {
                        return false;
                    }
                    backward.push((k.to_vec(), v.to_vec()));
                    true
                })
                .await;
            if let Err(e) = scanned.and(scanned_back) {
                return f.add(format!("task {owner}: scan: {e}"));
            }
            let want: Vec<(Vec<u8>, Vec<u8>)> = expected.into_iter().collect();
            if forward != want {
                f.add(format!(
                    "task {owner}: forward scan gave {} entries, want {}",
                    forward.len(),
                    want.len()
                ));
            }
            backward.reverse();
            if backward != want {
                f.add(format!(
                    "task {owner}: backward scan gave {} entries, want {}",
                    backward.len(),
                    want.len()
                ));
            }
        }
    })
    .unwrap();
    failures.assert_none();
    // The whole tree is what the tasks' operations imply.
    let tasks = 2 * tasks_per_worker as u64;
    let mut want = BTreeMap::new();
    for owner in 0..tasks {
        for i in (0..keys_per_task).filter(|i| i % 3 == 0) {
            let key = owned_key(owner, i);
            let round = u64::from(i % 5 == 0);
            let value = value_for(&key, owner, round);
            want.insert(key, value);
        }
    }
    let (_, entries) = db.check_tree(tree).unwrap();
    assert_eq!(entries, want.len() as u64);
    assert!(scan_all(&db, tree) == want, "final contents differ");
    assert!(db.stats().page_reads > 0, "a 32-page pool must miss");
    db.close().unwrap();
    // And after reopening.
    let db = Db::open(dir.path(), tiny(2, 16)).unwrap();
    let tree = db.tree("disjoint").unwrap();
    assert_eq!(db.check_tree(tree).unwrap().1, want.len() as u64);
    assert!(scan_all(&db, tree) == want, "contents after reopen differ");
}

#[test]
fn disjoint_ranges_8_tasks_per_worker() {
    disjoint_ranges(8, 400);
}

#[test]
fn disjoint_ranges_64_tasks_per_worker() {
    disjoint_ranges(64, 60);
}

/// Runs `tasks_per_worker` tasks on each worker; task `owner` puts
/// `entry(owner, i)` for i in 0..per_task, in that order.
fn put_owned_ranges(
    db: &Db,
    tree: Tree,
    tasks_per_worker: usize,
    per_task: u64,
    entry: impl Fn(u64, u64) -> (Vec<u8>, Vec<u8>) + Send + Sync + Clone + 'static,
) -> Failures {
    let failures = Failures::default();
    let f = failures.clone();
    db.run(tasks_per_worker, move |ctx| {
        let (f, entry) = (f.clone(), entry.clone());
        async move {
            let owner = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            for i in 0..per_task {
                let (key, value) = entry(owner, i);
                if let Err(e) = ctx.put(tree, &key, &value).await {
                    return f.add(format!("task {owner}: put: {e}"));
                }
            }
        }
    })
    .unwrap();
    failures
}

/// Tasks that each insert their own key range in ascending order (how a
/// parallel loader fills a store) leave leaves nearly full, as one
/// ascending loader does, instead of half full: the leaf at a task's
/// frontier also holds the first keys of the next range, and the split
/// there keeps the run on the left.
#[test]
fn parallel_ascending_loaders_fill_leaves() {
    let load = |tasks_per_worker: usize| -> u64 {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), tiny(2, 256)).unwrap();
        let tree = db.tree("t").unwrap();
        let keys_per_task = 40_000 / (2 * tasks_per_worker as u64);
        let entry = move |owner: u64, i: u64| {
            let key = (owner * keys_per_task + i).to_be_bytes().to_vec();
            (key, vec![5u8; 120])
        };
        put_owned_ranges(&db, tree, tasks_per_worker, keys_per_task, entry).assert_none();
        let (nodes, entries) = db.check_tree(tree).unwrap();
        assert_eq!(entries, 40_000);
        nodes
    };
    let one_loader = load(1);
    let many_loaders = load(32);
    // 40 000 entries of 138 bytes need ~1 400 full pages; half-full leaves
    // would need ~2 800.
    assert!(
        many_loaders * 10 <= one_loader * 12,
        "64 parallel loaders made {many_loaders} nodes, 2 made {one_loader}"
    );
}

/// Loads `tables` trees at once, each task its own ascending key range in
/// every tree, putting one entry into each tree in turn (how a loader
/// writes a row and then its index entries). Returns each tree's shape.
fn load_interleaved(tasks_per_worker: usize, tables: usize, total: u64) -> Vec<TreeShape> {
    let dir = tempfile::tempdir().unwrap();
    // A bulk load of 120,000 rows checks page fill, not the log: unlogged.
    let options = Options {
        durability: flashtree::db::Durability::None,
        ..tiny(2, 256)
    };
    let db = Db::open(dir.path(), options).unwrap();
    let trees: Vec<Tree> = (0..tables)
        .map(|t| db.tree(&format!("t{t}")).unwrap())
        .collect();
    let per_task = total / (2 * tasks_per_worker as u64);
    let failures = Failures::default();
    let (f, t) = (failures.clone(), trees.clone());
    db.run(tasks_per_worker, move |ctx| {
        let (f, trees) = (f.clone(), t.clone());
        async move {
            let owner = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            for i in 0..per_task {
                let key = (owner * per_task + i).to_be_bytes();
                for tree in &trees {
                    if let Err(e) = ctx.put(*tree, &key, &[5u8; 120]).await {
                        return f.add(format!("task {owner}: put: {e}"));
                    }
                }
            }
        }
    })
    .unwrap();
    failures.assert_none();
    trees
        .iter()
        .map(|tree| {
            let shape = db.check_tree_shape(*tree).unwrap();
            assert_eq!(shape.entries, per_task * 2 * tasks_per_worker as u64);
            shape
        })
        .collect()
}

/// Parallel loaders that write several trees in turn fill the leaves of
/// each as a loader of one tree does, and the inner nodes too: splits
/// recognise a task's run per tree, at every level.
#[test]
fn parallel_loaders_of_several_trees_fill_leaves_and_inner_nodes() {
    let one_tree = load_interleaved(4, 1, 120_000)[0];
    let three_trees = load_interleaved(4, 3, 120_000);
    // 120 000 entries of 138 bytes fill ~4 200 leaves. Half-full leaves
    // (a split that misses the run) would make ~6 000.
    for shape in &three_trees {
        assert!(
            shape.leaves * 10 <= one_tree.leaves * 11,
            "interleaved trees: {shape:?}, one tree: {one_tree:?}"
        );
    }
    // Inner nodes filled by runs hold 123-135 children here (a split
    // strips the fences' common prefix, which frees space that no later
    // insert uses); half splits at the loaders' frontiers leave 99-110.
    for shape in three_trees.iter().chain([&one_tree]) {
        assert!(
            shape.inner_nodes * 115 <= shape.leaves,
            "inner nodes hold {} children on average: {shape:?}",
            shape.leaves / shape.inner_nodes.max(1)
        );
    }
}

/// What the tasks of the overlapping test did to each key.
#[derive(Default)]
struct Journal {
    /// Every value written per key.
    written: HashMap<Vec<u8>, BTreeSet<Vec<u8>>>,
    /// Keys some task deleted (or tried to).
    deleted: BTreeSet<Vec<u8>>,
}

fn shared_key(i: u64) -> Vec<u8> {
    let mut key = b"shared/".to_vec();
    key.extend_from_slice(&(i as u32).to_be_bytes());
    key
}

/// All tasks work on one key range: puts, deletes, point lookups and scans
/// interleave on the same leaves. Afterwards the tree passes the checker,
/// every surviving key holds a value some task wrote for it, and every key
/// that was written and never deleted is present.
fn overlapping_ranges(tasks_per_worker: usize, ops_per_task: u64, key_space: u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 32)).unwrap();
    let tree = db.tree("shared").unwrap();
    let failures = Failures::default();
    let journal = Arc::new(Mutex::new(Journal::default()));
    let (f, j) = (failures.clone(), journal.clone());
    db.run(tasks_per_worker, move |ctx| {
        let (f, j) = (f.clone(), j.clone());
        async move {
            let me = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            let mut rng = splitmix(me + 1);
            let mut value = Vec::new();
            for round in 0..ops_per_task {
                rng = splitmix(rng);
                let key = shared_key(rng % key_space);
                match (rng >> 32) % 10 {
                    0..=4 => {
                        let v = value_for(&key, me, round);
                        // Journal before the put: a concurrent reader may see it.
                        j.lock()
                            .unwrap()
                            .written
                            .entry(key.clone())
                            .or_default()
                            .insert(v.clone());
                        if let Err(e) = ctx.put(tree, &key, &v).await {
                            return f.add(format!("task {me}: put: {e}"));
                        }
                    }
                    5..=6 => {
                        j.lock().unwrap().deleted.insert(key.clone());
                        if let Err(e) = ctx.delete(tree, &key).await {
                            return f.add(format!("task {me}: delete: {e}"));
                        }
                    }
                    7..=8 => match ctx.get(tree, &key, &mut value).await {
                        Ok(true) if parse_value(&key, &value).is_none() => {
                            f.add(format!("task {me}: get {key:?}: malformed value"))
                        }
                        Ok(_) => {}
                        Err(e) => return f.add(format!("task {me}: get: {e}")),
                    },
                    _ => {
                        let backward = rng & 1 == 1;
                        let direction = if backward {
                            ScanDirection::Backward
                        } else {
                            ScanDirection::Forward
                        };
                        let mut previous: Option<Vec<u8>> = None;
                        let mut seen = 0;
                        let mut problem = None;
                        let scanned = ctx
                            .scan(tree, &key, direction, |k, v| {
                                let in_order = match &previous {
                                    None => {
                                        if backward {
                                            k <= key.as_slice()
                                        } else {
                                            k >= key.as_slice()
                                        }
                                    }
                                    Some(p) => {
                                        if backward {
                                            k < p.as_slice()
                                        } else {
                                            k > p.as_slice()
                                        }
                                    }
                                };
                                if !in_order {
                                    problem = Some(format!("out of order at {k:?}"));
                                    return false;
                                }
                                if parse_value(k, v).is_none() {
                                    problem = Some(format!("malformed value at {k:?}"));
                                    return false;
                                }
                                previous = Some(k.to_vec());
                                seen += 1;
                                seen < 100
                            })
                            .await;
                        if let Err(e) = scanned {
                            return f.add(format!("task {me}: scan: {e}"));
                        }
                        if let Some(p) = problem {
                            f.add(format!(
                                "task {me}: scan from {key:?} (backward {backward}): {p}"
                            ));
                        }
                    }
                }
            }
        }
    })
    .unwrap();
    failures.assert_none();
    db.check_tree(tree).unwrap();
    let contents = scan_all(&db, tree);
    let journal = journal.lock().unwrap();
    for (k, v) in &contents {
        let written = journal.written.get(k);
        assert!(
            written.is_some_and(|w| w.contains(v)),
            "key {k:?} holds a value no task wrote for it"
        );
    }
    for k in journal.written.keys() {
        if !journal.deleted.contains(k) {
            assert!(
                contents.contains_key(k),
                "key {k:?} was written, never deleted, and is gone"
            );
        }
    }
    // Point lookups agree with the scan.
    let keys: Vec<Vec<u8>> = (0..key_space).map(shared_key).collect();
    let got = db.multi_get(tree, &keys).unwrap();
    for (k, v) in keys.iter().zip(got) {
        assert_eq!(v.as_ref(), contents.get(k), "multi_get of {k:?}");
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), tiny(1, 16)).unwrap();
    let tree = db.tree("shared").unwrap();
    db.check_tree(tree).unwrap();
    assert!(
        scan_all(&db, tree) == contents,
        "contents after reopen differ"
    );
}

#[test]
fn overlapping_ranges_16_tasks_per_worker() {
    overlapping_ranges(16, 400, 3000);
}

#[test]
fn overlapping_ranges_64_tasks_per_worker_hot_keys() {
    // Few keys: many tasks hit the same leaves; deletes empty leaves often.
    overlapping_ranges(64, 150, 400);
}

/// Inserts then deletes everything from many tasks at once, so that merges
/// (and root collapses) race with each other and with scans.
#[test]
fn concurrent_shrink_to_empty() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 32)).unwrap();
    let tree = db.tree("shrink").unwrap();
    // 8 tasks per worker: with 32 or more, tasks on a 16-frame worker evict
    // each other's pages so often that the optional merges (bounded
    // restarts, see `TaskCtx::delete`) mostly give up.
    let tasks_per_worker = 8;
    let per_task = 600u64;
    let failures = put_owned_ranges(&db, tree, tasks_per_worker, per_task, |owner, i| {
        let key = owned_key(owner, i);
        let value = value_for(&key, owner, 0);
        (key, value)
    });
    failures.assert_none();
    let (nodes_full, entries) = db.check_tree(tree).unwrap();
    assert_eq!(entries, 2 * tasks_per_worker as u64 * per_task);
    let f = failures.clone();
    db.run(tasks_per_worker, move |ctx| {
        let f = f.clone();
        async move {
            let owner = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            for i in 0..per_task {
                let key = owned_key(owner, i);
                match ctx.delete(tree, &key).await {
                    Ok(true) => {}
                    Ok(false) => f.add(format!("task {owner}: key {i} missing")),
                    Err(e) => return f.add(format!("delete: {e}")),
                }
                // A scan of the neighbour's range, racing with its deletes.
                let start = owned_key(owner + 1, 0);
                let mut previous: Option<Vec<u8>> = None;
                let mut seen = 0;
                let scanned = ctx
                    .scan(tree, &start, ScanDirection::Forward, |k, _| {
                        if previous.as_deref().is_some_and(|p| p >= k) {
                            f.add(format!("scan out of order at {k:?}"));
                            return false;
                        }
                        previous = Some(k.to_vec());
                        seen += 1;
                        seen < 20
                    })
                    .await;
                if let Err(e) = scanned {
                    return f.add(format!("scan: {e}"));
                }
            }
        }
    })
    .unwrap();
    failures.assert_none();
    let (nodes_empty, entries) = db.check_tree(tree).unwrap();
    assert_eq!(entries, 0);
    assert!(scan_all(&db, tree).is_empty());
    // Merges must happen even though a 32-page pool rarely holds the
    // neighbour of a leaf: an emptied tree is a handful of nodes, not the
    // full tree's skeleton of empty leaves.
    assert!(
        nodes_empty * 10 <= nodes_full,
        "deleting everything must shrink the tree ({nodes_empty} of {nodes_full} nodes left)"
    );
}

/// The blocking API from several OS threads at once: each thread owns a
/// range (exact checks), and all threads also overwrite one shared key set.
#[test]
fn blocking_api_from_many_threads() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), tiny(2, 32)).unwrap());
    let tree = db.tree("threads").unwrap();
    let threads = 6u64;
    let per_thread = 500u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let key = owned_key(t, i);
                    db.put(tree, &key, &value_for(&key, t, 0)).unwrap();
                    let shared = shared_key(i % 50);
                    db.put(tree, &shared, &value_for(&shared, t, i)).unwrap();
                }
                for i in (0..per_thread).filter(|i| i % 2 == 1) {
                    assert!(db.delete(tree, &owned_key(t, i)).unwrap());
                }
                for i in 0..per_thread {
                    let key = owned_key(t, i);
                    let got = db.get(tree, &key).unwrap();
                    let want = (i % 2 == 0).then(|| value_for(&key, t, 0));
                    assert_eq!(got, want, "thread {t} key {i}");
                }
                let mine: Vec<Vec<u8>> = db
                    .range(tree, Some(&owned_key(t, 0)), ScanDirection::Forward)
                    .map(|r| r.unwrap().0)
                    .take_while(|k| k[..2] == (t as u16).to_be_bytes())
                    .collect();
                let want: Vec<Vec<u8>> = (0..per_thread)
                    .filter(|i| i % 2 == 0)
                    .map(|i| owned_key(t, i))
                    .collect();
                assert_eq!(mine, want, "thread {t} range");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let (_, entries) = db.check_tree(tree).unwrap();
    assert_eq!(entries, threads * per_thread / 2 + 50);
    for i in 0..50 {
        let key = shared_key(i);
        let v = db.get(tree, &key).unwrap().expect("shared key present");
        let (writer, round) = parse_value(&key, &v).expect("well-formed shared value");
        assert!(
            writer < threads && round % 50 == i,
            "shared key {i}: ({writer}, {round})"
        );
    }
    Arc::try_unwrap(db)
        .ok()
        .expect("sole owner")
        .close()
        .unwrap();
}

/// Lookups on the calling thread (pages in memory, optimistic latches)
/// while other threads keep rewriting, splitting and merging the same
/// leaves: every value read is one that was written whole for its key.
#[test]
fn lookups_on_calling_threads_see_whole_values_during_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), tiny(2, 64)).unwrap());
    let tree = db.tree("readers").unwrap();
    let keys: Vec<Vec<u8>> = (0..400).map(shared_key).collect();
    for key in &keys {
        db.put(tree, key, &value_for(key, 0, 0)).unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (1..3u64)
        .map(|w| {
            let (db, keys) = (db.clone(), keys.clone());
            std::thread::spawn(move || {
                for round in 1..40u64 {
                    for key in &keys {
                        // Values of changing lengths (0 to 300 bytes of
                        // padding) move entries and split and merge leaves.
                        db.put(tree, key, &value_for(key, w, round)).unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, keys, stop) = (db.clone(), keys.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut lookups = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (i, key) in keys.iter().enumerate().skip(r) {
                        let v = db.get(tree, key).unwrap().expect("key present");
                        assert!(parse_value(key, &v).is_some(), "torn value of key {i}");
                        lookups += 1;
                    }
                    for (key, v) in keys.iter().zip(db.multi_get(tree, &keys).unwrap()) {
                        let v = v.expect("key present");
                        assert!(parse_value(key, &v).is_some(), "torn value in multi_get");
                    }
                }
                lookups
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    Arc::try_unwrap(db)
        .ok()
        .expect("sole owner")
        .close()
        .unwrap();
}

/// Task lookups in a tree of more leaves than a yield threshold (1,024
/// nodes), so that the interleaved descent yields into the leaves and,
/// having found the key's slot, yields again while the value's lines
/// arrive. During those yields a writer task on the same worker inserts a
/// key right in front of each reader's key and deletes the one it put
/// there before, so the reader's slot moves under it: every value read is
/// still its key's. (Each key is looked up once, so that no lookup is
/// answered from a leaf hint without a descent.)
#[test]
fn task_lookups_that_yield_in_leaves_see_their_own_values_during_writes() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        durability: flashtree::db::Durability::None,
        ..tiny(1, 8192)
    };
    let db = Db::open(dir.path(), options).unwrap();
    let tree = db.tree("yields").unwrap();
    // Loaded: the even keys, each with itself padded to 100 bytes (at most
    // 36 entries to a leaf). The writer puts and deletes odd keys.
    const LOADED: u64 = 48_000;
    fn loaded_value(key: &[u8]) -> Vec<u8> {
        let mut value = key.to_vec();
        value.resize(100, 0xAB);
        value
    }
    db.run(8, move |ctx| async move {
        let me = ctx.task_index() as u64;
        for i in (me..LOADED).step_by(8) {
            let key = shared_key(2 * i);
            ctx.put(tree, &key, &loaded_value(&key)).await.unwrap();
        }
    })
    .unwrap();
    let shape = db.check_tree_shape(tree).unwrap();
    assert!(
        shape.leaves > 1_100,
        "{shape:?}: too few leaves to yield into"
    );
    const READERS: usize = 31;
    const LOOKUPS_PER_READER: u64 = 1_200;
    let reading: Arc<Vec<AtomicU64>> =
        Arc::new((0..READERS).map(|_| AtomicU64::new(u64::MAX)).collect());
    let readers_done = Arc::new(AtomicUsize::new(0));
    let failures = Failures::default();
    let f = failures.clone();
    db.run(READERS + 1, move |ctx| {
        let (f, reading, readers_done) = (f.clone(), reading.clone(), readers_done.clone());
        async move {
            let me = ctx.task_index();
            if me == READERS {
                // The writer: one odd key in front of each reader's key.
                let mut put_before: Vec<Option<u64>> = vec![None; READERS];
                let mut round = 0u64;
                while readers_done.load(Relaxed) < READERS {
                    round += 1;
                    for (r, slot) in put_before.iter_mut().enumerate() {
                        let i = reading[r].load(Relaxed);
                        if i == u64::MAX || *slot == Some(i) {
                            continue;
                        }
                        let key = shared_key(2 * i - 1);
                        let value = value_for(&key, r as u64, round);
                        if let Err(e) = ctx.put(tree, &key, &value).await {
                            return f.add(format!("writer: put: {e}"));
                        }
                        if let Some(before) = slot.replace(i) {
                            if let Err(e) = ctx.delete(tree, &shared_key(2 * before - 1)).await {
                                return f.add(format!("writer: delete: {e}"));
                            }
                        }
                    }
                    flashtree::sched::yield_now().await;
                }
                return;
            }
            let mut value = Vec::new();
            for j in 0..LOOKUPS_PER_READER {
                // Distinct keys across readers and lookups, none the first.
                let i = 1 + me as u64 + READERS as u64 * j;
                let key = shared_key(2 * i);
                reading[me].store(i, Relaxed);
                match ctx.get(tree, &key, &mut value).await {
                    Ok(true) if value == loaded_value(&key) => {}
                    Ok(true) => {
                        f.add(format!("reader {me}: {key:?}: another value {value:?}"));
                        break;
                    }
                    Ok(false) => {
                        f.add(format!("reader {me}: {key:?} missing"));
                        break;
                    }
                    Err(e) => {
                        f.add(format!("reader {me}: get: {e}"));
                        break;
                    }
                }
            }
            readers_done.fetch_add(1, Relaxed);
        }
    })
    .unwrap();
    failures.assert_none();
    db.check().unwrap();
    db.close().unwrap();
}

#[test]
fn multi_get_keeps_order_and_reports_absent_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 16)).unwrap();
    let tree = db.tree("mg").unwrap();
    for i in (0..3000u64).filter(|i| i % 3 != 1) {
        let key = owned_key(1, i);
        db.put(tree, &key, &value_for(&key, 1, i)).unwrap();
    }
    // Scrambled order, absent keys and duplicates.
    let ids: Vec<u64> = (0..4000u64).map(|j| (j * 2903) % 3100).collect();
    let keys: Vec<Vec<u8>> = ids.iter().map(|&i| owned_key(1, i)).collect();
    let got = db.multi_get(tree, &keys).unwrap();
    assert_eq!(got.len(), keys.len());
    for ((i, key), v) in ids.iter().zip(&keys).zip(&got) {
        let want = (*i < 3000 && i % 3 != 1).then(|| value_for(key, 1, *i));
        assert_eq!(v, &want, "multi_get of key {i}");
    }
    assert_eq!(
        db.multi_get::<Vec<u8>>(tree, &[]).unwrap(),
        Vec::<Option<Vec<u8>>>::new()
    );
    // One bad key fails the whole call with a clear error, no panic.
    let err = db
        .multi_get(tree, &[owned_key(1, 0), Vec::new()])
        .unwrap_err();
    assert!(err.to_string().contains("empty key"), "{err}");
}

/// A minimal executor: polls one future on this thread, parking between
/// polls until its waker is called.
fn block_on<F: Future>(future: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Polls all futures until every one is ready (a hand-written join_all).
async fn join_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match std::pin::Pin::new(f).poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(outputs.iter_mut().map(|o| o.take().unwrap()).collect())
        }
    })
    .await
}

#[test]
fn async_api_from_a_foreign_executor() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 16)).unwrap();
    let tree = db.tree("async").unwrap();
    let n = 2000u64;
    // Many puts in flight at once, awaited together.
    let puts: Vec<_> = (0..n)
        .map(|i| {
            let key = owned_key(2, i);
            db.put_async(tree, &key, &value_for(&key, 2, i)).unwrap()
        })
        .collect();
    for r in block_on(join_all(puts)) {
        r.unwrap();
    }
    // One at a time, then many at once.
    for i in (0..n).step_by(37) {
        let key = owned_key(2, i);
        let got = block_on(db.get_async(tree, &key).unwrap()).unwrap();
        assert_eq!(got, Some(value_for(&key, 2, i)));
    }
    let gets: Vec<_> = (0..n + 100)
        .map(|i| db.get_async(tree, &owned_key(2, i)).unwrap())
        .collect();
    for (i, got) in block_on(join_all(gets)).into_iter().enumerate() {
        let key = owned_key(2, i as u64);
        let want = (i as u64) < n;
        assert_eq!(got.unwrap(), want.then(|| value_for(&key, 2, i as u64)));
    }
    // A future may also be awaited on another thread.
    let reply = db.get_async(tree, &owned_key(2, 5)).unwrap();
    let other = std::thread::spawn(move || block_on(reply));
    assert_eq!(
        other.join().unwrap().unwrap(),
        Some(value_for(&owned_key(2, 5), 2, 5))
    );
    // Bad input is refused before anything is submitted.
    assert!(db.get_async(tree, &[]).is_err());
    assert!(db.put_async(tree, &[1; 257], b"v").is_err());
    assert_eq!(db.check_tree(tree).unwrap().1, n);
}

/// A 400-byte row for `id` written by `writer`: the key, the writer, then
/// padding derived from the id.
fn many_row(id: u64, writer: u64) -> Vec<u8> {
    let mut row = id.to_be_bytes().to_vec();
    row.extend_from_slice(&writer.to_be_bytes());
    row.resize(400, id as u8);
    row
}

/// `get_many` in a 32-page pool: tasks on two workers look up batches of
/// present, absent and repeated keys at once while other tasks overwrite
/// rows; every key gets exactly one answer, and it is the row (as some
/// writer wrote it) or, for a key never written, nothing. Most batches miss
/// many pages at once, so the reads of one task are in flight together.
#[test]
fn get_many_answers_every_key_once_with_reads_in_flight_together() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 32)).unwrap();
    let tree = db.tree("many").unwrap();
    let rows = 3000u64;
    // Even ids exist, odd ids never do; ~9 rows per leaf.
    for id in (0..2 * rows).step_by(2) {
        db.put(tree, &id.to_be_bytes(), &many_row(id, 0)).unwrap();
    }
    let reads_before = db.stats().page_reads;
    let tasks_per_worker = 8;
    let failures = Failures::default();
    let f = failures.clone();
    db.run(tasks_per_worker, move |ctx| {
        let f = f.clone();
        async move {
            let me = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            for batch in 0..12u64 {
                if me % 4 == 3 {
                    // A writer: rewrites rows the others look up.
                    for j in 0..40 {
                        let id = splitmix(me * 1000 + batch * 40 + j) % rows * 2;
                        if let Err(e) = ctx.put(tree, &id.to_be_bytes(), &many_row(id, me)).await {
                            return f.add(format!("task {me}: put: {e}"));
                        }
                    }
                    continue;
                }
                // 100 keys, each twice in a row.
                let keys: Vec<[u8; 8]> = (0..100)
                    .map(|j| (splitmix(me * 7919 + batch * 100 + j / 2) % (2 * rows)).to_be_bytes())
                    .collect();
                let mut answers = vec![0u32; keys.len()];
                let result = ctx
                    .get_many(tree, &keys, |index, value| {
                        answers[index] += 1;
                        let id = u64::from_be_bytes(keys[index]);
                        let good = match value {
                            None => id % 2 == 1,
                            Some(row) => {
                                let writer = u64::from_be_bytes(row[8..16].try_into().unwrap());
                                id.is_multiple_of(2) && row == many_row(id, writer).as_slice()
                            }
                        };
                        if !good {
                            f.add(format!("task {me}: key {id}: wrong answer {value:?}"));
                        }
                    })
                    .await;
                if let Err(e) = result {
                    return f.add(format!("task {me}: get_many: {e}"));
                }
                if answers.iter().any(|&n| n != 1) {
                    f.add(format!("task {me}: answers per key {answers:?}"));
                }
            }
        }
    })
    .unwrap();
    failures.assert_none();
    assert!(
        db.stats().page_reads > reads_before + 100,
        "the pool must miss"
    );
}

/// Scans by tasks (`TaskCtx::scan`, which goes from leaf to leaf through the
/// parent) while other tasks insert and delete around them, with a tiny
/// pool: every scan sees strictly ordered keys, every value matches its
/// key, and every key that no one deletes (the even ones) shows up in full
/// forward and backward scans. A skipped or repeated leaf fails it.
#[test]
fn task_scans_see_every_stable_key_once_while_others_write() {
    const STABLE_KEYS: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 48)).unwrap();
    let tree = db.tree("scan").unwrap();
    for i in (0..2 * STABLE_KEYS).step_by(2) {
        db.put(tree, &shared_key(i), &value_for(&shared_key(i), 0, 0))
            .unwrap();
    }
    let failures = Failures::default();
    let scans_done = Arc::new(Mutex::new(0u64));
    let (f, done) = (failures.clone(), scans_done.clone());
    db.run(8, move |ctx| {
        let (failures, done) = (f.clone(), done.clone());
        async move {
            let me = (ctx.worker() * 8 + ctx.task_index()) as u64;
            if me % 2 == 1 {
                // Writers churn the odd keys, with values of varying length
                // so that leaves split and merge.
                for round in 0..400u64 {
                    let i = 2 * (splitmix(me * 1_000_003 + round) % STABLE_KEYS) + 1;
                    let key = shared_key(i);
                    let result = if round % 3 == 2 {
                        ctx.delete(tree, &key).await.map(|_| ())
                    } else {
                        ctx.put(tree, &key, &value_for(&key, me, round)).await
                    };
                    if let Err(e) = result {
                        failures.add(format!("writer {me}: {e}"));
                        return;
                    }
                }
                return;
            }
            for round in 0..6u64 {
                let direction = if round % 2 == 0 {
                    ScanDirection::Forward
                } else {
                    ScanDirection::Backward
                };
                let start = match direction {
                    ScanDirection::Forward => Vec::new(),
                    ScanDirection::Backward => vec![0xFF; 40],
                };
                let mut previous: Option<Vec<u8>> = None;
                let mut stable_seen = 0u64;
                let mut problem = None;
                let result = ctx
                    .scan(tree, &start, direction, |k, v| {
                        let ordered = previous.as_deref().is_none_or(|p| match direction {
                            ScanDirection::Forward => p < k,
                            ScanDirection::Backward => p > k,
                        });
                        if !ordered || parse_value(k, v).is_none() {
                            problem = Some(format!("out of order or bad value at {k:?}"));
                            return false;
                        }
                        let i = u32::from_be_bytes(k[k.len() - 4..].try_into().unwrap());
                        stable_seen += u64::from(i % 2 == 0);
                        previous = Some(k.to_vec());
                        true
                    })
                    .await;
                if let Err(e) = result {
                    failures.add(format!("scanner {me}: {e}"));
                    return;
                }
                if let Some(p) = problem {
                    failures.add(format!("scanner {me} {direction:?}: {p}"));
                    return;
                }
                if stable_seen != STABLE_KEYS {
                    failures.add(format!(
                        "scanner {me} {direction:?}: {stable_seen} of {STABLE_KEYS} stable keys"
                    ));
                }
                *done.lock().unwrap() += 1;
            }
        }
    })
    .unwrap();
    failures.assert_none();
    assert_eq!(*scans_done.lock().unwrap(), 8 * 6);
    let stats = db.stats();
    assert!(stats.evictions > 0, "the pool never evicted: {stats:?}");
    db.check_tree(tree).unwrap();
    db.close().unwrap();
}

/// Scans of bounded length (`TaskCtx::scan_expecting`, told the length)
/// from random starts, both ways, by many tasks over a store about 20
/// times a tiny pool: each returns exactly the keys of its range in order,
/// whether its leaves were resident, read ahead (and perhaps evicted again
/// before use) or read on demand; and the scans read leaves ahead.
#[test]
fn bounded_scans_out_of_memory_return_exactly_their_ranges() {
    const KEYS: u64 = 12_000;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(1, 40)).unwrap();
    let tree = db.tree("ranges").unwrap();
    let key = |i: u64| (i * 3).to_be_bytes();
    let value = |i: u64| vec![(i % 251) as u8; 60 + (i % 50) as usize];
    for i in 0..KEYS {
        db.put(tree, &key(i), &value(i)).unwrap();
    }
    let reads_ahead_before = db.stats().read_ahead_reads;
    let failures = Failures::default();
    let f = failures.clone();
    db.run(16, move |ctx| {
        let f = f.clone();
        async move {
            let me = ctx.task_index() as u64;
            for round in 0..20u64 {
                let r = splitmix(me * 10_007 + round);
                let first = r % KEYS;
                let len = 1 + (r >> 20) % 400;
                let forward = round % 2 == 0;
                // Start between keys half of the time (key(i) + 1).
                let mut start = (first * 3 + (r >> 40) % 2).to_be_bytes().to_vec();
                if !forward && (r >> 40) % 2 == 1 {
                    start = (first * 3 - 1).to_be_bytes().to_vec();
                }
                let want: Vec<u64> = if forward {
                    let from = first + (r >> 40) % 2;
                    (from..KEYS.min(from + len)).collect()
                } else {
                    let to = if (r >> 40) % 2 == 1 { first.checked_sub(1) } else { Some(first) };
                    match to {
                        Some(to) => (to.saturating_sub(len - 1)..=to).rev().collect(),
                        None => Vec::new(),
                    }
                };
                let mut got = Vec::new();
                let mut bad_value = None;
                let direction = if forward {
                    ScanDirection::Forward
                } else {
                    ScanDirection::Backward
                };
                let result = ctx
                    .scan_expecting(tree, &start, direction, len as usize, |k, v| {
                        let i = u64::from_be_bytes(k.try_into().unwrap_or([0xFF; 8])) / 3;
                        if v != value(i).as_slice() {
                            bad_value = Some(i);
                            return false;
                        }
                        got.push(i);
                        (got.len() as u64) < len
                    })
                    .await;
                if let Err(e) = result {
                    return f.add(format!("task {me} round {round}: scan: {e}"));
                }
                if let Some(i) = bad_value {
                    return f.add(format!("task {me} round {round}: wrong value of key {i}"));
                }
                if got != want {
                    return f.add(format!(
                        "task {me} round {round}: {} keys from {:?} to {:?}, want {} from {:?} to {:?}",
                        got.len(),
                        got.first(),
                        got.last(),
                        want.len(),
                        want.first(),
                        want.last()
                    ));
                }
            }
        }
    })
    .unwrap();
    failures.assert_none();
    let stats = db.stats();
    assert!(
        stats.read_ahead_reads > reads_ahead_before,
        "no leaf was read ahead: {stats:?}"
    );
    db.check_tree(tree).unwrap();
    db.close().unwrap();
}

/// Tasks that sleep (`sched::sleep_until`) are woken by their worker's loop
/// (never before their deadlines), with and without I/O in flight, and
/// their commits go through.
#[test]
fn sleeping_tasks_wake_and_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny(2, 64)).unwrap();
    let tree = db.tree("t").unwrap();
    let tasks_per_worker = 16;
    let start = std::time::Instant::now();
    let woke: Arc<Mutex<Vec<u64>>> = Arc::default();
    let w = woke.clone();
    db.run(tasks_per_worker, move |ctx| {
        let woke = w.clone();
        async move {
            let id = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
            for round in 0..3u64 {
                let due = start + std::time::Duration::from_millis(5 * (id % 7) + 40 * round);
                flashtree::sched::sleep_until(due).await;
                assert!(std::time::Instant::now() >= due, "task {id} woke early");
                ctx.put(tree, &(id * 10 + round).to_be_bytes(), &[1u8; 64])
                    .await
                    .unwrap();
                woke.lock().unwrap().push(id);
            }
        }
    })
    .unwrap();
    assert_eq!(woke.lock().unwrap().len(), 2 * tasks_per_worker * 3);
    for id in 0..(2 * tasks_per_worker as u64) {
        for round in 0..3u64 {
            assert!(db
                .get(tree, &(id * 10 + round).to_be_bytes())
                .unwrap()
                .is_some());
        }
    }
}

/// Commits that outrun a tiny log park until a flush or a checkpoint makes
/// room (`DbStats::log_room_waits` counts them), and every one of them
/// lands: none is lost, none hangs (a waiter never woken would stop
/// `run`; the watchdog turns that into a failure instead of a stuck test).
#[test]
fn commits_wait_for_log_room_and_all_land() {
    use flashtree::db::WriteBatch;
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        // A pool that holds many dirty pages, so that a checkpoint has much
        // to write while the commits fill the log.
        pool_bytes: 1024 * 4096,
        workers: 2,
        wal_bytes_per_worker: 1 << 20,
        // A checkpoint starts only at half the log, and the in-memory log
        // buffer is small: both the file and the buffer run out.
        checkpoint_log_bytes: 512 << 10,
        wal_buffer_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Arc::new(Db::open(dir.path(), options).unwrap());
    let tree = db.tree("t").unwrap();
    let tasks_per_worker = 64;
    let rounds = 40u64;
    let batch_entries = 6u64;
    let failures = Failures::default();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    {
        let db = db.clone();
        let f = failures.clone();
        std::thread::spawn(move || {
            let result = db.run(tasks_per_worker, move |ctx| {
                let f = f.clone();
                async move {
                    let id = (ctx.worker() * tasks_per_worker + ctx.task_index()) as u64;
                    for round in 0..rounds {
                        let mut batch = WriteBatch::new();
                        for e in 0..batch_entries {
                            // Keys spread over the tree, so that a batch
                            // changes several leaves: big log groups.
                            let key = splitmix((id * 1_000 + round) * 10 + e).to_be_bytes();
                            let value = [(round as u8).wrapping_add(e as u8); 300];
                            batch.put(tree, &key, &value).unwrap();
                        }
                        if let Err(e) = ctx.write(&batch).await {
                            f.add(format!("task {id} round {round}: {e}"));
                            return;
                        }
                    }
                }
            });
            let _ = done_tx.send(result);
        });
    }
    let result = done_rx
        .recv_timeout(std::time::Duration::from_secs(600))
        .expect("commits waiting for log room never finished");
    result.unwrap();
    failures.assert_none();
    let stats = db.stats();
    assert!(
        stats.log_room_waits > 0,
        "the log never ran out of room: the test does not exercise the wait ({stats:?})"
    );
    for id in 0..(2 * tasks_per_worker as u64) {
        for round in 0..rounds {
            for e in 0..batch_entries {
                let key = splitmix((id * 1_000 + round) * 10 + e).to_be_bytes();
                let value = db.get(tree, &key).unwrap().expect("a committed key");
                assert_eq!(value, vec![(round as u8).wrapping_add(e as u8); 300]);
            }
        }
    }
}

/// A batch whose one step needs more new pages at once than eviction keeps
/// free (each of its entries splits a different full leaf) with a full
/// tiny pool: the step runs out of frames, rolls back, and waits until its
/// worker has the frames it needs. (Before, it retried at once and found
/// the free list refilled to the same 4 frames every time, and the batch
/// spun forever: crash simulator seed 742805; a free target that grew with
/// each shortage made the hang rarer but not impossible, since the larger
/// target evicted the step's own leaves.)
#[test]
fn a_batch_that_splits_many_leaves_in_a_full_tiny_pool_completes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), tiny(1, 48)).unwrap());
    let tree = db.tree("t").unwrap();
    let key = |id: u32| (id * 10).to_be_bytes().to_vec();
    let value = |id: u32| vec![(id % 251) as u8; 1000];
    // About 4 rows per leaf: 400 rows are 100 full leaves, twice the pool.
    for id in 0..400 {
        db.put(tree, &key(id), &value(id)).unwrap();
    }
    let (done, finished) = std::sync::mpsc::channel();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for round in 0..3u32 {
                let mut batch = flashtree::db::WriteBatch::new();
                // 12 entries (the most a 48-frame pool allows in a batch),
                // 33 rows apart: each lands in a different full leaf.
                for i in 0..12u32 {
                    let id = i * 33 + round;
                    batch
                        .put(tree, &(id * 10 + 5).to_be_bytes(), &[7u8; 1000])
                        .unwrap();
                }
                db.write(&batch, flashtree::db::WriteOptions::default())
                    .unwrap();
            }
            done.send(()).unwrap();
        })
    };
    finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the batches did not finish in 120 s: a livelock");
    writer.join().unwrap();
    assert!(
        db.stats().frame_waits > 0,
        "no batch step ran out of frames: the test no longer tests the wait"
    );
    for id in 0..400 {
        assert_eq!(db.get(tree, &key(id)).unwrap(), Some(value(id)), "row {id}");
    }
    for round in 0..3u32 {
        for i in 0..12u32 {
            let id = i * 33 + round;
            assert_eq!(
                db.get(tree, &(id * 10 + 5).to_be_bytes()).unwrap(),
                Some(vec![7u8; 1000]),
                "batch row {id}"
            );
        }
    }
}

/// Creating trees while a worker finishes checkpoints: `open_tree` once
/// held the catalog's lock while it waited for worker 0 to create the
/// root, and a checkpoint finishing on worker 0 took the same lock on the
/// worker's thread, so both waited forever (a test of the CLI's bulk load
/// hung so). Here puts on another thread make a checkpoint every 64 KiB of
/// log while this thread creates trees; a deadlock fails after a timeout.
#[test]
fn trees_created_while_checkpoints_finish_never_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        checkpoint_log_bytes: 64 << 10,
        ..tiny(1, 64)
    };
    let db = Arc::new(Db::open(dir.path(), options).unwrap());
    let load = db.tree("load").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                db.put(load, &(i % 500).to_be_bytes(), &[i as u8; 1000])
                    .unwrap();
                i += 1;
            }
        })
    };
    let checkpoints_before = db.stats().checkpoints;
    let (done, finished) = std::sync::mpsc::channel();
    let creator = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                db.tree(&format!("tree-{i}")).unwrap();
            }
            done.send(()).unwrap();
        })
    };
    let outcome = finished.recv_timeout(std::time::Duration::from_secs(120));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        outcome.is_ok(),
        "creating 200 trees did not finish in 120 s: a deadlock with the checkpoints"
    );
    creator.join().unwrap();
    writer.join().unwrap();
    let checkpoints = db.stats().checkpoints - checkpoints_before;
    assert!(
        checkpoints > 0,
        "no checkpoint ran while the trees were created"
    );
    assert_eq!(db.tree_names().len(), 201);
}

/// Closing a store of two workers while many writes are still queued, most
/// of the log on worker 1: worker 0 runs out of work first, and must not
/// leave while worker 1 still needs it for a checkpoint (worker 1's log
/// would fill and its writes wait for room forever). A hang fails after a
/// timeout.
#[test]
fn close_with_queued_writes_on_one_busy_worker_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        wal_bytes_per_worker: 1 << 20,
        checkpoint_log_bytes: 256 << 10,
        ..tiny(2, 64)
    };
    for round in 0..5u64 {
        let db = Db::open(dir.path(), options.clone()).unwrap();
        let tree = db.tree("t").unwrap();
        let mut replies = Vec::new();
        // Jobs go to the workers in turn: even ones (worker 0 when the
        // count starts even) rewrite one small row, odd ones spread large
        // rows over many leaves.
        for i in 0..6_000u64 {
            let reply = if i % 2 == 0 {
                db.put_async(tree, b"small", &[round as u8; 8])
            } else {
                let key = splitmix(i + round * 1_000_000).to_be_bytes();
                db.put_async(tree, &key, &[round as u8; 1000])
            };
            replies.push(reply.unwrap());
        }
        drop(replies);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            done.send(db.close()).unwrap();
        });
        let closed = finished.recv_timeout(std::time::Duration::from_secs(60));
        assert!(
            closed.is_ok(),
            "round {round}: close did not finish in 60 s"
        );
        closed.unwrap().unwrap();
    }
}

/// A blocking call of the store made inside one of its own tasks would
/// wait for the worker the task runs on: it is refused with
/// `InvalidArgument`, never a hang. A hang fails after a timeout.
#[test]
fn blocking_calls_inside_own_tasks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), tiny(1, 64)).unwrap());
    let tree = db.tree("t").unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let (done, finished) = std::sync::mpsc::channel();
    {
        let (db, errors) = (db.clone(), errors.clone());
        std::thread::spawn(move || {
            let inner = db.clone();
            let result = db.run(1, move |_ctx| {
                let (db, errors) = (inner.clone(), errors.clone());
                async move {
                    let mut seen = errors.lock().unwrap();
                    seen.push(format!("{:?}", db.put(tree, b"k", b"v")));
                    seen.push(format!("{:?}", db.delete(tree, b"k")));
                    seen.push(format!("{:?}", db.sync()));
                    seen.push(format!("{:?}", db.tree("other")));
                    seen.push(format!("{:?}", db.run(1, |_ctx| async {})));
                    let first = db.range(tree, None, ScanDirection::Forward).next();
                    seen.push(format!("{:?}", first.map(|r| r.map(drop))));
                }
            });
            done.send(result).unwrap();
        });
    }
    let result = finished.recv_timeout(std::time::Duration::from_secs(60));
    assert!(result.is_ok(), "a blocking call inside a task hung");
    result.unwrap().unwrap();
    let seen = errors.lock().unwrap();
    assert_eq!(seen.len(), 6);
    for outcome in seen.iter() {
        let outcome = outcome.trim_start_matches("Some(");
        assert!(
            outcome.starts_with("Err(InvalidArgument(\"a blocking Db call inside a task"),
            "{outcome}"
        );
    }
    // The same calls from a thread of the caller's own work.
    db.put(tree, b"k", b"v").unwrap();
    assert_eq!(db.get(tree, b"k").unwrap(), Some(b"v".to_vec()));
}

/// Checkpoints that run while tasks wait for their commits keep at most
/// one run of 16 pages in flight, so that the log the commits wait for
/// gets the device (each log sync also flushes the device's cache of page
/// writes). 64 tasks commit small puts over 20,000 keys (about 300
/// leaves in a 2 MiB pool, so the page pass has many runs to write) with
/// a checkpoint every 256 KiB of log; afterwards every task's last value
/// must be there, and the page passes must have held writes back. With
/// the pass writing four runs at a time regardless,
/// `checkpoint_writes_held` stays 0 and this fails; with runs not capped
/// at the room left, the pass's own assertion stops the store.
#[test]
fn checkpoint_writes_leave_the_device_to_the_log_while_commits_wait() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        checkpoint_log_bytes: 256 << 10,
        ..tiny(1, 512)
    };
    let db = Db::open(dir.path(), options.clone()).unwrap();
    let tree = db.tree("paced").unwrap();
    let keys = 20_000u64;
    let tasks = 64usize;
    let puts_per_task = 600u64;
    // Task t's n-th put: keys t, t + 64, ... (disjoint from the others').
    let key_of =
        move |t: u64, n: u64| (t + (n * 7919 % (keys / tasks as u64)) * tasks as u64) % keys;
    let value_of = |t: u64, n: u64| [(t as u8) ^ (n as u8); 40];
    let failures = Failures::default();
    let f = failures.clone();
    db.run(tasks, move |ctx| {
        let f = f.clone();
        async move {
            let t = ctx.task_index() as u64;
            for n in 0..puts_per_task {
                let key = key_of(t, n).to_be_bytes();
                if let Err(e) = ctx.put(tree, &key, &value_of(t, n)).await {
                    return f.add(format!("task {t}: put {n}: {e}"));
                }
            }
        }
    })
    .unwrap();
    failures.assert_none();
    let stats = db.stats();
    assert!(
        stats.checkpoints > 2,
        "expected several checkpoints, got {}",
        stats.checkpoints
    );
    assert!(
        stats.checkpoint_writes_held > 0,
        "no checkpoint write was held back while commits waited ({} checkpoints)",
        stats.checkpoints
    );
    // Every task's last put of each of its keys.
    let mut expected = BTreeMap::new();
    for t in 0..tasks as u64 {
        for n in 0..puts_per_task {
            expected.insert(key_of(t, n), value_of(t, n));
        }
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), options).unwrap();
    let tree = db.tree("paced").unwrap();
    for (i, value) in &expected {
        assert_eq!(
            db.get(tree, &i.to_be_bytes()).unwrap().as_deref(),
            Some(&value[..]),
            "key {i}"
        );
    }
}
