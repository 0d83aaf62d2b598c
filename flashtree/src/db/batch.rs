//! Write batches: puts and deletes over any trees, applied atomically and
//! logged as one group.
//!
//! # Contract
//! * A batch is applied in one synchronous step on one worker: the leaf of
//!   every entry is latched exclusively before the first change and kept
//!   latched until the batch's group is in the log. Before each change the
//!   step saves what it will overwrite: the bytes of the change's footprint
//!   ([`Footprint`]) for a put or delete in a leaf, the whole page for a
//!   split or a move of entries.
//!   Nobody sees a batch half-applied, and no group can contain part of it.
//! * A step that cannot finish (a page is not in memory, a latch is taken,
//!   a leaf has no room) puts every changed leaf back as it was, releases
//!   everything and returns what to do first (load the page, yield, split
//!   the leaf as a step of its own); the caller then runs the batch again.
//!   Splits change no contents, so they may be logged on their own.
//! * Limits: at most [`MAX_BATCH_ENTRIES`] entries, and no more entries
//!   than a quarter of a worker's frames (they must be in memory at once).

use super::Tree;
use crate::btree::node::{fences_cover, Footprint, Node, MAX_ENTRY_BYTES, MAX_KEY_BYTES};
use crate::btree::tree;
use crate::buffer::{GuardX, OpError, PageId, Restart, WorkerBuffer};
use crate::error::{Error, Result};
use crate::io::PAGE_SIZE;
use crate::wal::format::{
    GroupParts, PageChange, PageRuns, RunList, FRESH_MOST_BYTES, GROUP_FIXED_BYTES,
    GROUP_PAGE_BYTES, RECORD_HEADER_BYTES, RUN_HEADER_BYTES,
};
use std::cell::RefCell;

/// Most entries in one batch.
pub const MAX_BATCH_ENTRIES: usize = 4096;

/// One entry of a batch: offsets into the batch's byte arena.
#[derive(Clone, Copy, Debug)]
struct Entry {
    tree: PageId,
    /// The tree is a hash tree (`btree::hash`).
    hash: bool,
    key_at: u32,
    key_len: u16,
    /// None: delete.
    value: Option<(u32, u16)>,
}

/// Puts and deletes over any trees, applied all or nothing by
/// [`super::Db::write`] or [`super::TaskCtx::write`]. Entries apply in
/// order (a later entry for the same key wins).
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    entries: Vec<Entry>,
    bytes: Vec<u8>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Adds a put of `key` = `value` into `tree`.
    pub fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        super::check_entry(key, value)?;
        self.check_room()?;
        let key_at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(key);
        let value_at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(value);
        self.entries.push(Entry {
            tree: tree.root,
            hash: tree.hash,
            key_at,
            key_len: key.len() as u16,
            value: Some((value_at, value.len() as u16)),
        });
        Ok(())
    }

    /// Adds a delete of `key` from `tree`.
    pub fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<()> {
        super::check_key(key)?;
        self.check_room()?;
        let key_at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(key);
        self.entries.push(Entry {
            tree: tree.root,
            hash: tree.hash,
            key_at,
            key_len: key.len() as u16,
            value: None,
        });
        Ok(())
    }

    fn check_room(&self) -> Result<()> {
        if self.entries.len() >= MAX_BATCH_ENTRIES {
            return Err(Error::InvalidArgument(format!(
                "a batch holds at most {MAX_BATCH_ENTRIES} entries"
            )));
        }
        Ok(())
    }

    /// Entries in the batch.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the batch has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes.clear();
    }

    fn key(&self, e: &Entry) -> &[u8] {
        &self.bytes[e.key_at as usize..e.key_at as usize + e.key_len as usize]
    }

    fn value(&self, e: &Entry) -> Option<&[u8]> {
        e.value
            .map(|(at, len)| &self.bytes[at as usize..at as usize + len as usize])
    }

    /// (tree, key, value or None for a delete) of entry `i`.
    pub(crate) fn entry(&self, i: usize) -> (PageId, &[u8], Option<&[u8]>) {
        let e = &self.entries[i];
        (e.tree, self.key(e), self.value(e))
    }

    /// The tree of entry `i`.
    pub(crate) fn entry_tree(&self, i: usize) -> Tree {
        let e = &self.entries[i];
        Tree {
            root: e.tree,
            hash: e.hash,
        }
    }
}

/// Log bytes a group that changes `pages` pages takes at most (each as a
/// full image; a delta is smaller).
fn record_bytes_most(pages: usize) -> usize {
    RECORD_HEADER_BYTES + GROUP_FIXED_BYTES + GROUP_PAGE_BYTES * pages
}

/// Why a batch step stopped without applying the batch (nothing changed).
#[derive(Debug)]
pub(crate) enum BatchStop {
    /// Load, wait or yield, as for any tree operation.
    Restart(Restart),
    /// Entry `entry`'s leaf must split but its parent lacks room: make
    /// `need_bytes` free in the parent first (the separators this step
    /// already put there plus one of the longest).
    ParentFull { entry: usize, need_bytes: usize },
    /// A full leaf could move entries to this neighbour instead of
    /// splitting, but it is not in memory: load it and run the step again
    /// (at most a few times per write: see `apply_step`'s
    /// `may_load_neighbour`).
    LoadNeighbour(PageId),
    /// The log has no room for a group of `record_bytes` now: wait
    /// (`worker::wait_log_room` starts a flush; a checkpoint frees room).
    NoLogRoom { record_bytes: usize },
    /// Entry `entry` goes into a full bucket of a hash tree: grow the
    /// tree for it (`hash::grow`, a logged step of its own) and run the
    /// step again.
    HashFull { entry: usize },
    /// The step ran out of free frames for the pages its splits allocate:
    /// wait until the worker has `frames` free (`worker::wait_free_frames`)
    /// and run it again.
    NoFrames { frames: usize },
    /// A real error.
    Fatal(Error),
}

impl From<Restart> for BatchStop {
    fn from(r: Restart) -> BatchStop {
        BatchStop::Restart(r)
    }
}

impl From<OpError> for BatchStop {
    fn from(e: OpError) -> BatchStop {
        match e {
            OpError::Restart(r) => BatchStop::Restart(r),
            OpError::Fatal(e) => BatchStop::Fatal(e),
        }
    }
}

/// What a batch step did.
pub(crate) struct Applied {
    /// The group's sequence number (None: nothing changed).
    pub seq: Option<u64>,
    /// Per entry: a delete found its key.
    pub found: Vec<bool>,
    /// Keys (tree, entry index) whose leaf ended underfull after a delete.
    pub underfull: Vec<usize>,
}

/// What a step saved of a page it changed, to undo the changes and to log
/// them.
enum Before {
    /// Unchanged so far.
    Unchanged,
    /// Changed only inside the saved spans.
    Spans(Undo),
    /// The page's image before the step.
    Whole(Box<[u8; PAGE_SIZE]>),
}

/// The old bytes of the spans a step changed in a page, oldest first:
/// each span's bytes followed by its offset and length (u16 each, native
/// order), so that undo walks back from the end.
struct Undo(Vec<u8>);

impl Undo {
    /// Saves `page`'s bytes in `footprint`'s ranges.
    fn save(&mut self, page: &[u8; PAGE_SIZE], footprint: &Footprint) {
        for &(offset, len) in footprint.ranges() {
            let start = offset as usize;
            self.0.extend_from_slice(&page[start..start + len as usize]);
            self.0.extend_from_slice(&offset.to_ne_bytes());
            self.0.extend_from_slice(&len.to_ne_bytes());
        }
    }

    /// The spans, newest first: (offset, old bytes).
    fn spans_newest_first(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mut end = self.0.len();
        std::iter::from_fn(move || {
            if end == 0 {
                return None;
            }
            let trailer = &self.0[end - 4..end];
            let offset = u16::from_ne_bytes([trailer[0], trailer[1]]) as usize;
            let len = u16::from_ne_bytes([trailer[2], trailer[3]]) as usize;
            let bytes = &self.0[end - 4 - len..end - 4];
            end -= 4 + len;
            Some((offset, bytes))
        })
    }

    /// Puts the saved bytes back into `page`, newest first: `page` as it
    /// was before the first saved change.
    fn undo(&self, page: &mut [u8; PAGE_SIZE]) {
        for (offset, bytes) in self.spans_newest_first() {
            page[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
    }

    /// The changed ranges as delta runs, ascending and disjoint, with the
    /// page LSN's bytes (set when the group is logged); None when they
    /// reach half a page (the page is logged as an image instead).
    fn runs(&self) -> Option<RunList> {
        let lsn = crate::buffer::page::PAGE_LSN_OFFSET;
        // A scratch buffer per worker thread: no allocation per logged page.
        SPANS_SCRATCH.with_borrow_mut(|spans| {
            spans.clear();
            spans.extend(
                self.spans_newest_first()
                    .map(|(offset, bytes)| (offset, offset + bytes.len()))
                    .chain([(lsn, lsn + 8)]),
            );
            spans.sort_unstable();
            runs_of_sorted(spans)
        })
    }
}

thread_local! {
    /// The sorted spans of [`Undo::runs`], reused.
    static SPANS_SCRATCH: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Ascending `(start, end)` spans as delta runs, joined where closer than a
/// run header; None when they reach half a page.
fn runs_of_sorted(spans: &[(usize, usize)]) -> Option<RunList> {
    let mut runs = RunList::new();
    let (mut start, mut end) = spans[0];
    let mut payload_bytes = 0;
    for &(s, e) in &spans[1..] {
        // Join runs closer than a run header's worth of bytes.
        if s <= end + RUN_HEADER_BYTES {
            end = end.max(e);
            continue;
        }
        runs.push((start as u16, (end - start) as u16));
        payload_bytes += RUN_HEADER_BYTES + end - start;
        (start, end) = (s, e);
    }
    runs.push((start as u16, (end - start) as u16));
    payload_bytes += RUN_HEADER_BYTES + end - start;
    (payload_bytes < PAGE_SIZE / 2).then_some(runs)
}

/// A page latched by the step: a leaf, or an inner node a split in the
/// step changed; with what the step saved of it, or allocated by it.
struct HeldLeaf<'a> {
    tree: PageId,
    guard: GuardX<'a>,
    before: Before,
    /// A leaf (entries are looked up here).
    is_leaf: bool,
    /// Allocated by this step: freed on roll-back.
    allocated: bool,
}

impl<'a> HeldLeaf<'a> {
    /// A leaf of tree `tree` the step latched, unchanged so far.
    fn leaf(tree: PageId, guard: GuardX<'a>) -> HeldLeaf<'a> {
        HeldLeaf {
            tree,
            guard,
            before: Before::Unchanged,
            is_leaf: true,
            allocated: false,
        }
    }

    /// Changed by the step (or allocated by it): logged in its group.
    fn is_changed(&self) -> bool {
        self.allocated || !matches!(self.before, Before::Unchanged)
    }
}

/// Applies `batch` in one step, or changes nothing and says why not.
///
/// `may_load_neighbour`: a leaf that would split evenly may stop the step
/// to have a neighbour that is not in memory loaded
/// ([`BatchStop::LoadNeighbour`]), to move entries there instead.
///
/// `probe`: find every B+-tree entry's leaf before applying any (see
/// [`probe_pays`]): a step that would miss a leaf late in the batch
/// stops before it applied and must undo the entries before the miss.
///
/// `located`: set to how many entries, from the first, found their leaf
/// or bucket in memory before the step stopped (all of them, or fewer
/// when it stopped at a miss): a prefetch after a miss starts there.
pub(crate) fn apply_step(
    wb: &mut WorkerBuffer,
    batch: &WriteBatch,
    last_puts: &super::LastPuts,
    may_load_neighbour: bool,
    probe: bool,
    located: &mut usize,
) -> std::result::Result<Applied, BatchStop> {
    *located = 0;
    wb.manager().wal().check().map_err(BatchStop::Fatal)?;
    // Room for a group of one page; the group's real size is checked once
    // the step knows which pages it changed.
    if !wb.log_has_room(record_bytes_most(1)) {
        return Err(BatchStop::NoLogRoom {
            record_bytes: record_bytes_most(1),
        });
    }
    let bm = wb.manager_arc();
    // The probe: every B+-tree entry's leaf, before anything is applied.
    // A miss stops the step here, with nothing to undo; the leaves found
    // are latched from these guards below, not found again. An entry
    // whose key the previous probed leaf covers (keys in order) needs no
    // descent: the step finds that leaf again as the previous entry's.
    let mut probed = Vec::new();
    if probe {
        probed.reserve(batch.len());
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        let mut previous: Option<(PageId, usize)> = None;
        for i in 0..batch.len() {
            if batch.entries[i].hash {
                probed.push(None);
                previous = None;
                continue;
            }
            let (tree_root, key, _) = batch.entry(i);
            if let Some((_, p)) = previous.filter(|&(root, _)| root == tree_root) {
                let leaf = probed[p].as_ref().expect("a probed leaf");
                let n = tree::racy_node(leaf);
                n.lower_fence_into(&mut lower);
                n.upper_fence_into(&mut upper);
                // The fences were read racily: trusted once the leaf is
                // unchanged.
                if fences_cover(&lower, &upper, key) && leaf.check().is_ok() {
                    probed.push(None);
                    continue;
                }
            }
            match tree::descend(&bm, tree_root, key) {
                Ok((_, leaf)) => {
                    probed.push(Some(leaf));
                    previous = Some((tree_root, i));
                }
                Err(e) => {
                    *located = i;
                    return Err(e.into());
                }
            }
        }
    }
    let mut held: Vec<HeldLeaf<'_>> = Vec::new();
    let mut found = vec![false; batch.len()];
    let mut underfull = Vec::new();
    let mut i = 0;
    // Splits made for entry i: the first may follow the task's sequence
    // (see `tree::split_latched`), later ones split evenly.
    let mut splits_for_entry = 0;
    let mut last_leaf: Option<usize> = None;
    while i < batch.len() {
        // Every entry before `i` found its leaf or bucket in memory.
        *located = i;
        let (tree_root, key, value) = batch.entry(i);
        if batch.entries[i].hash {
            // A hash tree: the bucket from the directory; a full one stops
            // the step (the tree grows as a step of its own).
            let bucket = bucket_in_step(&bm, &held, tree_root, key);
            let index = hold_found(wb, &mut held, tree_root, bucket)?;
            // A B+-tree entry after this one descends afresh.
            last_leaf = None;
            let leaf = &mut held[index];
            match value {
                Some(value) => {
                    let n = Node::from_page(leaf.guard.page());
                    let slot = n.lower_bound(key);
                    if !n.fits(slot, key.len(), value.len()) {
                        roll_back(wb, &mut held);
                        return Err(BatchStop::HashFull { entry: i });
                    }
                    if let Err(stop) = insert_saved(leaf, slot, key, value) {
                        roll_back(wb, &mut held);
                        return Err(stop);
                    }
                }
                None => {
                    let (slot, exact) = Node::from_page(leaf.guard.page()).lower_bound(key);
                    if exact {
                        let footprint = Node::from_page(leaf.guard.page()).remove_footprint(slot);
                        save_footprint(leaf, Some(&footprint));
                        found[i] = Node::from_page_mut(leaf.guard.page_mut()).remove(key);
                    }
                }
            }
            i += 1;
            splits_for_entry = 0;
            continue;
        }
        // The leaf of the previous entry first (keys in order often share
        // one); otherwise a descent, which finds a held leaf by its page id.
        // (Testing every held leaf's fences here made a batch quadratic.)
        let index = match last_leaf.filter(|&l: &usize| {
            let h = &held[l];
            h.is_leaf
                && h.tree == tree_root
                && tree::leaf_covers(Node::from_page(h.guard.page()), key)
        }) {
            Some(index) => index,
            None => {
                let leaf = match probed.get_mut(i).and_then(Option::take) {
                    // Found by the probe; held since (the step split it or
                    // an entry before went there): use it if it still
                    // covers the key, else descend.
                    Some(leaf) => match held.iter().position(|h| h.guard.pid() == leaf.pid()) {
                        Some(index)
                            if held[index].is_leaf
                                && tree::leaf_covers(
                                    Node::from_page(held[index].guard.page()),
                                    key,
                                ) =>
                        {
                            Ok(Parent::Held(index))
                        }
                        Some(_) => leaf_in_step(&bm, &held, tree_root, key),
                        // Latching it checks that it did not change since.
                        None => Ok(Parent::Optimistic(leaf)),
                    },
                    None => leaf_in_step(&bm, &held, tree_root, key),
                };
                hold_found(wb, &mut held, tree_root, leaf)?
            }
        };
        last_leaf = Some(index);
        match value {
            Some(value) => {
                let n = Node::from_page(held[index].guard.page());
                let slot = n.lower_bound(key);
                if !n.fits(slot, key.len(), value.len()) {
                    // Split inside the step, so that the batch's entries
                    // need not fit the leaves as they were before it.
                    splits_for_entry += 1;
                    if splits_for_entry > 8 {
                        roll_back(wb, &mut held);
                        return Err(BatchStop::Fatal(Error::Corrupt(format!(
                            "batch entry {i} does not fit after 8 splits of its leaf"
                        ))));
                    }
                    let previous = last_puts.get(tree_root).filter(|_| splits_for_entry == 1);
                    if let Err(stop) = split_in_step(
                        wb,
                        &bm,
                        &mut held,
                        index,
                        (tree_root, key, value.len(), previous),
                        (i, may_load_neighbour),
                    ) {
                        let stop = match stop {
                            BatchStop::Restart(Restart::NoFrame) => {
                                frames_to_wait_for(wb, &held, batch.len() - i)
                            }
                            stop => stop,
                        };
                        roll_back(wb, &mut held);
                        return Err(stop);
                    }
                    continue; // entry i again, into the right half
                }
                if let Err(stop) = insert_saved(&mut held[index], slot, key, value) {
                    roll_back(wb, &mut held);
                    return Err(stop);
                }
            }
            None => {
                let leaf = &mut held[index];
                let (slot, exact) = Node::from_page(leaf.guard.page()).lower_bound(key);
                if exact {
                    let footprint = Node::from_page(leaf.guard.page()).remove_footprint(slot);
                    save_footprint(leaf, Some(&footprint));
                    let is_root = leaf.guard.pid() == tree_root;
                    let n = Node::from_page_mut(leaf.guard.page_mut());
                    found[i] = n.remove(key);
                    if n.space_used_bytes() < tree::MERGE_THRESHOLD_BYTES && !is_root {
                        underfull.push(i);
                    }
                }
            }
        }
        i += 1;
        splits_for_entry = 0;
    }
    let changed = held.iter().filter(|h| h.is_changed()).count();
    if changed > 0 {
        let record_bytes = record_bytes_most(changed);
        let most = wb.log_max_record_bytes();
        if record_bytes > most {
            roll_back(wb, &mut held);
            return Err(BatchStop::Fatal(Error::InvalidArgument(format!(
                "the batch changes {changed} pages, whose log record (up to {record_bytes} bytes) exceeds the largest the log buffer takes ({most} bytes, half of Options::wal_buffer_bytes); split the batch or raise wal_buffer_bytes"
            ))));
        }
        if !wb.log_has_room(record_bytes) {
            roll_back(wb, &mut held);
            return Err(BatchStop::NoLogRoom { record_bytes });
        }
    }
    let seq = (changed > 0).then(|| log_leaves(wb, &mut held));
    recycle_images(&mut held);
    drop(held);
    Ok(Applied {
        seq,
        found,
        underfull,
    })
}

/// The stop of a step that found no free frame for a split's new page,
/// with `entries_left` entries (this one among them) still to apply: wait
/// for as many free frames as the step allocated, plus two for this split
/// (a root splits into two new pages), plus one per later entry (each may
/// split its leaf once more), so that the retry most likely finds all it
/// needs. At most half the worker's frames: the step's leaves must stay in
/// memory beside them. A step that needs more (a batch splitting leaves
/// many times over in a tiny pool) is refused with an error.
fn frames_to_wait_for(wb: &WorkerBuffer, held: &[HeldLeaf<'_>], entries_left: usize) -> BatchStop {
    let allocated = held.iter().filter(|h| h.allocated).count();
    let most = wb.frame_count() / 2;
    if allocated + 1 > most {
        return BatchStop::Fatal(Error::InvalidArgument(format!(
            "the batch's splits need more than {most} new pages at once, half of this worker's buffer frames; split the batch or give the pool more memory"
        )));
    }
    BatchStop::NoFrames {
        frames: (allocated + 1 + entries_left).min(most),
    }
}

/// Inserts `key` = `value` at `slot` (from `lower_bound`; the space was
/// checked) into the held leaf or bucket, saving the bytes it overwrites
/// first.
fn insert_saved(
    leaf: &mut HeldLeaf<'_>,
    slot: (usize, bool),
    key: &[u8],
    value: &[u8],
) -> std::result::Result<(), BatchStop> {
    let footprint = Node::from_page(leaf.guard.page()).insert_footprint(slot, key, value.len());
    save_footprint(leaf, footprint.as_ref());
    let pid = leaf.guard.pid();
    Node::from_page_mut(leaf.guard.page_mut())
        .insert_found(slot, key, value)
        .map_err(|_| {
            BatchStop::Fatal(Error::Corrupt(format!(
                "page {pid}: insert failed after the space check"
            )))
        })
}

/// The index in `held` of the leaf or bucket `found` names (of tree
/// `tree_root`): one the step holds, or one it now latches exclusively.
/// A stop (or a latch it cannot take) rolls the step back first.
fn hold_found<'a>(
    wb: &mut WorkerBuffer,
    held: &mut Vec<HeldLeaf<'a>>,
    tree_root: PageId,
    found: std::result::Result<Parent<'a>, BatchStop>,
) -> std::result::Result<usize, BatchStop> {
    let stop = match found {
        Ok(Parent::Held(index)) => return Ok(index),
        Ok(Parent::Optimistic(page)) => match page.upgrade() {
            Ok(guard) => {
                held.push(HeldLeaf::leaf(tree_root, guard));
                return Ok(held.len() - 1);
            }
            Err(e) => e.into(),
        },
        Err(stop) => stop,
    };
    roll_back(wb, held);
    Err(stop)
}

/// Saves the page's image before a change that may write anywhere in it
/// (a split, a move of entries): the page as it was before the step.
fn save_before(leaf: &mut HeldLeaf<'_>) {
    match std::mem::replace(&mut leaf.before, Before::Unchanged) {
        Before::Whole(image) => leaf.before = Before::Whole(image),
        earlier => {
            let mut image = SPARE_IMAGES
                .with(|spare| spare.borrow_mut().pop())
                .unwrap_or_else(|| Box::new([0; PAGE_SIZE]));
            image.copy_from_slice(leaf.guard.page());
            if let Before::Spans(undo) = earlier {
                // Changed earlier in the step: back to its state before.
                undo.undo(&mut image);
                recycle_undo(undo);
            }
            leaf.before = Before::Whole(image);
        }
    }
}

/// Saves what a change of the leaf will overwrite: the bytes of its
/// `footprint`, or the whole page when the change may write anywhere
/// (None). A page saved whole since the step began needs nothing more.
fn save_footprint(leaf: &mut HeldLeaf<'_>, footprint: Option<&Footprint>) {
    let Some(footprint) = footprint else {
        return save_before(leaf);
    };
    match &mut leaf.before {
        Before::Whole(_) => {}
        Before::Spans(undo) => undo.save(leaf.guard.page(), footprint),
        Before::Unchanged => {
            let mut undo = Undo(
                SPARE_UNDO
                    .with(|spare| spare.borrow_mut().pop())
                    .unwrap_or_default(),
            );
            undo.save(leaf.guard.page(), footprint);
            leaf.before = Before::Spans(undo);
        }
    }
}

/// Most entries of a batch whose first step probes its leaves: a probe
/// may descend once per entry, and a large batch rarely misses late
/// enough to pay for it.
pub(crate) const PROBE_ENTRIES_MOST: usize = 64;

/// Of a worker's last 64 batch writes, how many first steps missed a page
/// for the probe to pay (see [`probe_pays`]).
const PROBE_MISSES_LEAST: u32 = 4;

thread_local! {
    /// One bit per recent batch write of this worker thread, newest in
    /// bit 0: its first step missed a page.
    static FIRST_STEP_MISSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Records whether a batch write's first step missed a page.
pub(crate) fn note_first_step(missed: bool) {
    FIRST_STEP_MISSES.with(|m| m.set((m.get() << 1) | missed as u64));
}

/// True when this worker's recent batches missed pages often enough that
/// a probe of a batch's leaves before applying it pays: out of memory,
/// a step that misses a leaf after applying most of the batch (TPC-C's
/// New-Order, whose last entry goes to a leaf no read of the transaction
/// touched) undoes all of it and applies it again after the read; in
/// memory no step misses and no probe runs.
pub(crate) fn probe_pays(entries: usize) -> bool {
    entries > 1
        && entries <= PROBE_ENTRIES_MOST
        && FIRST_STEP_MISSES.with(|m| m.get().count_ones()) >= PROBE_MISSES_LEAST
}

/// Most page-sized buffers a worker keeps for before-images (4 MiB), and
/// most buffers for saved spans.
const SPARE_IMAGES_MOST: usize = 1024;

thread_local! {
    /// Before-image buffers of finished steps, reused by the next ones: a
    /// batch saves one image per page it splits, and allocating each
    /// afresh cost more than copying it.
    static SPARE_IMAGES: RefCell<Vec<Box<[u8; PAGE_SIZE]>>> = const { RefCell::new(Vec::new()) };
    /// Span buffers of finished steps ([`Undo`]), reused likewise.
    static SPARE_UNDO: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Hands a span buffer back for reuse.
fn recycle_undo(undo: Undo) {
    let mut bytes = undo.0;
    bytes.clear();
    SPARE_UNDO.with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < SPARE_IMAGES_MOST {
            spare.push(bytes);
        }
    });
}

/// Hands the step's saved images and spans back for reuse.
fn recycle_images(held: &mut [HeldLeaf<'_>]) {
    for h in held.iter_mut() {
        match std::mem::replace(&mut h.before, Before::Unchanged) {
            Before::Unchanged => {}
            Before::Spans(undo) => recycle_undo(undo),
            Before::Whole(image) => SPARE_IMAGES.with(|spare| {
                let mut spare = spare.borrow_mut();
                if spare.len() < SPARE_IMAGES_MOST {
                    spare.push(image);
                }
            }),
        }
    }
}

/// Puts every changed page back as it was before the step and frees the
/// pages it allocated.
fn roll_back(wb: &mut WorkerBuffer, held: &mut Vec<HeldLeaf<'_>>) {
    for leaf in held.iter_mut() {
        match &leaf.before {
            Before::Unchanged => {}
            Before::Spans(undo) => undo.undo(leaf.guard.page_mut()),
            Before::Whole(image) => leaf.guard.page_mut().copy_from_slice(&image[..]),
        }
    }
    recycle_images(held);
    for leaf in held.drain(..) {
        if leaf.allocated {
            wb.free_new_page(leaf.guard);
        }
    }
}

/// Splits the held leaf `index` (entry `entry`'s, for `key` of tree
/// `tree_root` with a `value_len`-byte value; `previous_key`: the task's
/// last put there) inside the step: its parent (found through the pages
/// the step holds, latched and saved) gets the separator; a root leaf
/// splits in place. A leaf that would split evenly moves entries to a
/// neighbour with room instead, when one is in memory
/// ([`rebalance_in_step`]).
fn split_in_step<'a>(
    wb: &mut WorkerBuffer,
    bm: &'a crate::buffer::BufferManager,
    held: &mut Vec<HeldLeaf<'a>>,
    index: usize,
    (tree_root, key, value_len, previous_key): (PageId, &[u8], usize, Option<&[u8]>),
    (entry, may_load_neighbour): (usize, bool),
) -> std::result::Result<(), BatchStop> {
    let leaf_pid = held[index].guard.pid();
    if Node::from_page(held[index].guard.page()).count() < 2 {
        return Err(BatchStop::Fatal(Error::InvalidArgument(format!(
            "batch entry {entry} does not fit a leaf of its own (key and fences too long)"
        ))));
    }
    save_before(&mut held[index]);
    if leaf_pid == tree_root {
        let (right, left) = tree::split_root_latched(bm, wb, &mut held[index].guard)?;
        held[index].is_leaf = false;
        for guard in [right, left] {
            held.push(HeldLeaf {
                tree: tree_root,
                guard,
                before: Before::Unchanged,
                is_leaf: true,
                allocated: true,
            });
        }
        return Ok(());
    }
    let parent = find_parent(bm, held, tree_root, leaf_pid, key)?;
    let parent_index = match parent {
        Parent::Held(p) => p,
        Parent::Optimistic(guard) => {
            let has_space = tree::racy_node(&guard).has_space_for(MAX_KEY_BYTES, 8);
            guard.check()?;
            if !has_space {
                return Err(BatchStop::ParentFull {
                    entry,
                    need_bytes: SEPARATOR_BYTES_MAX,
                });
            }
            held.push(HeldLeaf {
                tree: tree_root,
                guard: guard.upgrade()?,
                before: Before::Unchanged,
                is_leaf: false,
                allocated: false,
            });
            held.len() - 1
        }
    };
    let parent_node = Node::from_page(held[parent_index].guard.page());
    if !parent_node.has_space_for(MAX_KEY_BYTES, 8) {
        // Room the step's own separators took there, plus the next one.
        let used_before = match &held[parent_index].before {
            Before::Whole(before) => Node::from_page(before).space_used_bytes(),
            // (An inner node is only ever saved whole.)
            Before::Unchanged | Before::Spans(_) => parent_node.space_used_bytes(),
        };
        let added = parent_node.space_used_bytes().saturating_sub(used_before);
        return Err(BatchStop::ParentFull {
            entry,
            need_bytes: added + SEPARATOR_BYTES_MAX,
        });
    }
    if rebalance_in_step(
        bm,
        held,
        (parent_index, index),
        (tree_root, key, value_len),
        (previous_key, may_load_neighbour),
    )? {
        wb.stats.leaf_rebalances += 1;
        return Ok(());
    }
    save_before(&mut held[parent_index]);
    let (parent, leaf) = two_mut(held, parent_index, index);
    let left = tree::split_latched(
        bm,
        wb,
        &mut parent.guard,
        &mut leaf.guard,
        key,
        previous_key,
    )?;
    held.push(HeldLeaf {
        tree: tree_root,
        guard: left,
        before: Before::Unchanged,
        is_leaf: true,
        allocated: true,
    });
    Ok(())
}

/// The full held leaf `index` under the held parent `parent_index`, for an
/// insert of `key` (a `value_len`-byte value) that would split it evenly:
/// moves entries to a neighbour instead (see `tree::plan_rebalance`) when
/// the neighbour is held by the step or can be latched at once (one
/// latched by another task is skipped). When no neighbour in memory took
/// the entries and one is not in memory, stops the step to have it loaded
/// if `may_load_neighbour` ([`BatchStop::LoadNeighbour`]; the step runs
/// again), else skips it. Saves the three pages' images first. True if it
/// did.
fn rebalance_in_step<'a>(
    bm: &'a crate::buffer::BufferManager,
    held: &mut Vec<HeldLeaf<'a>>,
    (parent_index, index): (usize, usize),
    (tree_root, key, value_len): (PageId, &[u8], usize),
    (previous_key, may_load_neighbour): (Option<&[u8]>, bool),
) -> std::result::Result<bool, BatchStop> {
    let (leaf, parent) = (&held[index].guard, &held[parent_index].guard);
    let neighbours = tree::rebalance_neighbours(
        Node::from_page(parent.page()),
        (Node::from_page(leaf.page()), leaf.pid()),
        key,
        previous_key,
    );
    let mut not_in_memory = None;
    for (left_slot, neighbour, neighbour_is_right) in neighbours.into_iter().flatten() {
        let (neighbour_index, latched_here) =
            match held.iter().position(|h| h.guard.pid() == neighbour) {
                Some(i) => (i, false),
                None => {
                    let Some(guard) = tree::latch_neighbour(bm, neighbour, &mut not_in_memory)
                    else {
                        continue;
                    };
                    held.push(HeldLeaf::leaf(tree_root, guard));
                    (held.len() - 1, true)
                }
            };
        let (left_index, right_index) = if neighbour_is_right {
            (index, neighbour_index)
        } else {
            (neighbour_index, index)
        };
        let plan = tree::plan_rebalance(
            Node::from_page(held[parent_index].guard.page()),
            left_slot,
            Node::from_page(held[left_index].guard.page()),
            Node::from_page(held[right_index].guard.page()),
            (key, value_len),
        );
        let Some(plan) = plan else {
            if latched_here {
                held.pop(); // unchanged: released at once
            }
            continue;
        };
        let Ok([parent, left, right]) =
            held.get_disjoint_mut([parent_index, left_index, right_index])
        else {
            unreachable!("a parent and two leaves are three pages");
        };
        for page in [&mut *parent, &mut *left, &mut *right] {
            save_before(page);
        }
        // Only a broken invariant fails here; the caller rolls the step
        // back from the saved images.
        tree::apply_rebalance(
            &mut parent.guard,
            left_slot,
            &mut left.guard,
            &mut right.guard,
            &plan,
        )?;
        return Ok(true);
    }
    match not_in_memory {
        Some(pid) if may_load_neighbour => Err(BatchStop::LoadNeighbour(pid)),
        _ => Ok(false),
    }
}

/// The leaf whose range holds `key`, descending from the root and reading
/// the pages this step holds through their latches (an optimistic latch on
/// a page the step holds exclusively would wait for ever).
fn leaf_in_step<'a>(
    bm: &'a crate::buffer::BufferManager,
    held: &[HeldLeaf<'a>],
    root: PageId,
    key: &[u8],
) -> std::result::Result<Parent<'a>, BatchStop> {
    let fix = |pid: PageId| -> std::result::Result<Parent<'a>, BatchStop> {
        match held.iter().position(|h| h.guard.pid() == pid) {
            Some(i) => Ok(Parent::Held(i)),
            None => Ok(Parent::Optimistic(bm.fix_optimistic(pid)?)),
        }
    };
    let mut current = fix(root)?;
    for _depth in 0..64 {
        // None in a leaf; an optimistic page is read through volatile
        // loads (`tree::racy_node`), never through a reference.
        let child = match &current {
            Parent::Held(i) => Node::from_page(held[*i].guard.page())
                .view()
                .child_if_inner(key),
            Parent::Optimistic(g) => tree::racy_node(g).child_if_inner(key),
        };
        if let Parent::Optimistic(g) = &current {
            g.check()?;
        }
        let Some(child) = child else {
            return Ok(current);
        };
        let next = fix(child)?;
        if let Parent::Optimistic(g) = &current {
            g.check()?;
        }
        current = next;
    }
    Err(BatchStop::Fatal(Error::Corrupt(format!(
        "tree {root}: no leaf within 64 levels"
    ))))
}

/// The bucket of `key` in the hash tree rooted at `root`: one the step
/// holds, or optimistically latched (validated after its directory page).
/// The step never holds directory pages (it changes only buckets).
fn bucket_in_step<'a>(
    bm: &'a crate::buffer::BufferManager,
    held: &[HeldLeaf<'a>],
    root: PageId,
    key: &[u8],
) -> std::result::Result<Parent<'a>, BatchStop> {
    use crate::btree::hash;
    let (dir, pid) = hash::bucket_dir(bm, root, hash::hash_key(key))?;
    if let Some(i) = held.iter().position(|h| h.guard.pid() == pid) {
        return Ok(Parent::Held(i));
    }
    let bucket = bm.fix_optimistic(pid)?;
    dir.check()?;
    Ok(Parent::Optimistic(hash::check_is_bucket(bucket)?))
}

/// A page found by [`find_parent`] or [`leaf_in_step`].
enum Parent<'a> {
    /// Held by the step at this index.
    Held(usize),
    /// Not held: optimistically latched (validated).
    Optimistic(crate::buffer::GuardO<'a>),
}

/// The parent of `pid` (which holds `key`), descending from the root and
/// reading the pages this step holds through their latches.
fn find_parent<'a>(
    bm: &'a crate::buffer::BufferManager,
    held: &[HeldLeaf<'a>],
    root: PageId,
    pid: PageId,
    key: &[u8],
) -> std::result::Result<Parent<'a>, BatchStop> {
    let fix = |child: PageId| -> std::result::Result<Parent<'a>, BatchStop> {
        match held.iter().position(|h| h.guard.pid() == child) {
            Some(i) => Ok(Parent::Held(i)),
            None => Ok(Parent::Optimistic(bm.fix_optimistic(child)?)),
        }
    };
    let mut current = fix(root)?;
    for _depth in 0..64 {
        // None in a leaf; an optimistic page is read through volatile
        // loads (`tree::racy_node`), never through a reference.
        let child = match &current {
            Parent::Held(i) => Node::from_page(held[*i].guard.page())
                .view()
                .child_if_inner(key),
            Parent::Optimistic(g) => tree::racy_node(g).child_if_inner(key),
        };
        if let Parent::Optimistic(g) = &current {
            g.check()?;
        }
        let Some(child) = child else {
            return Err(BatchStop::Restart(Restart::Retry)); // a leaf
        };
        if child == pid {
            return Ok(current);
        }
        let next = fix(child)?;
        if let Parent::Optimistic(g) = &current {
            g.check()?;
        }
        current = next;
    }
    Err(BatchStop::Fatal(Error::Corrupt(format!(
        "no parent of page {pid} within 64 levels"
    ))))
}

/// Two distinct elements of a slice, mutably.
fn two_mut<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b);
    if a < b {
        let (left, right) = items.split_at_mut(b);
        (&mut left[a], &mut right[0])
    } else {
        let (left, right) = items.split_at_mut(a);
        (&mut right[0], &mut left[b])
    }
}

/// Logs the changed pages as one group; returns its number. A page whose
/// full image the log holds since the image floor (see
/// `CheckpointControl::image_floor`) is logged as a delta against its
/// image before the step; the others as full images.
fn log_leaves(wb: &mut WorkerBuffer, held: &mut [HeldLeaf<'_>]) -> u64 {
    let floor = wb.manager().wal().checkpoints.image_floor();
    let seq = wb.assign_log_seq();
    let mut runs: Vec<PageRuns> = Vec::new();
    for leaf in held.iter_mut().filter(|h| h.is_changed()) {
        #[cfg(debug_assertions)]
        if let Before::Spans(undo) = &leaf.before {
            debug_check_spans(undo, leaf.guard.page());
        }
        crate::buffer::page::set_page_lsn(leaf.guard.page_mut(), seq);
        let image_seq = leaf.guard.image_seq();
        // A delta needs an image of the page at or above the floor.
        let delta_allowed = !leaf.allocated && image_seq != 0 && image_seq >= floor;
        runs.push(match &leaf.before {
            Before::Spans(undo) if delta_allowed => match undo.runs() {
                Some(runs) => PageRuns::Delta(runs),
                None => PageRuns::plan(None, leaf.guard.page()),
            },
            Before::Whole(before) if delta_allowed => {
                PageRuns::plan(Some(before), leaf.guard.page())
            }
            _ => image_runs(leaf.guard.page()),
        });
    }
    let changes: Vec<(PageId, PageChange<'_>)> = held
        .iter()
        .filter(|h| h.is_changed())
        .zip(&runs)
        .map(|(h, runs)| (h.guard.pid(), runs.change(h.guard.page())))
        .collect();
    debug_assert!(changes.len() <= 3 * MAX_BATCH_ENTRIES + 1);
    wb.append_log_group(&GroupParts {
        seq,
        catalog: None,
        freed: &[],
        allocated: &[],
        pages: &changes,
    });
    drop(changes);
    for (leaf, runs) in held.iter_mut().filter(|h| h.is_changed()).zip(&runs) {
        if runs.is_image() {
            leaf.guard.set_image_seq(seq);
        }
    }
    seq
}

/// A new image of `page`: full when its node uses more than a fresh
/// image's most payload (the scan for its nonzero runs would read most of
/// the page only to say so; a full image is a valid image of any page),
/// else as [`PageRuns::plan`] finds.
fn image_runs(page: &[u8; PAGE_SIZE]) -> PageRuns {
    if Node::from_page(page).space_used_bytes() > FRESH_MOST_BYTES {
        return PageRuns::Full;
    }
    PageRuns::plan(None, page)
}

/// Debug builds: the step changed `page` only inside `undo`'s spans (a
/// footprint that missed a byte would log a delta that loses it).
#[cfg(debug_assertions)]
fn debug_check_spans(undo: &Undo, page: &[u8; PAGE_SIZE]) {
    let mut before = Box::new(*page);
    undo.undo(&mut before);
    let spans: Vec<(usize, usize)> = undo
        .spans_newest_first()
        .map(|(offset, bytes)| (offset, offset + bytes.len()))
        .collect();
    for (at, (x, y)) in before.iter().zip(page.iter()).enumerate() {
        assert!(
            x == y || spans.iter().any(|&(start, end)| (start..end).contains(&at)),
            "byte {at} changed outside the saved spans {spans:?}"
        );
    }
}

/// Checks that a batch of `entries` can be in memory at once.
pub(crate) fn check_batch_size(entries: usize, frames_per_worker: u64) -> Result<()> {
    let most = (frames_per_worker / 4).max(1) as usize;
    if entries > most {
        return Err(Error::InvalidArgument(format!(
            "a batch of {entries} entries needs as many leaves in memory at once; this pool allows {most} per batch (a quarter of a worker's frames)"
        )));
    }
    Ok(())
}

const _: () = assert!(MAX_KEY_BYTES + 8 <= MAX_ENTRY_BYTES);

/// Bytes the longest separator takes in an inner node: key, child id, slot.
pub(crate) const SEPARATOR_BYTES_MAX: usize = MAX_KEY_BYTES + 8 + crate::btree::node::SLOT_BYTES;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::node::init_leaf;

    #[test]
    fn probes_run_only_while_first_steps_miss() {
        // Each test runs on a thread of its own: no history yet.
        assert!(!probe_pays(10), "no miss seen yet");
        for _ in 0..PROBE_MISSES_LEAST - 1 {
            note_first_step(true);
        }
        assert!(!probe_pays(10), "too few misses");
        note_first_step(true);
        assert!(probe_pays(10));
        assert!(!probe_pays(1), "a single entry has nothing to undo");
        assert!(!probe_pays(PROBE_ENTRIES_MOST + 1), "too large a batch");
        // 61 hits push out all but 3 of the 4 misses.
        for _ in 0..61 {
            note_first_step(false);
        }
        assert!(!probe_pays(10), "the misses are older than 64 writes");
    }

    /// A leaf changed by inserts and removes through saved footprints: undo
    /// gives back the page as it was, and the runs cover every changed byte
    /// and the LSN, ascending and disjoint.
    #[test]
    fn undo_restores_the_page_and_runs_cover_the_changes() {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        let node = init_leaf(&mut page, b"", b"");
        for i in 0..20u32 {
            node.insert(&i.to_be_bytes(), &[i as u8; 40]).unwrap();
        }
        let start = page.clone();
        let mut undo = Undo(Vec::new());
        for (i, value_len) in [(100u32, 30usize), (5, 40), (7, 12), (3, 0)] {
            let node = Node::from_page_mut(&mut page);
            let key = i.to_be_bytes();
            let found = node.lower_bound(&key);
            let footprint = node.insert_footprint(found, &key, value_len).unwrap();
            undo.save(node.as_page(), &footprint);
            node.insert_found(found, &key, &vec![7; value_len]).unwrap();
        }
        let node = Node::from_page_mut(&mut page);
        let slot = node.lower_bound(&9u32.to_be_bytes()).0;
        let footprint = node.remove_footprint(slot);
        undo.save(node.as_page(), &footprint);
        assert!(node.remove(&9u32.to_be_bytes()));
        crate::buffer::page::set_page_lsn(&mut page, 42);

        let runs = undo.runs().expect("a small change is a delta");
        assert!(runs.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0));
        for (at, (before, after)) in start.iter().zip(page.iter()).enumerate() {
            let covered = runs
                .iter()
                .any(|&(offset, len)| (offset as usize..(offset + len) as usize).contains(&at));
            assert!(
                before == after || covered,
                "byte {at} changed outside the runs"
            );
        }
        let mut undone = page.clone();
        undo.undo(&mut undone);
        // Everything but the LSN, which the step sets after its changes.
        undone[8..16].copy_from_slice(&start[8..16]);
        assert_eq!(&undone[..], &start[..]);
    }

    /// Spans of half a page or more are logged as an image, not a delta.
    #[test]
    fn large_spans_are_not_a_delta() {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        let node = init_leaf(&mut page, b"", b"");
        for i in 0..300u16 {
            node.insert(&i.to_be_bytes(), &[]).unwrap();
        }
        let node = Node::from_page(&page);
        let mut undo = Undo(Vec::new());
        // The last slot: the header and one slot.
        undo.save(&page, &node.remove_footprint(299));
        assert!(undo.runs().is_some());
        // The first slot: the whole slot array, 2,400 bytes.
        undo.save(&page, &node.remove_footprint(0));
        assert!(undo.runs().is_none());
    }
}
