//! Bulk loading ([`Db::bulk_load`]): records in any order become a tree
//! built bottom-up, its pages written in large sequential writes.
//!
//! 1. **Sort.** Records are gathered in memory (up to
//!    [`BulkLoadOptions::sort_memory_bytes`]) and sorted; when more come,
//!    each sorted batch is written to the store's temporary space as a
//!    *run* (`data.ft.tmp` beside a store on files, the temp regions of a
//!    store on block devices; writes of class [`WriteClass::Temp`]). Runs
//!    are merged, more than [`MAX_FAN_IN`] at a time in several passes.
//!    Of records with equal keys the last one given wins, as with puts.
//! 2. **Build.** The sorted stream fills leaves to the fill factor, then
//!    the inner levels above them, in page ids reserved past the end of
//!    the store ([`BufferManager::reserve_pages`]): consecutive ids, so the
//!    pages go to the device in writes of a stripe chunk each, many in
//!    flight. The top node is kept in memory.
//! 3. **Commit.** The data devices are synced; then one logged step
//!    latches the tree's root (still an empty leaf, or the load is
//!    refused), writes the top node into it, and logs its image with the
//!    range of page ids the tree now uses (a group of kind 2). Before
//!    that group is durable nothing reaches the new pages: a crash leaves
//!    the tree empty, and the reserved ids free (a checkpoint lists them
//!    as free; recovery frees ids past the checkpoint's end that no
//!    replayed group names). After it, the tree is complete.
//! 4. The temporary space is given back (the file cut to zero, the
//!    regions discarded).
//!
//! [`BufferManager::reserve_pages`]: crate::buffer::BufferManager::reserve_pages

use super::worker::run_logged_op;
use super::{Db, Tree};
use crate::btree::node::{
    self, common_prefix_len, entry_within_limits, node_bytes, shortest_separator, Node,
    MAX_KEY_BYTES, SLOT_BYTES,
};
use crate::buffer::page::{seal_page, PAGE_KIND_OFFSET};
use crate::buffer::{OpError, PageId};
use crate::error::{Error, Result};
use crate::io::{
    AlignedBuf, BackendKind, IoChannel, IoCompletion, IoConfig, IoRequest, Storage, WriteClass,
    PAGE_SIZE,
};
use std::sync::Arc;
use std::time::Instant;

/// Most runs merged at once; more take several passes.
pub const MAX_FAN_IN: usize = 64;

/// Bytes of each temporary-space write and of each run's read buffer at
/// most.
const TEMP_IO_BYTES: usize = 1 << 20;

/// Bytes the sort accounts per record besides its key and value.
const RECORD_OVERHEAD_BYTES: usize = 24;

/// Bytes of a record's header in a run: key length u16, value length u16.
const RUN_RECORD_HEADER: usize = 4;

/// Writes in flight while the tree's pages are written.
const PAGE_WRITES_IN_FLIGHT: usize = 32;

/// Records ahead of the one copied whose bytes are prefetched.
const PREFETCH_AHEAD: usize = 16;

/// Writes in flight while runs are written.
const TEMP_WRITES_IN_FLIGHT: usize = 4;

/// How to bulk load.
#[derive(Clone, Debug)]
pub struct BulkLoadOptions {
    /// How full leaves and inner nodes are made: the share of a page's
    /// bytes a node may take, in `0.5..=1.0` (default 1.0: as full as the
    /// records allow; leave room with less when inserts will follow, so
    /// that the first ones do not split every leaf).
    pub fill_factor: f64,
    /// Memory for sorting (default: the buffer pool's size, at least
    /// 64 KiB). More records than fit are sorted in runs through the
    /// store's temporary space.
    pub sort_memory_bytes: Option<u64>,
}

impl Default for BulkLoadOptions {
    fn default() -> Self {
        BulkLoadOptions {
            fill_factor: 1.0,
            sort_memory_bytes: None,
        }
    }
}

/// What a bulk load did.
#[derive(Clone, Debug, Default)]
pub struct BulkLoadStats {
    /// Records given.
    pub records_in: u64,
    /// Records in the tree (records with equal keys count once).
    pub records: u64,
    /// Sorted runs written to the temporary space (0: all fit in memory).
    pub runs: u64,
    /// Merge passes over the runs before the last merge.
    pub merge_passes: u64,
    /// Bytes written to the temporary space.
    pub temp_bytes_written: u64,
    /// Leaves of the new tree.
    pub leaves: u64,
    /// Inner nodes of the new tree (the root counts when it is one).
    pub inner_nodes: u64,
    /// Pages written to the data devices (every node but the root, which
    /// the commit logs).
    pub pages_written: u64,
    /// Page ids reserved for the tree and not used (freed at the commit).
    pub pages_unused: u64,
    /// Wall time gathering and sorting records and writing runs (µs).
    pub sort_micros: u64,
    /// Wall time merging, building and writing the pages (µs).
    pub build_micros: u64,
    /// Wall time of the data sync and the commit (µs).
    pub commit_micros: u64,
}

impl Db {
    /// Loads `records` (key, value), in any order, into the empty tree
    /// `tree`, with [`BulkLoadOptions::default`]: see
    /// [`Db::bulk_load_with`].
    pub fn bulk_load<K, V, I>(&self, tree: Tree, records: I) -> Result<BulkLoadStats>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
        I: IntoIterator<Item = (K, V)>,
    {
        self.bulk_load_with(
            tree,
            records.into_iter().map(Ok),
            &BulkLoadOptions::default(),
        )
    }

    /// Loads `records` (key, value), in any order, into `tree`, which must
    /// be empty (a tree with records, or whose root is not an empty leaf,
    /// is refused with [`Error::InvalidArgument`] and left as it is). The
    /// tree is built bottom-up beside the store (see the module docs) and
    /// switched in by one logged step: a crash leaves the tree empty or
    /// loaded, never in between. Of records with equal keys the last one
    /// wins. A record outside the size limits, or an `Err` from the
    /// iterator, stops the load with that error and leaves the tree empty.
    /// One bulk load runs at a time per store; others wait. Other calls
    /// go on meanwhile, and lookups see the tree empty until the commit.
    /// Durable when it returns (with a log).
    pub fn bulk_load_with<K, V, I>(
        &self,
        tree: Tree,
        records: I,
        options: &BulkLoadOptions,
    ) -> Result<BulkLoadStats>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
        I: IntoIterator<Item = Result<(K, V)>>,
    {
        if tree.is_hash() {
            return Err(Error::Unsupported(
                "bulk load builds B+-trees; put into a hash tree instead".into(),
            ));
        }
        if !(0.5..=1.0).contains(&options.fill_factor) {
            return Err(Error::InvalidArgument(format!(
                "bulk load fill factor must be in 0.5..=1.0, got {}",
                options.fill_factor
            )));
        }
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let _one_at_a_time = self.bulk.lock().unwrap_or_else(|e| e.into_inner());
        match self.range(tree, None, super::Direction::Forward).next() {
            Some(Ok(_)) => return Err(not_empty()),
            Some(Err(e)) => return Err(e),
            None => {}
        }
        let bm = self.inner.bm.clone();
        let storage = bm.storage().clone();
        let sort_memory = options
            .sort_memory_bytes
            .unwrap_or(bm.frame_count() as u64 * PAGE_SIZE as u64)
            .max(64 << 10) as usize;
        let mut stats = BulkLoadStats::default();
        let started = Instant::now();
        let mut temp = TempSpace::new(storage.clone(), self.temp.clone());
        let result = (|| {
            let sorted = sort(records, sort_memory, &mut temp, &mut stats)?;
            stats.sort_micros = started.elapsed().as_micros() as u64;
            let built = Instant::now();
            let plan = reserve_plan(&sorted.shape, options.fill_factor);
            let first = bm.reserve_pages(plan)?;
            let outcome = build_and_commit(
                self,
                tree,
                sorted,
                &mut temp,
                Reservation { first, pages: plan },
                options.fill_factor,
                sort_memory,
                &mut stats,
                built,
            );
            if outcome.is_err() {
                // Nothing took the reserved ids into use.
                bm.end_reservation(first, 0);
            }
            outcome
        })();
        stats.temp_bytes_written = temp.written;
        let released = temp.release();
        result?;
        released?;
        Ok(stats)
    }
}

fn not_empty() -> Error {
    Error::InvalidArgument(
        "bulk load into a tree that is not empty: load into a new (or never written) tree".into(),
    )
}

/// What the sort learnt of the records: enough to bound the pages the tree
/// needs.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    records: u64,
    /// Sum of `SLOT_BYTES` + key + value over the records.
    entry_bytes: u64,
    max_key: usize,
    max_entry: usize,
}

/// The sorted records: in memory (one batch), or runs in the temp space.
struct Sorted {
    shape: Shape,
    memory: Option<MemoryRun>,
    runs: Vec<RunPlace>,
}

/// A batch of records in memory.
#[derive(Default)]
struct MemoryRun {
    arena: Vec<u8>,
    /// (first 8 key bytes, big-endian, zero padded; offset; key length;
    /// value length), sorted by key then offset (arrival order).
    index: Vec<(u64, u32, u16, u16)>,
}

impl MemoryRun {
    fn push(&mut self, key: &[u8], value: &[u8]) {
        let offset = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        self.arena.extend_from_slice(value);
        self.index.push((
            key_prefix(key),
            offset,
            key.len() as u16,
            value.len() as u16,
        ));
    }

    fn bytes(&self) -> usize {
        self.arena.len() + self.index.len() * RECORD_OVERHEAD_BYTES
    }

    fn key(&self, at: &(u64, u32, u16, u16)) -> &[u8] {
        &self.arena[at.1 as usize..at.1 as usize + at.2 as usize]
    }

    /// Hints the CPU to fetch record `i` (the sorted index visits the
    /// arena out of order: without it each record is a cache miss).
    #[inline]
    fn prefetch(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(&(_, offset, _, _)) = self.index.get(i) {
            let at = self.arena[offset as usize..].as_ptr();
            for line in [0usize, 64] {
                // SAFETY: prefetching is a hint that never faults; the
                // address is only computed (wrapping), never dereferenced.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        at.wrapping_add(line) as *const i8,
                    );
                }
            }
        }
    }

    fn record(&self, i: usize) -> (&[u8], &[u8]) {
        let (_, offset, k, v) = self.index[i];
        let (offset, k, v) = (offset as usize, k as usize, v as usize);
        (
            &self.arena[offset..offset + k],
            &self.arena[offset + k..offset + k + v],
        )
    }

    fn sort(&mut self) {
        let mut index = std::mem::take(&mut self.index);
        index.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| self.key(a).cmp(self.key(b)))
                .then(a.1.cmp(&b.1))
        });
        self.index = index;
    }

    fn clear(&mut self) {
        self.arena.clear();
        self.index.clear();
    }
}

fn key_prefix(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

/// Gathers, checks and sorts the records; spills runs when they do not
/// fit in `sort_memory` bytes.
fn sort<K, V, I>(
    records: I,
    sort_memory: usize,
    temp: &mut TempSpace,
    stats: &mut BulkLoadStats,
) -> Result<Sorted>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
    I: IntoIterator<Item = Result<(K, V)>>,
{
    let mut shape = Shape::default();
    let mut batch = MemoryRun::default();
    let mut runs = Vec::new();
    for (n, record) in records.into_iter().enumerate() {
        let (key, value) = record?;
        let (key, value) = (key.as_ref(), value.as_ref());
        if key.is_empty() || !entry_within_limits(key.len(), value.len()) {
            return Err(Error::InvalidArgument(format!(
                "bulk load record {n}: a key of {} bytes and a value of {} bytes (keys 1..={MAX_KEY_BYTES} bytes, key + value at most {} bytes)",
                key.len(),
                value.len(),
                node::MAX_ENTRY_BYTES
            )));
        }
        let entry = SLOT_BYTES + key.len() + value.len();
        shape.records += 1;
        shape.entry_bytes += entry as u64;
        shape.max_key = shape.max_key.max(key.len());
        shape.max_entry = shape.max_entry.max(entry);
        if batch.bytes() + key.len() + value.len() + RECORD_OVERHEAD_BYTES > sort_memory
            && !batch.index.is_empty()
        {
            batch.sort();
            runs.push(write_run(&batch, temp)?);
            batch.clear();
        }
        batch.push(key, value);
    }
    stats.records_in = shape.records;
    batch.sort();
    if runs.is_empty() {
        return Ok(Sorted {
            shape,
            memory: Some(batch),
            runs,
        });
    }
    if !batch.index.is_empty() {
        runs.push(write_run(&batch, temp)?);
    }
    drop(batch);
    stats.runs = runs.len() as u64;
    Ok(Sorted {
        shape,
        memory: None,
        runs,
    })
}

/// Where a run lies in the temp space.
#[derive(Clone, Copy, Debug)]
struct RunPlace {
    start: u64,
    bytes: u64,
}

/// Writes a sorted batch as a run.
fn write_run(batch: &MemoryRun, temp: &mut TempSpace) -> Result<RunPlace> {
    let mut out = RunWriter::new(temp)?;
    for i in 0..batch.index.len() {
        batch.prefetch(i + PREFETCH_AHEAD);
        let (key, value) = batch.record(i);
        out.push(temp, key, value)?;
    }
    out.finish(temp)
}

/// Appends records to a new run at the end of the temp space.
struct RunWriter {
    start: u64,
    at: u64,
    buf: Option<AlignedBuf>,
    fill: usize,
}

impl RunWriter {
    fn new(temp: &mut TempSpace) -> Result<RunWriter> {
        Ok(RunWriter {
            start: temp.end,
            at: temp.end,
            buf: Some(temp.buffer()?),
            fill: 0,
        })
    }

    fn push(&mut self, temp: &mut TempSpace, key: &[u8], value: &[u8]) -> Result<()> {
        let mut header = [0u8; RUN_RECORD_HEADER];
        header[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        header[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
        for part in [&header[..], key, value] {
            let mut part = part;
            while !part.is_empty() {
                let buf = self.buf.as_mut().expect("a buffer until finish");
                let n = part.len().min(buf.len() - self.fill);
                buf[self.fill..self.fill + n].copy_from_slice(&part[..n]);
                self.fill += n;
                part = &part[n..];
                if self.fill == buf.len() {
                    self.flush(temp)?;
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self, temp: &mut TempSpace) -> Result<()> {
        if self.fill == 0 {
            return Ok(());
        }
        let len = self.fill.next_multiple_of(PAGE_SIZE);
        let mut buf = self.buf.take().expect("a buffer until finish");
        buf[self.fill..len].fill(0);
        temp.write(self.at, buf, len)?;
        self.buf = Some(temp.buffer()?);
        self.at += len as u64;
        self.fill = 0;
        Ok(())
    }

    /// The run's bytes are `start..end` (a run ends with zero padding to
    /// a page, which a reader stops at: no key is empty).
    fn finish(mut self, temp: &mut TempSpace) -> Result<RunPlace> {
        self.flush(temp)?;
        if let Some(buf) = self.buf.take() {
            temp.give_back(buf);
        }
        temp.drain()?;
        temp.end = self.at;
        Ok(RunPlace {
            start: self.start,
            bytes: self.at - self.start,
        })
    }
}

/// Reads one run's records in order.
struct RunReader {
    place: RunPlace,
    /// Bytes of the run read so far.
    read: u64,
    buf: AlignedBuf,
    /// Unconsumed bytes.
    pending: Vec<u8>,
    at: usize,
    /// The current record: (key start, key length, value length) in
    /// `pending`, or None at the end.
    current: Option<(usize, usize, usize)>,
}

impl RunReader {
    fn new(place: RunPlace, buf_bytes: usize) -> RunReader {
        RunReader {
            place,
            read: 0,
            buf: AlignedBuf::new(buf_bytes),
            pending: Vec::new(),
            at: 0,
            current: None,
        }
    }

    fn key(&self) -> &[u8] {
        let (k, kl, _) = self.current.expect("a current record");
        &self.pending[k..k + kl]
    }

    fn value(&self) -> &[u8] {
        let (k, kl, vl) = self.current.expect("a current record");
        &self.pending[k + kl..k + kl + vl]
    }

    /// Moves to the next record (the first one on the first call).
    fn advance(&mut self, reader: &mut TempReader) -> Result<()> {
        if let Some((k, kl, vl)) = self.current.take() {
            self.at = k + kl + vl;
        }
        loop {
            let have = self.pending.len() - self.at;
            if have >= RUN_RECORD_HEADER {
                let h = &self.pending[self.at..self.at + RUN_RECORD_HEADER];
                let kl = u16::from_le_bytes([h[0], h[1]]) as usize;
                let vl = u16::from_le_bytes([h[2], h[3]]) as usize;
                if kl == 0 {
                    return Ok(()); // the padding: the run ends
                }
                if have >= RUN_RECORD_HEADER + kl + vl {
                    self.current = Some((self.at + RUN_RECORD_HEADER, kl, vl));
                    return Ok(());
                }
            }
            if self.read >= self.place.bytes {
                if have == 0 {
                    return Ok(());
                }
                return Err(Error::Corrupt(
                    "bulk load: a sorted run in the temporary space ends inside a record".into(),
                ));
            }
            self.pending.drain(..self.at);
            self.at = 0;
            let n = (self.place.bytes - self.read).min(self.buf.len() as u64) as usize;
            reader.read(self.place.start + self.read, &mut self.buf, n)?;
            self.pending.extend_from_slice(&self.buf[..n]);
            self.read += n as u64;
        }
    }
}

/// Merges runs in key order (ties: the earlier run first, so the last
/// record given comes last).
struct Merger {
    readers: Vec<RunReader>,
    /// A binary min-heap of reader indices that have a current record.
    heap: Vec<usize>,
    started: bool,
}

impl Merger {
    fn new(runs: &[RunPlace], memory: usize) -> Merger {
        let per_run = (memory / runs.len().max(1))
            .clamp(PAGE_SIZE, TEMP_IO_BYTES)
            .next_multiple_of(PAGE_SIZE)
            .min(TEMP_IO_BYTES);
        Merger {
            readers: runs.iter().map(|&p| RunReader::new(p, per_run)).collect(),
            heap: Vec::new(),
            started: false,
        }
    }

    fn less(&self, a: usize, b: usize) -> bool {
        match self.readers[a].key().cmp(self.readers[b].key()) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => a < b,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.less(self.heap[l], self.heap[m]) {
                m = l;
            }
            if r < n && self.less(self.heap[r], self.heap[m]) {
                m = r;
            }
            if m == i {
                return;
            }
            self.heap.swap(i, m);
            i = m;
        }
    }

    /// The run whose record comes next, or None at the end. Its record is
    /// `readers[i].key()`/`value()` until the next call.
    fn next(&mut self, reader: &mut TempReader) -> Result<Option<usize>> {
        if !self.started {
            self.started = true;
            for i in 0..self.readers.len() {
                self.readers[i].advance(reader)?;
                if self.readers[i].current.is_some() {
                    self.heap.push(i);
                }
            }
            for i in (0..self.heap.len() / 2).rev() {
                self.sift_down(i);
            }
        } else if let Some(&top) = self.heap.first() {
            self.readers[top].advance(reader)?;
            if self.readers[top].current.is_none() {
                let last = self.heap.pop().expect("not empty");
                if !self.heap.is_empty() {
                    self.heap[0] = last;
                }
            }
            self.sift_down(0);
        }
        Ok(self.heap.first().copied())
    }
}

/// Merges groups of at most [`MAX_FAN_IN`] runs into longer runs until few
/// enough remain.
fn merge_passes(
    mut runs: Vec<RunPlace>,
    memory: usize,
    temp: &mut TempSpace,
    stats: &mut BulkLoadStats,
) -> Result<Vec<RunPlace>> {
    let fan_in = (memory / (2 * PAGE_SIZE)).clamp(2, MAX_FAN_IN);
    let mut reader = temp.reader()?;
    while runs.len() > fan_in {
        stats.merge_passes += 1;
        let mut merged = Vec::new();
        for group in runs.chunks(fan_in) {
            let mut merger = Merger::new(group, memory / 2);
            let mut out = RunWriter::new(temp)?;
            while let Some(i) = merger.next(&mut reader)? {
                let r = &merger.readers[i];
                out.push(temp, r.key(), r.value())?;
            }
            merged.push(out.finish(temp)?);
        }
        runs = merged;
    }
    Ok(runs)
}

/// Page ids the tree may need at most (the root's own page is the tree's
/// existing root, so this over-counts by one).
fn reserve_plan(shape: &Shape, fill: f64) -> u64 {
    if shape.records == 0 {
        return 0;
    }
    let limit = (fill * PAGE_SIZE as f64) as i64;
    let key = shape.max_key as i64;
    // A leaf closes when the next record does not fit: it holds more than
    // `limit` less its header, two fences and one more entry.
    let min_leaf = (limit - 28 - 2 * key - 1 - shape.max_entry as i64).max(9) as u64;
    let leaves = shape.entry_bytes / min_leaf + 2;
    // An inner node closes likewise, its entries at most 16 + key each.
    let per_child = 16 + key;
    let min_children = ((limit - 36 - 3 * key - 1 - per_child) / per_child + 1).max(2) as u64;
    let mut total = leaves;
    let mut level = leaves;
    while level > 1 {
        level = (level - 1) / min_children + 1;
        total += level;
    }
    total
}

/// Page ids reserved for the new tree.
struct Reservation {
    first: PageId,
    pages: u64,
}

/// Merges (or takes from memory) the sorted records, builds the tree,
/// writes it and commits it.
#[allow(clippy::too_many_arguments)]
fn build_and_commit(
    db: &Db,
    tree: Tree,
    sorted: Sorted,
    temp: &mut TempSpace,
    reservation: Reservation,
    fill: f64,
    sort_memory: usize,
    stats: &mut BulkLoadStats,
    built: Instant,
) -> Result<()> {
    let Reservation {
        first,
        pages: reserved,
    } = reservation;
    let bm = db.inner.bm.clone();
    let storage = bm.storage().clone();
    let limit = ((fill * PAGE_SIZE as f64) as usize).min(PAGE_SIZE);
    let mut pages = PageWriter::new(storage.clone(), first, reserved)?;
    let mut builder = TreeBuilder::new(limit);
    if let Some(batch) = &sorted.memory {
        for i in 0..batch.index.len() {
            batch.prefetch(i + PREFETCH_AHEAD);
            let (key, value) = batch.record(i);
            builder.push(key, value, &mut pages)?;
        }
    } else {
        let runs = merge_passes(sorted.runs.clone(), sort_memory, temp, stats)?;
        let mut reader = temp.reader()?;
        let mut merger = Merger::new(&runs, sort_memory);
        while let Some(i) = merger.next(&mut reader)? {
            let r = &merger.readers[i];
            builder.push(r.key(), r.value(), &mut pages)?;
        }
    }
    let root_image = builder.finish(&mut pages)?;
    pages.finish()?;
    stats.records = builder.records;
    stats.leaves = builder.leaves;
    stats.inner_nodes = builder.inner_nodes;
    stats.pages_written = pages.written;
    let used = pages.next - first;
    stats.pages_unused = reserved - used;
    stats.build_micros = built.elapsed().as_micros() as u64;
    let committing = Instant::now();
    let Some(root_image) = root_image else {
        // No records: the tree stays as it is.
        bm.end_reservation(first, 0);
        return Ok(());
    };
    // The new pages are durable before the step that makes them reachable.
    // A failed sync may have lost other writes too: the store stops (fail
    // stop, as for the log), and a reopen recovers from disk.
    if let Err(e) = super::open::sync_data(&storage) {
        bm.wal().fail(format!("bulk load: data sync failed: {e}"));
        return Err(e);
    }
    let logged = db.inner.logged;
    let root = tree.root;
    let image = Arc::new(root_image);
    let bm_commit = bm.clone();
    db.call(0, move |ctx| async move {
        run_logged_op(&ctx.reads, logged, |_wb| {
            let mut guard = bm_commit.fix_exclusive(root)?;
            let node = Node::from_page(guard.page());
            if !node.is_leaf() || node.count() != 0 {
                return Err(OpError::Fatal(not_empty()));
            }
            let page = guard.page_mut();
            // The header's checksum is stamped at write-back, the LSN by
            // the step.
            page[PAGE_KIND_OFFSET..].copy_from_slice(&image[PAGE_KIND_OFFSET..]);
            if logged && used > 0 {
                crate::buffer::step::step_allocated(&[(first, used)]);
            }
            // In the same step as the group that names them: a checkpoint
            // either lists them as free and is older than the group, or
            // does not list them.
            bm_commit.end_reservation(first, used);
            Ok(())
        })
        .await
    })??;
    if logged {
        db.sync()?;
    }
    stats.commit_micros = committing.elapsed().as_micros() as u64;
    Ok(())
}

/// Writes the new tree's pages: page ids from `first` on, in order, in
/// writes of one stripe chunk, several in flight.
struct PageWriter {
    pipe: Pipe,
    /// The next page id to hand out.
    next: PageId,
    end: PageId,
    /// The buffer being filled: its first page id and pages.
    buf: Option<AlignedBuf>,
    buf_first: PageId,
    buf_pages: usize,
    chunk_pages: u64,
    written: u64,
}

impl PageWriter {
    fn new(storage: Arc<Storage>, first: PageId, reserved: u64) -> Result<PageWriter> {
        let chunk_pages = (storage.chunk_bytes() / PAGE_SIZE as u64).max(1);
        let pipe = Pipe::new(
            storage,
            PAGE_WRITES_IN_FLIGHT,
            chunk_pages as usize * PAGE_SIZE,
        )?;
        let mut writer = PageWriter {
            pipe,
            next: first,
            end: first + reserved,
            buf: None,
            buf_first: first,
            buf_pages: 0,
            chunk_pages,
            written: 0,
        };
        writer.buf = Some(writer.pipe.buffer()?);
        Ok(writer)
    }

    /// A new page: its id, and its bytes (zeroed) to fill and seal.
    fn page(&mut self) -> Result<(PageId, &mut [u8; PAGE_SIZE])> {
        if self.next >= self.end {
            return Err(Error::Corrupt(format!(
                "bulk load: the tree needs more than the {} pages reserved for it",
                self.end - self.buf_first.min(self.end)
            )));
        }
        let chunk_end = (self.buf_first / self.chunk_pages + 1) * self.chunk_pages;
        if self.buf_pages > 0 && self.next >= chunk_end {
            self.flush()?;
        }
        let pid = self.next;
        self.next += 1;
        if self.buf_pages == 0 {
            self.buf_first = pid;
        }
        let at = self.buf_pages * PAGE_SIZE;
        self.buf_pages += 1;
        let buf = self.buf.as_mut().expect("a buffer until finish");
        let page: &mut [u8; PAGE_SIZE] = (&mut buf[at..at + PAGE_SIZE]).try_into().expect("a page");
        page.fill(0);
        Ok((pid, page))
    }

    fn flush(&mut self) -> Result<()> {
        if self.buf_pages == 0 {
            return Ok(());
        }
        let buf = self.buf.take().expect("a buffer until finish");
        let len = self.buf_pages * PAGE_SIZE;
        let offset = self.buf_first * PAGE_SIZE as u64;
        self.pipe.push(buf, len, |ptr, ud| {
            IoRequest::write(offset, ptr, len as u32, ud).with_class(WriteClass::DataCold)
        })?;
        self.written += self.buf_pages as u64;
        self.buf_pages = 0;
        self.buf = Some(self.pipe.buffer()?);
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.flush()?;
        self.pipe.drain()
    }
}

/// One level being built: the node being filled.
struct Level {
    leaf: bool,
    lower: Vec<u8>,
    /// Leaves: the entries taken (key, value); inner nodes: every child
    /// (its upper fence as the key, its page id as the value).
    arena: Vec<u8>,
    entries: Vec<(u32, u16, u16)>,
    /// Sum of `SLOT_BYTES` + key + value over `entries` (inner nodes: over
    /// all children but the last, which is the upper child).
    entry_bytes: usize,
    /// Nodes this level closed.
    closed: u64,
}

impl Level {
    fn new(leaf: bool) -> Level {
        Level {
            leaf,
            lower: Vec::new(),
            arena: Vec::new(),
            entries: Vec::new(),
            entry_bytes: 0,
            closed: 0,
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        let (at, k, _) = self.entries[i];
        &self.arena[at as usize..at as usize + k as usize]
    }

    fn value(&self, i: usize) -> &[u8] {
        let (at, k, v) = self.entries[i];
        let at = at as usize + k as usize;
        &self.arena[at..at + v as usize]
    }

    fn push_entry(&mut self, key: &[u8], value: &[u8]) {
        let at = self.arena.len() as u32;
        self.arena.extend_from_slice(key);
        self.arena.extend_from_slice(value);
        self.entries
            .push((at, key.len() as u16, value.len() as u16));
    }

    /// Bytes of this level's node with `extra` more entry bytes (and
    /// `extra_count` entries), fenced by `lower` and `upper`.
    fn bytes_with(&self, upper: &[u8], extra_count: usize, extra: usize) -> usize {
        // (Leaves count every entry; inner nodes all children but the last.)
        let prefix = common_prefix_len(&self.lower, upper);
        let count = if self.leaf {
            self.entries.len()
        } else {
            // The last child is the upper child, not an entry.
            self.entries.len().saturating_sub(1)
        } + extra_count;
        node_bytes(
            self.leaf,
            self.lower.len() + upper.len(),
            prefix,
            count,
            self.entry_bytes + extra,
        )
    }

    /// Writes this level's node, fenced by its lower fence and `upper`,
    /// into `page`.
    fn write_node(&self, page: &mut [u8; PAGE_SIZE], upper: &[u8]) -> Result<()> {
        let full = || Error::Corrupt("bulk load: a node overflowed while being built".into());
        if self.leaf {
            let node = node::init_leaf(page, &self.lower, upper);
            for i in 0..self.entries.len() {
                node.append_sorted(self.key(i), self.value(i))
                    .map_err(|_| full())?;
            }
        } else {
            let last = self.entries.len() - 1;
            let upper_child = u64::from_le_bytes(self.value(last).try_into().expect("8 bytes"));
            let node = node::init_inner(page, &self.lower, upper, upper_child);
            for i in 0..last {
                node.append_sorted(self.key(i), self.value(i))
                    .map_err(|_| full())?;
            }
        }
        debug_assert_eq!(node::check_invariants(page), Ok(()));
        Ok(())
    }

    fn clear(&mut self, new_lower: &[u8]) {
        self.lower.clear();
        self.lower.extend_from_slice(new_lower);
        self.arena.clear();
        self.entries.clear();
        self.entry_bytes = 0;
    }
}

/// Builds the tree bottom-up from records in key order.
struct TreeBuilder {
    limit: usize,
    /// levels[0]: leaves.
    levels: Vec<Level>,
    /// The record not yet placed: it goes into the current leaf if the
    /// leaf still fits with the separator between it and the next record
    /// as its upper fence.
    cand_key: Vec<u8>,
    cand_value: Vec<u8>,
    has_cand: bool,
    /// Scratch for separators.
    sep: Vec<u8>,
    records: u64,
    leaves: u64,
    inner_nodes: u64,
}

impl TreeBuilder {
    fn new(limit: usize) -> TreeBuilder {
        TreeBuilder {
            limit,
            levels: vec![Level::new(true)],
            cand_key: Vec::new(),
            cand_value: Vec::new(),
            has_cand: false,
            sep: Vec::new(),
            records: 0,
            leaves: 0,
            inner_nodes: 0,
        }
    }

    fn fits(&self, bytes: usize) -> bool {
        bytes <= self.limit
    }

    fn push(&mut self, key: &[u8], value: &[u8], pages: &mut PageWriter) -> Result<()> {
        if self.has_cand {
            if key == self.cand_key.as_slice() {
                // Equal keys: the later record wins.
                self.cand_value.clear();
                self.cand_value.extend_from_slice(value);
                return Ok(());
            }
            if key < self.cand_key.as_slice() {
                return Err(Error::Corrupt(
                    "bulk load: the merged records are out of order".into(),
                ));
            }
            let mut sep = std::mem::take(&mut self.sep);
            separator_into(&self.cand_key, key, &mut sep);
            let placed = self.place_candidate(&sep, pages);
            self.sep = sep;
            placed?;
        }
        self.cand_key.clear();
        self.cand_key.extend_from_slice(key);
        self.cand_value.clear();
        self.cand_value.extend_from_slice(value);
        self.has_cand = true;
        Ok(())
    }

    /// Puts the candidate into the current leaf, whose upper fence would
    /// be `upper`; closes the leaf first when it would not fit.
    fn place_candidate(&mut self, upper: &[u8], pages: &mut PageWriter) -> Result<()> {
        let entry = SLOT_BYTES + self.cand_key.len() + self.cand_value.len();
        let leaf = &self.levels[0];
        if !leaf.entries.is_empty() && !self.fits(leaf.bytes_with(upper, 1, entry)) {
            // The leaf as it is was checked with the separator between its
            // last key and the candidate when that key was placed.
            let last = leaf.entries.len() - 1;
            let sep = shortest_separator(leaf.key(last), &self.cand_key);
            self.close(0, &sep, pages)?;
        }
        let leaf = &mut self.levels[0];
        leaf.push_entry(&self.cand_key, &self.cand_value);
        leaf.entry_bytes += entry;
        self.records += 1;
        Ok(())
    }

    /// Closes level `level`'s node with upper fence `upper`: writes it to
    /// a new page and adds that page to the level above.
    fn close(&mut self, level: usize, upper: &[u8], pages: &mut PageWriter) -> Result<()> {
        let (pid, page) = pages.page()?;
        self.levels[level].write_node(page, upper)?;
        seal_page(page, pid);
        if self.levels[level].leaf {
            self.leaves += 1;
        } else {
            self.inner_nodes += 1;
        }
        self.levels[level].closed += 1;
        self.levels[level].clear(upper);
        self.add_child(level + 1, upper, pid, pages)
    }

    /// Adds child `pid` with upper fence `upper` to level `level`.
    fn add_child(
        &mut self,
        level: usize,
        upper: &[u8],
        pid: PageId,
        pages: &mut PageWriter,
    ) -> Result<()> {
        if level == self.levels.len() {
            self.levels.push(Level::new(false));
        }
        let node = &self.levels[level];
        if !node.entries.is_empty() {
            // The current upper child becomes an entry keyed by its upper
            // fence, and this child the upper child.
            let last = node.entries.len() - 1;
            let entry = SLOT_BYTES + node.key(last).len() + 8;
            if !self.fits(node.bytes_with(upper, 1, entry)) {
                let node_upper = node.key(last).to_vec();
                self.close(level, &node_upper, pages)?;
            } else {
                self.levels[level].entry_bytes += entry;
            }
        }
        self.levels[level].push_entry(upper, &pid.to_le_bytes());
        Ok(())
    }

    /// Places the last record and closes every level; returns the top
    /// node's image (None: no records).
    fn finish(&mut self, pages: &mut PageWriter) -> Result<Option<Box<[u8; PAGE_SIZE]>>> {
        if !self.has_cand {
            return Ok(None);
        }
        self.place_candidate(&[], pages)?;
        self.has_cand = false;
        let mut level = 0;
        loop {
            let node = &self.levels[level];
            if node.closed == 0 && level + 1 == self.levels.len() {
                // The only node of the top level: the root.
                let mut image = Box::new([0u8; PAGE_SIZE]);
                node.write_node(&mut image, &[])?;
                if node.leaf {
                    self.leaves += 1;
                } else {
                    self.inner_nodes += 1;
                }
                return Ok(Some(image));
            }
            self.close(level, &[], pages)?;
            level += 1;
        }
    }
}

/// [`shortest_separator`] into `out`, without allocating.
fn separator_into(left: &[u8], right: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let common = common_prefix_len(left, right);
    if right.len() > common + 1 {
        out.extend_from_slice(&right[..common + 1]);
    } else {
        out.extend_from_slice(left);
    }
    debug_assert_eq!(*out, shortest_separator(left, right));
}

/// Writes through one I/O channel with a few buffers in flight.
struct Pipe {
    channel: IoChannel,
    /// Buffers not in flight.
    idle: Vec<AlignedBuf>,
    /// Buffers in flight, by `user_data`.
    busy: Vec<Option<AlignedBuf>>,
    done: Vec<IoCompletion>,
    buf_bytes: usize,
}

impl Pipe {
    fn new(storage: Arc<Storage>, in_flight: usize, buf_bytes: usize) -> Result<Pipe> {
        let depth = in_flight as u32;
        let channel = if storage.is_simulated() {
            IoChannel::blocking(storage, depth)?
        } else {
            let config = IoConfig {
                backend: BackendKind::IoUring,
                depth,
                register_buffers: false,
                ..IoConfig::default()
            };
            match IoChannel::new(storage.clone(), &config) {
                Ok(c) => c,
                Err(_) => IoChannel::blocking(storage, depth)?,
            }
        };
        Ok(Pipe {
            channel,
            idle: (0..in_flight + 1)
                .map(|_| AlignedBuf::new(buf_bytes))
                .collect(),
            busy: (0..in_flight).map(|_| None).collect(),
            done: Vec::new(),
            buf_bytes,
        })
    }

    /// A buffer to fill (waits for a write to finish when all are busy).
    fn buffer(&mut self) -> Result<AlignedBuf> {
        loop {
            if let Some(buf) = self.idle.pop() {
                return Ok(buf);
            }
            if self.busy.iter().all(Option::is_none) {
                // Every buffer is out with the caller: one more.
                return Ok(AlignedBuf::new(self.buf_bytes));
            }
            self.reap(1)?;
        }
    }

    /// Hands a buffer back unused.
    fn give_back(&mut self, buf: AlignedBuf) {
        if buf.len() == self.buf_bytes {
            self.idle.push(buf);
        }
    }

    /// Writes `len` bytes of `buf` with the request `make(ptr, user_data)`.
    fn push(
        &mut self,
        mut buf: AlignedBuf,
        len: usize,
        make: impl FnOnce(*const u8, u64) -> IoRequest,
    ) -> Result<()> {
        debug_assert!(len <= buf.len());
        let slot = loop {
            if let Some(slot) = self.busy.iter().position(Option::is_none) {
                break slot;
            }
            self.reap(1)?;
        };
        let req = make(buf.as_mut_ptr(), slot as u64);
        // SAFETY: the buffer is kept in `busy[slot]` (moving an AlignedBuf
        // does not move its bytes) until the completion with this slot's
        // user_data is reaped, and the channel is drained before the pipe
        // drops (`drain`, and `Drop` of the channel waits for the rest).
        unsafe { self.channel.push(req) }.map_err(Error::Io)?;
        self.busy[slot] = Some(buf);
        self.channel.submit()?;
        Ok(())
    }

    /// Waits for at least `min` completions and frees their buffers.
    fn reap(&mut self, min: usize) -> Result<()> {
        self.done.clear();
        self.channel.wait(min, &mut self.done)?;
        let mut first_error = None;
        for c in self.done.drain(..) {
            if let Some(buf) = self.busy[c.user_data as usize].take() {
                self.idle.push(buf);
            }
            if let Err(e) = c.result {
                first_error.get_or_insert(Error::Io(e));
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for every write in flight.
    fn drain(&mut self) -> Result<()> {
        while self.busy.iter().any(Option::is_some) {
            self.reap(1)?;
        }
        Ok(())
    }
}

/// The store's temporary space: its devices in order (files grow; regions
/// have a size), addressed as one run of bytes.
pub(crate) struct TempSpace {
    storage: Arc<Storage>,
    /// (storage device index, bytes: None = a file that grows).
    devices: Vec<(usize, Option<u64>)>,
    /// Bytes used from the start.
    end: u64,
    /// The largest end reached (what to give back).
    high: u64,
    pipe: Option<Pipe>,
    written: u64,
}

impl TempSpace {
    fn new(storage: Arc<Storage>, devices: Vec<(usize, Option<u64>)>) -> TempSpace {
        TempSpace {
            storage,
            devices,
            end: 0,
            high: 0,
            pipe: None,
            written: 0,
        }
    }

    fn pipe(&mut self) -> Result<&mut Pipe> {
        if self.pipe.is_none() {
            self.pipe = Some(Pipe::new(
                self.storage.clone(),
                TEMP_WRITES_IN_FLIGHT,
                TEMP_IO_BYTES,
            )?);
        }
        Ok(self.pipe.as_mut().expect("set"))
    }

    fn buffer(&mut self) -> Result<AlignedBuf> {
        self.pipe()?.buffer()
    }

    fn give_back(&mut self, buf: AlignedBuf) {
        if let Some(pipe) = &mut self.pipe {
            pipe.give_back(buf);
        }
    }

    fn drain(&mut self) -> Result<()> {
        match &mut self.pipe {
            Some(pipe) => pipe.drain(),
            None => Ok(()),
        }
    }

    /// Where temp byte `offset` lies: (storage device, device offset,
    /// bytes left on that device).
    fn place(&self, offset: u64) -> Result<(usize, u64, u64)> {
        let mut at = offset;
        for &(device, bytes) in &self.devices {
            match bytes {
                None => return Ok((device, at, u64::MAX)),
                Some(b) if at < b => return Ok((device, at, b - at)),
                Some(b) => at -= b,
            }
        }
        let total: u64 = self.devices.iter().filter_map(|d| d.1).sum();
        Err(Error::Full(format!(
            "bulk load: the store's temporary space ({total} bytes, set when the store was created: Options::temp_region_bytes) is too small to sort the records; load fewer at a time or give more sort memory"
        )))
    }

    /// Writes `len` bytes (a multiple of the page size) of `buf` at temp
    /// offset `offset`.
    fn write(&mut self, offset: u64, buf: AlignedBuf, len: usize) -> Result<()> {
        let (device, at, left) = self.place(offset)?;
        if (len as u64) > left {
            // Across two regions: split (rare; regions are large).
            let first = left as usize;
            let mut rest = self.buffer()?;
            rest[..len - first].copy_from_slice(&buf[first..len]);
            self.write_one(device, at, buf, first)?;
            return self.write(offset + first as u64, rest, len - first);
        }
        self.write_one(device, at, buf, len)?;
        self.high = self.high.max(offset + len as u64);
        Ok(())
    }

    fn write_one(&mut self, device: usize, at: u64, buf: AlignedBuf, len: usize) -> Result<()> {
        self.written += len as u64;
        self.pipe()?.push(buf, len, |ptr, ud| {
            IoRequest::write_file(device, at, ptr, len as u32, ud).with_class(WriteClass::Temp)
        })
    }

    fn reader(&mut self) -> Result<TempReader> {
        // Every run is written before it is read.
        self.drain()?;
        Ok(TempReader {
            channel: IoChannel::blocking(self.storage.clone(), 1)?,
            devices: self.devices.clone(),
        })
    }

    /// Gives the space used back to the devices.
    fn release(&mut self) -> Result<()> {
        let drained = self.drain();
        self.pipe = None;
        let mut left = self.high;
        let mut result = drained;
        for &(device, bytes) in &self.devices {
            if left == 0 {
                break;
            }
            let used = bytes.map_or(left, |b| b.min(left));
            if let Err(e) = self.storage.release_temp(device, used) {
                result = result.and(Err(e));
            }
            left -= used;
        }
        self.high = 0;
        self.end = 0;
        result
    }
}

/// Reads runs back (one request at a time).
struct TempReader {
    channel: IoChannel,
    devices: Vec<(usize, Option<u64>)>,
}

impl TempReader {
    fn read(&mut self, offset: u64, buf: &mut AlignedBuf, len: usize) -> Result<()> {
        let mut done = 0usize;
        while done < len {
            let mut at = offset + done as u64;
            let mut found = None;
            for &(device, bytes) in &self.devices {
                match bytes {
                    None => {
                        found = Some((device, at, u64::MAX));
                        break;
                    }
                    Some(b) if at < b => {
                        found = Some((device, at, b - at));
                        break;
                    }
                    Some(b) => at -= b,
                }
            }
            let (device, at, left) = found.ok_or_else(|| {
                Error::Corrupt("bulk load: a run lies past the temporary space".into())
            })?;
            let n = ((len - done) as u64).min(left) as usize;
            let len_io = n.next_multiple_of(PAGE_SIZE);
            // SAFETY: `buf` is ours, at least `done + len_io` bytes (runs
            // are page multiples and `len` is one, or the buffer's end),
            // and `run` completes the request before returning.
            let req = IoRequest::read_file(
                device,
                at,
                // SAFETY: `done` is within the buffer.
                unsafe { buf.as_mut_ptr().add(done) },
                len_io as u32,
                0,
            );
            // SAFETY: as above.
            unsafe { self.channel.run(req) }?;
            done += n;
        }
        Ok(())
    }
}
