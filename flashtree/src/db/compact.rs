//! [`Db::compact`]: a tree's leaves filled and moved to consecutive page
//! ids in key order (`btree::compact` has the how and the contract).

use super::worker::{run_logged_op, run_op};
use super::{Db, Tree};
use crate::btree::compact::{
    fill_children, leaf_parent, move_children, Fills, Moved, FILLS_PER_STEP, MOVES_PER_STEP,
};
use crate::error::{Error, Result};
use std::time::Instant;

/// What [`Db::compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Parents of leaves visited.
    pub parents: u64,
    /// Of `parents`, those whose leaves were at consecutive ids already.
    pub parents_in_order: u64,
    /// Of `parents`, those whose child list changed while their leaves
    /// moved (a concurrent split or merge): left partly moved.
    pub parents_changed: u64,
    /// Leaves moved.
    pub leaves_moved: u64,
    /// Leaves that took entries from their right neighbour (filling).
    pub leaves_filled: u64,
    /// Leaves whose entries all went to their right neighbour, freed.
    pub leaves_emptied: u64,
    /// Wall time, in microseconds.
    pub micros: u64,
}

impl Db {
    /// Fills the leaves of `tree` and moves them to consecutive page ids in
    /// key order, so that a scan's read-ahead reads neighbouring leaves in
    /// one request each (up to 16 pages, inside one stripe chunk). Random
    /// inserts leave leaves about 85% full and scatter them over the
    /// store; under each parent, a leaf first takes its right neighbour's
    /// first entries while they fit, or gives it all of its own (the
    /// emptied leaf is freed), so a compacted tree has fewer leaves, and
    /// its scans out of memory need several times fewer reads. A filled
    /// leaf splits at its next insert. Runs while other tasks read
    /// and write the tree (a leaf that splits meanwhile leaves its parent
    /// partly moved: `CompactStats::parents_changed`), on one worker.
    ///
    /// Cost: every leaf not full is rewritten and every leaf not in order
    /// is copied once to a new page id (each logged whole when the store
    /// has a log, and written back later), and the store's file grows by that many pages until the old ids,
    /// freed, are reused or given back to the device (a hole punched at
    /// the next checkpoint, or at close). A tree already in order costs a
    /// walk over its leaves' parents. Hash trees have no key order:
    /// `Error::Unsupported`.
    pub fn compact(&self, tree: Tree) -> Result<CompactStats> {
        if tree.is_hash() {
            return Err(Error::Unsupported(
                "compaction orders B+-tree leaves; a hash tree has no key order".into(),
            ));
        }
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let started = Instant::now();
        let bm = self.inner.bm.clone();
        let logged = self.inner.logged;
        let root = tree.root;
        let mut stats = self.call(0, move |ctx| async move {
            let mut stats = CompactStats::default();
            let mut from = Vec::new();
            loop {
                let plan = run_op(&ctx.reads, |_| leaf_parent(&bm, root, &from)).await?;
                let Some(plan) = plan else {
                    return Ok::<CompactStats, Error>(stats); // a tree of one leaf
                };
                // First fill the parent's leaves, left to right, then
                // move them (the child list the moves plan is the
                // filled one).
                let mut fills = Fills::default();
                let mut slot = Some(0);
                while let Some(from_slot) = slot {
                    // The planned list still has the leaves that merges
                    // emptied (freed, read as busy: they would stop the
                    // read-ahead), so the window starts that much later.
                    let ahead_start = (from_slot + fills.emptied as usize).min(plan.children.len());
                    let ahead_end = (ahead_start + 4 * FILLS_PER_STEP).min(plan.children.len());
                    if ahead_start < ahead_end {
                        let _ = super::worker::read_ahead(&plan.children[ahead_start..ahead_end]);
                    }
                    slot = run_logged_op(&ctx.reads, logged, |wb| {
                        fill_children(&bm, wb, (root, &from), from_slot, &mut fills)
                    })
                    .await?;
                }
                stats.leaves_filled += fills.filled;
                stats.leaves_emptied += fills.emptied;
                let plan = if fills == Fills::default() {
                    plan
                } else {
                    match run_op(&ctx.reads, |_| leaf_parent(&bm, root, &from)).await? {
                        Some(plan) => plan,
                        None => return Ok(stats),
                    }
                };
                stats.parents += 1;
                if plan.in_order() {
                    stats.parents_in_order += 1;
                } else {
                    let count = plan.children.len() as u64;
                    let first = bm.reserve_pages(count)?;
                    let mut outcome = Ok(Moved::Done);
                    for start in (0..plan.children.len()).step_by(MOVES_PER_STEP) {
                        let range = start..(start + MOVES_PER_STEP).min(plan.children.len());
                        // The children of this step and of the next three
                        // are read in parallel, not one per restart of the
                        // step (a `Sync` compaction's reads wait behind
                        // its log syncs: at one read at a time it took
                        // twice as long).
                        let ahead_end = (start + 4 * MOVES_PER_STEP).min(plan.children.len());
                        let _ = super::worker::read_ahead(&plan.children[start..ahead_end]);
                        let mut moved = 0;
                        outcome = run_logged_op(&ctx.reads, logged, |wb| {
                            move_children(
                                &bm,
                                wb,
                                (root, &from),
                                &plan,
                                range.clone(),
                                first,
                                &mut moved,
                            )
                        })
                        .await;
                        stats.leaves_moved += moved;
                        if outcome.as_ref().map_or(true, |m| *m == Moved::Changed) {
                            break;
                        }
                    }
                    // The ids no move took go back to the free list.
                    bm.release_reserved(first, count);
                    if outcome? == Moved::Changed {
                        stats.parents_changed += 1;
                    }
                }
                if plan.upper_fence.is_empty() {
                    return Ok(stats);
                }
                from = plan.upper_fence;
                from.push(0);
            }
        })??;
        stats.micros = started.elapsed().as_micros() as u64;
        Ok(stats)
    }
}
