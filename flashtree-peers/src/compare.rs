//! `flashtree bench compare`: one workload on several engines with the same
//! memory budget, cores and durability; writes `results/<timestamp>/` with a
//! JSON file per run, `report.md` and PNG plots, and with `--json` prints one
//! summary line per engine. Every result gives the space the engine's
//! directory takes on disk after the load and after the run against the
//! raw key and value bytes ([`crate::space`]). With `--profile`, every timed run is sampled
//! with Linux perf and the report says where each engine's CPU time goes.
//!
//! Lists of workloads and data factors run every combination in turn, each
//! in `results/<timestamp>/<workload>-x<data factor>/` as above, and add
//! `summary.md`, `summary.json` and `summary.png` over all of them
//! ([`crate::suite`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::adapters::{cache_setting, open_peer, page_cache_bytes};
use crate::cgroup::MemoryCgroup;
use crate::cost::{
    cost_of, set_flashtree_ratios, CostFigures, CostInputs, Prices, ReadRate, ReadSource,
};
use crate::driver::{best_index, run_phase, sweep_counts, sweep_threads, PhaseResult, PhaseSpec};
use crate::engine::{Concurrency, DurabilityMode, Engine, EngineConfig, EngineFactory};
use crate::job::Phase;
use crate::space::{disk_usage, space_amp, DiskUsage};
use crate::sys::{parse_bytes, parse_cores, pin_process_to, Profile};
use crate::workload::lookup::Lookup;
use crate::workload::tpcc::{Tpcc, TpccScale};
use crate::workload::ycsb::{Ycsb, YcsbKind};
use crate::workload::{OpKind, Workload};

/// Device read bytes above this multiple of the process's read bytes
/// (plus [`OTHERS_READS_SLACK_BYTES_PER_SEC`]) are taken as other
/// processes' reads in the device counters, and the cost notes say so.
const OTHERS_READS_RATIO: f64 = 1.1;
/// Device read bytes/s above the process's that are never flagged
/// (file-system metadata, small background reads).
const OTHERS_READS_SLACK_BYTES_PER_SEC: f64 = 1e6;

/// Command-line arguments of `bench compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// lookup, ycsb-a .. ycsb-f, or tpcc; or a comma-separated list of them
    /// (`ycsb` = ycsb-a .. ycsb-f), each run in turn, with a summary.
    #[arg(long, default_value = "lookup")]
    pub workload: String,
    /// Comma-separated engines: flashtree, flashtree-hash (flashtree with
    /// every table a hash tree: point operations only), rocksdb,
    /// wiredtiger, lmdb, redb, fjall (flashtree-hash, redb and fjall are
    /// optional: not in the default list).
    #[arg(long, default_value = "flashtree,rocksdb,wiredtiger,lmdb")]
    pub engines: String,
    /// Memory budget per engine (cache / buffer pool), e.g. 128MiB.
    #[arg(long, default_value = "128MiB")]
    pub memory: String,
    /// Loaded dataset ≈ data-factor × memory (0.5: in memory, 10: 10× out
    /// of memory); a comma-separated list runs each workload at each.
    #[arg(long, default_value = "10")]
    pub data_factor: String,
    /// CPU cores for every engine, e.g. 0 or 0-3 (empty: no pinning).
    #[arg(long, default_value = "")]
    pub cores: String,
    /// Seconds per timed run (each thread count of the sweep runs this long).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Seconds of unmeasured warm-up run per engine after its load and
    /// before its sweep (first thread count or tasks value), so that every
    /// engine is measured in steady state (as TPC-C measures after a
    /// ramp-up). 0: none.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Thread counts to sweep for thread-per-request engines; the best is reported.
    #[arg(long, default_value = "1,8,64,256")]
    pub threads: String,
    /// Open loop at this many operations per second (exponential inter-arrivals).
    #[arg(long)]
    pub rate: Option<f64>,
    /// When every engine's commits return: none (no log where the engine
    /// can turn it off), buffered (logged, not synced), sync (durable
    /// against a power cut). The report gives each engine's setting.
    #[arg(long, value_enum, default_value_t = DurabilityMode::None)]
    pub durability: DurabilityMode,
    /// Rounds: the engines run in turn, this many times over (each load
    /// once, kept between rounds); the report gives min, median and max
    /// of each engine's ops/s and of flashtree's ratio to each, and its
    /// tables show each engine's median round.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// TPC-C warehouses (default: from memory × data-factor).
    #[arg(long)]
    pub warehouses: Option<u32>,
    /// Reduced TPC-C scale (1000 items, 30 customers and orders per district) for quick checks.
    #[arg(long)]
    pub tpcc_small: bool,
    /// Lookup keys zipfian with this theta (default uniform).
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Records to load (overrides data-factor; lookup and YCSB).
    #[arg(long)]
    pub records: Option<u64>,
    /// Data directory; each engine writes under DIR/<engine>, removed afterwards.
    #[arg(long, default_value = "flashtree-data")]
    pub dir: PathBuf,
    /// Where results/<timestamp>/ goes.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Keep each engine's data directory after its run (and mark what it
    /// holds in DIR/<engine>.loaded, for --reuse-data).
    #[arg(long)]
    pub keep_data: bool,
    /// Skip the load of an engine whose DIR/<engine> a --keep-data run left
    /// loaded with the same workload and record count, and for the peers
    /// the same --durability (DIR/<engine>.loaded says so; the report gives
    /// that load's rate); load as usual otherwise.
    /// For repeated runs on one dataset, e.g. interleaved with another tool.
    #[arg(long)]
    pub reuse_data: bool,
    /// After each engine's load (or reused load), and before its run, let
    /// the engine compact its data its own way (RocksDB: `CompactRange`
    /// over every key; flashtree: `Db::compact` of every tree, which moves
    /// leaves to consecutive page ids in key order; the others have no
    /// such operation and run as loaded). The report says what each did
    /// and how long it took; the space after the load is measured after
    /// it.
    #[arg(long)]
    pub compact_after_load: bool,
    /// Print one JSON summary per engine per line (with its space
    /// figures: `raw_bytes`, `disk_bytes_after_load`, `disk_bytes_after_run`,
    /// `space_amp_after_load`, `space_amp_after_run`; null where n/a).
    #[arg(long)]
    pub json: bool,
    /// Seed of all random numbers.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Sample every timed run with `perf record -e cpu-clock -F 999` (no call
    /// graph) and add "Where the time goes" to report.md: kernel/user share
    /// and top symbols per engine, also in profile-<engine>.txt; the best
    /// run's <engine>-<threads>.perf.data stays in the results directory.
    /// Needs perf 5.10 or newer (Debian package linux-perf) and root or
    /// kernel.perf_event_paranoid <= 1; without them the report says why and
    /// the comparison runs unprofiled. Sampling costs a few percent of
    /// throughput: profiled runs are for where the time goes, not for the
    /// headline numbers.
    #[arg(long)]
    pub profile: bool,
    /// Price table (TOML or JSON: $ per core, per GiB of DRAM and of SSD,
    /// the SSD's rated random-read IOPS, source and date) for each
    /// result's cost and ops/s per $ ([`crate::cost`]). Default: built in,
    /// from Table 1 of Huang et al., "SSDs Striking Back", CIDR 2022.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Pool-share sweep: run each workload (lookup, ycsb-a .. ycsb-f) with
    /// each engine's pool or cache at these shares of the data, e.g.
    /// 1.0,0.8,0.5,0.2,0.1,0.05; the data is --memory × --data-factor (or
    /// --records) and stays the same at every share. summary.md names each
    /// engine's best share by ops/s per $ and pool-shares-<workload>.png
    /// plots ops/s and ops/s per $ against the share.
    #[arg(long)]
    pub pool_shares: Option<String>,
    /// The pool share this run is one point of (set by the sweep).
    #[arg(skip)]
    pub pool_share: Option<f64>,
}

/// Callbacks the engine crate supplies (this crate does not depend on it).
#[derive(Default)]
pub struct Hooks {
    /// Opens flashtree.
    pub flashtree: Option<Box<EngineFactory>>,
    /// Opens flashtree with every table a hash tree (engine
    /// `flashtree-hash`: point operations only).
    pub flashtree_hash: Option<Box<EngineFactory>>,
    /// Measures the device's random-read IOPS limit for a data directory (iobench).
    #[allow(clippy::type_complexity)]
    pub device_limit: Option<Box<dyn Fn(&Path) -> Result<f64, String>>>,
}

/// The workloads `--workload` names, in order (`ycsb` expands to all six).
fn parse_workloads(text: &str) -> Result<Vec<String>, String> {
    let mut workloads: Vec<String> = Vec::new();
    for name in text.split(',').map(|w| w.trim().to_ascii_lowercase()) {
        let expanded: Vec<String> = match name.as_str() {
            "" => continue,
            "ycsb" => "abcdef".chars().map(|c| format!("ycsb-{c}")).collect(),
            _ => vec![name],
        };
        for workload in expanded {
            if !workloads.contains(&workload) {
                workloads.push(workload);
            }
        }
    }
    if workloads.is_empty() {
        return Err("--workload is empty".into());
    }
    Ok(workloads)
}

/// The shares `--pool-shares` lists, each in (0, 1], without repeats.
fn parse_pool_shares(text: &str) -> Result<Vec<f64>, String> {
    let shares: Vec<f64> = text
        .split(',')
        .map(|f| f.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("bad --pool-shares {text:?}: use e.g. 1.0,0.5,0.1"))?;
    if let Some(bad) = shares.iter().find(|f| !(**f > 0.0 && **f <= 1.0)) {
        return Err(format!("--pool-shares {bad} out of range (0, 1]"));
    }
    for (at, share) in shares.iter().enumerate() {
        if shares[..at].contains(share) {
            return Err(format!("--pool-shares lists {share} twice"));
        }
    }
    Ok(shares)
}

/// The data factors `--data-factor` lists, each in (0, 1000].
fn parse_data_factors(text: &str) -> Result<Vec<f64>, String> {
    let factors: Vec<f64> = text
        .split(',')
        .map(|f| f.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("bad --data-factor {text:?}: use e.g. 10 or 0.5,10"))?;
    if let Some(bad) = factors.iter().find(|f| !(**f > 0.0 && **f <= 1000.0)) {
        return Err(format!("--data-factor {bad} out of range (0, 1000]"));
    }
    Ok(factors)
}

impl CompareArgs {
    /// The data factor of a single run (an error for a list: see
    /// [`CompareArgs::combinations`]).
    pub fn data_factor_value(&self) -> Result<f64, String> {
        match parse_data_factors(&self.data_factor)?.as_slice() {
            [factor] => Ok(*factor),
            _ => Err(format!(
                "--data-factor {:?}: one value expected here",
                self.data_factor
            )),
        }
    }

    /// One copy of the arguments per (workload, data factor), workloads
    /// outermost, each with a single workload and data factor.
    pub fn combinations(&self) -> Result<Vec<CompareArgs>, String> {
        let workloads = parse_workloads(&self.workload)?;
        if let Some(shares) = &self.pool_shares {
            return self.pool_share_combinations(&workloads, &parse_pool_shares(shares)?);
        }
        let factors = parse_data_factors(&self.data_factor)?;
        let mut all = Vec::with_capacity(workloads.len() * factors.len());
        for workload in &workloads {
            for factor in &factors {
                all.push(CompareArgs {
                    workload: workload.clone(),
                    data_factor: factor.to_string(),
                    ..self.clone()
                });
            }
        }
        Ok(all)
    }
}

impl CompareArgs {
    /// One copy per (workload, pool share), workloads outermost: the data of
    /// `--memory` × `--data-factor` (or `--records`) records, fixed, and
    /// the memory budget that share of its bytes.
    fn pool_share_combinations(
        &self,
        workloads: &[String],
        shares: &[f64],
    ) -> Result<Vec<CompareArgs>, String> {
        let memory_bytes = parse_bytes(&self.memory)?;
        let mut all = Vec::with_capacity(workloads.len() * shares.len());
        for workload in workloads {
            if !(workload == "lookup" || workload.starts_with("ycsb-")) {
                return Err(format!(
                    "--pool-shares runs lookup and YCSB workloads, not {workload}"
                ));
            }
            let single = CompareArgs {
                workload: workload.clone(),
                ..self.clone()
            };
            let data = build_workload(&single, memory_bytes)?;
            let data_bytes = data.dataset_bytes();
            for &share in shares {
                let pool_bytes = ((data_bytes as f64 * share) as u64).max(1 << 20);
                all.push(CompareArgs {
                    workload: workload.clone(),
                    memory: pool_bytes.to_string(),
                    // Nominal: the pool is the share of the data, truncated to bytes.
                    data_factor: (1.0 / share).to_string(),
                    records: Some(data.records_count()),
                    pool_shares: None,
                    pool_share: Some(share),
                    ..self.clone()
                });
            }
        }
        Ok(all)
    }

    /// The results subdirectory of one combination.
    fn combination_dir(&self) -> Result<String, String> {
        Ok(match self.pool_share {
            Some(share) => format!("{}-pool{share}", self.workload),
            None => format!("{}-x{}", self.workload, self.data_factor_value()?),
        })
    }
}

/// The summary line of one engine (`--json`); null where unknown.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub engine: String,
    pub workload: String,
    pub records: u64,
    pub pool_bytes: u64,
    pub dataset_bytes: u64,
    pub workers: Option<usize>,
    pub tasks: Option<usize>,
    pub threads: Option<usize>,
    pub settings: String,
    pub ops_per_sec: f64,
    /// Reads and writes per second the block device under `--dir`
    /// completed in the best run (its own counters: every process's I/O to
    /// it counts; null: not measurable, `device_counters_error` says why).
    pub read_iops: Option<f64>,
    pub write_iops: Option<f64>,
    /// Bytes per second the device read and wrote in the best run.
    pub device_read_bytes_per_sec: Option<f64>,
    pub device_write_bytes_per_sec: Option<f64>,
    /// The device those counters are of ([`crate::devio::BlockDevice::describe`]).
    pub device: Option<String>,
    /// Why there are no device counters.
    pub device_counters_error: Option<String>,
    pub hit_ratio: Option<f64>,
    pub cpu_s: f64,
    /// Wall seconds of the best run (cores used = `cpu_s / wall_s`).
    pub wall_s: f64,
    pub cpu_us_per_op: Option<f64>,
    /// Of `cpu_us_per_op`, µs in user space.
    pub cpu_us_per_op_user: Option<f64>,
    /// Of `cpu_us_per_op`, µs in the kernel (getrusage system time).
    pub cpu_us_per_op_sys: Option<f64>,
    pub lat_us_p50: Option<f64>,
    pub lat_us_p99: Option<f64>,
    pub load_records_per_sec: f64,
    /// Key and value bytes the load committed: the raw user data (null:
    /// unknown, `space_notes` says why).
    pub raw_bytes: Option<u64>,
    /// Key and value bytes live after the run, where the workload knows
    /// them ([`Workload::live_bytes_after_run`]: lookup, YCSB); null for
    /// TPC-C, whose `space_amp_after_run` divides by `raw_bytes`.
    pub raw_bytes_live_after_run: Option<u64>,
    /// Space the engine's directory took on disk at the end of the load,
    /// the engine still open ([`crate::space::disk_usage`]: allocated
    /// blocks, `st_blocks × 512`, of every file under `DIR/<engine>`).
    pub disk_bytes_after_load: Option<u64>,
    /// The same after the run (warm-up, sweep and check) and the engine's
    /// close.
    pub disk_bytes_after_run: Option<u64>,
    /// `disk_bytes_after_load / raw_bytes`.
    pub space_amp_after_load: Option<f64>,
    /// `disk_bytes_after_run / raw_bytes_live_after_run`, or `/ raw_bytes`
    /// where the live bytes are unknown (`space_notes` says so).
    pub space_amp_after_run: Option<f64>,
    /// Why a space figure is null, what `space_amp_after_run` divides by
    /// when not the live bytes, and where a reused load's figures come from.
    pub space_notes: Vec<String>,
    /// Bytes the process read from storage per second in the best run,
    /// in 4 KiB reads (`read_bytes` of `/proc/self/io` ÷ 4096; null: not
    /// measurable).
    pub process_reads_4kib_per_sec: Option<f64>,
    /// Resident memory of the process just before the engine opened (after
    /// the allocator gave its free memory back).
    pub rss_before_open_bytes: Option<u64>,
    /// Peak resident memory of the process during the best run.
    pub rss_peak_bytes: Option<u64>,
    /// Largest page cache charged to the engine's memory cgroup (engines
    /// that read through the page cache; null: none).
    pub page_cache_peak_bytes: Option<u64>,
    /// The cost of the resources the best run used and its ops/s per $
    /// ([`crate::cost`]; null until the comparison has priced it).
    pub cost: Option<CostFigures>,
}

impl Summary {
    /// DRAM the best run held ([`crate::cost::dram_bytes`]): the pool, or
    /// the resident growth if larger, plus the page cache an engine with a
    /// cache of its own held beside it (LMDB's page cache is its only
    /// cache, mapped, so counted in its resident memory).
    pub fn dram_bytes(&self) -> u64 {
        let growth = self
            .rss_peak_bytes
            .zip(self.rss_before_open_bytes)
            .map(|(peak, before)| peak.saturating_sub(before));
        let beside = self.page_cache_peak_bytes.filter(|_| self.engine != "lmdb");
        crate::cost::dram_bytes(self.pool_bytes, growth, beside)
    }

    /// The best run's reads: the device's counters, else the process's
    /// read bytes as 4 KiB reads (see [`crate::cost`]).
    pub fn reads(&self) -> Option<ReadRate> {
        match (self.read_iops, self.device_read_bytes_per_sec) {
            (Some(ops_per_sec), Some(bytes_per_sec)) => Some(ReadRate {
                ops_per_sec,
                bytes_per_sec,
                source: ReadSource::DeviceCounters,
            }),
            _ => self.process_reads_4kib_per_sec.map(|reads| {
                ReadRate::from_process_bytes(reads * crate::cost::RATED_READ_BYTES as f64)
            }),
        }
    }

    /// A note when the device read clearly more than this process did:
    /// the device's counters then hold other processes' reads too
    /// (the process's `read_bytes` counts its direct reads, readahead and
    /// page-cache misses, so it is about the device bytes it caused).
    fn others_reads_note(&self) -> Option<String> {
        let device = self.device_read_bytes_per_sec?;
        let process = self.process_reads_4kib_per_sec? * crate::cost::RATED_READ_BYTES as f64;
        let excess = device - process * OTHERS_READS_RATIO;
        (excess > OTHERS_READS_SLACK_BYTES_PER_SEC).then(|| {
            format!(
                "the device read {:.1} MB/s during the run, this process {:.1} MB/s (`read_bytes` of /proc/self/io): other processes' reads are likely in the device counters, which then overstate this engine's reads and storage $",
                device / 1e6,
                process / 1e6
            )
        })
    }

    /// Prices the best run's resources (see [`crate::cost`]).
    pub fn price(&mut self, prices: &Prices, device_iops: Option<f64>) {
        let inputs = CostInputs {
            ops_per_sec: self.ops_per_sec,
            cpu_s: self.cpu_s,
            wall_s: self.wall_s,
            dram_bytes: self.dram_bytes(),
            storage_bytes: self.disk_bytes_after_run.or(self.disk_bytes_after_load),
            reads: self.reads(),
            device_iops,
        };
        let mut cost = cost_of(&inputs, prices);
        if let Some(note) = self.others_reads_note() {
            cost.notes.push(note);
        }
        if cost.reads_source == Some(ReadSource::ProcessBytes) {
            cost.notes.push(format!(
                "device counters not available ({}): reads estimated as the process's read bytes ÷ 4096",
                self.device_counters_error.as_deref().unwrap_or("not measured")
            ));
        }
        if self.rss_peak_bytes.is_none() || self.rss_before_open_bytes.is_none() {
            cost.notes
                .push("resident memory not measured: DRAM is the pool alone".into());
        }
        if self.disk_bytes_after_run.is_none() && self.disk_bytes_after_load.is_some() {
            cost.notes
                .push("storage: bytes on disk after the load (after the run n/a)".into());
        }
        self.cost = Some(cost);
    }
}

#[cfg(test)]
impl Summary {
    /// A summary with only these figures set (unit tests).
    pub(crate) fn for_tests(engine: &str, ops_per_sec: f64, cpu_us_per_op: f64) -> Summary {
        Summary {
            engine: engine.into(),
            workload: "test".into(),
            records: 1000,
            pool_bytes: 1 << 20,
            dataset_bytes: 10 << 20,
            workers: None,
            tasks: None,
            threads: Some(1),
            settings: String::new(),
            ops_per_sec,
            read_iops: None,
            write_iops: None,
            device_read_bytes_per_sec: None,
            device_write_bytes_per_sec: None,
            device: None,
            device_counters_error: None,
            hit_ratio: None,
            cpu_s: 1.0,
            wall_s: 1.0,
            cpu_us_per_op: Some(cpu_us_per_op),
            cpu_us_per_op_user: None,
            cpu_us_per_op_sys: None,
            lat_us_p50: None,
            lat_us_p99: None,
            load_records_per_sec: 0.0,
            raw_bytes: Some(1000 * 136),
            raw_bytes_live_after_run: Some(1000 * 136),
            disk_bytes_after_load: Some(200_000),
            disk_bytes_after_run: Some(300_000),
            space_amp_after_load: Some(200_000.0 / 136_000.0),
            space_amp_after_run: Some(300_000.0 / 136_000.0),
            space_notes: Vec::new(),
            process_reads_4kib_per_sec: None,
            rss_before_open_bytes: None,
            rss_peak_bytes: None,
            page_cache_peak_bytes: None,
            cost: None,
        }
    }
}

/// The commits of the best run: group commit and write amplification.
#[derive(Debug, Clone, Serialize)]
pub struct CommitFigures {
    pub commits_per_sec: f64,
    /// Log syncs per second (None: the engine does not count them).
    pub log_syncs_per_sec: Option<f64>,
    pub commits_per_sync: Option<f64>,
    pub commit_lat_us_p50: Option<f64>,
    pub commit_lat_us_p99: Option<f64>,
    pub commit_lat_us_p999: Option<f64>,
    /// Keys and values the commits wrote, bytes.
    pub user_bytes_written: u64,
    /// Bytes the process sent to storage (`/proc/self/io` write_bytes).
    pub process_write_bytes: Option<u64>,
    /// `process_write_bytes / user_bytes_written`.
    pub write_amplification: Option<f64>,
    /// Log bytes written per commit, from the engine's counters (None:
    /// not counted).
    pub log_bytes_per_commit: Option<f64>,
    /// Share of the log bytes that are page images (flashtree's full-page
    /// images after checkpoints and splits).
    pub log_image_share: Option<f64>,
    /// Bytes written by write class (flashtree): data pages its pool
    /// counted hot, and the other data pages.
    pub data_hot_bytes: Option<u64>,
    pub data_cold_bytes: Option<u64>,
    /// Bytes of log written in the run.
    pub log_bytes: Option<u64>,
    /// Checkpoints completed during the run (flashtree).
    pub checkpoints: Option<u64>,
}

impl CommitFigures {
    fn of(best: &PhaseResult) -> CommitFigures {
        let stats = &best.stats;
        let seconds = best.wall_s.max(1e-9);
        let quantile_us = |q: f64| {
            (stats.commits > 0)
                .then(|| stats.commit_latency_ns.value_at_quantile(q) as f64 / 1000.0)
        };
        CommitFigures {
            commits_per_sec: stats.commits as f64 / seconds,
            log_syncs_per_sec: best.log_syncs.map(|n| n as f64 / seconds),
            commits_per_sync: best
                .log_syncs
                .filter(|&n| n > 0)
                .map(|n| stats.commits as f64 / n as f64),
            commit_lat_us_p50: quantile_us(0.5),
            commit_lat_us_p99: quantile_us(0.99),
            commit_lat_us_p999: quantile_us(0.999),
            user_bytes_written: stats.user_bytes_written,
            process_write_bytes: best.process_write_bytes,
            write_amplification: best
                .process_write_bytes
                .filter(|_| stats.user_bytes_written > 0)
                .map(|bytes| bytes as f64 / stats.user_bytes_written as f64),
            log_bytes_per_commit: best
                .log_bytes
                .filter(|_| stats.commits > 0)
                .map(|bytes| bytes as f64 / stats.commits as f64),
            log_image_share: best
                .log_image_bytes
                .zip(best.log_bytes.filter(|&bytes| bytes > 0))
                .map(|(images, bytes)| images as f64 / bytes as f64),
            data_hot_bytes: best.hot_page_writes.map(|n| n * 4096),
            data_cold_bytes: best
                .page_writes
                .zip(best.hot_page_writes)
                .map(|(all, hot)| all.saturating_sub(hot) * 4096),
            log_bytes: best.log_bytes,
            checkpoints: best.checkpoints,
        }
    }
}

/// Everything measured for one engine (the per-run JSON file).
#[derive(Debug, Clone, Serialize)]
pub struct EngineRun {
    #[serde(flatten)]
    pub summary: Summary,
    /// Commits of the best run (the durability figures).
    pub commits: CommitFigures,
    pub lat_us_p999: Option<f64>,
    pub rate_ops_per_sec: Option<f64>,
    pub seconds: f64,
    pub cores: Vec<usize>,
    pub memory_limit: String,
    pub durability: String,
    pub ops_by_kind: Vec<(String, u64)>,
    /// Page reads per operation of each kind (empty: the engine does not
    /// count reads per handle).
    pub page_reads_per_op_by_kind: Vec<(String, f64)>,
    pub sweep: Vec<(usize, f64)>,
    pub ops_per_second: Vec<u64>,
    /// (latency µs, fraction of operations at or below).
    pub latency_cdf: Vec<(f64, f64)>,
    pub consistency: String,
    /// perf profile of the best run (None: no `--profile`; Err: why not).
    pub profile: Option<Result<Profile, String>>,
    /// The best run's perf.data file, if perf wrote one.
    pub perf_data_path: Option<PathBuf>,
    /// The engine's directory on disk at the end of the load, by kind of
    /// file (None: not measured, or the load was reused).
    pub disk_after_load: Option<DiskUsage>,
    /// The same after the run and the engine's close (None: not measured).
    pub disk_after_run: Option<DiskUsage>,
    /// The engine's own count of its data file bytes at the end of the
    /// load ([`crate::EngineCounters::store_bytes`]; None: the engine has
    /// none, or the load was reused), to cross-check `disk_after_load`.
    pub engine_store_bytes_after_load: Option<u64>,
    /// The same after the run, before the close.
    pub engine_store_bytes_before_close: Option<u64>,
}

/// The durability line of a report over these engines in `mode`: each
/// engine's own setting ([`crate::adapters::durability`]).
pub fn durability_line<'a>(
    engines: impl IntoIterator<Item = &'a str>,
    mode: DurabilityMode,
) -> String {
    let settings: Vec<String> = engines
        .into_iter()
        .map(|engine| format!("{engine}: {}", crate::adapters::durability(engine, mode)))
        .collect();
    format!("durability {} ({})", mode.name(), settings.join("; "))
}

/// Runs the comparison described by `args`.
pub fn run_compare(args: &CompareArgs, hooks: &Hooks) -> Result<(), String> {
    let memory_bytes = parse_bytes(&args.memory)?;
    let cores = parse_cores(&args.cores)?;
    let thread_counts = parse_thread_counts(&args.threads)?;
    let engines = parse_engines(&args.engines, hooks)?;
    if !(args.warmup >= 0.0 && args.warmup < 86_400.0) {
        return Err(format!("--warmup {} out of range [0, 86400)", args.warmup));
    }
    if !(args.seconds > 0.0 && args.seconds < 86_400.0) {
        return Err(format!(
            "--seconds {} out of range (0, 86400)",
            args.seconds
        ));
    }
    let prices = Prices::load(args.prices.as_deref())?;
    let combinations = args.combinations()?;
    for combination in &combinations {
        build_workload(combination, memory_bytes)?;
    }
    pin_process_to(&cores)?;
    let out_dir = results_dir(&args.results)?;
    let context = RunContext {
        hooks,
        engines: &engines,
        cores: &cores,
        thread_counts: &thread_counts,
        prices: &prices,
    };
    if let ([single], None) = (combinations.as_slice(), &args.pool_shares) {
        run_combination(single, &context, &out_dir)?;
    } else {
        let mut done = Vec::with_capacity(combinations.len());
        for combination in &combinations {
            let data_factor = combination.data_factor_value()?;
            let dir = out_dir.join(combination.combination_dir()?);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let at = match combination.pool_share {
                Some(share) => format!("pool share {share} ({} B)", combination.memory),
                None => format!("data factor {data_factor}"),
            };
            eprintln!(
                "== {} at {at} ({} of {}) ==",
                combination.workload,
                done.len() + 1,
                combinations.len()
            );
            let (runs, device_iops) = run_combination(combination, &context, &dir)?;
            done.push(crate::suite::Combination {
                workload: combination.workload.clone(),
                data_factor,
                pool_share: combination.pool_share,
                device_iops,
                summaries: runs.into_iter().map(|r| r.summary).collect(),
            });
            // Rewritten after every combination: a stopped suite keeps
            // the summary of what it finished.
            crate::suite::write_summary(&out_dir, args, &prices, &done)?;
        }
    }
    eprintln!("results in {}", out_dir.display());
    Ok(())
}

/// What every combination of a comparison runs with.
struct RunContext<'a> {
    hooks: &'a Hooks,
    engines: &'a [String],
    cores: &'a [usize],
    thread_counts: &'a [usize],
    prices: &'a Prices,
}

/// Runs one workload at one data factor on every engine into `out_dir`
/// (JSON per engine, report.md, plots). Returns the runs and the device limit.
fn run_combination(
    args: &CompareArgs,
    context: &RunContext<'_>,
    out_dir: &Path,
) -> Result<(Vec<EngineRun>, Option<f64>), String> {
    let RunContext {
        hooks,
        engines,
        cores,
        thread_counts,
        prices,
    } = *context;
    let memory_bytes = parse_bytes(&args.memory)?;
    if args.rounds == 0 || args.rounds > ROUNDS_MAX {
        return Err(format!("--rounds must be in 1..={ROUNDS_MAX}"));
    }
    // rounds[e][r]: engine e's run in round r.
    let mut rounds: Vec<Vec<EngineRun>> = engines.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        let last = round + 1 == args.rounds;
        let round_args = CompareArgs {
            keep_data: args.keep_data || !last,
            reuse_data: args.reuse_data || round > 0,
            ..args.clone()
        };
        if args.rounds > 1 {
            eprintln!("== round {} of {} ==", round + 1, args.rounds);
        }
        for (index, name) in engines.iter().enumerate() {
            let workload = build_workload(args, memory_bytes)?;
            let run = run_engine(
                name,
                &workload,
                &round_args,
                hooks,
                memory_bytes,
                cores,
                thread_counts,
                out_dir,
            )?;
            rounds[index].push(run);
        }
    }
    let spread = RoundSpread::of(engines, &rounds);
    let device_iops = match &hooks.device_limit {
        Some(measure) => Some(measure(&args.dir)?),
        None => None,
    };
    let mut runs = Vec::new();
    for mut engine_rounds in rounds {
        // The median round (by ops/s) stands for the engine.
        engine_rounds.sort_by(|a, b| a.summary.ops_per_sec.total_cmp(&b.summary.ops_per_sec));
        let mut run = engine_rounds.swap_remove(engine_rounds.len() / 2);
        run.summary.price(prices, device_iops);
        runs.push(run);
    }
    set_flashtree_ratios(runs.iter_mut().filter_map(|run| {
        let s = &mut run.summary;
        s.cost.as_mut().map(|cost| (s.engine.as_str(), cost))
    }));
    for run in &runs {
        let name = &run.summary.engine;
        write_json(&out_dir.join(format!("{name}.json")), run)?;
        if run.profile.is_some() {
            crate::report::write_profile_text(out_dir, run)?;
        }
        if args.json {
            println!(
                "{}",
                serde_json::to_string(&run.summary).map_err(|e| e.to_string())?
            );
        }
    }
    if args.rounds > 1 {
        write_json(&out_dir.join("rounds.json"), &spread)?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string(&spread).map_err(|e| e.to_string())?
            );
        }
    }
    crate::report::write_report(out_dir, args, &runs, device_iops, prices)?;
    eprintln!(
        "cost, priced from {} (prices of {}):",
        prices.name, prices.date
    );
    eprint!("{}", crate::report::cost_table(&runs));
    if args.rounds > 1 {
        crate::report::append_rounds(out_dir, &spread, &args.workload.to_ascii_lowercase())?;
    }
    crate::plots::write_plots(out_dir, &runs)?;
    Ok((runs, device_iops))
}

/// Most `--rounds`.
pub const ROUNDS_MAX: usize = 100;

/// Min, median and max of a list (None: empty).
fn min_median_max(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some((
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    ))
}

/// What `--rounds` measured: each engine's ops/s per round, and per round
/// flashtree's ops/s divided by each peer's in that round.
#[derive(Debug, Clone, Serialize)]
pub struct RoundSpread {
    pub rounds: usize,
    /// Per engine: its ops/s in each round, and their spread.
    pub ops_per_sec: Vec<RoundValues>,
    /// Per peer: flashtree's ops/s ÷ the peer's in each round, and their spread.
    pub flashtree_ratio: Vec<RoundValues>,
}

/// (engine, a value per round, (min, median, max) of them).
pub type RoundValues = (String, Vec<f64>, (f64, f64, f64));

impl RoundSpread {
    fn of(engines: &[String], rounds: &[Vec<EngineRun>]) -> RoundSpread {
        let ops: Vec<Vec<f64>> = rounds
            .iter()
            .map(|runs| runs.iter().map(|r| r.summary.ops_per_sec).collect())
            .collect();
        let ops_per_sec = engines
            .iter()
            .zip(&ops)
            .filter_map(|(name, values)| {
                min_median_max(values.clone()).map(|spread| (name.clone(), values.clone(), spread))
            })
            .collect();
        let flashtree = engines.iter().position(|e| e == "flashtree");
        let flashtree_ratio = match flashtree {
            None => Vec::new(),
            Some(f) => engines
                .iter()
                .zip(&ops)
                .filter(|(name, _)| *name != "flashtree")
                .filter_map(|(name, peer)| {
                    let ratios: Vec<f64> = ops[f]
                        .iter()
                        .zip(peer)
                        .map(|(ft, p)| ft / p.max(1e-9))
                        .collect();
                    min_median_max(ratios.clone()).map(|spread| (name.clone(), ratios, spread))
                })
                .collect(),
        };
        RoundSpread {
            rounds: rounds.first().map_or(0, Vec::len),
            ops_per_sec,
            flashtree_ratio,
        }
    }
}

fn parse_thread_counts(text: &str) -> Result<Vec<usize>, String> {
    let counts: Result<Vec<usize>, _> =
        text.split(',').map(|t| t.trim().parse::<usize>()).collect();
    let counts = counts.map_err(|_| format!("bad --threads {text:?}: use e.g. 1,8,64"))?;
    if counts.is_empty()
        || counts
            .iter()
            .any(|&c| c == 0 || c > crate::engine::THREADS_MAX)
    {
        return Err(format!(
            "--threads values must be in 1..={}",
            crate::engine::THREADS_MAX
        ));
    }
    Ok(counts)
}

fn parse_engines(text: &str, hooks: &Hooks) -> Result<Vec<String>, String> {
    let mut engines = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let known = crate::adapters::PEER_NAMES.contains(&name)
            || name == "flashtree"
            || name == "flashtree-hash";
        if !known {
            return Err(format!(
                "unknown engine {name:?}: use flashtree, flashtree-hash, {}",
                crate::adapters::PEER_NAMES.join(", ")
            ));
        }
        if name == "flashtree" && hooks.flashtree.is_none() {
            return Err("flashtree requested but this build has no flashtree adapter".into());
        }
        if name == "flashtree-hash" && hooks.flashtree_hash.is_none() {
            return Err("flashtree-hash requested but this build has no flashtree adapter".into());
        }
        engines.push(name.to_string());
    }
    if engines.is_empty() {
        return Err("--engines is empty".into());
    }
    Ok(engines)
}

/// Builds the workload, sizing records (or warehouses) to data-factor × memory.
pub fn build_workload(args: &CompareArgs, memory_bytes: u64) -> Result<Workload, String> {
    let dataset_bytes = memory_bytes as f64 * args.data_factor_value()?;
    let records = |record_bytes: usize| {
        args.records
            .unwrap_or((dataset_bytes / record_bytes as f64) as u64)
            .max(2)
    };
    let name = args.workload.to_ascii_lowercase();
    if name == "lookup" {
        return Ok(Workload::Lookup(Lookup::new(records(128), args.zipf)?));
    }
    if let Some(letter) = name.strip_prefix("ycsb-") {
        let kind = YcsbKind::parse(letter)?;
        return Ok(Workload::Ycsb(Ycsb::new(kind, records(1008))?));
    }
    if name == "tpcc" {
        let scale = if args.tpcc_small {
            TpccScale::small()
        } else {
            TpccScale::full()
        };
        let per_warehouse = Tpcc::dataset_bytes_per_warehouse(&scale) as f64;
        let warehouses = args
            .warehouses
            .unwrap_or((dataset_bytes / per_warehouse).ceil() as u32)
            .max(1);
        return Ok(Workload::Tpcc(Tpcc::new(warehouses, scale)?));
    }
    Err(format!(
        "unknown workload {:?}: use lookup, ycsb-a .. ycsb-f, tpcc",
        args.workload
    ))
}

fn open_engine(
    name: &str,
    config: &EngineConfig,
    hooks: &Hooks,
) -> Result<Box<dyn Engine>, String> {
    match (name, &hooks.flashtree, &hooks.flashtree_hash) {
        ("flashtree", Some(open), _) => open(config),
        ("flashtree-hash", _, Some(open)) => open(config),
        _ => open_peer(name, config),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_engine(
    name: &str,
    workload: &Workload,
    args: &CompareArgs,
    hooks: &Hooks,
    memory_bytes: u64,
    cores: &[usize],
    thread_counts: &[usize],
    out_dir: &Path,
) -> Result<EngineRun, String> {
    let dir = args.dir.join(name);
    let marker = args.dir.join(format!("{name}.loaded"));
    // Held until the run ends: a second run on this directory would clear
    // the data under this one.
    let _lock = lock_engine_data(&args.dir, name)?;
    let loaded_key = loaded_key(name, workload, args.durability);
    let reused_load = args
        .reuse_data
        .then(|| std::fs::read_to_string(&marker).ok())
        .flatten()
        .and_then(|text| LoadMarker::parse(&text, &loaded_key))
        .filter(|_| dir.exists());
    // A marker outlives its data only until the data is touched again.
    let _ = std::fs::remove_file(&marker);
    if reused_load.is_none() && dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    let config = EngineConfig {
        dir: dir.clone(),
        memory_bytes,
        table_count: workload.table_count(),
        threads_max: *thread_counts.iter().max().unwrap_or(&1),
        cores: cores.to_vec(),
        durability: args.durability,
    };
    let cgroup = page_cache_bytes(name, memory_bytes).map(|bytes| MemoryCgroup::enter(name, bytes));
    let memory_limit = describe_memory_limit(name, memory_bytes, &cgroup);
    // The resident memory the engine adds is measured from here.
    crate::sys::release_free_memory();
    let rss_before_open_bytes = crate::sys::rss_bytes();
    let mut result = open_engine(name, &config, hooks).and_then(|engine| {
        pin_process_to(cores)?;
        let measured = measure_engine(
            engine.as_ref(),
            workload,
            args,
            &config,
            thread_counts,
            memory_limit,
            out_dir,
            reused_load.as_ref(),
        );
        let closed = engine.close();
        let mut run = measured?;
        closed?;
        add_disk_after_run(&mut run, &dir);
        run.summary.rss_before_open_bytes = Some(rss_before_open_bytes).filter(|&bytes| bytes > 0);
        Ok(run)
    });
    if let Some(Ok(group)) = cgroup {
        let peaks = group.leave()?;
        if let Ok(run) = &mut result {
            run.summary.page_cache_peak_bytes = Some(peaks.file_bytes_max);
        }
    }
    if !args.keep_data {
        let _ = std::fs::remove_dir_all(&dir);
    } else if let Ok(run) = &result {
        let s = &run.summary;
        let text = LoadMarker {
            load_records_per_sec: s.load_records_per_sec,
            raw_bytes: s.raw_bytes,
            disk_bytes_after_load: s.disk_bytes_after_load,
            raw_bytes_live: s.raw_bytes_live_after_run,
        }
        .text(&loaded_key);
        std::fs::write(&marker, text)
            .map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    }
    result
}

/// Locks `dir/<name>.lock` (created, with `dir`, when missing) for one
/// run of engine `name` on its data `dir/<name>`. A run whose load marker
/// does not match clears that data, so two runs on one directory at once
/// would delete each other's store: the second is refused, naming the
/// directory. The lock goes with the returned file (`flock`, released when
/// the process ends, also by a kill).
fn lock_engine_data(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "{} is in use by another bench run (it holds {}): wait for that run, or give this one another --dir",
            dir.join(name).display(),
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(format!("cannot lock {}: {e}", path.display()))
        }
    }
}

/// What a `DIR/<engine>.loaded` marker says was loaded: the workload and
/// its record count, and the durability mode unless the engine's load
/// serves every mode ([`crate::adapters::load_serves_every_durability`]).
fn loaded_key(engine: &str, workload: &Workload, durability: crate::DurabilityMode) -> String {
    let key = format!("{} records={}", workload.name(), workload.records_count());
    if crate::adapters::load_serves_every_durability(engine) {
        key
    } else {
        format!("{key} durability={}", durability.name())
    }
}

/// What a `DIR/<engine>.loaded` marker says of the load that made the
/// data: one line, the loaded key ([`loaded_key`]) and then
/// `load_records_per_sec=R`, followed by those of `raw_bytes=B`,
/// `disk_bytes_after_load=B` and `raw_bytes_live=B` that are known (a
/// marker written before they existed has none of them).
#[derive(Debug, Clone, PartialEq)]
struct LoadMarker {
    load_records_per_sec: f64,
    /// Key and value bytes the load committed.
    raw_bytes: Option<u64>,
    /// The directory's allocated bytes at the end of that load.
    disk_bytes_after_load: Option<u64>,
    /// Key and value bytes live when the marker was written (after the
    /// last run on the data), where the workload knows them.
    raw_bytes_live: Option<u64>,
}

impl LoadMarker {
    /// The marker's text for a load of `loaded_key`.
    fn text(&self, loaded_key: &str) -> String {
        let mut text = format!(
            "{loaded_key} load_records_per_sec={}",
            self.load_records_per_sec
        );
        for (name, value) in [
            ("raw_bytes", self.raw_bytes),
            ("disk_bytes_after_load", self.disk_bytes_after_load),
            ("raw_bytes_live", self.raw_bytes_live),
        ] {
            if let Some(value) = value {
                text.push_str(&format!(" {name}={value}"));
            }
        }
        text.push('\n');
        text
    }

    /// The marker in `marker_text`, if it marks a load of `loaded_key`
    /// (workload name and record count, and the durability where it
    /// matters) and is well formed.
    fn parse(marker_text: &str, loaded_key: &str) -> Option<LoadMarker> {
        let rest = marker_text.trim().strip_prefix(loaded_key)?;
        let mut fields = rest.split_whitespace();
        let load_records_per_sec = fields
            .next()?
            .strip_prefix("load_records_per_sec=")?
            .parse::<f64>()
            .ok()?;
        let mut marker = LoadMarker {
            load_records_per_sec,
            raw_bytes: None,
            disk_bytes_after_load: None,
            raw_bytes_live: None,
        };
        for field in fields {
            let (name, value) = field.split_once('=')?;
            let value = value.parse::<u64>().ok()?;
            let slot = match name {
                "raw_bytes" => &mut marker.raw_bytes,
                "disk_bytes_after_load" => &mut marker.disk_bytes_after_load,
                "raw_bytes_live" => &mut marker.raw_bytes_live,
                _ => return None,
            };
            *slot = Some(value);
        }
        Some(marker)
    }
}

/// Measures the engine's directory after its close into `run`: disk bytes
/// after the run and the space amplification after the run.
fn add_disk_after_run(run: &mut EngineRun, dir: &Path) {
    let s = &mut run.summary;
    match disk_usage(dir) {
        Ok(usage) => {
            s.disk_bytes_after_run = Some(usage.allocated_bytes);
            run.disk_after_run = Some(usage);
        }
        Err(error) => {
            s.disk_bytes_after_run = None;
            run.disk_after_run = None;
            s.space_notes
                .push(format!("disk bytes after the run n/a: {error}"));
        }
    }
    let divisor = match s.raw_bytes_live_after_run {
        Some(live) => Some(live),
        None => {
            if s.raw_bytes.is_some() {
                s.space_notes.push(format!(
                    "space amp after the run divides by the loaded raw bytes: {} does not track its live bytes",
                    s.workload
                ));
            }
            s.raw_bytes
        }
    };
    s.space_amp_after_run = space_amp(s.disk_bytes_after_run, divisor);
    if let Some(note) = outgrew_memory_note(s) {
        s.space_notes.push(note);
    }
}

/// A note when the runs' inserts (YCSB-D and -E insert rows) grew the
/// live keys and values of a store that was loaded within the memory
/// budget beyond it: the warm-ups, rounds and swept thread counts share
/// one store, so the later runs of a "data factor 0.25" comparison may not
/// have been in memory at all.
fn outgrew_memory_note(s: &Summary) -> Option<String> {
    let (loaded, live) = (s.raw_bytes?, s.raw_bytes_live_after_run?);
    (loaded <= s.pool_bytes && live > s.pool_bytes).then(|| {
        format!(
            "the runs' inserts grew the live keys and values from {:.1} to {:.1} MB, more than the memory budget ({} MiB): warm-ups, rounds and swept thread counts share one store, so the later runs did not fit in memory",
            loaded as f64 / 1e6,
            live as f64 / 1e6,
            s.pool_bytes >> 20
        )
    })
}

/// The report's memory line of engine `name`: its cache and, for engines
/// that read through the page cache, the memory cgroup bounding it.
fn describe_memory_limit(
    name: &str,
    memory_bytes: u64,
    cgroup: &Option<Result<MemoryCgroup, String>>,
) -> String {
    let cache = cache_setting(name, memory_bytes);
    match cgroup {
        Some(Ok(group)) => format!("{cache}; {}", group.describe()),
        Some(Err(error)) => format!(
            "{cache}; NO memory cgroup could be made ({error}): {name} used the whole page cache"
        ),
        None => "engine cache = budget".to_string(),
    }
}

#[allow(clippy::too_many_arguments)]
fn measure_engine(
    engine: &dyn Engine,
    workload: &Workload,
    args: &CompareArgs,
    config: &EngineConfig,
    thread_counts: &[usize],
    memory_limit: String,
    out_dir: &Path,
    reused_load: Option<&LoadMarker>,
) -> Result<EngineRun, String> {
    let load_threads = config.cores.len().clamp(1, 8);
    let spec = PhaseSpec {
        phase: Phase::Load,
        threads: load_threads,
        duration: Duration::from_secs_f64(args.seconds),
        rate_ops_per_sec: args.rate,
        seed: args.seed,
        dir: &config.dir,
        progress: true,
        profile_dir: None,
    };
    let compact = |notes: &mut Vec<String>| -> Result<(), String> {
        if !args.compact_after_load {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let done = engine.compact()?;
        let seconds = started.elapsed().as_secs_f64();
        notes.push(match done {
            Some(what) => format!("compacted after the load ({what}): {seconds:.1} s"),
            None => "compaction after the load: the engine has none; it runs as loaded".into(),
        });
        Ok(())
    };
    let load = match reused_load {
        Some(marker) => {
            let mut load = LoadFigures::reused(marker, &config.dir);
            compact(&mut load.notes)?;
            load
        }
        None => {
            let loaded = run_phase(engine, workload, &spec)?;
            let mut notes = Vec::new();
            compact(&mut notes)?;
            let mut load =
                LoadFigures::measured(&loaded, &config.dir, engine.counters().store_bytes);
            load.notes.splice(0..0, notes);
            load
        }
    };
    let run_spec = PhaseSpec {
        phase: Phase::Run,
        profile_dir: args.profile.then(|| out_dir.to_path_buf()),
        ..spec.clone()
    };
    // Open loop needs enough concurrency to absorb queueing: use the largest count.
    let thread_sweep = match args.rate {
        Some(_) => vec![*thread_counts.iter().max().unwrap_or(&1)],
        None => thread_counts.to_vec(),
    };
    if args.warmup > 0.0 {
        let warmup_spec = PhaseSpec {
            phase: Phase::Run,
            threads: sweep_counts(engine, &thread_sweep)[0],
            duration: Duration::from_secs_f64(args.warmup),
            seed: spec.seed ^ 0x5741_524d,
            profile_dir: None,
            ..spec.clone()
        };
        run_phase(engine, workload, &warmup_spec)?;
    }
    let sweep = sweep_threads(engine, workload, &run_spec, &thread_sweep)?;
    let best_at = best_index(&sweep).ok_or("no run")?;
    // Only the reported run's perf.data is kept.
    for (at, result) in sweep.iter().enumerate() {
        if let (true, Some(path)) = (at != best_at, &result.perf_data_path) {
            let _ = std::fs::remove_file(path);
        }
    }
    let best = &sweep[best_at];
    let check_spec = PhaseSpec {
        phase: Phase::Check,
        threads: 1,
        ..spec.clone()
    };
    run_phase(engine, workload, &check_spec)
        .map_err(|e| format!("{}: CONSISTENCY CHECK FAILED: {e}", engine.name()))?;
    let consistency = match workload {
        Workload::Tpcc(_) => "TPC-C conditions 1-4 hold".to_string(),
        _ => "n/a".to_string(),
    };
    Ok(engine_run(
        engine,
        workload,
        args,
        config,
        load,
        best,
        &sweep,
        memory_limit,
        consistency,
    ))
}

#[allow(clippy::too_many_arguments)]
fn engine_run(
    engine: &dyn Engine,
    workload: &Workload,
    args: &CompareArgs,
    config: &EngineConfig,
    load: LoadFigures,
    best: &PhaseResult,
    sweep: &[PhaseResult],
    memory_limit: String,
    consistency: String,
) -> EngineRun {
    let histogram = &best.stats.latency_ns;
    let quantile_us =
        |q: f64| (best.stats.ops_count > 0).then(|| histogram.value_at_quantile(q) as f64 / 1000.0);
    let (workers, tasks, threads) = match engine.concurrency() {
        Concurrency::Threads => (None, None, Some(best.threads)),
        Concurrency::Tasks {
            workers,
            tasks_per_worker,
        } => (
            Some(workers),
            Some(best.tasks_per_worker.unwrap_or(tasks_per_worker)),
            None,
        ),
    };
    let counters = engine.counters();
    let per_op_us = |seconds: f64| {
        (best.stats.ops_count > 0).then(|| seconds * 1e6 / best.stats.ops_count as f64)
    };
    let per_second = |count: fn(&crate::devio::IoCounters) -> u64| {
        best.device_io
            .as_ref()
            .ok()
            .map(|io| count(&io.counters) as f64 / best.wall_s.max(1e-9))
    };
    let summary = Summary {
        engine: engine.name().to_string(),
        workload: workload.name(),
        records: workload.records_count(),
        pool_bytes: config.memory_bytes,
        dataset_bytes: workload.dataset_bytes(),
        workers,
        tasks,
        threads,
        settings: engine.settings(),
        ops_per_sec: best.ops_per_sec(),
        read_iops: per_second(|c| c.reads),
        write_iops: per_second(|c| c.writes),
        device_read_bytes_per_sec: per_second(|c| c.read_bytes),
        device_write_bytes_per_sec: per_second(|c| c.write_bytes),
        device: best.device_io.as_ref().ok().map(|io| io.device.describe()),
        device_counters_error: best.device_io.as_ref().err().cloned(),
        hit_ratio: counters.hit_ratio,
        cpu_s: best.cpu_s,
        wall_s: best.wall_s,
        cpu_us_per_op: per_op_us(best.cpu_s),
        cpu_us_per_op_user: per_op_us(best.cpu_user_s),
        cpu_us_per_op_sys: per_op_us(best.cpu_sys_s),
        lat_us_p50: quantile_us(0.5),
        lat_us_p99: quantile_us(0.99),
        load_records_per_sec: load.records_per_sec,
        raw_bytes: load.raw_bytes,
        raw_bytes_live_after_run: load
            .live_bytes_before_run
            .and_then(|before| workload.live_bytes_after_run(before)),
        disk_bytes_after_load: load.disk_bytes,
        disk_bytes_after_run: None,
        space_amp_after_load: space_amp(load.disk_bytes, load.raw_bytes),
        space_amp_after_run: None,
        space_notes: load.notes,
        process_reads_4kib_per_sec: best.process_read_bytes.map(|bytes| {
            bytes as f64 / crate::cost::RATED_READ_BYTES as f64 / best.wall_s.max(1e-9)
        }),
        rss_before_open_bytes: None,
        rss_peak_bytes: best.rss_peak_bytes,
        page_cache_peak_bytes: None,
        cost: None,
    };
    EngineRun {
        summary,
        commits: CommitFigures::of(best),
        lat_us_p999: quantile_us(0.999),
        rate_ops_per_sec: args.rate,
        seconds: args.seconds,
        cores: config.cores.clone(),
        memory_limit,
        durability: crate::adapters::durability(engine.name(), args.durability).to_string(),
        ops_by_kind: OpKind::ALL
            .iter()
            .filter(|kind| best.stats.ops_by_kind[**kind as usize] > 0)
            .map(|kind| {
                (
                    kind.name().to_string(),
                    best.stats.ops_by_kind[*kind as usize],
                )
            })
            .collect(),
        page_reads_per_op_by_kind: OpKind::ALL
            .iter()
            .filter(|kind| best.stats.page_reads_by_kind[**kind as usize] > 0)
            .map(|kind| {
                let at = *kind as usize;
                (
                    kind.name().to_string(),
                    best.stats.page_reads_by_kind[at] as f64 / best.stats.ops_by_kind[at] as f64,
                )
            })
            .collect(),
        sweep: sweep
            .iter()
            .map(|r| (r.tasks_per_worker.unwrap_or(r.threads), r.ops_per_sec()))
            .collect(),
        ops_per_second: best.stats.ops_per_second.clone(),
        latency_cdf: latency_cdf(histogram),
        consistency,
        profile: best.profile.clone(),
        perf_data_path: best.perf_data_path.clone(),
        disk_after_load: load.disk_usage,
        disk_after_run: None,
        engine_store_bytes_after_load: load.engine_store_bytes,
        engine_store_bytes_before_close: counters.store_bytes,
    }
}

/// What the load gives the report: its rate and its space figures.
struct LoadFigures {
    records_per_sec: f64,
    /// Key and value bytes the load committed.
    raw_bytes: Option<u64>,
    /// Key and value bytes live when the run starts.
    live_bytes_before_run: Option<u64>,
    /// The engine directory's allocated bytes at the end of the load.
    disk_bytes: Option<u64>,
    /// Those bytes by kind of file (None: reused load, or not measured).
    disk_usage: Option<DiskUsage>,
    /// The engine's own count of its data file bytes then.
    engine_store_bytes: Option<u64>,
    /// Why a figure is missing, or where it comes from.
    notes: Vec<String>,
}

impl LoadFigures {
    /// A load just run: its counted bytes, and the directory measured now
    /// (the engine still open).
    fn measured(loaded: &PhaseResult, dir: &Path, engine_store_bytes: Option<u64>) -> LoadFigures {
        let raw_bytes = loaded.stats.user_bytes_written;
        let mut notes = Vec::new();
        let usage = disk_usage(dir)
            .map_err(|error| notes.push(format!("disk bytes after the load n/a: {error}")))
            .ok();
        LoadFigures {
            records_per_sec: loaded.ops_per_sec(),
            raw_bytes: Some(raw_bytes),
            live_bytes_before_run: Some(raw_bytes),
            disk_bytes: usage.as_ref().map(|u| u.allocated_bytes),
            disk_usage: usage,
            engine_store_bytes,
            notes,
        }
    }

    /// A load reused from a `--keep-data` run: what its marker says.
    fn reused(marker: &LoadMarker, dir: &Path) -> LoadFigures {
        let mut notes = vec![format!(
            "load reused (--reuse-data): the after-load figures are those of the load that made {}, from its marker",
            dir.display()
        )];
        let missing: Vec<&str> = [
            ("raw_bytes", marker.raw_bytes),
            ("disk_bytes_after_load", marker.disk_bytes_after_load),
        ]
        .iter()
        .filter(|(_, value)| value.is_none())
        .map(|(name, _)| *name)
        .collect();
        if !missing.is_empty() {
            notes.push(format!(
                "n/a: the reused load's marker has no {} (written before bench compare recorded them)",
                missing.join(" or ")
            ));
        }
        LoadFigures {
            records_per_sec: marker.load_records_per_sec,
            raw_bytes: marker.raw_bytes,
            live_bytes_before_run: marker.raw_bytes_live,
            disk_bytes: marker.disk_bytes_after_load,
            disk_usage: None,
            engine_store_bytes: None,
            notes,
        }
    }
}

fn latency_cdf(histogram: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let quantiles = [
        0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0,
    ];
    quantiles
        .iter()
        .map(|&q| (histogram.value_at_quantile(q) as f64 / 1000.0, q))
        .collect()
}

fn results_dir(base: &Path) -> Result<PathBuf, String> {
    let stamp = timestamp();
    let dir = base.join(stamp);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// UTC timestamp `YYYY-MM-DDTHH-MM-SS` (no external clock crate).
pub fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let rest = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + (month <= 2) as i64;
    (year, month, day)
}

fn write_json(path: &Path, run: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(run).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_give_min_median_max_of_ops_and_of_flashtree_ratios() {
        let run = |engine: &str, ops: f64| crate::targets::tests::run(engine, ops, 1.0, 0.0);
        let engines = vec!["flashtree".to_string(), "rocksdb".to_string()];
        let rounds = vec![
            vec![
                run("flashtree", 300.0),
                run("flashtree", 100.0),
                run("flashtree", 200.0),
            ],
            vec![
                run("rocksdb", 100.0),
                run("rocksdb", 50.0),
                run("rocksdb", 100.0),
            ],
        ];
        let spread = RoundSpread::of(&engines, &rounds);
        assert_eq!(spread.rounds, 3);
        assert_eq!(spread.ops_per_sec[0].2, (100.0, 200.0, 300.0));
        assert_eq!(spread.ops_per_sec[1].2, (50.0, 100.0, 100.0));
        // Per round: 3.0, 2.0, 2.0.
        assert_eq!(spread.flashtree_ratio.len(), 1);
        assert_eq!(spread.flashtree_ratio[0].1, vec![3.0, 2.0, 2.0]);
        assert_eq!(spread.flashtree_ratio[0].2, (2.0, 2.0, 3.0));
        assert_eq!(min_median_max(Vec::new()), None);
    }

    #[test]
    fn a_result_is_priced_from_its_resident_memory_disk_and_reads() {
        let prices = Prices::default_table();
        let mut s = Summary::for_tests("rocksdb", 10_000.0, 50.0);
        s.cpu_s = 5.0;
        s.wall_s = 10.0;
        s.pool_bytes = 64 << 20;
        s.rss_before_open_bytes = Some(100 << 20);
        s.rss_peak_bytes = Some(200 << 20);
        s.disk_bytes_after_run = Some(3_750_000_000);
        // The device's counters are preferred to the process's bytes.
        s.process_reads_4kib_per_sec = Some(99_999.0);
        s.read_iops = Some(5_500.0);
        s.device_read_bytes_per_sec = Some(5_500.0 * 4096.0);
        s.device = Some("vda (254:0, whole device)".into());
        s.price(&prices, Some(11_000.0));
        let c = s.cost.clone().unwrap();
        // The device read 22.5 MB/s, the process 409.6 MB/s: no note.
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        // The other way round, the device counters hold others' reads.
        s.process_reads_4kib_per_sec = Some(1_000.0);
        s.price(&prices, Some(11_000.0));
        let notes = s.cost.as_ref().unwrap().notes.join("; ");
        assert!(
            notes.contains("the device read 22.5 MB/s during the run, this process 4.1 MB/s"),
            "{notes}"
        );
        assert!(notes.contains("other processes' reads are likely in the device counters"));
        // Within 10 % + 1 MB/s of the process's bytes: no note.
        s.process_reads_4kib_per_sec = Some(5_500.0 / 1.1 - 1e6 / 1.1 / 4096.0 + 1.0);
        s.price(&prices, Some(11_000.0));
        let c = s.cost.clone().unwrap();
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        // Resident growth 100 MiB beats the 64 MiB cache.
        assert_eq!(c.dram_bytes, 100 << 20);
        assert_eq!(c.cores_used, 0.5);
        assert_eq!(c.reads_source, Some(ReadSource::DeviceCounters));
        assert_eq!(c.reads_per_sec, Some(5_500.0));
        assert_eq!(c.ssd_share_by_space, Some(0.01));
        assert_eq!(c.ssd_share_by_reads, Some(0.01));
        assert_eq!(c.device_share_used, Some(0.5));
        let usd = 0.5 * 2517.0 / 40.0 + 100.0 / 1024.0 * 1157.94 / 192.0 + 0.01 * 999.0;
        assert!((c.usd_total - usd).abs() < 1e-9, "{} vs {usd}", c.usd_total);
        assert!((c.ops_per_sec_per_usd - 10_000.0 / usd).abs() < 1e-9);
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        // A page-cache engine with a cache of its own adds its page cache;
        // LMDB's page cache is its cache (mapped: in its resident memory).
        s.page_cache_peak_bytes = Some(16 << 20);
        assert_eq!(s.dram_bytes(), 116 << 20);
        s.engine = "lmdb".into();
        assert_eq!(s.dram_bytes(), 100 << 20);
        // What was not measured is said; without device counters the
        // process's read bytes stand in, as 4 KiB reads.
        s.rss_peak_bytes = None;
        s.read_iops = None;
        s.device_read_bytes_per_sec = None;
        s.device = None;
        s.device_counters_error = Some("/x is on a tmpfs file system".into());
        s.process_reads_4kib_per_sec = Some(99_999.0);
        s.disk_bytes_after_run = None;
        s.price(&prices, None);
        let c = s.cost.clone().unwrap();
        assert_eq!(c.dram_bytes, 64 << 20);
        assert_eq!(c.reads_source, Some(ReadSource::ProcessBytes));
        assert_eq!(c.reads_per_sec, Some(99_999.0));
        assert_eq!(c.read_bytes_per_sec, Some(99_999.0 * 4096.0));
        assert_eq!(c.storage_bytes, Some(200_000));
        let notes = c.notes.join("; ");
        for expected in [
            "device counters not available (/x is on a tmpfs file system)",
            "read bytes ÷ 4096",
            "DRAM is the pool alone",
            "after the load",
        ] {
            assert!(notes.contains(expected), "{expected:?} not in {notes}");
        }
        // Neither: storage by space only.
        s.process_reads_4kib_per_sec = None;
        s.price(&prices, None);
        let c = s.cost.unwrap();
        assert_eq!((c.reads_source, c.reads_per_sec), (None, None));
        assert!(c.notes.join("; ").contains("reads not measured"));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }

    fn loaded_rate(marker_text: &str, loaded_key: &str) -> Option<f64> {
        LoadMarker::parse(marker_text, loaded_key).map(|m| m.load_records_per_sec)
    }

    #[test]
    fn a_second_run_on_one_data_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_engine_data(dir.path(), "flashtree").unwrap();
        let refused = lock_engine_data(dir.path(), "flashtree").unwrap_err();
        assert!(refused.contains("in use by another bench run"), "{refused}");
        // Another engine's data in the same directory is its own.
        let _other = lock_engine_data(dir.path(), "rocksdb").unwrap();
        drop(first);
        lock_engine_data(dir.path(), "flashtree").unwrap();
    }

    #[test]
    fn load_marker_matches_only_its_load() {
        let marker = "lookup records=2000 load_records_per_sec=1234.5\n";
        assert_eq!(loaded_rate(marker, "lookup records=2000"), Some(1234.5));
        assert_eq!(loaded_rate(marker, "lookup records=200"), None);
        assert_eq!(loaded_rate(marker, "ycsb-a records=2000"), None);
        assert_eq!(
            loaded_rate("lookup records=2000", "lookup records=2000"),
            None
        );
        // A peer's load in another durability mode is not reused.
        let marker = "tpcc records=10 durability=none load_records_per_sec=5\n";
        assert_eq!(loaded_rate(marker, "tpcc records=10 durability=sync"), None);
        assert_eq!(
            loaded_rate(marker, "tpcc records=10 durability=none"),
            Some(5.0)
        );
        // Nor is one marked with a durability when none is expected.
        assert_eq!(loaded_rate(marker, "tpcc records=10"), None);
    }

    #[test]
    fn load_marker_keeps_the_space_figures_of_its_load() {
        let marker = LoadMarker {
            load_records_per_sec: 1234.5,
            raw_bytes: Some(272_000),
            disk_bytes_after_load: Some(1_048_576),
            raw_bytes_live: None,
        };
        let text = marker.text("ycsb-a records=2000");
        assert_eq!(
            text,
            "ycsb-a records=2000 load_records_per_sec=1234.5 raw_bytes=272000 disk_bytes_after_load=1048576\n"
        );
        assert_eq!(
            LoadMarker::parse(&text, "ycsb-a records=2000"),
            Some(marker)
        );
        // Old markers: the rate alone.
        let old = LoadMarker::parse(
            "lookup records=9 load_records_per_sec=3",
            "lookup records=9",
        );
        assert_eq!(
            old.map(|m| (m.raw_bytes, m.disk_bytes_after_load)),
            Some((None, None))
        );
        // Anything else is not a marker of this load.
        for bad in [
            "lookup records=9 load_records_per_sec=3 raw_bytes=x",
            "lookup records=9 load_records_per_sec=3 raw_bytes=-1",
            "lookup records=9 load_records_per_sec=3 colour=5",
            "lookup records=9 load_records_per_sec=3 raw_bytes",
        ] {
            assert_eq!(LoadMarker::parse(bad, "lookup records=9"), None, "{bad}");
        }
    }

    #[test]
    fn a_store_whose_inserts_outgrew_the_memory_budget_gets_a_note() {
        let mut run = crate::targets::tests::run("flashtree", 100.0, 1.0, 0.0);
        let s = &mut run.summary;
        s.pool_bytes = 128 << 20;
        s.raw_bytes = Some(32 << 20);
        s.raw_bytes_live_after_run = Some(120 << 20);
        assert_eq!(outgrew_memory_note(s), None, "still within the budget");
        s.raw_bytes_live_after_run = Some(129 << 20);
        let note = outgrew_memory_note(s).expect("grew beyond the budget");
        assert!(note.contains("from 33.6 to 135.3 MB"), "{note}");
        assert!(note.contains("(128 MiB)"), "{note}");
        s.raw_bytes = Some(1280 << 20);
        assert_eq!(outgrew_memory_note(s), None, "loaded out of memory");
        s.raw_bytes_live_after_run = None;
        assert_eq!(outgrew_memory_note(s), None, "live bytes unknown");
    }

    #[test]
    fn space_after_the_run_divides_by_live_bytes_where_known() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data"), vec![1u8; 64 << 10]).unwrap();
        let allocated = disk_usage(dir.path()).unwrap().allocated_bytes;
        let mut run = crate::targets::tests::run("lmdb", 100.0, 1.0, 0.0);
        run.summary.raw_bytes = Some(16 << 10);
        run.summary.raw_bytes_live_after_run = Some(32 << 10);
        run.summary.space_notes.clear();
        add_disk_after_run(&mut run, dir.path());
        assert_eq!(run.summary.disk_bytes_after_run, Some(allocated));
        assert_eq!(
            run.summary.space_amp_after_run,
            Some(allocated as f64 / (32 << 10) as f64)
        );
        assert!(run.summary.space_notes.is_empty());
        // Live bytes unknown: the loaded bytes, and a note says so.
        run.summary.raw_bytes_live_after_run = None;
        run.summary.workload = "tpcc".into();
        add_disk_after_run(&mut run, dir.path());
        assert_eq!(
            run.summary.space_amp_after_run,
            Some(allocated as f64 / (16 << 10) as f64)
        );
        assert!(run.summary.space_notes[0].contains("loaded raw bytes"));
        // A directory that is gone: n/a, and why.
        let gone = dir.path().join("gone");
        run.summary.space_notes.clear();
        add_disk_after_run(&mut run, &gone);
        assert_eq!(run.summary.disk_bytes_after_run, None);
        assert_eq!(run.summary.space_amp_after_run, None);
        assert!(run.summary.space_notes[0].starts_with("disk bytes after the run n/a"));
    }
}
