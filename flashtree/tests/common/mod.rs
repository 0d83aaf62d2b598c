//! What the crash, fault and damage tests share: the model of a store's
//! contents and the batches applied to it.
// Each test binary uses its own part of this module.
#![allow(dead_code)]

use flashtree::db::{Db, ScanDirection, Tree};
use std::collections::BTreeMap;

/// Per tree, key → value.
pub type Model = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;
/// (tree, key, value or delete).
pub type Batch = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

/// Applies `batch` to `model`.
pub fn apply(model: &mut Model, batch: &Batch) {
    for (tree, key, value) in batch {
        match value {
            Some(v) => model[*tree].insert(key.clone(), v.clone()),
            None => model[*tree].remove(key),
        };
    }
}

/// The trees `t0`, `t1`, … of a store, `count` of them (created if new).
pub fn trees(db: &Db, count: usize) -> flashtree::Result<Vec<Tree>> {
    (0..count).map(|t| db.tree(&format!("t{t}"))).collect()
}

/// Everything `trees` hold.
pub fn contents(db: &Db, trees: &[Tree]) -> flashtree::Result<Model> {
    trees
        .iter()
        .map(|&t| db.range(t, None, ScanDirection::Forward).collect())
        .collect()
}
