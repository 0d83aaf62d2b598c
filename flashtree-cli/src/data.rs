//! Data commands: look inside a store and change it from the shell
//! (`get`, `put`, `delete`, `scan`, `dump`, `load`, `stats`), as LMDB's
//! `mdb_dump`/`mdb_load`/`mdb_stat` and RocksDB's `ldb` do.
//!
//! Keys and values are bytes. On the command line they are taken as UTF-8
//! text, or as hex with `--hex`. Output shows them as text where they are
//! valid UTF-8 without control characters, escaped (`\xNN`) otherwise, or
//! as hex with `--hex`. `dump` writes one JSON object per record:
//! `{"tree":…,"key":…,"value":…}`, with `key_hex`/`value_hex` instead for
//! bytes that are not valid UTF-8, so that `load` restores them exactly.

use flashtree::db::{
    BulkLoadOptions, Db, Durability, Options, ScanDirection, Tree, WriteBatch, WriteOptions,
};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// Where a store is and how to open it.
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// The store's directory, or its first block device (e.g. /dev/nvme0n1).
    pub dir: PathBuf,
    /// More block devices of the store, striped (RAID0) after the first, in
    /// the order the store was created with (repeat the option).
    #[arg(long)]
    pub device: Vec<PathBuf>,
    /// With --create on block devices: erase a device even when it holds a
    /// partition table, a file system or another store.
    #[arg(long)]
    pub force: bool,
    /// Buffer pool size in MiB.
    #[arg(long, default_value_t = 64)]
    pub pool_mib: u64,
}

impl StoreArgs {
    /// The block devices of the store, when its path is one.
    pub fn block_devices(&self) -> Option<Vec<PathBuf>> {
        use std::os::unix::fs::FileTypeExt;
        let is_device = std::fs::metadata(&self.dir).is_ok_and(|m| m.file_type().is_block_device());
        (is_device || !self.device.is_empty()).then(|| {
            std::iter::once(self.dir.clone())
                .chain(self.device.iter().cloned())
                .collect()
        })
    }
}

/// Opens the store at `store` with `options`: a directory, or block
/// devices (created only when `create` was asked for explicitly).
pub fn open_with(store: &StoreArgs, options: Options, create: bool) -> Result<Db, String> {
    let dir = &store.dir;
    if let Some(devices) = store.block_devices() {
        let options = Options {
            create_on_block_devices: create,
            force_create: store.force,
            ..options
        };
        return Db::open_devices(&devices, options).map_err(|e| format!("{}: {e}", dir.display()));
    }
    if !create && !dir.is_dir() {
        return Err(format!(
            "{}: no store there (no such directory)",
            dir.display()
        ));
    }
    Db::open(dir, options).map_err(|e| format!("{}: {e}", dir.display()))
}

/// One record's place.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The tree.
    #[arg(long)]
    pub tree: String,
    /// The key (UTF-8 text, or hex with --hex).
    pub key: String,
    /// Keys and values are given and shown as hex.
    #[arg(long)]
    pub hex: bool,
}

/// `flashtree get`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub at: KeyArgs,
}

/// `flashtree put`.
#[derive(clap::Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    pub at: KeyArgs,
    /// The value (UTF-8 text, or hex with --hex).
    pub value: String,
    /// Create the store (and the tree) if missing; without it a missing
    /// store is an error. A missing tree is always created.
    #[arg(long)]
    pub create: bool,
}

/// `flashtree delete`.
#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub at: KeyArgs,
}

/// `flashtree scan`.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The tree.
    #[arg(long)]
    pub tree: String,
    /// First key (inclusive; default: the first).
    #[arg(long)]
    pub from: Option<String>,
    /// End key (exclusive; default: past the last).
    #[arg(long)]
    pub to: Option<String>,
    /// Descending key order.
    #[arg(long)]
    pub reverse: bool,
    /// At most this many records.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Keys (--from, --to too) and values as hex.
    #[arg(long)]
    pub hex: bool,
}

/// `flashtree dump`.
#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this tree (repeatable; default: every tree).
    #[arg(long)]
    pub tree: Vec<String>,
}

/// `flashtree compact`.
#[derive(clap::Args, Debug)]
pub struct CompactArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this tree (repeatable; default: every B+-tree).
    #[arg(long)]
    pub tree: Vec<String>,
}

/// Moves the leaves of each B+-tree (or of `--tree`) to consecutive page
/// ids in key order (`Db::compact`) and prints what moved, one line per
/// tree. Hash trees have no key order: skipped, or an error when named.
pub fn compact(args: CompactArgs) -> Result<(), String> {
    let dir = &args.store.dir;
    let db = open(&args.store, false)?;
    for name in &named_or_all_trees(&db, &args.tree) {
        let tree = existing_tree(&db, dir, name)?;
        if tree.is_hash() && args.tree.is_empty() {
            println!("{name}: a hash tree (no key order): skipped");
            continue;
        }
        let stats = db
            .compact(tree)
            .map_err(|e| format!("{}: tree {name:?}: {e}", dir.display()))?;
        println!(
            "{name}: {} leaves moved under {} parents ({} already in order, {} changed meanwhile), {} filled from a neighbour, {} emptied into one, in {:.2} s",
            stats.leaves_moved,
            stats.parents,
            stats.parents_in_order,
            stats.parents_changed,
            stats.leaves_filled,
            stats.leaves_emptied,
            stats.micros as f64 / 1e6
        );
    }
    close(db, dir)
}

/// `flashtree load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Read records from this file instead of standard input.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Records per atomic, durable batch. A batch may change at most about
    /// 1,000 pages (half the 8 MiB log buffer as full pages) and each
    /// record up to 3 (its leaf, a split's new leaf and parent): 250 fits
    /// any input; sorted input can take more.
    #[arg(long, default_value_t = 250)]
    pub batch: usize,
    /// Refuse to load into a store that does not exist yet (default: create
    /// it in a directory; on block devices only with --create).
    #[arg(long)]
    pub no_create: bool,
    /// Create the store on block devices that hold none (erases them).
    #[arg(long)]
    pub create: bool,
    /// Bulk load (`Db::bulk_load`): each stretch of consecutive records of
    /// one tree (as `dump` writes them, tree by tree) is sorted and built
    /// into that tree bottom-up, which must be empty; all of a tree's
    /// records or none of them, durable at the end. Much faster than
    /// batches for large inputs in any order.
    #[arg(long)]
    pub bulk: bool,
    /// With --bulk: how full leaves and inner nodes are made, 0.5..=1.0.
    #[arg(long, default_value_t = 1.0)]
    pub fill: f64,
    /// With --bulk: MiB of memory for sorting (default: the pool's size);
    /// more records are sorted in runs through the store's temporary space.
    #[arg(long)]
    pub sort_mib: Option<u64>,
}

/// `flashtree stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn open(store: &StoreArgs, create: bool) -> Result<Db, String> {
    let options = Options {
        pool_bytes: store.pool_mib << 20,
        workers: 1,
        durability: Durability::Sync,
        create_if_missing: create,
        ..Options::default()
    };
    open_with(store, options, create)
}

/// The existing tree `name` (reading commands never create one).
fn existing_tree(db: &Db, dir: &Path, name: &str) -> Result<Tree, String> {
    let names = db.tree_names();
    if !names.iter().any(|n| n == name) {
        let known = if names.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", names.join(", "))
        };
        return Err(format!(
            "{}: no tree named {name:?} ({known})",
            dir.display()
        ));
    }
    db.tree(name).map_err(|e| format!("{}: {e}", dir.display()))
}

/// The trees named with `--tree`, or every tree of the store when none is.
fn named_or_all_trees(db: &Db, named: &[String]) -> Vec<String> {
    if named.is_empty() {
        db.tree_names()
    } else {
        named.to_vec()
    }
}

/// Bytes of a key or value given on the command line.
fn parse_bytes(what: &str, text: &str, hex: bool) -> Result<Vec<u8>, String> {
    if hex {
        hex::decode(text).map_err(|e| format!("{what} {text:?} is not hex: {e}"))
    } else {
        Ok(text.as_bytes().to_vec())
    }
}

/// Bytes shown to a reader: text where it is printable UTF-8, escaped
/// otherwise; hex with `hex`.
pub fn show(bytes: &[u8], hex: bool) -> String {
    if hex {
        return hex::encode(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => bytes.escape_ascii().to_string(),
    }
}

/// The error of `get` and `delete` for a missing key.
fn not_found(key: &[u8], at: &KeyArgs) -> String {
    format!("key {} not found in tree {:?}", show(key, at.hex), at.tree)
}

fn close(db: Db, dir: &Path) -> Result<(), String> {
    db.close().map_err(|e| format!("{}: {e}", dir.display()))
}

/// `flashtree get DIR --tree T KEY`: prints the value; a missing key is
/// an error (exit 1).
pub fn get(args: GetArgs) -> Result<(), String> {
    let at = &args.at;
    let dir = &at.store.dir;
    let key = parse_bytes("key", &at.key, at.hex)?;
    let db = open(&at.store, false)?;
    let tree = existing_tree(&db, dir, &at.tree)?;
    let value = db
        .get(tree, &key)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    close(db, dir)?;
    match value {
        Some(v) => {
            println!("{}", show(&v, at.hex));
            Ok(())
        }
        None => Err(not_found(&key, at)),
    }
}

/// `flashtree put DIR --tree T KEY VALUE`: durable when it returns.
pub fn put(args: PutArgs) -> Result<(), String> {
    let at = &args.at;
    let dir = &at.store.dir;
    let key = parse_bytes("key", &at.key, at.hex)?;
    let value = parse_bytes("value", &args.value, at.hex)?;
    let db = open(&at.store, args.create)?;
    let tree = db
        .tree(&at.tree)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    db.put(tree, &key, &value)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    close(db, dir)
}

/// `flashtree delete DIR --tree T KEY`: a missing key is an error (exit 1).
pub fn delete(args: DeleteArgs) -> Result<(), String> {
    let at = &args.at;
    let dir = &at.store.dir;
    let key = parse_bytes("key", &at.key, at.hex)?;
    let db = open(&at.store, false)?;
    let tree = existing_tree(&db, dir, &at.tree)?;
    let existed = db
        .delete(tree, &key)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    close(db, dir)?;
    if existed {
        Ok(())
    } else {
        Err(not_found(&key, at))
    }
}

/// Every entry of `tree`: a B+-tree's in key order, a hash tree's in hash
/// order (it has no key order); `visit` returns false to stop.
fn for_each_entry(
    db: &Db,
    tree: Tree,
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, String>,
) -> Result<(), String> {
    if !tree.is_hash() {
        return for_each_in_range(db, tree, None, None, false, visit);
    }
    let mut failed = None;
    db.hash_entries(tree, |k, v| match visit(k, v) {
        Ok(more) => more,
        Err(e) => {
            failed = Some(e);
            false
        }
    })
    .map_err(|e| e.to_string())?;
    failed.map_or(Ok(()), Err)
}

/// Visits the records of `tree` with keys in `[from, to)`, in key order or
/// reverse key order, until `visit` returns false.
fn for_each_in_range(
    db: &Db,
    tree: Tree,
    from: Option<&[u8]>,
    to: Option<&[u8]>,
    reverse: bool,
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool, String>,
) -> Result<(), String> {
    let (start, direction) = if reverse {
        (to, ScanDirection::Backward)
    } else {
        (from, ScanDirection::Forward)
    };
    for entry in db.range(tree, start, direction) {
        let (key, value) = entry.map_err(|e| e.to_string())?;
        if to.is_some_and(|to| key.as_slice() >= to) {
            if reverse {
                continue; // the start key itself, or keys at the end bound
            }
            break;
        }
        if from.is_some_and(|from| key.as_slice() < from) {
            if reverse {
                break;
            }
            continue;
        }
        if !visit(&key, &value)? {
            break;
        }
    }
    Ok(())
}

/// `flashtree scan DIR --tree T`: one `key<TAB>value` line per record.
pub fn scan(args: ScanArgs) -> Result<(), String> {
    let dir = &args.store.dir;
    let from = args
        .from
        .as_deref()
        .map(|k| parse_bytes("--from", k, args.hex))
        .transpose()?;
    let to = args
        .to
        .as_deref()
        .map(|k| parse_bytes("--to", k, args.hex))
        .transpose()?;
    let db = open(&args.store, false)?;
    let tree = existing_tree(&db, dir, &args.tree)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut left = args.limit.unwrap_or(u64::MAX);
    if left > 0 {
        for_each_in_range(
            &db,
            tree,
            from.as_deref(),
            to.as_deref(),
            args.reverse,
            |k, v| {
                writeln!(out, "{}\t{}", show(k, args.hex), show(v, args.hex))
                    .map_err(|e| format!("writing the output: {e}"))?;
                left -= 1;
                Ok(left > 0)
            },
        )
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    out.flush()
        .map_err(|e| format!("writing the output: {e}"))?;
    drop(out);
    close(db, dir)
}

/// One record as a JSON object of `dump` and `load`.
fn record_json(tree: &str, hash: bool, key: &[u8], value: &[u8]) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    o.insert("tree".into(), tree.into());
    if hash {
        o.insert("kind".into(), "hash".into());
    }
    for (name, bytes) in [("key", key), ("value", value)] {
        match std::str::from_utf8(bytes) {
            Ok(s) => o.insert(name.into(), s.into()),
            Err(_) => o.insert(format!("{name}_hex"), hex::encode(bytes).into()),
        };
    }
    serde_json::Value::Object(o)
}

/// A record line of `load`: its tree, whether the tree is a hash tree
/// (`"kind": "hash"`; absent or `"btree"`: a B+-tree), key and value.
struct Record {
    tree: String,
    hash: bool,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn parse_record(line: &str) -> Result<Record, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let tree = o
        .get("tree")
        .and_then(|t| t.as_str())
        .ok_or("no \"tree\" string")?
        .to_string();
    let hash = match o.get("kind") {
        None => false,
        Some(k) => match k.as_str() {
            Some("hash") => true,
            Some("btree") => false,
            _ => return Err(format!("\"kind\" is {k}, not \"hash\" or \"btree\"")),
        },
    };
    let field = |name: &str| -> Result<Vec<u8>, String> {
        match (o.get(name), o.get(&format!("{name}_hex"))) {
            (Some(s), None) => s
                .as_str()
                .map(|s| s.as_bytes().to_vec())
                .ok_or(format!("\"{name}\" is not a string")),
            (None, Some(h)) => h
                .as_str()
                .ok_or(format!("\"{name}_hex\" is not a string"))
                .and_then(|h| hex::decode(h).map_err(|e| format!("\"{name}_hex\": {e}"))),
            (Some(_), Some(_)) => Err(format!("both \"{name}\" and \"{name}_hex\"")),
            (None, None) => Err(format!("no \"{name}\" or \"{name}_hex\"")),
        }
    };
    let key = field("key")?;
    let value = field("value")?;
    Ok(Record {
        tree,
        hash,
        key,
        value,
    })
}

/// Tree `name` of the kind a record names, created if missing; a tree
/// that exists with the other kind is an error.
fn tree_of_kind(db: &Db, name: &str, hash: bool) -> Result<Tree, String> {
    let tree = if hash {
        db.hash_tree(name)
    } else {
        db.tree(name)
    }
    .map_err(|e| e.to_string())?;
    if tree.is_hash() != hash {
        return Err(format!(
            "tree {name:?} exists as a {}, the input says it is a {}",
            if tree.is_hash() {
                "hash tree"
            } else {
                "B+-tree"
            },
            if hash { "hash tree" } else { "B+-tree" },
        ));
    }
    Ok(tree)
}

/// `flashtree dump DIR > file.jsonl`.
pub fn dump(args: DumpArgs) -> Result<(), String> {
    let dir = &args.store.dir;
    let db = open(&args.store, false)?;
    let names = named_or_all_trees(&db, &args.tree);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for name in &names {
        let tree = existing_tree(&db, dir, name)?;
        let hash = tree.is_hash();
        for_each_entry(&db, tree, |k, v| {
            serde_json::to_writer(&mut out, &record_json(name, hash, k, v))
                .map_err(|e| format!("writing the output: {e}"))?;
            out.write_all(b"\n")
                .map_err(|e| format!("writing the output: {e}"))?;
            Ok(true)
        })
        .map_err(|e| format!("{}: tree {name:?}: {e}", dir.display()))?;
    }
    out.flush()
        .map_err(|e| format!("writing the output: {e}"))?;
    drop(out);
    close(db, dir)
}

/// `flashtree load DIR < file.jsonl`: the records go in atomic batches of
/// `--batch`, each durable when the next starts; a bad line stops the load
/// before its batch (the batches before it stay).
pub fn load(args: LoadArgs) -> Result<(), String> {
    if args.batch == 0 {
        return Err(flashtree_bench::util::usage_error(
            "--batch must be at least 1",
        ));
    }
    let dir = &args.store.dir;
    let (reader, total_bytes): (Box<dyn BufRead>, Option<u64>) = match &args.input {
        Some(path) => {
            let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let len = file.metadata().ok().map(|m| m.len());
            (Box::new(std::io::BufReader::new(file)), len)
        }
        None => (Box::new(std::io::BufReader::new(std::io::stdin())), None),
    };
    let input_name = args
        .input
        .as_ref()
        .map_or("standard input".to_string(), |p| p.display().to_string());
    let on_devices = args.store.block_devices().is_some();
    let db = open(&args.store, !args.no_create && (!on_devices || args.create))?;
    let bar = match total_bytes {
        Some(len) => flashtree_bench::util::progress_bar(len, "load"),
        None => indicatif::ProgressBar::new_spinner(),
    };
    if args.bulk {
        let records = bulk_load_trees(&db, &args, reader, &input_name, &bar)?;
        bar.finish_and_clear();
        close(db, dir)?;
        eprintln!("bulk loaded {records} records into {}", dir.display());
        return Ok(());
    }
    let mut trees: HashMap<String, Tree> = HashMap::new();
    let mut batch = WriteBatch::new();
    let mut records = 0u64;
    let commit = |batch: &mut WriteBatch| -> Result<(), String> {
        db.write(batch, WriteOptions::default())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        batch.clear();
        Ok(())
    };
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("{input_name}: line {}: {e}", n + 1))?;
        bar.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let Record {
            tree: name,
            hash,
            key,
            value,
        } = parse_record(&line).map_err(|e| format!("{input_name}: line {}: {e}", n + 1))?;
        let tree = match trees.get(&name) {
            Some(&t) if t.is_hash() == hash => t,
            _ => {
                let t = tree_of_kind(&db, &name, hash)
                    .map_err(|e| format!("{input_name}: line {}: {e}", n + 1))?;
                trees.insert(name, t);
                t
            }
        };
        batch
            .put(tree, &key, &value)
            .map_err(|e| format!("{input_name}: line {}: {e}", n + 1))?;
        records += 1;
        if batch.len() >= args.batch {
            commit(&mut batch)?;
        }
    }
    if !batch.is_empty() {
        commit(&mut batch)?;
    }
    bar.finish_and_clear();
    close(db, dir)?;
    eprintln!("loaded {records} records into {}", dir.display());
    Ok(())
}

/// A record of the input: (line index, tree, key, value).
type LineRecord = (usize, String, Vec<u8>, Vec<u8>);

/// `flashtree load --bulk`: one bulk load per stretch of records of one
/// tree; returns the records read.
fn bulk_load_trees(
    db: &Db,
    args: &LoadArgs,
    reader: Box<dyn BufRead>,
    input_name: &str,
    bar: &indicatif::ProgressBar,
) -> Result<u64, String> {
    let dir = &args.store.dir;
    let options = BulkLoadOptions {
        fill_factor: args.fill,
        sort_memory_bytes: args.sort_mib.map(|m| m << 20),
    };
    let mut lines = reader.lines().enumerate();
    // The first record of the next tree, read by the load before.
    let mut carry: Option<LineRecord> = None;
    let mut done: Vec<String> = Vec::new();
    let mut records = 0u64;
    // The next record of the input, or an error naming its line.
    let mut next_record = move || -> Option<Result<LineRecord, String>> {
        for (n, line) in lines.by_ref() {
            let line = match line {
                Ok(l) => l,
                Err(e) => return Some(Err(format!("{input_name}: line {}: {e}", n + 1))),
            };
            bar.inc(line.len() as u64 + 1);
            if line.trim().is_empty() {
                continue;
            }
            return Some(
                parse_record(&line)
                    .and_then(|r| {
                        if r.hash {
                            Err(format!(
                                "tree {:?} is a hash tree: load it without --bulk (a hash tree has no key order to build from)",
                                r.tree
                            ))
                        } else {
                            Ok((n, r.tree, r.key, r.value))
                        }
                    })
                    .map_err(|e| format!("{input_name}: line {}: {e}", n + 1)),
            );
        }
        None
    };
    loop {
        let first = match carry.take() {
            Some(r) => r,
            None => match next_record() {
                None => return Ok(records),
                Some(r) => r?,
            },
        };
        let (line, name, key, value) = first;
        if done.contains(&name) {
            return Err(format!(
                "{input_name}: line {}: tree {name:?} was loaded by an earlier stretch of the input; --bulk needs each tree's records together",
                line + 1
            ));
        }
        let tree = db
            .tree(&name)
            .map_err(|e| format!("{input_name}: line {}: {e}", line + 1))?;
        let mut error: Option<String> = None;
        let mut count = 0u64;
        let stretch = std::iter::once(Ok((key, value))).chain(std::iter::from_fn(|| {
            if error.is_some() || carry.is_some() {
                return None;
            }
            match next_record()? {
                Ok((_, t, k, v)) if t == name => Some(Ok((k, v))),
                Ok(other) => {
                    carry = Some(other);
                    None
                }
                Err(e) => {
                    error = Some(e.clone());
                    Some(Err(flashtree::Error::InvalidArgument(e)))
                }
            }
        }));
        let counted = stretch.inspect(|_| count += 1);
        let result = db.bulk_load_with(tree, counted, &options);
        if let Some(e) = error {
            return Err(e);
        }
        result.map_err(|e| format!("{}: tree {name:?}: {e}", dir.display()))?;
        records += count;
        done.push(name);
    }
}

/// What `flashtree stats` reports.
#[derive(serde::Serialize)]
struct StoreStats {
    trees: Vec<TreeStats>,
    records: u64,
    pages_allocated: u64,
    pages_inner: u64,
    pages_leaf: u64,
    pages_free: u64,
    pages_leaked: u64,
    /// Bytes of keys and values over the bytes of the leaves.
    leaf_fill: f64,
    store_bytes: u64,
    data_bytes: u64,
    /// Blocks the data files hold on disk (freed pages are discarded, so
    /// this may be below `data_bytes`).
    data_allocated_bytes: u64,
    log_bytes: u64,
    /// How writes are placed by lifetime (`Db::placement`).
    placement: String,
    /// The regions of each device (from its superblock) and how full each is.
    regions: Vec<RegionStats>,
}

#[derive(serde::Serialize)]
struct RegionStats {
    device: String,
    region: &'static str,
    start: u64,
    /// 0 for a file's data region: it grows.
    bytes: u64,
    /// What is in use: the last checkpoint (in each slot), the log rings,
    /// nothing in temp (bulk loading, its user, is not built yet), the
    /// allocated pages' share of this device.
    used_bytes: u64,
}

/// The regions of every device of `db`, with what each holds.
fn region_stats(db: &Db, pages_allocated: u64) -> Vec<RegionStats> {
    let layout = db.layout();
    let n = layout.len() as u64;
    let checkpoint_bytes = db.checkpoint_bytes();
    let mut out = Vec::new();
    for (path, sb) in &layout {
        let device = path.display().to_string();
        let r = &sb.regions;
        if sb.regions_on_devices() {
            let slots = r.checkpoint.bytes / sb.checkpoint_slot_bytes.max(1);
            out.push(RegionStats {
                device: device.clone(),
                region: "checkpoint",
                start: r.checkpoint.start,
                bytes: r.checkpoint.bytes,
                used_bytes: checkpoint_bytes * slots,
            });
            out.push(RegionStats {
                device: device.clone(),
                region: "log",
                start: r.log.start,
                bytes: r.log.bytes,
                used_bytes: r.log.bytes,
            });
            out.push(RegionStats {
                device: device.clone(),
                region: "temp",
                start: r.temp.start,
                bytes: r.temp.bytes,
                used_bytes: 0,
            });
        }
        out.push(RegionStats {
            device,
            region: "data",
            start: r.data.start,
            bytes: r.data.bytes,
            used_bytes: pages_allocated.div_ceil(n) * flashtree::io::PAGE_SIZE as u64,
        });
    }
    out
}

#[derive(serde::Serialize)]
struct TreeStats {
    name: String,
    records: u64,
    inner_pages: u64,
    leaf_pages: u64,
    key_value_bytes: u64,
    leaf_fill: f64,
    /// Share of the leaves whose next leaf in key order is the next page
    /// id (1 after `flashtree compact`; random inserts leave about 0).
    leaf_order: f64,
}

/// `flashtree stats DIR`: checks the store (as `flashtree check`) and
/// counts its records, pages and bytes.
pub fn stats(args: StatsArgs) -> Result<(), String> {
    let dir = &args.store.dir;
    let db = open(&args.store, false)?;
    let report = db.check().map_err(|e| format!("{}: {e}", dir.display()))?;
    let page_bytes = flashtree::io::PAGE_SIZE as f64;
    let mut trees = Vec::new();
    for (name, shape) in &report.trees {
        let tree = existing_tree(&db, dir, name)?;
        let mut key_value_bytes = 0u64;
        for_each_entry(&db, tree, |k, v| {
            key_value_bytes += (k.len() + v.len()) as u64;
            Ok(true)
        })
        .map_err(|e| format!("{}: tree {name:?}: {e}", dir.display()))?;
        trees.push(TreeStats {
            name: name.clone(),
            records: shape.entries,
            inner_pages: shape.inner_nodes,
            leaf_pages: shape.leaves,
            key_value_bytes,
            leaf_fill: key_value_bytes as f64 / (shape.leaves.max(1) as f64 * page_bytes),
            leaf_order: if tree.is_hash() || shape.leaves < 2 {
                1.0
            } else {
                shape.leaves_in_order as f64 / (shape.leaves - 1) as f64
            },
        });
    }
    let placement = db.placement().to_string();
    let regions = region_stats(&db, report.pages_allocated);
    let on_devices = args.store.block_devices().is_some();
    close(db, dir)?;
    let (mut data_bytes, mut log_bytes, mut store_bytes) = (0, 0, 0);
    let mut data_allocated_bytes = 0;
    let entries = if on_devices {
        for r in &regions {
            store_bytes += r.bytes;
            match r.region {
                "log" => log_bytes += r.bytes,
                "data" => data_bytes += r.bytes,
                _ => {}
            }
        }
        // Discarded pages stay part of a device's size.
        data_allocated_bytes = data_bytes;
        Vec::new()
    } else {
        std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .collect()
    };
    for entry in entries.into_iter().flatten() {
        let metadata = entry.metadata().ok();
        let len = metadata.as_ref().map_or(0, |m| m.len());
        let name = entry.file_name().to_string_lossy().to_string();
        store_bytes += len;
        if name.contains(".wal") {
            log_bytes += len;
        } else if !name.contains(".ckpt") {
            data_bytes += len;
            data_allocated_bytes +=
                metadata.map_or(0, |m| std::os::unix::fs::MetadataExt::blocks(&m) * 512);
        }
    }
    let leaves: u64 = trees.iter().map(|t| t.leaf_pages).sum();
    let kv: u64 = trees.iter().map(|t| t.key_value_bytes).sum();
    let stats = StoreStats {
        records: trees.iter().map(|t| t.records).sum(),
        pages_allocated: report.pages_allocated,
        pages_inner: trees.iter().map(|t| t.inner_pages).sum(),
        pages_leaf: leaves,
        pages_free: report.pages_free,
        pages_leaked: report.pages_leaked,
        leaf_fill: kv as f64 / (leaves.max(1) as f64 * page_bytes),
        trees,
        store_bytes,
        data_bytes,
        data_allocated_bytes,
        log_bytes,
        placement,
        regions,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&stats).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "{:<24} {:>12} {:>12} {:>12} {:>14} {:>10} {:>11}",
        "tree", "records", "inner pages", "leaf pages", "key+value B", "leaf fill", "leaf order"
    );
    for t in &stats.trees {
        println!(
            "{:<24} {:>12} {:>12} {:>12} {:>14} {:>9.0}% {:>10.0}%",
            t.name,
            t.records,
            t.inner_pages,
            t.leaf_pages,
            t.key_value_bytes,
            t.leaf_fill * 100.0,
            t.leaf_order * 100.0
        );
    }
    println!(
        "pages: {} allocated, {} inner, {} leaf, {} free, {} leaked; leaf fill {:.0}%",
        stats.pages_allocated,
        stats.pages_inner,
        stats.pages_leaf,
        stats.pages_free,
        stats.pages_leaked,
        stats.leaf_fill * 100.0
    );
    if on_devices {
        println!(
            "bytes: {} in the store's regions ({} data, {} log; the rest checkpoint slots and temp)",
            stats.store_bytes, stats.data_bytes, stats.log_bytes
        );
    } else {
        println!(
            "bytes: {} in the store ({} data, {} of them allocated on disk; {} log; the rest checkpoint slots)",
            stats.store_bytes, stats.data_bytes, stats.data_allocated_bytes, stats.log_bytes
        );
    }
    println!("placement: {}", stats.placement);
    println!(
        "{:<28} {:<11} {:>14} {:>16} {:>16}",
        "device", "region", "start", "bytes", "used bytes"
    );
    for r in &stats.regions {
        let bytes = if r.bytes == 0 && r.region == "data" {
            "grows".to_string()
        } else {
            r.bytes.to_string()
        };
        println!(
            "{:<28} {:<11} {:>14} {:>16} {:>16}",
            r.device, r.region, r.start, bytes, r.used_bytes
        );
    }
    if !on_devices {
        println!("(a store in files keeps its checkpoint slots and logs in files beside data.ft)");
    }
    Ok(())
}
