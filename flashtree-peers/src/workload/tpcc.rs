//! stub
use super::*;
/// x
pub const TABLE_COUNT: u32 = 11;
/// x
#[derive(Debug)]
pub struct Tpcc;
/// x
#[derive(Debug)]
pub struct TpccTask;
impl Tpcc {
    /// x
    pub fn records_count(&self) -> u64 {
        0
    }
    /// x
    pub fn dataset_bytes(&self) -> u64 {
        0
    }
    /// x
    pub fn task(&self, _i: usize, _n: usize) -> TpccTask {
        TpccTask
    }
    /// x
    pub async fn load_part<K: Kv>(
        &self,
        _kv: &K,
        _p: usize,
        _n: usize,
        _c: &RunControl,
    ) -> Result<u64, KvError> {
        Ok(0)
    }
    /// x
    pub async fn op<K: Kv>(&self, _kv: &K, _s: &mut TaskState) -> Result<OpKind, KvError> {
        Ok(OpKind::NewOrder)
    }
    /// x
    pub async fn check<K: Kv>(&self, _kv: &K) -> Result<(), KvError> {
        Ok(())
    }
}
