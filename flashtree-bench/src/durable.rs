//! Durable-write benchmarks of the write-ahead log:
//! * `bench commit`: `Durability::Sync` commits of single puts by 1 and by
//!   many tasks on one worker (group commit: commits per log sync), then an
//!   open loop at a fraction of the best rate, beside the device's own
//!   4 KiB write + `fdatasync` latency measured in the same run;
//! * `bench recover`: a child process commits until a given amount of log
//!   has accumulated with no checkpoint, is killed with SIGKILL, and the
//!   store is reopened: recovery time and bandwidth beside the device's
//!   sequential-read bandwidth of the same log file, and the acknowledged
//!   commits checked.

use crate::util::{parse_list, parse_size_bytes, progress_bar, usage_error};
use flashtree::db::{Db, Durability, Options, RecoveryProgress, TaskCtx, WriteBatch, WriteOptions};
use flashtree_peers::sys::{parse_cores, pin_process_to, process_cpu_s};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VALUE_BYTES: usize = 120;

/// `flashtree bench commit`.
#[derive(clap::Args, Debug)]
pub struct CommitArgs {
    /// Store directory (removed and recreated).
    #[arg(long, default_value = "flashtree-commit-data")]
    pub path: PathBuf,
    /// Committing tasks per run of the closed loop (comma-separated).
    #[arg(long, default_value = "1,256")]
    pub tasks: String,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// The open loop's rate as a fraction of the best closed-loop rate
    /// (unused with --open-loop-rate).
    #[arg(long, default_value_t = 0.5)]
    pub open_loop_fraction: f64,
    /// The open loop's rate in commits a second, instead of a fraction of
    /// the closed loop's (to compare builds or settings at one load: each
    /// run's closed loop differs).
    #[arg(long)]
    pub open_loop_rate: Option<f64>,
    /// Tasks of the open loop (each sleeps until its next commit's
    /// scheduled time; more tasks than commits in flight only sleep).
    #[arg(long, default_value_t = 256)]
    pub open_loop_tasks: usize,
    /// Buffer pool.
    #[arg(long, default_value = "128MiB")]
    pub pool: String,
    /// Log per worker (a preallocated ring).
    #[arg(long, default_value = "256MiB")]
    pub wal_per_worker: String,
    /// Log written between checkpoints (at most half of --wal-per-worker;
    /// e.g. 2GiB with --wal-per-worker 4GiB: no checkpoint in a 5 s phase).
    #[arg(long, default_value = "64MiB")]
    pub checkpoint_log: String,
    /// Distinct keys the puts go to.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// How the worker writes its log (`Options::log_writes`): auto (on the
    /// worker's thread when it has nothing else to do, else through its
    /// channel), inline (always on its thread, which waits for each write)
    /// or channel (always through its io_uring channel).
    #[arg(long, default_value = "auto")]
    pub log_writes: flashtree::db::LogWrites,
    /// Rounds of the latency comparison: each measures the device's 4 KiB
    /// write+fdatasync, then the open loop, then the device under the open
    /// loop's arrivals; the report gives each round's p99 ratio and their
    /// median (this machine's sync latency swings between phases).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Cores the whole process runs on, as `taskset -c` pins it (e.g. 0,
    /// or 0-1; empty: not pinned), like `bench compare --cores`. The
    /// worker, io_uring's threads that run the log's `fdatasync`s (on
    /// Linux 6.18 they inherit the process's CPU affinity) and the device
    /// phases all run there. Unpinned, on this repository's test
    /// machine, the open loop's p99 ratio was about twice as high
    /// (`docs/ARCHITECTURE.md`, "The life of a commit").
    #[arg(long, default_value = "0")]
    pub cores: String,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Directory for the PNG plot.
    #[arg(long, default_value = "results")]
    pub out_dir: PathBuf,
}

/// One measured phase.
#[derive(Debug, serde::Serialize)]
struct CommitRow {
    phase: String,
    tasks: usize,
    commits: u64,
    commits_per_sec: f64,
    log_syncs_per_sec: f64,
    commits_per_sync: f64,
    lat_us_p50: f64,
    lat_us_p99: f64,
    lat_us_p999: f64,
    cpu_us_per_commit: f64,
    /// Log record bytes per commit (full page images and deltas).
    log_bytes_per_commit: f64,
    /// Checkpoints completed during the phase.
    checkpoints: u64,
    /// Open loop: p99 of how late a commit's task started after its
    /// scheduled time (part of its latency; 0 in other phases).
    start_late_us_p99: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

thread_local! {
    /// Commit latencies of the tasks of this worker thread: one histogram
    /// per worker, not per task (thousands of per-task histograms would
    /// make each record a cache miss, and the harness the bottleneck).
    static WORKER_LATENCIES: std::cell::RefCell<Option<Histogram<u64>>> =
        const { std::cell::RefCell::new(None) };
    /// Open loop: how late each commit's task started after its scheduled
    /// time, per worker thread.
    static WORKER_START_LATE: std::cell::RefCell<Option<Histogram<u64>>> =
        const { std::cell::RefCell::new(None) };
}

fn record_latency(latency: Duration) {
    WORKER_LATENCIES.with_borrow_mut(|h| {
        h.get_or_insert_with(histogram)
            .saturating_record(latency.as_nanos() as u64)
    });
}

fn record_start_late(late: Duration) {
    WORKER_START_LATE.with_borrow_mut(|h| {
        h.get_or_insert_with(histogram)
            .saturating_record(late.as_nanos() as u64)
    });
}

fn key_of(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn value_of(i: u64, n: u64) -> Vec<u8> {
    let mut v = n.to_le_bytes().to_vec();
    v.resize(VALUE_BYTES, (i % 251) as u8);
    v
}

/// Runs `tasks` committing tasks for `seconds`; with `rate_per_sec`, each
/// commit has a scheduled start (open loop) and its latency counts from it.
fn commit_phase(
    db: &Db,
    args: &CommitArgs,
    phase: &str,
    tasks: usize,
    rate_per_sec: Option<f64>,
) -> Result<CommitRow, String> {
    let tree = db.tree("commits").map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let histograms = Arc::new(Mutex::new(Vec::new()));
    let late_histograms = Arc::new(Mutex::new(Vec::new()));
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::new()));
    // Live tasks per worker: the last of a worker's tasks to end takes its
    // histograms. (When every ending task took them, each commit completed
    // after the first end made a new histogram of about 220 KB for the next
    // ending task to take, which made the phase's last pass of the worker
    // loop long.)
    let live: Arc<Vec<AtomicU64>> =
        Arc::new((0..db.worker_count()).map(|_| AtomicU64::new(0)).collect());
    let before = db.stats();
    let cpu_before = process_cpu_s();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.seconds);
    let keys = args.keys;
    let bar = progress_bar((args.seconds * 10.0) as u64, phase);
    std::thread::scope(|scope| {
        let (stop_, histograms_, late_, next_, errors_, live_) = (
            stop.clone(),
            histograms.clone(),
            late_histograms.clone(),
            next.clone(),
            errors.clone(),
            live.clone(),
        );
        let runner = scope.spawn(move || {
            let (stop, histograms, late_histograms, next, errors, live) =
                (stop_, histograms_, late_, next_, errors_, live_);
            db.run(tasks, move |ctx: TaskCtx| {
                let (stop, histograms, late_histograms, next, errors, live) = (
                    stop.clone(),
                    histograms.clone(),
                    late_histograms.clone(),
                    next.clone(),
                    errors.clone(),
                    live.clone(),
                );
                // Every task counts itself in before any ends (a task
                // ends only once the phase's time is up).
                live[ctx.worker()].fetch_add(1, Ordering::Relaxed);
                async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(
                        (ctx.worker() * 100_003 + ctx.task_index()) as u64,
                    );
                    while !stop.load(Ordering::Relaxed) {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let t0 = match rate_per_sec {
                            Some(rate) => {
                                let due = start + Duration::from_secs_f64(n as f64 / rate);
                                // Past the phase's end: stop (a sleeping task
                                // would not see `stop`).
                                if due > deadline {
                                    break;
                                }
                                flashtree::sched::sleep_until(due).await;
                                record_start_late(due.elapsed());
                                due
                            }
                            None => Instant::now(),
                        };
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = rng.random_range(0..keys);
                        if let Err(e) = ctx.put(tree, &key_of(i), &value_of(i, n)).await {
                            errors.lock().unwrap().push(e.to_string());
                            break;
                        }
                        record_latency(t0.elapsed());
                    }
                    if live[ctx.worker()].fetch_sub(1, Ordering::Relaxed) != 1 {
                        return;
                    }
                    // The worker's last task takes what it recorded.
                    if let Some(h) = WORKER_LATENCIES.take() {
                        histograms.lock().unwrap().push(h);
                    }
                    if let Some(h) = WORKER_START_LATE.take() {
                        late_histograms.lock().unwrap().push(h);
                    }
                }
            })
        });
        while start.elapsed().as_secs_f64() < args.seconds {
            std::thread::sleep(Duration::from_millis(100));
            bar.inc(1);
        }
        stop.store(true, Ordering::Release);
        runner.join().expect("commit runner")
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    if let Some(e) = errors.lock().unwrap().first() {
        return Err(format!("{phase}: a commit failed: {e}"));
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu_before;
    let after = db.stats();
    let mut all = histogram();
    for h in histograms.lock().unwrap().iter() {
        all.add(h).map_err(|e| e.to_string())?;
    }
    let commits = all.len();
    let mut late = histogram();
    for h in late_histograms.lock().unwrap().iter() {
        late.add(h).map_err(|e| e.to_string())?;
    }
    let syncs = after.log_syncs - before.log_syncs;
    let us = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    Ok(CommitRow {
        phase: phase.to_string(),
        tasks,
        commits,
        commits_per_sec: commits as f64 / seconds,
        log_syncs_per_sec: syncs as f64 / seconds,
        commits_per_sync: commits as f64 / syncs.max(1) as f64,
        lat_us_p50: us(0.5),
        lat_us_p99: us(0.99),
        lat_us_p999: us(0.999),
        cpu_us_per_commit: cpu_s * 1e6 / commits.max(1) as f64,
        log_bytes_per_commit: (after.log_record_bytes - before.log_record_bytes) as f64
            / commits.max(1) as f64,
        checkpoints: after.checkpoints - before.checkpoints,
        start_late_us_p99: late.value_at_quantile(0.99) as f64 / 1000.0,
    })
}

/// Bytes of the buffer [`written_direct_file`] returns.
const WRITE_BUF_BYTES: usize = 1 << 20;

/// Creates `path` opened with O_DIRECT, written whole (`bytes`, a multiple
/// of [`WRITE_BUF_BYTES`]) and synced, so later writes change no metadata;
/// with a buffer of [`WRITE_BUF_BYTES`] to write from.
fn written_direct_file(
    path: &Path,
    bytes: u64,
) -> Result<(std::fs::File, flashtree::io::AlignedBuf), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buf = flashtree::io::AlignedBuf::new(WRITE_BUF_BYTES);
    buf.fill(0x5A);
    for off in (0..bytes).step_by(WRITE_BUF_BYTES) {
        file.write_all_at(&buf[..], off)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    file.sync_all()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((file, buf))
}

/// 4 KiB O_DIRECT writes, each followed by `fdatasync`, at queue depth 1,
/// for `seconds`, on a preallocated file in `dir`.
fn device_write_sync(dir: &Path, seconds: f64) -> Result<CommitRow, String> {
    let path = dir.join("device-write-sync.dat");
    const FILE_BYTES: u64 = 64 << 20;
    let (file, buf) = written_direct_file(&path, FILE_BYTES)?;
    let mut h = histogram();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let cpu_before = process_cpu_s();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let off = rng.random_range(0..FILE_BYTES / 4096) * 4096;
        let t0 = Instant::now();
        file.write_all_at(&buf[..4096], off)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        file.sync_data()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        h.saturating_record(t0.elapsed().as_nanos() as u64);
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu_before;
    drop(file);
    let _ = std::fs::remove_file(&path);
    let syncs = h.len();
    Ok(device_row(
        "device 4KiB write+fdatasync".into(),
        &h,
        syncs,
        elapsed_s,
        cpu_s,
        4096.0,
    ))
}

/// A row of the device's own figures: `h` holds the commits' latencies.
fn device_row(
    phase: String,
    h: &Histogram<u64>,
    syncs: u64,
    elapsed_s: f64,
    cpu_s: f64,
    log_bytes_per_commit: f64,
) -> CommitRow {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    CommitRow {
        phase,
        tasks: 1,
        commits: h.len(),
        commits_per_sec: h.len() as f64 / elapsed_s,
        log_syncs_per_sec: syncs as f64 / elapsed_s,
        commits_per_sync: h.len() as f64 / syncs.max(1) as f64,
        lat_us_p50: us(0.5),
        lat_us_p99: us(0.99),
        lat_us_p999: us(0.999),
        cpu_us_per_commit: cpu_s * 1e6 / h.len().max(1) as f64,
        log_bytes_per_commit,
        checkpoints: 0,
        start_late_us_p99: 0.0,
    }
}

/// The device alone under the open loop's arrivals, as an ideal group
/// commit would serve them: one thread, no engine work; commit `i` arrives
/// at `i / rate` seconds; each cycle writes the bytes of every commit that
/// has arrived (`bytes_per_commit` each, the engine's average, in whole 4
/// KiB blocks, sequentially through a preallocated ring) and `fdatasync`s;
/// every commit of the cycle is durable when the sync returns. Its latency
/// is from its arrival. This is about the floor an engine's open-loop
/// latency can reach on this device: a closed loop at queue depth 1
/// records one sample per slow sync, an open loop every commit that
/// arrives while it runs.
fn device_group_commit(
    dir: &Path,
    seconds: f64,
    rate_per_sec: f64,
    bytes_per_commit: f64,
) -> Result<CommitRow, String> {
    let path = dir.join("device-group-commit.dat");
    const RING_BYTES: u64 = 64 << 20;
    let (file, buf) = written_direct_file(&path, RING_BYTES)?;
    let mut h = histogram();
    let (mut durable, mut syncs, mut offset) = (0u64, 0u64, 0u64);
    let cpu_before = process_cpu_s();
    let start = Instant::now();
    let arrival = |i: u64| start + Duration::from_secs_f64(i as f64 / rate_per_sec);
    while start.elapsed().as_secs_f64() < seconds {
        let arrived = (start.elapsed().as_secs_f64() * rate_per_sec) as u64;
        if arrived <= durable {
            let next = arrival(durable + 1);
            while Instant::now() < next {
                std::hint::spin_loop();
            }
            continue;
        }
        let bytes = ((arrived - durable) as f64 * bytes_per_commit).ceil() as usize;
        let bytes = bytes.div_ceil(4096).clamp(1, WRITE_BUF_BYTES / 4096) * 4096;
        if offset + bytes as u64 > RING_BYTES {
            offset = 0;
        }
        file.write_all_at(&buf[..bytes], offset)
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        offset += bytes as u64;
        syncs += 1;
        let done = Instant::now();
        for i in durable + 1..=arrived {
            h.saturating_record(done.saturating_duration_since(arrival(i)).as_nanos() as u64);
        }
        durable = arrived;
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu_before;
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(device_row(
        format!("device open loop {rate_per_sec:.0}/s"),
        &h,
        syncs,
        elapsed_s,
        cpu_s,
        bytes_per_commit,
    ))
}

/// `flashtree bench commit`.
pub fn run_commit(args: CommitArgs) -> Result<(), String> {
    let task_counts = parse_list(&args.tasks, |s| {
        s.parse::<usize>()
            .ok()
            .filter(|&t| t > 0)
            .ok_or_else(|| format!("bad task count {s:?}"))
    })
    .map_err(usage_error)?;
    let valid = args.seconds > 0.0
        && args.open_loop_fraction > 0.0
        && args.open_loop_fraction <= 1.0
        && args
            .open_loop_rate
            .is_none_or(|rate| rate.is_finite() && rate >= 1.0);
    if !valid || args.rounds == 0 {
        return Err(usage_error(
            "--seconds must be > 0, --open-loop-fraction in (0, 1], --open-loop-rate at least 1 and --rounds at least 1",
        ));
    }
    let pool_bytes = parse_size_bytes(&args.pool).map_err(usage_error)?;
    let cores = parse_cores(&args.cores).map_err(|e| usage_error(format!("--cores: {e}")))?;
    pin_process_to(&cores).map_err(|e| {
        format!(
            "--cores {}: {e} (is that core available to this process? --cores '' does not pin)",
            args.cores
        )
    })?;
    let _ = std::fs::remove_dir_all(&args.path);
    let options = Options {
        pool_bytes,
        workers: 1,
        durability: Durability::Sync,
        wal_bytes_per_worker: parse_size_bytes(&args.wal_per_worker).map_err(usage_error)?,
        checkpoint_log_bytes: parse_size_bytes(&args.checkpoint_log).map_err(usage_error)?,
        log_writes: args.log_writes,
        ..Options::default()
    };
    let db = Db::open(&args.path, options).map_err(|e| format!("{}: {e}", args.path.display()))?;
    let mut rows = Vec::new();
    for &tasks in &task_counts {
        rows.push(commit_phase(
            &db,
            &args,
            &format!("closed loop {tasks} tasks"),
            tasks,
            None,
        )?);
    }
    let best = rows.iter().map(|r| r.commits_per_sec).fold(0.0, f64::max);
    let rate = args
        .open_loop_rate
        .unwrap_or(best * args.open_loop_fraction);
    let first = &rows[0];
    let group_ratio = rows[task_counts.len() - 1].commits_per_sec / first.commits_per_sec;
    // Per round: the open loop's p99 over the device's p99 at queue depth
    // 1, and over the device's under the same arrivals.
    let mut ratios: Vec<(f64, f64)> = Vec::new();
    for round in 1..=args.rounds {
        let suffix = if args.rounds > 1 {
            format!(" #{round}")
        } else {
            String::new()
        };
        let mut device = device_write_sync(&args.path, args.seconds)?;
        device.phase.push_str(&suffix);
        let open = commit_phase(
            &db,
            &args,
            &format!("open loop {rate:.0}/s{suffix}"),
            args.open_loop_tasks.max(1),
            Some(rate),
        )?;
        let mut ideal =
            device_group_commit(&args.path, args.seconds, rate, open.log_bytes_per_commit)?;
        ideal.phase.push_str(&suffix);
        ratios.push((
            open.lat_us_p99 / device.lat_us_p99,
            open.lat_us_p99 / ideal.lat_us_p99,
        ));
        rows.extend([device, open, ideal]);
    }
    db.close().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&args.path);
    let (p99_ratio, p99_min, p99_max) = median_min_max(ratios.iter().map(|r| r.0));
    let (ideal_p99_ratio, _, _) = median_min_max(ratios.iter().map(|r| r.1));
    if args.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row).map_err(|e| e.to_string())?);
        }
        println!(
            "{}",
            serde_json::json!({
                "log_writes": args.log_writes.name(),
                "open_loop_commits_per_sec": rate,
                "open_loop_rate_fixed": args.open_loop_rate.is_some(),
                "group_commit_ratio": group_ratio,
                "rounds": args.rounds,
                "open_loop_p99_over_device_p99": p99_ratio,
                "open_loop_p99_over_device_p99_min": p99_min,
                "open_loop_p99_over_device_p99_max": p99_max,
                "open_loop_p99_over_device_p99_rounds":
                    ratios.iter().map(|r| r.0).collect::<Vec<_>>(),
                "open_loop_p99_over_device_open_loop_p99": ideal_p99_ratio,
            })
        );
    } else {
        println!(
            "{:<34} {:>6} {:>11} {:>10} {:>10} {:>9} {:>9} {:>10} {:>9} {:>10} {:>6} {:>11}",
            "phase",
            "tasks",
            "commits/s",
            "syncs/s",
            "per sync",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "CPU µs",
            "log B/cmt",
            "ckpts",
            "late p99 µs"
        );
        for r in &rows {
            println!(
                "{:<34} {:>6} {:>11.0} {:>10.0} {:>10.1} {:>9.0} {:>9.0} {:>10.0} {:>9.1} {:>10.0} {:>6} {:>11.0}",
                r.phase,
                r.tasks,
                r.commits_per_sec,
                r.log_syncs_per_sec,
                r.commits_per_sync,
                r.lat_us_p50,
                r.lat_us_p99,
                r.lat_us_p999,
                r.cpu_us_per_commit,
                r.log_bytes_per_commit,
                r.checkpoints,
                r.start_late_us_p99
            );
        }
        let per_round = ratios
            .iter()
            .map(|r| format!("{:.2}", r.0))
            .collect::<Vec<_>>()
            .join(", ");
        let load = match args.open_loop_rate {
            Some(_) => "fixed by --open-loop-rate".to_string(),
            None => format!("{} of the best closed loop", args.open_loop_fraction),
        };
        println!(
            "log writes {}; group commit: {} tasks reach {group_ratio:.1}x the commits/s of {} task(s); \
             open loop at {rate:.0} commits/s ({load}); \
             open-loop p99 is {p99_ratio:.2}x the device's 4 KiB write+fdatasync p99 (queue depth 1; \
             median of {} round(s): {per_round}; min {p99_min:.2}, max {p99_max:.2}), \
             {ideal_p99_ratio:.2}x the device's under the same arrivals (one thread writing and syncing back to back; median); \
             late p99: how late the open loop's tasks started",
            args.log_writes.name(),
            task_counts[task_counts.len() - 1],
            task_counts[0],
            args.rounds,
        );
    }
    std::fs::create_dir_all(&args.out_dir).map_err(|e| e.to_string())?;
    let png = args.out_dir.join("commit-latency.png");
    let series = rows
        .iter()
        .map(|r| crate::plot::Series {
            label: r.phase.clone(),
            points: vec![
                (50.0, r.lat_us_p50),
                (99.0, r.lat_us_p99),
                (99.9, r.lat_us_p999),
            ],
        })
        .collect();
    crate::plot::line_panels(
        &png,
        "percentile",
        false,
        &[crate::plot::Panel {
            title: "commit latency (Durability::Sync) and the device's write+fdatasync".into(),
            y_label: "µs".into(),
            series,
        }],
    )?;
    if !args.json {
        println!("plot: {}", png.display());
    }
    Ok(())
}

/// The median (the lower middle of an even count), min and max of
/// `values` (NaN for none).
fn median_min_max(values: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    (v[(v.len() - 1) / 2], v[0], v[v.len() - 1])
}

/// `flashtree bench recover`.
#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    /// Store directory (removed and recreated).
    #[arg(long, default_value = "flashtree-recover-data")]
    pub path: PathBuf,
    /// Log to accumulate (with no checkpoint) before the kill.
    #[arg(long, default_value = "1GiB")]
    pub log_bytes: String,
    /// Buffer pool.
    #[arg(long, default_value = "128MiB")]
    pub pool: String,
    /// Distinct keys the batches put (default 1000000); with --engines,
    /// the keys written (`puts`, default 1000000) or the YCSB records
    /// loaded (`ycsb-a`, default 100000).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Puts per batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The same crash on each of these engines instead (e.g.
    /// flashtree,rocksdb,wiredtiger,lmdb; also redb, fjall): a child
    /// process commits --workload in sync mode from --threads threads
    /// (flashtree: tasks of one worker) for --seconds, SIGKILL, reopen
    /// (timed until the first read), every acknowledged commit checked
    /// (and for tpcc the TPC-C consistency conditions 1-4). --path is the
    /// parent directory, --pool each engine's memory. One table (or JSON
    /// line) per engine: reopen and first-read seconds, data replayed
    /// (flashtree's log bytes replayed; a peer's log files on disk before
    /// the reopen), acknowledged commits lost. Fails if an engine lost an
    /// acknowledged commit or broke a consistency condition.
    #[arg(long)]
    pub engines: Option<String>,
    /// With --engines: what the child commits. puts: each thread puts
    /// over its own --keys share (single put, batch, batch with early lock
    /// release, in turn). ycsb-a: --keys YCSB records loaded, then YCSB-A
    /// (50% reads, 50% updates, zipfian), each update acknowledged with a
    /// version in its value. tpcc: --warehouses loaded (reduced scale),
    /// then the TPC-C mix, each transaction one atomic batch, each
    /// New-Order acknowledged; after the reopen, every acknowledged order
    /// looked up and the TPC-C consistency conditions 1-4 checked. The
    /// ycsb-a and tpcc loads (also in sync) end with a clean close; the
    /// clock starts after the reopen.
    #[arg(long, value_enum, default_value_t = crate::kill::RecoverWorkload::Puts)]
    pub workload: crate::kill::RecoverWorkload,
    /// With --engines: seconds of writing before the kill.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// With --engines: writing threads.
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// With --engines --workload tpcc: warehouses.
    #[arg(long, default_value_t = 1)]
    pub warehouses: u32,
    /// With --engines --workload tpcc: the specification's scale (100000
    /// items, 3000 customers per district) instead of the reduced one
    /// (1000 items, 30 customers per district).
    #[arg(long)]
    pub tpcc_full: bool,
}

impl RecoverArgs {
    /// --keys, or the default of the mode.
    fn keys(&self) -> u64 {
        let ycsb = self.engines.is_some() && self.workload == crate::kill::RecoverWorkload::YcsbA;
        self.keys.unwrap_or(if ycsb { 100_000 } else { 1_000_000 })
    }
}

fn kill_spec(args: &RecoverArgs, engines: &str) -> Result<crate::kill::KillSpec, String> {
    let engines: Vec<String> = engines
        .split(',')
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect();
    for engine in &engines {
        let known = engine == "flashtree"
            || flashtree_peers::adapters::PEER_NAMES.contains(&engine.as_str());
        if !known {
            return Err(usage_error(format!(
                "unknown engine {engine:?}: flashtree, {}",
                flashtree_peers::adapters::PEER_NAMES.join(", ")
            )));
        }
    }
    let spec = crate::kill::KillSpec {
        engines,
        dir: args.path.clone(),
        memory_bytes: parse_size_bytes(&args.pool).map_err(usage_error)?,
        threads: args.threads,
        keys: args.keys(),
        seconds: args.seconds,
        json: args.json,
        workload: args.workload,
        warehouses: args.warehouses,
        tpcc_full: args.tpcc_full,
    };
    spec.validate().map_err(usage_error)?;
    Ok(spec)
}

/// The environment variable that makes `bench recover` the writing child.
const RECOVER_CHILD_ENV: &str = "FLASHTREE_RECOVER_CHILD";

fn recover_options(args: &RecoverArgs, log_bytes: u64) -> Result<Options, String> {
    let wal = (2 * log_bytes + (64 << 20)).div_ceil(4096) * 4096;
    Ok(Options {
        pool_bytes: parse_size_bytes(&args.pool).map_err(usage_error)?,
        workers: 1,
        durability: Durability::Sync,
        wal_bytes_per_worker: wal,
        // No checkpoint before the kill: the threshold is past the target.
        checkpoint_log_bytes: wal / 2,
        create_if_missing: true,
        ..Options::default()
    })
}

/// The batch numbered `n`: (key index, value) pairs.
fn recover_batch(args: &RecoverArgs, n: u64) -> Vec<(u64, Vec<u8>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(n);
    (0..args.batch)
        .map(|_| {
            let i = rng.random_range(0..args.keys());
            (i, value_of(i, n))
        })
        .collect()
}

/// The child: commits batches, prints `ACK n` after each, and `READY` once
/// the log holds the target; goes on until killed.
fn recover_child(args: &RecoverArgs, log_bytes: u64) -> Result<(), String> {
    let db = Db::open(&args.path, recover_options(args, log_bytes)?).map_err(|e| e.to_string())?;
    let tree = db.tree("data").map_err(|e| e.to_string())?;
    let mut ready = false;
    for n in 0.. {
        let mut batch = WriteBatch::new();
        for (i, value) in recover_batch(args, n) {
            batch
                .put(tree, &key_of(i), &value)
                .map_err(|e| e.to_string())?;
        }
        db.write(&batch, WriteOptions::default())
            .map_err(|e| e.to_string())?;
        println!("ACK {n}");
        if !ready && db.stats().log_bytes >= log_bytes {
            println!("READY");
            ready = true;
        }
    }
    Ok(())
}

/// Sequential O_DIRECT reads of the first `bytes` of `path`, 1 MiB each,
/// by 4 threads (queue depth 4): MB/s.
fn device_seq_read_mb_s(path: &Path, bytes: u64) -> Result<f64, String> {
    const CHUNK: u64 = 1 << 20;
    const THREADS: u64 = 4;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let chunks = bytes / CHUNK;
    let start = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let file = &file;
                scope.spawn(move || -> Result<(), String> {
                    let mut buf = flashtree::io::AlignedBuf::new(CHUNK as usize);
                    let mut c = t;
                    while c < chunks {
                        file.read_exact_at(&mut buf[..], c * CHUNK)
                            .map_err(|e| e.to_string())?;
                        c += THREADS;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("reader thread"))
    })?;
    Ok((chunks * CHUNK) as f64 / start.elapsed().as_secs_f64() / 1e6)
}

/// `flashtree bench recover`.
pub fn run_recover(args: RecoverArgs) -> Result<(), String> {
    if let Some(engines) = &args.engines {
        let spec = kill_spec(&args, engines)?;
        return match crate::kill::child_engine() {
            Some(engine) => crate::kill::run_child(&spec, &engine),
            None => crate::kill::run(&spec),
        };
    }
    if args.workload != crate::kill::RecoverWorkload::Puts {
        return Err(usage_error("--workload needs --engines"));
    }
    let log_bytes = parse_size_bytes(&args.log_bytes).map_err(usage_error)?;
    if args.batch == 0 || args.keys() == 0 {
        return Err(usage_error("--batch and --keys must be > 0"));
    }
    if std::env::var_os(RECOVER_CHILD_ENV).is_some() {
        return recover_child(&args, log_bytes);
    }
    let _ = std::fs::remove_dir_all(&args.path);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(RECOVER_CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the writing child: {e}"))?;
    let bar = progress_bar(log_bytes >> 20, "writing log");
    let mut last_acked: Option<u64> = None;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut ready = false;
    let write_start = Instant::now();
    for line in lines.by_ref() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some(n) = line.strip_prefix("ACK ") {
            last_acked = n.trim().parse().ok();
            if let Some(n) = last_acked {
                // About 4 KiB of log per put.
                bar.set_position((((n + 1) * args.batch as u64 * 4096) >> 20).min(log_bytes >> 20));
            }
        } else if line == "READY" {
            ready = true;
            break;
        }
    }
    let write_seconds = write_start.elapsed().as_secs_f64();
    child.kill().map_err(|e| e.to_string())?;
    for line in lines.map_while(|l| l.ok()) {
        if let Some(n) = line.strip_prefix("ACK ") {
            last_acked = n.trim().parse().ok().or(last_acked);
        }
    }
    let _ = child.wait();
    bar.finish_and_clear();
    if !ready {
        return Err("the writing child ended before its log reached the target".into());
    }
    let Some(last_acked) = last_acked else {
        return Err("the writing child acknowledged no batch".into());
    };
    let total = Arc::new(AtomicU64::new(0));
    let bar = progress_bar(100, "recovering");
    let progress = {
        let (bar, total) = (bar.clone(), total.clone());
        RecoveryProgress(Arc::new(move |done, all| {
            total.store(all, Ordering::Relaxed);
            bar.set_position(done * 100 / all.max(1));
        }))
    };
    let options = Options {
        recovery_progress: Some(progress),
        ..recover_options(&args, log_bytes)?
    };
    let open_start = Instant::now();
    let db = Db::open(&args.path, options).map_err(|e| format!("reopen after the kill: {e}"))?;
    let open_seconds = open_start.elapsed().as_secs_f64();
    let tree = db.tree("data").map_err(|e| e.to_string())?;
    let first = recover_batch(&args, last_acked);
    let _ = db
        .get(tree, &key_of(first[0].0))
        .map_err(|e| e.to_string())?;
    let first_read_seconds = open_start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    // Every acknowledged batch: each key holds its value or a later one.
    let mut lost = 0u64;
    for n in last_acked.saturating_sub(99)..=last_acked {
        for (i, _) in recover_batch(&args, n) {
            let batch_of = db
                .get(tree, &key_of(i))
                .map_err(|e| e.to_string())?
                .map(|v| u64::from_le_bytes(v[..8].try_into().expect("8 bytes")));
            if batch_of.is_none_or(|b| b < n) {
                lost += 1;
            }
        }
    }
    let recovery = db.stats().recovery;
    db.close().map_err(|e| e.to_string())?;
    let log_path = args.path.join("data.ft.wal0");
    let device_mb_s = device_seq_read_mb_s(&log_path, recovery.log_bytes.min(log_bytes))?;
    let _ = std::fs::remove_dir_all(&args.path);
    let recovery_mb_s = recovery.log_bytes as f64 / recovery.micros.max(1) as f64;
    let row = serde_json::json!({
        "log_bytes_target": log_bytes,
        "write_seconds": write_seconds,
        "batches_acknowledged": last_acked + 1,
        "log_bytes_replayed": recovery.log_bytes,
        "groups_replayed": recovery.groups,
        "groups_dropped": recovery.groups_dropped,
        "pages_written": recovery.pages_written,
        "recovery_seconds": recovery.micros as f64 / 1e6,
        "open_seconds": open_seconds,
        "first_read_seconds": first_read_seconds,
        "recovery_mb_per_sec": recovery_mb_s,
        "device_seq_read_mb_per_sec": device_mb_s,
        "recovery_over_device": recovery_mb_s / device_mb_s,
        "acknowledged_puts_checked": 100 * args.batch,
        "acknowledged_puts_lost": lost,
    });
    if args.json {
        println!("{row}");
    } else {
        println!("{:<34} {:>14}", "what", "value");
        for (k, v) in row.as_object().expect("an object") {
            let text = match v.as_f64() {
                Some(x) if v.is_f64() => format!("{x:.2}"),
                _ => v.to_string(),
            };
            println!("{k:<34} {text:>14}");
        }
    }
    if lost > 0 {
        return Err(format!("{lost} acknowledged puts were lost"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        args: CommitArgs,
    }

    /// A fixed open-loop rate below one commit a second, or not a number,
    /// is refused before anything runs.
    #[test]
    fn a_bad_open_loop_rate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        for rate in ["0", "0.5", "NaN", "inf"] {
            let args = Wrap::parse_from([
                "x",
                "--path",
                path.to_str().unwrap(),
                "--open-loop-rate",
                rate,
            ])
            .args;
            let error = run_commit(args).expect_err(rate);
            assert!(error.contains("--open-loop-rate"), "{rate}: {error}");
            assert!(!path.exists(), "{rate}: the store was made");
        }
    }

    /// Every commit of every task is in the phase's histogram, with two
    /// workers whose tasks end at different times (the last task of each
    /// worker takes its histograms).
    #[test]
    fn a_phase_counts_every_commit_of_every_task() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let args = Wrap::parse_from([
            "x",
            "--path",
            path.to_str().unwrap(),
            "--seconds",
            "0.3",
            "--keys",
            "500",
        ])
        .args;
        let options = Options {
            pool_bytes: 64 * 4096,
            workers: 2,
            durability: Durability::Sync,
            wal_bytes_per_worker: 4 << 20,
            checkpoint_log_bytes: 1 << 20,
            ..Options::default()
        };
        let db = Db::open(&path, options).unwrap();
        // The tree's creation is a group of its own: before counting.
        db.tree("commits").unwrap();
        for rate in [None, Some(2_000.0)] {
            let before = db.stats().log_groups;
            let row = commit_phase(&db, &args, "test", 12, rate).unwrap();
            let groups = db.stats().log_groups - before;
            assert!(row.commits > 0);
            // Each put is one group.
            assert_eq!(row.commits, groups, "rate {rate:?}");
        }
        db.close().unwrap();
    }
}
