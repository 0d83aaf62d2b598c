//! `report.md`: one table row per engine plus each engine's settings.

use std::fmt::Write as _;
use std::path::Path;

use crate::compare::{CompareArgs, EngineRun, DURABILITY};

fn optional(value: Option<f64>, precision: usize) -> String {
    value.map_or("–".to_string(), |v| format!("{v:.precision$}"))
}

/// Writes `dir/report.md`.
pub fn write_report(
    dir: &Path,
    args: &CompareArgs,
    runs: &[EngineRun],
    device_iops: Option<f64>,
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
        "memory budget {} ({} B), data factor {}, dataset {} B, {} records, cores {:?}, {} s per run, {}.\n",
        args.memory,
        first.map_or(0, |s| s.pool_bytes),
        args.data_factor,
        first.map_or(0, |s| s.dataset_bytes),
        first.map_or(0, |s| s.records),
        runs.first().map(|r| r.cores.clone()).unwrap_or_default(),
        args.seconds,
        match args.rate {
            Some(rate) => format!("open loop at {rate} ops/s"),
            None => "closed loop".to_string(),
        }
    );
    let _ = writeln!(
        text,
        "Durability: {DURABILITY}. Device limit: {}.\n",
        optional(device_iops, 0) + " IOPS"
    );
    let _ = writeln!(
        text,
        "| engine | ops/s | ÷ flashtree | ÷ device IOPS | CPU µs/op | p50 µs | p99 µs | p99.9 µs | threads (workers×tasks) | read IOPS | write IOPS | load rec/s |"
    );
    let _ = writeln!(text, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for run in runs {
        let s = &run.summary;
        let concurrency = match (s.threads, s.workers, s.tasks) {
            (Some(threads), _, _) => threads.to_string(),
            (None, Some(workers), Some(tasks)) => format!("{workers}×{tasks}"),
            _ => "–".to_string(),
        };
        let _ = writeln!(
            text,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            s.engine,
            s.ops_per_sec,
            optional(flashtree_ops.map(|f| s.ops_per_sec / f), 2),
            optional(device_iops.map(|d| s.ops_per_sec / d), 3),
            optional(s.cpu_us_per_op, 2),
            optional(s.lat_us_p50, 1),
            optional(s.lat_us_p99, 1),
            optional(run.lat_us_p999, 1),
            concurrency,
            optional(s.read_iops, 0),
            optional(s.write_iops, 0),
            s.load_records_per_sec,
        );
    }
    let _ = writeln!(text, "\n## Settings\n");
    for run in runs {
        let sweep: Vec<String> = run
            .sweep
            .iter()
            .map(|(t, ops)| format!("{t} threads: {ops:.0} ops/s"))
            .collect();
        let _ = writeln!(
            text,
            "- **{}**: {}",
            run.summary.engine, run.summary.settings
        );
        let _ = writeln!(text, "  - memory: {}", run.memory_limit);
        let _ = writeln!(text, "  - sweep: {}", sweep.join(", "));
        let _ = writeln!(text, "  - operations: {:?}", run.ops_by_kind);
        let _ = writeln!(text, "  - consistency: {}", run.consistency);
    }
    let _ = writeln!(
        text,
        "\nPlots: throughput.png, latency_cdf.png, timeline.png."
    );
    let path = dir.join("report.md");
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
