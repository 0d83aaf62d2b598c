//! The "Targets" section of `report.md`: issue 4's goals for this workload,
//! whether this run met each, by how much a missed one fell short, and what
//! bounds flashtree there (the device or the core).
//!
//! The goals (issue 4, Haas & Leis (VLDB 2023) §4), for 10× out of memory on 1 core:
//! - lookup: flashtree ≥ 1.5× RocksDB's lookups/s and ≥ 2× WiredTiger's and
//!   LMDB's; flashtree's CPU µs per lookup ≤ 1/3 of RocksDB's;
//! - TPC-C: flashtree ≥ 5× RocksDB's transactions/s, and the consistency
//!   checks pass on every engine (a failed check aborts the run, so a
//!   report always means they passed).

use std::fmt::Write as _;

use crate::compare::EngineRun;

/// Data factor the goals are defined at.
pub const DATA_FACTOR_GOAL: f64 = 10.0;

/// What one goal compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// flashtree's ops/s ≥ `times` × the peer's.
    ThroughputAtLeast { peer: &'static str, times: f64 },
    /// flashtree's CPU µs/op ≤ `fraction` × the peer's.
    CpuAtMost { peer: &'static str, fraction: f64 },
}

/// The goals for `workload` ("lookup", "tpcc"; none for the others).
pub fn goals_for(workload: &str) -> Vec<Goal> {
    use Goal::*;
    match workload {
        "lookup" => vec![
            ThroughputAtLeast {
                peer: "rocksdb",
                times: 1.5,
            },
            ThroughputAtLeast {
                peer: "wiredtiger",
                times: 2.0,
            },
            ThroughputAtLeast {
                peer: "lmdb",
                times: 2.0,
            },
            CpuAtMost {
                peer: "rocksdb",
                fraction: 1.0 / 3.0,
            },
        ],
        "tpcc" => vec![ThroughputAtLeast {
            peer: "rocksdb",
            times: 5.0,
        }],
        _ => Vec::new(),
    }
}

/// One goal as measured in this run.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub goal: Goal,
    /// flashtree ÷ peer (ops/s, or CPU µs/op).
    pub ratio: f64,
    pub met: bool,
    /// Throughput goals missed: flashtree ops/s the goal needed.
    pub ops_needed: Option<f64>,
}

fn run_of<'a>(runs: &'a [EngineRun], engine: &str) -> Option<&'a EngineRun> {
    runs.iter().find(|r| r.summary.engine == engine)
}

/// Judges every goal whose engines (and CPU figures) this run has.
pub fn judge(goals: &[Goal], runs: &[EngineRun]) -> Vec<Verdict> {
    let Some(flashtree) = run_of(runs, "flashtree") else {
        return Vec::new();
    };
    let ours = &flashtree.summary;
    goals
        .iter()
        .filter_map(|&goal| match goal {
            Goal::ThroughputAtLeast { peer, times } => {
                let theirs = &run_of(runs, peer)?.summary;
                if theirs.ops_per_sec <= 0.0 {
                    return None;
                }
                let ratio = ours.ops_per_sec / theirs.ops_per_sec;
                let met = ratio >= times;
                Some(Verdict {
                    goal,
                    ratio,
                    met,
                    ops_needed: (!met).then_some(times * theirs.ops_per_sec),
                })
            }
            Goal::CpuAtMost { peer, fraction } => {
                let theirs = run_of(runs, peer)?.summary.cpu_us_per_op?;
                let ratio = ours.cpu_us_per_op? / theirs;
                Some(Verdict {
                    goal,
                    ratio,
                    met: ratio <= fraction,
                    ops_needed: None,
                })
            }
        })
        .collect()
}

/// Highest lookups/s any cache of the budget allows on this device, with
/// uniform keys: it holds at most 1/data_factor of the (incompressible)
/// records, so at least 1 − 1/data_factor of the lookups read the device.
pub fn uniform_lookup_ceiling(device_iops: f64, data_factor: f64) -> Option<f64> {
    (data_factor > 1.0).then(|| device_iops / (1.0 - 1.0 / data_factor))
}

/// What the report needs beyond the runs.
#[derive(Debug, Clone, Copy)]
pub struct RunShape<'a> {
    pub workload: &'a str,
    pub data_factor: f64,
    pub cores: usize,
    /// Keys uniform (lookup without `--zipf`).
    pub uniform_keys: bool,
    pub device_iops: Option<f64>,
    pub profiled: bool,
}

/// The section's markdown ("" when the workload has no goals or the run has
/// no flashtree).
pub fn targets_section(shape: &RunShape<'_>, runs: &[EngineRun]) -> String {
    let verdicts = judge(&goals_for(shape.workload), runs);
    let Some(flashtree) = run_of(runs, "flashtree") else {
        return String::new();
    };
    if verdicts.is_empty() {
        return String::new();
    }
    let mut text = String::from("\n## Targets (issue 4)\n\n");
    if shape.data_factor < DATA_FACTOR_GOAL || shape.cores != 1 {
        let _ = writeln!(
            text,
            "The targets are set for {DATA_FACTOR_GOAL}× out of memory on 1 core; this run had data factor {} on {} core(s), so the verdicts are for reference only.\n",
            shape.data_factor, shape.cores
        );
    }
    let _ = writeln!(text, "| target | measured | met? | short by |");
    let _ = writeln!(text, "|---|---|---|---|");
    for verdict in &verdicts {
        let (target, short_by) = match verdict.goal {
            Goal::ThroughputAtLeast { peer, times } => (
                format!("ops/s ≥ {times}× {peer}"),
                verdict.ops_needed.map_or("–".to_string(), |needed| {
                    let ours = flashtree.summary.ops_per_sec;
                    format!(
                        "needs {needed:.0} ops/s, {:.1} % more than {ours:.0}",
                        (needed / ours - 1.0) * 100.0
                    )
                }),
            ),
            Goal::CpuAtMost { peer, fraction } => (
                format!("CPU µs/op ≤ {fraction:.2} × {peer}'s"),
                if verdict.met {
                    "–".to_string()
                } else {
                    format!(
                        "{:.1} % too much CPU",
                        (verdict.ratio / fraction - 1.0) * 100.0
                    )
                },
            ),
        };
        let _ = writeln!(
            text,
            "| {target} | {:.2} | {} | {short_by} |",
            verdict.ratio,
            if verdict.met { "yes" } else { "**no**" }
        );
    }
    if shape.workload == "tpcc" {
        let _ = writeln!(
            text,
            "\nTPC-C consistency conditions 1-4 were checked after every engine's run and held (a failed check stops the comparison)."
        );
    }
    if verdicts.iter().all(|v| v.met) {
        return text;
    }
    text.push_str(&bounds_note(shape, flashtree));
    text
}

/// Why flashtree could not go faster: its share of the device and the core.
fn bounds_note(shape: &RunShape<'_>, flashtree: &EngineRun) -> String {
    let s = &flashtree.summary;
    let mut text = String::from("\nWhat bounds flashtree in this run:\n");
    let device_iops_used = s.read_iops.unwrap_or(0.0) + s.write_iops.unwrap_or(0.0);
    if let Some(device_iops) = shape.device_iops.filter(|&d| d > 0.0) {
        let _ = writeln!(
            text,
            "- the device: {device_iops_used:.0} page reads + writes/s = {:.2} of the device limit ({device_iops:.0} random 4 KiB reads/s, measured in this run).",
            device_iops_used / device_iops
        );
        if shape.workload == "lookup" && shape.uniform_keys {
            if let Some(ceiling) = uniform_lookup_ceiling(device_iops, shape.data_factor) {
                let _ = writeln!(
                    text,
                    "- with uniform keys, a cache of the budget holds at most 1/{} of the records (values are random bytes), which caps every engine at about {ceiling:.0} lookups/s at the measured device limit ({:.2}× that limit); flashtree reached {:.2} of that ceiling.",
                    shape.data_factor,
                    ceiling / device_iops,
                    s.ops_per_sec / ceiling
                );
            }
        }
    }
    if let Some(cpu_us) = s.cpu_us_per_op {
        let busy = s.ops_per_sec * cpu_us / 1e6 / shape.cores.max(1) as f64;
        let _ = writeln!(
            text,
            "- the CPU: {cpu_us:.2} µs per operation × {:.0} ops/s = {busy:.2} of {} core(s).",
            s.ops_per_sec, shape.cores
        );
    }
    let _ = writeln!(
        text,
        "- where the CPU time goes: {}",
        if shape.profiled {
            "see \"Where the time goes\" below."
        } else {
            "rerun with `--profile` for a perf profile of every engine."
        }
    );
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compare::Summary;

    /// A run with only these figures set.
    pub(crate) fn run(
        engine: &str,
        ops_per_sec: f64,
        cpu_us_per_op: f64,
        read_iops: f64,
    ) -> EngineRun {
        EngineRun {
            summary: Summary {
                read_iops: Some(read_iops),
                write_iops: Some(0.0),
                device_read_bytes_per_sec: Some(read_iops * 4096.0),
                device_write_bytes_per_sec: Some(0.0),
                device: Some("vda (254:0, whole device)".into()),
                ..Summary::for_tests(engine, ops_per_sec, cpu_us_per_op)
            },
            commits: crate::compare::CommitFigures {
                commits_per_sec: 0.0,
                log_syncs_per_sec: None,
                commits_per_sync: None,
                commit_lat_us_p50: None,
                commit_lat_us_p99: None,
                commit_lat_us_p999: None,
                user_bytes_written: 0,
                process_write_bytes: None,
                write_amplification: None,
                log_bytes_per_commit: None,
                log_image_share: None,
                data_hot_bytes: None,
                data_cold_bytes: None,
                log_bytes: None,
                checkpoints: None,
            },
            lat_us_p999: None,
            rate_ops_per_sec: None,
            seconds: 1.0,
            cores: vec![0],
            memory_limit: String::new(),
            durability: String::new(),
            ops_by_kind: Vec::new(),
            page_reads_per_op_by_kind: Vec::new(),
            sweep: Vec::new(),
            ops_per_second: Vec::new(),
            latency_cdf: Vec::new(),
            consistency: String::new(),
            profile: None,
            perf_data_path: None,
            disk_after_load: None,
            disk_after_run: None,
            engine_store_bytes_after_load: None,
            engine_store_bytes_before_close: None,
        }
    }

    fn shape(device_iops: Option<f64>) -> RunShape<'static> {
        RunShape {
            workload: "lookup",
            data_factor: 10.0,
            cores: 1,
            uniform_keys: true,
            device_iops,
            profiled: false,
        }
    }

    #[test]
    fn lookup_goals_are_judged_against_each_peer() {
        let runs = [
            run("flashtree", 90_000.0, 4.0, 83_000.0),
            run("rocksdb", 64_000.0, 14.0, 59_000.0),
            run("wiredtiger", 40_000.0, 16.0, 37_000.0),
            run("lmdb", 72_000.0, 13.0, 66_000.0),
        ];
        let verdicts = judge(&goals_for("lookup"), &runs);
        assert_eq!(verdicts.len(), 4);
        // 90k / 64k = 1.406 < 1.5: missed, needs 96k.
        assert!(!verdicts[0].met);
        assert!((verdicts[0].ops_needed.unwrap() - 96_000.0).abs() < 1e-6);
        // 90k / 40k = 2.25 ≥ 2.
        assert!(verdicts[1].met);
        assert_eq!(verdicts[1].ops_needed, None);
        assert!(!verdicts[2].met);
        // CPU 4 / 14 = 0.286 ≤ 1/3.
        assert!(verdicts[3].met);
        assert!((verdicts[3].ratio - 4.0 / 14.0).abs() < 1e-9);
    }

    #[test]
    fn goals_without_their_peer_are_skipped_and_other_workloads_have_none() {
        let runs = [run("flashtree", 10.0, 1.0, 0.0), run("lmdb", 4.0, 1.0, 0.0)];
        let verdicts = judge(&goals_for("lookup"), &runs);
        assert_eq!(verdicts.len(), 1);
        assert!(verdicts[0].met);
        assert!(goals_for("ycsb-a").is_empty());
        assert_eq!(targets_section(&shape(None), &runs[1..]), "");
    }

    #[test]
    fn a_missed_lookup_goal_reports_the_shortfall_and_the_device_ceiling() {
        let runs = [
            run("flashtree", 90_000.0, 4.0, 83_000.0),
            run("rocksdb", 64_000.0, 14.0, 59_000.0),
        ];
        let text = targets_section(&shape(Some(85_000.0)), &runs);
        assert!(text.contains("| ops/s ≥ 1.5× rocksdb | 1.41 | **no** | needs 96000 ops/s, 6.7 % more than 90000 |"), "{text}");
        assert!(text.contains("0.98 of the device limit"), "{text}");
        // 85,000 / 0.9 = 94,444 lookups/s at most.
        assert!(text.contains("about 94444 lookups/s"), "{text}");
        assert!(text.contains("0.36 of 1 core"), "{text}");
        let all_met = targets_section(
            &shape(Some(85_000.0)),
            &[
                run("flashtree", 90_000.0, 4.0, 83_000.0),
                run("rocksdb", 50_000.0, 14.0, 1.0),
            ],
        );
        assert!(
            all_met.contains("| yes |") && !all_met.contains("bounds"),
            "{all_met}"
        );
    }

    #[test]
    fn the_uniform_ceiling_needs_data_larger_than_the_cache() {
        assert_eq!(uniform_lookup_ceiling(80_000.0, 1.0), None);
        assert!((uniform_lookup_ceiling(80_000.0, 5.0).unwrap() - 100_000.0).abs() < 1e-6);
    }
}
