//! B+-tree operations as plain synchronous code over the buffer manager.
//!
//! No operation blocks or holds a latch when it returns: if a page is not
//! resident, a latch is taken, or no frame is free, it returns
//! [`OpError::Restart`] and the caller (an async task, see `db`) loads the
//! page, yields or waits for frames, then runs the operation again from the
//! root. Optimistic latches are validated before anything read under them
//! is trusted: a child pointer is followed only after its parent validated.
//! A page under an optimistic latch is read only through [`racy_node`]
//! (volatile loads, no reference to the page); slices of a page (`&Node`)
//! are taken only under a shared or exclusive latch.
//!
//! The root of a tree never moves: a root split copies the root into a new
//! page and splits that, so the catalog's root page id stays valid forever.

use super::node::{self, Node, NodeView, RacyNode, MAX_KEY_BYTES};
use crate::buffer::{BufferManager, GuardO, GuardX, OpError, PageId, Restart, Stamp, WorkerBuffer};
use crate::error::Error;
use crate::io::PAGE_SIZE;
use std::time::Instant;

type OpResult<T> = std::result::Result<T, OpError>;

/// A node below a quarter full is merged with a neighbour when possible.
pub const MERGE_THRESHOLD_BYTES: usize = PAGE_SIZE / 4;

fn corrupt(pid: PageId, what: &str) -> OpError {
    OpError::Fatal(Error::Corrupt(format!("page {pid}: {what}")))
}

/// Initializes a new empty tree's root leaf in `page`.
pub fn init_root(page: &mut [u8; PAGE_SIZE]) {
    node::init_leaf(page, &[], &[]);
}

/// The node under an optimistic latch, read through volatile loads and
/// never through a reference ([`RacyNode`]); nothing read from it is
/// trusted before `guard` validates.
#[inline]
pub(crate) fn racy_node<'g>(guard: &'g GuardO<'_>) -> RacyNode<'g> {
    NodeView::new(guard.racy_page())
}

/// Descends optimistically to the leaf for `key`; returns (parent, leaf).
/// A node on the way not in memory is a `Restart::Load` of its page.
pub(crate) fn descend<'a>(
    bm: &'a BufferManager,
    root: PageId,
    key: &[u8],
) -> OpResult<(Option<GuardO<'a>>, GuardO<'a>)> {
    descend_from(bm, bm.fix_optimistic(root)?, key)
}

/// [`descend`] from `start`, a node that covers `key`.
fn descend_from<'a>(
    bm: &'a BufferManager,
    start: GuardO<'a>,
    key: &[u8],
) -> OpResult<(Option<GuardO<'a>>, GuardO<'a>)> {
    let mut parent: Option<GuardO<'a>> = None;
    let mut current = start;
    loop {
        let n = racy_node(&current);
        if n.is_leaf() {
            current.check()?;
            return Ok((parent, current));
        }
        let kind = n.page_kind();
        let child = n.child_for(key);
        current.check()?;
        if kind != node::PAGE_KIND_INNER {
            return Err(corrupt(current.pid(), "neither a leaf nor an inner node"));
        }
        let next = bm.fix_optimistic(child)?;
        next.prefetch();
        current.check()?;
        parent = Some(current);
        current = next;
    }
}

/// Looks `key` up in `leaf`: copies the value into `out` and returns true if
/// found, once the leaf validated.
fn read_leaf(leaf: &GuardO<'_>, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Restart> {
    read_leaf_found(leaf, racy_node(leaf).lower_bound(key), out)
}

/// [`read_leaf`] with the leaf's `lower_bound` of the key already taken
/// under `leaf`'s optimistic latch: trusted only if the check after the
/// copy passes.
fn read_leaf_found(
    leaf: &GuardO<'_>,
    (slot, found): (usize, bool),
    out: &mut Vec<u8>,
) -> Result<bool, Restart> {
    if found {
        racy_node(leaf).value_into(slot, out);
    }
    leaf.check()?;
    Ok(found)
}

/// Point lookup: copies the value into `out` and returns true if found.
pub fn lookup(bm: &BufferManager, root: PageId, key: &[u8], out: &mut Vec<u8>) -> OpResult<bool> {
    let (_, leaf) = descend(bm, root, key)?;
    Ok(read_leaf(&leaf, key, out)?)
}

/// Why [`lookup_interleaved`] stopped without an answer.
#[derive(Debug)]
pub enum LookupStop {
    /// The child `child` is not in memory. `parent` is the node the child's
    /// page id was read from, as it was then (None: `child` is the root).
    Miss {
        /// The page to load.
        child: PageId,
        /// Its parent when the page id was read.
        parent: Option<Stamp>,
    },
    /// Restart from the root (a latch conflict or a page being loaded).
    Restart(Restart),
}

/// Point lookup that lets other tasks run while each child node's first
/// cache lines are fetched from memory. A tree larger than the CPU caches is
/// bound by memory latency; overlapping the misses of many tasks hides it.
/// A level that the CPU's cache holds is not worth a yield (a task switch
/// costs more than a cache hit): the descent estimates each level's nodes
/// as the product of the child counts on its way and goes on without
/// yielding into a level below a threshold ([`level_worth_a_yield`]). The
/// threshold is the root's children only, or twice the last-level cache;
/// each worker thread times both and takes the quicker ([`YieldTuner`]):
/// which one wins depends on how skewed the keys are and on how much of
/// the cache other work (or, in a virtual machine, other tenants) leaves.
/// This is the one asynchronous tree operation: it holds only optimistic
/// latches (version snapshots, no latch state), which may cross a yield,
/// and validates before trusting anything. When a child is not in memory it
/// returns where it stopped: the caller loads the page and continues with
/// [`lookup_resume`]; on any other restart it falls back to [`lookup`].
/// It first tries the leaf this worker thread found the key in last
/// (`btree::hint`), and records the leaf a descent finds.
pub async fn lookup_interleaved(
    bm: &BufferManager,
    root: PageId,
    key: &[u8],
    out: &mut Vec<u8>,
) -> std::result::Result<bool, LookupStop> {
    // A failed fix of `child` (read from `parent` as it still is, if any).
    let stop = |e: OpError, parent: Option<Stamp>| match as_restart(e) {
        Restart::Load(child) => LookupStop::Miss { child, parent },
        other => LookupStop::Restart(other),
    };
    let recorder = match super::hint::probe(bm, root, key, out) {
        super::hint::Probe::Answer(found) => return Ok(found),
        super::hint::Probe::Descend(recorder) => recorder,
    };
    let mut node = bm.fix_optimistic(root).map_err(|e| stop(e, None))?;
    // Nodes of the level below `node`, estimated (read under the
    // optimistic latch: garbage only changes whether a yield is taken).
    let mut level_nodes = 1usize;
    // Whether the descent yielded before reading `node`.
    let mut yielded_into_node = false;
    let threshold_pages = YIELD_TUNER.with(|t| {
        let mut t = t.borrow_mut();
        t.lookup_started(Instant::now);
        t.threshold_pages()
    });
    loop {
        let n = racy_node(&node);
        if n.is_leaf() {
            let (slot, found) = n.lower_bound(key);
            if found && yielded_into_node {
                // A leaf worth a yield is not in the core's caches, nor
                // is its entry, which the search (slots only, for keys
                // whose heads tell them apart) did not read: ask for the
                // value's lines and yield once more, so that the copy
                // does not wait for memory. (The slot is as trustworthy
                // as the rest: the check after the copy validates the
                // version it was read under.)
                let value = n.value_range(slot);
                node.prefetch_bytes(value.start, value.len());
                crate::sched::yield_now().await;
            }
            let found = read_leaf_found(&node, (slot, found), out).map_err(LookupStop::Restart)?;
            if let Some(recorder) = recorder {
                super::hint::record(recorder, node.pid());
            }
            return Ok(found);
        }
        level_nodes = level_nodes.saturating_mul(n.count() + 1);
        let child = n.child_for(key);
        node.check().map_err(LookupStop::Restart)?;
        let next = bm
            .fix_optimistic(child)
            .map_err(|e| stop(e, Some(node.stamp())))?;
        node.check().map_err(LookupStop::Restart)?;
        // Fetched in parallel even when no yield follows: the node's
        // header, slots and first entries are then one round trip to
        // memory, not one per dependent load of the search.
        next.prefetch();
        yielded_into_node = level_worth_a_yield(level_nodes, threshold_pages);
        if yielded_into_node {
            crate::sched::yield_now().await;
        }
        node = next;
    }
}

/// True when a level of about `level_nodes` nodes is worth a yield before
/// its node is read: it has more than `threshold_pages` nodes.
pub fn level_worth_a_yield(level_nodes: usize, threshold_pages: usize) -> bool {
    level_nodes > threshold_pages
}

/// Nodes a level has at most when [`YieldTuner`] takes it for the root's
/// children (an inner node has fewer children than this).
const ROOT_CHILDREN_MAX: usize = 1024;

/// Lookups per epoch of [`YieldTuner`].
pub const YIELD_EPOCH_LOOKUPS: u32 = 1024;
/// Epochs a cycle of [`YieldTuner`] spends timing the two thresholds, in
/// turns (half each).
pub const YIELD_PROBE_EPOCHS: u32 = 16;
/// Epochs of a whole cycle: the probe, then the quicker threshold.
pub const YIELD_CYCLE_EPOCHS: u32 = 128;

thread_local! {
    static YIELD_TUNER: std::cell::RefCell<YieldTuner> =
        std::cell::RefCell::new(YieldTuner::new(last_level_cache_bytes()));
}

/// Chooses, per worker thread, which levels an interleaved lookup yields
/// into: every level but the root's children, or only levels of more than
/// twice the last-level cache's size in pages. The thread's lookups are
/// counted in epochs of [`YIELD_EPOCH_LOOKUPS`]; each cycle of
/// [`YIELD_CYCLE_EPOCHS`] epochs starts with [`YIELD_PROBE_EPOCHS`] that
/// take the two thresholds in turns and time each epoch (from its first
/// lookup to the next epoch's), then keeps the one whose epochs took less
/// on average for the rest of the cycle. An epoch's time includes whatever else
/// the worker ran meanwhile, which the turns share alike. The clock is read
/// once per epoch.
#[derive(Debug)]
pub struct YieldTuner {
    /// Thresholds in pages: [every level but the root's children, twice
    /// the cache].
    thresholds: [usize; 2],
    /// Which threshold the last probe found quicker.
    chosen: usize,
    lookups_left: u32,
    epoch: u32,
    epoch_started: Option<Instant>,
    /// Time and timed epochs of each threshold in this cycle's probe.
    probe_ns: [u64; 2],
    probe_epochs: [u64; 2],
}

impl YieldTuner {
    /// A tuner for a last-level cache of `cache_bytes`; it starts with a
    /// probe.
    pub fn new(cache_bytes: usize) -> YieldTuner {
        let cache_pages = cache_bytes / crate::io::PAGE_SIZE;
        YieldTuner {
            thresholds: [
                ROOT_CHILDREN_MAX,
                cache_pages.saturating_mul(2).max(ROOT_CHILDREN_MAX),
            ],
            chosen: 0,
            lookups_left: YIELD_EPOCH_LOOKUPS,
            epoch: 0,
            epoch_started: None,
            probe_ns: [0; 2],
            probe_epochs: [0; 2],
        }
    }

    /// The threshold the current epoch takes, in pages.
    pub fn threshold_pages(&self) -> usize {
        self.thresholds[self.current()]
    }

    /// Which threshold the current epoch takes: the two in turns during
    /// the probe, then the chosen one.
    fn current(&self) -> usize {
        if self.epoch < YIELD_PROBE_EPOCHS {
            (self.epoch % 2) as usize
        } else {
            self.chosen
        }
    }

    /// Counts a lookup; at an epoch's end, reads `now` and moves on.
    #[inline]
    pub fn lookup_started(&mut self, now: impl FnOnce() -> Instant) {
        self.lookups_left -= 1;
        if self.lookups_left == 0 {
            self.next_epoch(now());
        }
    }

    #[inline(never)]
    fn next_epoch(&mut self, now: Instant) {
        self.lookups_left = YIELD_EPOCH_LOOKUPS;
        if let Some(started) = self.epoch_started {
            if self.epoch < YIELD_PROBE_EPOCHS {
                let ns = now.saturating_duration_since(started).as_nanos() as u64;
                let current = self.current();
                self.probe_ns[current] = self.probe_ns[current].saturating_add(ns);
                self.probe_epochs[current] += 1;
            }
        }
        self.epoch_started = Some(now);
        self.epoch = (self.epoch + 1) % YIELD_CYCLE_EPOCHS;
        if self.epoch == YIELD_PROBE_EPOCHS {
            // Mean time per epoch (the very first epoch is not timed).
            let [ns, epochs] = [self.probe_ns, self.probe_epochs];
            self.chosen = usize::from(
                u128::from(ns[1]) * u128::from(epochs[0].max(1))
                    < u128::from(ns[0]) * u128::from(epochs[1].max(1)),
            );
        }
        if self.epoch == 0 {
            self.probe_ns = [0; 2];
            self.probe_epochs = [0; 2];
        }
    }
}

/// Bytes of the CPU's last-level cache (the largest cache sysfs lists for
/// CPU 0), read once; 32 MiB when sysfs does not say.
pub fn last_level_cache_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
        let largest = std::fs::read_dir(dir).ok().and_then(|entries| {
            entries
                .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
                .filter_map(|size| parse_cache_size(size.trim()))
                .max()
        });
        largest.unwrap_or(32 << 20)
    })
}

/// A sysfs cache size (`32768K`, `2M`, `512`) in bytes.
fn parse_cache_size(text: &str) -> Option<usize> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// Continues a lookup that stopped at `LookupStop::Miss { child, parent:
/// Some(parent) }` once `child` is loaded, without descending from the
/// root again: if the parent is unchanged since it pointed to `child`,
/// `child` is still the node that covers `key`. Any conflict returns a
/// restart, and the caller falls back to [`lookup`].
pub fn lookup_resume(
    bm: &BufferManager,
    parent: Stamp,
    child: PageId,
    key: &[u8],
    out: &mut Vec<u8>,
) -> OpResult<bool> {
    let start = bm.fix_optimistic(child)?;
    // Checked after the child's fix: the pointer was valid when the child's
    // version was taken.
    if !bm.unchanged_since(parent) {
        return Err(Restart::Retry.into());
    }
    let (_, leaf) = descend_from(bm, start, key)?;
    Ok(read_leaf(&leaf, key, out)?)
}

fn as_restart(e: OpError) -> Restart {
    match e {
        OpError::Restart(r) => r,
        OpError::Fatal(_) => Restart::Retry, // the synchronous path reports it
    }
}

/// Inserts or replaces. Keys and values must be within the node limits.
/// `previous_key` is the key the caller inserted last into this tree, if
/// any: when a full leaf holds it right in front of `key`, the caller is
/// inserting a sequence, and the split leaves the left page full.
/// A full leaf that would split evenly moves entries to a neighbour with
/// room instead; a neighbour not in memory is loaded for it (the insert
/// returns `Restart::Load` of it) while `neighbour_loads_left` (decremented
/// for each) lasts, and skipped after.
pub fn insert(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    root: PageId,
    (key, value): (&[u8], &[u8]),
    previous_key: Option<&[u8]>,
    neighbour_loads_left: &mut usize,
) -> OpResult<()> {
    debug_assert!(node::entry_within_limits(key.len(), value.len()));
    let (_, leaf) = descend(bm, root, key)?;
    let n = racy_node(&leaf);
    let found = n.lower_bound(key);
    let fits = n.fits(found, key.len(), value.len());
    leaf.check()?;
    if !fits {
        let pid = leaf.pid();
        let kv = (key, Some(value));
        if split(bm, wb, root, pid, kv, previous_key, neighbour_loads_left)? {
            return Ok(()); // entries moved to a neighbour, and the entry added
        }
        return Err(Restart::Retry.into());
    }
    // The upgrade succeeds only if the page is unchanged, so `found` holds.
    let mut leaf = leaf.upgrade()?;
    Node::from_page_mut(leaf.page_mut())
        .insert_found(found, key, value)
        .map_err(|_| corrupt(leaf.pid(), "insert failed after the space check"))
}

/// Removes `key`; true if it was there. Underfull nodes are merged with a
/// neighbour when that neighbour is in memory (best effort).
pub fn remove(bm: &BufferManager, root: PageId, key: &[u8]) -> OpResult<bool> {
    let (_, leaf) = descend(bm, root, key)?;
    let found = racy_node(&leaf).lower_bound(key).1;
    leaf.check()?;
    if !found {
        return Ok(false);
    }
    let mut leaf = leaf.upgrade()?;
    let n = Node::from_page_mut(leaf.page_mut());
    let removed = n.remove(key);
    debug_assert!(removed);
    let underfull = n.space_used_bytes() < MERGE_THRESHOLD_BYTES && leaf.pid() != root;
    let pid = leaf.pid();
    drop(leaf);
    if underfull {
        // A restart here is fine: the removal is done, the merge optional.
        let _ = merge(bm, root, pid, key);
    }
    Ok(true)
}

/// Finishes the merges that a removal of `key` may have left undone (the
/// merge in [`remove`] is skipped when a neighbour is not resident): on the
/// path to `key`, collapses a root with one child, merges an inner node with
/// one child, or merges the leaf if it is underfull. Run as an operation of
/// its own after a removal, so that a restart loads the neighbour instead of
/// skipping the merge. At most one merge chain per call.
pub fn merge_underfull(bm: &BufferManager, root: PageId, key: &[u8]) -> OpResult<()> {
    let mut current = bm.fix_optimistic(root)?;
    loop {
        let n = racy_node(&current);
        let (leaf, count, used_bytes) = (n.is_leaf(), n.count(), n.space_used_bytes());
        let child = if leaf { 0 } else { n.child_for(key) };
        current.check()?;
        let pid = current.pid();
        if !leaf && count == 0 {
            return if pid == root {
                collapse_root(bm, root)
            } else {
                merge(bm, root, pid, key)
            };
        }
        if leaf {
            if pid != root && used_bytes < MERGE_THRESHOLD_BYTES {
                return merge(bm, root, pid, key);
            }
            return Ok(());
        }
        let next = bm.fix_optimistic(child)?;
        current.check()?;
        current = next;
    }
}

/// Finds the parent of `pid` by descending toward `key` (which lies in
/// `pid`'s range). Returns None when `pid` is the root.
fn find_parent<'a>(
    bm: &'a BufferManager,
    root: PageId,
    pid: PageId,
    key: &[u8],
) -> OpResult<Option<(GuardO<'a>, usize)>> {
    if pid == root {
        return Ok(None);
    }
    let mut current = bm.fix_optimistic(root)?;
    loop {
        let n = racy_node(&current);
        let is_leaf = n.is_leaf();
        let index = n.child_index_for(key);
        let child = n.child_at(index);
        current.check()?;
        if is_leaf {
            // The page was merged or split away: start over.
            return Err(Restart::Retry.into());
        }
        if child == pid {
            return Ok(Some((current, index)));
        }
        let next = bm.fix_optimistic(child)?;
        current.check()?;
        current = next;
    }
}

/// Whether `key`, which sorts after every key of `n`, looks appended to
/// them rather than inserted at random: `n` is the last node of the tree,
/// or `key` lies much nearer `n`'s last key than its upper fence (the keys
/// before it are dense, the next ones far away: an order appended to its
/// district). Distances compare the 8 bytes after the prefix that the last
/// key and the fence share, as big-endian numbers. A random key is that
/// near in a fifth of the cases, so most random inserts get the balanced
/// split, which keeps pages of large rows fuller (test
/// `random_inserts_of_large_rows_keep_leaves_two_thirds_full`: 1.95
/// instead of 1.81 entries per leaf of at most 3).
fn looks_appended(n: &Node, key: &[u8]) -> bool {
    let upper = n.upper_fence();
    if upper.is_empty() || n.count() == 0 {
        return true;
    }
    let mut last = Vec::with_capacity(MAX_KEY_BYTES);
    n.key_into(n.count() - 1, &mut last);
    let shared = last.iter().zip(upper).take_while(|(a, b)| a == b).count();
    let word = |k: &[u8]| {
        let mut bytes = [0u8; 8];
        for (to, from) in bytes.iter_mut().zip(k.iter().skip(shared)) {
            *to = *from;
        }
        u64::from_be_bytes(bytes)
    };
    let (last, key, upper) = (word(&last), word(key), word(upper));
    key.saturating_sub(last) < upper.saturating_sub(key) / 4
}

/// Splits node `pid` (which holds `key`'s range), splitting parents first
/// when they lack room for the separator.
/// (`value`: the value to insert with `key`, or None for a separator.)
/// Returns true when, instead of splitting a leaf, it moved entries to a
/// neighbour and inserted `key` with `value`, under the same latches, so
/// that no other task can take the room it made (two tasks moving the
/// same entries back and forth for their own inserts, each inserting
/// only after releasing the latches, livelocked a load).
fn split(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    root: PageId,
    pid: PageId,
    (key, value): (&[u8], Option<&[u8]>),
    previous_key: Option<&[u8]>,
    neighbour_loads_left: &mut usize,
) -> OpResult<bool> {
    let Some((parent, _)) = find_parent(bm, root, pid, key)? else {
        return split_root(bm, wb, root).map(|()| false);
    };
    let parent_has_space = racy_node(&parent).has_space_for(MAX_KEY_BYTES, 8);
    parent.check()?;
    if !parent_has_space {
        let parent_pid = parent.pid();
        let kv = (key, None);
        return split(bm, wb, root, parent_pid, kv, previous_key, &mut 0).map(|_| false);
    }
    let node = bm.fix_optimistic(pid)?;
    parent.check()?;
    let mut parent = parent.upgrade()?;
    let mut node = node.upgrade()?;
    if Node::from_page(node.page()).count() < 2 {
        return Ok(false); // someone else split or emptied it meanwhile
    }
    let Some(value) = value else {
        return split_latched(bm, wb, &mut parent, &mut node, key, previous_key).map(|_| false);
    };
    let kv = (key, value);
    if rebalance_instead(
        bm,
        (&mut parent, &mut node),
        kv,
        previous_key,
        neighbour_loads_left,
    )? {
        wb.stats.leaf_rebalances += 1;
        return Ok(true);
    }
    split_latched(bm, wb, &mut parent, &mut node, key, previous_key).map(|_| false)
}

/// A full leaf `node` under `parent` (both latched) that would split
/// evenly for `key`: moves entries to a neighbour that is in memory and
/// has room instead, if there is one (a neighbour latched by another task
/// is skipped), and inserts `key` with `value`. When none did and one is
/// not in memory, returns `Restart::Load` of it while
/// `neighbour_loads_left` lasts. True if it moved entries and inserted.
fn rebalance_instead<'a>(
    bm: &'a BufferManager,
    (parent, node): (&mut GuardX<'a>, &mut GuardX<'a>),
    (key, value): (&[u8], &[u8]),
    previous_key: Option<&[u8]>,
    neighbour_loads_left: &mut usize,
) -> OpResult<bool> {
    let value_len = value.len();
    let (p, n) = (Node::from_page(parent.page()), Node::from_page(node.page()));
    let neighbours = rebalance_neighbours(p, (n, node.pid()), key, previous_key);
    let mut not_in_memory = None;
    for (left_slot, neighbour, neighbour_is_right) in neighbours.into_iter().flatten() {
        let Some(mut neighbour) = latch_neighbour(bm, neighbour, &mut not_in_memory) else {
            continue;
        };
        let (left, right) = if neighbour_is_right {
            (&mut *node, &mut neighbour)
        } else {
            (&mut neighbour, &mut *node)
        };
        let plan = plan_rebalance(
            Node::from_page(parent.page()),
            left_slot,
            Node::from_page(left.page()),
            Node::from_page(right.page()),
            (key, value_len),
        );
        if let Some(plan) = plan {
            apply_rebalance(parent, left_slot, left, right, &plan)?;
            let side = if key <= plan.separator.as_slice() {
                left
            } else {
                right
            };
            Node::from_page_mut(side.page_mut())
                .insert(key, value)
                .map_err(|_| corrupt(side.pid(), "insert failed after moving entries for it"))?;
            return Ok(true);
        }
    }
    match not_in_memory {
        Some(pid) if *neighbour_loads_left > 0 => {
            *neighbour_loads_left -= 1;
            Err(Restart::Load(pid).into())
        }
        _ => Ok(false),
    }
}

/// Debug builds: asserts the node invariants of pages a structure change
/// just wrote (layout, key order, fences; see `Node::check_invariants`).
#[inline]
fn debug_assert_nodes(pages: &[&GuardX<'_>]) {
    if cfg!(debug_assertions) {
        for page in pages {
            if let Err(e) = Node::from_page(page.page()).check_invariants() {
                panic!("page {} after a structure change: {e}", page.pid());
            }
        }
    }
}

/// Splits `node` (at least 2 entries) into a new left page and `node`,
/// adding the separator to `parent`, which has room for it. Both are
/// latched by the caller; returns the new page, latched.
pub fn split_latched<'a>(
    bm: &'a BufferManager,
    wb: &mut WorkerBuffer,
    parent: &mut GuardX<'a>,
    node: &mut GuardX<'a>,
    key: &[u8],
    previous_key: Option<&[u8]>,
) -> OpResult<GuardX<'a>> {
    debug_assert!(Node::from_page(node.page()).count() >= 2);
    debug_assert!(Node::from_page(parent.page()).has_space_for(MAX_KEY_BYTES, 8));
    let mut left = wb.alloc_page(bm)?;
    let mut separator = Vec::with_capacity(MAX_KEY_BYTES);
    let n = Node::from_page_mut(node.page_mut());
    let insert_slot = n.lower_bound(key).0;
    match split_kind(n, key, previous_key) {
        SplitKind::Append => n.split_for_append(left.page_mut(), &mut separator),
        SplitKind::Sequential
            if n.split_for_sequential(insert_slot, key, left.page_mut(), &mut separator) => {}
        _ => n.split(left.page_mut(), &mut separator),
    }
    Node::from_page_mut(parent.page_mut())
        .insert_separator(&separator, left.pid())
        .map_err(|_| {
            corrupt(
                parent.pid(),
                "no room for a separator after the space check",
            )
        })?;
    debug_assert_nodes(&[parent, node, &left]);
    Ok(left)
}

/// How a node splits for an insert of `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SplitKind {
    /// After the last key, which looks appended: the left page keeps
    /// everything ([`Node::split_for_append`]).
    Append,
    /// Right after the caller's previous insert: the left page keeps the
    /// run ([`Node::split_for_sequential`], when it applies).
    Sequential,
    /// Anything else: the bytes are balanced, or (leaves) entries move to
    /// a neighbour with room instead ([`plan_rebalance`]).
    Even,
}

/// How node `n` splits for an insert of `key`, where `previous_key` is the
/// caller's last insert into the tree.
fn split_kind(n: &Node, key: &[u8], previous_key: Option<&[u8]>) -> SplitKind {
    let insert_slot = n.lower_bound(key).0;
    // The caller's previous insert right in front of this one (in a leaf),
    // or into the same child (in an inner node): a sequence.
    let sequential = insert_slot > 0
        && previous_key.is_some_and(|previous| {
            if n.is_leaf() {
                n.key_equals(insert_slot - 1, previous)
            } else {
                n.lower_bound(previous).0 == insert_slot
            }
        });
    if insert_slot == n.count() && n.count() >= 3 && looks_appended(n, key) {
        SplitKind::Append
    } else if sequential {
        SplitKind::Sequential
    } else {
        SplitKind::Even
    }
}

/// The neighbours that the full leaf `node` (page `pid`, a child of
/// `parent`) may move entries to for an insert of `key`, as (left slot of
/// the pair, neighbour page id, whether the neighbour is the pair's right
/// leaf), the right one first; none when the leaf would not split evenly
/// (an append or a run, see [`split_kind`]) or `key` is already there (a
/// replaced value that grew gets the split).
pub fn rebalance_neighbours(
    parent: &Node,
    (node, pid): (&Node, PageId),
    key: &[u8],
    previous_key: Option<&[u8]>,
) -> [Option<(usize, PageId, bool)>; 2] {
    if !node.is_leaf()
        || node.lower_bound(key).1
        || split_kind(node, key, previous_key) != SplitKind::Even
    {
        return [None, None];
    }
    let child_index = parent.child_index_for(key);
    if parent.child_at(child_index) != pid {
        return [None, None];
    }
    let count = parent.count();
    let right =
        (child_index < count).then(|| (child_index, parent.child_at(child_index + 1), true));
    let left = (child_index > 0 && child_index <= count)
        .then(|| (child_index - 1, parent.child_at(child_index - 1), false));
    [right, left]
}

/// Latches neighbour `pid` exclusively at once, if it is in memory and no
/// other task holds it; None otherwise. The first neighbour found not in
/// memory goes to `not_in_memory`, for the caller to have it read.
pub fn latch_neighbour<'a>(
    bm: &'a BufferManager,
    pid: PageId,
    not_in_memory: &mut Option<PageId>,
) -> Option<GuardX<'a>> {
    match bm.fix_optimistic(pid) {
        Ok(guard) => guard.upgrade().ok(),
        Err(OpError::Restart(Restart::Load(missing))) => {
            not_in_memory.get_or_insert(missing);
            None
        }
        Err(_) => None,
    }
}

/// Leaves `left` and `right`, neighbours under `parent` (`left` at slot
/// `left_slot`): how to move entries between them so that an insert of
/// `key` with a `value_len`-byte value fits one of them
/// ([`Node::plan_rebalance`]); None when that is not possible (or the
/// parent may lack room for a longer separator). Reads only.
pub fn plan_rebalance(
    parent: &Node,
    left_slot: usize,
    left: &Node,
    right: &Node,
    (key, value_len): (&[u8], usize),
) -> Option<node::Rebalance> {
    if !left.is_leaf() || !right.is_leaf() || parent.is_leaf() || left_slot >= parent.count() {
        return None;
    }
    if !parent.has_space_for(MAX_KEY_BYTES, 8) || left.upper_fence() != right.lower_fence() {
        return None;
    }
    left.plan_rebalance(right, key, value_len)
}

/// Carries out [`plan_rebalance`]'s plan on the latched pages it was made
/// on: moves the entries and gives `left`'s slot in `parent` the new
/// separator.
pub fn apply_rebalance(
    parent: &mut GuardX<'_>,
    left_slot: usize,
    left: &mut GuardX<'_>,
    right: &mut GuardX<'_>,
    plan: &node::Rebalance,
) -> OpResult<()> {
    debug_assert_eq!(
        Node::from_page(parent.page()).child_at(left_slot),
        left.pid()
    );
    debug_assert_eq!(
        Node::from_page(parent.page()).child_at(left_slot + 1),
        right.pid()
    );
    let r = Node::from_page_mut(right.page_mut());
    Node::from_page_mut(left.page_mut()).apply_rebalance(r, plan);
    let p = Node::from_page_mut(parent.page_mut());
    p.remove_slot(left_slot);
    p.insert_separator(&plan.separator, left.pid())
        .map_err(|_| {
            corrupt(
                parent.pid(),
                "no room for a separator after the space check",
            )
        })?;
    debug_assert_eq!(
        Node::from_page(parent.page()).child_at(left_slot),
        left.pid()
    );
    debug_assert_nodes(&[parent, left, right]);
    Ok(())
}

/// Splits the latched root (at least 2 entries) in place: its contents
/// move to two new pages and it becomes an inner node over them. Returns
/// the new pages (right, left), latched.
pub fn split_root_latched<'a>(
    bm: &'a BufferManager,
    wb: &mut WorkerBuffer,
    root_x: &mut GuardX<'a>,
) -> OpResult<(GuardX<'a>, GuardX<'a>)> {
    let root = root_x.pid();
    let mut right = wb.alloc_page(bm)?;
    let mut left = match wb.alloc_page(bm) {
        Ok(left) => left,
        Err(e) => {
            right.free();
            return Err(e);
        }
    };
    right.page_mut().copy_from_slice(root_x.page());
    let mut separator = Vec::with_capacity(MAX_KEY_BYTES);
    Node::from_page_mut(right.page_mut()).split(left.page_mut(), &mut separator);
    let new_root = node::init_inner(root_x.page_mut(), &[], &[], right.pid());
    new_root
        .insert_separator(&separator, left.pid())
        .map_err(|_| corrupt(root, "new root cannot hold one separator"))?;
    debug_assert_nodes(&[root_x, &right, &left]);
    Ok((right, left))
}

/// Makes sure the parent of the leaf holding `key` has `need_bytes` free
/// (see [`Node::free_space_bytes`]), splitting it (and its ancestors as
/// needed) if not. `need_bytes` must be at most a third of a page, so that
/// the half that keeps `key` after a split has it.
pub fn make_room_in_parent(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    root: PageId,
    key: &[u8],
    need_bytes: usize,
) -> OpResult<()> {
    debug_assert!(need_bytes <= PAGE_SIZE / 3);
    let (parent, leaf) = descend(bm, root, key)?;
    let Some(parent) = parent else {
        return Ok(()); // the leaf is the root: a root split needs no parent
    };
    let free_bytes = racy_node(&parent).free_space_bytes();
    parent.check()?;
    leaf.check()?;
    if free_bytes >= need_bytes {
        return Ok(());
    }
    split(bm, wb, root, parent.pid(), (key, None), None, &mut 0).map(drop)
}

/// The parent of `pid` (which holds `key`), if `pid` is not the root.
pub fn parent_of<'a>(
    bm: &'a BufferManager,
    root: PageId,
    pid: PageId,
    key: &[u8],
) -> OpResult<Option<GuardO<'a>>> {
    Ok(find_parent(bm, root, pid, key)?.map(|(parent, _)| parent))
}

/// Splits the root in place: its contents move to a new page, which is
/// split, and the root becomes an inner node over the two halves.
fn split_root(bm: &BufferManager, wb: &mut WorkerBuffer, root: PageId) -> OpResult<()> {
    let mut root_x = bm.fix_exclusive(root)?;
    split_root_latched(bm, wb, &mut root_x).map(drop)
}

/// Merges underfull node `pid` with a neighbour under the same parent, then
/// the parent if it became underfull, and shrinks a root left with one child.
fn merge(bm: &BufferManager, root: PageId, pid: PageId, key: &[u8]) -> OpResult<()> {
    let Some((parent, index)) = find_parent(bm, root, pid, key)? else {
        return Ok(());
    };
    let count = racy_node(&parent).count();
    parent.check()?;
    // Merge the pair (left = child at i, right = child at i + 1).
    let i = if index < count {
        index
    } else if count > 0 {
        count - 1
    } else {
        return Ok(());
    };
    let left_pid = racy_node(&parent).child_at(i);
    let right_pid = racy_node(&parent).child_at(i + 1);
    let mut separator = Vec::new();
    racy_node(&parent).key_into(i, &mut separator);
    parent.check()?;
    let left = bm.fix_optimistic(left_pid)?;
    let right = bm.fix_optimistic(right_pid)?;
    let mut parent = parent.upgrade()?;
    let left = left.upgrade()?;
    let mut right = right.upgrade()?;
    // The fit first: `page_mut` marks `right` changed (a logged image, a
    // write-back) even when the merge does not happen.
    if Node::from_page(left.page())
        .merged_bytes(Node::from_page(right.page()), &separator)
        .is_none()
    {
        return Ok(());
    }
    let merged = Node::from_page(left.page())
        .merge_into_right(Node::from_page_mut(right.page_mut()), &separator);
    assert!(merged, "page {}: a merge that fits failed", left.pid());
    left.free();
    let parent_pid = parent.pid();
    let p = Node::from_page_mut(parent.page_mut());
    p.remove_slot(i);
    let parent_underfull = p.space_used_bytes() < MERGE_THRESHOLD_BYTES;
    let root_has_one_child = parent_pid == root && p.count() == 0;
    debug_assert_nodes(&[&parent, &right]);
    drop((parent, right));
    if root_has_one_child {
        return collapse_root(bm, root);
    }
    if parent_underfull && parent_pid != root {
        return merge(bm, root, parent_pid, key);
    }
    Ok(())
}

/// A root with no separators has one child: pull the child's contents up.
fn collapse_root(bm: &BufferManager, root: PageId) -> OpResult<()> {
    let root_o = bm.fix_optimistic(root)?;
    let n = racy_node(&root_o);
    let (count, leaf, child) = (n.count(), n.is_leaf(), n.upper_child());
    root_o.check()?;
    if count != 0 || leaf {
        return Ok(());
    }
    let child_o = bm.fix_optimistic(child)?;
    let mut root_x = root_o.upgrade()?;
    let child_x: GuardX<'_> = child_o.upgrade()?;
    root_x.page_mut().copy_from_slice(child_x.page());
    debug_assert_nodes(&[&root_x]);
    child_x.free();
    Ok(())
}

/// Which way a scan goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Ascending keys.
    Forward,
    /// Descending keys.
    Backward,
}

/// Entries copied out of one leaf, and where the next leaf starts.
#[derive(Default, Debug)]
pub struct ScanBatch {
    /// Keys and values, concatenated.
    pub bytes: Vec<u8>,
    /// (key length, value length) per entry, in scan order.
    pub lengths: Vec<(u32, u32)>,
    /// The key to continue from (None: the end of the tree was reached).
    pub next: Option<Vec<u8>>,
}

impl ScanBatch {
    /// Iterates over (key, value) pairs.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut offset = 0;
        self.lengths.iter().map(move |&(k, v)| {
            let key = &self.bytes[offset..offset + k as usize];
            let value = &self.bytes[offset + k as usize..offset + (k + v) as usize];
            offset += (k + v) as usize;
            (key, value)
        })
    }
}

/// Copies the entries of the leaf holding `start` that are `>= start`
/// (forward) or `<= start` (backward) into `batch`, under a shared latch
/// ([`scan_leaf_visit`] with a copying visitor and no cursor).
/// `batch.next` is the key from which the following call continues.
pub fn scan_leaf(
    bm: &BufferManager,
    root: PageId,
    start: &[u8],
    direction: Direction,
    batch: &mut ScanBatch,
) -> OpResult<()> {
    batch.bytes.clear();
    batch.lengths.clear();
    batch.next = None;
    let mut from = start.to_vec();
    let mut key = Vec::new();
    let step = scan_leaf_visit(
        bm,
        root,
        &mut from,
        direction,
        &mut None,
        &mut key,
        (&mut Vec::new(), 0),
        &mut |k, v| {
            batch.bytes.extend_from_slice(k);
            batch.bytes.extend_from_slice(v);
            batch.lengths.push((k.len() as u32, v.len() as u32));
            true
        },
    )?;
    batch.next = (step == ScanStep::Next).then_some(from);
    Ok(())
}

/// Where a visiting scan goes next without descending from the root: the
/// next leaf through the parent of the leaf just visited, valid while that
/// parent is unchanged (leaves under one parent are neighbours in key order).
#[derive(Clone, Copy, Debug)]
pub struct ScanCursor {
    parent: Stamp,
    /// The next leaf's index in the parent (`count()` = the upper child).
    index: usize,
    child: PageId,
}

/// How a [`scan_leaf_visit`] step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanStep {
    /// The visitor returned false.
    Stopped,
    /// The last leaf in the scan's direction was visited.
    End,
    /// Continue with the next step (from the updated `from`).
    Next,
}

/// Does `leaf` hold the keys around `key` (`lower < key <= upper`)?
pub fn leaf_covers(leaf: &Node, key: &[u8]) -> bool {
    node::fences_cover(leaf.lower_fence(), leaf.upper_fence(), key)
}

/// The leaf for `from` with its parent and its index there: through
/// `cursor` when its parent is unchanged, else by a descent from the root.
#[allow(clippy::type_complexity)]
fn scan_position<'a>(
    bm: &'a BufferManager,
    root: PageId,
    from: &[u8],
    cursor: &mut Option<ScanCursor>,
) -> OpResult<(Option<(GuardO<'a>, usize)>, GuardO<'a>)> {
    if let Some(c) = *cursor {
        // An evicted or changed parent: descend instead.
        if let Ok(parent) = bm.fix_optimistic(c.parent.pid) {
            if parent.stamp() == c.parent {
                // A miss here is loaded and the step retried, cursor kept.
                let leaf = bm.fix_optimistic(c.child)?;
                parent.check()?;
                return Ok((Some((parent, c.index)), leaf));
            }
        }
        *cursor = None;
    }
    let (parent, leaf) = descend(bm, root, from)?;
    let parent = parent.map(|p| {
        let index = racy_node(&p).child_index_for(from);
        (p, index)
    });
    Ok((parent, leaf))
}

/// One step of a scan that hands entries to `visit` in place, with no
/// copy: visits the entries of the leaf holding `from` that are `>= from`
/// (forward) or `<= from` (backward), under a shared latch, until `visit`
/// returns false. `visit` runs only once nothing can make the step restart,
/// so a restarted step never visits an entry twice. On [`ScanStep::Next`],
/// `from` is where the next step starts, and `cursor` lets it skip the
/// descent. `key` is scratch space for the visited keys. `ahead` =
/// `(pids, wanted)`: `pids` gets (after clearing) up to `wanted` pages
/// that the scan visits after this leaf, in order, from this leaf's
/// parent (fewer at the parent's end), for the caller to read ahead;
/// they were the parent's children when it was validated, and may have
/// changed since (reading one ahead is then only wasted).
#[allow(clippy::too_many_arguments)]
pub fn scan_leaf_visit(
    bm: &BufferManager,
    root: PageId,
    from: &mut Vec<u8>,
    direction: Direction,
    cursor: &mut Option<ScanCursor>,
    key: &mut Vec<u8>,
    ahead: (&mut Vec<PageId>, usize),
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> OpResult<ScanStep> {
    let (ahead, ahead_wanted) = ahead;
    ahead.clear();
    let via_cursor = cursor.is_some();
    let (parent, leaf_o) = scan_position(bm, root, from, cursor)?;
    let leaf = bm.fix_shared(leaf_o.pid())?;
    let n = Node::from_page(leaf.page());
    if !n.is_leaf() || (via_cursor && !leaf_covers(n, from)) {
        *cursor = None;
        return Err(Restart::Retry.into());
    }
    let next_cursor = match &parent {
        Some((p, index)) => {
            let pn = racy_node(p);
            let next = match direction {
                Direction::Forward => (*index < pn.count()).then_some(index + 1),
                Direction::Backward => index.checked_sub(1),
            };
            let next_cursor = next.map(|i| ScanCursor {
                parent: p.stamp(),
                index: i,
                child: pn.child_at(i),
            });
            if let Some(first) = next {
                // Children `0..=count()` (the last is the upper child).
                let children = pn.count() + 1;
                let indexes: &mut dyn Iterator<Item = usize> = match direction {
                    Direction::Forward => &mut (first..children),
                    Direction::Backward => &mut (0..=first).rev(),
                };
                ahead.extend(indexes.take(ahead_wanted).map(|i| pn.child_at(i)));
            }
            // The leaf is still the one for `from`, and the page id just
            // read is one the parent held.
            p.check()?;
            next_cursor
        }
        None => None,
    };
    // Nothing below can fail: visit.
    let (slot, found) = n.lower_bound(from);
    let mut visit_slot = |s: usize| {
        n.key_into(s, key);
        visit(key, n.value(s))
    };
    let completed = match direction {
        Direction::Forward => (slot..n.count()).all(&mut visit_slot),
        Direction::Backward => (0..if found { slot + 1 } else { slot })
            .rev()
            .all(&mut visit_slot),
    };
    if !completed {
        return Ok(ScanStep::Stopped);
    }
    match direction {
        Direction::Forward if !n.upper_fence().is_empty() => {
            from.clear();
            from.extend_from_slice(n.upper_fence());
            from.push(0); // the smallest key above this leaf
        }
        Direction::Backward if !n.lower_fence().is_empty() => {
            from.clear();
            from.extend_from_slice(n.lower_fence());
        }
        _ => return Ok(ScanStep::End),
    }
    *cursor = next_cursor;
    Ok(ScanStep::Next)
}

/// What the invariant checker found in one node.
#[derive(Debug)]
pub struct NodeReport {
    /// Whether it is a leaf.
    pub is_leaf: bool,
    /// Entries.
    pub count: usize,
    /// Bytes in use.
    pub space_used_bytes: usize,
    /// Children with their expected (lower, upper) fences, for inner nodes.
    pub children: Vec<(PageId, Vec<u8>, Vec<u8>)>,
}

/// Checks one node (under a shared latch) against the fences its parent
/// implies: node-local invariants, fences, and child ranges.
pub fn check_node(
    bm: &BufferManager,
    pid: PageId,
    lower: &[u8],
    upper: &[u8],
) -> OpResult<NodeReport> {
    let guard = bm.fix_shared(pid)?;
    let n = Node::from_page(guard.page());
    n.check_invariants().map_err(|e| corrupt(pid, &e))?;
    if n.lower_fence() != lower || n.upper_fence() != upper {
        return Err(corrupt(
            pid,
            &format!(
                "fences ({:?}, {:?}) differ from the parent's ({lower:?}, {upper:?})",
                n.lower_fence(),
                n.upper_fence()
            ),
        ));
    }
    let mut children = Vec::new();
    if !n.is_leaf() {
        let mut previous = lower.to_vec();
        let mut key = Vec::new();
        for i in 0..n.count() {
            n.key_into(i, &mut key);
            children.push((n.child(i), previous.clone(), key.clone()));
            previous.clone_from(&key);
        }
        children.push((n.upper_child(), previous, upper.to_vec()));
    }
    Ok(NodeReport {
        is_leaf: n.is_leaf(),
        count: n.count(),
        space_used_bytes: n.space_used_bytes(),
        children,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_cache_sizes_parse_and_garbage_does_not() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("1G"), Some(1 << 30));
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("99999999999999999999999G"), None);
        assert!(last_level_cache_bytes() >= 512);
    }

    /// Runs `epochs` epochs of `tuner`, each taking `ns_of(threshold)`
    /// nanoseconds; returns the threshold of each epoch.
    fn run_epochs(
        tuner: &mut YieldTuner,
        clock: &mut Instant,
        epochs: u32,
        ns_of: impl Fn(usize) -> u64,
    ) -> Vec<usize> {
        let mut taken = Vec::new();
        for _ in 0..epochs {
            let threshold = tuner.threshold_pages();
            taken.push(threshold);
            *clock += std::time::Duration::from_nanos(ns_of(threshold));
            for _ in 0..YIELD_EPOCH_LOOKUPS {
                tuner.lookup_started(|| *clock);
            }
        }
        taken
    }

    #[test]
    fn the_tuner_keeps_the_quicker_threshold_and_probes_again_each_cycle() {
        let cache = 32 << 20;
        let (low, high) = (ROOT_CHILDREN_MAX, 2 * cache / crate::io::PAGE_SIZE);
        let mut tuner = YieldTuner::new(cache);
        let mut clock = Instant::now();
        // The first epoch only starts the clock; then the probe takes
        // turns, and the cycle keeps the quicker (here the high one).
        let quick_high = |t: usize| if t == high { 860_000 } else { 900_000 };
        let taken = run_epochs(&mut tuner, &mut clock, YIELD_CYCLE_EPOCHS, quick_high);
        for (epoch, &t) in taken.iter().enumerate().take(YIELD_PROBE_EPOCHS as usize) {
            assert_eq!(t, if epoch % 2 == 0 { low } else { high }, "epoch {epoch}");
        }
        assert!(taken[YIELD_PROBE_EPOCHS as usize..]
            .iter()
            .all(|&t| t == high));
        // The next cycle probes again and follows a change (5% is enough).
        let quick_low = |t: usize| if t == low { 855_000 } else { 900_000 };
        let taken = run_epochs(&mut tuner, &mut clock, YIELD_CYCLE_EPOCHS, quick_low);
        assert_eq!(taken[0], low);
        assert_eq!(taken[1], high);
        assert!(taken[YIELD_PROBE_EPOCHS as usize..]
            .iter()
            .all(|&t| t == low));
    }

    #[test]
    fn only_levels_past_the_threshold_are_worth_a_yield() {
        let tuner = YieldTuner::new(32 << 20);
        let [low, high] = tuner.thresholds;
        assert_eq!(high, 2 * (32 << 20) / crate::io::PAGE_SIZE);
        // The root's children of any tree (an inner node has fewer than
        // 1,024 children) never take a yield.
        assert!(!level_worth_a_yield(300, low));
        assert!(level_worth_a_yield(low + 1, low));
        assert!(!level_worth_a_yield(high, high));
        // Leaves of a 10M-record tree (about 400k of them).
        assert!(level_worth_a_yield(400_000, high));
        // A tiny cache still leaves the root's children alone.
        assert_eq!(YieldTuner::new(4096).thresholds, [low, low]);
    }
}
