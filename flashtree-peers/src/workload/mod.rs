//! Workloads, written once as async code generic over [`Kv`]: random lookup
//! (Haas & Leis (VLDB 2023)), YCSB A–F (Xu et al. (SYSTOR 2015)) and TPC-C. A [`Workload`] is shared by all
//! tasks; each task keeps its own [`TaskState`].

pub mod lookup;
pub mod tpcc;
pub mod ycsb;

use crate::job::RunControl;
use crate::kv::{Kv, KvBatch, KvError};
use crate::rng::Rng64;

/// Kinds of operations counted separately (YCSB proportions, TPC-C mix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Point read.
    Read = 0,
    /// Blind overwrite of an existing record.
    Update = 1,
    /// Insert of a new record.
    Insert = 2,
    /// Range scan.
    Scan = 3,
    /// Read, then write back the modified record.
    ReadModifyWrite = 4,
    /// TPC-C New-Order (counted also when rolled back, per the spec).
    NewOrder = 5,
    /// TPC-C Payment.
    Payment = 6,
    /// TPC-C Order-Status.
    OrderStatus = 7,
    /// TPC-C Delivery.
    Delivery = 8,
    /// TPC-C Stock-Level.
    StockLevel = 9,
}

/// Number of [`OpKind`] values.
pub const OP_KIND_COUNT: usize = 10;

impl OpKind {
    /// All kinds, in index order.
    pub const ALL: [OpKind; OP_KIND_COUNT] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::NewOrder,
        OpKind::Payment,
        OpKind::OrderStatus,
        OpKind::Delivery,
        OpKind::StockLevel,
    ];
    /// Lower-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "read_modify_write",
            OpKind::NewOrder => "new_order",
            OpKind::Payment => "payment",
            OpKind::OrderStatus => "order_status",
            OpKind::Delivery => "delivery",
            OpKind::StockLevel => "stock_level",
        }
    }
}

/// One of the benchmark workloads, with its parameters and shared state.
#[derive(Debug)]
pub enum Workload {
    /// Random point lookups (Haas & Leis (VLDB 2023) §4.1).
    Lookup(lookup::Lookup),
    /// YCSB core workload A–F.
    Ycsb(ycsb::Ycsb),
    /// TPC-C, all five transactions.
    Tpcc(tpcc::Tpcc),
}

/// Per-task mutable state: random numbers and reusable buffers.
#[derive(Debug)]
pub struct TaskState {
    /// The task's random numbers.
    pub rng: Rng64,
    /// Reusable output buffer for gets.
    pub out: Vec<u8>,
    /// Reusable value buffer for puts.
    pub value: Vec<u8>,
    /// TPC-C task state (home warehouse, history sequence).
    pub tpcc: Option<tpcc::TpccTask>,
}

impl Workload {
    /// Name as given on the command line ("lookup", "ycsb-a", "tpcc").
    pub fn name(&self) -> String {
        match self {
            Workload::Lookup(_) => "lookup".into(),
            Workload::Ycsb(ycsb) => format!("ycsb-{}", ycsb.kind().letter()),
            Workload::Tpcc(_) => "tpcc".into(),
        }
    }
    /// Tables the engine must create.
    pub fn table_count(&self) -> u32 {
        match self {
            Workload::Lookup(_) | Workload::Ycsb(_) => 1,
            Workload::Tpcc(_) => tpcc::TABLE_COUNT,
        }
    }
    /// Records the loader inserts.
    pub fn records_count(&self) -> u64 {
        match self {
            Workload::Lookup(lookup) => lookup.records_count(),
            Workload::Ycsb(ycsb) => ycsb.records_count(),
            Workload::Tpcc(tpcc) => tpcc.records_count(),
        }
    }
    /// Logical bytes (keys + values) the loader inserts.
    pub fn dataset_bytes(&self) -> u64 {
        match self {
            Workload::Lookup(lookup) => lookup.dataset_bytes(),
            Workload::Ycsb(ycsb) => ycsb.dataset_bytes(),
            Workload::Tpcc(tpcc) => tpcc.dataset_bytes(),
        }
    }
    /// Key + value bytes of the live data after this workload's runs, on
    /// a store that held `live_bytes_before` of it before them (the load,
    /// or a reused load's last live figure); None where the workload does
    /// not know it cheaply (TPC-C inserts, overwrites with other lengths
    /// and deletes). Lookup only reads. YCSB overwrites values with values
    /// of the same length and inserts records numbered from the loaded
    /// count up, the same keys in every run on a reused load: the live
    /// records are those of the run that inserted the most.
    pub fn live_bytes_after_run(&self, live_bytes_before: u64) -> Option<u64> {
        match self {
            Workload::Lookup(_) => Some(live_bytes_before),
            Workload::Ycsb(ycsb) => Some(live_bytes_before.max(ycsb.inserted_bytes())),
            Workload::Tpcc(_) => None,
        }
    }
    /// Loads part `part` of `parts`; returns records inserted.
    pub async fn load_part<K: Kv>(
        &self,
        kv: &K,
        part: usize,
        parts: usize,
        control: &RunControl,
    ) -> Result<u64, KvError> {
        match self {
            Workload::Lookup(lookup) => lookup.load_part(kv, part, parts, control).await,
            Workload::Ycsb(ycsb) => ycsb.load_part(kv, part, parts, control).await,
            Workload::Tpcc(tpcc) => tpcc.load_part(kv, part, parts, control).await,
        }
    }
    /// Fresh state for task `task_index` of `task_count`.
    pub fn task_state(&self, task_index: usize, task_count: usize, seed: u64) -> TaskState {
        let tpcc = match self {
            Workload::Tpcc(tpcc) => Some(tpcc.task(task_index, task_count)),
            _ => None,
        };
        TaskState {
            rng: Rng64::new(seed),
            out: Vec::new(),
            value: Vec::new(),
            tpcc,
        }
    }
    /// Runs one operation (one transaction for TPC-C).
    pub async fn op<K: Kv>(&self, kv: &K, state: &mut TaskState) -> Result<OpKind, KvError> {
        match self {
            Workload::Lookup(lookup) => lookup.op(kv, state).await,
            Workload::Ycsb(ycsb) => ycsb.op(kv, state).await,
            Workload::Tpcc(tpcc) => tpcc.op(kv, state).await,
        }
    }
    /// Checks the data after a run (TPC-C consistency conditions 1–4).
    pub async fn check<K: Kv>(&self, kv: &K) -> Result<(), KvError> {
        match self {
            Workload::Lookup(_) | Workload::Ycsb(_) => Ok(()),
            Workload::Tpcc(tpcc) => tpcc.check(kv).await,
        }
    }
}

/// Loaders report progress every this many records.
pub(crate) const LOAD_PROGRESS_BATCH: u64 = 1024;

/// Records a loader commits together: a load writes batches, as a bulk
/// load does, so that in the `sync` mode it waits for one sync per batch,
/// not per record. (flashtree's logged batches must fit a quarter of a
/// worker's frames: 64 entries fit a pool of 512 frames per worker.)
pub(crate) const LOAD_BATCH_ENTRIES: usize = 64;

/// A loader's writes, committed [`LOAD_BATCH_ENTRIES`] at a time; call
/// [`LoadBatch::finish`] at the end (dropping it loses the last batch).
/// Each commit adds its key and value bytes to the control's
/// [`RunControl::loaded_bytes`].
pub(crate) struct LoadBatch<'a, K: Kv> {
    kv: &'a K,
    control: &'a RunControl,
    batch: KvBatch,
}

impl<'a, K: Kv> LoadBatch<'a, K> {
    pub(crate) fn new(kv: &'a K, control: &'a RunControl) -> Self {
        LoadBatch {
            kv,
            control,
            batch: KvBatch::new(),
        }
    }
    /// Adds a put; commits the batch once it is full.
    pub(crate) async fn put(
        &mut self,
        table: u32,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), KvError> {
        self.batch.put(table, key, value);
        if self.batch.len() >= LOAD_BATCH_ENTRIES {
            self.finish().await?;
        }
        Ok(())
    }
    /// Commits what the batch holds.
    pub(crate) async fn finish(&mut self) -> Result<(), KvError> {
        if !self.batch.is_empty() {
            self.kv.commit(&self.batch).await?;
            self.control
                .add_loaded_bytes(self.batch.data_bytes() as u64);
            self.batch.clear();
        }
        Ok(())
    }
}

/// Inserts part `part` of `parts` of the records `0..records_count` into
/// table 0, in record order: record `r` under `key_of(r)`, with a value of
/// `value_bytes` tagged with `r` (filler from `Rng64::new(first ^
/// seed_salt)`, `first` the part's first record). Returns records inserted.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn load_records<K: Kv>(
    kv: &K,
    records_count: u64,
    value_bytes: usize,
    part: usize,
    parts: usize,
    control: &RunControl,
    seed_salt: u64,
    key_of: impl Fn(u64) -> [u8; 8],
) -> Result<u64, KvError> {
    let (first, end) = part_range(records_count, part, parts);
    let mut rng = Rng64::new(first ^ seed_salt);
    let mut value = Vec::with_capacity(value_bytes);
    let mut loading = LoadBatch::new(kv, control);
    for record in first..end {
        fill_value(&mut value, record, value_bytes, &mut rng);
        loading.put(0, &key_of(record), &value).await?;
        if (record - first + 1) % LOAD_PROGRESS_BATCH == 0 {
            control.add_progress(LOAD_PROGRESS_BATCH);
        }
    }
    loading.finish().await?;
    control.add_progress((end - first) % LOAD_PROGRESS_BATCH);
    Ok(end - first)
}

/// Part `part` of `parts` of the range `0..count`, as `(first, end)`.
pub fn part_range(count: u64, part: usize, parts: usize) -> (u64, u64) {
    let parts = parts.max(1) as u128;
    let first = (count as u128 * part as u128 / parts) as u64;
    let end = (count as u128 * (part as u128 + 1) / parts) as u64;
    (first, end)
}

/// Fills `value` with `len_bytes` bytes: the 8-byte tag first, then filler.
pub fn fill_value(value: &mut Vec<u8>, tag: u64, len_bytes: usize, rng: &mut Rng64) {
    value.clear();
    value.extend_from_slice(&tag.to_be_bytes());
    while value.len() < len_bytes {
        value.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    value.truncate(len_bytes.max(8));
}
