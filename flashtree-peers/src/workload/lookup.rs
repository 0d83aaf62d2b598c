//! Random point lookups as in Haas & Leis (VLDB 2023) §4.1: 8-byte big-endian keys
//! `0..records`, 120-byte values, keys uniform or zipfian (scrambled).
//! Every value starts with its key, and every lookup checks that.

use super::{load_records, OpKind, TaskState};
use crate::job::RunControl;
use crate::kv::{Kv, KvError};
use crate::rng::Zipf;

/// Key size of the lookup benchmark.
pub const KEY_BYTES: usize = 8;
/// Value size of the lookup benchmark.
pub const VALUE_BYTES: usize = 120;

/// How lookup keys are drawn.
#[derive(Debug, Clone)]
pub enum KeyDistribution {
    /// Every key equally likely.
    Uniform,
    /// Zipfian with the given skew, scrambled over the key space.
    Zipf(Zipf),
}

/// The lookup workload.
#[derive(Debug)]
pub struct Lookup {
    records_count: u64,
    distribution: KeyDistribution,
}

impl Lookup {
    /// `zipf_theta` None: uniform keys.
    pub fn new(records_count: u64, zipf_theta: Option<f64>) -> Result<Self, String> {
        if records_count == 0 {
            return Err("lookup needs at least 1 record".into());
        }
        let distribution = match zipf_theta {
            None => KeyDistribution::Uniform,
            Some(theta) => KeyDistribution::Zipf(Zipf::new(records_count.max(2), theta)?),
        };
        Ok(Lookup {
            records_count,
            distribution,
        })
    }
    /// Records loaded.
    pub fn records_count(&self) -> u64 {
        self.records_count
    }
    /// Key + value bytes loaded.
    pub fn dataset_bytes(&self) -> u64 {
        self.records_count * (KEY_BYTES + VALUE_BYTES) as u64
    }
    /// Inserts keys of part `part` in ascending order.
    pub async fn load_part<K: Kv>(
        &self,
        kv: &K,
        part: usize,
        parts: usize,
        control: &RunControl,
    ) -> Result<u64, KvError> {
        let key_of = |key: u64| key.to_be_bytes();
        load_records(
            kv,
            self.records_count,
            VALUE_BYTES,
            part,
            parts,
            control,
            0,
            key_of,
        )
        .await
    }
    /// One lookup; a missing key or a wrong value is an error.
    pub async fn op<K: Kv>(&self, kv: &K, state: &mut TaskState) -> Result<OpKind, KvError> {
        let key = match &self.distribution {
            KeyDistribution::Uniform => state.rng.below(self.records_count),
            KeyDistribution::Zipf(zipf) => zipf.sample_scrambled(&mut state.rng),
        };
        let key_bytes = key.to_be_bytes();
        if !kv.get(0, &key_bytes, &mut state.out).await? {
            return Err(KvError::Corrupt(format!("lookup key {key} not found")));
        }
        if state.out.len() != VALUE_BYTES || state.out[..KEY_BYTES] != key_bytes {
            return Err(KvError::Corrupt(format!("lookup key {key}: wrong value")));
        }
        Ok(OpKind::Read)
    }
}
