//! `flashtree bench compare`: one workload on flashtree and its peers
//! (RocksDB, WiredTiger, LMDB) with the same memory, cores and durability.
//!
//! The peers crate does the work ([`run_compare`]); this module adds what
//! only the engine crate can: the flashtree adapter ([`crate::adapter`]) and
//! the device limit, measured with `iobench` (random 4 KiB reads, io_uring,
//! depth 128 per core) on a file in the same directory as the engines' data.
//! Errors in the arguments are usage errors (exit code 2); failures while
//! running are not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flashtree::io::{BackendKind, IoConfig, Storage, StorageConfig};
use flashtree_peers::adapters::PEER_NAMES;
use flashtree_peers::compare::{build_workload, run_compare, Hooks};
use flashtree_peers::sys::{parse_bytes, parse_cores};
use flashtree_peers::EngineConfig;

use crate::adapter::{FlashtreeEngine, FlashtreeSettings, TASKS_PER_WORKER_MAX};
use crate::iobench::{prepare_files, run_point, Pattern, PointSpec};
use crate::util::usage_error;

/// Random-read size of the device-limit measurement.
const DEVICE_LIMIT_BLOCK_BYTES: u32 = 4096;
/// I/O depth per thread of the device-limit measurement.
const DEVICE_LIMIT_DEPTH: u32 = 128;
/// Length of the device-limit measurement.
const DEVICE_LIMIT_SECONDS: f64 = 5.0;
/// Smallest device-limit file (reads must spread beyond any device cache).
const DEVICE_LIMIT_FILE_BYTES_MIN: u64 = 2 << 30;
/// Stripe unit of the device-limit file (one file, so only alignment matters).
const DEVICE_LIMIT_CHUNK_BYTES: u64 = 64 * 1024;
/// Name of the device-limit file inside the data directory.
const DEVICE_LIMIT_FILE_NAME: &str = "device-limit.dat";
/// Most flashtree worker threads.
const WORKERS_MAX: usize = 1024;

/// Arguments of `flashtree bench compare`: the peers crate's, plus
/// flashtree's own concurrency. `--cores` defaults to 0 (one core).
#[derive(clap::Args, Debug)]
#[group(id = "flashtree-compare")]
#[command(mut_arg("cores", |arg| arg.default_value("0")))]
pub struct CompareArgs {
    #[command(flatten)]
    pub peers: flashtree_peers::compare::CompareArgs,
    /// flashtree async tasks per worker; a list (e.g. 256,512) is swept
    /// like the peers' thread counts and the best is reported. The load
    /// runs with the largest.
    #[arg(long, default_value = crate::adapter::TASKS_SWEEP_DEFAULT)]
    pub tasks: String,
    /// flashtree worker threads (default: one per --cores core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// flashtree I/O backend: io_uring, libaio or sync.
    #[arg(long, default_value = "io_uring")]
    pub backend: String,
    /// flashtree clock: marked rounds a dirty page is spared
    /// (`Options::dirty_spare_rounds`).
    #[arg(long, default_value_t = flashtree::db::Options::default().dirty_spare_rounds)]
    pub dirty_spare_rounds: u8,
    /// flashtree clock: most marked rounds a page is spared for its heat
    /// (`Options::hot_spare_rounds`; 0 = plain second chance).
    #[arg(long, default_value_t = flashtree::db::Options::default().hot_spare_rounds)]
    pub hot_spare_rounds: u8,
    /// flashtree I/O: a worker's channel submits by itself once this many
    /// requests are queued (`IoConfig::submit_batch`; 0: only once per
    /// loop round).
    #[arg(long, default_value_t = IoConfig::default().submit_batch)]
    pub submit_batch: u32,
    /// flashtree I/O: ... but not while this many submitted requests are
    /// unfinished (`IoConfig::submit_busy_depth`; 0: no such pause).
    #[arg(long, default_value_t = IoConfig::default().submit_busy_depth)]
    pub submit_busy_depth: u32,
    /// flashtree: log per worker, a preallocated ring
    /// (`Options::wal_bytes_per_worker`).
    #[arg(long, default_value_t = format!("{}MiB", flashtree::db::Options::default().wal_bytes_per_worker >> 20))]
    pub wal_per_worker: String,
    /// flashtree: log written between checkpoints, at most half of
    /// --wal-per-worker (`Options::checkpoint_log_bytes`). Longer: fewer
    /// full page images in the log, more log to replay after a crash.
    #[arg(long, default_value_t = format!("{}MiB", flashtree::db::Options::default().checkpoint_log_bytes >> 20))]
    pub checkpoint_log: String,
    /// flashtree: how each worker writes its log (`Options::log_writes`):
    /// auto (on the worker's thread when it has nothing else to do, else
    /// through its channel), inline (always on its thread, which waits for
    /// each write) or channel (always through its io_uring/libaio channel).
    #[arg(long, default_value = "auto")]
    pub log_writes: flashtree::db::LogWrites,
    /// flashtree: keep the store on this block device (repeat for a RAID0
    /// set) instead of under --dir, which then holds only the marker of
    /// the load. A new load erases the devices (whatever they hold): give
    /// only devices meant for it.
    #[arg(long)]
    pub flashtree_device: Vec<PathBuf>,
}

/// Runs the comparison.
pub fn run(args: CompareArgs) -> Result<(), String> {
    let (settings, dataset_bytes, cores) = validate(&args).map_err(usage_error)?;
    let keep_data = args.peers.keep_data;
    let hash_settings = crate::adapter::FlashtreeSettings {
        hash_index: true,
        ..settings.clone()
    };
    let hooks = Hooks {
        flashtree: Some(Box::new(move |config: &EngineConfig| {
            let engine = FlashtreeEngine::open(config, &settings)?;
            Ok(Box::new(engine) as Box<dyn flashtree_peers::Engine>)
        })),
        flashtree_hash: Some(Box::new(move |config: &EngineConfig| {
            let engine = FlashtreeEngine::open(config, &hash_settings)?;
            Ok(Box::new(engine) as Box<dyn flashtree_peers::Engine>)
        })),
        device_limit: Some(Box::new(move |dir: &Path| {
            measure_device_limit(dir, dataset_bytes, cores.len().max(1), keep_data)
        })),
    };
    run_compare(&args.peers, &hooks)
}

/// Checks everything the user typed before any engine runs. Returns the
/// flashtree settings, the dataset size and the cores.
fn validate(args: &CompareArgs) -> Result<(FlashtreeSettings, u64, Vec<usize>), String> {
    let peers = &args.peers;
    let memory_bytes = parse_bytes(&peers.memory).map_err(|e| format!("--memory: {e}"))?;
    let cores = parse_cores(&peers.cores).map_err(|e| format!("--cores: {e}"))?;
    for name in peers.engines.split(',').map(str::trim) {
        if !name.is_empty()
            && name != crate::adapter::ENGINE_NAME
            && name != crate::adapter::HASH_ENGINE_NAME
            && !PEER_NAMES.contains(&name)
        {
            return Err(format!(
                "unknown engine {name:?} in --engines: use flashtree, flashtree-hash, {}",
                PEER_NAMES.join(", ")
            ));
        }
    }
    if !(peers.seconds > 0.0 && peers.seconds < 86_400.0) {
        return Err(format!(
            "--seconds {} out of range (0, 86400)",
            peers.seconds
        ));
    }
    if let Some(rate) = peers.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(format!("--rate {rate} must be a positive number"));
    }
    // The device-limit file is as large as the largest dataset of the run.
    let mut dataset_bytes = 0;
    for combination in peers.combinations()? {
        dataset_bytes = build_workload(&combination, memory_bytes)?
            .dataset_bytes()
            .max(dataset_bytes);
    }
    let tasks_sweep: Vec<usize> = args
        .tasks
        .split(',')
        .map(|t| t.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("bad --tasks {:?}: use e.g. 512 or 256,512", args.tasks))?;
    if tasks_sweep
        .iter()
        .any(|t| !(1..=TASKS_PER_WORKER_MAX).contains(t))
    {
        return Err(format!(
            "--tasks values must be in 1..={TASKS_PER_WORKER_MAX}, got {:?}",
            args.tasks
        ));
    }
    if let Some(workers) = args.workers.filter(|w| !(1..=WORKERS_MAX).contains(w)) {
        return Err(format!("--workers {workers} outside 1..={WORKERS_MAX}"));
    }
    let backend: BackendKind = args
        .backend
        .parse()
        .map_err(|e| format!("--backend: {e}"))?;
    let settings = FlashtreeSettings {
        workers: args.workers,
        tasks_per_worker: tasks_sweep.iter().copied().max().unwrap_or(1),
        tasks_sweep,
        backend,
        dirty_spare_rounds: args.dirty_spare_rounds,
        hot_spare_rounds: args.hot_spare_rounds,
        submit_batch: args.submit_batch,
        submit_busy_depth: args.submit_busy_depth,
        wal_bytes_per_worker: crate::util::parse_size_bytes(&args.wal_per_worker)
            .map_err(|e| format!("--wal-per-worker: {e}"))?,
        checkpoint_log_bytes: crate::util::parse_size_bytes(&args.checkpoint_log)
            .map_err(|e| format!("--checkpoint-log: {e}"))?,
        log_writes: args.log_writes,
        devices: args.flashtree_device.clone(),
        hash_index: false,
    };
    Ok((settings, dataset_bytes, cores))
}

/// Random 4 KiB read IOPS of the device under `dir`: io_uring, depth 128
/// per thread, one thread per core, on a file the size of the dataset (at
/// least 2 GiB), for 5 s. The file is removed afterwards unless kept.
fn measure_device_limit(
    dir: &Path,
    dataset_bytes: u64,
    threads: usize,
    keep_file: bool,
) -> Result<f64, String> {
    let size_bytes = dataset_bytes
        .max(DEVICE_LIMIT_FILE_BYTES_MIN)
        .next_multiple_of(DEVICE_LIMIT_CHUNK_BYTES);
    let path: PathBuf = dir.join(DEVICE_LIMIT_FILE_NAME);
    eprintln!(
        "device limit: random {} KiB reads, io_uring, depth {DEVICE_LIMIT_DEPTH} × {threads} thread(s), \
         {DEVICE_LIMIT_SECONDS} s on {} ({} MiB)",
        DEVICE_LIMIT_BLOCK_BYTES / 1024,
        path.display(),
        size_bytes >> 20
    );
    let paths = vec![path.clone()];
    prepare_files(&paths, size_bytes, DEVICE_LIMIT_CHUNK_BYTES, true)?;
    let mut config = StorageConfig::new(paths);
    config.chunk_bytes = DEVICE_LIMIT_CHUNK_BYTES;
    config.direct = true;
    config.min_capacity_bytes = size_bytes;
    let measured = Storage::open(&config)
        .map_err(|e| format!("device limit: {e}"))
        .and_then(|storage| {
            let spec = PointSpec {
                backend: BackendKind::IoUring,
                pattern: Pattern::RandRead,
                read_pct: 100,
                block_bytes: DEVICE_LIMIT_BLOCK_BYTES,
                depth: DEVICE_LIMIT_DEPTH,
                batch: IoConfig::default().submit_batch,
                threads: threads as u32,
                seconds: DEVICE_LIMIT_SECONDS,
            };
            let io_config = IoConfig {
                backend: spec.backend,
                depth: spec.depth,
                ..IoConfig::default()
            };
            run_point(&Arc::new(storage), size_bytes, &io_config, &spec)
        });
    if !keep_file {
        let _ = std::fs::remove_file(&path);
    }
    let point = measured?;
    eprintln!(
        "device limit: {:.0} IOPS (p99 {:.0} µs)",
        point.iops, point.lat_us_p99
    );
    Ok(point.iops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CompareArgs,
    }

    fn parse(argv: &[&str]) -> CompareArgs {
        let mut full = vec!["compare"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).expect("arguments parse").args
    }

    #[test]
    fn defaults_match_the_issue() {
        let args = parse(&[]);
        assert_eq!(args.peers.memory, "128MiB");
        assert_eq!(args.peers.data_factor_value(), Ok(10.0));
        assert_eq!(args.peers.cores, "0");
        assert!(validate(&args).is_ok());
    }

    /// A tiny comparison on flashtree alone (no device-limit file, no
    /// pinning), in `--durability none` (the default): its result carries
    /// space figures that agree with the store's own count and with what
    /// is on disk, where an unlogged store keeps no log space.
    #[test]
    fn a_flashtree_result_carries_plausible_space_figures() {
        let data = tempfile::tempdir().unwrap();
        let results = tempfile::tempdir().unwrap();
        let data_text = data.path().to_string_lossy().to_string();
        let results_text = results.path().to_string_lossy().to_string();
        // 8000 YCSB-C records of 1008 bytes (read only): ~8 MB raw.
        let args = parse(&[
            "--engines",
            "flashtree",
            "--workload",
            "ycsb-c",
            "--records",
            "8000",
            "--memory",
            "4MiB",
            "--cores",
            "",
            "--workers",
            "1",
            "--tasks",
            "8",
            "--backend",
            "sync",
            "--seconds",
            "0.3",
            "--warmup",
            "0",
            "--wal-per-worker",
            "1MiB",
            "--checkpoint-log",
            "512KiB",
            "--dir",
            &data_text,
            "--results",
            &results_text,
        ]);
        let (settings, _, _) = validate(&args).expect("valid arguments");
        let hooks = Hooks {
            flashtree: Some(Box::new(move |config: &EngineConfig| {
                let engine = FlashtreeEngine::open(config, &settings)?;
                Ok(Box::new(engine) as Box<dyn flashtree_peers::Engine>)
            })),
            flashtree_hash: None,
            device_limit: None,
        };
        run_compare(&args.peers, &hooks).expect("bench compare");
        let out = std::fs::read_dir(results.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(out.join("flashtree.json")).unwrap();
        let run: serde_json::Value = serde_json::from_str(&text).unwrap();
        let field = |name: &str| {
            run[name]
                .as_f64()
                .unwrap_or_else(|| panic!("{name} missing: {run}"))
        };
        let raw_bytes = 8000.0 * 1008.0;
        assert_eq!(field("raw_bytes"), raw_bytes);
        assert_eq!(field("raw_bytes_live_after_run"), raw_bytes);
        let after_load = field("disk_bytes_after_load");
        let after_run = field("disk_bytes_after_run");
        // The data file holds at least the pages the store allocated, by
        // its own count; an unlogged open takes no log space.
        let store_bytes = field("engine_store_bytes_before_close");
        assert!(store_bytes >= raw_bytes, "{run}");
        assert!(after_run >= store_bytes, "{run}");
        assert!(
            after_load >= field("engine_store_bytes_after_load"),
            "{run}"
        );
        let log_bytes = run["disk_after_run"]["allocated_bytes_by_kind"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kind| kind[0] == "data.ft.walN")
            .map_or(0, |kind| kind[1].as_u64().unwrap());
        assert_eq!(log_bytes, 0, "log space in an unlogged run: {run}");
        // More than the raw bytes (pages, fill, a 16 MiB new store), less
        // than 4× at this size.
        for amp in [field("space_amp_after_load"), field("space_amp_after_run")] {
            assert!(amp > 1.0 && amp < 4.0, "space amp {amp}: {run}");
        }
        assert_eq!(field("space_amp_after_run"), after_run / raw_bytes);
    }

    #[test]
    fn bad_values_are_rejected_before_running() {
        for argv in [
            &["--engines", "flashtree,postgres"][..],
            &["--memory", "lots"],
            &["--workload", "tpcd"],
            &["--workload", "ycsb,tpcd"],
            &["--data-factor", "0.5,-1"],
            &["--tasks", "0"],
            &["--backend", "carrier-pigeon"],
            &["--seconds", "0"],
        ] {
            assert!(validate(&parse(argv)).is_err(), "{argv:?} accepted");
        }
    }
}
