//! Workloads through the driver on every peer: YCSB proportions, TPC-C at
//! reduced scale with 4 threads and the consistency checks, and the checks
//! detecting a broken state.

use std::path::Path;
use std::time::Duration;

use flashtree_peers::adapters::open_peer;
use flashtree_peers::adapters::rocks::RocksEngine;
use flashtree_peers::driver::{run_phase, PhaseResult, PhaseSpec};
use flashtree_peers::workload::tpcc::{self, Tpcc, TpccScale};
use flashtree_peers::workload::ycsb::{Ycsb, YcsbKind};
use flashtree_peers::workload::{OpKind, Workload};
use flashtree_peers::{block_on, DurabilityMode, Engine, EngineConfig, HandleSource, Kv, Phase};

fn config(dir: &Path, table_count: u32) -> EngineConfig {
    config_in(dir, table_count, DurabilityMode::None)
}

fn config_in(dir: &Path, table_count: u32, durability: DurabilityMode) -> EngineConfig {
    EngineConfig {
        dir: dir.to_path_buf(),
        memory_bytes: 32 << 20,
        table_count,
        threads_max: 8,
        cores: Vec::new(),
        durability,
    }
}

fn phase(
    engine: &dyn Engine,
    workload: &Workload,
    dir: &Path,
    phase: Phase,
    threads: usize,
    seconds: f64,
) -> PhaseResult {
    let spec = PhaseSpec {
        phase,
        threads,
        duration: Duration::from_secs_f64(seconds),
        rate_ops_per_sec: None,
        seed: 9,
        dir,
        progress: false,
        profile_dir: None,
    };
    run_phase(engine, workload, &spec)
        .unwrap_or_else(|e| panic!("{} {phase:?}: {e}", engine.name()))
}

#[test]
fn ycsb_mixes_have_the_right_proportions() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let engine = open_peer("rocksdb", &config(dir.path(), 1)).unwrap();
    for (kind, op, percent) in [
        (YcsbKind::A, OpKind::Update, 50.0),
        (YcsbKind::E, OpKind::Scan, 95.0),
        (YcsbKind::F, OpKind::ReadModifyWrite, 50.0),
    ] {
        let workload = Workload::Ycsb(Ycsb::new(kind, 2000).unwrap());
        phase(engine.as_ref(), &workload, dir.path(), Phase::Load, 2, 0.0);
        let run = phase(engine.as_ref(), &workload, dir.path(), Phase::Run, 2, 0.5);
        let share = run.stats.ops_by_kind[op as usize] as f64 * 100.0 / run.stats.ops_count as f64;
        assert!(
            run.stats.ops_count > 200,
            "{kind:?}: only {} ops",
            run.stats.ops_count
        );
        assert!(
            (share - percent).abs() < 5.0,
            "{kind:?}: {} {share:.1}% (want {percent}%)",
            op.name()
        );
    }
    engine.close().unwrap();
}

fn tpcc_on(name: &str) {
    tpcc_on_in(name, DurabilityMode::None)
}

/// Every peer runs TPC-C's transactions as synced batch commits, and the
/// consistency conditions hold after the load and after the run.
#[test]
fn tpcc_with_synced_commits_stays_consistent_on_every_peer() {
    for name in flashtree_peers::adapters::PEER_NAMES {
        tpcc_on_in(name, DurabilityMode::Sync);
    }
}

fn tpcc_on_in(name: &str, durability: DurabilityMode) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let workload = Workload::Tpcc(Tpcc::new(1, TpccScale::small()).unwrap());
    let engine = open_peer(name, &config_in(dir.path(), tpcc::TABLE_COUNT, durability)).unwrap();
    let load = phase(engine.as_ref(), &workload, dir.path(), Phase::Load, 4, 0.0);
    assert!(
        load.stats.ops_count > 3000,
        "{name}: loaded {}",
        load.stats.ops_count
    );
    phase(engine.as_ref(), &workload, dir.path(), Phase::Check, 1, 0.0);
    // Runs of 1 s until at least 200 transactions of every kind together
    // and one of each ran (synced commits on a loaded machine may take
    // several): a bar on the work done, not on its speed.
    let kinds = [
        OpKind::NewOrder,
        OpKind::Payment,
        OpKind::OrderStatus,
        OpKind::Delivery,
        OpKind::StockLevel,
    ];
    let mut ops_by_kind = [0u64; flashtree_peers::workload::OP_KIND_COUNT];
    for runs in 1.. {
        let run = phase(engine.as_ref(), &workload, dir.path(), Phase::Run, 4, 1.0);
        for (total, ops) in ops_by_kind.iter_mut().zip(run.stats.ops_by_kind) {
            *total += ops;
        }
        let ops: u64 = ops_by_kind.iter().sum();
        if ops >= 200 && kinds.iter().all(|&kind| ops_by_kind[kind as usize] > 0) {
            break;
        }
        assert!(
            runs < 60,
            "{name}: {ops} transactions in {runs} runs of 1 s, by kind {ops_by_kind:?}"
        );
    }
    phase(engine.as_ref(), &workload, dir.path(), Phase::Check, 1, 0.0);
    engine.close().unwrap();
}

#[test]
fn tpcc_rocksdb_stays_consistent() {
    tpcc_on("rocksdb");
}

#[test]
fn tpcc_wiredtiger_stays_consistent() {
    tpcc_on("wiredtiger");
}

#[test]
fn tpcc_lmdb_stays_consistent() {
    tpcc_on("lmdb");
}

#[test]
fn tpcc_redb_stays_consistent() {
    tpcc_on("redb");
}

#[test]
fn tpcc_fjall_stays_consistent() {
    tpcc_on("fjall");
}

#[test]
fn tpcc_checks_detect_broken_state() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let tpcc = Tpcc::new(1, TpccScale::small()).unwrap();
    let workload = Workload::Tpcc(Tpcc::new(1, TpccScale::small()).unwrap());
    let engine = RocksEngine::open(&config(dir.path(), tpcc::TABLE_COUNT)).unwrap();
    phase(&engine, &workload, dir.path(), Phase::Load, 2, 0.0);
    let handle = engine.open_handle().unwrap();
    block_on(tpcc.check(&handle)).expect("consistent after load");
    let expect_violation = |condition: u32| {
        let error = block_on(tpcc.check(&handle))
            .expect_err("broken state must fail")
            .to_string();
        assert!(error.contains(&format!("condition {condition}")), "{error}");
    };
    // Condition 2/3: a gap in NEW-ORDER (delete the newest undelivered order's row in the middle).
    let middle = tpcc::key(&[1, 1, 25]);
    assert!(block_on(handle.delete(tpcc::table::NEW_ORDER, &middle)).unwrap());
    expect_violation(3);
    block_on(handle.put(tpcc::table::NEW_ORDER, &middle, &[])).unwrap();
    // Condition 4: an extra order line.
    block_on(handle.put(
        tpcc::table::ORDER_LINE,
        &tpcc::key(&[1, 2, 1, 99]),
        &[0; 64],
    ))
    .unwrap();
    expect_violation(4);
    block_on(handle.delete(tpcc::table::ORDER_LINE, &tpcc::key(&[1, 2, 1, 99]))).unwrap();
    // Condition 2: an order beyond D_NEXT_O_ID.
    let mut order = Vec::new();
    block_on(handle.get(tpcc::table::ORDER, &tpcc::key(&[1, 3, 1]), &mut order)).unwrap();
    block_on(handle.put(tpcc::table::ORDER, &tpcc::key(&[1, 3, 500]), &order)).unwrap();
    expect_violation(2);
    block_on(handle.delete(tpcc::table::ORDER, &tpcc::key(&[1, 3, 500]))).unwrap();
    // Condition 1: D_YTD changed without W_YTD.
    let mut district = Vec::new();
    block_on(handle.get(tpcc::table::DISTRICT, &tpcc::key(&[1, 4]), &mut district)).unwrap();
    district[8] = district[8].wrapping_add(1); // D_YTD is the second i64
    block_on(handle.put(tpcc::table::DISTRICT, &tpcc::key(&[1, 4]), &district)).unwrap();
    expect_violation(1);
}
