//! Leaf hints: each worker thread remembers, for the keys its point
//! lookups found lately, which leaf held them, and looks there before it
//! descends from the root. Like the adaptive hash index of MySQL's InnoDB,
//! it skips the inner levels for keys that are looked up again and again
//! (a zipfian workload's hot keys); unlike it, it is per thread, takes no
//! latch, and is only a hint: the leaf found through it is trusted only
//! when its own fences cover the key.
//!
//! # Contract
//! * A hint names a tree's root, a leaf, and the count of pages freed in
//!   the pool ([`BufferManager::pages_freed`]) read before the descent
//!   that found the leaf. A page leaves its tree only by being freed, so
//!   while that count is unchanged the leaf is still a page of that tree,
//!   and if it is still a leaf whose fences cover the key, it is the one
//!   leaf of the tree that can hold the key. The count is read again after
//!   the leaf's version was validated (a free counts before its id can be
//!   taken again, so a reader that saw a page reused also sees its free).
//! * A leaf not in memory, not a leaf, not covering the key, or changed
//!   while read: the lookup descends as usual (and records a new hint).
//! * Hints cost a hash, a probe and a store per lookup. Where they rarely
//!   hit (uniform keys over more leaves than the table holds), each
//!   thread stops using them for a while: see [`EPOCH_LOOKUPS`].

use super::tree::racy_node;
use crate::buffer::{BufferManager, PageId};
use std::cell::RefCell;

/// Hints per worker thread (16 bytes each: 128 KiB).
const SLOTS: usize = 8192;
/// Lookups per epoch of the hit count.
pub const EPOCH_LOOKUPS: u32 = 1024;
/// An epoch in which fewer lookups than this found their answer through a
/// hint turns hints off for [`OFF_EPOCHS`] epochs, after which one epoch
/// tries them again (a workload that changes finds them again).
pub const MIN_HITS_PER_EPOCH: u32 = EPOCH_LOOKUPS / 4;
/// Epochs without hints after an epoch with too few hits.
pub const OFF_EPOCHS: u32 = 32;

/// One hint, 16 bytes so that more of the table stays in the core's
/// cache: page ids of 32 bits (a tree or leaf beyond gets no hint) and
/// the low 32 bits of the freed-pages count (the table is emptied when
/// the high bits change, so a count that wrapped cannot look unchanged).
#[derive(Clone, Copy, Default)]
struct Hint {
    /// High bits of the key's hash; 0: empty.
    tag: u32,
    root: u32,
    leaf: u32,
    /// Low bits of [`BufferManager::pages_freed`] before the descent that
    /// found it.
    frees: u32,
}

/// One worker thread's hints and their hit count.
struct LeafHints {
    slots: Vec<Hint>,
    /// The buffer manager whose pages the hints name
    /// ([`BufferManager::instance`]).
    manager: u64,
    /// The high 32 bits of its freed-pages count when the table was
    /// emptied last.
    frees_high: u32,
    lookups: u32,
    hits: u32,
    off_epochs_left: u32,
}

thread_local! {
    static HINTS: RefCell<LeafHints> = const {
        RefCell::new(LeafHints {
            slots: Vec::new(),
            manager: u64::MAX,
            frees_high: 0,
            lookups: 0,
            hits: 0,
            off_epochs_left: 0,
        })
    };
}

/// What [`probe`] found.
pub enum Probe {
    /// The hinted leaf answered: the key was found (its value is in `out`)
    /// or not.
    Answer(bool),
    /// Descend from the root, then [`record`] the leaf with this, if any
    /// (None: hints are off on this thread now).
    Descend(Option<Recorder>),
}

/// Where [`record`] puts the leaf a descent found.
pub struct Recorder {
    slot: usize,
    tag: u32,
    root: u32,
    frees: u64,
    manager: u64,
}

/// A 64-bit hash of `key` in the tree `root` (never 0): 8-byte words
/// multiplied and mixed.
fn tag_of(root: u32, key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = u64::from(root).wrapping_mul(K) ^ key.len() as u64;
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        h = (h ^ word).wrapping_mul(K);
        h ^= h >> 29;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    h ^= h >> 32;
    h.wrapping_mul(K) | 1
}

/// Looks `key` up in tree `root` through this thread's hint for it.
pub fn probe(bm: &BufferManager, root: PageId, key: &[u8], out: &mut Vec<u8>) -> Probe {
    HINTS.with(|hints| {
        let mut h = hints.borrow_mut();
        h.lookups += 1;
        if h.lookups >= EPOCH_LOOKUPS {
            if h.off_epochs_left > 0 {
                h.off_epochs_left -= 1;
            } else if h.hits < MIN_HITS_PER_EPOCH {
                h.off_epochs_left = OFF_EPOCHS;
            }
            h.lookups = 0;
            h.hits = 0;
        }
        if h.off_epochs_left > 0 {
            return Probe::Descend(None);
        }
        let frees = bm.pages_freed();
        let frees_high = (frees >> 32) as u32;
        if h.manager != bm.instance() || h.frees_high != frees_high || h.slots.is_empty() {
            h.slots.clear();
            h.slots.resize(SLOTS, Hint::default());
            h.manager = bm.instance();
            h.frees_high = frees_high;
        }
        let Ok(root) = u32::try_from(root) else {
            return Probe::Descend(None);
        };
        let hash = tag_of(root, key);
        let slot = (hash >> 20) as usize % SLOTS;
        let tag = (hash >> 32) as u32 | 1;
        let hint = h.slots[slot];
        if hint.tag == tag && hint.root == root && hint.frees == frees as u32 {
            if let Some(found) = in_leaf(bm, &hint, key, out, frees) {
                h.hits += 1;
                return Probe::Answer(found);
            }
            out.clear();
        }
        Probe::Descend(Some(Recorder {
            slot,
            tag,
            root,
            frees,
            manager: h.manager,
        }))
    })
}

/// Records that the descent `recorder` came from found `key`'s leaf at
/// `leaf` (validated).
pub fn record(recorder: Recorder, leaf: PageId) {
    let Ok(leaf) = u32::try_from(leaf) else {
        return;
    };
    HINTS.with(|hints| {
        let mut h = hints.borrow_mut();
        // Not into a table emptied since the probe (for another manager
        // or a new high half of the count).
        if h.manager != recorder.manager || h.frees_high != (recorder.frees >> 32) as u32 {
            return;
        }
        if let Some(slot) = h.slots.get_mut(recorder.slot) {
            *slot = Hint {
                tag: recorder.tag,
                root: recorder.root,
                leaf,
                frees: recorder.frees as u32,
            };
        }
    })
}

/// The lookup in the hinted leaf, if it is in memory, still a leaf of the
/// tree, covers `key`, and did not change while read. `frees`: the
/// freed-pages count the hint matched.
fn in_leaf(
    bm: &BufferManager,
    hint: &Hint,
    key: &[u8],
    out: &mut Vec<u8>,
    frees: u64,
) -> Option<bool> {
    let leaf = bm.fix_optimistic(PageId::from(hint.leaf)).ok()?;
    leaf.prefetch();
    let n = racy_node(&leaf);
    if !n.is_leaf() || !n.covers(key) {
        return None;
    }
    let (slot, found) = n.lower_bound(key);
    if found {
        n.value_into(slot, out);
    }
    leaf.check().ok()?;
    // After the validation (see the module's contract).
    (bm.pages_freed() == frees).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_differ_for_keys_that_differ_in_any_byte_or_length_or_tree() {
        let mut seen = std::collections::HashSet::new();
        for len in 0..24usize {
            for byte in 0..len.max(1) {
                let mut key = vec![7u8; len];
                if len > 0 {
                    key[byte] = 8;
                }
                assert_ne!(tag_of(1, &key), 0);
                seen.insert(tag_of(1, &key));
                seen.insert(tag_of(2, &key));
            }
        }
        // 1 key of length 0, then `len` keys of each length, in 2 trees.
        assert_eq!(seen.len(), 2 * (1 + (1..24).sum::<usize>()));
    }
}
