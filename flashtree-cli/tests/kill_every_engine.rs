//! `flashtree bench recover --engines`: a real SIGKILL of a process
//! committing synced writes to each engine, then a reopen that must find
//! every acknowledged commit. The command fails (non-zero exit) if an
//! engine lost one or broke a TPC-C consistency condition; the JSON lines
//! give each engine's counts.

use std::process::Command;

const ENGINES: &str = "flashtree,rocksdb,wiredtiger,lmdb,redb,fjall";

/// Runs `bench recover --engines ENGINES --json` with `args` and returns
/// its JSON rows, one per engine, after checking what every workload
/// must: the command succeeded, the child acknowledged commits, none was
/// lost, and the data replayed is stated (a number for the engines with a
/// log, null for LMDB and redb).
fn recover(workload: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_flashtree"))
        .args([
            "bench",
            "recover",
            "--engines",
            ENGINES,
            "--workload",
            workload,
        ])
        .args(args)
        .args(["--json", "--path"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let engines: Vec<&str> = rows.iter().map(|r| r["engine"].as_str().unwrap()).collect();
    assert_eq!(engines, ENGINES.split(',').collect::<Vec<_>>(), "{stdout}");
    for row in &rows {
        assert_eq!(row["workload"], workload, "{row}");
        assert_eq!(row["lost_acknowledged_commits"], 0, "{row}");
        let acked = row["acknowledged_commits"].as_u64().unwrap();
        assert!(acked > 0, "{row}: nothing acknowledged before the kill");
        let has_log = !matches!(row["engine"].as_str(), Some("lmdb" | "redb"));
        assert_eq!(row["data_replayed_bytes"].is_u64(), has_log, "{row}");
        assert_eq!(
            row["log_groups_replayed"].is_u64(),
            row["engine"] == "flashtree",
            "{row}"
        );
    }
    rows
}

/// Runs a key-value workload (`puts` or `ycsb-a`) on every engine over
/// 3,000 keys and checks each row: some keys checked (none lost, or
/// `recover` fails), no more than were acknowledged, and no TPC-C
/// consistency column.
fn check_key_workload(workload: &str) {
    let rows = recover(
        workload,
        &[
            "--seconds",
            "1.5",
            "--threads",
            "3",
            "--keys",
            "3000",
            "--pool",
            "16MiB",
        ],
    );
    for row in &rows {
        let acked = row["acknowledged_commits"].as_u64().unwrap();
        let checked = row["keys_checked"].as_u64().unwrap();
        assert!(checked > 0 && checked <= acked.min(3000), "{row}");
        assert!(row["consistency_checks"].is_null(), "{row}");
    }
}

#[test]
fn every_engine_keeps_its_acknowledged_puts_across_sigkill() {
    check_key_workload("puts");
}

/// YCSB-A: every acknowledged update's version (or a newer one) is there
/// after the kill.
#[test]
fn every_engine_keeps_its_acknowledged_ycsb_a_updates_across_sigkill() {
    check_key_workload("ycsb-a");
}

/// TPC-C: every acknowledged New-Order (order, lines, index entry,
/// new-order row unless delivered) is there after the kill, and the
/// consistency conditions 1-4 hold.
#[test]
fn every_engine_keeps_its_acknowledged_new_orders_across_sigkill() {
    let rows = recover(
        "tpcc",
        &[
            "--seconds",
            "1.5",
            "--threads",
            "3",
            "--warehouses",
            "1",
            "--pool",
            "16MiB",
        ],
    );
    for row in &rows {
        let acked = row["acknowledged_commits"].as_u64().unwrap();
        assert_eq!(row["keys_checked"].as_u64(), Some(acked), "{row}");
        assert_eq!(row["consistency_checks"], "held", "{row}");
        assert!(row["consistency_error"].is_null(), "{row}");
    }
}
