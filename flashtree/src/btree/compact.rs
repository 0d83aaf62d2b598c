//! Compaction: filling a tree's leaves and moving them to consecutive page
//! ids in key order (`Db::compact`), so that a scan reads fewer pages, its
//! neighbouring leaves are neighbours on the device too, and its
//! read-ahead reads several in one request (`WorkerBuffer::read_ahead`).
//!
//! Before its leaves move, each parent's leaves are filled left to right
//! ([`fill_children`]): a leaf takes its right neighbour's first entries
//! while they fit, or gives it all of its own and is freed.
//!
//! Random inserts leave leaves wherever free space was when they split.
//! Compaction walks the parents of the leaves (the inner nodes one level
//! up) in key order; a parent whose children are not already consecutive
//! ids gets a range of new ids reserved past the end of the store, and
//! each child moves to its id in its parent's order: under the exclusive
//! latches of the parent and the child, the child's bytes are copied into
//! a page allocated at the new id, the parent points there, and the old id
//! is freed (as a merge frees one). Each move is a complete structure
//! change on its own, so a chunk of moves is one logged step, and an
//! attempt that stops halfway (a child to load, a latch taken, no frame)
//! leaves a consistent tree and goes on from where it stopped: a child
//! already at its new id is skipped.
//!
//! # Contract
//! * [`move_children`] moves a child only while the parent, exclusively
//!   latched, still points to it at the planned slot; any other change of
//!   the parent's child list ends the parent's compaction
//!   ([`Moved::Changed`]). Moves never change a key or a value.
//! * [`fill_children`] changes a pair of leaves only under the exclusive
//!   latches of the parent and both leaves, once it has seen that they
//!   are the parent's children at `slot` and `slot + 1` and that both
//!   fences between them equal the parent's separator; each pair leaves a
//!   valid tree with the same entries (the parent gets the new separator,
//!   or loses the emptied leaf's slot).
//! * The new ids come from [`BufferManager::reserve_pages`]; each is taken
//!   out of its reservation inside the step that logs the page
//!   ([`WorkerBuffer::alloc_reserved_page`]).
//!
//! [`BufferManager::reserve_pages`]: crate::buffer::BufferManager::reserve_pages
//! [`WorkerBuffer::alloc_reserved_page`]: crate::buffer::WorkerBuffer::alloc_reserved_page

use super::node::{Node, MAX_KEY_BYTES};
use super::tree::{apply_rebalance, racy_node};
use crate::buffer::{BufferManager, GuardX, OpError, PageId, WorkerBuffer};
use crate::io::PAGE_SIZE;
use std::ops::Range;

type OpResult<T> = std::result::Result<T, OpError>;

/// Children moved in one logged step at most (each step also logs the
/// parent: 17 pages, under `step::MAX_STEP_PAGES`).
pub const MOVES_PER_STEP: usize = 16;

/// Pairs of neighbouring leaves one fill step ([`fill_children`]) works
/// on at most (each step logs the parent and the leaves it changed: 18
/// pages, under `step::MAX_STEP_PAGES`).
pub const FILLS_PER_STEP: usize = 16;

/// An inner node whose children are leaves, as a compaction plans it.
#[derive(Debug, Clone)]
pub struct LeafParent {
    /// Its page id.
    pub pid: PageId,
    /// Its children in key order (the upper child last).
    pub children: Vec<PageId>,
    /// Its upper fence (empty: the last node of its level).
    pub upper_fence: Vec<u8>,
}

impl LeafParent {
    /// Whether the children already lie at consecutive ids, in key order.
    pub fn in_order(&self) -> bool {
        self.children.windows(2).all(|w| w[1] == w[0] + 1)
    }
}

/// The parent of the leaf that covers `key`, with its children, or None
/// when the root is a leaf (a tree of one page).
pub fn leaf_parent(bm: &BufferManager, root: PageId, key: &[u8]) -> OpResult<Option<LeafParent>> {
    let mut current = bm.fix_optimistic(root)?;
    let root_is_leaf = racy_node(&current).is_leaf();
    current.check()?;
    if root_is_leaf {
        return Ok(None);
    }
    loop {
        let child = racy_node(&current).child_for(key);
        current.check()?;
        let child_guard = bm.fix_optimistic(child)?;
        let child_is_leaf = racy_node(&child_guard).is_leaf();
        child_guard.check()?;
        current.check()?;
        if !child_is_leaf {
            current = child_guard;
            continue;
        }
        let n = racy_node(&current);
        // A count read while a writer changes the page may be garbage:
        // bounded, and validated below before anything is trusted.
        let count = n.count().min(PAGE_SIZE);
        let children = (0..=count).map(|i| n.child_at(i)).collect();
        let mut upper_fence = Vec::with_capacity(MAX_KEY_BYTES);
        n.upper_fence_into(&mut upper_fence);
        current.check()?;
        return Ok(Some(LeafParent {
            pid: current.pid(),
            children,
            upper_fence,
        }));
    }
}

/// What [`move_children`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Every child of the range is at its new id.
    Done,
    /// The parent's child list is no longer the planned one (a split, a
    /// merge, or another compaction): the parent is left as it is.
    Changed,
}

/// Moves the children `range` of `plan` (the parent of the leaf covering
/// `key` in the tree of `root`, by slot) to the ids `first + slot`,
/// reserved with `BufferManager::reserve_pages`, counting each move in
/// `moved`. Children already there are skipped, so an attempt
/// that returned a restart halfway goes on where it stopped.
pub fn move_children(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    (root, key): (PageId, &[u8]),
    plan: &LeafParent,
    range: Range<usize>,
    first: PageId,
    moved: &mut u64,
) -> OpResult<Moved> {
    // The parent of the leaf covering `key` must still be the planned
    // one: a delete's merge may have freed it since (a freed id would only
    // read as busy, for ever).
    match leaf_parent(bm, root, key)? {
        Some(now) if now.pid == plan.pid => {}
        _ => return Ok(Moved::Changed),
    }
    let parent = bm.fix_optimistic(plan.pid)?;
    let n = racy_node(&parent);
    let same = !n.is_leaf()
        && n.count() + 1 == plan.children.len()
        && plan
            .children
            .iter()
            .enumerate()
            .all(|(i, &c)| n.child_at(i) == c || n.child_at(i) == first + i as u64);
    parent.check()?;
    if !same {
        return Ok(Moved::Changed);
    }
    let mut parent = parent.upgrade()?;
    for slot in range {
        let target = first + slot as u64;
        let child = Node::from_page(parent.page()).child_at(slot);
        if child == target {
            continue;
        }
        assert_eq!(
            child, plan.children[slot],
            "page {}: child {slot} changed under the exclusive latch",
            plan.pid
        );
        let old = bm.fix_optimistic(child)?;
        let is_leaf = racy_node(&old).is_leaf();
        old.check()?;
        if !is_leaf {
            return Ok(Moved::Changed);
        }
        let old = old.upgrade()?;
        // No frame: the id stays reserved, and the next attempt takes it.
        let mut new = wb.alloc_reserved_page(bm, target)?;
        new.page_mut().copy_from_slice(old.page());
        Node::from_page_mut(parent.page_mut()).set_child(slot, target);
        if cfg!(debug_assertions) {
            if let Err(e) = Node::from_page(new.page()).check_invariants() {
                panic!("page {target} moved from {child}: {e}");
            }
        }
        old.free();
        *moved += 1;
    }
    Ok(Moved::Done)
}

/// What [`fill_children`] did, counted across its steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fills {
    /// Leaves that took entries from their right neighbour.
    pub filled: u64,
    /// Leaves whose entries all went to their right neighbour (a merge:
    /// the leaf's page is freed).
    pub emptied: u64,
}

/// Fills the leaves under the parent of the leaf covering `key` in the
/// tree of `root`, from its child `slot` on, left to right: each leaf
/// takes its right neighbour's first entries while they fit
/// ([`Node::plan_fill_left`]), or gives the neighbour all of its own
/// when they fit there ([`Node::merge_into_right`]; the leaf is freed and
/// the neighbour goes on in its place). Random inserts leave leaves about
/// 85% full; a filled tree's scans read fewer pages. At most
/// [`FILLS_PER_STEP`] pairs per call; returns the slot to go on from, or
/// None at the parent's last child (or when the tree has no parent of
/// leaves there). Every pair is a complete structure change under the
/// exclusive latches of the parent and both leaves, so a call that stops
/// for a page to read has left a consistent tree, and a retry from the
/// same slot finds the pairs it did full already.
pub fn fill_children(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    (root, key): (PageId, &[u8]),
    slot: usize,
    fills: &mut Fills,
) -> OpResult<Option<usize>> {
    // The step (if any) records the latched pages itself.
    let _ = wb;
    // Found again on every attempt: between two steps a delete's merge
    // may free the parent (then its id would only read as busy), and its
    // leaves go on under another.
    let Some(plan) = leaf_parent(bm, root, key)? else {
        return Ok(None);
    };
    let parent = bm.fix_optimistic(plan.pid)?;
    let is_inner = racy_node(&parent).page_kind() == super::node::PAGE_KIND_INNER;
    parent.check()?;
    if !is_inner {
        return Ok(None);
    }
    let mut parent = parent.upgrade()?;
    let mut slot = slot;
    // The left leaf of the next pair, when this call latched it already
    // (a page latched twice in one logged step is a conflict).
    let mut carried: Option<GuardX<'_>> = None;
    for _ in 0..FILLS_PER_STEP {
        let p = Node::from_page(parent.page());
        if slot >= p.count() {
            return Ok(None);
        }
        let (left_pid, right_pid) = (p.child_at(slot), p.child_at(slot + 1));
        let mut separator = Vec::with_capacity(MAX_KEY_BYTES);
        p.key_into(slot, &mut separator);
        let parent_has_room = p.has_space_for(MAX_KEY_BYTES, 8);
        // (A merge needs a separator to spare: a parent left with one
        // child would have none.)
        let may_merge = p.count() >= 2;
        let mut left = match carried.take() {
            Some(guard) if guard.pid() == left_pid => guard,
            _ => bm.fix_optimistic(left_pid)?.upgrade()?,
        };
        let mut right = bm.fix_optimistic(right_pid)?.upgrade()?;
        let (l, r) = (Node::from_page(left.page()), Node::from_page(right.page()));
        if !l.is_leaf()
            || !r.is_leaf()
            || l.upper_fence() != separator.as_slice()
            || r.lower_fence() != separator.as_slice()
        {
            return Ok(None); // not a parent of leaves
        }
        // The fit is asked first: `page_mut` marks a page changed (a
        // logged image, a write-back) whether or not anything moves.
        if may_merge
            && Node::from_page(left.page())
                .merged_bytes(Node::from_page(right.page()), &separator)
                .is_some()
        {
            let merged = Node::from_page(left.page())
                .merge_into_right(Node::from_page_mut(right.page_mut()), &separator);
            assert!(merged, "page {}: a merge that fits failed", left.pid());
            left.free();
            Node::from_page_mut(parent.page_mut()).remove_slot(slot);
            fills.emptied += 1;
            carried = Some(right); // now at `slot`
            continue;
        }
        if parent_has_room {
            let plan = Node::from_page(left.page()).plan_fill_left(Node::from_page(right.page()));
            if let Some(plan) = plan {
                apply_rebalance(&mut parent, slot, &mut left, &mut right, &plan)?;
                fills.filled += 1;
            }
        }
        if cfg!(debug_assertions) {
            for page in [&left, &right, &parent] {
                if let Err(e) = Node::from_page(page.page()).check_invariants() {
                    panic!("page {} after a fill: {e}", page.pid());
                }
            }
        }
        drop(left);
        carried = Some(right);
        slot += 1;
    }
    Ok(Some(slot))
}
