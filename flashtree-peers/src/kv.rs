//! The key-value interface every workload is written against, once.
//!
//! Contract: a [`Kv`] is a per-thread (peer engines) or per-task (flashtree)
//! handle. Methods take `&self`; a handle is never shared between threads.
//! Keys compare as unsigned bytes (memcmp, shorter prefix first) in every
//! engine. Tables are small integers `0..table_count` created at open.
//!
//! Peer engines complete every call synchronously inside the `async fn`; they
//! are driven by [`block_on`], which treats `Pending` as "yield the thread".

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::Instant;

/// What went wrong in an engine call.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The engine reported an error; the text is the engine's message.
    #[error("{engine}: {message}")]
    Engine {
        /// Engine name, e.g. "rocksdb".
        engine: &'static str,
        /// The engine's own message.
        message: String,
    },
    /// The table id is not one created at open.
    #[error("table {table} does not exist (engine opened with {table_count} tables)")]
    NoSuchTable {
        /// Requested table.
        table: u32,
        /// Tables created at open.
        table_count: u32,
    },
    /// A key or value larger than the engine or workload allows.
    #[error("{what} of {len_bytes} bytes exceeds the limit of {limit_bytes} bytes")]
    TooLarge {
        /// "key" or "value".
        what: &'static str,
        /// Offending length.
        len_bytes: usize,
        /// Limit.
        limit_bytes: usize,
    },
    /// The workload found data that contradicts what it wrote.
    #[error("workload data error: {0}")]
    Corrupt(String),
}

/// Callback for scans: receives key and value, returns `false` to stop.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> bool + 'a;

/// Callback for [`Kv::get_many`]: receives the key's index in the batch and
/// its value (`None`: absent).
pub type GetManyFn<'a> = dyn FnMut(usize, Option<&[u8]>) + 'a;

/// Puts and deletes over any tables, committed together by [`Kv::commit`]:
/// after a crash either all of them are there or none is. A key appears at
/// most once per batch (engines differ in what a repeat would mean; the
/// workloads never repeat one). Keys and values live in one buffer, so a
/// reused batch allocates nothing.
#[derive(Debug, Default, Clone)]
pub struct KvBatch {
    bytes: Vec<u8>,
    entries: Vec<BatchEntry>,
}

#[derive(Debug, Clone, Copy)]
struct BatchEntry {
    table: u32,
    key_end: usize,
    /// End of the value in `bytes` (it starts at `key_end`); None: a delete.
    value_end: Option<usize>,
}

/// One entry of a [`KvBatch`]: its table, key and value (None: a delete).
pub type BatchItem<'a> = (u32, &'a [u8], Option<&'a [u8]>);

impl KvBatch {
    /// An empty batch.
    pub fn new() -> KvBatch {
        KvBatch::default()
    }
    /// Adds: set `key` in `table` to `value`.
    pub fn put(&mut self, table: u32, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.entries.push(BatchEntry {
            table,
            key_end,
            value_end: Some(self.bytes.len()),
        });
    }
    /// Adds: remove `key` from `table` (nothing if it is absent).
    pub fn delete(&mut self, table: u32, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.entries.push(BatchEntry {
            table,
            key_end: self.bytes.len(),
            value_end: None,
        });
    }
    /// Entries in the batch.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True if the batch has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Bytes of keys and values in the batch (the user data it writes).
    pub fn data_bytes(&self) -> usize {
        self.bytes.len()
    }
    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
    }
    /// The entries in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = BatchItem<'_>> + '_ {
        let mut start = 0;
        self.entries.iter().map(move |entry| {
            let key = &self.bytes[start..entry.key_end];
            let value = entry.value_end.map(|end| &self.bytes[entry.key_end..end]);
            start = entry.value_end.unwrap_or(entry.key_end);
            (entry.table, key, value)
        })
    }
}

/// One engine handle. Implemented by every peer adapter and by flashtree.
///
/// Durability: single `put`s and `delete`s commit on their own, and
/// [`Kv::commit`] commits a batch; either returns once the change is as
/// durable as the engine's [`crate::engine::DurabilityMode`] says.
#[allow(async_fn_in_trait)]
pub trait Kv {
    /// Reads `key` into `out` (cleared first). Returns whether it exists.
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError>;
    /// Inserts or overwrites `key`.
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError>;
    /// Removes `key`. Returns whether it existed.
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError>;
    /// Applies every entry of `batch` atomically (all or none, also across
    /// a crash), as durable as the engine's mode says when it returns.
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError>;
    /// [`Kv::commit`] with early lock release: calls `applied()` once the
    /// batch's writes are visible to other handles but possibly before
    /// they are durable, then returns once they are as durable as the mode
    /// says. Locks a caller releases in `applied` let the next transaction
    /// run while this one's log sync is in flight (Johnson et al., "Aether:
    /// A Scalable Approach to Logging", VLDB 2010). An engine overrides
    /// this only where a later commit that saw these writes cannot become
    /// durable before them (one log in commit order; flashtree's global
    /// log order). The default commits, then calls `applied()`.
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        let result = self.commit(batch).await;
        applied();
        result
    }
    /// Forward scan from `start` (inclusive) in key order; `f` returns false to stop.
    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError>;
    /// [`Kv::scan`] by a caller that expects about `entries_expected`
    /// entries (a scan with a limit, as YCSB-E's): an engine may read
    /// ahead what they need (flashtree's `TaskCtx::scan_expecting`; the
    /// others keep their own read-ahead). The default ignores the hint.
    async fn scan_expecting(
        &self,
        table: u32,
        start: &[u8],
        entries_expected: usize,
        f: &mut ScanFn<'_>,
    ) -> Result<(), KvError> {
        let _ = entries_expected;
        self.scan(table, start, f).await
    }
    /// Backward scan from `start` (inclusive): the greatest key <= `start` first.
    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError>;
    /// Reads every key of `keys` in `table` and calls `found(index, value)`
    /// once per key (`None`: absent), in any order. Engines with a batched
    /// read override it (flashtree reads the missed pages concurrently);
    /// the default reads the keys one by one. (RocksDB keeps the default:
    /// its `MultiGet` read more blocks; see `docs/ARCHITECTURE.md`.)
    async fn get_many(
        &self,
        table: u32,
        keys: &[Vec<u8>],
        found: &mut GetManyFn<'_>,
    ) -> Result<(), KvError> {
        let mut out = Vec::new();
        for (index, key) in keys.iter().enumerate() {
            let present = self.get(table, key, &mut out).await?;
            found(index, present.then_some(&out[..]));
        }
        Ok(())
    }
    /// Pages this handle has read from the device so far, for engines that
    /// count them per handle (flashtree: per task); None otherwise. The
    /// harness reports page reads per operation kind from it.
    fn page_reads(&self) -> Option<u64> {
        None
    }
    /// Waits a moment for something another handle holds (the workloads'
    /// try-lock loops call it while a lock is taken). The default yields
    /// once; an executor that can sleep while all its ready tasks wait this
    /// way overrides it (flashtree: `sched::yield_busy`).
    async fn wait_busy(&self) {
        yield_now().await;
    }
    /// Waits until `deadline` (open-loop pacing). The default yields in a
    /// loop: it works on any executor but keeps a core busy, so the CPU an
    /// open loop reports would be the generator's. Thread-based handles
    /// sleep the thread ([`crate::engine::sleep_until`]); an executor with a
    /// timer parks the task on it (flashtree: `sched::sleep_until`).
    async fn idle_until(&self, deadline: Instant) {
        while Instant::now() < deadline {
            yield_now().await;
        }
    }
}

/// A future that returns `Pending` once (waking itself), then `Ready`.
/// Used by workloads for try-lock loops and pacing.
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// See [`yield_now`].
#[derive(Debug)]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn noop_raw_waker() -> RawWaker {
    fn clone(_: *const ()) -> RawWaker {
        noop_raw_waker()
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    RawWaker::new(std::ptr::null(), &VTABLE)
}

/// Runs a future to completion on the current thread. `Pending` means
/// "yield": the thread yields to the OS scheduler and polls again.
pub fn block_on<F: Future>(future: F) -> F::Output {
    // SAFETY: the vtable functions do nothing and never dereference the data pointer.
    let waker = unsafe { Waker::from_raw(noop_raw_waker()) };
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::yield_now(),
        }
    }
}

/// Checks `table < table_count`.
pub fn check_table(table: u32, table_count: u32) -> Result<(), KvError> {
    if table < table_count {
        Ok(())
    } else {
        Err(KvError::NoSuchTable { table, table_count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_hands_back_its_entries_in_order() {
        let mut batch = KvBatch::new();
        batch.put(1, b"k1", b"value");
        batch.delete(0, b"gone");
        batch.put(2, b"", b"");
        batch.put(0, b"k2", b"v2");
        let entries: Vec<BatchItem<'_>> = batch.iter().collect();
        assert_eq!(
            entries,
            vec![
                (1, &b"k1"[..], Some(&b"value"[..])),
                (0, &b"gone"[..], None),
                (2, &b""[..], Some(&b""[..])),
                (0, &b"k2"[..], Some(&b"v2"[..])),
            ]
        );
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.data_bytes(), 2 + 5 + 4 + 4);
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(batch.iter().count(), 0);
    }

    #[test]
    fn block_on_survives_pending() {
        let value = block_on(async {
            yield_now().await;
            yield_now().await;
            7
        });
        assert_eq!(value, 7);
    }
}
