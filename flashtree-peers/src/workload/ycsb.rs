//! YCSB core workloads A–F (Cooper et al., SoCC 2010), as in Xu et al. (SYSTOR 2015):
//!
//! | workload | mix | request distribution |
//! |---|---|---|
//! | A | 50% read, 50% update | zipfian 0.99 |
//! | B | 95% read, 5% update | zipfian 0.99 |
//! | C | 100% read | zipfian 0.99 |
//! | D | 95% read, 5% insert | latest |
//! | E | 95% scan (1..=100 records, uniform), 5% insert | zipfian 0.99 |
//! | F | 50% read, 50% read-modify-write | zipfian 0.99 |
//!
//! Records: 8-byte keys (FNV-hashed record numbers, YCSB's `insertorder=hashed`),
//! values of 1000 bytes (10 fields × 100 bytes) starting with the record
//! number. An update writes the whole record (the KV bindings do the same).
//! Zipfian is scrambled over the records (ScrambledZipfian); "latest" draws
//! a zipfian rank back from the newest inserted record. Reads of a record that
//! a concurrent insert has not finished may miss; they still count.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{fill_value, load_records, OpKind, TaskState};
use crate::job::RunControl;
use crate::kv::{Kv, KvError};
use crate::rng::{fnv1a_u64, Rng64, Zipf};

/// YCSB record value size (10 fields × 100 bytes).
pub const VALUE_BYTES: usize = 1000;
/// YCSB zipfian constant.
pub const ZIPF_THETA: f64 = 0.99;
/// Longest scan in workload E.
pub const SCAN_RECORDS_MAX: u64 = 100;

/// Which core workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YcsbKind {
    /// Update heavy.
    A,
    /// Read mostly.
    B,
    /// Read only.
    C,
    /// Read latest.
    D,
    /// Short ranges.
    E,
    /// Read-modify-write.
    F,
}

impl YcsbKind {
    /// Parses "a".."f" (case-insensitive).
    pub fn parse(letter: &str) -> Result<Self, String> {
        match letter.to_ascii_lowercase().as_str() {
            "a" => Ok(YcsbKind::A),
            "b" => Ok(YcsbKind::B),
            "c" => Ok(YcsbKind::C),
            "d" => Ok(YcsbKind::D),
            "e" => Ok(YcsbKind::E),
            "f" => Ok(YcsbKind::F),
            other => Err(format!(
                "unknown YCSB workload {other:?}: use a, b, c, d, e or f"
            )),
        }
    }
    /// Lower-case letter.
    pub fn letter(self) -> char {
        match self {
            YcsbKind::A => 'a',
            YcsbKind::B => 'b',
            YcsbKind::C => 'c',
            YcsbKind::D => 'd',
            YcsbKind::E => 'e',
            YcsbKind::F => 'f',
        }
    }
    /// (operation, percent) pairs; percents add up to 100.
    pub fn mix(self) -> &'static [(OpKind, u64)] {
        match self {
            YcsbKind::A => &[(OpKind::Read, 50), (OpKind::Update, 50)],
            YcsbKind::B => &[(OpKind::Read, 95), (OpKind::Update, 5)],
            YcsbKind::C => &[(OpKind::Read, 100)],
            YcsbKind::D => &[(OpKind::Read, 95), (OpKind::Insert, 5)],
            YcsbKind::E => &[(OpKind::Scan, 95), (OpKind::Insert, 5)],
            YcsbKind::F => &[(OpKind::Read, 50), (OpKind::ReadModifyWrite, 50)],
        }
    }
}

/// A YCSB workload with its shared insert counter.
#[derive(Debug)]
pub struct Ycsb {
    kind: YcsbKind,
    records_count: u64,
    zipf: Zipf,
    /// Next record number to insert (starts at `records_count`).
    insert_next: AtomicU64,
}

/// The key of record number `record`.
pub fn record_key(record: u64) -> [u8; 8] {
    fnv1a_u64(record).to_be_bytes()
}

impl Ycsb {
    /// A workload over `records_count` loaded records.
    pub fn new(kind: YcsbKind, records_count: u64) -> Result<Self, String> {
        if records_count < 2 {
            return Err("YCSB needs at least 2 records".into());
        }
        let zipf = Zipf::new(records_count, ZIPF_THETA)?;
        Ok(Ycsb {
            kind,
            records_count,
            zipf,
            insert_next: AtomicU64::new(records_count),
        })
    }
    /// Which workload.
    pub fn kind(&self) -> YcsbKind {
        self.kind
    }
    /// Records loaded.
    pub fn records_count(&self) -> u64 {
        self.records_count
    }
    /// Key + value bytes loaded.
    pub fn dataset_bytes(&self) -> u64 {
        self.records_count * (8 + VALUE_BYTES) as u64
    }
    /// Key + value bytes of the records `0..` the loader and the runs'
    /// inserts have written so far (every record has an 8-byte key and a
    /// value of `VALUE_BYTES`; updates and read-modify-writes keep the
    /// value's length, and nothing is deleted).
    pub fn inserted_bytes(&self) -> u64 {
        self.insert_next.load(Ordering::Relaxed) * (8 + VALUE_BYTES) as u64
    }
    /// Inserts records of part `part`.
    pub async fn load_part<K: Kv>(
        &self,
        kv: &K,
        part: usize,
        parts: usize,
        control: &RunControl,
    ) -> Result<u64, KvError> {
        let (count, salt) = (self.records_count, 0x5EED);
        load_records(
            kv,
            count,
            VALUE_BYTES,
            part,
            parts,
            control,
            salt,
            record_key,
        )
        .await
    }
    /// Draws the operation kind from the mix.
    pub fn choose_op(&self, rng: &mut Rng64) -> OpKind {
        let mut draw = rng.below(100);
        for &(kind, percent) in self.kind.mix() {
            if draw < percent {
                return kind;
            }
            draw -= percent;
        }
        self.kind.mix()[0].0
    }
    fn choose_record(&self, rng: &mut Rng64) -> u64 {
        let inserted = self.insert_next.load(Ordering::Relaxed);
        match self.kind {
            YcsbKind::D => {
                let back = self.zipf.sample(rng);
                (inserted - 1).saturating_sub(back)
            }
            _ => self.zipf.sample_scrambled(rng) % inserted,
        }
    }
    /// One operation of the mix.
    pub async fn op<K: Kv>(&self, kv: &K, state: &mut TaskState) -> Result<OpKind, KvError> {
        let kind = self.choose_op(&mut state.rng);
        match kind {
            OpKind::Read => {
                let record = self.choose_record(&mut state.rng);
                kv.get(0, &record_key(record), &mut state.out).await?;
            }
            OpKind::Update => {
                let record = self.choose_record(&mut state.rng);
                fill_value(&mut state.value, record, VALUE_BYTES, &mut state.rng);
                kv.put(0, &record_key(record), &state.value).await?;
            }
            OpKind::Insert => {
                let record = self.insert_next.fetch_add(1, Ordering::Relaxed);
                fill_value(&mut state.value, record, VALUE_BYTES, &mut state.rng);
                kv.put(0, &record_key(record), &state.value).await?;
            }
            OpKind::Scan => {
                let record = self.choose_record(&mut state.rng);
                let records_max = state.rng.range(1, SCAN_RECORDS_MAX);
                let mut seen = 0u64;
                kv.scan_expecting(
                    0,
                    &record_key(record),
                    records_max as usize,
                    &mut |_key, _value| {
                        seen += 1;
                        seen < records_max
                    },
                )
                .await?;
            }
            OpKind::ReadModifyWrite => {
                let record = self.choose_record(&mut state.rng);
                let key = record_key(record);
                if kv.get(0, &key, &mut state.out).await? {
                    state.value.clear();
                    state.value.extend_from_slice(&state.out);
                    let field_at = 8 + 100 * state.rng.below(9) as usize;
                    let field_end = (field_at + 100).min(state.value.len());
                    for byte in state.value.get_mut(field_at..field_end).unwrap_or_default() {
                        *byte = byte.wrapping_add(1);
                    }
                    kv.put(0, &key, &state.value).await?;
                }
            }
            _ => return Err(KvError::Corrupt(format!("YCSB mix has no {}", kind.name()))),
        }
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_add_up_to_100() {
        for letter in ["a", "b", "c", "d", "e", "f"] {
            let kind = YcsbKind::parse(letter).unwrap();
            let total: u64 = kind.mix().iter().map(|(_, percent)| percent).sum();
            assert_eq!(total, 100, "workload {letter}");
        }
        assert!(YcsbKind::parse("g").is_err());
    }

    #[test]
    fn choose_op_follows_the_mix() {
        let ycsb = Ycsb::new(YcsbKind::B, 1000).unwrap();
        let mut rng = Rng64::new(3);
        let draws = 100_000;
        let updates = (0..draws)
            .filter(|_| ycsb.choose_op(&mut rng) == OpKind::Update)
            .count();
        let share = updates as f64 / draws as f64;
        assert!((share - 0.05).abs() < 0.005, "update share {share}");
    }
}
