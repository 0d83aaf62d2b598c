//! `bench recover --engines LIST`: the same crash on every engine. For each
//! engine a child process opens it in the `sync` durability mode and writes
//! from `--threads` threads, each a loop of puts over its own keys,
//! committed in turn as a single put, a one-entry batch, and a one-entry
//! batch with early lock release ([`Commit`]); after each put returns, the child prints an acknowledgement on its
//! stdout. After `--seconds` the parent kills the child with SIGKILL,
//! reopens the engine in this process, times the open and the first read,
//! and reads every key back: a key whose stored version is older than the
//! last one acknowledged for it is a lost acknowledged commit.
//!
//! Values: the 8-byte little-endian version (the writing thread's put
//! number `i`) then filler, [`VALUE_BYTES`] in all. Thread `t` of `T`
//! writes key number `t * K + i % K` (`K` = keys per thread), so the last
//! acknowledged version of each key follows from the last acknowledged `i`
//! of its thread.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use flashtree_peers::adapters::fjall::FjallEngine;
use flashtree_peers::adapters::lmdb::{LmdbEngine, LmdbSource};
use flashtree_peers::adapters::redb::RedbEngine;
use flashtree_peers::adapters::rocks::RocksEngine;
use flashtree_peers::adapters::wiredtiger::WtEngine;
use flashtree_peers::{block_on, DurabilityMode, Engine, EngineConfig, HandleSource, Kv};

use flashtree::db::{WriteBatch, WriteOptions};

use crate::adapter::{FlashtreeEngine, FlashtreeSettings};

/// Bytes of each value.
const VALUE_BYTES: usize = 100;
/// The environment variable that makes `bench recover` the writing child of
/// engine `<value>`.
const KILL_CHILD_ENV: &str = "FLASHTREE_KILL_CHILD";

/// What `bench recover --engines` needs.
#[derive(Debug, Clone)]
pub struct KillSpec {
    pub engines: Vec<String>,
    pub dir: std::path::PathBuf,
    pub memory_bytes: u64,
    pub threads: usize,
    pub keys: u64,
    pub seconds: f64,
    pub json: bool,
}

/// One engine's row.
#[derive(Debug, serde::Serialize)]
struct KillRow {
    engine: String,
    durability: String,
    acknowledged_commits: u64,
    acknowledged_commits_per_sec: f64,
    reopen_seconds: f64,
    first_read_seconds: f64,
    bytes_on_disk: u64,
    keys_checked: u64,
    lost_acknowledged_commits: u64,
}

fn key_of(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

fn value_of(version: u64) -> Vec<u8> {
    let mut value = version.to_le_bytes().to_vec();
    value.resize(VALUE_BYTES, (version % 251) as u8);
    value
}

/// How a writer commits one put: the ways a workload commits, taken in
/// turn, so that the kill meets each of them.
#[derive(Clone, Copy)]
enum Commit {
    /// A single put.
    Put,
    /// A one-entry batch ([`Kv::commit`]).
    Batch,
    /// A one-entry batch with early release ([`Kv::commit_releasing`]):
    /// applied first, acknowledged once durable.
    Releasing,
}

impl Commit {
    fn of(i: u64) -> Commit {
        [Commit::Put, Commit::Batch, Commit::Releasing][(i % 3) as usize]
    }
}

/// A put-and-get handle on one thread, whatever the engine.
trait PutGet {
    fn put(&self, key: &[u8], value: &[u8], way: Commit) -> Result<(), String>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
}

struct PeerHandle<H: Kv>(H);

impl<H: Kv> PutGet for PeerHandle<H> {
    fn put(&self, key: &[u8], value: &[u8], way: Commit) -> Result<(), String> {
        let mut batch = flashtree_peers::KvBatch::new();
        batch.put(0, key, value);
        block_on(async {
            match way {
                Commit::Put => self.0.put(0, key, value).await,
                Commit::Batch => self.0.commit(&batch).await,
                Commit::Releasing => self.0.commit_releasing(&batch, &mut || {}).await,
            }
        })
        .map_err(|e| e.to_string())
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut out = Vec::new();
        let found = block_on(self.0.get(0, key, &mut out)).map_err(|e| e.to_string())?;
        Ok(found.then_some(out))
    }
}

struct FlashtreeHandle<'a>(&'a flashtree::db::Db, flashtree::db::Tree);

impl PutGet for FlashtreeHandle<'_> {
    /// The batch ways as the flashtree adapter commits them: `Releasing`
    /// applies the batch unsynced, then waits with an empty synced write.
    fn put(&self, key: &[u8], value: &[u8], way: Commit) -> Result<(), String> {
        let (db, tree) = (self.0, self.1);
        let mut batch = WriteBatch::new();
        batch.put(tree, key, value).map_err(|e| e.to_string())?;
        match way {
            Commit::Put => db.put(tree, key, value),
            Commit::Batch => db.write(&batch, WriteOptions::default()),
            Commit::Releasing => db
                .write(&batch, WriteOptions { sync: Some(false) })
                .and_then(|()| db.write(&WriteBatch::new(), WriteOptions::default())),
        }
        .map_err(|e| e.to_string())
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        self.0.get(self.1, key).map_err(|e| e.to_string())
    }
}

/// An engine opened by name, with a way to get a handle on any thread.
enum Opened {
    Flashtree(Box<FlashtreeEngine>),
    Rocks(RocksEngine),
    Wt(WtEngine),
    Lmdb(LmdbEngine),
    Redb(RedbEngine),
    Fjall(FjallEngine),
}

impl Opened {
    fn open(name: &str, config: &EngineConfig) -> Result<Opened, String> {
        std::fs::create_dir_all(&config.dir)
            .map_err(|e| format!("cannot create {}: {e}", config.dir.display()))?;
        Ok(match name {
            "flashtree" => Opened::Flashtree(Box::new(FlashtreeEngine::open(
                config,
                &FlashtreeSettings {
                    workers: Some(1),
                    ..FlashtreeSettings::default()
                },
            )?)),
            "rocksdb" => Opened::Rocks(RocksEngine::open(config)?),
            "wiredtiger" => Opened::Wt(WtEngine::open(config)?),
            "lmdb" => Opened::Lmdb(LmdbEngine::open(config)?),
            "redb" => Opened::Redb(RedbEngine::open(config)?),
            "fjall" => Opened::Fjall(FjallEngine::open(config)?),
            other => return Err(format!("unknown engine {other:?}")),
        })
    }

    /// Runs `f` with a handle of this thread's own.
    fn with_handle<T>(&self, f: impl FnOnce(&dyn PutGet) -> T) -> Result<T, String> {
        fn peer<S: HandleSource, T>(
            source: &S,
            f: impl FnOnce(&dyn PutGet) -> T,
        ) -> Result<T, String> {
            Ok(f(&PeerHandle(source.open_handle()?)))
        }
        match self {
            Opened::Flashtree(engine) => {
                let db = engine.db();
                let tree = db.tree("t0").map_err(|e| e.to_string())?;
                Ok(f(&FlashtreeHandle(db, tree)))
            }
            Opened::Rocks(engine) => peer(engine, f),
            Opened::Wt(engine) => peer(engine, f),
            Opened::Lmdb(engine) => peer(&LmdbSource(engine), f),
            Opened::Redb(engine) => peer(engine, f),
            Opened::Fjall(engine) => peer(engine, f),
        }
    }

    fn close(self) -> Result<(), String> {
        let engine: Box<dyn Engine> = match self {
            Opened::Flashtree(e) => e,
            Opened::Rocks(e) => Box::new(e),
            Opened::Wt(e) => Box::new(e),
            Opened::Lmdb(e) => Box::new(e),
            Opened::Redb(e) => Box::new(e),
            Opened::Fjall(e) => Box::new(e),
        };
        engine.close()
    }
}

fn config(spec: &KillSpec, engine: &str) -> EngineConfig {
    EngineConfig {
        dir: spec.dir.join(engine),
        memory_bytes: spec.memory_bytes,
        table_count: 1,
        threads_max: spec.threads,
        cores: Vec::new(),
        durability: DurabilityMode::Sync,
    }
}

fn keys_per_thread(spec: &KillSpec) -> u64 {
    (spec.keys / spec.threads as u64).max(1)
}

/// True in the writing child (then [`run_child`] is what to run).
pub fn child_engine() -> Option<String> {
    std::env::var(KILL_CHILD_ENV).ok()
}

/// The writing child: opens `engine`, prints `READY`, then writes until
/// killed, printing `A <thread> <i>` after each put returns.
pub fn run_child(spec: &KillSpec, engine: &str) -> Result<(), String> {
    let opened = Opened::open(engine, &config(spec, engine))?;
    let per_thread = keys_per_thread(spec);
    println!("READY");
    std::thread::scope(|scope| {
        let joins: Vec<_> = (0..spec.threads as u64)
            .map(|thread| {
                let opened = &opened;
                scope.spawn(move || -> Result<(), String> {
                    opened.with_handle(|handle| -> Result<(), String> {
                        let stdout = std::io::stdout();
                        for i in 0u64.. {
                            let key = key_of(thread * per_thread + i % per_thread);
                            handle.put(&key, &value_of(i), Commit::of(i))?;
                            let mut out = stdout.lock();
                            writeln!(out, "A {thread} {i}")
                                .and_then(|()| out.flush())
                                .map_err(|e| format!("acknowledging: {e}"))?;
                        }
                        Ok(())
                    })?
                })
            })
            .collect();
        for join in joins {
            join.join().map_err(|_| "a writing thread panicked")??;
        }
        Ok(())
    })
}

fn bytes_under(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => bytes_under(&entry.path()),
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                meta.blocks() * 512
            }
            Err(_) => 0,
        })
        .sum()
}

fn run_engine(spec: &KillSpec, engine: &str) -> Result<KillRow, String> {
    let dir = spec.dir.join(engine);
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(KILL_CHILD_ENV, engine)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the writing child: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    // Read acknowledgements on a thread, so that the kill comes on time
    // however fast they arrive.
    let threads = spec.threads;
    let reader = std::thread::spawn(move || {
        let mut last = vec![None::<u64>; threads];
        let mut ready = None;
        let mut count = 0u64;
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if line == "READY" {
                ready = Some(Instant::now());
                continue;
            }
            let mut parts = line.split(' ').skip(1);
            let thread = parts.next().and_then(|t| t.parse::<usize>().ok());
            let i = parts.next().and_then(|i| i.parse::<u64>().ok());
            if let (Some(thread), Some(i)) = (thread, i) {
                if thread < last.len() {
                    last[thread] = Some(last[thread].map_or(i, |l: u64| l.max(i)));
                    count += 1;
                }
            }
        }
        (last, ready, count)
    });
    let bar = crate::util::progress_bar((spec.seconds * 10.0) as u64, engine);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < spec.seconds {
        if let Ok(Some(status)) = child.try_wait() {
            bar.finish_and_clear();
            return Err(format!(
                "{engine}: the writing child ended early ({status})"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
        bar.inc(1);
    }
    bar.finish_and_clear();
    child.kill().map_err(|e| format!("{engine}: kill: {e}"))?;
    let _ = child.wait();
    let (last, ready, acknowledged) = reader.join().map_err(|_| "the reader panicked")?;
    let writing_seconds = ready.map_or(0.0, |r| r.elapsed().as_secs_f64());
    let bytes_on_disk = bytes_under(&dir);
    let open_start = Instant::now();
    let opened = Opened::open(engine, &config(spec, engine))
        .map_err(|e| format!("{engine}: reopen after the kill: {e}"))?;
    let reopen_seconds = open_start.elapsed().as_secs_f64();
    let per_thread = keys_per_thread(spec);
    let (first_read_seconds, lost, checked) = opened.with_handle(|handle| {
        handle.get(&key_of(0))?;
        let first_read_seconds = open_start.elapsed().as_secs_f64();
        let (mut lost, mut checked) = (0u64, 0u64);
        for (thread, last) in last.iter().enumerate() {
            let Some(last) = *last else { continue };
            for slot in 0..per_thread.min(last + 1) {
                // The last version of this key at or before `last`.
                let acked = last - (last + per_thread - slot) % per_thread;
                let key = key_of(thread as u64 * per_thread + slot);
                let stored = handle.get(&key)?.and_then(|v| {
                    v.get(..8)
                        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                });
                checked += 1;
                if stored.is_none_or(|version| version < acked) {
                    lost += 1;
                }
            }
        }
        Ok::<_, String>((first_read_seconds, lost, checked))
    })??;
    opened.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(KillRow {
        engine: engine.to_string(),
        durability: flashtree_peers::adapters::durability(engine, DurabilityMode::Sync).into(),
        acknowledged_commits: acknowledged,
        acknowledged_commits_per_sec: acknowledged as f64 / writing_seconds.max(1e-9),
        reopen_seconds,
        first_read_seconds,
        bytes_on_disk,
        keys_checked: checked,
        lost_acknowledged_commits: lost,
    })
}

/// Runs the kill test on every engine of `spec`, prints one table (or JSON
/// lines), and fails if any engine lost an acknowledged commit.
pub fn run(spec: &KillSpec) -> Result<(), String> {
    if spec.threads == 0 || spec.keys == 0 || spec.seconds <= 0.0 {
        return Err("--threads, --keys and --seconds must be > 0".into());
    }
    let mut rows = Vec::new();
    for engine in &spec.engines {
        rows.push(run_engine(spec, engine)?);
    }
    if spec.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row).map_err(|e| e.to_string())?);
        }
    } else {
        println!(
            "{:<12} {:>12} {:>12} {:>10} {:>13} {:>12} {:>10} {:>6}",
            "engine",
            "acked",
            "acked/s",
            "reopen s",
            "first read s",
            "MB on disk",
            "checked",
            "lost"
        );
        for r in &rows {
            println!(
                "{:<12} {:>12} {:>12.0} {:>10.3} {:>13.3} {:>12.1} {:>10} {:>6}",
                r.engine,
                r.acknowledged_commits,
                r.acknowledged_commits_per_sec,
                r.reopen_seconds,
                r.first_read_seconds,
                r.bytes_on_disk as f64 / 1e6,
                r.keys_checked,
                r.lost_acknowledged_commits
            );
        }
        println!("durability sync for every engine:");
        for r in &rows {
            println!("  {}: {}", r.engine, r.durability);
        }
    }
    let lost: Vec<String> = rows
        .iter()
        .filter(|r| r.lost_acknowledged_commits > 0)
        .map(|r| format!("{} lost {}", r.engine, r.lost_acknowledged_commits))
        .collect();
    if lost.is_empty() {
        Ok(())
    } else {
        Err(format!("acknowledged commits lost: {}", lost.join(", ")))
    }
}
