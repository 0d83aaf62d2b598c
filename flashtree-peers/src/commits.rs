//! Counting commits: [`CountCommits`] wraps a task's [`Kv`] handle in timed
//! runs and records, per commit (a single put or delete, or a
//! [`Kv::commit`] of a batch), its latency and the user bytes it writes
//! (keys and values) into the thread's [`crate::job::TaskStats`]. The same
//! wrapper runs on every engine, so commits/s, commit latency and write
//! amplification are counted alike.

use std::time::Instant;

use crate::kv::{GetManyFn, Kv, KvBatch, KvError, ScanFn};

/// A handle that counts the commits made through it (see the module docs).
pub struct CountCommits<'a, K: Kv> {
    inner: &'a K,
}

impl<'a, K: Kv> CountCommits<'a, K> {
    /// Wraps `inner`.
    pub fn new(inner: &'a K) -> Self {
        CountCommits { inner }
    }
}

impl<K: Kv> Kv for CountCommits<'_, K> {
    async fn get(&self, table: u32, key: &[u8], out: &mut Vec<u8>) -> Result<bool, KvError> {
        self.inner.get(table, key, out).await
    }
    async fn put(&self, table: u32, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        let began = Instant::now();
        self.inner.put(table, key, value).await?;
        crate::job::thread_stats_record_commit(began.elapsed(), (key.len() + value.len()) as u64);
        Ok(())
    }
    async fn delete(&self, table: u32, key: &[u8]) -> Result<bool, KvError> {
        let began = Instant::now();
        let existed = self.inner.delete(table, key).await?;
        crate::job::thread_stats_record_commit(began.elapsed(), key.len() as u64);
        Ok(existed)
    }
    async fn commit(&self, batch: &KvBatch) -> Result<(), KvError> {
        let began = Instant::now();
        self.inner.commit(batch).await?;
        crate::job::thread_stats_record_commit(began.elapsed(), batch.data_bytes() as u64);
        Ok(())
    }
    async fn commit_releasing(
        &self,
        batch: &KvBatch,
        applied: &mut dyn FnMut(),
    ) -> Result<(), KvError> {
        let began = Instant::now();
        self.inner.commit_releasing(batch, applied).await?;
        crate::job::thread_stats_record_commit(began.elapsed(), batch.data_bytes() as u64);
        Ok(())
    }
    async fn scan(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        self.inner.scan(table, start, f).await
    }
    async fn scan_expecting(
        &self,
        table: u32,
        start: &[u8],
        entries_expected: usize,
        f: &mut ScanFn<'_>,
    ) -> Result<(), KvError> {
        self.inner
            .scan_expecting(table, start, entries_expected, f)
            .await
    }
    async fn scan_rev(&self, table: u32, start: &[u8], f: &mut ScanFn<'_>) -> Result<(), KvError> {
        self.inner.scan_rev(table, start, f).await
    }
    async fn get_many(
        &self,
        table: u32,
        keys: &[Vec<u8>],
        found: &mut GetManyFn<'_>,
    ) -> Result<(), KvError> {
        self.inner.get_many(table, keys, found).await
    }
    fn page_reads(&self) -> Option<u64> {
        self.inner.page_reads()
    }
    async fn wait_busy(&self) {
        self.inner.wait_busy().await
    }
    async fn idle_until(&self, deadline: Instant) {
        self.inner.idle_until(deadline).await
    }
}
