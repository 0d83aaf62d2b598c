//! Model-based tests: random sequences of operations on a [`Db`] and on a
//! `BTreeMap` per named tree must give the same answers, including across
//! close and reopen. Each sequence runs with a normal pool and with a pool of
//! 16-64 pages, where nearly every access misses and pages are evicted and
//! read back all the time.
//!
//! Keys are 1..=256 bytes drawn from a small key space (so that gets, deletes
//! and overwrites hit existing keys) with shared prefixes of up to 200 bytes;
//! values are 0..=700 bytes, plus entries of exactly the 1024-byte limit.
//!
//! `PROPTEST_CASES=n` raises the number of cases of every property.

use flashtree::db::{Db, Options, ScanDirection, Tree};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Named trees in every store.
const TREE_NAMES: [&str; 3] = ["alpha", "beta", "a-tree-with-a-much-longer-name"];
/// Key ids are drawn from 0..KEY_SPACE; `key_of` maps them to byte strings.
const KEY_SPACE: u32 = 3000;
/// Largest key + value the engine accepts.
const MAX_ENTRY_BYTES: usize = 1024;
/// Longest key the engine accepts.
const MAX_KEY_BYTES: usize = 256;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The key with id `id`: a prefix shared by many keys, then a suffix over a
/// small alphabet (with 0x00 and 0xFF, the edges of byte order).
fn key_of(id: u32) -> Vec<u8> {
    const ALPHABET: [u8; 8] = [0x00, 0x01, b'a', b'b', b'm', b'z', 0xFE, 0xFF];
    let mut h = splitmix(u64::from(id));
    let mut key: Vec<u8> = match h % 8 {
        0 => Vec::new(),
        1 => b"k".to_vec(),
        2 => b"user/".to_vec(),
        3 => vec![0x00; 3],
        4 => vec![b'p'; 200],
        5 => vec![0xFF; 10],
        6 => b"user/profile/".to_vec(),
        _ => vec![b'q'; 250],
    };
    h = splitmix(h);
    let suffix_len = match h % 10 {
        0 => (h >> 8) as usize % (MAX_KEY_BYTES + 1), // long keys
        _ => 1 + (h >> 8) as usize % 12,
    };
    for _ in 0..suffix_len {
        h = splitmix(h);
        key.push(ALPHABET[(h % 8) as usize]);
    }
    key.truncate(MAX_KEY_BYTES);
    if key.is_empty() {
        key.push(b'e');
    }
    key
}

/// A value of `len` bytes (clamped so that key + value fit the entry limit).
fn value_of(key: &[u8], len: usize, seed: u8) -> Vec<u8> {
    let len = len.min(MAX_ENTRY_BYTES - key.len());
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(31)))
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        tree: usize,
        key: u32,
        value_len: usize,
        seed: u8,
    },
    /// Puts `count` consecutive key ids from `first`.
    PutMany {
        tree: usize,
        first: u32,
        count: u32,
        value_len: usize,
        seed: u8,
    },
    Delete {
        tree: usize,
        key: u32,
    },
    /// Deletes up to `count` existing keys in key order from `from`'s key on:
    /// empties whole leaves, so that nodes merge and the tree shrinks.
    DeleteRun {
        tree: usize,
        from: u32,
        count: usize,
    },
    Get {
        tree: usize,
        key: u32,
    },
    /// Up to `limit` entries from `start` (None: from the end).
    Range {
        tree: usize,
        start: Option<u32>,
        backward: bool,
        limit: usize,
    },
    Reopen,
}

fn value_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 0usize..=32,
        3 => 0usize..=700,
        1 => Just(MAX_ENTRY_BYTES), // clamped to exactly the limit
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let tree = 0..TREE_NAMES.len();
    let key = 0..KEY_SPACE;
    prop_oneof![
        8 => (tree.clone(), key.clone(), value_len(), any::<u8>())
            .prop_map(|(tree, key, value_len, seed)| Op::Put { tree, key, value_len, seed }),
        2 => (tree.clone(), key.clone(), 1u32..400, value_len(), any::<u8>()).prop_map(
            |(tree, first, count, value_len, seed)| Op::PutMany { tree, first, count, value_len, seed }
        ),
        4 => (tree.clone(), key.clone()).prop_map(|(tree, key)| Op::Delete { tree, key }),
        2 => (tree.clone(), key.clone(), 1usize..500)
            .prop_map(|(tree, from, count)| Op::DeleteRun { tree, from, count }),
        4 => (tree.clone(), key.clone()).prop_map(|(tree, key)| Op::Get { tree, key }),
        3 => (tree.clone(), proptest::option::weighted(0.8, key), any::<bool>(), 1usize..200)
            .prop_map(|(tree, start, backward, limit)| Op::Range { tree, start, backward, limit }),
        1 => Just(Op::Reopen),
    ]
}

/// The store under test, its tree handles and the model of each tree.
struct Harness {
    dir: tempfile::TempDir,
    options: Options,
    db: Option<Db>,
    trees: Vec<Tree>,
    models: Vec<Model>,
}

impl Harness {
    fn new(options: Options) -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut h = Harness {
            dir,
            options,
            db: None,
            trees: Vec::new(),
            models: vec![Model::new(); TREE_NAMES.len()],
        };
        h.open();
        h
    }

    fn open(&mut self) {
        let db = Db::open(self.dir.path(), self.options.clone()).expect("open");
        self.trees = TREE_NAMES
            .iter()
            .map(|name| db.tree(name).expect("tree"))
            .collect();
        self.db = Some(db);
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
    }

    fn reopen(&mut self) {
        self.db.take().expect("open").close().expect("close");
        self.open();
        let mut names = self.db().tree_names();
        names.sort();
        let mut expected: Vec<String> = TREE_NAMES.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(names, expected, "tree catalog after reopen");
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Put {
                tree,
                key,
                value_len,
                seed,
            } => self.put(tree, key_of(key), value_len, seed),
            Op::PutMany {
                tree,
                first,
                count,
                value_len,
                seed,
            } => {
                for i in 0..count {
                    let id = (first + i) % KEY_SPACE;
                    self.put(tree, key_of(id), value_len, seed.wrapping_add(i as u8));
                }
            }
            Op::Delete { tree, key } => {
                let key = key_of(key);
                let found = self.db().delete(self.trees[tree], &key).expect("delete");
                let expected = self.models[tree].remove(&key).is_some();
                assert_eq!(found, expected, "delete {key:?} in tree {tree}");
            }
            Op::DeleteRun { tree, from, count } => {
                let keys: Vec<Vec<u8>> = self.models[tree]
                    .range(key_of(from)..)
                    .take(count)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in keys {
                    let found = self.db().delete(self.trees[tree], &key).expect("delete");
                    assert!(found, "delete of present key {key:?} in tree {tree}");
                    self.models[tree].remove(&key);
                }
            }
            Op::Get { tree, key } => {
                let key = key_of(key);
                let got = self.db().get(self.trees[tree], &key).expect("get");
                assert_eq!(
                    got.as_ref(),
                    self.models[tree].get(&key),
                    "get {key:?} in tree {tree}"
                );
            }
            Op::Range {
                tree,
                start,
                backward,
                limit,
            } => {
                let start = start.map(key_of);
                let got = self.range(tree, start.as_deref(), backward, limit);
                let model = &self.models[tree];
                let expected: Vec<(Vec<u8>, Vec<u8>)> = match (&start, backward) {
                    (Some(s), false) => model.range(s.clone()..).take(limit).cloned_pairs(),
                    (Some(s), true) => model.range(..=s.clone()).rev().take(limit).cloned_pairs(),
                    (None, false) => model.iter().take(limit).cloned_pairs(),
                    (None, true) => model.iter().rev().take(limit).cloned_pairs(),
                };
                assert_eq!(
                    got, expected,
                    "range of tree {tree} from {start:?}, backward {backward}"
                );
            }
            Op::Reopen => self.reopen(),
        }
    }

    fn put(&mut self, tree: usize, key: Vec<u8>, value_len: usize, seed: u8) {
        let value = value_of(&key, value_len, seed);
        self.db()
            .put(self.trees[tree], &key, &value)
            .unwrap_or_else(|e| panic!("put of {}+{} bytes: {e}", key.len(), value.len()));
        self.models[tree].insert(key, value);
    }

    fn range(
        &self,
        tree: usize,
        start: Option<&[u8]>,
        backward: bool,
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let direction = if backward {
            ScanDirection::Backward
        } else {
            ScanDirection::Forward
        };
        self.db()
            .range(self.trees[tree], start, direction)
            .take(limit)
            .collect::<flashtree::Result<_>>()
            .expect("range")
    }

    /// The tree checker passes, entry counts match and full scans in both
    /// directions give the model's contents.
    fn check_all(&self) {
        for (t, model) in self.models.iter().enumerate() {
            let (nodes, entries) = self.db().check_tree(self.trees[t]).expect("check_tree");
            assert!(nodes >= 1);
            assert_eq!(entries, model.len() as u64, "entries of tree {t}");
            let forward = self.range(t, None, false, usize::MAX);
            assert!(
                forward == model.iter().cloned_pairs(),
                "forward scan of {t}"
            );
            let backward = self.range(t, None, true, usize::MAX);
            assert!(
                backward == model.iter().rev().cloned_pairs(),
                "backward scan of {t}"
            );
        }
    }
}

trait ClonedPairs {
    fn cloned_pairs(self) -> Vec<(Vec<u8>, Vec<u8>)>;
}

impl<'a, I: Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>> ClonedPairs for I {
    fn cloned_pairs(self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

fn run_case(options: Options, ops: &[Op]) {
    let mut h = Harness::new(options);
    for op in ops {
        h.apply(op);
    }
    h.check_all();
    // Everything survives a final close and reopen.
    h.reopen();
    h.check_all();
    h.db.take().expect("open").close().expect("close");
}

/// The model tests check the tree, not durability: commits are logged but
/// not waited for (`Buffered`), so that thousands of single puts run fast.
fn normal_pool(workers: usize) -> Options {
    Options {
        pool_bytes: 8 << 20,
        workers,
        wal_bytes_per_worker: 8 << 20,
        checkpoint_log_bytes: 2 << 20,
        durability: flashtree::db::Durability::Buffered { max_delay_ms: 5 },
        ..Options::default()
    }
}

fn tiny_pool(pages: u64, workers: usize) -> Options {
    Options {
        pool_bytes: pages * 4096,
        ..normal_pool(workers)
    }
}

/// Cases per property: `default`, unless PROPTEST_CASES asks for more.
fn config(default: u32) -> ProptestConfig {
    let env_cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    ProptestConfig {
        max_shrink_iters: 256,
        ..ProptestConfig::with_cases(default.max(env_cases))
    }
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn model_normal_pool(
        workers in 1usize..=2,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run_case(normal_pool(workers), &ops);
    }

    #[test]
    fn model_tiny_pool(
        (pages, workers) in prop_oneof![
            (16u64..=64).prop_map(|p| (p, 1usize)),
            (16u64..=64).prop_map(|p| (p, 2usize)),
        ],
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        run_case(tiny_pool(pages, workers), &ops);
    }
}

/// Keys are all within the limits, and the generator makes long keys,
/// shared prefixes and entries of exactly the limit.
#[test]
fn key_generator_covers_the_interesting_shapes() {
    let keys: Vec<Vec<u8>> = (0..KEY_SPACE).map(key_of).collect();
    assert!(keys
        .iter()
        .all(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES));
    assert!(keys.iter().any(|k| k.len() == MAX_KEY_BYTES));
    assert!(keys.iter().filter(|k| k.starts_with(&[b'p'; 200])).count() > 100);
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert!(distinct.len() > KEY_SPACE as usize / 2);
    let k = key_of(7);
    assert_eq!(k.len() + value_of(&k, MAX_ENTRY_BYTES, 0).len(), 1024);
}

/// A long deterministic run with a 16-page pool on one worker: growth to
/// several levels, shrinking by deletes to nearly empty, and regrowth, with
/// checks along the way and after reopening.
#[test]
fn tiny_pool_grow_shrink_regrow() {
    let mut h = Harness::new(tiny_pool(16, 1));
    let mut rng = 0x1234_5678u64;
    for round in 0..3 {
        for i in 0..2500u32 {
            rng = splitmix(rng);
            let id = (rng % u64::from(KEY_SPACE)) as u32;
            h.put(
                (i % 3) as usize,
                key_of(id),
                (rng >> 20) as usize % 701,
                round,
            );
        }
        h.check_all();
        let tree = round as usize % 3;
        // Delete all but every 50th key, in key order.
        let keys: Vec<Vec<u8>> = h.models[tree].keys().cloned().collect();
        for (i, key) in keys.iter().enumerate() {
            if i % 50 != 0 {
                assert!(h.db().delete(h.trees[tree], key).expect("delete"));
                h.models[tree].remove(key);
            }
        }
        h.check_all();
        h.reopen();
        h.check_all();
    }
    assert!(h.db().stats().page_reads > 0, "a 16-page pool must miss");
}
