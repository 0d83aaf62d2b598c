//! Space amplification in `bench compare` results: a tiny comparison on
//! the peers that need no optional feature, read back from the per-engine
//! JSON files it writes.

use std::path::{Path, PathBuf};

use clap::Parser;
use flashtree_peers::compare::{run_compare, CompareArgs, Hooks};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CompareArgs,
}

/// One comparison at a time in this process: LMDB's run moves the whole
/// process into its memory cgroup (`flashtree_peers::cgroup`), so two at
/// once (the test harness runs tests in parallel threads) would share and
/// remove each other's group.
static ONE_COMPARE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `bench compare` with `extra` arguments on top of tiny defaults
/// (data under `data`, results under `results`, which must be empty);
/// returns the results directory it made there.
fn compare(data: &Path, results: &Path, extra: &[&str]) -> PathBuf {
    let _one = ONE_COMPARE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let data = data.to_string_lossy();
    let results_text = results.to_string_lossy();
    let mut argv = vec![
        "compare",
        "--memory",
        "16MiB",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
        "--threads",
        "1",
        "--dir",
        &data,
        "--results",
        &results_text,
    ];
    argv.extend_from_slice(extra);
    let args = Cli::parse_from(argv).args;
    run_compare(&args, &Hooks::default()).expect("bench compare");
    let made: Vec<PathBuf> = std::fs::read_dir(results)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    made[0].clone()
}

fn engine_json(results: &Path, engine: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(results.join(format!("{engine}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn u64_of(json: &serde_json::Value, field: &str) -> u64 {
    json[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing: {json}"))
}

fn f64_of(json: &serde_json::Value, field: &str) -> f64 {
    json[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} missing: {json}"))
}

#[test]
fn every_result_carries_plausible_space_figures() {
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let results = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let records = 20_000u64;
    let records_text = records.to_string();
    let out = compare(
        data.path(),
        results.path(),
        &[
            "--workload",
            "lookup",
            "--engines",
            "lmdb,rocksdb",
            "--records",
            &records_text,
        ],
    );
    // Lookup records: an 8-byte key and a 120-byte value.
    let raw_bytes = records * (8 + 120);
    for engine in ["lmdb", "rocksdb"] {
        let run = engine_json(&out, engine);
        assert_eq!(u64_of(&run, "raw_bytes"), raw_bytes, "{engine}");
        // Lookup only reads: the live bytes are the loaded ones.
        assert_eq!(u64_of(&run, "raw_bytes_live_after_run"), raw_bytes);
        let after_load = u64_of(&run, "disk_bytes_after_load");
        let after_run = u64_of(&run, "disk_bytes_after_run");
        assert!(after_load > 0, "{engine}: {run}");
        let amp_load = f64_of(&run, "space_amp_after_load");
        assert!(
            (amp_load - after_load as f64 / raw_bytes as f64).abs() < 1e-9,
            "{engine}: {run}"
        );
        // After its close every engine holds all the data on disk, in
        // pages or files of its own format: more than the raw bytes, not
        // tenfold.
        let amp_run = f64_of(&run, "space_amp_after_run");
        assert!(
            (amp_run - after_run as f64 / raw_bytes as f64).abs() < 1e-9,
            "{engine}: {run}"
        );
        assert!(amp_run > 1.0 && amp_run < 10.0, "{engine}: {run}");
        assert_eq!(run["space_notes"], serde_json::json!([]), "{engine}");
        // The kinds of file add up to the total.
        let kinds: u64 = run["disk_after_run"]["allocated_bytes_by_kind"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kind| kind[1].as_u64().unwrap())
            .sum();
        assert_eq!(kinds, after_run, "{engine}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Space on disk"), "{report}");
    assert!(report.contains("space amp (load / run)"), "{report}");
}

#[test]
fn inserts_grow_the_live_bytes_and_a_reused_load_keeps_its_figures() {
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let results = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let tiny = [
        "--workload",
        "ycsb-d",
        "--engines",
        "lmdb",
        "--records",
        "2000",
    ];
    let first = compare(
        data.path(),
        results.path(),
        &[&tiny[..], &["--keep-data"]].concat(),
    );
    let run = engine_json(&first, "lmdb");
    // YCSB records: an 8-byte key and a 1000-byte value; D inserts 5%.
    let raw_bytes = 2000 * 1008;
    assert_eq!(u64_of(&run, "raw_bytes"), raw_bytes);
    let live = u64_of(&run, "raw_bytes_live_after_run");
    assert!(live > raw_bytes, "{run}");
    assert_eq!(live % 1008, 0);
    let amp_run = f64_of(&run, "space_amp_after_run");
    assert!(
        (amp_run - u64_of(&run, "disk_bytes_after_run") as f64 / live as f64).abs() < 1e-9,
        "the amplification after the run divides by the live bytes: {run}"
    );
    let marker = std::fs::read_to_string(data.path().join("lmdb.loaded")).unwrap();
    assert!(
        marker.contains(&format!("raw_bytes={raw_bytes}")),
        "{marker}"
    );

    // The second run reuses the load: its after-load figures are the
    // first load's, and the live bytes start from the first run's.
    let results = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let second = compare(
        data.path(),
        results.path(),
        &[&tiny[..], &["--reuse-data"]].concat(),
    );
    let reused = engine_json(&second, "lmdb");
    assert_eq!(
        reused["disk_bytes_after_load"], run["disk_bytes_after_load"],
        "{reused}"
    );
    assert_eq!(u64_of(&reused, "raw_bytes"), raw_bytes);
    assert!(u64_of(&reused, "raw_bytes_live_after_run") >= live);
    let notes = reused["space_notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n.as_str().unwrap().contains("reused")),
        "{reused}"
    );
    // Not kept this time: the directory is gone.
    assert!(!data.path().join("lmdb").exists());
}
