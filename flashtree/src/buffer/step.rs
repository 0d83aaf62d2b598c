//! Logged steps: one synchronous tree operation whose page changes become
//! one log group.
//!
//! # Contract
//! * Between [`begin_step`] and [`end_step`] (on one worker thread, inside
//!   one poll of one task: a step never awaits), dropping a [`GuardX`]
//!   keeps the page exclusively latched and remembers it; freeing a page
//!   holds its id back from the free list. [`end_step`] then appends one
//!   group with the images of every page the step changed (their LSNs set
//!   to the group's number first), releases the latches, and hands the
//!   freed ids to the free list. Holding every latch until the group has
//!   its number is what orders groups like the changes they contain (two-
//!   phase locking of pages).
//! * A page latched twice in one step is a conflict like any other: the
//!   second fix returns `Restart::Retry`, the operation returns, and the
//!   step ends with what it did (tree operations leave the tree consistent
//!   whenever they return).
//! * Without a log (`Durability::None`) steps are not used and guards
//!   release at once, as before.
//!
//! [`GuardX`]: super::GuardX

use super::{BufferManager, PageId, WorkerBuffer};
use crate::io::PAGE_SIZE;
use crate::wal::format::{
    GroupParts, PageChange, PageRuns, GROUP_ALLOCATING_EXTRA_BYTES, GROUP_FIXED_BYTES,
    GROUP_PAGE_BYTES, RECORD_HEADER_BYTES,
};
use std::cell::{Cell, RefCell};

/// Most pages one step may change (a split of every level of a deep tree,
/// or a chain of merges): the log room a step needs is reserved up front.
pub const MAX_STEP_PAGES: usize = 48;

/// Most ranges of page ids a step may take into use ([`step_allocated`]).
pub const MAX_STEP_RANGES: usize = 4;

/// Log bytes a step may append at most.
pub const MAX_STEP_RECORD_BYTES: usize = RECORD_HEADER_BYTES
    + GROUP_FIXED_BYTES
    + GROUP_ALLOCATING_EXTRA_BYTES
    + 16 * MAX_STEP_RANGES
    + 8
    + 255
    + 8 * MAX_STEP_PAGES
    + GROUP_PAGE_BYTES * MAX_STEP_PAGES;

/// A page latched exclusively in the current step.
struct Held {
    pid: PageId,
    frame: u32,
    modified: bool,
}

#[derive(Default)]
struct Step {
    held: Vec<Held>,
    freed: Vec<PageId>,
    catalog: Option<(PageId, String)>,
    allocated: Vec<(PageId, u64)>,
}

thread_local! {
    static STEP_ON: Cell<bool> = const { Cell::new(false) };
    static STEP: RefCell<Step> = RefCell::new(Step::default());
}

/// Starts a step on this thread.
pub fn begin_step() {
    let was_on = STEP_ON.with(|s| s.replace(true));
    assert!(!was_on, "a step began inside a step");
    STEP.with(|s| {
        let s = s.borrow();
        debug_assert!(
            s.held.is_empty()
                && s.freed.is_empty()
                && s.catalog.is_none()
                && s.allocated.is_empty()
        );
    });
}

/// True inside a step.
#[inline]
pub(crate) fn in_step() -> bool {
    STEP_ON.with(|s| s.get())
}

/// Called when an exclusive guard drops: inside a step the latch is kept
/// until [`end_step`] (returns true).
#[inline]
pub(crate) fn defer_unlock(pid: PageId, frame: u32, modified: bool) -> bool {
    if !in_step() {
        return false;
    }
    STEP.with(|s| {
        let mut s = s.borrow_mut();
        debug_assert!(
            s.held.iter().all(|h| h.pid != pid),
            "page {pid} latched twice"
        );
        s.held.push(Held {
            pid,
            frame,
            modified,
        })
    });
    true
}

/// Called when a page is freed: inside a step its id reaches the free list
/// at [`end_step`], after the group that frees it has its number (returns
/// true).
pub(crate) fn defer_free(pid: PageId) -> bool {
    if !in_step() {
        return false;
    }
    STEP.with(|s| s.borrow_mut().freed.push(pid));
    true
}

/// Records that the step created the named tree `name` rooted at `root`.
pub fn step_catalog(root: PageId, name: &str) {
    assert!(in_step(), "step_catalog outside a step");
    assert!(name.len() <= u8::MAX as usize);
    STEP.with(|s| s.borrow_mut().catalog = Some((root, name.to_string())));
}

/// Records that the step takes the page ids `ranges` (first, count) into
/// use without logging their images: a bulk load's pages, durable on the
/// device before the step (at most [`MAX_STEP_RANGES`] ranges).
pub fn step_allocated(ranges: &[(PageId, u64)]) {
    assert!(in_step(), "step_allocated outside a step");
    assert!(ranges.len() <= MAX_STEP_RANGES, "too many ranges in a step");
    STEP.with(|s| s.borrow_mut().allocated.extend_from_slice(ranges));
}

/// Ends the step: logs its changes as one group (if it changed anything),
/// releases its latches and frees its freed pages. Returns the group's
/// sequence number. `log` is false when the caller is unwinding from a
/// panic: the latches are released and nothing is logged (the caller then
/// fails the store, since its pages changed without a log record).
pub fn end_step(wb: &mut WorkerBuffer, log: bool) -> Option<u64> {
    let was_on = STEP_ON.with(|s| s.replace(false));
    assert!(was_on, "end_step without a step");
    let step = STEP.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let bm = wb.bm.clone();
    let changed = step.held.iter().any(|h| h.modified)
        || step.catalog.is_some()
        || !step.allocated.is_empty();
    let mut seq = None;
    if log && (changed || !step.freed.is_empty()) {
        assert!(
            step.held.len() <= MAX_STEP_PAGES,
            "a step changed {} pages (at most {MAX_STEP_PAGES})",
            step.held.len()
        );
        seq = Some(log_held(wb, &bm, &step));
    }
    for held in &step.held {
        bm.state(held.pid).unlock_x_into(super::state::UNLOCKED);
    }
    if let (Some(seq), false) = (seq, step.freed.is_empty()) {
        // Before they reach the free list: a checkpoint that sees them
        // there also sees which group freed them (`durably_free`).
        bm.note_group_frees(seq, &step.freed);
    }
    if !step.freed.is_empty() {
        bm.free_pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(&step.freed);
    }
    seq
}

fn log_held(wb: &mut WorkerBuffer, bm: &BufferManager, step: &Step) -> u64 {
    let frames: Vec<(PageId, u32)> = step
        .held
        .iter()
        .filter(|h| h.modified)
        .map(|h| (h.pid, h.frame))
        .collect();
    let seq = wb.assign_log_seq();
    for &(_, frame) in &frames {
        // SAFETY: the page is exclusively latched by this step until the
        // unlock in `end_step`; no reference to it is alive here.
        super::page::set_page_lsn(
            unsafe { &mut *(bm.frame_ptr(frame) as *mut [u8; PAGE_SIZE]) },
            seq,
        );
    }
    // SAFETY: as above; the pages are only read until `append` returns.
    let pages: Vec<&[u8; PAGE_SIZE]> = frames
        .iter()
        .map(|&(_, frame)| unsafe { &*(bm.frame_ptr(frame) as *const [u8; PAGE_SIZE]) })
        .collect();
    // A new image of each page: fresh when mostly zeros, else full.
    let runs: Vec<PageRuns> = pages.iter().map(|p| PageRuns::plan(None, p)).collect();
    let images: Vec<(PageId, PageChange<'_>)> = frames
        .iter()
        .zip(&pages)
        .zip(&runs)
        .map(|((&(pid, _), page), runs)| {
            bm.set_image_seq(pid, seq);
            (pid, runs.change(page))
        })
        .collect();
    let parts = GroupParts {
        seq,
        catalog: step
            .catalog
            .as_ref()
            .map(|(root, name)| (*root, name.as_str())),
        freed: &step.freed,
        allocated: &step.allocated,
        pages: &images,
    };
    wb.append_log_group(&parts);
    seq
}
