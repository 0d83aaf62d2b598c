//! `flashtree bench recover --engines`: a real SIGKILL of a process writing
//! synced puts to each engine, then a reopen that must find every
//! acknowledged put. The command fails (non-zero exit) if an engine lost
//! one; the JSON lines give each engine's count.

use std::process::Command;

#[test]
fn every_engine_keeps_its_acknowledged_puts_across_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_flashtree"))
        .args([
            "bench",
            "recover",
            "--engines",
            "flashtree,rocksdb,wiredtiger,lmdb,redb,fjall",
            "--seconds",
            "1.5",
            "--threads",
            "3",
            "--keys",
            "3000",
            "--pool",
            "16MiB",
            "--json",
            "--path",
        ])
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
    assert_eq!(rows.len(), 6, "{stdout}");
    for row in &rows {
        assert_eq!(row["lost_acknowledged_commits"], 0, "{row}");
        let acked = row["acknowledged_commits"].as_u64().unwrap();
        assert!(acked > 0, "{row}: nothing acknowledged before the kill");
        let checked = row["keys_checked"].as_u64().unwrap();
        assert!(checked > 0 && checked <= acked.min(3000), "{row}");
    }
}
