//! Performance per dollar: a price table (`--prices FILE`, TOML or JSON;
//! by default the one built from Table 1 of Huang, Imai, Wang and Xie, "SSDs
//! Striking Back: The Storage Jungle and Its Implications on Persistent
//! Indexes", CIDR 2022) and the cost of the resources one run used.
//!
//! The paper's Equation 1 gives throughput per dollar as
//! `R = P / ($S + $D + (W × U) × ($C / T))`: the storage device's price,
//! the DRAM's, and the CPU prorated to the hardware threads the workload
//! kept busy (`W × U`, worker threads × their utilisation). Here:
//!
//! - **CPU**: cores used = CPU seconds ÷ wall seconds of the run (getrusage,
//!   all threads of the process), × the table's $ per core
//!   ([`Prices::usd_per_core`]; the default table divides the CPU's price
//!   by its 40 hardware threads, as Equation 1 does).
//! - **DRAM**: prorated to the bytes the run held (the paper charges its
//!   whole 192 GB; a workload that needs less buys less): the pool or cache
//!   it was given, or its resident growth if larger, plus the page cache a
//!   page-cache engine held beside its own cache ([`dram_bytes`]).
//! - **Storage**: the share of the priced SSD the run needs, by space
//!   (bytes on disk ÷ the SSD's capacity: the paper's footnote 5, "count
//!   only the storage space actually used") or by reads
//!   ([`ssd_share_by_reads`]), whichever is larger, × the SSD's price.
//!   Writes are not charged (the table rates reads only).
//!
//! # The share of the SSD that reads use
//!
//! A device serving reads is bounded twice: by operations (the rated
//! random 4 KiB IOPS) and by bytes (the rated sequential read bandwidth).
//! Reads of many sizes use at least the larger of the two shares,
//! `max(read ops/s ÷ rated IOPS, read bytes/s ÷ rated bandwidth)`, so that
//! is what is charged: a large sequential read (a compaction's) is charged
//! by its bytes, not as one random read per 4 KiB. The exact device time, Σ over the reads of max(1 ÷ IOPS, size ÷
//! bandwidth), would need each read's size, which the counters do not give;
//! the max is a lower bound on it, and exact when all reads are small or
//! all are large. The reads come, in that order of preference, from
//! - the block device's own counters ([`ReadSource::DeviceCounters`]: reads
//!   completed and sectors read during the run, `crate::devio`), which
//!   count every process's reads of the device in the run, not only the
//!   engine's; or
//! - the process's read bytes ÷ 4096 ([`ReadSource::ProcessBytes`]:
//!   `read_bytes` of `/proc/self/io`) where the device is unknown or its
//!   counters unreadable: an estimate that counts a 1 MiB read as 256.
//!
//! ops/s per $ = ops/s ÷ (CPU $ + DRAM $ + storage $).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The default table's text (built into the binary).
pub const DEFAULT_PRICES_TOML: &str = include_str!("../prices/huang-cidr2022.toml");

/// Bytes per GiB.
const GIB_BYTES: f64 = (1u64 << 30) as f64;

/// Bytes of the reads the rated IOPS count (4 KiB random reads).
pub const RATED_READ_BYTES: u64 = 4096;

/// Where a run's reads were counted (in the JSON: its [`ReadSource::label`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadSource {
    /// The block device's reads completed and sectors read.
    DeviceCounters,
    /// The process's `read_bytes` (`/proc/self/io`), as reads of 4 KiB.
    ProcessBytes,
}

impl Serialize for ReadSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

impl ReadSource {
    /// The name reports and the JSON use.
    pub fn label(self) -> &'static str {
        match self {
            ReadSource::DeviceCounters => "device counters",
            ReadSource::ProcessBytes => "process bytes ÷ 4096",
        }
    }
}

/// A run's reads per second, as operations and as bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadRate {
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub source: ReadSource,
}

impl ReadRate {
    /// Reads from the process's read bytes per second: as many 4 KiB
    /// reads as those bytes fill.
    pub fn from_process_bytes(bytes_per_sec: f64) -> ReadRate {
        ReadRate {
            ops_per_sec: bytes_per_sec / RATED_READ_BYTES as f64,
            bytes_per_sec,
            source: ReadSource::ProcessBytes,
        }
    }
}

/// A price table as written in its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    name: String,
    source: String,
    date: String,
    cpu: CpuPrice,
    dram: DramPrice,
    ssd: SsdPrice,
}

/// The CPU: either `usd_per_core`, or the CPU's `usd` and `cores` (and
/// `hardware_threads` with `prorate_per = "hardware_thread"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CpuPrice {
    part: Option<String>,
    usd_per_core: Option<f64>,
    usd: Option<f64>,
    cores: Option<u32>,
    hardware_threads: Option<u32>,
    prorate_per: Option<String>,
}

/// DRAM: either `usd_per_gib`, or the modules' `usd` and `bytes`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DramPrice {
    part: Option<String>,
    usd_per_gib: Option<f64>,
    usd: Option<f64>,
    bytes: Option<u64>,
}

/// The SSD: its capacity `bytes`, its rated random-read IOPS (4 KiB) and
/// where that figure is from, optionally its rated sequential read
/// bandwidth and where that is from (tables without it: the bandwidth of
/// the rated IOPS at 4 KiB), and either its `usd` or `usd_per_gib`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SsdPrice {
    part: Option<String>,
    bytes: u64,
    random_read_iops: f64,
    random_read_iops_source: String,
    seq_read_bytes_per_sec: Option<f64>,
    seq_read_bytes_per_sec_source: Option<String>,
    usd: Option<f64>,
    usd_per_gib: Option<f64>,
}

/// A checked price table, as rates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prices {
    pub name: String,
    /// Where the prices are from (authors, title, venue for a paper).
    pub source: String,
    /// When the prices were taken.
    pub date: String,
    /// $ of one core used (one CPU second per wall second).
    pub usd_per_core: f64,
    /// How `usd_per_core` was found.
    pub usd_per_core_note: String,
    pub usd_per_gib_dram: f64,
    /// The priced SSD's price.
    pub ssd_usd: f64,
    pub ssd_bytes: u64,
    pub usd_per_gib_ssd: f64,
    /// The priced SSD's rated 4 KiB random reads per second.
    pub ssd_random_read_iops: f64,
    pub ssd_random_read_iops_source: String,
    /// The priced SSD's rated sequential read bandwidth, bytes per second.
    pub ssd_read_bytes_per_sec: f64,
    /// Where it is from (or that it is the rated IOPS × 4 KiB).
    pub ssd_read_bytes_per_sec_source: String,
    /// The parts priced, for the report.
    pub parts: Vec<String>,
}

/// A positive, finite price or quantity named `what`.
fn positive(what: &str, value: f64) -> Result<f64, String> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(format!("{what} must be a positive number, not {value}"))
    }
}

fn non_empty(what: &str, text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        Err(format!("{what} is empty"))
    } else {
        Ok(text.to_string())
    }
}

impl PriceFile {
    fn check(self) -> Result<Prices, String> {
        let name = non_empty("name", &self.name)?;
        let source = non_empty("source", &self.source)?;
        let date = non_empty("date", &self.date)?;
        let cpu = &self.cpu;
        let (usd_per_core, usd_per_core_note) = match (cpu.usd_per_core, cpu.usd, cpu.cores) {
            (Some(rate), None, None) => {
                if cpu.hardware_threads.is_some() || cpu.prorate_per.is_some() {
                    return Err(
                        "cpu: hardware_threads and prorate_per go with usd and cores, not usd_per_core"
                            .into(),
                    );
                }
                let rate = positive("cpu.usd_per_core", rate)?;
                (rate, format!("${rate} per core, as given"))
            }
            (None, Some(usd), Some(cores)) => {
                let usd = positive("cpu.usd", usd)?;
                let cores = positive("cpu.cores", f64::from(cores))?;
                match cpu.prorate_per.as_deref().unwrap_or("core") {
                    "core" => (usd / cores, format!("CPU ${usd} / {cores} cores")),
                    "hardware_thread" => {
                        let threads = cpu.hardware_threads.ok_or(
                            "cpu: prorate_per = \"hardware_thread\" needs hardware_threads",
                        )?;
                        let threads = positive("cpu.hardware_threads", f64::from(threads))?;
                        (
                            usd / threads,
                            format!("CPU ${usd} / {threads} hardware threads"),
                        )
                    }
                    other => {
                        return Err(format!(
                            "cpu.prorate_per {other:?}: use \"core\" or \"hardware_thread\""
                        ))
                    }
                }
            }
            _ => return Err("cpu: give either usd_per_core, or usd and cores".into()),
        };
        let dram = &self.dram;
        let usd_per_gib_dram = match (dram.usd_per_gib, dram.usd, dram.bytes) {
            (Some(rate), None, None) => positive("dram.usd_per_gib", rate)?,
            (None, Some(usd), Some(bytes)) => {
                positive("dram.usd", usd)? / (positive("dram.bytes", bytes as f64)? / GIB_BYTES)
            }
            _ => return Err("dram: give either usd_per_gib, or usd and bytes".into()),
        };
        let ssd = &self.ssd;
        let ssd_gib = positive("ssd.bytes", ssd.bytes as f64)? / GIB_BYTES;
        let ssd_usd = match (ssd.usd, ssd.usd_per_gib) {
            (Some(usd), None) => positive("ssd.usd", usd)?,
            (None, Some(rate)) => positive("ssd.usd_per_gib", rate)? * ssd_gib,
            _ => return Err("ssd: give either usd or usd_per_gib".into()),
        };
        let ssd_random_read_iops = positive("ssd.random_read_iops", ssd.random_read_iops)?;
        let ssd_random_read_iops_source =
            non_empty("ssd.random_read_iops_source", &ssd.random_read_iops_source)?;
        let (ssd_read_bytes_per_sec, ssd_read_bytes_per_sec_source) = match (
            ssd.seq_read_bytes_per_sec,
            ssd.seq_read_bytes_per_sec_source.as_deref(),
        ) {
            (Some(rate), Some(source)) => (
                positive("ssd.seq_read_bytes_per_sec", rate)?,
                non_empty("ssd.seq_read_bytes_per_sec_source", source)?,
            ),
            (None, None) => (
                ssd_random_read_iops * RATED_READ_BYTES as f64,
                "not in the table: its random_read_iops × 4 KiB".to_string(),
            ),
            (Some(_), None) => {
                return Err("ssd.seq_read_bytes_per_sec needs seq_read_bytes_per_sec_source".into())
            }
            (None, Some(_)) => {
                return Err(
                    "ssd.seq_read_bytes_per_sec_source without seq_read_bytes_per_sec".into(),
                )
            }
        };
        let parts = [&cpu.part, &dram.part, &ssd.part]
            .into_iter()
            .flatten()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        Ok(Prices {
            name,
            source,
            date,
            usd_per_core,
            usd_per_core_note,
            usd_per_gib_dram,
            ssd_usd,
            ssd_bytes: ssd.bytes,
            usd_per_gib_ssd: ssd_usd / ssd_gib,
            ssd_random_read_iops,
            ssd_random_read_iops_source,
            ssd_read_bytes_per_sec,
            ssd_read_bytes_per_sec_source,
            parts,
        })
    }
}

impl Prices {
    /// Parses a table's text: JSON if it starts with `{`, else TOML.
    /// `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Prices, String> {
        let file: PriceFile = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| format!("price table {origin}: {e}"))?
        } else {
            toml::from_str(text).map_err(|e| format!("price table {origin}: {e}"))?
        };
        file.check()
            .map_err(|e| format!("price table {origin}: {e}"))
    }

    /// The table built into the binary (see [`DEFAULT_PRICES_TOML`]).
    pub fn default_table() -> Prices {
        Prices::parse(DEFAULT_PRICES_TOML, "built-in")
            .expect("the built-in price table parses (tested)")
    }

    /// The table in `path`, or the built-in one.
    pub fn load(path: Option<&Path>) -> Result<Prices, String> {
        match path {
            None => Ok(Prices::default_table()),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--prices {}: {e}", path.display()))?;
                Prices::parse(&text, &path.display().to_string())
            }
        }
    }

    /// One line for reports: the table's name, source and date, and its rates.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}; prices of {}): ${:.2} per core used ({}), ${:.2} per GiB of DRAM, ${:.2} per GiB of SSD (${:.2} for {:.0} GB), SSD rated {:.0} random 4 KiB reads/s ({}) and {:.0} MB/s of sequential reads ({})",
            self.name,
            self.source,
            self.date,
            self.usd_per_core,
            self.usd_per_core_note,
            self.usd_per_gib_dram,
            self.usd_per_gib_ssd,
            self.ssd_usd,
            self.ssd_bytes as f64 / 1e9,
            self.ssd_random_read_iops,
            self.ssd_random_read_iops_source,
            self.ssd_read_bytes_per_sec / 1e6,
            self.ssd_read_bytes_per_sec_source
        )
    }
}

/// What one run used, as the cost needs it.
#[derive(Debug, Clone, Default)]
pub struct CostInputs {
    pub ops_per_sec: f64,
    pub cpu_s: f64,
    pub wall_s: f64,
    /// DRAM the run held ([`dram_bytes`]).
    pub dram_bytes: u64,
    /// Bytes on disk (None: not measured).
    pub storage_bytes: Option<u64>,
    /// Reads per second the run made (None: not measured).
    pub reads: Option<ReadRate>,
    /// The device's random-read limit measured on this machine (None: not
    /// measured).
    pub device_iops: Option<f64>,
}

/// The cost of one run's resources and its ops/s per $.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostFigures {
    /// The price table's name, source and date.
    pub prices: String,
    pub prices_source: String,
    pub prices_date: String,
    /// CPU seconds ÷ wall seconds.
    pub cores_used: f64,
    pub dram_bytes: u64,
    pub storage_bytes: Option<u64>,
    /// Read operations per second of the run (with `reads_source` "process
    /// bytes ÷ 4096": read bytes ÷ 4096).
    pub reads_per_sec: Option<f64>,
    /// Bytes read per second.
    pub read_bytes_per_sec: Option<f64>,
    /// Where the reads were counted ("device counters" or "process bytes ÷
    /// 4096"; null: not measured).
    pub reads_source: Option<ReadSource>,
    /// `reads_per_sec` ÷ this machine's measured device limit (random 4
    /// KiB reads/s).
    pub device_share_used: Option<f64>,
    /// `storage_bytes` ÷ the priced SSD's capacity.
    pub ssd_share_by_space: Option<f64>,
    /// `reads_per_sec` ÷ the priced SSD's rated IOPS.
    pub ssd_share_by_read_iops: Option<f64>,
    /// `read_bytes_per_sec` ÷ the priced SSD's rated read bandwidth.
    pub ssd_share_by_read_bandwidth: Option<f64>,
    /// The larger of those two ([`ssd_share_by_reads`]).
    pub ssd_share_by_reads: Option<f64>,
    /// The larger of the two: the share of the SSD priced.
    pub ssd_share: f64,
    pub usd_cpu: f64,
    pub usd_dram: f64,
    pub usd_storage: f64,
    pub usd_total: f64,
    /// ops/s ÷ `usd_total`.
    pub ops_per_sec_per_usd: f64,
    /// flashtree's `ops_per_sec_per_usd` ÷ this engine's (None: no
    /// flashtree result beside it).
    pub flashtree_ratio: Option<f64>,
    /// What was not measured, and so not priced.
    pub notes: Vec<String>,
}

/// DRAM a run held: the pool or cache it was given, or the process's
/// resident growth (peak resident memory during the run minus the resident
/// memory before the engine opened) where that is larger, plus page cache
/// held beside the engine's own cache (engines that read through the page
/// cache and have a cache of their own; None: none, or not measured).
pub fn dram_bytes(
    pool_bytes: u64,
    resident_growth_bytes: Option<u64>,
    page_cache_beside_bytes: Option<u64>,
) -> u64 {
    pool_bytes.max(resident_growth_bytes.unwrap_or(0)) + page_cache_beside_bytes.unwrap_or(0)
}

/// The share of the priced SSD that `reads` use: (the larger of the two
/// below, by operations = ops/s ÷ rated IOPS, by bytes = bytes/s ÷ rated
/// bandwidth). See the module's text for why the larger.
pub fn ssd_share_by_reads(reads: &ReadRate, prices: &Prices) -> (f64, f64, f64) {
    let by_ops = reads.ops_per_sec / prices.ssd_random_read_iops;
    let by_bytes = reads.bytes_per_sec / prices.ssd_read_bytes_per_sec;
    (by_ops.max(by_bytes), by_ops, by_bytes)
}

/// The cost of the resources in `inputs` at `prices`.
pub fn cost_of(inputs: &CostInputs, prices: &Prices) -> CostFigures {
    let mut notes = Vec::new();
    let cores_used = if inputs.wall_s > 0.0 {
        inputs.cpu_s / inputs.wall_s
    } else {
        0.0
    };
    let ssd_share_by_space = inputs
        .storage_bytes
        .map(|bytes| bytes as f64 / prices.ssd_bytes as f64);
    let read_shares = inputs.reads.map(|reads| ssd_share_by_reads(&reads, prices));
    let ssd_share_by_reads = read_shares.map(|(share, _, _)| share);
    if ssd_share_by_space.is_none() {
        notes.push("bytes on disk not measured: storage priced by reads only".to_string());
    }
    if ssd_share_by_reads.is_none() {
        notes.push("reads not measured: storage priced by space only".to_string());
    }
    let ssd_share = ssd_share_by_space
        .unwrap_or(0.0)
        .max(ssd_share_by_reads.unwrap_or(0.0));
    let usd_cpu = cores_used * prices.usd_per_core;
    let usd_dram = inputs.dram_bytes as f64 / GIB_BYTES * prices.usd_per_gib_dram;
    let usd_storage = ssd_share * prices.ssd_usd;
    let usd_total = usd_cpu + usd_dram + usd_storage;
    CostFigures {
        prices: prices.name.clone(),
        prices_source: prices.source.clone(),
        prices_date: prices.date.clone(),
        cores_used,
        dram_bytes: inputs.dram_bytes,
        storage_bytes: inputs.storage_bytes,
        reads_per_sec: inputs.reads.map(|r| r.ops_per_sec),
        read_bytes_per_sec: inputs.reads.map(|r| r.bytes_per_sec),
        reads_source: inputs.reads.map(|r| r.source),
        device_share_used: inputs
            .reads
            .zip(inputs.device_iops.filter(|d| *d > 0.0))
            .map(|(reads, device)| reads.ops_per_sec / device),
        ssd_share_by_space,
        ssd_share_by_read_iops: read_shares.map(|(_, by_ops, _)| by_ops),
        ssd_share_by_read_bandwidth: read_shares.map(|(_, _, by_bytes)| by_bytes),
        ssd_share_by_reads,
        ssd_share,
        usd_cpu,
        usd_dram,
        usd_storage,
        usd_total,
        ops_per_sec_per_usd: if usd_total > 0.0 {
            inputs.ops_per_sec / usd_total
        } else {
            0.0
        },
        flashtree_ratio: None,
        notes,
    }
}

/// Sets every figure's `flashtree_ratio`: flashtree's ops/s per $ ÷ the
/// engine's (left None without a flashtree figure).
pub fn set_flashtree_ratios<'a>(figures: impl IntoIterator<Item = (&'a str, &'a mut CostFigures)>) {
    let mut all: Vec<(&str, &mut CostFigures)> = figures.into_iter().collect();
    let ours = all
        .iter()
        .find(|(engine, _)| *engine == "flashtree")
        .map(|(_, cost)| cost.ops_per_sec_per_usd);
    for (_, cost) in &mut all {
        cost.flashtree_ratio = ours
            .filter(|_| cost.ops_per_sec_per_usd > 0.0)
            .map(|ours| ours / cost.ops_per_sec_per_usd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn default_table_is_table_1_of_the_paper() {
        let p = Prices::default_table();
        assert!(p.source.contains("SSDs Striking Back"), "{}", p.source);
        assert!(p.source.contains("CIDR 2022"));
        assert!(p.date.contains("2021"));
        assert!(close(p.usd_per_core, 2517.0 / 40.0));
        assert!(close(p.usd_per_gib_dram, 1157.94 / 192.0));
        assert!(close(p.ssd_usd, 999.0));
        assert_eq!(p.ssd_bytes, 375_000_000_000);
        assert!(close(p.ssd_random_read_iops, 550_000.0));
        assert!(p
            .ssd_random_read_iops_source
            .starts_with("NOT from the paper"));
        assert_eq!(p.parts.len(), 3);
        let line = p.describe();
        assert!(line.contains("$62.92 per core used"), "{line}");
        assert!(line.contains("August/September 2021"), "{line}");
    }

    #[test]
    fn whole_server_reproduces_the_papers_per_gb_with_one_thread() {
        // Table 1, P4800X1, "Per GB with 1 thread": the whole SSD, the whole
        // 192 GB of DRAM and one thread of the CPU, per GB of the SSD: $5.92.
        let p = Prices::default_table();
        let inputs = CostInputs {
            ops_per_sec: 1000.0,
            cpu_s: 10.0,
            wall_s: 10.0,
            dram_bytes: 192 << 30,
            storage_bytes: Some(375_000_000_000),
            reads: Some(ReadRate {
                ops_per_sec: 0.0,
                bytes_per_sec: 0.0,
                source: ReadSource::DeviceCounters,
            }),
            device_iops: None,
        };
        let cost = cost_of(&inputs, &p);
        assert!(close(cost.cores_used, 1.0));
        assert!(close(cost.ssd_share, 1.0));
        assert!(close(cost.usd_total, 999.0 + 1157.94 + 2517.0 / 40.0));
        assert_eq!(format!("{:.2}", cost.usd_total / 375.0), "5.92");
        // "Per GB without CPU": $5.75.
        assert_eq!(
            format!("{:.2}", (cost.usd_dram + cost.usd_storage) / 375.0),
            "5.75"
        );
        assert!(close(cost.ops_per_sec_per_usd, 1000.0 / cost.usd_total));
    }

    #[test]
    fn a_run_pays_for_what_it_used() {
        let p = Prices::parse(
            r#"
            name = "round"
            source = "made up for a test"
            date = "2026"
            [cpu]
            usd = 1000.0
            cores = 10
            [dram]
            usd_per_gib = 4.0
            [ssd]
            bytes = 1073741824000
            usd = 1000.0
            random_read_iops = 1000000.0
            random_read_iops_source = "test"
            "#,
            "test",
        )
        .unwrap();
        assert!(close(p.usd_per_core, 100.0));
        assert!(close(p.usd_per_gib_ssd, 1.0));
        // No bandwidth in the table: the IOPS's at 4 KiB.
        assert!(close(p.ssd_read_bytes_per_sec, 4096.0 * 1e6));
        assert!(p.ssd_read_bytes_per_sec_source.contains("not in the table"));
        // 0.5 cores, 2 GiB, 10 GiB on disk (1 % of the SSD), 100k 4 KiB
        // reads/s (10 % of its IOPS): reads decide.
        let inputs = CostInputs {
            ops_per_sec: 50_000.0,
            cpu_s: 5.0,
            wall_s: 10.0,
            dram_bytes: 2 << 30,
            storage_bytes: Some(10 << 30),
            reads: Some(ReadRate::from_process_bytes(100_000.0 * 4096.0)),
            device_iops: Some(400_000.0),
        };
        let cost = cost_of(&inputs, &p);
        assert!(close(cost.cores_used, 0.5));
        assert!(close(cost.usd_cpu, 50.0));
        assert!(close(cost.usd_dram, 8.0));
        assert!(close(cost.ssd_share_by_space.unwrap(), 0.01));
        assert!(close(cost.ssd_share_by_reads.unwrap(), 0.1));
        assert!(close(cost.usd_storage, 100.0));
        assert!(close(cost.usd_total, 158.0));
        assert!(close(cost.ops_per_sec_per_usd, 50_000.0 / 158.0));
        assert!(close(cost.device_share_used.unwrap(), 0.25));
        assert_eq!(cost.reads_source, Some(ReadSource::ProcessBytes));
        assert!(cost.notes.is_empty());
        // No reads: space decides, and a note says reads were not priced.
        let cost = cost_of(
            &CostInputs {
                reads: None,
                ..inputs
            },
            &p,
        );
        assert_eq!(cost.reads_source, None);
        assert!(close(cost.usd_storage, 10.0));
        assert_eq!(cost.device_share_used, None);
        assert!(cost.notes[0].contains("reads not measured"));
    }

    #[test]
    fn reads_use_the_larger_share_of_the_ssd_by_operations_or_by_bytes() {
        let p = Prices::default_table();
        assert!(close(p.ssd_read_bytes_per_sec, 2.4e9));
        assert!(p
            .ssd_read_bytes_per_sec_source
            .starts_with("NOT from the paper"));
        let device = |ops_per_sec: f64, bytes_per_sec: f64| ReadRate {
            ops_per_sec,
            bytes_per_sec,
            source: ReadSource::DeviceCounters,
        };
        // 55k random 4 KiB reads/s: 10 % of the IOPS, 9.4 % of the bandwidth.
        let (share, by_ops, by_bytes) =
            ssd_share_by_reads(&device(55_000.0, 55_000.0 * 4096.0), &p);
        assert!(close(by_ops, 0.1));
        assert!(close(by_bytes, 55_000.0 * 4096.0 / 2.4e9));
        assert!(close(share, 0.1));
        // Compactions: 3,683 reads/s of 128 KiB (483 MB/s) use 20 % of the
        // bandwidth and 0.7 % of the IOPS: bytes decide.
        let (share, by_ops, by_bytes) =
            ssd_share_by_reads(&device(3_683.0, 3_683.0 * 131_072.0), &p);
        assert!(close(by_ops, 3_683.0 / 550_000.0));
        assert!(close(share, by_bytes));
        assert!(close(share, 3_683.0 * 131_072.0 / 2.4e9));
        // Priced through cost_of: the storage $ follows the larger share,
        // and the figures say where the reads came from.
        let inputs = CostInputs {
            ops_per_sec: 1.0,
            wall_s: 1.0,
            storage_bytes: Some(0),
            reads: Some(device(3_683.0, 3_683.0 * 131_072.0)),
            device_iops: Some(7_366.0),
            ..CostInputs::default()
        };
        let cost = cost_of(&inputs, &p);
        assert!(close(cost.usd_storage, share * 999.0));
        assert_eq!(cost.ssd_share_by_reads, Some(share));
        assert_eq!(cost.ssd_share_by_read_iops, Some(by_ops));
        assert_eq!(cost.ssd_share_by_read_bandwidth, Some(by_bytes));
        assert_eq!(cost.reads_per_sec, Some(3_683.0));
        assert!(close(cost.device_share_used.unwrap(), 0.5));
        let json = serde_json::to_value(&cost).unwrap();
        assert_eq!(json["reads_source"], "device counters");
        // The same bytes counted as 4 KiB reads of the process, as before:
        // 118k "reads/s", 21 % of the IOPS.
        let estimate = ReadRate::from_process_bytes(3_683.0 * 131_072.0);
        assert!(close(estimate.ops_per_sec, 3_683.0 * 32.0));
        let (old_share, _, _) = ssd_share_by_reads(&estimate, &p);
        assert!(close(old_share, 3_683.0 * 32.0 / 550_000.0));
        assert_eq!(
            serde_json::to_value(estimate.source).unwrap(),
            "process bytes ÷ 4096"
        );
    }

    #[test]
    fn dram_is_the_pool_or_more() {
        assert_eq!(dram_bytes(100, Some(60), None), 100);
        assert_eq!(dram_bytes(100, Some(160), None), 160);
        assert_eq!(dram_bytes(100, None, Some(16)), 116);
        assert_eq!(dram_bytes(100, Some(130), Some(16)), 146);
    }

    #[test]
    fn flashtree_ratio_divides_its_ops_per_usd_by_each_engines() {
        let mut a = cost_of(&CostInputs::default(), &Prices::default_table());
        let mut b = a.clone();
        a.ops_per_sec_per_usd = 300.0;
        b.ops_per_sec_per_usd = 100.0;
        set_flashtree_ratios([("flashtree", &mut a), ("rocksdb", &mut b)]);
        assert_eq!(a.flashtree_ratio, Some(1.0));
        assert_eq!(b.flashtree_ratio, Some(3.0));
        set_flashtree_ratios([("lmdb", &mut b)]);
        assert_eq!(b.flashtree_ratio, None);
    }

    #[test]
    fn json_tables_parse_like_toml() {
        let p = Prices::parse(
            r#"{"name": "j", "source": "s", "date": "d",
                "cpu": {"usd_per_core": 50.0},
                "dram": {"usd": 100.0, "bytes": 10737418240},
                "ssd": {"bytes": 1000000000000, "usd_per_gib": 0.1,
                        "random_read_iops": 500000, "random_read_iops_source": "x"}}"#,
            "j.json",
        )
        .unwrap();
        assert!(close(p.usd_per_core, 50.0));
        assert!(close(p.usd_per_gib_dram, 10.0));
        assert!(close(p.ssd_usd, 0.1 * 1e12 / GIB_BYTES));
    }

    #[test]
    fn bad_tables_are_clear_errors() {
        let good = DEFAULT_PRICES_TOML;
        let cases: Vec<(String, &str)> = vec![
            (
                good.replace("usd = 2517.0", "usd = -2517.0"),
                "cpu.usd must be a positive",
            ),
            (
                good.replace("usd = 999.0", "usd = 0.0"),
                "ssd.usd must be a positive",
            ),
            (
                good.replace("random_read_iops = 550000.0", "random_read_iops = -1.0"),
                "ssd.random_read_iops must be a positive",
            ),
            (good.replace("cores = 20\n", ""), "give either usd_per_core"),
            (
                good.replace("hardware_threads = 40\n", ""),
                "needs hardware_threads",
            ),
            (
                good.replace("\"hardware_thread\"", "\"socket\""),
                "use \"core\" or \"hardware_thread\"",
            ),
            (good.replace("date = ", "dat = "), "unknown field"),
            (
                good.replace(
                    "seq_read_bytes_per_sec = 2400000000.0",
                    "seq_read_bytes_per_sec = 0.0",
                ),
                "ssd.seq_read_bytes_per_sec must be a positive",
            ),
            (
                good.replace("seq_read_bytes_per_sec_source = ", "# "),
                "needs seq_read_bytes_per_sec_source",
            ),
            (
                good.replace("seq_read_bytes_per_sec = ", "# "),
                "source without seq_read_bytes_per_sec",
            ),
            (good.replace("[ssd]", "[ssd\n"), "price table t"),
            (
                good.replace("usd = 1157.94", "usd = \"a lot\""),
                "invalid type",
            ),
            (
                good.replace("source = \"Huang", "source = \"  \" #"),
                "source is empty",
            ),
            ("{\"name\": 1}".to_string(), "price table t"),
        ];
        for (text, expected) in cases {
            let error = Prices::parse(&text, "t").unwrap_err();
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
            assert!(error.starts_with("price table t"), "{error}");
        }
        let error = Prices::load(Some(Path::new("/nonexistent/prices.toml"))).unwrap_err();
        assert!(
            error.starts_with("--prices /nonexistent/prices.toml"),
            "{error}"
        );
        assert_eq!(Prices::load(None).unwrap(), Prices::default_table());
    }
}
