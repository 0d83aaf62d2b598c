//! Hash trees: extendible hashing over 4 KiB pages, with the directory
//! itself a small tree of pages (see docs/ARCHITECTURE.md, "Hash index").
//!
//! * A **bucket** is a B+-tree leaf with empty fences ([`Node`]): entries
//!   sorted by key inside the bucket, so that the batch machinery
//!   (footprints, undo, deltas in the log) works on buckets unchanged.
//! * A **directory page** (page kind [`PAGE_KIND_HASH_DIR`]) indexes
//!   `width` (0..=9) bits of the key's 64-bit hash, starting at bit
//!   `start` (counted from the most significant bit): slot
//!   `(hash << start) >> (64 - width)`. Each slot is a 6-byte page id:
//!   a bucket, or (bit 47 set) a child directory page. Every child of a
//!   directory page is referenced by one aligned run of `2^k` slots, and
//!   covers the hash prefix of `start + width - k` bits that run stands
//!   for: a bucket's local depth, or a child directory page's `start`.
//! * The tree's root page (the catalog's page id, which never moves) is
//!   a directory page with `start` 0.
//!
//! Growth is extendible hashing done page by page ([`grow`]): a full
//! bucket referenced by two or more slots splits by its next hash bit; one
//! referenced by a single slot first has its directory page double its
//! width (up to 9 bits, 512 slots); a directory page at 9 bits that its
//! parent references by two or more slots splits in two by its first bit;
//! and a root at 9 bits moves its slots to a new child page and keeps two
//! slots. Every such change touches at most three pages (and allocates at
//! most one) and is one logged step; none changes contents, so a crash
//! between them leaves a consistent tree. Buckets never merge and the
//! directory never shrinks (deletes leave empty buckets).
//!
//! Lookups read the directory pages and the bucket under optimistic
//! latches, validating each page after reading the next one's id, as the
//! B+-tree's descent does.

use super::node::{self, Node, NodeView};
use crate::buffer::{BufferManager, GuardO, GuardX, OpError, PageId, Restart, WorkerBuffer};
use crate::error::Error;
use crate::io::PAGE_SIZE;

type OpResult<T> = std::result::Result<T, OpError>;

/// Page kind (u16 at offset 4) of a hash directory page.
pub const PAGE_KIND_HASH_DIR: u16 = crate::buffer::page::PAGE_KIND_HASH_DIR;

/// Offset of the width byte (bits indexed by the page).
const WIDTH_OFFSET: usize = 16;
/// Offset of the start byte (hash bits consumed above the page).
const START_OFFSET: usize = 17;
/// Offset of the hash function's version byte.
const HASH_VERSION_OFFSET: usize = 18;
/// The hash function [`hash_key`] implements.
const HASH_VERSION: u8 = 1;
/// Offset of the first slot.
const SLOTS_OFFSET: usize = 32;
/// Bytes of one slot (a 48-bit page id and the directory flag).
const SLOT_BYTES: usize = 6;
/// Most bits one directory page indexes.
pub const MAX_WIDTH_BITS: u32 = 9;
/// Slot flag: the slot holds a directory page, not a bucket.
const DIR_FLAG: u64 = 1 << 47;
/// Page ids a slot can hold.
const SLOT_PID_MASK: u64 = DIR_FLAG - 1;

const _: () = assert!(SLOTS_OFFSET + SLOT_BYTES * (1 << MAX_WIDTH_BITS) + 2 <= PAGE_SIZE);

fn corrupt(pid: PageId, what: &str) -> OpError {
    OpError::Fatal(Error::Corrupt(format!("hash page {pid}: {what}")))
}

/// The 64-bit hash that places `key` (fixed: it decides where keys lie on
/// disk). Eight bytes at a time (little-endian, the last word zero
/// padded), each mixed in by a multiply and rotate, then MurmurHash3's
/// 64-bit finalizer so that every output bit depends on every input bit
/// (directory slots take the high bits).
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
    const K1: u64 = 0x87C3_7B91_1142_53D5;
    const K2: u64 = 0x4CF5_AD43_2745_937F;
    let mut h = SEED ^ (key.len() as u64).wrapping_mul(K2);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word).wrapping_mul(K1).rotate_left(31);
        h = (h ^ w)
            .rotate_left(27)
            .wrapping_mul(5)
            .wrapping_add(0x52DC_E729);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        let w = u64::from_le_bytes(word).wrapping_mul(K1).rotate_left(31);
        h ^= w;
    }
    fmix64(h)
}

/// MurmurHash3's 64-bit finalizer.
#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^= h >> 33;
    h
}

/// The slot of hash `h` in a page of `start` and `width` bits.
#[inline]
fn slot_index(h: u64, start: u32, width: u32) -> usize {
    if width == 0 || start >= 64 {
        return 0;
    }
    ((h << start) >> (64 - width)) as usize
}

/// Whether bit `bit` (0 = most significant) of `h` is set.
#[inline]
fn hash_bit(h: u64, bit: u32) -> bool {
    (h >> (63 - bit)) & 1 == 1
}

/// A slot's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Bucket(PageId),
    Dir(PageId),
}

fn decode_slot(raw: u64) -> Target {
    let raw = raw & ((1 << 48) - 1);
    if raw & DIR_FLAG != 0 {
        Target::Dir(raw & SLOT_PID_MASK)
    } else {
        Target::Bucket(raw)
    }
}

fn encode_slot(target: Target) -> u64 {
    match target {
        Target::Bucket(pid) => pid,
        Target::Dir(pid) => pid | DIR_FLAG,
    }
}

/// A directory page's bytes under a latch (read through a reference).
struct Dir<'p>(&'p [u8; PAGE_SIZE]);

impl Dir<'_> {
    fn width(&self) -> u32 {
        u32::from(self.0[WIDTH_OFFSET])
    }
    fn start(&self) -> u32 {
        u32::from(self.0[START_OFFSET])
    }
    fn slot_count(&self) -> usize {
        1 << self.width().min(MAX_WIDTH_BITS)
    }
    fn raw(&self, i: usize) -> u64 {
        let at = SLOTS_OFFSET + i * SLOT_BYTES;
        let mut word = [0u8; 8];
        word[..SLOT_BYTES].copy_from_slice(&self.0[at..at + SLOT_BYTES]);
        u64::from_le_bytes(word)
    }
    fn slot(&self, i: usize) -> Target {
        decode_slot(self.raw(i))
    }
    /// The aligned run of slots around `i` that hold the same target:
    /// (first slot, log2 of its length).
    fn run_of(&self, i: usize) -> (usize, u32) {
        let raw = self.raw(i);
        let mut k = 0;
        while k < self.width() {
            let size = 1usize << (k + 1);
            let first = i & !(size - 1);
            if (first..first + size).all(|j| self.raw(j) == raw) {
                k += 1;
            } else {
                break;
            }
        }
        (i & !((1usize << k) - 1), k)
    }
}

fn set_raw(page: &mut [u8; PAGE_SIZE], i: usize, raw: u64) {
    let at = SLOTS_OFFSET + i * SLOT_BYTES;
    page[at..at + SLOT_BYTES].copy_from_slice(&raw.to_le_bytes()[..SLOT_BYTES]);
}

fn set_slot(page: &mut [u8; PAGE_SIZE], i: usize, target: Target) {
    set_raw(page, i, encode_slot(target));
}

/// Writes a directory page header (kind, width, start) and zeroes its
/// slots; the caller fills them.
fn init_dir(page: &mut [u8; PAGE_SIZE], start: u32, width: u32) {
    page[crate::buffer::page::PAGE_HEADER_BYTES..].fill(0);
    page[crate::buffer::page::PAGE_KIND_OFFSET..crate::buffer::page::PAGE_KIND_OFFSET + 2]
        .copy_from_slice(&PAGE_KIND_HASH_DIR.to_le_bytes());
    page[WIDTH_OFFSET] = width as u8;
    page[START_OFFSET] = start as u8;
    page[HASH_VERSION_OFFSET] = HASH_VERSION;
}

/// Makes `root` the root of a new hash tree whose only bucket is
/// `bucket` (initialised here as an empty leaf).
pub fn init_hash_root(
    root: &mut [u8; PAGE_SIZE],
    bucket_pid: PageId,
    bucket: &mut [u8; PAGE_SIZE],
) {
    init_dir(root, 0, 0);
    set_slot(root, 0, Target::Bucket(bucket_pid));
    node::init_leaf(bucket, &[], &[]);
}

/// True when `page` is a hash directory page.
pub fn is_hash_dir(page: &[u8; PAGE_SIZE]) -> bool {
    crate::buffer::page::page_kind_of(page) == PAGE_KIND_HASH_DIR
}

/// Reads the page header of a directory page under an optimistic latch:
/// (kind, width, start). Unvalidated.
#[inline]
fn racy_header(guard: &GuardO<'_>) -> (u16, u32, u32) {
    let page = guard.racy_page();
    let kind = u16::from_le_bytes(page.read::<2>(crate::buffer::page::PAGE_KIND_OFFSET));
    let [width, start] = page.read::<2>(WIDTH_OFFSET);
    (kind, u32::from(width), u32::from(start))
}

/// Reads slot `i` under an optimistic latch. Unvalidated.
#[inline]
fn racy_slot(guard: &GuardO<'_>, i: usize) -> Target {
    // `i` is below 512: the 8 bytes read lie inside the page (asserted at
    // the top of the module).
    let word = guard
        .racy_page()
        .read::<8>(SLOTS_OFFSET + i.min(511) * SLOT_BYTES);
    decode_slot(u64::from_le_bytes(word))
}

/// The step from directory page `dir` (optimistically latched) toward
/// `h`: its target (validated). A page that is not a directory page, or
/// a slot of page 0, is `Error::Corrupt`.
#[inline]
fn dir_step(guard: &GuardO<'_>, h: u64) -> OpResult<Target> {
    let (kind, width, start) = racy_header(guard);
    let target = racy_slot(guard, slot_index(h, start, width.min(MAX_WIDTH_BITS)));
    guard.check()?;
    if kind != PAGE_KIND_HASH_DIR || width > MAX_WIDTH_BITS || start + width > 64 {
        return Err(corrupt(guard.pid(), "not a hash directory page"));
    }
    if matches!(target, Target::Bucket(0) | Target::Dir(0)) {
        return Err(corrupt(guard.pid(), "a directory slot holds page 0"));
    }
    Ok(target)
}

/// Most directory levels (each consumes at least one bit of 64).
const MAX_LEVELS: usize = 64;

/// The directory page that holds hash `h`'s bucket, optimistically
/// latched, and the bucket's page id (read from it and validated).
#[inline]
pub(crate) fn bucket_dir<'a>(
    bm: &'a BufferManager,
    root: PageId,
    h: u64,
) -> OpResult<(GuardO<'a>, PageId)> {
    let mut dir = bm.fix_optimistic(root)?;
    for _ in 0..MAX_LEVELS {
        match dir_step(&dir, h)? {
            Target::Dir(pid) => {
                let next = bm.fix_optimistic(pid)?;
                dir.check()?;
                dir = next;
            }
            Target::Bucket(pid) => return Ok((dir, pid)),
        }
    }
    Err(corrupt(root, "no bucket within 64 directory levels"))
}

/// The bucket for hash `h`, optimistically latched (validated after its
/// directory page).
#[inline]
pub(crate) fn find_bucket<'a>(bm: &'a BufferManager, root: PageId, h: u64) -> OpResult<GuardO<'a>> {
    let (dir, pid) = bucket_dir(bm, root, h)?;
    let bucket = bm.fix_optimistic(pid)?;
    dir.check()?;
    Ok(bucket)
}

/// Looks `key` up in bucket `bucket`: copies the value into `out`, true if
/// found, once the bucket validated.
#[inline]
fn read_bucket(bucket: &GuardO<'_>, key: &[u8], out: &mut Vec<u8>) -> OpResult<bool> {
    let n = NodeView::new(bucket.racy_page());
    let is_leaf = n.is_leaf();
    let slot = n.find(key);
    if let Some(slot) = slot {
        n.value_into(slot, out);
    }
    bucket.check()?;
    if !is_leaf {
        return Err(corrupt(
            bucket.pid(),
            "a directory slot names a page that is not a bucket",
        ));
    }
    Ok(slot.is_some())
}

/// Point lookup in the hash tree rooted at `root`.
pub fn lookup(bm: &BufferManager, root: PageId, key: &[u8], out: &mut Vec<u8>) -> OpResult<bool> {
    let bucket = find_bucket(bm, root, hash_key(key))?;
    read_bucket(&bucket, key, out)
}

/// Cache lines of a bucket [`lookup_interleaved`] prefetches first: the
/// header and the slots that [`NodeView::find`] scans one by one (28 +
/// 8 × 48 bytes).
const BUCKET_PREFETCH_LINES: usize = 8;
const _: () = assert!(28 + 8 * node::FIND_LINEAR_MAX <= 64 * BUCKET_PREFETCH_LINES);

/// [`lookup`] that lets other tasks run while the bucket's memory is
/// fetched, so that the memory misses of many tasks overlap (as
/// `tree::lookup_interleaved`): once it knows the bucket, it asks the CPU
/// to fetch the bucket's header and slots and yields; then it finds the
/// slot whose key head matches (from the slots alone), asks for that
/// entry's bytes (key and value, in the heap) and yields again; then it
/// compares the key and copies the value. Holds only optimistic latches
/// across the yields and validates before trusting anything. A page not
/// in memory is `Restart::Load` of it: the caller loads it and runs the
/// synchronous [`lookup`].
///
/// Measured on the lookup benchmark in memory (`bench compare --engines
/// flashtree-hash`, 8-byte keys, 120-byte values; see ARCHITECTURE,
/// "Hash index"): the linear scan of the heads ([`NodeView::find`]
/// instead of the binary search) and the second yield each gained;
/// prefetching 8 lines instead of 16 measured no slower (within the
/// noise); yielding also before the bucket's page-table entry is read
/// (after prefetching it), or before a directory page's slot is read
/// (after prefetching the slot), measured slower. Yielding before each
/// directory page measured no faster: the directory pages of a tree in
/// memory mostly stay in the CPU's caches.
pub async fn lookup_interleaved(
    bm: &BufferManager,
    root: PageId,
    key: &[u8],
    out: &mut Vec<u8>,
) -> OpResult<bool> {
    let bucket = find_bucket(bm, root, hash_key(key))?;
    bucket.prefetch_lines(BUCKET_PREFETCH_LINES);
    crate::sched::yield_now().await;
    let entry = NodeView::new(bucket.racy_page()).find_entry_hint(key);
    if let Some(entry) = entry {
        // Any range (the page may be changing): clamped to the page, and
        // only a hint; `read_bucket` validates.
        bucket.prefetch_bytes(entry.start, entry.len());
        crate::sched::yield_now().await;
    }
    read_bucket(&bucket, key, out)
}

/// The bucket of `key` optimistically latched, for a writer (validated).
pub(crate) fn bucket_for_write<'a>(
    bm: &'a BufferManager,
    root: PageId,
    key: &[u8],
) -> OpResult<GuardO<'a>> {
    let bucket = find_bucket(bm, root, hash_key(key))?;
    check_is_bucket(bucket)
}

/// `bucket` if it is a leaf (validated), else `Error::Corrupt`.
pub(crate) fn check_is_bucket(bucket: GuardO<'_>) -> OpResult<GuardO<'_>> {
    let is_leaf = NodeView::new(bucket.racy_page()).is_leaf();
    bucket.check()?;
    if !is_leaf {
        return Err(corrupt(
            bucket.pid(),
            "a directory slot names a page that is not a bucket",
        ));
    }
    Ok(bucket)
}

/// Inserts or replaces without a log (`Durability::None`): grows the
/// directory as needed (each growth its own change).
pub fn insert(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    root: PageId,
    (key, value): (&[u8], &[u8]),
) -> OpResult<()> {
    for _ in 0..4 * MAX_LEVELS {
        let bucket = bucket_for_write(bm, root, key)?;
        let n = NodeView::new(bucket.racy_page());
        let found = n.lower_bound(key);
        let fits = n.fits(found, key.len(), value.len());
        bucket.check()?;
        if fits {
            let mut bucket = bucket.upgrade()?;
            return Node::from_page_mut(bucket.page_mut())
                .insert_found(found, key, value)
                .map_err(|_| corrupt(bucket.pid(), "insert failed after the space check"));
        }
        grow(bm, wb, root, key, Some(value.len()))?;
    }
    Err(corrupt(root, "a bucket stays full after many splits"))
}

/// Removes `key` without a log; true if it was there.
pub fn remove(bm: &BufferManager, root: PageId, key: &[u8]) -> OpResult<bool> {
    let bucket = bucket_for_write(bm, root, key)?;
    let found = NodeView::new(bucket.racy_page()).lower_bound(key).1;
    bucket.check()?;
    if !found {
        return Ok(false);
    }
    let mut bucket = bucket.upgrade()?;
    Ok(Node::from_page_mut(bucket.page_mut()).remove(key))
}

/// One directory page on the way to a bucket, as [`grow`] saw it.
struct Level<'a> {
    guard: GuardO<'a>,
    /// The slot the path took.
    slot: usize,
}

/// Makes one change toward room for `key` (with a `value_len`-byte
/// value) in its bucket: splits the bucket, doubles a directory page's
/// width, splits a directory page, or moves the root's slots down a
/// level (see the module docs). Does nothing if the bucket has room now,
/// unless `value_len` is `None`: a batch step found the bucket full with
/// the batch's earlier entries in it, which are rolled back now.
/// All pages it changes are exclusively latched first and the new page
/// allocated before the first change, so any restart leaves the tree as
/// it was.
pub fn grow(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    root: PageId,
    key: &[u8],
    value_len: Option<usize>,
) -> OpResult<()> {
    let h = hash_key(key);
    let mut path: Vec<Level<'_>> = Vec::new();
    let mut dir = bm.fix_optimistic(root)?;
    let bucket = loop {
        if path.len() >= MAX_LEVELS {
            return Err(corrupt(root, "no bucket within 64 directory levels"));
        }
        let target = dir_step(&dir, h)?;
        let (_, width, start) = racy_header(&dir);
        let slot = slot_index(h, start, width);
        match target {
            Target::Dir(pid) => {
                let next = bm.fix_optimistic(pid)?;
                dir.check()?;
                path.push(Level { guard: dir, slot });
                dir = next;
            }
            Target::Bucket(pid) => {
                let bucket = bm.fix_optimistic(pid)?;
                dir.check()?;
                path.push(Level { guard: dir, slot });
                break bucket;
            }
        }
    };
    {
        let n = NodeView::new(bucket.racy_page());
        let is_leaf = n.is_leaf();
        let fits = value_len.is_some_and(|len| n.fits(n.lower_bound(key), key.len(), len));
        bucket.check()?;
        if !is_leaf {
            return Err(corrupt(
                bucket.pid(),
                "a directory slot names a page that is not a bucket",
            ));
        }
        if fits {
            return Ok(());
        }
    }
    // From the bucket's directory page up: the first level that can give
    // its child a run of two slots.
    let mut child: Option<GuardO<'_>> = Some(bucket);
    let mut i = path.len() - 1;
    let mut is_bucket_level = true;
    loop {
        let level = &path[i];
        let (_, width, start) = racy_header(&level.guard);
        let page = level.guard.racy_page();
        let raw_at = |j: usize| {
            u64::from_le_bytes(page.read::<8>(SLOTS_OFFSET + j * SLOT_BYTES)) & ((1 << 48) - 1)
        };
        let slot = level.slot.min((1 << width.min(MAX_WIDTH_BITS)) - 1);
        let buddy_raw = raw_at(slot ^ 1);
        let mine_raw = raw_at(slot);
        level.guard.check()?;
        let run_two = width > 0 && buddy_raw == mine_raw;
        if run_two {
            let Some(child) = child.take() else {
                return Err(Restart::Retry.into());
            };
            let parent = path.swap_remove(i).guard;
            return if is_bucket_level {
                split_bucket(bm, wb, parent, child, h)
            } else {
                split_dir(bm, wb, parent, child, h)
            };
        }
        if width < MAX_WIDTH_BITS {
            if start + width + 1 > 64 {
                return Err(OpError::Fatal(Error::Full(
                    "hash tree: more keys share a 64-bit hash than a bucket holds".into(),
                )));
            }
            let guard = path.swap_remove(i).guard;
            return double_dir(guard);
        }
        if i == 0 {
            let guard = path.swap_remove(0).guard;
            return push_down_root(bm, wb, guard);
        }
        // This page is full and its parent gives it one slot: the parent
        // must make room first.
        child = Some(path.pop().map(|l| l.guard).ok_or(Restart::Retry)?);
        i -= 1;
        is_bucket_level = false;
    }
}

/// Doubles the width of directory page `guard` (each slot becomes two).
fn double_dir(guard: GuardO<'_>) -> OpResult<()> {
    let mut x = guard.upgrade()?;
    let page = x.page_mut();
    let width = u32::from(page[WIDTH_OFFSET]);
    if width >= MAX_WIDTH_BITS {
        return Err(Restart::Retry.into());
    }
    let new_count = 1usize << (width + 1);
    // Backwards: slot j takes slot j / 2, which is not written yet.
    for j in (0..new_count).rev() {
        let raw = Dir(page).raw(j >> 1);
        set_raw(page, j, raw);
    }
    page[WIDTH_OFFSET] = (width + 1) as u8;
    Ok(())
}

/// Splits bucket `bucket`, which `parent` references by a run of two or
/// more slots, by its next hash bit: the upper half of the run goes to a
/// new bucket with the entries whose bit is set.
fn split_bucket(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    parent: GuardO<'_>,
    bucket: GuardO<'_>,
    h: u64,
) -> OpResult<()> {
    let mut parent = parent.upgrade()?;
    let mut bucket = bucket.upgrade()?;
    let (first, k) = run_naming(Dir(parent.page()), h, Target::Bucket(bucket.pid()))?;
    if k == 0 {
        return Err(Restart::Retry.into());
    }
    let depth = {
        let dir = Dir(parent.page());
        dir.start() + dir.width() - k
    };
    let mut new_bucket = alloc_for_slot(bm, wb)?;
    let new_pid = new_bucket.pid();
    // Rebuild both halves from the old bucket's entries (in key order).
    let mut kept = Box::new([0u8; PAGE_SIZE]);
    kept[..crate::buffer::page::PAGE_HEADER_BYTES]
        .copy_from_slice(&bucket.page()[..crate::buffer::page::PAGE_HEADER_BYTES]);
    node::init_leaf(&mut kept, &[], &[]);
    node::init_leaf(new_bucket.page_mut(), &[], &[]);
    {
        let old = Node::from_page(bucket.page());
        let mut key = Vec::new();
        for slot in 0..old.count() {
            old.key_into(slot, &mut key);
            let value = old.value(slot);
            let target = if hash_bit(hash_key(&key), depth) {
                Node::from_page_mut(new_bucket.page_mut())
            } else {
                Node::from_page_mut(&mut kept)
            };
            if target.insert(&key, value).is_err() {
                return Err(corrupt(
                    bucket.pid(),
                    "a bucket's entries do not fit a bucket",
                ));
            }
        }
    }
    bucket.page_mut().copy_from_slice(&kept[..]);
    point_upper_half(parent.page_mut(), first, k, Target::Bucket(new_pid));
    Ok(())
}

/// The run of slots of directory page `dir` that holds hash `h`'s slot,
/// if that slot still names `target`: (first slot, log2 of the run's
/// length). Another target (the page changed since it was read
/// optimistically) is a restart.
fn run_naming(dir: Dir<'_>, h: u64, target: Target) -> OpResult<(usize, u32)> {
    let slot = slot_index(h, dir.start(), dir.width());
    if dir.slot(slot) != target {
        return Err(Restart::Retry.into());
    }
    Ok(dir.run_of(slot))
}

/// Points the upper half of the run of `2^k` slots from `first` (`k` at
/// least 1) at `target`: the half whose next hash bit is set.
fn point_upper_half(page: &mut [u8; PAGE_SIZE], first: usize, k: u32, target: Target) {
    let half = 1usize << (k - 1);
    for j in first + half..first + 2 * half {
        set_slot(page, j, target);
    }
}

/// A new page that a directory slot can name (a page id of at most 47
/// bits; a larger one is `Error::Full`).
fn alloc_for_slot<'b>(bm: &'b BufferManager, wb: &mut WorkerBuffer) -> OpResult<GuardX<'b>> {
    let page = wb.alloc_page(bm)?;
    if page.pid() > SLOT_PID_MASK {
        page.free();
        return Err(OpError::Fatal(Error::Full("page id beyond 2^47".into())));
    }
    Ok(page)
}

/// Splits directory page `child` (9 bits wide), which `parent` references
/// by a run of two or more slots, into two pages one bit further down.
fn split_dir(
    bm: &BufferManager,
    wb: &mut WorkerBuffer,
    parent: GuardO<'_>,
    child: GuardO<'_>,
    h: u64,
) -> OpResult<()> {
    let mut parent = parent.upgrade()?;
    let mut child = child.upgrade()?;
    let (first, k) = run_naming(Dir(parent.page()), h, Target::Dir(child.pid()))?;
    let (start, width) = {
        let c = Dir(child.page());
        (c.start(), c.width())
    };
    let half_slots = 1usize << (MAX_WIDTH_BITS - 1);
    // A target spanning both halves (the whole page) cannot be split.
    if k == 0
        || width != MAX_WIDTH_BITS
        || Dir(child.page()).raw(half_slots - 1) == Dir(child.page()).raw(half_slots)
    {
        return Err(Restart::Retry.into());
    }
    if start + 1 + width > 64 {
        return Err(OpError::Fatal(Error::Full(
            "hash tree: more keys share a 64-bit hash than a bucket holds".into(),
        )));
    }
    let mut upper = alloc_for_slot(bm, wb)?;
    let upper_pid = upper.pid();
    let old: Box<[u8; PAGE_SIZE]> = Box::new(*child.page());
    let count = 1usize << MAX_WIDTH_BITS;
    {
        let page = upper.page_mut();
        init_dir(page, start + 1, MAX_WIDTH_BITS);
        for j in 0..count {
            set_raw(page, j, Dir(&old).raw(half_slots + (j >> 1)));
        }
    }
    {
        let page = child.page_mut();
        // Backwards in place: slot j takes old slot j / 2.
        for j in (0..count).rev() {
            set_raw(page, j, Dir(&old).raw(j >> 1));
        }
        page[START_OFFSET] = (start + 1) as u8;
    }
    point_upper_half(parent.page_mut(), first, k, Target::Dir(upper_pid));
    Ok(())
}

/// Moves the slots of the full root (9 bits) to a new directory page and
/// leaves the root one bit wide, both slots naming the new page.
fn push_down_root(bm: &BufferManager, wb: &mut WorkerBuffer, root: GuardO<'_>) -> OpResult<()> {
    let mut root = root.upgrade()?;
    if Dir(root.page()).width() != MAX_WIDTH_BITS || Dir(root.page()).start() != 0 {
        return Err(Restart::Retry.into());
    }
    let mut child = alloc_for_slot(bm, wb)?;
    let child_pid = child.pid();
    {
        let page = child.page_mut();
        page[crate::buffer::page::PAGE_HEADER_BYTES..]
            .copy_from_slice(&root.page()[crate::buffer::page::PAGE_HEADER_BYTES..]);
        page[crate::buffer::page::PAGE_KIND_OFFSET..crate::buffer::page::PAGE_KIND_OFFSET + 2]
            .copy_from_slice(&PAGE_KIND_HASH_DIR.to_le_bytes());
    }
    let page = root.page_mut();
    init_dir(page, 0, 1);
    set_slot(page, 0, Target::Dir(child_pid));
    set_slot(page, 1, Target::Dir(child_pid));
    Ok(())
}

/// What [`check_dir`] found in one directory page.
#[derive(Debug)]
pub struct DirReport {
    /// Children: (target is a directory page, page id, hash prefix,
    /// prefix bits).
    pub children: Vec<(bool, PageId, u64, u32)>,
}

/// Checks directory page `pid` (under a shared latch), which its parent
/// says covers the hashes whose first `prefix_bits` bits are `prefix`:
/// kind, start (= `prefix_bits`), width, and that every child's slots form
/// one aligned run of a power of two. Returns the children with the
/// prefixes they cover.
pub fn check_dir(
    bm: &BufferManager,
    pid: PageId,
    prefix: u64,
    prefix_bits: u32,
) -> OpResult<DirReport> {
    let guard = bm.fix_shared(pid)?;
    let page = guard.page();
    if !is_hash_dir(page) {
        return Err(corrupt(pid, "not a hash directory page"));
    }
    let dir = Dir(page);
    let (start, width) = (dir.start(), dir.width());
    if width > MAX_WIDTH_BITS || start + width > 64 {
        return Err(corrupt(pid, &format!("width {width} at start {start}")));
    }
    if start != prefix_bits {
        return Err(corrupt(
            pid,
            &format!("starts at hash bit {start}, its parent's slots say {prefix_bits}"),
        ));
    }
    if page[HASH_VERSION_OFFSET] != HASH_VERSION {
        return Err(corrupt(
            pid,
            &format!("hash version {}", page[HASH_VERSION_OFFSET]),
        ));
    }
    let count = dir.slot_count();
    let mut children = Vec::new();
    let mut i = 0;
    while i < count {
        let target = dir.slot(i);
        let (first, k) = dir.run_of(i);
        if first != i {
            return Err(corrupt(pid, &format!("slot {i} is inside another run")));
        }
        let end = i + (1 << k);
        // The run is maximal: the same target does not go on after it.
        if (end..count).any(|j| dir.slot(j) == target) {
            return Err(corrupt(
                pid,
                &format!("{target:?} is in two runs (slots {i} and later)"),
            ));
        }
        let bits = start + width - k;
        let child_prefix = if width - k == 0 {
            prefix
        } else {
            (prefix << (width - k)) | (i >> k) as u64
        };
        match target {
            Target::Bucket(0) | Target::Dir(0) => {
                return Err(corrupt(pid, &format!("slot {i} holds page 0")));
            }
            Target::Bucket(child) => children.push((false, child, child_prefix, bits)),
            Target::Dir(child) => children.push((true, child, child_prefix, bits)),
        }
        i = end;
    }
    // The rest of the page is zero.
    if page[SLOTS_OFFSET + count * SLOT_BYTES..]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(corrupt(pid, "bytes after the slots are not zero"));
    }
    Ok(DirReport { children })
}

/// Checks bucket `pid` (under a shared latch): a leaf with empty fences
/// whose keys all hash to `prefix` in their first `prefix_bits` bits.
/// Returns its entry count.
pub fn check_bucket(
    bm: &BufferManager,
    pid: PageId,
    prefix: u64,
    prefix_bits: u32,
) -> OpResult<usize> {
    let guard = bm.fix_shared(pid)?;
    let n = Node::from_page(guard.page());
    n.check_invariants().map_err(|e| corrupt(pid, &e))?;
    if !n.is_leaf() || !n.lower_fence().is_empty() || !n.upper_fence().is_empty() {
        return Err(corrupt(pid, "a bucket is not a leaf with empty fences"));
    }
    let mut key = Vec::new();
    for slot in 0..n.count() {
        n.key_into(slot, &mut key);
        let h = hash_key(&key);
        let top = if prefix_bits == 0 {
            0
        } else {
            h >> (64 - prefix_bits)
        };
        if top != prefix {
            return Err(corrupt(
                pid,
                &format!("key {key:?} hashes outside the bucket's prefix of {prefix_bits} bits"),
            ));
        }
    }
    Ok(n.count())
}

/// Whether the tree rooted at `root` is a hash tree: reads the root's
/// page kind (under an optimistic latch).
pub fn root_is_hash(bm: &BufferManager, root: PageId) -> OpResult<bool> {
    let guard = bm.fix_optimistic(root)?;
    let (kind, _, _) = racy_header(&guard);
    guard.check()?;
    Ok(kind == PAGE_KIND_HASH_DIR)
}

/// Appends to `out` the entries of the bucket that holds hash `h` in the
/// hash tree rooted at `root` (read under optimistic latches, appended
/// once the bucket validated), and returns the first hash past that
/// bucket's range: `None` when the range reaches the end of the hash
/// space. A walk from hash 0 until `None` reads every bucket once, and
/// each step reads one bucket's whole hash range at one moment, so an
/// entry present throughout the walk is returned exactly once whatever
/// splits and directory changes run meanwhile. On a restart the caller
/// clears `out` and calls again.
pub fn bucket_entries_at(
    bm: &BufferManager,
    root: PageId,
    h: u64,
    out: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> OpResult<Option<u64>> {
    let mut dir = bm.fix_optimistic(root)?;
    for _ in 0..MAX_LEVELS {
        let target = dir_step(&dir, h)?;
        // The aligned run of slots holding the target: the bits of the
        // hash that all of the target's hashes share.
        let (_, width, start) = racy_header(&dir);
        let width = width.min(MAX_WIDTH_BITS);
        let i = slot_index(h, start, width);
        let mut k = 0;
        while k < width {
            let size = 1usize << (k + 1);
            let first = i & !(size - 1);
            if (first..first + size).all(|j| racy_slot(&dir, j) == target) {
                k += 1;
            } else {
                break;
            }
        }
        dir.check()?;
        match target {
            Target::Dir(pid) => {
                let next = bm.fix_optimistic(pid)?;
                dir.check()?;
                dir = next;
            }
            Target::Bucket(pid) => {
                let bucket = bm.fix_optimistic(pid)?;
                dir.check()?;
                let n = NodeView::new(bucket.racy_page());
                let is_leaf = n.is_leaf();
                // A torn read may give any count; a page holds fewer.
                let count = n.count().min(PAGE_SIZE);
                let from = out.len();
                for slot in 0..count {
                    let (mut key, mut value) = (Vec::new(), Vec::new());
                    n.key_into(slot, &mut key);
                    n.value_into(slot, &mut value);
                    out.push((key, value));
                }
                if let Err(e) = bucket.check() {
                    out.truncate(from);
                    return Err(e.into());
                }
                if !is_leaf {
                    return Err(corrupt(
                        pid,
                        "a directory slot names a page that is not a bucket",
                    ));
                }
                // The bucket covers the hashes whose first `bits` bits are
                // those of `h` (`start + width <= 64`: `dir_step`).
                let bits = (start + width).min(64) - k;
                let shift = 64 - bits;
                let past = ((u128::from(h) >> shift) + 1) << shift;
                return Ok(u64::try_from(past).ok());
            }
        }
    }
    Err(corrupt(root, "no bucket within 64 directory levels"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_spreads_the_high_bits() {
        // Placement on disk depends on these values: they must never change.
        assert_eq!(hash_key(b"a"), hash_key(b"a"));
        assert_ne!(hash_key(b"a"), hash_key(b"b"));
        assert_ne!(hash_key(b"a"), hash_key(b"a\0"));
        let mut counts = [0u32; 16];
        for i in 0u64..16_000 {
            counts[(hash_key(&i.to_be_bytes()) >> 60) as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "top-4-bit bucket of {c} of 16000");
        }
    }

    #[test]
    fn hash_slot_index_takes_bits_after_start() {
        let h = 0b1011u64 << 60;
        assert_eq!(slot_index(h, 0, 1), 1);
        assert_eq!(slot_index(h, 0, 4), 0b1011);
        assert_eq!(slot_index(h, 1, 3), 0b011);
        assert_eq!(slot_index(h, 2, 0), 0);
        assert!(hash_bit(h, 0) && !hash_bit(h, 1));
    }

    #[test]
    fn hash_dir_doubling_and_runs() {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        init_dir(&mut page, 3, 1);
        set_slot(&mut page, 0, Target::Bucket(7));
        set_slot(&mut page, 1, Target::Dir(9));
        let mut x = page.clone();
        for _ in 0..2 {
            let width = u32::from(x[WIDTH_OFFSET]);
            for j in (0..1usize << (width + 1)).rev() {
                let raw = Dir(&x).raw(j >> 1);
                set_raw(&mut x, j, raw);
            }
            x[WIDTH_OFFSET] = (width + 1) as u8;
        }
        let d = Dir(&x);
        assert_eq!(d.width(), 3);
        assert_eq!(d.run_of(2), (0, 2));
        assert_eq!(d.run_of(5), (4, 2));
        assert_eq!(d.slot(5), Target::Dir(9));
        assert_eq!(d.slot(3), Target::Bucket(7));
    }

    use crate::db::{Db, Durability, Options, ScanDirection, WriteBatch};
    use std::collections::HashMap;

    fn small_pool(pages: u64, workers: usize, durability: Durability) -> Options {
        Options {
            pool_bytes: pages * 4096,
            workers,
            wal_bytes_per_worker: 8 << 20,
            checkpoint_log_bytes: 2 << 20,
            durability,
            ..Options::default()
        }
    }

    fn buffered() -> Durability {
        Durability::Buffered { max_delay_ms: 5 }
    }

    fn key(i: u64) -> Vec<u8> {
        format!("key-{i:08}").into_bytes()
    }

    fn value(i: u64, round: u64) -> Vec<u8> {
        let len = 20 + ((i * 37 + round) % 300) as usize;
        (0..len)
            .map(|j| (i as usize + j + round as usize) as u8)
            .collect()
    }

    /// Many keys through a 48-page pool (eviction all the time): every get
    /// answers, the directory grows past the root's 512 slots, deletes
    /// remove, and everything survives a reopen; `Db::check` passes.
    #[test]
    fn hash_tree_grows_through_a_tiny_pool_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let options = small_pool(48, 1, buffered());
        let db = Db::open(dir.path(), options.clone()).unwrap();
        let t = db.hash_tree("h").unwrap();
        assert!(t.is_hash());
        const N: u64 = 12_000;
        for i in 0..N {
            db.put(t, &key(i), &value(i, 0)).unwrap();
        }
        for i in (0..N).step_by(7) {
            assert_eq!(db.get(t, &key(i)).unwrap(), Some(value(i, 0)), "key {i}");
        }
        assert_eq!(db.get(t, b"absent").unwrap(), None);
        for i in (0..N).step_by(2) {
            assert!(db.delete(t, &key(i)).unwrap());
        }
        assert!(!db.delete(t, &key(0)).unwrap());
        let report = db.check().unwrap();
        let (_, shape) = &report.trees[0];
        assert_eq!(shape.entries, N / 2);
        // More buckets than the root's 512 slots: the root moved down.
        assert!(shape.leaves > 512, "{} buckets", shape.leaves);
        assert!(
            shape.inner_nodes > 2,
            "{} directory pages",
            shape.inner_nodes
        );
        assert!(db.stats().page_reads > 0, "a 48-page pool must miss");
        db.close().unwrap();
        let db = Db::open(dir.path(), options).unwrap();
        // `tree` finds the hash tree as one.
        let t = db.tree("h").unwrap();
        assert!(t.is_hash());
        for i in 0..N {
            let expected = (i % 2 == 1).then(|| value(i, 0));
            assert_eq!(db.get(t, &key(i)).unwrap(), expected, "key {i}");
        }
        let keys: Vec<Vec<u8>> = (0..N).map(key).collect();
        let got = db.multi_get(t, &keys).unwrap();
        for (i, v) in got.into_iter().enumerate() {
            assert_eq!(v, (i % 2 == 1).then(|| value(i as u64, 0)));
        }
        assert_eq!(db.check().unwrap().trees[0].1.entries, N / 2);
        db.close().unwrap();
    }

    /// Scans of a hash tree are refused, naming it; names keep their kind.
    #[test]
    fn hash_tree_scan_is_refused_and_kinds_stick() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), small_pool(256, 1, buffered())).unwrap();
        let h = db.hash_tree("index").unwrap();
        db.put(h, b"a", b"1").unwrap();
        let err = db
            .range(h, None, ScanDirection::Forward)
            .next()
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(&err, crate::Error::Unsupported(m) if m.contains("\"index\"")),
            "{err:?}"
        );
        let b = db.tree("plain").unwrap();
        assert!(!b.is_hash());
        assert!(matches!(
            db.hash_tree("plain"),
            Err(crate::Error::InvalidArgument(_))
        ));
        assert_eq!(db.hash_tree("index").unwrap(), h);
        let scanned = db.run(1, move |ctx| async move {
            let r = ctx.scan(h, b"", ScanDirection::Forward, |_, _| true).await;
            assert!(matches!(r, Err(crate::Error::Unsupported(_))));
        });
        scanned.unwrap();
        assert!(matches!(
            db.bulk_load(h, [(b"k".to_vec(), b"v".to_vec())]),
            Err(crate::Error::Unsupported(_))
        ));
        db.close().unwrap();
    }

    /// A batch over a B+-tree and a hash tree applies all its entries, also
    /// when its hash entries split buckets on the way.
    #[test]
    fn hash_mixed_batches_apply_whole() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), small_pool(256, 2, buffered())).unwrap();
        let h = db.hash_tree("h").unwrap();
        let b = db.tree("b").unwrap();
        for round in 0..20u64 {
            let mut batch = WriteBatch::new();
            for i in 0..10u64 {
                let k = key(round * 10 + i);
                batch.put(h, &k, &value(i, round)).unwrap();
                batch.put(b, &k, &value(i, round + 1)).unwrap();
            }
            if round > 0 {
                batch.delete(h, &key((round - 1) * 10)).unwrap();
            }
            db.write(&batch, Default::default()).unwrap();
        }
        for round in 0..20u64 {
            for i in 0..10u64 {
                let k = key(round * 10 + i);
                let expect_h = (i != 0 || round == 19).then(|| value(i, round));
                assert_eq!(db.get(h, &k).unwrap(), expect_h);
                assert_eq!(db.get(b, &k).unwrap(), Some(value(i, round + 1)));
            }
        }
        db.check().unwrap();
        db.close().unwrap();
    }

    /// Random puts, overwrites, deletes and gets on two workers through a
    /// tiny pool, with and without a log, against a HashMap.
    #[test]
    fn hash_model_random_ops() {
        for durability in [buffered(), Durability::None] {
            let dir = tempfile::tempdir().unwrap();
            let options = small_pool(48, 2, durability);
            let db = Db::open(dir.path(), options.clone()).unwrap();
            let t = db.hash_tree("m").unwrap();
            let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
            let mut rng = 0x5EED_u64;
            for step in 0..8000u64 {
                rng = fmix64(rng.wrapping_add(step));
                let k = key(rng % 3000);
                match (rng >> 20) % 10 {
                    0..=4 => {
                        let v = value(rng >> 30, step);
                        db.put(t, &k, &v).unwrap();
                        model.insert(k, v);
                    }
                    5..=6 => {
                        let found = db.delete(t, &k).unwrap();
                        assert_eq!(found, model.remove(&k).is_some(), "delete at step {step}");
                    }
                    _ => assert_eq!(db.get(t, &k).unwrap().as_ref(), model.get(&k)),
                }
            }
            for (k, v) in &model {
                assert_eq!(db.get(t, k).unwrap().as_ref(), Some(v));
            }
            assert_eq!(db.check().unwrap().trees[0].1.entries, model.len() as u64);
            db.close().unwrap();
            let db = Db::open(dir.path(), options).unwrap();
            let t = db.hash_tree("m").unwrap();
            for (k, v) in &model {
                assert_eq!(db.get(t, k).unwrap().as_ref(), Some(v));
            }
            assert_eq!(db.check().unwrap().trees[0].1.entries, model.len() as u64);
            db.close().unwrap();
        }
    }

    /// Tasks on two workers insert disjoint keys into one hash tree at once
    /// (buckets split and directory pages grow under concurrent puts and
    /// gets), logged and unlogged: every key is there afterwards and the
    /// check passes.
    #[test]
    fn hash_concurrent_puts_all_land() {
        for durability in [buffered(), Durability::None] {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(dir.path(), small_pool(96, 2, durability)).unwrap();
            let t = db.hash_tree("c").unwrap();
            const TASKS: u64 = 8;
            const PER_TASK: u64 = 700;
            db.run(TASKS as usize, move |ctx| async move {
                let me = (ctx.worker() * TASKS as usize + ctx.task_index()) as u64;
                let mut got = Vec::new();
                for i in 0..PER_TASK {
                    let k = me * PER_TASK + i;
                    ctx.put(t, &key(k), &value(k, 3)).await.unwrap();
                    let back = k - i / 2;
                    assert!(ctx.get(t, &key(back), &mut got).await.unwrap());
                    assert_eq!(got, value(back, 3));
                }
            })
            .unwrap();
            let total = 2 * TASKS * PER_TASK;
            for k in 0..total {
                assert_eq!(db.get(t, &key(k)).unwrap(), Some(value(k, 3)), "key {k}");
            }
            assert_eq!(db.check().unwrap().trees[0].1.entries, total);
            db.close().unwrap();
        }
    }
}
