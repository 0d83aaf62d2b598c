//! The data commands of the `flashtree` binary (`get`, `put`, `delete`,
//! `scan`, `dump`, `load`, `stats`), run as a user runs them.

use flashtree::db::{Db, Options, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn flashtree(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flashtree"))
        .args(args)
        .output()
        .expect("run flashtree")
}

fn flashtree_with_input(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flashtree"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flashtree");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().expect("wait for flashtree")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "flashtree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// The one-line error of a failed command; asserts a non-zero exit.
fn err(out: &Output) -> String {
    assert!(!out.status.success(), "flashtree succeeded: {out:?}");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(text.trim_end().lines().count(), 1, "not one line: {text}");
    text
}

fn store_options() -> Options {
    Options {
        pool_bytes: 4 << 20,
        workers: 1,
        wal_bytes_per_worker: 8 << 20,
        checkpoint_log_bytes: 2 << 20,
        ..Options::default()
    }
}

fn dir_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn put_get_delete_round_trip_text_and_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let d = dir_str(&store);
    // A missing store: put needs --create.
    assert!(err(&flashtree(&["put", d, "--tree", "t", "k", "v"])).contains("no store"));
    ok(&flashtree(&[
        "put", d, "--tree", "users", "alice", "42", "--create",
    ]));
    ok(&flashtree(&[
        "put", d, "--tree", "users", "--hex", "00ff", "0a0b",
    ]));
    assert_eq!(
        ok(&flashtree(&["get", d, "--tree", "users", "alice"])),
        "42\n"
    );
    // Binary bytes are escaped, or exact with --hex.
    assert_eq!(
        ok(&flashtree(&["get", d, "--tree", "users", "--hex", "00ff"])),
        "0a0b\n"
    );
    assert_eq!(
        ok(&flashtree(&["scan", d, "--tree", "users", "--limit", "1"])),
        "\\x00\\xff\t\\n\\x0b\n"
    );
    assert!(err(&flashtree(&["get", d, "--tree", "users", "bob"])).contains("not found"));
    ok(&flashtree(&["delete", d, "--tree", "users", "alice"]));
    assert!(err(&flashtree(&["get", d, "--tree", "users", "alice"])).contains("not found"));
    assert!(err(&flashtree(&["delete", d, "--tree", "users", "alice"])).contains("not found"));
    assert!(err(&flashtree(&["get", d, "--tree", "users", "--hex", "zz"])).contains("not hex"));
}

#[test]
fn scan_honours_bounds_order_and_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let d = dir_str(&store);
    let db = Db::open(&store, store_options()).unwrap();
    let t = db.tree("t").unwrap();
    for chunk in (0..2000u32).collect::<Vec<_>>().chunks(200) {
        let mut batch = WriteBatch::new();
        for i in chunk {
            batch
                .put(t, format!("k{i:05}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        db.write(&batch, WriteOptions::default()).unwrap();
    }
    db.close().unwrap();
    let keys = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["scan", d, "--tree", "t"];
        all.extend_from_slice(args);
        ok(&flashtree(&all))
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect()
    };
    let expect = |range: std::ops::Range<u32>| -> Vec<String> {
        range.map(|i| format!("k{i:05}")).collect()
    };
    assert_eq!(keys(&[]), expect(0..2000));
    assert_eq!(
        keys(&["--from", "k00100", "--to", "k01500"]),
        expect(100..1500)
    );
    let mut rev = expect(100..1500);
    rev.reverse();
    assert_eq!(
        keys(&["--from", "k00100", "--to", "k01500", "--reverse"]),
        rev
    );
    assert_eq!(
        keys(&["--reverse", "--limit", "3"]),
        vec!["k01999", "k01998", "k01997"]
    );
    assert_eq!(keys(&["--from", "k01998"]), expect(1998..2000));
    assert_eq!(keys(&["--limit", "0"]), Vec::<String>::new());
    // Bounds between keys.
    assert_eq!(
        keys(&["--from", "k00099x", "--to", "k00102x"]),
        expect(100..103)
    );
    let mut rev = expect(100..103);
    rev.reverse();
    assert_eq!(
        keys(&["--from", "k00099x", "--to", "k00102x", "--reverse"]),
        rev
    );
}

/// What the store holds, read through the library.
fn contents(store: &Path) -> BTreeMap<(String, Vec<u8>), Vec<u8>> {
    let db = Db::open(
        store,
        Options {
            create_if_missing: false,
            ..store_options()
        },
    )
    .unwrap();
    let mut all = BTreeMap::new();
    for name in db.tree_names() {
        let t = db.tree(&name).unwrap();
        if t.is_hash() {
            db.hash_entries(t, |k, v| {
                all.insert((format!("{name} (hash)"), k.to_vec()), v.to_vec());
                true
            })
            .unwrap();
            continue;
        }
        for entry in db.range(t, None, flashtree::db::ScanDirection::Forward) {
            let (k, v) = entry.unwrap();
            all.insert((name.clone(), k), v);
        }
    }
    db.close().unwrap();
    all
}

#[test]
fn dump_and_load_keep_hash_trees_hash_trees() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let db = Db::open(&source, store_options()).unwrap();
    let (b, h) = (db.tree("b").unwrap(), db.hash_tree("h").unwrap());
    let mut batch = WriteBatch::new();
    for i in 0..3000u32 {
        // Text and binary keys and values, in both trees.
        let key = if i % 2 == 0 {
            format!("k{i}").into_bytes()
        } else {
            vec![0xFE, (i >> 8) as u8, i as u8]
        };
        let value = if i % 3 == 0 {
            vec![0x80, i as u8]
        } else {
            format!("v{i}").into_bytes()
        };
        batch
            .put(if i % 4 == 0 { b } else { h }, &key, &value)
            .unwrap();
        if batch.len() == 200 {
            db.write(&batch, WriteOptions::default()).unwrap();
            batch.clear();
        }
    }
    db.write(&batch, WriteOptions::default()).unwrap();
    db.close().unwrap();
    let before = contents(&source);
    assert_eq!(before.len(), 3000);
    let dumped = ok(&flashtree(&["dump", dir_str(&source)]));
    let hash_lines = dumped
        .lines()
        .filter(|l| l.contains(r#""kind":"hash""#))
        .count();
    assert_eq!((dumped.lines().count(), hash_lines), (3000, 2250));
    let copy = tmp.path().join("copy");
    ok(&flashtree_with_input(
        &["load", dir_str(&copy)],
        dumped.as_bytes(),
    ));
    assert_eq!(
        contents(&copy),
        before,
        "the copy's h is a hash tree with the same entries"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&flashtree(&["stats", dir_str(&copy), "--json"]))).unwrap();
    let trees = stats["trees"].as_array().unwrap();
    let h_stats = trees.iter().find(|t| t["name"] == "h").unwrap();
    assert_eq!(h_stats["records"], 2250);
    assert!(
        h_stats["key_value_bytes"].as_u64().unwrap() > 2250 * 4,
        "{stats}"
    );
    // --bulk cannot build a hash tree: one clear line naming it.
    let file = tmp.path().join("dump.jsonl");
    std::fs::write(&file, &dumped).unwrap();
    let bulk = flashtree(&[
        "load",
        dir_str(&tmp.path().join("bulk")),
        "--bulk",
        "--input",
        file.to_str().unwrap(),
    ]);
    assert!(err(&bulk).contains("hash tree"), "{bulk:?}");
    // A record of a hash tree into a B+-tree of the same name.
    let clash = flashtree_with_input(
        &["load", dir_str(&copy)],
        br#"{"tree":"b","kind":"hash","key":"x","value":"y"}"#,
    );
    assert!(err(&clash).contains("exists as a B+-tree"), "{clash:?}");
    let bad_kind = flashtree_with_input(
        &["load", dir_str(&copy)],
        br#"{"tree":"b","kind":"lsm","key":"x","value":"y"}"#,
    );
    assert!(err(&bad_kind).contains("kind"), "{bad_kind:?}");
}

#[test]
fn dump_then_load_into_a_new_store_gives_the_same_content() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let copy = tmp.path().join("copy");
    let db = Db::open(&source, store_options()).unwrap();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for name in ["a", "b", "c"] {
        let t = db.tree(name).unwrap();
        let mut batch = WriteBatch::new();
        for i in 0..6000u64 {
            if batch.len() == 200 {
                db.write(&batch, WriteOptions::default()).unwrap();
                batch.clear();
            }
            // Text keys, binary keys, empty and binary values, long values.
            let key = match i % 3 {
                0 => format!("key-{i}").into_bytes(),
                1 => next().to_be_bytes().to_vec(),
                _ => vec![0xFF, (i % 251) as u8, 0, (i >> 8) as u8],
            };
            let value = match i % 4 {
                0 => Vec::new(),
                1 => format!("value \"{i}\"\n\ttab").into_bytes(),
                2 => next().to_le_bytes().to_vec(),
                _ => vec![b'x'; (next() % 700) as usize],
            };
            batch.put(t, &key, &value).unwrap();
        }
        db.write(&batch, WriteOptions::default()).unwrap();
    }
    db.close().unwrap();
    let before = contents(&source);
    assert_eq!(before.len(), 18_000);
    let dumped = ok(&flashtree(&["dump", dir_str(&source)]));
    assert_eq!(dumped.lines().count(), 18_000);
    let file = tmp.path().join("dump.jsonl");
    std::fs::write(&file, &dumped).unwrap();
    let loaded = flashtree(&[
        "load",
        dir_str(&copy),
        "--input",
        file.to_str().unwrap(),
        "--batch",
        "500",
    ]);
    ok(&loaded);
    assert_eq!(contents(&copy), before);
    // Standard input, one tree.
    let only_b = ok(&flashtree(&["dump", dir_str(&source), "--tree", "b"]));
    let copy_b = tmp.path().join("copy-b");
    ok(&flashtree_with_input(
        &["load", dir_str(&copy_b)],
        only_b.as_bytes(),
    ));
    let expect_b: BTreeMap<_, _> = before.into_iter().filter(|((t, _), _)| t == "b").collect();
    assert_eq!(contents(&copy_b), expect_b);
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&flashtree(&["stats", dir_str(&copy), "--json"]))).unwrap();
    assert_eq!(stats["records"], 18_000);
    assert_eq!(stats["trees"].as_array().unwrap().len(), 3);
    assert_eq!(stats["pages_leaked"], 0);
    assert!(stats["leaf_fill"].as_f64().unwrap() > 0.2, "{stats}");
    let allocated = stats["data_allocated_bytes"].as_u64().unwrap();
    assert!(
        allocated > 0 && allocated <= stats["data_bytes"].as_u64().unwrap() + 4096,
        "{stats}"
    );
    assert!(
        stats["placement"]
            .as_str()
            .unwrap()
            .contains("F_SET_RW_HINT"),
        "{stats}"
    );
}

#[test]
fn load_bulk_builds_each_tree_and_refuses_trees_with_records() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let copy = tmp.path().join("copy");
    let db = Db::open(&source, store_options()).unwrap();
    for name in ["a", "b"] {
        let t = db.tree(name).unwrap();
        let mut batch = WriteBatch::new();
        // Keys inserted in an order that is not theirs.
        for i in 0..20_000u64 {
            if batch.len() == 200 {
                db.write(&batch, WriteOptions::default()).unwrap();
                batch.clear();
            }
            let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            batch
                .put(t, &k.to_be_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        db.write(&batch, WriteOptions::default()).unwrap();
    }
    db.close().unwrap();
    let before = contents(&source);
    let file = tmp.path().join("dump.jsonl");
    std::fs::write(&file, ok(&flashtree(&["dump", dir_str(&source)]))).unwrap();
    // Lines shuffled within each tree's stretch: the load sorts them.
    let text = std::fs::read_to_string(&file).unwrap();
    let (mut a, mut b): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.contains("\"tree\":\"a\""));
    a.reverse();
    b.sort_by_key(|l| l.len());
    let shuffled = tmp.path().join("shuffled.jsonl");
    std::fs::write(&shuffled, format!("{}\n{}\n", a.join("\n"), b.join("\n"))).unwrap();
    let f = shuffled.to_str().unwrap();
    // A tiny sort memory: the records go through the temporary file.
    ok(&flashtree(&[
        "load",
        dir_str(&copy),
        "--input",
        f,
        "--bulk",
        "--sort-mib",
        "1",
        "--pool-mib",
        "4",
    ]));
    assert_eq!(contents(&copy), before);
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&flashtree(&["stats", dir_str(&copy), "--json"]))).unwrap();
    assert_eq!(stats["records"], 40_000);
    assert_eq!(stats["pages_leaked"], 0);
    assert!(stats["leaf_fill"].as_f64().unwrap() > 0.6, "{stats}");
    // Loading again: the trees have records.
    let e = err(&flashtree(&[
        "load",
        dir_str(&copy),
        "--input",
        f,
        "--bulk",
    ]));
    assert!(e.contains("not empty") && e.contains("\"a\""), "{e}");
    // A tree's records in two stretches.
    let split = tmp.path().join("split.jsonl");
    std::fs::write(&split, format!("{}\n{}\n{}\n", a[0], b[0], a[1])).unwrap();
    let e = err(&flashtree(&[
        "load",
        dir_str(&tmp.path().join("fresh")),
        "--input",
        split.to_str().unwrap(),
        "--bulk",
    ]));
    assert!(e.contains("line 3") && e.contains("together"), "{e}");
    assert_eq!(contents(&copy), before);
}

#[test]
fn bad_input_gets_one_line_naming_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let d = dir_str(&store);
    let missing = tmp.path().join("missing");
    for cmd in ["get", "delete"] {
        let e = err(&flashtree(&[cmd, dir_str(&missing), "--tree", "t", "k"]));
        assert!(e.contains("missing") && e.contains("no store"), "{e}");
    }
    for cmd in ["dump", "stats"] {
        let e = err(&flashtree(&[cmd, dir_str(&missing)]));
        assert!(e.contains("no store"), "{e}");
    }
    let e = err(&flashtree(&["scan", dir_str(&missing), "--tree", "t"]));
    assert!(e.contains("no store"), "{e}");
    ok(&flashtree(&[
        "put", d, "--tree", "users", "a", "1", "--create",
    ]));
    let e = err(&flashtree(&["get", d, "--tree", "nope", "a"]));
    assert!(
        e.contains("no tree named \"nope\"") && e.contains("users"),
        "{e}"
    );
    let e = err(&flashtree(&["scan", d, "--tree", "nope"]));
    assert!(e.contains("nope"), "{e}");
    // Malformed JSON: the line is named; the batches before it stay.
    let input =
        "{\"tree\":\"t\",\"key\":\"a\",\"value\":\"1\"}\n\n{\"tree\":\"t\",\"key\":\"b\"}\n";
    let e = err(&flashtree_with_input(
        &["load", d, "--batch", "1"],
        input.as_bytes(),
    ));
    assert!(e.contains("line 3") && e.contains("value"), "{e}");
    assert_eq!(ok(&flashtree(&["get", d, "--tree", "t", "a"])), "1\n");
    let e = err(&flashtree_with_input(&["load", d], b"not json\n"));
    assert!(e.contains("line 1"), "{e}");
    let e = err(&flashtree_with_input(
        &["load", d],
        b"{\"tree\":\"t\",\"key_hex\":\"0g\",\"value\":\"\"}\n",
    ));
    assert!(e.contains("line 1") && e.contains("key_hex"), "{e}");
    let e = err(&flashtree(&["load", d, "--input", dir_str(&missing)]));
    assert!(e.contains("missing"), "{e}");
    let e = err(&flashtree_with_input(
        &["load", dir_str(&missing), "--no-create"],
        b"",
    ));
    assert!(e.contains("no store"), "{e}");
    // A store in use by another Db.
    let db = Db::open(
        &store,
        Options {
            create_if_missing: false,
            ..store_options()
        },
    )
    .unwrap();
    let e = err(&flashtree(&["get", d, "--tree", "users", "a"]));
    assert!(e.contains("in use"), "{e}");
    db.close().unwrap();
    assert_eq!(ok(&flashtree(&["get", d, "--tree", "users", "a"])), "1\n");
}

/// `bench lookup` without `--reuse` replaces the store in its directory
/// (twice in a row, as a user reruns `scripts/bench.sh`), and `--reuse`
/// keeps it; a file of the user's beside it stays.
#[test]
fn bench_lookup_replaces_or_reuses_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("notes.txt"), b"mine").unwrap();
    let path_text = path.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "lookup",
            "--records",
            "5000",
            "--pool",
            "4MiB",
            "--seconds",
            "0.2",
            "--tasks",
            "4",
            "--backend",
            "sync",
            "--path",
            path_text,
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = ok(&flashtree(&args));
        let summary: serde_json::Value =
            serde_json::from_str(out.lines().last().expect("a summary line")).unwrap();
        summary
    };
    for _ in 0..2 {
        let summary = run(&[]);
        assert!(
            summary["load_records_per_sec"].as_f64().is_some(),
            "{summary}"
        );
    }
    let reused = run(&["--reuse"]);
    assert!(reused["load_records_per_sec"].is_null(), "{reused}");
    assert_eq!(std::fs::read(path.join("notes.txt")).unwrap(), b"mine");
}

/// `flashtree compact` moves the leaves of a randomly filled tree, skips
/// a hash tree (or refuses it when named), changes no record, and a
/// second run finds nothing to move.
#[test]
fn compact_orders_leaves_and_changes_no_record() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s");
    let d = dir_str(&store);
    let db = Db::open(&store, store_options()).unwrap();
    let t = db.tree("t").unwrap();
    let h = db.hash_tree("h").unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..3000u64 {
        let k = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16).to_be_bytes();
        batch.put(t, &k, &[7u8; 500]).unwrap();
        if batch.len() == 100 {
            db.write(&batch, WriteOptions::default()).unwrap();
            batch = WriteBatch::new();
        }
    }
    db.put(h, b"k", b"v").unwrap();
    db.close().unwrap();
    let before = ok(&flashtree(&["dump", d]));
    let stats_before: serde_json::Value =
        serde_json::from_str(ok(&flashtree(&["stats", d, "--json"])).trim()).unwrap();
    let order_before = stats_before["trees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "t")
        .unwrap()["leaf_order"]
        .as_f64()
        .unwrap();
    assert!(
        order_before < 0.5,
        "random inserts left leaf order {order_before}"
    );
    let out = ok(&flashtree(&["compact", d]));
    let moved: u64 = out
        .lines()
        .find(|l| l.starts_with("t: "))
        .and_then(|l| l[3..].split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count for tree t in {out:?}"));
    assert!(moved > 100, "{out}");
    let filled: u64 = out
        .lines()
        .find(|l| l.starts_with("t: "))
        .and_then(|l| l.split("), ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fill count for tree t in {out:?}"));
    assert!(filled > 0, "random inserts left no leaf to fill: {out}");
    assert!(out.contains("h: a hash tree"), "{out}");
    assert_eq!(ok(&flashtree(&["dump", d])), before);
    let order = |out: &str| -> f64 {
        let stats: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let t = stats["trees"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "t")
            .unwrap();
        t["leaf_order"].as_f64().unwrap()
    };
    assert_eq!(order(&ok(&flashtree(&["stats", d, "--json"]))), 1.0);
    let again = ok(&flashtree(&["compact", d, "--tree", "t"]));
    assert!(again.starts_with("t: 0 leaves moved"), "{again}");
    assert!(err(&flashtree(&["compact", d, "--tree", "h"])).contains("hash tree"));
    ok(&flashtree(&["check", d]));
}
