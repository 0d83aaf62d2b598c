//! TPC-C (standard specification 5.11) on the [`Kv`] interface: nine tables
//! plus two indexes (customer by last name, order by customer), all five
//! transactions in the standard mix (45% New-Order, 43% Payment, 4% each
//! Order-Status, Delivery, Stock-Level), a loader, and consistency
//! conditions 1–4 (clause 3.3.2) checked after a run.
//!
//! Every New-Order, Payment and Delivery is a real transaction: its reads
//! come first, its writes go into one [`KvBatch`] that the engine commits
//! atomically (all or none, also across a crash) and as durably as the run's
//! `--durability` says. Isolation is the workload's own strict two-phase
//! locking, the same for every engine: a transaction takes its locks before
//! it reads what it will write and holds them until its commit returns.
//! - one lock per district: New-Order holds it over taking an order id;
//!   Payment over adding to D_YTD; Delivery over delivering that district's
//!   oldest order;
//! - one lock per warehouse: Payment adds to W_YTD under it;
//! - striped row locks ([`ROW_LOCK_COUNT`]) over every read-modify-write of a
//!   STOCK or CUSTOMER row.
//!
//! One global order prevents deadlock ([`TxnLocks`]): district and
//! warehouse locks first, then row locks, each kind in ascending index
//! order. Before it locks, a transaction reads the random rows it will
//! update (stock, customer) once without a lock, so that their pages are
//! in memory and no lock is held over a device read in the common case.
//! Delivery commits one transaction per district, as TPC-C allows (clause
//! 2.7.4.2: up to 10 orders per database transaction).
//!
//! New-Order puts the ORDER-CUSTOMER index entry last in its batch, after
//! the order and its lines, so Order-Status (which finds orders through
//! that index without a lock) never sees a half-written order, also on an
//! engine whose readers see a transaction's writes as they are made
//! (WiredTiger at read-uncommitted). Locks are try-locks that yield when
//! busy. Rolled-back New-Orders (1%) check the items before writing
//! anything, so a rollback leaves no trace.
//!
//! Reduced scale for tests ([`TpccScale::small`]): 1000 items, 30 customers
//! and 30 orders per district (the last 9 undelivered); last names then come
//! from the first 30 of the 1000 names.

mod check;
mod load;
mod rows;
mod txn;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use rows::*;

use super::{OpKind, TaskState};
use crate::job::RunControl;
use crate::kv::{Kv, KvBatch, KvError};
use crate::rng::fnv1a;

/// Tables TPC-C needs.
pub const TABLE_COUNT: u32 = 11;
/// Districts per warehouse (fixed by the spec).
pub const DISTRICTS_PER_WAREHOUSE: u32 = 10;
/// Most warehouses accepted.
pub const WAREHOUSES_MAX: u32 = 100_000;

/// Table ids.
pub mod table {
    /// WAREHOUSE, key (w).
    pub const WAREHOUSE: u32 = 0;
    /// DISTRICT, key (w, d).
    pub const DISTRICT: u32 = 1;
    /// CUSTOMER, key (w, d, c).
    pub const CUSTOMER: u32 = 2;
    /// Index (w, d, last, first, c) -> empty.
    pub const CUSTOMER_NAME: u32 = 3;
    /// HISTORY: loaded rows have key (w, d, u32::MAX, c); rows that Payment
    /// adds have key (u32::MAX, sequence), one sequence for the whole run,
    /// so they append at the end of the table. (Per-task keys under (w, d)
    /// made thousands of insert points, each a random page to read and
    /// write in a B-tree; HISTORY has no primary key in TPC-C and no
    /// transaction reads it.)
    pub const HISTORY: u32 = 4;
    /// NEW-ORDER, key (w, d, o).
    pub const NEW_ORDER: u32 = 5;
    /// ORDER, key (w, d, o).
    pub const ORDER: u32 = 6;
    /// Index (w, d, c, o) -> empty.
    pub const ORDER_CUSTOMER: u32 = 7;
    /// ORDER-LINE, key (w, d, o, ol).
    pub const ORDER_LINE: u32 = 8;
    /// ITEM, key (i).
    pub const ITEM: u32 = 9;
    /// STOCK, key (w, i).
    pub const STOCK: u32 = 10;
}

/// Population sizes (clause 4.3.3.1, or reduced for tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpccScale {
    /// ITEM rows (100 000).
    pub items: u32,
    /// CUSTOMER rows per district (3 000).
    pub customers_per_district: u32,
    /// ORDER rows per district at load (3 000).
    pub orders_per_district: u32,
    /// Undelivered orders per district at load (900).
    pub new_orders_per_district: u32,
}

impl TpccScale {
    /// The specification's sizes.
    pub fn full() -> Self {
        TpccScale {
            items: 100_000,
            customers_per_district: 3000,
            orders_per_district: 3000,
            new_orders_per_district: 900,
        }
    }
    /// Reduced sizes for tests and quick checks.
    pub fn small() -> Self {
        TpccScale {
            items: 1000,
            customers_per_district: 30,
            orders_per_district: 30,
            new_orders_per_district: 9,
        }
    }
    fn validate(&self) -> Result<(), String> {
        let ok = self.items >= 10
            && self.customers_per_district >= 3
            && self.orders_per_district == self.customers_per_district
            && self.new_orders_per_district < self.orders_per_district;
        if ok {
            Ok(())
        } else {
            Err(format!("invalid TPC-C scale {self:?}: need items >= 10, orders = customers >= 3, new orders < orders"))
        }
    }
    /// Distinct last names in use (1000 at full scale).
    pub fn last_name_count(&self) -> u64 {
        self.customers_per_district.min(1000) as u64
    }
}

/// Striped locks for STOCK and CUSTOMER read-modify-writes.
pub const ROW_LOCK_COUNT: usize = 1 << 16;

/// The TPC-C workload: scale, warehouses, and the locks.
#[derive(Debug)]
pub struct Tpcc {
    warehouses: u32,
    scale: TpccScale,
    locks: Vec<AtomicBool>,
    row_locks: Vec<AtomicBool>,
    /// Next sequence number of a HISTORY row that Payment adds.
    history_sequence: AtomicU64,
}

/// Per-task TPC-C state.
#[derive(Debug, Clone)]
pub struct TpccTask {
    /// The terminal's home warehouse (1-based).
    pub home_warehouse: u32,
}

impl Tpcc {
    /// A workload over `warehouses` warehouses.
    pub fn new(warehouses: u32, scale: TpccScale) -> Result<Self, String> {
        if warehouses == 0 || warehouses > WAREHOUSES_MAX {
            return Err(format!(
                "warehouses must be in 1..={WAREHOUSES_MAX}, got {warehouses}"
            ));
        }
        scale.validate()?;
        let lock_count = (warehouses * (DISTRICTS_PER_WAREHOUSE + 1)) as usize;
        let locks = (0..lock_count).map(|_| AtomicBool::new(false)).collect();
        let row_locks = (0..ROW_LOCK_COUNT)
            .map(|_| AtomicBool::new(false))
            .collect();
        Ok(Tpcc {
            warehouses,
            scale,
            locks,
            row_locks,
            history_sequence: AtomicU64::new(0),
        })
    }
    /// Warehouses.
    pub fn warehouses(&self) -> u32 {
        self.warehouses
    }
    /// Population sizes.
    pub fn scale(&self) -> &TpccScale {
        &self.scale
    }
    /// Rows the loader inserts (all tables and indexes).
    pub fn records_count(&self) -> u64 {
        let s = &self.scale;
        let per_district = s.customers_per_district as u64 * 3
            + s.orders_per_district as u64 * 12
            + s.new_orders_per_district as u64;
        s.items as u64
            + self.warehouses as u64
                * (1 + s.items as u64 + DISTRICTS_PER_WAREHOUSE as u64 * (1 + per_district))
    }
    /// Approximate logical bytes per warehouse (keys + values).
    pub fn dataset_bytes_per_warehouse(scale: &TpccScale) -> u64 {
        let customers = (DISTRICTS_PER_WAREHOUSE * scale.customers_per_district) as u64;
        let orders = (DISTRICTS_PER_WAREHOUSE * scale.orders_per_district) as u64;
        scale.items as u64 * STOCK_ROW_BYTES
            + customers * (CUSTOMER_ROW_BYTES + 60 + HISTORY_ROW_BYTES)
            + orders * (ORDER_ROW_BYTES + 20 + 10 * ORDER_LINE_ROW_BYTES)
    }
    /// Approximate logical bytes loaded.
    pub fn dataset_bytes(&self) -> u64 {
        self.scale.items as u64 * ITEM_ROW_BYTES
            + self.warehouses as u64 * Self::dataset_bytes_per_warehouse(&self.scale)
    }
    /// State for task `task_index`: home warehouse round-robin.
    pub fn task(&self, task_index: usize, _task_count: usize) -> TpccTask {
        TpccTask {
            home_warehouse: (task_index as u32 % self.warehouses) + 1,
        }
    }
    /// Loads part `part` of `parts`.
    pub async fn load_part<K: Kv>(
        &self,
        kv: &K,
        part: usize,
        parts: usize,
        control: &RunControl,
    ) -> Result<u64, KvError> {
        load::load_part(self, kv, part, parts, control).await
    }
    /// One transaction of the standard mix.
    pub async fn op<K: Kv>(&self, kv: &K, state: &mut TaskState) -> Result<OpKind, KvError> {
        txn::run_one(self, kv, state).await
    }
    /// Checks consistency conditions 1–4 on every warehouse.
    pub async fn check<K: Kv>(&self, kv: &K) -> Result<(), KvError> {
        check::check_all(self, kv).await
    }

    fn next_history_sequence(&self) -> u64 {
        self.history_sequence.fetch_add(1, Ordering::Relaxed)
    }

    fn district_lock_index(&self, warehouse: u32, district: u32) -> usize {
        ((warehouse - 1) * DISTRICTS_PER_WAREHOUSE + (district - 1)) as usize
    }
    fn warehouse_lock_index(&self, warehouse: u32) -> usize {
        (self.warehouses * DISTRICTS_PER_WAREHOUSE + warehouse - 1) as usize
    }

    fn row_lock_index(&self, table: u32, key: &[u8]) -> usize {
        (fnv1a(key) ^ table as u64) as usize % ROW_LOCK_COUNT
    }
}

/// The locks one transaction holds until it commits (dropped: released).
///
/// Deadlock freedom: every transaction takes locks in one global order,
/// district and warehouse locks ([`Tpcc::locks`], by index) before row
/// locks ([`Tpcc::row_locks`], by index). [`TxnLocks::take`] takes a sorted
/// set; a later call may only add locks above every lock already held of
/// the same kind, and no district or warehouse lock once a row lock is
/// held. A lock already held is not taken again (striped row locks of two
/// rows may be one lock).
struct TxnLocks<'a> {
    tpcc: &'a Tpcc,
    held: Vec<usize>,
    held_rows: Vec<usize>,
}

impl<'a> TxnLocks<'a> {
    fn new(tpcc: &'a Tpcc) -> Self {
        TxnLocks {
            tpcc,
            held: Vec::new(),
            held_rows: Vec::new(),
        }
    }

    /// Takes the district/warehouse locks `indexes` and the row locks of
    /// `rows` (table, key), in the global order.
    async fn take<K: Kv>(&mut self, kv: &K, indexes: &[usize], rows: &[(u32, &[u8])]) {
        let mut indexes = indexes.to_vec();
        indexes.sort_unstable();
        indexes.dedup();
        let mut row_indexes: Vec<usize> = rows
            .iter()
            .map(|&(table, key)| self.tpcc.row_lock_index(table, key))
            .collect();
        row_indexes.sort_unstable();
        row_indexes.dedup();
        for index in indexes {
            if self.held.contains(&index) {
                continue;
            }
            assert!(
                self.held_rows.is_empty() && self.held.last().is_none_or(|&last| last < index),
                "lock {index} taken out of the global order"
            );
            acquire(kv, &self.tpcc.locks[index]).await;
            self.held.push(index);
        }
        for index in row_indexes {
            if self.held_rows.contains(&index) {
                continue;
            }
            assert!(
                self.held_rows.last().is_none_or(|&last| last < index),
                "row lock {index} taken out of the global order"
            );
            acquire(kv, &self.tpcc.row_locks[index]).await;
            self.held_rows.push(index);
        }
    }
}

impl TxnLocks<'_> {
    /// Releases every lock held.
    fn release(&mut self) {
        for index in self.held.drain(..) {
            let was_locked = self.tpcc.locks[index].swap(false, Ordering::Release);
            debug_assert!(was_locked);
        }
        for index in self.held_rows.drain(..) {
            let was_locked = self.tpcc.row_locks[index].swap(false, Ordering::Release);
            debug_assert!(was_locked);
        }
    }

    /// Commits `batch` and releases the locks as soon as its writes are
    /// visible ([`Kv::commit_releasing`]: before they are durable on an
    /// engine whose log orders later commits after it).
    async fn commit<K: Kv>(&mut self, kv: &K, batch: &KvBatch) -> Result<(), KvError> {
        let result = kv.commit_releasing(batch, &mut || self.release()).await;
        self.release();
        result
    }
}

impl Drop for TxnLocks<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// Spins on a try-lock, letting other tasks (or threads) run while it is
/// taken.
async fn acquire<K: Kv>(kv: &K, lock: &AtomicBool) {
    while lock
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        kv.wait_busy().await;
    }
}

/// Builds a key from big-endian u32 parts.
pub fn key(parts: &[u32]) -> Vec<u8> {
    let mut key = Vec::with_capacity(parts.len() * 4 + 8);
    for part in parts {
        key.extend_from_slice(&part.to_be_bytes());
    }
    key
}

/// Reads big-endian u32 number `index` of a key.
pub fn key_part(key: &[u8], index: usize) -> Result<u32, KvError> {
    key.get(index * 4..index * 4 + 4)
        .map(|bytes| u32::from_be_bytes(bytes.try_into().expect("4 bytes")))
        .ok_or_else(|| KvError::Corrupt(format!("key of {} bytes has no part {index}", key.len())))
}

/// Collects up to `limit` entries whose key starts with `prefix`, from `start`.
pub async fn scan_prefix<K: Kv>(
    kv: &K,
    table: u32,
    prefix: &[u8],
    start: &[u8],
    reverse: bool,
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, KvError> {
    let mut found = Vec::new();
    let mut visit = |key: &[u8], value: &[u8]| {
        if !key.starts_with(prefix) || found.len() >= limit {
            return false;
        }
        found.push((key.to_vec(), value.to_vec()));
        found.len() < limit
    };
    if reverse {
        kv.scan_rev(table, start, &mut visit).await?;
    } else {
        kv.scan(table, start, &mut visit).await?;
    }
    Ok(found)
}

/// Reads a row that must exist.
pub async fn get_row<K: Kv, R: Row>(
    kv: &K,
    table: u32,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<R, KvError> {
    if !kv.get(table, key, out).await? {
        return Err(KvError::Corrupt(format!(
            "table {table}: missing row {key:?}"
        )));
    }
    R::decode(out)
}

/// Adds a row's write to a transaction's batch.
pub fn put_row<R: Row>(batch: &mut KvBatch, table: u32, key: &[u8], row: &R, buffer: &mut Vec<u8>) {
    row.encode(buffer);
    batch.put(table, key, buffer);
}
