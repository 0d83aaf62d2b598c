//! `flashtree bench bulk`: N records (8-byte big-endian keys, 120-byte
//! values, as `bench lookup`'s) in random order, loaded into a new store
//! by `Db::bulk_load` and, for comparison, by batched inserts (`WriteBatch`
//! commits from many tasks per worker); then the bulk-loaded store is
//! checked: a full scan must return every record in key order with its
//! value, and random lookups must find theirs.

use crate::lookup::{record_key, record_value};
use crate::util::{parse_size_bytes, usage_error};
use flashtree::db::{BulkLoadOptions, Db, Durability, Options, ScanDirection, WriteBatch};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// `flashtree bench bulk`.
#[derive(clap::Args, Debug)]
pub struct BulkArgs {
    /// Records.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Buffer pool.
    #[arg(long, default_value = "128MiB")]
    pub pool: String,
    /// Directory for the stores (each mode makes its own under it).
    #[arg(long, default_value = "flashtree-bulk")]
    pub path: PathBuf,
    /// What to run: bulk, batches, both, or rocksdb (RocksDB's bulk path:
    /// the records sorted in memory, written by its SstFileWriter into SST
    /// files of 256 MiB, ingested).
    #[arg(long, default_value = "both")]
    pub mode: String,
    /// Records per batch (batched inserts).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Tasks per worker committing batches.
    #[arg(long, default_value_t = 64)]
    pub tasks: usize,
    /// Durability of the batched inserts: sync, buffered or none.
    #[arg(long, default_value = "buffered")]
    pub durability: String,
    /// Bulk load fill factor.
    #[arg(long, default_value_t = 1.0)]
    pub fill: f64,
    /// Bulk load sort memory in MiB (default: the pool's size).
    #[arg(long)]
    pub sort_mib: Option<u64>,
    /// Random lookups checked on the bulk-loaded store (after a full scan).
    #[arg(long, default_value_t = 100_000)]
    pub lookups: u64,
    /// Stop a batched-insert run after this many seconds (its rate is
    /// then over the records it loaded).
    #[arg(long)]
    pub max_seconds: Option<f64>,
    /// Keep the stores.
    #[arg(long)]
    pub keep: bool,
}

/// Runs the benchmark; prints one JSON line per mode.
pub fn run(args: BulkArgs) -> Result<(), String> {
    let pool = parse_size_bytes(&args.pool)?;
    if args.records == 0 || args.records > u32::MAX as u64 {
        return Err(usage_error("--records must be in 1..=2^32-1"));
    }
    let mut order: Vec<u32> = (0..args.records as u32).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(0xB01C));
    let modes: &[&str] = match args.mode.as_str() {
        "both" => &["bulk", "batches"],
        "bulk" => &["bulk"],
        "batches" => &["batches"],
        "rocksdb" => &["rocksdb"],
        _ => return Err(usage_error("--mode must be bulk, batches, both or rocksdb")),
    };
    for &mode in modes {
        let dir = args.path.join(mode);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let line = match mode {
            "bulk" => run_bulk(&args, &dir, pool, &order)?,
            "rocksdb" => run_rocksdb(&args, &dir, pool, &order)?,
            _ => run_batches(&args, &dir, pool, &order)?,
        };
        println!("{line}");
        if !args.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}

fn options(pool: u64, durability: Durability) -> Options {
    Options {
        pool_bytes: pool,
        workers: 1,
        durability,
        ..Options::default()
    }
}

fn run_bulk(args: &BulkArgs, dir: &Path, pool: u64, order: &[u32]) -> Result<String, String> {
    let db = Db::open(dir, options(pool, Durability::Sync)).map_err(|e| e.to_string())?;
    let tree = db.tree("bench").map_err(|e| e.to_string())?;
    let started = Instant::now();
    let stats = db
        .bulk_load_with(
            tree,
            order
                .iter()
                .map(|&i| Ok((record_key(i as u64), record_value(i as u64)))),
            &BulkLoadOptions {
                fill_factor: args.fill,
                sort_memory_bytes: args.sort_mib.map(|m| m << 20),
            },
        )
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    // A full scan: every record, in key order, with its value.
    let scan_started = Instant::now();
    let mut next = 0u64;
    for record in db.range(tree, None, ScanDirection::Forward) {
        let (key, value) = record.map_err(|e| e.to_string())?;
        if key != record_key(next) || value != record_value(next) {
            return Err(format!("scan: record {next} is wrong"));
        }
        next += 1;
    }
    if next != args.records {
        return Err(format!("scan: {next} records, not {}", args.records));
    }
    let scan_seconds = scan_started.elapsed().as_secs_f64();
    let lookups_started = Instant::now();
    let wrong = Arc::new(AtomicU64::new(0));
    let per_task = args.lookups.div_ceil(256);
    let records = args.records;
    {
        let wrong = wrong.clone();
        db.run(256, move |ctx| {
            let wrong = wrong.clone();
            async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(ctx.task_index() as u64);
                let mut value = Vec::new();
                for _ in 0..per_task {
                    let i = rng.random_range(0..records);
                    let found = ctx.get(tree, &record_key(i), &mut value).await;
                    if !matches!(found, Ok(true)) || value != record_value(i) {
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
        .map_err(|e| e.to_string())?;
    }
    let lookup_seconds = lookups_started.elapsed().as_secs_f64();
    if wrong.load(Ordering::Relaxed) > 0 {
        return Err(format!(
            "{} lookups found a wrong value",
            wrong.load(Ordering::Relaxed)
        ));
    }
    db.close().map_err(|e| e.to_string())?;
    Ok(serde_json::json!({
        "mode": "bulk",
        "records": args.records,
        "pool_bytes": pool,
        "seconds": seconds,
        "records_per_sec": args.records as f64 / seconds,
        "runs": stats.runs,
        "merge_passes": stats.merge_passes,
        "temp_bytes_written": stats.temp_bytes_written,
        "leaves": stats.leaves,
        "inner_nodes": stats.inner_nodes,
        "pages_unused": stats.pages_unused,
        "sort_s": stats.sort_micros as f64 / 1e6,
        "build_s": stats.build_micros as f64 / 1e6,
        "commit_s": stats.commit_micros as f64 / 1e6,
        "scan_checked_records": next,
        "scan_s": scan_seconds,
        "lookups_checked": per_task * 256,
        "lookups_s": lookup_seconds,
    })
    .to_string())
}

fn run_batches(args: &BulkArgs, dir: &Path, pool: u64, order: &[u32]) -> Result<String, String> {
    let durability = match args.durability.as_str() {
        "sync" => Durability::Sync,
        "buffered" => Durability::Buffered { max_delay_ms: 10 },
        "none" => Durability::None,
        _ => return Err(usage_error("--durability must be sync, buffered or none")),
    };
    let db = Db::open(dir, options(pool, durability)).map_err(|e| e.to_string())?;
    let tree = db.tree("bench").map_err(|e| e.to_string())?;
    let order: Arc<Vec<u32>> = Arc::new(order.to_vec());
    let tasks = args.tasks.max(1);
    let per_task = order.len().div_ceil(tasks);
    let batch_len = args.batch.max(1);
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(None::<String>));
    let deadline = args
        .max_seconds
        .map(|s| Instant::now() + std::time::Duration::from_secs_f64(s));
    let started = Instant::now();
    {
        let (done, failed) = (done.clone(), failed.clone());
        db.run(tasks, move |ctx| {
            let (order, done, failed) = (order.clone(), done.clone(), failed.clone());
            async move {
                let first = ctx.task_index() * per_task;
                let end = (first + per_task).min(order.len());
                for chunk in order[first.min(end)..end].chunks(batch_len) {
                    if deadline.is_some_and(|d| Instant::now() > d) {
                        return;
                    }
                    let mut batch = WriteBatch::new();
                    for &i in chunk {
                        let (k, v) = (record_key(i as u64), record_value(i as u64));
                        if let Err(e) = batch.put(tree, &k, &v) {
                            failed.lock().unwrap().get_or_insert(e.to_string());
                            return;
                        }
                    }
                    if let Err(e) = ctx.write(&batch).await {
                        failed.lock().unwrap().get_or_insert(e.to_string());
                        return;
                    }
                    done.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            }
        })
        .map_err(|e| e.to_string())?;
    }
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(format!("batched inserts failed: {e}"));
    }
    db.sync().map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let loaded = done.load(Ordering::Relaxed);
    db.close().map_err(|e| e.to_string())?;
    Ok(serde_json::json!({
        "mode": "batches",
        "records": args.records,
        "records_loaded": loaded,
        "pool_bytes": pool,
        "durability": args.durability,
        "batch": batch_len,
        "tasks": tasks,
        "seconds": seconds,
        "records_per_sec": loaded as f64 / seconds,
    })
    .to_string())
}

/// RocksDB's fastest bulk path on the same records: sort (in memory: the
/// record numbers, from which keys and values are made), SstFileWriter
/// into files of at most 256 MiB, `ingest_external_file` with the files
/// moved (linked) into the database; then random lookups are checked.
fn run_rocksdb(args: &BulkArgs, dir: &Path, pool: u64, order: &[u32]) -> Result<String, String> {
    use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options as RocksOptions, DB};
    let mut table = BlockBasedOptions::default();
    table.set_block_size(4096);
    table.set_bloom_filter(10.0, false);
    let cache = Cache::new_lru_cache(pool as usize).map_err(|e| e.to_string())?;
    table.set_block_cache(&cache);
    table.set_cache_index_and_filter_blocks(true);
    let mut opts = RocksOptions::default();
    opts.create_if_missing(true);
    opts.set_compression_type(DBCompressionType::None);
    opts.set_block_based_table_factory(&table);
    opts.set_use_direct_io_for_flush_and_compaction(true);
    let e = |e: rocksdb::Error| e.to_string();
    let db = DB::open(&opts, dir.join("db")).map_err(e)?;
    let started = Instant::now();
    let mut sorted = order.to_vec();
    sorted.sort_unstable();
    let sort_seconds = started.elapsed().as_secs_f64();
    let mut files = Vec::new();
    let mut writer: Option<rocksdb::SstFileWriter> = None;
    for &i in &sorted {
        if writer.as_ref().is_some_and(|w| w.file_size() >= 256 << 20) {
            writer.take().expect("open").finish().map_err(e)?;
        }
        if writer.is_none() {
            let path = dir.join(format!("load-{}.sst", files.len()));
            let w = rocksdb::SstFileWriter::create(&opts);
            w.open(&path).map_err(e)?;
            files.push(path);
            writer = Some(w);
        }
        let w = writer.as_mut().expect("open");
        w.put(record_key(i as u64), record_value(i as u64))
            .map_err(e)?;
    }
    if let Some(mut w) = writer.take() {
        w.finish().map_err(e)?;
    }
    let written = started.elapsed().as_secs_f64();
    // Moved (hard-linked), not copied: the fastest ingest.
    let mut ingest = rocksdb::IngestExternalFileOptions::default();
    ingest.set_move_files(true);
    db.ingest_external_file_opts(&ingest, files.clone())
        .map_err(e)?;
    let seconds = started.elapsed().as_secs_f64();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..args.lookups.min(20_000) {
        let i = rng.random_range(0..args.records);
        let got = db.get(record_key(i)).map_err(e)?;
        if got.as_deref() != Some(&record_value(i)[..]) {
            return Err(format!("rocksdb: record {i} is wrong after ingest"));
        }
    }
    drop(db);
    Ok(serde_json::json!({
        "mode": "rocksdb",
        "records": args.records,
        "pool_bytes": pool,
        "seconds": seconds,
        "records_per_sec": args.records as f64 / seconds,
        "sort_s": sort_seconds,
        "sst_write_s": written - sort_seconds,
        "ingest_s": seconds - written,
        "sst_files": files.len(),
    })
    .to_string())
}
