//! `flashtree bench lookup`: the random-lookup benchmark of Haas & Leis (VLDB 2023) §4.1.
//!
//! Loads N records (8-byte big-endian keys, 120-byte values) with many
//! tasks, then runs uniform (or zipf) random point lookups for S seconds on
//! W workers × T tasks. Prints a line per second (ops/s, read and write
//! IOPS, hit ratio, CPU %) and a summary; `--json` prints the summary as one
//! JSON object. `--vs-iobench` measures random 4 KiB reads at depth 128 on
//! the store's own data file right after, so the lookup rate over the misses
//! can be compared with the device limit in one run.

use crate::iobench::{run_point, Pattern, PointSpec};
use crate::util::{parse_size_bytes, progress_bar, usage_error};
use flashtree::db::{Db, Options, TaskCtx, Tree};
use flashtree::io::{BackendKind, IoConfig, Storage, StorageConfig};
use flashtree_peers::sys::process_cpu_s;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tasks per worker without --tasks or a device model: enough to keep this
/// machine's virtio disk saturated (a sweep is flat from 128 to 384)
/// while some tasks are busy on hits.
pub const DEFAULT_TASKS: usize = 256;

/// Bytes of each value, as in Haas & Leis (VLDB 2023).
pub const VALUE_BYTES: usize = 120;
const TREE_NAME: &str = "lookup";
const META_TREE: &str = "bench-meta";

/// Arguments of `flashtree bench lookup`.
#[derive(clap::Args, Debug)]
pub struct LookupArgs {
    /// Records to load.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Buffer pool size (KiB/MiB/GiB suffixes).
    #[arg(long, default_value = "128MiB")]
    pub pool: String,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Tasks per worker (default 256, or chosen by the device model).
    #[arg(long)]
    pub tasks: Option<usize>,
    /// Seconds of lookups.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Zipf skew θ (> 0); uniform when absent.
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Store directory.
    #[arg(long, default_value = "flashtree-data")]
    pub path: PathBuf,
    /// Keep a store loaded by an earlier run with the same --records.
    #[arg(long)]
    pub reuse: bool,
    /// Put the store on this block device instead of --path (repeat for a
    /// RAID0 set). Without --reuse a new store is created on it, which is
    /// refused when the device holds anything (a file system, another
    /// store) unless --force.
    #[arg(long)]
    pub device: Vec<PathBuf>,
    /// With --device: create over whatever the devices hold.
    #[arg(long)]
    pub force: bool,
    /// I/O backend: io_uring, libaio or sync.
    #[arg(long, default_value = "io_uring")]
    pub backend: String,
    /// I/O requests in flight per worker at most.
    #[arg(long, default_value_t = 512)]
    pub io_depth: u32,
    /// Requests submitted to the kernel and unfinished at most, per worker
    /// (0 = no limit); by default the disk's request queue size divided
    /// among the workers.
    #[arg(long)]
    pub max_submitted: Option<u32>,
    /// Device model (from `flashtree model fit`) to choose the tasks per
    /// worker; `model.json` in the store directory is used when present.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Also measure random 4 KiB reads at depth 128 on the store's file.
    #[arg(long)]
    pub vs_iobench: bool,
    /// Also run each of these tasks-per-worker values (e.g. 1,4,16,64,256)
    /// on the same store, and compare the chosen value with the best.
    #[arg(long)]
    pub tasks_sweep: Option<String>,
    /// After the main run, reopen the store with each of these worker
    /// counts (e.g. 1,2), with the same pool and tasks per worker, and
    /// report lookups/s and the scaling against the first count.
    #[arg(long)]
    pub workers_sweep: Option<String>,
    /// Rounds of --workers-sweep, interleaved (1,2,1,2,…); the scaling is
    /// the median of the rounds' ratios.
    #[arg(long, default_value_t = 3)]
    pub workers_sweep_rounds: usize,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The summary of one run.
#[derive(Debug, serde::Serialize)]
pub struct LookupSummary {
    /// Always "flashtree".
    pub engine: String,
    /// "lookup-uniform" or "lookup-zipf".
    pub workload: String,
    /// Records in the store.
    pub records: u64,
    /// Pool bytes.
    pub pool_bytes: u64,
    /// Bytes of pages in the store.
    pub dataset_bytes: u64,
    /// Workers.
    pub workers: usize,
    /// Tasks per worker.
    pub tasks: usize,
    /// Lookups per second.
    pub ops_per_sec: f64,
    /// Lookups per second that needed a read: ops × (1 − hit ratio).
    pub miss_ops_per_sec: f64,
    /// Page reads per second.
    pub read_iops: f64,
    /// Page writes per second.
    pub write_iops: f64,
    /// Share of lookups served without a read.
    pub hit_ratio: f64,
    /// CPU seconds (user+sys) during the lookups.
    pub cpu_s: f64,
    /// CPU µs per lookup.
    pub cpu_us_per_op: f64,
    /// Lookup latency median (µs).
    pub lat_us_p50: f64,
    /// Lookup latency p99 (µs).
    pub lat_us_p99: f64,
    /// Records loaded per second (null when the store was reused).
    pub load_records_per_sec: Option<f64>,
    /// Seconds of lookups.
    pub seconds: f64,
    /// Why this many tasks.
    pub tasks_reason: String,
    /// iobench random 4 KiB reads at depth 128 on the same file (--vs-iobench).
    pub device_read_iops: Option<f64>,
    /// The device measured right before and right after the lookups.
    pub device_read_iops_before_after: Option<(f64, f64)>,
    /// miss_ops_per_sec / device_read_iops.
    pub ratio_to_device: Option<f64>,
}

/// Runs the benchmark.
pub fn run(args: LookupArgs) -> Result<(), String> {
    let pool_bytes = parse_size_bytes(&args.pool).map_err(usage_error)?;
    validate(&args)?;
    let backend: BackendKind = args.backend.parse().map_err(usage_error)?;
    let (tasks, tasks_reason) = choose_tasks(&args)?;
    let options = Options {
        pool_bytes,
        workers: args.workers,
        io: IoConfig {
            backend,
            depth: args.io_depth.max(tasks as u32 + 64),
            max_submitted: args.max_submitted,
            ..IoConfig::default()
        },
        // The comparisons run with the write-ahead log off everywhere
        // (the durable runs are a separate mode).
        durability: flashtree::db::Durability::None,
        ..Options::default()
    };
    if !args.reuse && args.device.is_empty() {
        remove_store(&args.path)?;
    }
    let db = open_store(&args, options.clone(), !args.reuse)?;
    for note in db.notes() {
        eprintln!("note: {note}");
    }
    let tree = db.tree(TREE_NAME).map_err(|e| e.to_string())?;
    let load_rate = ensure_loaded(&db, tree, args.records, !args.json)?;
    let sweep = match &args.tasks_sweep {
        Some(list) => crate::util::parse_list(list, |t| {
            t.parse::<usize>()
                .map_err(|_| format!("'{t}' is not a task count"))
                .and_then(|t| {
                    if t == 0 || t > 65536 {
                        Err("tasks must be 1..=65536".into())
                    } else {
                        Ok(t)
                    }
                })
        })
        .map_err(usage_error)?,
        None => Vec::new(),
    };
    let mut sweep_results = Vec::new();
    for &t in &sweep {
        let mut point = run_lookups(&db, tree, &args, t, pool_bytes)?;
        point.tasks_reason = "sweep".into();
        print_sweep_point(&point, args.json)?;
        sweep_results.push(point);
    }
    // The device drifts on a shared machine: measure it right before and
    // right after the lookups and compare with the mean of the two.
    let data_files = if args.device.is_empty() {
        vec![args.path.join("data.ft")]
    } else {
        args.device.clone()
    };
    let seconds_device = args.seconds.min(10.0);
    // Only the pages the store has written: the file is grown ahead with
    // fallocate, and ext4 answers reads of unwritten extents without I/O.
    let written_bytes = db.stats().pages_allocated * 4096;
    let measure_device = || -> Result<Option<f64>, String> {
        if !args.vs_iobench {
            return Ok(None);
        }
        device_read_iops(&data_files, written_bytes, backend, seconds_device).map(Some)
    };
    let device_before = measure_device()?;
    let mut summary = run_lookups(&db, tree, &args, tasks, pool_bytes)?;
    summary.load_records_per_sec = load_rate;
    summary.tasks_reason = tasks_reason;
    let device_after = measure_device()?;
    db.close().map_err(|e| e.to_string())?;
    let workers_sweep = match &args.workers_sweep {
        Some(list) => crate::util::parse_list(list, |w| {
            w.parse::<usize>()
                .ok()
                .filter(|w| (1..=256).contains(w))
                .ok_or_else(|| format!("'{w}' is not a worker count in 1..=256"))
        })
        .map_err(usage_error)?,
        None => Vec::new(),
    };
    if !workers_sweep.is_empty() {
        sweep_workers(&args, &options, &workers_sweep, tasks, pool_bytes)?;
    }
    if let (Some(before), Some(after)) = (device_before, device_after) {
        let iops = (before + after) / 2.0;
        summary.device_read_iops = Some(iops);
        summary.device_read_iops_before_after = Some((before, after));
        summary.ratio_to_device = Some(summary.miss_ops_per_sec / iops);
    }
    if let Some(best) = sweep_results
        .iter()
        .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
    {
        let ratio = summary.ops_per_sec / best.ops_per_sec;
        if args.json {
            println!(
                "{}",
                serde_json::json!({"sweep_best_tasks": best.tasks, "sweep_best_ops_per_sec": best.ops_per_sec, "chosen_tasks": summary.tasks, "chosen_ops_per_sec": summary.ops_per_sec, "chosen_to_best_ratio": ratio})
            );
        } else {
            println!("\nsweep best: {} tasks/worker at {:.0} lookups/s; chosen {} tasks/worker at {:.0} lookups/s = {:.3} of best", best.tasks, best.ops_per_sec, summary.tasks, summary.ops_per_sec, ratio);
        }
    }
    print_summary(&summary, args.json)
}

/// Opens the store of `args`: in --path, or on the --device block
/// devices (a new store there only when `create`).
fn open_store(args: &LookupArgs, options: Options, create: bool) -> Result<Db, String> {
    if args.device.is_empty() {
        return Db::open(&args.path, options).map_err(|e| e.to_string());
    }
    let options = Options {
        create_on_block_devices: create,
        force_create: create && args.force,
        ..options
    };
    Db::open_devices(&args.device, options).map_err(|e| e.to_string())
}

fn validate(args: &LookupArgs) -> Result<(), String> {
    if args.records == 0 || args.records > 1 << 40 {
        return Err(usage_error("--records must be in 1..=2^40"));
    }
    if args.workers == 0 || args.workers > 256 {
        return Err(usage_error("--workers must be in 1..=256"));
    }
    if args.tasks.is_some_and(|t| t == 0 || t > 65536) {
        return Err(usage_error("--tasks must be in 1..=65536"));
    }
    if !(args.seconds > 0.0 && args.seconds <= 86400.0) {
        return Err(usage_error("--seconds must be in (0, 86400]"));
    }
    if args.zipf.is_some_and(|z| !(z > 0.0 && z.is_finite())) {
        return Err(usage_error("--zipf θ must be a positive number"));
    }
    Ok(())
}

/// Tasks per worker: the flag, else the device model's choice, else DEFAULT_TASKS.
fn choose_tasks(args: &LookupArgs) -> Result<(usize, String), String> {
    if let Some(t) = args.tasks {
        return Ok((t, "set by --tasks".into()));
    }
    let path = args
        .model
        .clone()
        .or_else(|| Some(args.path.join("model.json")).filter(|p| p.exists()));
    let Some(path) = path else {
        return Ok((
            DEFAULT_TASKS,
            "default (no device model; see `flashtree model`)".into(),
        ));
    };
    let model = flashtree_model::DeviceModel::load(&path)
        .map_err(|e| usage_error(format!("{}: {e}", path.display())))?;
    let candidates: Vec<u32> = [1u32, 4, 16, 64, 256]
        .iter()
        .map(|t| t * args.workers as u32)
        .collect();
    let (k, reason) =
        flashtree_model::choose_concurrency(&model, flashtree_model::Op::Read, 1.0, &candidates)
            .map_err(|e| e.to_string())?;
    let per_worker = (k as usize / args.workers).max(1);
    Ok((
        per_worker,
        format!("device model {}: {reason}", path.display()),
    ))
}

/// Removes the store in `path`: its data file `data.ft` and the files
/// named after it (`data.ft.ckpt0`, `data.ft.ckpt1`, `data.ft.wal0`, …).
/// Other files (a `model.json`) stay. Removing the data file alone left
/// its checkpoints behind, and the next open refused the store as
/// truncated.
fn remove_store(path: &Path) -> Result<(), String> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", path.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == "data.ft" || name.starts_with("data.ft.") {
            std::fs::remove_file(entry.path())
                .map_err(|e| format!("removing {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Key of record `i`.
#[inline]
pub fn record_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Value of record `i` (deterministic, so lookups can be checked).
#[inline]
pub fn record_value(i: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..16].copy_from_slice(&(i ^ 0x5555_5555_5555_5555).to_le_bytes());
    v
}

/// Loads records unless the store already has them; returns records/s.
fn ensure_loaded(db: &Db, tree: Tree, records: u64, show: bool) -> Result<Option<f64>, String> {
    let meta = db.tree(META_TREE).map_err(|e| e.to_string())?;
    if let Some(v) = db.get(meta, b"records").map_err(|e| e.to_string())? {
        let have = u64::from_le_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| "bad bench-meta record".to_string())?,
        );
        if have == records {
            return Ok(None);
        }
        return Err(usage_error(format!(
            "the store at --path holds {have} records, not {records}; drop --reuse to reload"
        )));
    }
    // One loader per worker: each appends to its own range, so append
    // splits leave full pages; the load is CPU-bound (writes are async).
    let load_tasks = 1usize;
    let total_tasks = (db.worker_count() * load_tasks) as u64;
    let per_task = records.div_ceil(total_tasks);
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(None::<String>));
    let bar = if show {
        progress_bar(records, "loading")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let start = Instant::now();
    std::thread::scope(|scope| {
        let loader = scope.spawn(|| {
            let (done, failed) = (done.clone(), failed.clone());
            db.run(load_tasks, move |ctx: TaskCtx| {
                let (done, failed) = (done.clone(), failed.clone());
                async move {
                    let index = (ctx.worker() * load_tasks + ctx.task_index()) as u64;
                    let (first, end) = (index * per_task, ((index + 1) * per_task).min(records));
                    for i in first..end {
                        if let Err(e) = ctx.put(tree, &record_key(i), &record_value(i)).await {
                            failed.lock().unwrap().get_or_insert(e.to_string());
                            return;
                        }
                        if i % 1024 == 0 {
                            done.fetch_add(1024, Ordering::Relaxed);
                        }
                    }
                }
            })
        });
        while !loader.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            bar.set_position(done.load(Ordering::Relaxed).min(records));
        }
        loader
            .join()
            .expect("loader thread")
            .map_err(|e| e.to_string())
    })?;
    bar.finish_and_clear();
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(format!("load failed: {e}"));
    }
    let rate = records as f64 / start.elapsed().as_secs_f64();
    db.put(meta, b"records", &records.to_le_bytes())
        .map_err(|e| e.to_string())?;
    Ok(Some(rate))
}

/// Per-worker tallies, written only by that worker's tasks.
#[derive(Default)]
struct WorkerCounters {
    ops: AtomicU64,
    missed: AtomicU64,
    _pad: [u64; 6],
}

/// Latency buckets as the lookup histogram (`Histogram::new_with_bounds(1,
/// 60 s, 3)`) has them: the same index for every value, so counts moved
/// into it ([`LatencyCounts::into_histogram`]) give the same quantiles as
/// recording each value there. Recording here is an index computation and
/// an increment, without the histogram's range checks, resizing and
/// min/max tracking (about 50 instructions per lookup in callgrind).
struct LatencyCounts {
    counts: Vec<u64>,
}

/// Highest latency the histogram is made to track (ns).
const LATENCY_HIGHEST_NS: u64 = 60_000_000_000;
/// log2 of half the sub-buckets per bucket for 3 significant digits (2048
/// sub-buckets), and the leading-zero base for a lowest value of 1.
const LATENCY_HALF_MAGNITUDE: u32 = 10;
const LATENCY_SUB_BUCKET_MASK: u64 = (1 << (LATENCY_HALF_MAGNITUDE + 1)) - 1;
const LATENCY_LZ_BASE: u32 = 64 - (LATENCY_HALF_MAGNITUDE + 1);

fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_HIGHEST_NS, 3).expect("bounds")
}

impl LatencyCounts {
    fn new() -> LatencyCounts {
        LatencyCounts {
            // As many as the histogram has: it covers its highest value's
            // whole bucket, and refuses what lies beyond.
            counts: vec![0; latency_histogram().distinct_values()],
        }
    }

    #[inline]
    fn record(&mut self, nanos: u64) {
        if let Some(c) = self.counts.get_mut(latency_index(nanos.max(1))) {
            *c += 1;
        }
    }

    /// The counts as a histogram (each bucket recorded at its lowest value,
    /// which has the bucket's index).
    fn into_histogram(self) -> Histogram<u64> {
        let mut h = latency_histogram();
        for (index, &count) in self.counts.iter().enumerate() {
            if count > 0 {
                let _ = h.record_n(latency_value_at(index), count);
            }
        }
        h
    }
}

/// The histogram's counts index of `value` (>= 1), as hdrhistogram's
/// `index_for` computes it for these bounds.
#[inline]
fn latency_index(value: u64) -> usize {
    let bucket = LATENCY_LZ_BASE - (value | LATENCY_SUB_BUCKET_MASK).leading_zeros();
    let sub_bucket = (value >> bucket) as usize;
    ((bucket as usize + 1) << LATENCY_HALF_MAGNITUDE) + sub_bucket - (1 << LATENCY_HALF_MAGNITUDE)
}

/// The lowest value whose index is `index` (the inverse of
/// [`latency_index`]).
fn latency_value_at(index: usize) -> u64 {
    let half = 1usize << LATENCY_HALF_MAGNITUDE;
    let bucket = (index >> LATENCY_HALF_MAGNITUDE).saturating_sub(1);
    // (Added before subtracting: below `half`, index - half would wrap.)
    let sub_bucket = index + half - (bucket + 1) * half;
    (sub_bucket as u64) << bucket
}

thread_local! {
    static LATENCY: RefCell<Option<LatencyCounts>> = const { RefCell::new(None) };
}

fn record_latency(nanos: u64) {
    LATENCY.with(|h| {
        h.borrow_mut()
            .get_or_insert_with(LatencyCounts::new)
            .record(nanos)
    });
}

/// Nanoseconds on the clock `Instant` reads (CLOCK_MONOTONIC), as one
/// integer: the difference of two is a lookup's latency without
/// `Instant`'s `Duration` arithmetic (about 30 instructions per lookup).
#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// True if `value` is `record_value(i)`, compared a word at a time without
/// building the expected value (equal to `value == record_value(i)`).
#[inline]
fn is_record_value(value: &[u8], i: u64) -> bool {
    let Ok(value) = <&[u8; VALUE_BYTES]>::try_from(value) else {
        return false;
    };
    let (words, []) = value.as_chunks::<8>() else {
        unreachable!("VALUE_BYTES is a multiple of 8")
    };
    let rest = words[2..]
        .iter()
        .fold(0, |acc, w| acc | u64::from_ne_bytes(*w));
    words[0] == i.to_le_bytes()
        && words[1] == (i ^ 0x5555_5555_5555_5555).to_le_bytes()
        && rest == 0
}

/// Picks record numbers: uniform, or zipf with hot records scattered.
struct KeyGen {
    rng: rand::rngs::SmallRng,
    records: u64,
    zipf: Option<rand_distr::Zipf<f64>>,
}

impl KeyGen {
    fn new(records: u64, zipf: Option<f64>, seed: u64) -> KeyGen {
        let zipf = zipf.map(|s| rand_distr::Zipf::new(records as f64, s).expect("valid zipf"));
        KeyGen {
            rng: rand::rngs::SmallRng::seed_from_u64(seed),
            records,
            zipf,
        }
    }

    fn next(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.random_range(0..self.records),
            Some(z) => {
                let rank = z.sample(&mut self.rng) as u64 - 1;
                // Scatter hot ranks over the key space (multiplicative hash).
                rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.records
            }
        }
    }
}

fn run_lookups(
    db: &Db,
    tree: Tree,
    args: &LookupArgs,
    tasks: usize,
    pool_bytes: u64,
) -> Result<LookupSummary, String> {
    let counters: Arc<Vec<WorkerCounters>> = Arc::new(
        (0..db.worker_count())
            .map(|_| WorkerCounters::default())
            .collect(),
    );
    let histograms = Arc::new(Mutex::new(Vec::<Histogram<u64>>::new()));
    let wrong = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks_left: Arc<Vec<AtomicU64>> = Arc::new(
        (0..db.worker_count())
            .map(|_| AtomicU64::new(tasks as u64))
            .collect(),
    );
    let (records, zipf) = (args.records, args.zipf);
    let stats_before = db.stats();
    let cpu_before = process_cpu_s();
    let start = Instant::now();
    let per_second = std::thread::scope(|scope| {
        let runner = {
            let (counters, histograms, wrong, stop, tasks_left) = (
                counters.clone(),
                histograms.clone(),
                wrong.clone(),
                stop.clone(),
                tasks_left.clone(),
            );
            scope.spawn(move || {
                db.run(tasks, move |ctx: TaskCtx| {
                    let (counters, histograms, wrong, stop, tasks_left) = (
                        counters.clone(),
                        histograms.clone(),
                        wrong.clone(),
                        stop.clone(),
                        tasks_left.clone(),
                    );
                    async move {
                        let worker = ctx.worker();
                        let mut keys = KeyGen::new(
                            records,
                            zipf,
                            (worker * 1_000_003 + ctx.task_index()) as u64,
                        );
                        let mut value = Vec::with_capacity(VALUE_BYTES);
                        let mine = &counters[worker];
                        // One clock read per lookup: a lookup's end is the
                        // next one's start (the loop does nothing else that
                        // takes time in between).
                        let mut t0 = monotonic_ns();
                        while !stop.load(Ordering::Relaxed) {
                            let i = keys.next();
                            match ctx.get(tree, &record_key(i), &mut value).await {
                                Ok(true) if is_record_value(&value, i) => {}
                                _ => {
                                    wrong.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            let t1 = monotonic_ns();
                            record_latency(t1.saturating_sub(t0));
                            t0 = t1;
                            mine.ops.fetch_add(1, Ordering::Relaxed);
                            if ctx.take_missed() {
                                mine.missed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        if tasks_left[worker].fetch_sub(1, Ordering::AcqRel) == 1 {
                            if let Some(h) = LATENCY.with(|h| h.borrow_mut().take()) {
                                histograms.lock().unwrap().push(h.into_histogram());
                            }
                        }
                    }
                })
            })
        };
        let lines = report_each_second(db, &counters, args, start, !args.json);
        stop.store(true, Ordering::Release);
        runner
            .join()
            .expect("lookup runner")
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(lines)
    })?;
    let _ = per_second;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu_before;
    let stats = db.stats();
    if wrong.load(Ordering::Relaxed) > 0 {
        return Err(format!(
            "{} lookups returned a wrong or missing value",
            wrong.load(Ordering::Relaxed)
        ));
    }
    let ops: u64 = counters.iter().map(|c| c.ops.load(Ordering::Relaxed)).sum();
    let missed: u64 = counters
        .iter()
        .map(|c| c.missed.load(Ordering::Relaxed))
        .sum();
    let mut latency = latency_histogram();
    for h in histograms.lock().unwrap().iter() {
        let _ = latency.add(h);
    }
    let hit_ratio = if ops > 0 {
        1.0 - missed as f64 / ops as f64
    } else {
        0.0
    };
    let ops_per_sec = ops as f64 / seconds;
    Ok(LookupSummary {
        engine: "flashtree".into(),
        workload: if args.zipf.is_some() {
            "lookup-zipf".into()
        } else {
            "lookup-uniform".into()
        },
        records: args.records,
        pool_bytes,
        dataset_bytes: stats.pages_allocated * 4096,
        workers: db.worker_count(),
        tasks,
        ops_per_sec,
        miss_ops_per_sec: ops_per_sec * (1.0 - hit_ratio),
        read_iops: (stats.page_reads - stats_before.page_reads) as f64 / seconds,
        write_iops: (stats.page_writes - stats_before.page_writes) as f64 / seconds,
        hit_ratio,
        cpu_s,
        cpu_us_per_op: if ops > 0 {
            cpu_s * 1e6 / ops as f64
        } else {
            0.0
        },
        lat_us_p50: latency.value_at_quantile(0.5) as f64 / 1000.0,
        lat_us_p99: latency.value_at_quantile(0.99) as f64 / 1000.0,
        load_records_per_sec: None,
        seconds,
        tasks_reason: String::new(),
        device_read_iops: None,
        device_read_iops_before_after: None,
        ratio_to_device: None,
    })
}

/// Prints one line per second until the run's time is up.
fn report_each_second(
    db: &Db,
    counters: &[WorkerCounters],
    args: &LookupArgs,
    start: Instant,
    show: bool,
) -> usize {
    if show {
        println!(
            "{:>5} {:>12} {:>10} {:>10} {:>8} {:>6}",
            "sec", "lookups/s", "read/s", "write/s", "hit", "CPU%"
        );
    }
    let deadline = start + Duration::from_secs_f64(args.seconds);
    let (mut last_ops, mut last_missed) = (0u64, 0u64);
    let mut last_stats = db.stats();
    let mut last_cpu = process_cpu_s();
    let mut last_time = Instant::now();
    let mut lines = 0;
    while Instant::now() < deadline {
        std::thread::sleep(
            Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
        );
        let now = Instant::now();
        let dt = (now - last_time).as_secs_f64().max(1e-9);
        let ops: u64 = counters.iter().map(|c| c.ops.load(Ordering::Relaxed)).sum();
        let missed: u64 = counters
            .iter()
            .map(|c| c.missed.load(Ordering::Relaxed))
            .sum();
        let stats = db.stats();
        let cpu = process_cpu_s();
        let d_ops = ops - last_ops;
        let hit = if d_ops > 0 {
            1.0 - (missed - last_missed) as f64 / d_ops as f64
        } else {
            0.0
        };
        if show {
            println!(
                "{:>5.0} {:>12.0} {:>10.0} {:>10.0} {:>7.1}% {:>5.0}%",
                (now - start).as_secs_f64(),
                d_ops as f64 / dt,
                (stats.page_reads - last_stats.page_reads) as f64 / dt,
                (stats.page_writes - last_stats.page_writes) as f64 / dt,
                hit * 100.0,
                (cpu - last_cpu) / dt * 100.0
            );
        }
        (last_ops, last_missed, last_stats, last_cpu, last_time) = (ops, missed, stats, cpu, now);
        lines += 1;
    }
    lines
}

/// Random 4 KiB reads at depth 128 with one thread over the store's
/// written pages (`written_bytes` from the start).
fn device_read_iops(
    files: &[PathBuf],
    written_bytes: u64,
    backend: BackendKind,
    seconds: f64,
) -> Result<f64, String> {
    // Read-only: it runs while the store is open, and only reads.
    let mut config = StorageConfig::new(files.to_vec());
    config.create = false;
    config.read_only = true;
    let storage = Arc::new(Storage::open(&config).map_err(|e| e.to_string())?);
    let size_bytes = written_bytes.min(storage.capacity_bytes());
    let spec = PointSpec {
        backend,
        pattern: Pattern::RandRead,
        read_pct: 100,
        block_bytes: 4096,
        depth: 128,
        batch: IoConfig::default().submit_batch,
        threads: 1,
        seconds,
    };
    let io = IoConfig {
        backend,
        depth: 128,
        ..IoConfig::default()
    };
    Ok(run_point(&storage, size_bytes, &io, &spec)?.iops)
}

/// Runs the lookups on the loaded store once per worker count per round,
/// rounds interleaved, each with the store reopened with that many
/// workers; prints each point, then per worker count the median lookups/s
/// and the median of the rounds' ratios to the first count.
fn sweep_workers(
    args: &LookupArgs,
    options: &Options,
    workers: &[usize],
    tasks: usize,
    pool_bytes: u64,
) -> Result<(), String> {
    let rounds = args.workers_sweep_rounds.max(1);
    let mut points: Vec<Vec<LookupSummary>> = workers.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        for (i, &w) in workers.iter().enumerate() {
            let options = Options {
                workers: w,
                ..options.clone()
            };
            let db = open_store(args, options, false)?;
            let tree = db.tree(TREE_NAME).map_err(|e| e.to_string())?;
            let mut point = run_lookups(&db, tree, args, tasks, pool_bytes)?;
            db.close().map_err(|e| e.to_string())?;
            point.tasks_reason = format!("workers sweep, round {round}");
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&point).map_err(|e| e.to_string())?
                );
            } else {
                println!("workers sweep round {round}: {:>3} workers × {} tasks  {:>9.0} lookups/s  hit {:.3}  {:>8.0} reads/s  {:.2} µs CPU/lookup  p99 {:.0} µs", point.workers, point.tasks, point.ops_per_sec, point.hit_ratio, point.read_iops, point.cpu_us_per_op, point.lat_us_p99);
            }
            points[i].push(point);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    for (i, &w) in workers.iter().enumerate() {
        let ops: Vec<f64> = points[i].iter().map(|p| p.ops_per_sec).collect();
        let ratios: Vec<f64> = (0..rounds)
            .map(|r| points[i][r].ops_per_sec / points[0][r].ops_per_sec)
            .collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        let (ops_median, ratio_median) = (median(ops), median(ratios.clone()));
        if args.json {
            println!(
                "{}",
                serde_json::json!({"workers_sweep": w, "rounds": rounds, "ops_per_sec_median": ops_median, "scaling_vs_workers": workers[0], "scaling_median": ratio_median, "scaling_min": lo, "scaling_max": hi})
            );
        } else {
            println!("workers sweep: {w:>3} workers  median {ops_median:>9.0} lookups/s  ×{ratio_median:.2} of {} worker(s) (rounds {lo:.2}–{hi:.2}, {rounds} interleaved)", workers[0]);
        }
    }
    Ok(())
}

fn print_sweep_point(s: &LookupSummary, json: bool) -> Result<(), String> {
    if json {
        println!("{}", serde_json::to_string(s).map_err(|e| e.to_string())?);
    } else {
        println!("sweep: {:>5} tasks/worker  {:>9.0} lookups/s  hit {:.3}  {:>8.0} reads/s  {:.2} µs CPU/lookup  p99 {:.0} µs", s.tasks, s.ops_per_sec, s.hit_ratio, s.read_iops, s.cpu_us_per_op, s.lat_us_p99);
    }
    Ok(())
}

fn print_summary(s: &LookupSummary, json: bool) -> Result<(), String> {
    if json {
        println!("{}", serde_json::to_string(s).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!();
    println!("flashtree lookup ({}), {} records, dataset {:.0} MiB, pool {:.0} MiB ({:.1}x out of memory)", s.workload, s.records, mib(s.dataset_bytes), mib(s.pool_bytes), s.dataset_bytes as f64 / s.pool_bytes as f64);
    println!(
        "  workers × tasks      {} × {}   ({})",
        s.workers, s.tasks, s.tasks_reason
    );
    println!("  lookups/s            {:.0}", s.ops_per_sec);
    println!("  hit ratio            {:.3}", s.hit_ratio);
    println!("  lookups/s × (1−hit)  {:.0}", s.miss_ops_per_sec);
    println!("  read IOPS            {:.0}", s.read_iops);
    println!("  write IOPS           {:.0}", s.write_iops);
    println!(
        "  CPU                  {:.2} s, {:.2} µs per lookup",
        s.cpu_s, s.cpu_us_per_op
    );
    println!(
        "  latency              p50 {:.1} µs, p99 {:.1} µs",
        s.lat_us_p50, s.lat_us_p99
    );
    match s.load_records_per_sec {
        Some(r) => println!("  load                 {r:.0} records/s"),
        None => println!("  load                 reused the store (--reuse)"),
    }
    if let (Some(iops), Some(ratio)) = (s.device_read_iops, s.ratio_to_device) {
        let (before, after) = s.device_read_iops_before_after.unwrap_or((iops, iops));
        println!("  device (iobench)     {iops:.0} random 4 KiB reads/s at depth 128 on the same file (mean of {before:.0} before and {after:.0} after)");
        println!("  ratio                {ratio:.3} (lookups over misses / device IOPS)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_counts_give_the_histograms_quantiles() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let (mut counts, mut direct) = (LatencyCounts::new(), latency_histogram());
        let mut values: Vec<u64> = (0..20_000)
            .map(|_| {
                let bits = rng.random_range(0..40u32);
                rng.random_range(0..=1u64 << bits)
            })
            .collect();
        values.extend([
            0,
            1,
            2047,
            2048,
            2049,
            4095,
            4096,
            LATENCY_HIGHEST_NS,
            LATENCY_HIGHEST_NS + 1,
            u64::MAX,
        ]);
        for &v in &values {
            counts.record(v);
            let _ = direct.record(v.max(1));
        }
        for &v in &values[..2000] {
            let index = latency_index(v.max(1));
            assert_eq!(latency_index(latency_value_at(index)), index, "value {v}");
            assert!(latency_value_at(index) <= v.max(1));
        }
        let moved = counts.into_histogram();
        assert_eq!(moved.len(), direct.len());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                moved.value_at_quantile(q),
                direct.value_at_quantile(q),
                "q {q}"
            );
        }
        for v in (0..64)
            .map(|b| 1u64 << b)
            .filter(|&v| v <= LATENCY_HIGHEST_NS)
        {
            assert_eq!(moved.count_at(v), direct.count_at(v), "value {v}");
        }
    }

    #[test]
    fn the_value_check_is_equality_with_the_record_value() {
        for i in [0u64, 1, 199_999, u64::MAX, 0x5555_5555_5555_5555] {
            let right = record_value(i);
            assert!(is_record_value(&right, i));
            assert!(!is_record_value(&right, i ^ 1));
            assert!(!is_record_value(&right[..VALUE_BYTES - 1], i));
            let mut longer = right.to_vec();
            longer.push(0);
            assert!(!is_record_value(&longer, i));
            for at in 0..VALUE_BYTES {
                let mut wrong = right;
                wrong[at] ^= 0x40;
                assert!(!is_record_value(&wrong, i), "byte {at}");
            }
        }
    }
}
