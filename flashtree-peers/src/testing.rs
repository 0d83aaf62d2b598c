//! A model test any engine can run: random gets, puts, deletes and scans in
//! both directions, checked against a `BTreeMap`. Used by this crate's
//! adapter tests; the flashtree adapter can call [`model_check`] too.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::kv::{Kv, KvBatch};
use crate::rng::Rng64;

/// Longest scan the model compares (entries).
const SCAN_ENTRIES_MAX: usize = 40;

fn random_key(rng: &mut Rng64) -> Vec<u8> {
    // Short keys over a small alphabet, so prefixes and neighbours collide.
    let len = rng.range(1, 6) as usize;
    (0..len)
        .map(|_| b"abcd\x00\xff"[rng.below(6) as usize])
        .collect()
}

fn random_value(rng: &mut Rng64) -> Vec<u8> {
    let len = rng.below(300) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Runs `ops_count` random operations on tables `0..table_count` (at most 2
/// are used) and compares every answer with a model. Returns the first
/// disagreement. The tables must be empty at the start.
pub async fn model_check<K: Kv>(
    kv: &K,
    table_count: u32,
    ops_count: usize,
    seed: u64,
) -> Result<(), String> {
    let tables_used = table_count.min(2);
    let mut models = vec![BTreeMap::<Vec<u8>, Vec<u8>>::new(); tables_used as usize];
    let mut rng = Rng64::new(seed);
    let mut out = Vec::new();
    for op_index in 0..ops_count {
        let table = rng.below(tables_used as u64) as u32;
        let model = &mut models[table as usize];
        let key = random_key(&mut rng);
        let context = |what: &str| format!("op {op_index} ({what}) table {table} key {key:?}");
        match rng.below(10) {
            3 => {
                // A batch over both tables: puts and deletes of distinct
                // keys, committed together.
                let mut batch = KvBatch::new();
                let mut keys_in_batch = std::collections::BTreeSet::new();
                let mut changes = Vec::new();
                for _ in 0..1 + rng.below(6) {
                    let entry_table = rng.below(tables_used as u64) as u32;
                    let entry_key = random_key(&mut rng);
                    if !keys_in_batch.insert((entry_table, entry_key.clone())) {
                        continue;
                    }
                    let value = (rng.below(3) > 0).then(|| random_value(&mut rng));
                    match &value {
                        Some(value) => batch.put(entry_table, &entry_key, value),
                        None => batch.delete(entry_table, &entry_key),
                    }
                    changes.push((entry_table, entry_key, value));
                }
                if rng.below(2) == 0 {
                    kv.commit(&batch)
                        .await
                        .map_err(|e| format!("{}: {e}", context("commit")))?;
                } else {
                    let mut applied = 0;
                    kv.commit_releasing(&batch, &mut || applied += 1)
                        .await
                        .map_err(|e| format!("{}: {e}", context("commit_releasing")))?;
                    if applied != 1 {
                        return Err(format!(
                            "{}: `applied` ran {applied} times",
                            context("commit_releasing")
                        ));
                    }
                }
                for (entry_table, entry_key, value) in changes {
                    let model = &mut models[entry_table as usize];
                    match value {
                        Some(value) => model.insert(entry_key, value),
                        None => model.remove(&entry_key),
                    };
                }
            }
            0..=2 => {
                let value = random_value(&mut rng);
                kv.put(table, &key, &value)
                    .await
                    .map_err(|e| format!("{}: {e}", context("put")))?;
                model.insert(key.clone(), value);
            }
            4 | 5 => {
                let existed = kv
                    .delete(table, &key)
                    .await
                    .map_err(|e| format!("{}: {e}", context("delete")))?;
                if existed != model.remove(&key).is_some() {
                    return Err(format!(
                        "{}: existed = {existed}, model disagrees",
                        context("delete")
                    ));
                }
            }
            7 => {
                // A batch of keys, some repeated, most absent.
                let mut keys = vec![key.clone()];
                for _ in 0..rng.below(8) {
                    keys.push(random_key(&mut rng));
                }
                if rng.below(2) == 0 {
                    keys.push(key.clone());
                }
                let mut answers = vec![None; keys.len()];
                kv.get_many(table, &keys, &mut |index, value| {
                    answers[index] = Some(value.map(<[u8]>::to_vec));
                })
                .await
                .map_err(|e| format!("{}: {e}", context("get_many")))?;
                for (batch_key, answer) in keys.iter().zip(&answers) {
                    let expected = model.get(batch_key);
                    if answer.as_ref() != Some(&expected.cloned()) {
                        return Err(format!(
                            "{}: key {batch_key:?} answered {:?}, model has {:?}",
                            context("get_many"),
                            answer.as_ref().map(|v| v.as_ref().map(Vec::len)),
                            expected.map(|v| v.len())
                        ));
                    }
                }
            }
            6 => {
                let found = kv
                    .get(table, &key, &mut out)
                    .await
                    .map_err(|e| format!("{}: {e}", context("get")))?;
                let expected = model.get(&key);
                if found != expected.is_some() || (found && Some(&out) != expected) {
                    return Err(format!(
                        "{}: found {found}, model has {:?}",
                        context("get"),
                        expected.map(|v| v.len())
                    ));
                }
            }
            8 => check_scan(kv, table, model, &key, false)
                .await
                .map_err(|e| format!("{}: {e}", context("scan")))?,
            _ => check_scan(kv, table, model, &key, true)
                .await
                .map_err(|e| format!("{}: {e}", context("scan_rev")))?,
        }
    }
    Ok(())
}

async fn check_scan<K: Kv>(
    kv: &K,
    table: u32,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    start: &[u8],
    reverse: bool,
) -> Result<(), String> {
    let mut seen: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut visit = |key: &[u8], value: &[u8]| {
        seen.push((key.to_vec(), value.to_vec()));
        seen.len() < SCAN_ENTRIES_MAX
    };
    let result = if reverse {
        kv.scan_rev(table, start, &mut visit).await
    } else {
        kv.scan(table, start, &mut visit).await
    };
    result.map_err(|e| e.to_string())?;
    let expected: Vec<(Vec<u8>, Vec<u8>)> = if reverse {
        let range = model.range::<[u8], _>((Bound::Unbounded, Bound::Included(start)));
        range
            .rev()
            .take(SCAN_ENTRIES_MAX)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        let range = model.range::<[u8], _>((Bound::Included(start), Bound::Unbounded));
        range
            .take(SCAN_ENTRIES_MAX)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if seen != expected {
        let keys = |entries: &[(Vec<u8>, Vec<u8>)]| {
            entries.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()
        };
        return Err(format!(
            "got keys {:?}, model has {:?}",
            keys(&seen),
            keys(&expected)
        ));
    }
    Ok(())
}
