//! `report.md`: one table row per engine plus each engine's settings and,
//! with `--profile`, where each engine's CPU time goes; `profile-<engine>.txt`.

use std::fmt::Write as _;
use std::path::Path;

use crate::compare::{durability_line, CompareArgs, EngineRun};
use crate::cost::{Prices, ReadSource};
use crate::sys::{Profile, PERF_FREQUENCY_HZ};

/// Longest symbol shown in report.md (profile-<engine>.txt has them whole).
const REPORT_SYMBOL_CHARS_MAX: usize = 100;

fn optional(value: Option<f64>, precision: usize) -> String {
    value.map_or("–".to_string(), |v| format!("{v:.precision$}"))
}

/// A space figure, or "n/a" (the report's space section says why).
fn space_cell(value: Option<f64>, precision: usize) -> String {
    value.map_or("n/a".to_string(), |v| format!("{v:.precision$}"))
}

/// Bytes as MB (10^6 bytes), or "n/a".
fn megabytes(bytes: Option<u64>) -> String {
    space_cell(bytes.map(|b| b as f64 / 1e6), 1)
}

/// Space amplification "after load / after run", each "n/a" if unknown.
pub fn space_amps(summary: &crate::compare::Summary) -> String {
    format!(
        "{} / {}",
        space_cell(summary.space_amp_after_load, 2),
        space_cell(summary.space_amp_after_run, 2)
    )
}

/// CPU µs/op as "total (user + sys)".
fn cpu_split(run: &EngineRun) -> String {
    let s = &run.summary;
    match (s.cpu_us_per_op, s.cpu_us_per_op_user, s.cpu_us_per_op_sys) {
        (Some(total), Some(user), Some(sys)) => format!("{total:.2} ({user:.2} + {sys:.2})"),
        (total, _, _) => optional(total, 2),
    }
}

/// Which device the read and write IOPS are of, or why there are none.
fn device_line(runs: &[EngineRun]) -> String {
    let mut devices: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.summary.device.as_deref())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let mut errors: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.summary.device_counters_error.as_deref())
        .collect();
    errors.sort_unstable();
    errors.dedup();
    match (devices.is_empty(), errors.is_empty()) {
        (false, true) => format!(
            "the counters of {} (all processes' I/O to it)",
            devices.join(", ")
        ),
        (true, false) => format!("not measurable ({})", errors.join("; ")),
        (false, false) => format!(
            "the counters of {} (all processes' I/O to it) where measurable ({})",
            devices.join(", "),
            errors.join("; ")
        ),
        (true, true) => "not measured".into(),
    }
}

/// Writes `dir/report.md`.
pub fn write_report(
    dir: &Path,
    args: &CompareArgs,
    runs: &[EngineRun],
    device_iops: Option<f64>,
    prices: &Prices,
) -> Result<(), String> {
    let flashtree_ops = runs
        .iter()
        .find(|r| r.summary.engine == "flashtree")
        .map(|r| r.summary.ops_per_sec);
    let mut text = String::new();
    let first = runs.first().map(|r| &r.summary);
    let _ = writeln!(
        text,
        "# {} comparison\n",
        first.map_or("?".into(), |s| s.workload.clone())
    );
    let _ = writeln!(
        text,
        "memory budget {} ({} B), data factor {}, dataset {} B, {} records, cores {:?}, {} s per run after a {} s warm-up run per engine (not measured), {}.\n",
        args.memory,
        first.map_or(0, |s| s.pool_bytes),
        args.data_factor,
        first.map_or(0, |s| s.dataset_bytes),
        first.map_or(0, |s| s.records),
        runs.first().map(|r| r.cores.clone()).unwrap_or_default(),
        args.seconds,
        args.warmup,
        match args.rate {
            Some(rate) => format!("open loop at {rate} ops/s"),
            None => "closed loop".to_string(),
        }
    );
    let _ = writeln!(
        text,
        "Durability: {}. Device limit: {}. Read and write IOPS: {}.\n",
        durability_line(
            runs.iter().map(|r| r.summary.engine.as_str()),
            args.durability,
        ),
        optional(device_iops, 0) + " IOPS",
        device_line(runs)
    );
    let _ = writeln!(
        text,
        "| engine | ops/s | ÷ flashtree | ÷ device IOPS | CPU µs/op (user + sys) | p50 µs | p99 µs | p99.9 µs | threads (workers×tasks) | read IOPS | write IOPS | load rec/s | space amp (load / run) |"
    );
    let _ = writeln!(
        text,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for run in runs {
        let s = &run.summary;
        let concurrency = match (s.threads, s.workers, s.tasks) {
            (Some(threads), _, _) => threads.to_string(),
            (None, Some(workers), Some(tasks)) => format!("{workers}×{tasks}"),
            _ => "–".to_string(),
        };
        let _ = writeln!(
            text,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
            s.engine,
            s.ops_per_sec,
            optional(flashtree_ops.map(|f| s.ops_per_sec / f), 2),
            optional(device_iops.map(|d| s.ops_per_sec / d), 3),
            cpu_split(run),
            optional(s.lat_us_p50, 1),
            optional(s.lat_us_p99, 1),
            optional(run.lat_us_p999, 1),
            concurrency,
            optional(s.read_iops, 0),
            optional(s.write_iops, 0),
            s.load_records_per_sec,
            space_amps(s),
        );
    }
    write_cost_section(&mut text, runs, prices);
    write_space_table(&mut text, runs);
    write_commits_table(&mut text, runs);
    let workload = args.workload.to_ascii_lowercase();
    let shape = crate::targets::RunShape {
        workload: &workload,
        data_factor: args.data_factor_value()?,
        cores: runs.first().map_or(0, |r| r.cores.len()),
        uniform_keys: args.zipf.is_none(),
        device_iops,
        profiled: args.profile,
    };
    text.push_str(&crate::targets::targets_section(&shape, runs));
    let _ = writeln!(text, "\n## Settings\n");
    for run in runs {
        let sweep: Vec<String> = run
            .sweep
            .iter()
            .map(|(t, ops)| match run.summary.tasks {
                Some(_) => format!("{t} tasks/worker: {ops:.0} ops/s"),
                None => format!("{t} threads: {ops:.0} ops/s"),
            })
            .collect();
        let _ = writeln!(
            text,
            "- **{}**: {}",
            run.summary.engine, run.summary.settings
        );
        let _ = writeln!(text, "  - memory: {}", run.memory_limit);
        let _ = writeln!(text, "  - sweep: {}", sweep.join(", "));
        let _ = writeln!(text, "  - operations: {:?}", run.ops_by_kind);
        if !run.page_reads_per_op_by_kind.is_empty() {
            let reads: Vec<String> = run
                .page_reads_per_op_by_kind
                .iter()
                .map(|(kind, reads)| format!("{kind} {reads:.2}"))
                .collect();
            let _ = writeln!(text, "  - page reads per operation: {}", reads.join(", "));
        }
        let _ = writeln!(text, "  - consistency: {}", run.consistency);
    }
    if args.profile {
        write_where_the_time_goes(&mut text, runs);
    }
    let _ = writeln!(
        text,
        "\nPlots: throughput.png, cost.png (ops/s and ops/s per $), latency_cdf.png, timeline.png."
    );
    let path = dir.join("report.md");
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The "Where the time goes" section: per engine, CPU µs/op split into user
/// and system time, perf's kernel/user share and its top symbols.
fn write_where_the_time_goes(text: &mut String, runs: &[EngineRun]) {
    let _ = writeln!(text, "\n## Where the time goes\n");
    let _ = writeln!(
        text,
        "CPU µs/op from getrusage (all threads of the process). Every timed run sampled with \
         `perf record -e cpu-clock -F {PERF_FREQUENCY_HZ}` (sampling costs a few percent of \
         throughput); shown: each engine's best run. µs/op of a symbol = its share of the \
         samples × CPU µs/op."
    );
    for run in runs {
        let s = &run.summary;
        let _ = writeln!(text, "\n### {}\n", s.engine);
        let _ = writeln!(
            text,
            "CPU µs/op: {} = user {} + sys {}.",
            optional(s.cpu_us_per_op, 2),
            optional(s.cpu_us_per_op_user, 2),
            optional(s.cpu_us_per_op_sys, 2)
        );
        match &run.profile {
            None => {
                let _ = writeln!(text, "\nNo profile.");
            }
            Some(Err(reason)) => {
                let _ = writeln!(text, "\nNo profile: {reason}");
            }
            Some(Ok(profile)) => {
                let _ = writeln!(
                    text,
                    "\nperf: {} samples{}, kernel {:.1} %, user {:.1} %{}; full list in profile-{}.txt.\n",
                    profile.samples,
                    sampled_cpu_note(profile, s.cpu_s),
                    profile.kernel_share * 100.0,
                    profile.user_share * 100.0,
                    perf_data_note(run),
                    s.engine
                );
                let _ = writeln!(text, "| symbol | dso | share of samples | µs/op |");
                let _ = writeln!(text, "|---|---|---|---|");
                for (dso, symbol, share) in &profile.top {
                    let _ = writeln!(
                        text,
                        "| `{}` | {} | {:.1} % | {} |",
                        markdown_cell(&shorten(symbol, REPORT_SYMBOL_CHARS_MAX)),
                        markdown_cell(dso),
                        share * 100.0,
                        optional(s.cpu_us_per_op.map(|cpu| cpu * share), 3)
                    );
                }
            }
        }
    }
}

/// " (= N s of CPU, P % of getrusage's N s)": how much of the run's CPU
/// time the samples cover.
fn sampled_cpu_note(profile: &Profile, cpu_s: f64) -> String {
    if cpu_s <= 0.0 {
        return String::new();
    }
    let sampled_s = profile.samples as f64 / f64::from(PERF_FREQUENCY_HZ);
    format!(
        " (= {sampled_s:.2} s of CPU, {:.0} % of getrusage's {cpu_s:.2} s)",
        sampled_s / cpu_s * 100.0
    )
}

/// " (from <file>)" naming the kept perf.data file, if any.
fn perf_data_note(run: &EngineRun) -> String {
    run.perf_data_path
        .as_ref()
        .and_then(|path| path.file_name())
        .map_or(String::new(), |name| {
            format!(" (from {})", name.to_string_lossy())
        })
}

/// `text` safe inside a Markdown table cell and a code span.
fn markdown_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('`', "'")
}

/// `text` cut to `chars_max` characters, with "…" when cut.
fn shorten(text: &str, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        return text.to_string();
    }
    let mut short: String = text.chars().take(chars_max.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// Writes `dir/profile-<engine>.txt`: the engine's parsed perf profile (or
/// why there is none), with whole symbol names.
pub fn write_profile_text(dir: &Path, run: &EngineRun) -> Result<(), String> {
    let s = &run.summary;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} {}: best run, perf record -e cpu-clock -F {PERF_FREQUENCY_HZ}{}",
        s.engine,
        s.workload,
        perf_data_note(run)
    );
    let _ = writeln!(
        text,
        "CPU µs/op {} = user {} + sys {} (getrusage)",
        optional(s.cpu_us_per_op, 3),
        optional(s.cpu_us_per_op_user, 3),
        optional(s.cpu_us_per_op_sys, 3)
    );
    match &run.profile {
        None => {
            let _ = writeln!(text, "no profile");
        }
        Some(Err(reason)) => {
            let _ = writeln!(text, "no profile: {reason}");
        }
        Some(Ok(profile)) => write_profile_table(&mut text, profile, s.cpu_us_per_op, s.cpu_s),
    }
    let path = dir.join(format!("profile-{}.txt", s.engine));
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write_profile_table(
    text: &mut String,
    profile: &Profile,
    cpu_us_per_op: Option<f64>,
    cpu_s: f64,
) {
    let _ = writeln!(
        text,
        "{} samples{}: kernel {:.1} %, user {:.1} %\n",
        profile.samples,
        sampled_cpu_note(profile, cpu_s),
        profile.kernel_share * 100.0,
        profile.user_share * 100.0
    );
    let dso_width = profile
        .top
        .iter()
        .map(|(dso, _, _)| dso.chars().count())
        .max()
        .unwrap_or(3)
        .max(3);
    let _ = writeln!(text, "  share    µs/op  {:dso_width$}  symbol", "dso");
    for (dso, symbol, share) in &profile.top {
        let _ = writeln!(
            text,
            "{:6.2} %  {:>7}  {dso:dso_width$}  {symbol}",
            share * 100.0,
            optional(cpu_us_per_op.map(|cpu| cpu * share), 3),
        );
    }
    let _ = writeln!(
        text,
        "\n(top {} symbols; all of them: perf report -i <file> --stdio --no-children --sort dso,sym)",
        profile.top.len()
    );
}

/// MiB (2^20 bytes) with one decimal.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 20))
}

/// The cost table (Markdown): per engine, what its best run used, the $ of
/// it and its ops/s per $, and flashtree's ratio to it.
pub fn cost_table(runs: &[EngineRun]) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "| engine | ops/s | cores used | DRAM MiB | storage MB | reads counted by | reads/s | read MB/s | device share used | SSD share (space / read ops / read bytes) | $ CPU | $ DRAM | $ storage | $ total | ops/s per $ | flashtree ÷ (ops/s per $) |"
    );
    let _ = writeln!(
        text,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for run in runs {
        let s = &run.summary;
        let Some(c) = &s.cost else {
            let _ = writeln!(
                text,
                "| {} | {:.0} | not priced |||||||||||||||",
                s.engine, s.ops_per_sec
            );
            continue;
        };
        let _ = writeln!(
            text,
            "| {} | {:.0} | {:.3} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {} |",
            s.engine,
            s.ops_per_sec,
            c.cores_used,
            mebibytes(c.dram_bytes),
            megabytes(c.storage_bytes),
            c.reads_source.map_or("–", ReadSource::label),
            optional(c.reads_per_sec, 0),
            optional(c.read_bytes_per_sec.map(|b| b / 1e6), 1),
            optional(c.device_share_used, 3),
            optional(c.ssd_share_by_space, 4),
            optional(c.ssd_share_by_read_iops, 4),
            optional(c.ssd_share_by_read_bandwidth, 4),
            c.usd_cpu,
            c.usd_dram,
            c.usd_storage,
            c.usd_total,
            c.ops_per_sec_per_usd,
            optional(c.flashtree_ratio, 2),
        );
    }
    text
}

/// Where the runs' reads were counted, as a sentence ending in '.'.
fn reads_counted_by(runs: &[EngineRun]) -> String {
    let mut devices: Vec<&str> = runs
        .iter()
        .filter(|r| {
            r.summary.cost.as_ref().and_then(|c| c.reads_source) == Some(ReadSource::DeviceCounters)
        })
        .filter_map(|r| r.summary.device.as_deref())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let estimated: Vec<&str> = runs
        .iter()
        .filter(|r| {
            r.summary.cost.as_ref().and_then(|c| c.reads_source) == Some(ReadSource::ProcessBytes)
        })
        .map(|r| r.summary.engine.as_str())
        .collect();
    let mut text = String::new();
    if !devices.is_empty() {
        let _ = write!(
            text,
            "the block device's own counters (\"device counters\": reads completed and sectors read during the best run, `/sys/dev/block/M:m/stat`) of {}. They count every process's I/O to that device during the run, not only the engine's: on a shared machine other work inflates them.",
            devices.join(", ")
        );
    }
    if !estimated.is_empty() {
        let _ = write!(
            text,
            "{}the process's read bytes ÷ 4096 (\"process bytes ÷ 4096\": `read_bytes` of `/proc/self/io`, as if every read were 4 KiB; an estimate, where the device counters were not available, see the notes) for {}.",
            if text.is_empty() { "" } else { " Reads are counted by " },
            estimated.join(", ")
        );
    }
    if text.is_empty() {
        text.push_str("nothing: no run's reads were measured.");
    }
    text
}

/// The cost section: the price table used, how a run is priced, the cost
/// table, and each engine's resident memory and notes.
fn write_cost_section(text: &mut String, runs: &[EngineRun], prices: &Prices) {
    let _ = writeln!(
        text,
        "\n## Cost\n\nPrice table: {}.\n\nPriced as Equation 1 of Huang, Imai, Wang and Xie, \"SSDs Striking Back: The Storage Jungle and Its Implications on Persistent Indexes\" (CIDR 2022), ops/s ÷ ($ CPU + $ DRAM + $ storage), with every resource prorated to what the best run used: cores used = CPU s ÷ wall s (getrusage, all threads) × $ per core; DRAM = the pool or cache, or the process's resident growth if larger (peak resident memory during the run − resident memory before the engine opened), plus page cache an engine held beside a cache of its own (its memory cgroup's peak), × $ per GiB; storage = the largest share of the priced SSD by space (bytes on disk after the run ÷ its capacity, the paper's footnote 5), by read operations (reads/s ÷ its rated random-read IOPS) or by read bytes (read bytes/s ÷ its rated sequential read bandwidth) × its price: a device is bounded by operations and by bytes, so a large sequential read (a compaction's) is charged by its bytes, not as many 4 KiB reads. Reads are counted by {} Device share used: reads/s ÷ this machine's device limit (random 4 KiB reads/s). Writes are not charged. MiB = 2^20 bytes, MB = 10^6 bytes.\n",
        prices.describe(),
        reads_counted_by(runs)
    );
    text.push_str(&cost_table(runs));
    let _ = writeln!(text);
    for run in runs {
        let s = &run.summary;
        let mib = |bytes: Option<u64>| bytes.map_or("n/a".to_string(), mebibytes);
        let _ = writeln!(
            text,
            "- {}: pool {} MiB, resident {} MiB before the open, peak {} MiB in the run, page cache peak {} MiB",
            s.engine,
            mebibytes(s.pool_bytes),
            mib(s.rss_before_open_bytes),
            mib(s.rss_peak_bytes),
            s.page_cache_peak_bytes.map_or("–".to_string(), mebibytes),
        );
        for note in s.cost.iter().flat_map(|c| &c.notes) {
            let _ = writeln!(text, "  - {note}");
        }
    }
}

/// Kinds of file listed per engine in the space table.
const SPACE_KINDS_SHOWN: usize = 4;

/// The space section: per engine, raw bytes, bytes on disk after the load
/// and after the run, space amplification, the largest kinds of file and
/// the engine's own count; then why any figure is n/a.
fn write_space_table(text: &mut String, runs: &[EngineRun]) {
    let _ = writeln!(
        text,
        "\n## Space on disk\n\nDisk bytes: the space allocated to the regular files under the engine's directory `DIR/<engine>` (`st_blocks` × 512, hard links once), after the load with the engine still open (what it holds only in memory then is not counted, the logs it wrote are) and after the run once the engine closed. Allocated, not apparent, sizes: a sparse file (LMDB's map) counts only its written blocks; a preallocated or zero-filled file counts whole, such as flashtree's per-worker logs (`wal_bytes_per_worker` each, preallocated by a logged open; an open in `none` takes none) and its data file, grown ahead of use. Raw bytes: the keys and values the load committed; live after the run where the workload knows them (lookup, YCSB), else the space amplification after the run divides by the loaded raw bytes. MB = 10^6 bytes.\n"
    );
    let _ = writeln!(
        text,
        "| engine | raw MB loaded | raw MB live after run | disk MB after load | disk MB after run | space amp after load | space amp after run | largest files after run (MB) | engine's own count of its data files (MB, after load / before close) |"
    );
    let _ = writeln!(text, "|---|---|---|---|---|---|---|---|---|");
    for run in runs {
        let s = &run.summary;
        let kinds = run
            .disk_after_run
            .as_ref()
            .map_or("n/a".to_string(), |usage| {
                let shown: Vec<String> = usage
                    .allocated_bytes_by_kind
                    .iter()
                    .take(SPACE_KINDS_SHOWN)
                    .map(|(kind, bytes)| {
                        format!("`{}` {:.1}", markdown_cell(kind), *bytes as f64 / 1e6)
                    })
                    .collect();
                let more = usage
                    .allocated_bytes_by_kind
                    .len()
                    .saturating_sub(SPACE_KINDS_SHOWN);
                let mut cell = shown.join(", ");
                if more > 0 {
                    let _ = write!(cell, " and {more} more kinds");
                }
                cell
            });
        let own = match (
            run.engine_store_bytes_after_load,
            run.engine_store_bytes_before_close,
        ) {
            (None, None) => "–".to_string(),
            (load, close) => format!("{} / {}", megabytes(load), megabytes(close)),
        };
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.engine,
            megabytes(s.raw_bytes),
            megabytes(s.raw_bytes_live_after_run),
            megabytes(s.disk_bytes_after_load),
            megabytes(s.disk_bytes_after_run),
            space_cell(s.space_amp_after_load, 2),
            space_cell(s.space_amp_after_run, 2),
            kinds,
            own,
        );
    }
    for run in runs {
        for note in &run.summary.space_notes {
            let _ = writeln!(text, "\n- {}: {note}", run.summary.engine);
        }
    }
}

/// The commits of each engine's best run: commits/s, log syncs and commits
/// per sync (group commit), commit latency, and bytes the process wrote per
/// byte of keys and values committed. Written when some run committed.
fn write_commits_table(text: &mut String, runs: &[EngineRun]) {
    if runs.iter().all(|run| run.commits.commits_per_sec == 0.0) {
        return;
    }
    let _ = writeln!(
        text,
        "\n## Commits\n\nA commit is a single put or delete, or a batch (a TPC-C transaction). Log syncs come from the engine's own counters (flashtree: durable log writes; RocksDB: the `rocksdb.wal.synced` ticker; – where an engine has none). Write amplification is the bytes the process sent to storage (`write_bytes` of `/proc/self/io`, counted when a direct write is submitted or a page-cache page is dirtied) per byte of keys and values committed. Log KB per commit comes from the engine's own counters (flashtree: log blocks written; RocksDB: the `rocksdb.wal.bytes` ticker); the image share is the part of flashtree's log that is page images (a page's first change after a checkpoint, and splits), with the checkpoints the run completed.\n"
    );
    let _ = writeln!(
        text,
        "| engine | commits/s | log syncs/s | commits per sync | commit p50 µs | p99 µs | p99.9 µs | user MB written | process MB written | write amplification | log KB per commit | image share | checkpoints |"
    );
    let _ = writeln!(
        text,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for run in runs {
        let c = &run.commits;
        let _ = writeln!(
            text,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} |",
            run.summary.engine,
            c.commits_per_sec,
            optional(c.log_syncs_per_sec, 0),
            optional(c.commits_per_sync, 1),
            optional(c.commit_lat_us_p50, 1),
            optional(c.commit_lat_us_p99, 1),
            optional(c.commit_lat_us_p999, 1),
            c.user_bytes_written as f64 / 1e6,
            optional(c.process_write_bytes.map(|b| b as f64 / 1e6), 1),
            optional(c.write_amplification, 2),
            optional(c.log_bytes_per_commit.map(|b| b / 1024.0), 2),
            optional(c.log_image_share, 2),
            optional(c.checkpoints.map(|n| n as f64), 0),
        );
    }
    write_classes_table(text, runs);
}

/// Bytes each engine that classes its writes wrote per class in its best
/// run (flashtree: log, data pages its pool counted hot, the other data
/// pages; temp space is not used by any workload yet).
fn write_classes_table(text: &mut String, runs: &[EngineRun]) {
    let classed: Vec<&EngineRun> = runs
        .iter()
        .filter(|r| r.commits.data_hot_bytes.is_some())
        .collect();
    if classed.is_empty() {
        return;
    }
    let _ = writeln!(
        text,
        "\nBytes written by class (the engine's own counters; how each class is placed on the device is in Settings):\n\n| engine | log MB | hot data MB | cold data MB | temp MB |\n|---|---|---|---|---|"
    );
    let mb = |b: Option<u64>| optional(b.map(|b| b as f64 / 1e6), 1);
    for run in classed {
        let c = &run.commits;
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | 0.0 |",
            run.summary.engine,
            mb(c.log_bytes),
            mb(c.data_hot_bytes),
            mb(c.data_cold_bytes)
        );
    }
}

/// Appends the rounds section to `report.md`: each engine's ops/s and
/// flashtree's ratio to each peer, min / median / max over the rounds.
pub fn append_rounds(
    out_dir: &Path,
    spread: &crate::compare::RoundSpread,
    workload: &str,
) -> Result<(), String> {
    let path = out_dir.join("report.md");
    let mut text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.push_str(&rounds_text(spread, workload));
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The "Rounds" section: the spread of each engine's ops/s and of
/// flashtree's ratios, and the throughput targets judged on the median of
/// the per-round ratios (each round's engines ran back to back, so a
/// round's ratio cancels most of the machine's drift; the Targets section
/// judges the ratio of the median rounds).
fn rounds_text(spread: &crate::compare::RoundSpread, workload: &str) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\n## Rounds\n\n{} rounds, the engines in turn each round (data loaded once, kept between rounds); the tables above show each engine's median round.\n",
        spread.rounds
    );
    // One table of (name, value per round, spread), `precision` decimals.
    let table = |text: &mut String,
                 header: &str,
                 rows: &[crate::compare::RoundValues],
                 precision: usize| {
        let _ = writeln!(text, "| {header} | min | median | max | each round |");
        let _ = writeln!(text, "|---|---|---|---|---|");
        for (name, values, (min, median, max)) in rows {
            let each: Vec<String> = values.iter().map(|v| format!("{v:.precision$}")).collect();
            let _ = writeln!(
                text,
                "| {name} | {min:.precision$} | {median:.precision$} | {max:.precision$} | {} |",
                each.join(", ")
            );
        }
    };
    table(&mut text, "engine (ops/s)", &spread.ops_per_sec, 0);
    if !spread.flashtree_ratio.is_empty() {
        text.push('\n');
        table(&mut text, "flashtree ÷", &spread.flashtree_ratio, 2);
    }
    let mut judged = Vec::new();
    for goal in crate::targets::goals_for(workload) {
        let crate::targets::Goal::ThroughputAtLeast { peer, times } = goal else {
            continue;
        };
        if let Some((_, _, (_, median, _))) = spread
            .flashtree_ratio
            .iter()
            .find(|(name, _, _)| name == peer)
        {
            judged.push(format!(
                "- ops/s ≥ {times}× {peer}: median of the rounds' ratios {median:.2}, {}",
                if *median >= times {
                    "met"
                } else {
                    "**not met**"
                }
            ));
        }
    }
    if !judged.is_empty() {
        let _ = writeln!(
            text,
            "\nTargets judged on the median of the per-round ratios (each round runs the engines back to back, so its ratio cancels most of the machine's drift):\n{}",
            judged.join("\n")
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_judge_the_targets_on_the_median_of_per_round_ratios() {
        let spread = crate::compare::RoundSpread {
            rounds: 3,
            ops_per_sec: Vec::new(),
            flashtree_ratio: vec![("rocksdb".into(), vec![5.89, 3.36, 5.45], (3.36, 5.45, 5.89))],
        };
        let text = rounds_text(&spread, "tpcc");
        assert!(
            text.contains("ops/s ≥ 5× rocksdb: median of the rounds' ratios 5.45, met"),
            "{text}"
        );
        let spread = crate::compare::RoundSpread {
            flashtree_ratio: vec![("rocksdb".into(), vec![4.0, 4.9, 6.0], (4.0, 4.9, 6.0))],
            ..spread
        };
        assert!(rounds_text(&spread, "tpcc").contains("4.90, **not met**"));
        assert!(!rounds_text(&spread, "ycsb-a").contains("Targets judged"));
    }

    #[test]
    fn the_cost_section_names_its_prices_and_gives_a_row_per_engine() {
        let prices = Prices::default_table();
        let mut runs = vec![
            crate::targets::tests::run("flashtree", 30_000.0, 20.0, 30_000.0),
            crate::targets::tests::run("rocksdb", 10_000.0, 50.0, 10_000.0),
            crate::targets::tests::run("lmdb", 5_000.0, 50.0, 5_000.0),
        ];
        for run in &mut runs {
            run.summary.wall_s = 10.0;
            run.summary.cpu_s = 10.0;
            run.summary.price(&prices, Some(100_000.0));
        }
        runs.pop();
        crate::cost::set_flashtree_ratios(runs.iter_mut().filter_map(|run| {
            let s = &mut run.summary;
            s.cost.as_mut().map(|cost| (s.engine.as_str(), cost))
        }));
        runs.push(crate::targets::tests::run("lmdb", 5_000.0, 50.0, 5_000.0));
        let mut text = String::new();
        write_cost_section(&mut text, &runs, &prices);
        assert!(text.contains("SSDs Striking Back"), "{text}");
        assert!(text.contains("CIDR 2022"), "{text}");
        assert!(text.contains("August/September 2021"), "{text}");
        assert!(text.contains("NOT from the paper"), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 4, "{text}");
        let flashtree = runs[0].summary.cost.as_ref().unwrap();
        let rocksdb = runs[1].summary.cost.as_ref().unwrap();
        // One core each: $62.93 of CPU; the pool of 1 MiB; 30k reads/s of
        // 4 KiB (122.9 MB/s) from the device's counters, 0.3 of this
        // machine's device; 5.45 % of the SSD's 550k IOPS, 5.12 % of its
        // 2.4 GB/s.
        assert!(
            rows[1].starts_with(
                "| flashtree | 30000 | 1.000 | 1.0 | 0.3 | device counters | 30000 | 122.9 | 0.300 | 0.0000 / 0.0545 / 0.0512 |"
            ),
            "{}",
            rows[1]
        );
        assert!(
            text.contains("Reads are counted by the block device's own counters"),
            "{text}"
        );
        assert!(text.contains("of vda (254:0, whole device). They count every process's I/O"));
        assert!(!text.contains("process bytes ÷ 4096\""), "{text}");
        assert!(rows[1].contains("| 62.92 |"), "{}", rows[1]);
        assert!(
            rows[1].ends_with(&format!("| {:.1} | 1.00 |", flashtree.ops_per_sec_per_usd)),
            "{}",
            rows[1]
        );
        let ratio = flashtree.ops_per_sec_per_usd / rocksdb.ops_per_sec_per_usd;
        assert!(rows[2].ends_with(&format!("| {ratio:.2} |")), "{}", rows[2]);
        assert!(
            rows[3].contains("| lmdb | 5000 | not priced"),
            "{}",
            rows[3]
        );
        // Without device counters: the estimate, named as such, per engine.
        let run = &mut runs[1].summary;
        run.device_read_bytes_per_sec = None;
        run.read_iops = None;
        run.device = None;
        run.device_counters_error = Some("/x is on a tmpfs file system".into());
        run.process_reads_4kib_per_sec = Some(2_000.0);
        run.price(&prices, None);
        let mut text = String::new();
        write_cost_section(&mut text, &runs, &prices);
        assert!(
            text.contains("the process's read bytes ÷ 4096 (\"process bytes ÷ 4096\""),
            "{text}"
        );
        assert!(text.contains(") for rocksdb."), "{text}");
        assert!(
            text.contains(
                "| rocksdb | 10000 | 1.000 | 1.0 | 0.3 | process bytes ÷ 4096 | 2000 | 8.2 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("device counters not available (/x is on a tmpfs file system)"),
            "{text}"
        );
        assert!(device_line(&runs).contains("the counters of vda (254:0, whole device) (all processes' I/O to it) where measurable (/x is on a tmpfs"));
    }
}
