//! B+-tree node page layout: a slotted 4 KiB page with fence keys, prefix
//! truncation and 4-byte key heads (after vmcache / LeanStore `BTreeNode`).
//!
//! # Contract
//! - Pure code over one `[u8; PAGE_SIZE]` buffer: no I/O, no latches, and no
//!   heap allocation on lookups. Structural operations (`split`,
//!   `merge_into_right`, `compactify`) use one stack temp page.
//! - Bytes `[0, 16)` belong to the buffer layer (checksum, page kind, LSN).
//!   This module only writes the page kind (u16 at offset 4) on init.
//! - Every read path (`count`, fences, `lower_bound`, `key_into`, `value`,
//!   `child`, `child_for`, `check_invariants`, ...) is total: on arbitrary
//!   bytes it returns clamped or empty values and never panics and never reads
//!   outside the page. Optimistic readers rely on this: they read while a
//!   writer may be changing the page and validate a version afterwards.
//! - The read paths are written once, in [`NodeView`], generic over the
//!   bytes ([`NodeBytes`]): a latched page (`&[u8; PAGE_SIZE]`, what
//!   [`Node`]'s read methods use) or a page under an optimistic latch
//!   ([`RacyNode`] over `buffer::RacyPage`). Under an optimistic latch no
//!   reference to the page is ever made: each field is read once by a
//!   volatile load of at most 8 bytes through a raw pointer, so the
//!   compiler may not assume the bytes stable, and every value read stays
//!   untrusted (clamped before use) until the caller validates. (Formally
//!   even a volatile read racing a write is a data race in Rust's memory
//!   model; `buffer/racy.rs` says what that leaves open.) Code that needs
//!   slices (`&Node`: mutation, `plan_rebalance`, `check_invariants`)
//!   runs only on latched pages.
//! - Mutating paths assume a valid page and in-range arguments (checked with
//!   `debug_assert!`) and must run under an exclusive latch.
//!
//! # Byte layout (all integers little endian)
//! ```text
//! [0, 16)    common page header, owned by the buffer layer
//! 16  u16    count: number of slots
//! 18  u16    heap_used_bytes: live heap bytes (keys + values + both fences)
//! 20  u16    heap_start: first heap byte; the heap grows down
//! 22  u16    bits 0..9 prefix_len: bytes of the common fence prefix
//!            stripped from keys; bits 9..16 head_skip: bytes at the start of
//!            every stored key suffix that all of them share (see below)
//! 24  u16    lower fence length   26  u16  upper fence length
//! 28  ..     slot array, SLOT_BYTES = 8 per slot, sorted by key:
//!            u32 key head (the 4 suffix bytes after the first head_skip,
//!            big endian, zero padded),
//!            u32 packed: bits 0..13 heap offset, 13..22 key suffix length,
//!            22..32 value length
//! ..  E      heap: entries; an entry is the key suffix (key without the
//!            prefix) followed by the value
//! E - L - U  upper fence (full, untruncated), U bytes
//! E - L      lower fence (full), L bytes
//! E          4096 in leaves; in inner nodes 4088, followed by the upper
//!            child page id (u64)
//! ```
//! The fences sit at the top of the node at places their lengths give, so
//! they need no offsets; the upper child takes 8 bytes only where it exists.
//! A leaf thus spends 28 bytes on headers and 8 per entry: four rows of an
//! 8-byte key and a 1,000-byte value fit (YCSB's rows), where the earlier
//! layout (48 + 10 per entry) held three.
//! Leaves store (key, value). Inner nodes store (separator, child page id as
//! 8-byte value); the child at slot `i` covers keys `<= key(i)` (and
//! `> key(i - 1)`), the upper child covers keys `> key(count - 1)`.
//!
//! Fences: all keys `k` of a node satisfy `lower < k <= upper`. An empty lower
//! fence means minus infinity, an empty upper fence plus infinity. Every key
//! between the two fences starts with their common prefix, which is stripped
//! from stored keys (`prefix_len`).
//!
//! Head skip: every stored key suffix is at least `head_skip` bytes long, and
//! all of them start with the same `head_skip` bytes (those of slot 0's), so
//! the heads are taken after those bytes, where the keys differ. The fences
//! often say little about the keys: the root's are infinite, and a tree of
//! 8-byte big-endian numbers below 2^32 would have every head 0 there, each
//! step of the binary search then comparing whole keys. Inserts lower the
//! skip when a key shares fewer bytes (rewriting every head), removals leave
//! it, rebuilds (compaction, split, merge, rebalance) set it to what the
//! first and last key share; capped at 127 (7 bits). Where every suffix fits
//! in a head (4 bytes) the skip is 0: the heads tell the keys apart anyway,
//! and a lookup in a node with a skip first reads slot 0's key to check the
//! shared bytes. An empty node's skip means nothing; nodes start with 127,
//! and an insert into an empty node sets it to the key suffix's length.
//!
//! # Conventions for the tree code
//! - Split keeps the upper half in place: `node.split(new_left, sep)` moves
//!   keys `<= sep` to `new_left`; the parent then gets
//!   `insert_separator(sep, new_left_pid)` and its pointer to `node` stays
//!   valid. Both halves then have room for one maximal entry.
//! - Merge goes leftwards-into-right: `left.merge_into_right(right, sep)`;
//!   on success the parent removes the slot that points to `left`
//!   (`remove_slot(child_index)`) and `left`'s page is freed.
//! - The next leaf of a scan holds the keys above this leaf's upper fence
//!   (empty = last leaf); descend with `upper_fence ++ [0]`, the smallest key
//!   greater than the fence.

use crate::buffer::RacyPage;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;

/// Page size; mirrors `crate::io::PAGE_SIZE`, kept private so that this file
/// does not depend on the io layer.
const PAGE_SIZE: usize = 4096;

/// Page kind (u16 at offset 4) of a B+-tree leaf.
pub const PAGE_KIND_LEAF: u16 = 1;
/// Page kind (u16 at offset 4) of a B+-tree inner node.
pub const PAGE_KIND_INNER: u16 = 2;

/// Longest key, in bytes, that the tree accepts (also bounds fences and
/// separators, which are keys or key prefixes).
pub const MAX_KEY_BYTES: usize = 256;

/// Largest key + value, in bytes, that the tree accepts. About a quarter of a
/// page, as in vmcache; the exact bound is the compile-time assertion below:
/// after splitting any node, both halves have room for one more entry of this
/// size, so "split, then insert" never fails twice.
pub const MAX_ENTRY_BYTES: usize = 1024;

/// Longest value, in bytes: the entry budget minus the one key byte that a
/// non-empty key needs. Callers must also check `key + value <=
/// MAX_ENTRY_BYTES` (see [`entry_within_limits`]).
pub const MAX_VALUE_BYTES: usize = MAX_ENTRY_BYTES - 1;

const PAGE_KIND_OFFSET: usize = crate::buffer::page::PAGE_KIND_OFFSET;
/// Start of the node header: the buffer layer owns everything before.
const COMMON_HEADER_END: usize = crate::buffer::page::PAGE_HEADER_BYTES;
const HDR_COUNT: usize = COMMON_HEADER_END;
const HDR_HEAP_USED: usize = COMMON_HEADER_END + 2;
const HDR_HEAP_START: usize = COMMON_HEADER_END + 4;
/// The prefix length (bits 0..[`PREFIX_LEN_BITS`]) and the head skip
/// (the bits above), one u16.
const HDR_PREFIX_AND_SKIP: usize = COMMON_HEADER_END + 6;
const HDR_LOWER_LEN: usize = COMMON_HEADER_END + 8;
const HDR_UPPER_LEN: usize = COMMON_HEADER_END + 10;
/// End of the node header = start of the slot array.
const NODE_HEADER_END: usize = COMMON_HEADER_END + 12;
/// Where an inner node keeps its upper child (the last 8 bytes).
const UPPER_CHILD_AT: usize = PAGE_SIZE - CHILD_BYTES;

/// Bits of the prefix length in the u16 at [`HDR_PREFIX_AND_SKIP`]; the
/// head skip takes the other 7.
const PREFIX_LEN_BITS: u32 = 9;
const PREFIX_LEN_MASK: usize = (1 << PREFIX_LEN_BITS) - 1;
/// Most bytes a head skips (what the 7 bits hold).
const HEAD_SKIP_MAX: usize = (1 << (16 - PREFIX_LEN_BITS)) - 1;
const _: () = assert!(MAX_KEY_BYTES <= PREFIX_LEN_MASK);

pub(crate) const SLOT_BYTES: usize = 8;
const SLOT_HEAD: usize = 0;
const SLOT_PACKED: usize = 4;
/// Bit widths of the packed slot word: heap offset, key suffix length,
/// value length.
const SLOT_OFFSET_BITS: u32 = 13;
const SLOT_KEY_LEN_BITS: u32 = 9;
const SLOT_VALUE_LEN_BITS: u32 = 10;
/// Upper bound on slots; reads clamp `count` to it so garbage cannot make
/// them walk past the page.
const SLOT_COUNT_MAX: usize = (PAGE_SIZE - NODE_HEADER_END) / SLOT_BYTES;
const _: () = assert!(NODE_HEADER_END + SLOT_COUNT_MAX * SLOT_BYTES <= PAGE_SIZE);
/// Most slots [`NodeView::find`] scans one by one; fuller nodes it
/// searches by halves.
pub const FIND_LINEAR_MAX: usize = 48;
const _: () = assert!(FIND_LINEAR_MAX < SLOT_COUNT_MAX);
/// Inner-node values are child page ids.
const CHILD_BYTES: usize = 8;

// The packed slot word holds every offset (up to PAGE_SIZE, the offset of
// an empty entry in a node without fences), key suffix and value length.
const _: () = assert!(SLOT_OFFSET_BITS + SLOT_KEY_LEN_BITS + SLOT_VALUE_LEN_BITS == 32);
const _: () = assert!(PAGE_SIZE < 1 << SLOT_OFFSET_BITS);
const _: () = assert!(MAX_KEY_BYTES < 1 << SLOT_KEY_LEN_BITS);
const _: () = assert!(MAX_VALUE_BYTES < 1 << SLOT_VALUE_LEN_BITS);

// Split guarantee. A node holds at most PAGE_SIZE - NODE_HEADER_END - fences
// bytes of slots + entries (T). The byte-balanced split gives each half at
// most T/2 + m/2 (m = largest slot + entry), and each half's fences are one
// old fence plus the separator (each <= MAX_KEY_BYTES). Solving
// "half + m <= PAGE_SIZE" for the worst case (old lower fence maximal, old
// upper fence empty) gives 3 * (MAX_KEY_BYTES + m) <= PAGE_SIZE - header.
// (Inner nodes also keep their upper child out of that room.)
const _: () = assert!(
    3 * (MAX_KEY_BYTES + SLOT_BYTES + MAX_ENTRY_BYTES) <= PAGE_SIZE - NODE_HEADER_END - CHILD_BYTES
);
// Inner entries (separator + child id) must not exceed leaf entries, so the
// same bound covers inner splits.
const _: () = assert!(MAX_KEY_BYTES + CHILD_BYTES <= MAX_ENTRY_BYTES);
// Offsets and lengths are stored as u16.
const _: () = assert!(PAGE_SIZE <= u16::MAX as usize);

/// True if a node with fences `lower` and `upper` holds the keys around
/// `key`: `lower < key <= upper`, an empty fence being infinite.
pub fn fences_cover(lower: &[u8], upper: &[u8], key: &[u8]) -> bool {
    (lower.is_empty() || lower < key) && (upper.is_empty() || key <= upper)
}

/// True if a (key, value) pair is within the tree's size limits. The tree must
/// reject larger pairs before calling into a node.
pub const fn entry_within_limits(key_bytes: usize, value_bytes: usize) -> bool {
    key_bytes <= MAX_KEY_BYTES
        && value_bytes <= MAX_VALUE_BYTES
        && key_bytes + value_bytes <= MAX_ENTRY_BYTES
}

/// The node has no room for the entry, even after compaction; the caller
/// splits it and retries. The node is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFull;

impl fmt::Display for NodeFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("b-tree node is full; split it and retry")
    }
}

impl std::error::Error for NodeFull {}

/// One slot of the slot array, decoded.
#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: usize,
    key_len: usize,
    value_len: usize,
    head: u32,
}

impl Slot {
    /// Decodes a packed slot word (see the module docs) and a head.
    #[inline]
    fn unpack(packed: u32, head: u32) -> Slot {
        let bits = |shift: u32, width: u32| ((packed >> shift) & ((1 << width) - 1)) as usize;
        Slot {
            offset: bits(0, SLOT_OFFSET_BITS),
            key_len: bits(SLOT_OFFSET_BITS, SLOT_KEY_LEN_BITS),
            value_len: bits(SLOT_OFFSET_BITS + SLOT_KEY_LEN_BITS, SLOT_VALUE_LEN_BITS),
            head,
        }
    }
}

/// A B+-tree node: a view of one page. `&Node` gives the (garbage-tolerant)
/// read paths, `&mut Node` the mutating ones.
///
/// `repr(transparent)` over the page bytes so that a page reference can be
/// reinterpreted as a node reference without copying.
#[repr(transparent)]
pub struct Node {
    bytes: [u8; PAGE_SIZE],
}

/// Initialises `page` as an empty leaf with the given fences (see module
/// docs; empty = infinite) and returns it as a node.
pub fn init_leaf<'a>(
    page: &'a mut [u8; PAGE_SIZE],
    lower_fence: &[u8],
    upper_fence: &[u8],
) -> &'a mut Node {
    init_page(page, PAGE_KIND_LEAF, lower_fence, upper_fence, 0)
}

/// Initialises `page` as an inner node without separators whose only child is
/// `upper_child`, with the given fences.
pub fn init_inner<'a>(
    page: &'a mut [u8; PAGE_SIZE],
    lower_fence: &[u8],
    upper_fence: &[u8],
    upper_child: u64,
) -> &'a mut Node {
    init_page(page, PAGE_KIND_INNER, lower_fence, upper_fence, upper_child)
}

/// Checks the structural invariants of a node page (kind, bounds, sorted keys
/// within fences, heads, free-space accounting, no overlapping heap regions).
/// Never panics, whatever the bytes; allocates (it is for checkers and tests).
pub fn check_invariants(page: &[u8; PAGE_SIZE]) -> Result<(), String> {
    Node::from_page(page).check_invariants()
}

/// Writes the node header and fences of an empty node; zeroes the rest of the
/// node area so stale bytes from a previous page use never reach the disk.
fn init_page<'a>(
    page: &'a mut [u8; PAGE_SIZE],
    kind: u16,
    lower_fence: &[u8],
    upper_fence: &[u8],
    upper_child: u64,
) -> &'a mut Node {
    debug_assert!(lower_fence.len() <= MAX_KEY_BYTES);
    debug_assert!(upper_fence.len() <= MAX_KEY_BYTES);
    debug_assert!(
        lower_fence.is_empty() || upper_fence.is_empty() || lower_fence < upper_fence,
        "fences out of order"
    );
    debug_assert!(
        kind == PAGE_KIND_INNER || upper_child == 0,
        "leaves have no upper child"
    );
    page[PAGE_KIND_OFFSET..PAGE_KIND_OFFSET + 2].copy_from_slice(&kind.to_le_bytes());
    page[COMMON_HEADER_END..].fill(0);
    let node = Node::from_page_mut(page);
    // The fences go to the top of the node (see `fences_end`), lower above
    // upper, so that their lengths locate them.
    node.write_u16(HDR_HEAP_START, node.fences_end());
    let lower_offset = node.heap_alloc(lower_fence.len());
    node.bytes[lower_offset..lower_offset + lower_fence.len()].copy_from_slice(lower_fence);
    let upper_offset = node.heap_alloc(upper_fence.len());
    node.bytes[upper_offset..upper_offset + upper_fence.len()].copy_from_slice(upper_fence);
    node.write_u16(HDR_LOWER_LEN, lower_fence.len());
    node.write_u16(HDR_UPPER_LEN, upper_fence.len());
    node.write_u16(HDR_HEAP_USED, lower_fence.len() + upper_fence.len());
    node.write_prefix_and_skip(common_prefix_len(lower_fence, upper_fence), HEAD_SKIP_MAX);
    if kind == PAGE_KIND_INNER {
        node.write_u64(UPPER_CHILD_AT, upper_child);
    }
    debug_assert_eq!(node.lower_fence(), lower_fence);
    debug_assert_eq!(node.upper_fence(), upper_fence);
    debug_assert_eq!(node.count(), 0);
    node
}

/// Bytes a node takes (the page's header, the node header, fences, slots
/// and heap; at most `PAGE_SIZE`) with fences of `fence_bytes` bytes
/// together whose common prefix is `prefix_len` bytes long, and `count`
/// entries whose whole keys and values take `entry_bytes` bytes with their
/// slots (`SLOT_BYTES` + key + value each): each key is stored without the
/// prefix. For a bulk load, which builds nodes whole.
pub(crate) const fn node_bytes(
    leaf: bool,
    fence_bytes: usize,
    prefix_len: usize,
    count: usize,
    entry_bytes: usize,
) -> usize {
    NODE_HEADER_END + if leaf { 0 } else { CHILD_BYTES } + fence_bytes + entry_bytes
        - prefix_len * count
}

/// Length of the longest common prefix of `a` and `b`.
pub(crate) fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The shortest key `s` with `left < s <= right` among `right`'s prefixes
/// (`left < right`), else `left` itself (then `left <= s < right`): either
/// way a separator that sends `left` to the left and `right` to the right
/// side of a node boundary.
pub(crate) fn shortest_separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    debug_assert!(left < right);
    let common = common_prefix_len(left, right);
    if right.len() > common + 1 {
        // Above `left` (it differs from it, or extends it, at byte
        // `common`), and a proper prefix of `right`, so below it.
        right[..common + 1].to_vec()
    } else {
        left.to_vec()
    }
}

/// How to move entries between two neighbouring leaves
/// ([`Node::plan_rebalance`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebalance {
    /// Entries (of the two leaves' entries in key order) the left leaf keeps.
    pub left_keeps: usize,
    /// The new separator between the two leaves.
    pub separator: Vec<u8>,
}

/// Key head: the four bytes of `a ++ b` after its first `skip`, big
/// endian, zero padded. Of keys that share their first `skip` bytes, heads
/// order like the keys they come from (ties need a full comparison,
/// unless both suffixes end within the skip and the head: then the
/// shorter is a prefix of the longer, see `lower_bound`), so
/// most binary-search steps compare one integer held in the slot.
fn head_of_parts(a: &[u8], b: &[u8], skip: usize) -> u32 {
    let mut head = [0u8; 4];
    for (dst, src) in head.iter_mut().zip(a.iter().chain(b).skip(skip)) {
        *dst = *src;
    }
    u32::from_be_bytes(head)
}

/// Bytes a head holds.
const HEAD_BYTES: usize = 4;

/// The head skip for key suffixes that share their first `shared` bytes
/// and of which the longest has `longest` bytes: `shared` (at most 127),
/// unless every suffix fits in a head, whose heads then tell them apart
/// without a skip; a lookup in a node with a skip checks the shared bytes
/// first, which costs a read of slot 0's key (another cache line).
fn skip_for(shared: usize, longest: usize) -> usize {
    if longest <= HEAD_BYTES {
        0
    } else {
        shared.min(HEAD_SKIP_MAX)
    }
}

/// Length of the longest common prefix of `a.0 ++ a.1` and `b.0 ++ b.1`.
fn common_prefix_len_of_parts(a: (&[u8], &[u8]), b: (&[u8], &[u8])) -> usize {
    a.0.iter()
        .chain(a.1)
        .zip(b.0.iter().chain(b.1))
        .take_while(|(x, y)| x == y)
        .count()
}

#[inline]
fn head_of(key: &[u8]) -> u32 {
    match key.first_chunk::<4>() {
        Some(first) => u32::from_be_bytes(*first),
        // (Byte by byte: a copy of a variable length calls memcpy.)
        None => (0..4).fold(0, |head, i| {
            head << 8 | u32::from(key.get(i).copied().unwrap_or(0))
        }),
    }
}

/// Compares two byte strings as `Ord for [u8]` does, 8 bytes at a time
/// (big-endian words compare like their bytes): keys are short, and a
/// call to `memcmp` per step of a binary search cost more than the
/// comparison (callgrind of `bench lookup`).
#[inline]
fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a_rest, mut b_rest) = (a, b);
    while let (Some((x, a_next)), Some((y, b_next))) = (
        a_rest.split_first_chunk::<8>(),
        b_rest.split_first_chunk::<8>(),
    ) {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a_rest, b_rest) = (a_next, b_next);
    }
    // Fewer than 8 bytes left in one of them: byte by byte, then the
    // lengths (a string sorts before its extensions).
    for (x, y) in a_rest.iter().zip(b_rest) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// The first 8 bytes of `bytes` (all of them if fewer) as a big-endian
/// integer padded with zeros on the right. Of two byte strings, the one
/// with the smaller such word is the smaller; equal words leave the order
/// to the lengths when one string has at most 8 bytes (it is then a prefix
/// of the other), and to the bytes from the ninth on otherwise.
#[inline]
fn padded_word(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        // (Byte by byte: a copy of a variable length calls memcpy.)
        None => bytes
            .iter()
            .enumerate()
            .fold(0, |word, (i, &b)| word | u64::from(b) << (56 - 8 * i)),
    }
}

/// [`padded_word`] of `key[from..]` (`from <= key.len()`): when the tail
/// is shorter than 8 bytes but the key is not, one load of the key's last
/// 8 bytes, shifted (a suffix after a node prefix is often 1 to 3 bytes).
#[inline]
fn padded_word_of_tail(key: &[u8], from: usize) -> u64 {
    let tail = &key[from..];
    if tail.len() >= 8 {
        return padded_word(tail);
    }
    match key.last_chunk::<8>() {
        // `8 - tail.len()` is 1..=8 bytes; shifting out all 64 bits (an
        // empty tail) leaves 0.
        Some(last) => u64::from_be_bytes(*last)
            .checked_shl(8 * (8 - tail.len()) as u32)
            .unwrap_or(0),
        None => padded_word(tail),
    }
}

/// `word` (a [`padded_word`]) cut to its first `len` bytes (`len` <= 8).
#[inline]
fn first_bytes_of_word(word: u64, len: usize) -> u64 {
    debug_assert!(len <= 8);
    word & u64::MAX.checked_shl(64 - 8 * len as u32).unwrap_or(0)
}

// --------------------------------------------------------------------------
// The read paths, written once over any bytes a node is read from.

/// The bytes a node is read from: a latched page (`&[u8; PAGE_SIZE]`,
/// stable while the latch is held) or a page under an optimistic latch
/// ([`RacyPage`], which a writer may change meanwhile and which is read
/// only through volatile loads). Every method is total: bytes past the
/// page's end read as zeros, and a range that passes it as empty. The read
/// paths ([`NodeView`]) use nothing else, so one implementation serves
/// both, and each of their reads of the page is one call here, done once.
pub trait NodeBytes: Copy {
    /// The `N` (at most 8) bytes at `at`; zeros if they pass the end.
    fn read<const N: usize>(self, at: usize) -> [u8; N];
    /// The `N` (at most 8) bytes at `at`, without a bounds check (the
    /// binary search's slot reads, whose indices a clamped count bounds).
    ///
    /// # Safety
    /// `at + N <= PAGE_SIZE`.
    unsafe fn read_in_page<const N: usize>(self, at: usize) -> [u8; N];
    /// Bytes `at..at + len` (`len` clamped to 8) as a big-endian integer
    /// padded with zeros on the right; 0 if `len` is 0 or the range passes
    /// the end (see [`padded_word`]).
    fn read_be_padded(self, at: usize, len: usize) -> u64;
    /// How bytes `at..at + len` order against `key` (as `Ord for [u8]`);
    /// the range reads as empty if it passes the end.
    fn compare(self, at: usize, len: usize, key: &[u8]) -> Ordering;
    /// Appends bytes `at..at + len` to `out`; nothing if the range passes
    /// the end.
    fn copy_into(self, at: usize, len: usize, out: &mut Vec<u8>);
}

/// True if `at..at + len` lies inside a page (no overflow on garbage).
#[inline]
fn in_page(at: usize, len: usize) -> bool {
    at <= PAGE_SIZE && len <= PAGE_SIZE - at
}

/// `at..at + len` if it lies inside a page, else the empty range.
#[inline]
fn page_range(at: usize, len: usize) -> Range<usize> {
    if in_page(at, len) {
        at..at + len
    } else {
        0..0
    }
}

/// A latched page: plain slices (the code the latched paths always had).
impl NodeBytes for &[u8; PAGE_SIZE] {
    #[inline(always)]
    fn read<const N: usize>(self, at: usize) -> [u8; N] {
        match self.get(at..).and_then(<[u8]>::first_chunk::<N>) {
            Some(bytes) => *bytes,
            None => [0; N],
        }
    }

    #[inline(always)]
    unsafe fn read_in_page<const N: usize>(self, at: usize) -> [u8; N] {
        debug_assert!(at <= PAGE_SIZE - N);
        // SAFETY: the caller keeps `at + N <= PAGE_SIZE`, so the `N` bytes
        // lie inside the page; `[u8; N]` has alignment 1.
        unsafe { *self.as_ptr().add(at).cast::<[u8; N]>() }
    }

    #[inline(always)]
    fn read_be_padded(self, at: usize, len: usize) -> u64 {
        padded_word(self.get(page_range(at, len.min(8))).unwrap_or(&[]))
    }

    #[inline]
    fn compare(self, at: usize, len: usize, key: &[u8]) -> Ordering {
        compare_keys(self.get(page_range(at, len)).unwrap_or(&[]), key)
    }

    #[inline]
    fn copy_into(self, at: usize, len: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(self.get(page_range(at, len)).unwrap_or(&[]));
    }
}

/// A page under an optimistic latch: every byte is read once, by a
/// volatile load of 1 to 8 bytes ([`RacyPage`]), never through a
/// reference, and loops are bounded by lengths clamped to the page.
impl NodeBytes for RacyPage<'_> {
    #[inline(always)]
    fn read<const N: usize>(self, at: usize) -> [u8; N] {
        RacyPage::read(self, at)
    }

    #[inline(always)]
    unsafe fn read_in_page<const N: usize>(self, at: usize) -> [u8; N] {
        // SAFETY: the caller's contract is `RacyPage::read_in_page`'s.
        unsafe { RacyPage::read_in_page(self, at) }
    }

    #[inline(always)]
    fn read_be_padded(self, at: usize, len: usize) -> u64 {
        RacyPage::read_be_padded(self, at, len)
    }

    /// [`compare_keys`] with the page's side read by volatile loads.
    #[inline]
    fn compare(self, at: usize, len: usize, key: &[u8]) -> Ordering {
        RacyPage::compare(self, at, len, key)
    }

    #[inline]
    fn copy_into(self, at: usize, len: usize, out: &mut Vec<u8>) {
        RacyPage::copy_into(self, at, len, out);
    }
}

/// The read paths of a node (count, kind, fences, slots, binary search,
/// children, keys, values, space) over any [`NodeBytes`]. Total on garbage:
/// every offset and length read from the page is clamped or checked before
/// it is used, results stay inside the page, nothing panics and every loop
/// is bounded by a clamped count or length. On a page under an optimistic
/// latch ([`RacyNode`]) two reads of one field may disagree; nothing here
/// assumes they agree (nor asserts it), and the caller trusts a result only
/// after the latch validates. [`Node`]'s read methods are these, on a
/// latched page.
#[derive(Clone, Copy)]
pub struct NodeView<B> {
    bytes: B,
}

/// A node under an optimistic latch (see `buffer::GuardO::racy_page`).
pub type RacyNode<'a> = NodeView<RacyPage<'a>>;

impl<B: NodeBytes> NodeView<B> {
    /// Views `bytes` as a node. Any bytes are accepted.
    #[inline]
    pub fn new(bytes: B) -> NodeView<B> {
        NodeView { bytes }
    }

    #[inline]
    fn read_u16(self, at: usize) -> usize {
        usize::from(u16::from_le_bytes(self.bytes.read(at)))
    }

    /// The `len` stored bytes at `at` against `key[..len]` (`len` at most
    /// `key.len()`); `key_word` is [`padded_word`] of `key`: with 8 bytes
    /// or fewer, one word compare.
    #[inline(always)]
    fn compare_stored(self, at: usize, len: usize, key: &[u8], key_word: u64) -> Ordering {
        if len <= 8 {
            let page = self.bytes.read_be_padded(at, len);
            page.cmp(&first_bytes_of_word(key_word, len))
        } else {
            self.bytes.compare(at, len, &key[..len])
        }
    }

    #[inline]
    fn read_u32(self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes.read(at))
    }

    #[inline]
    fn read_u64(self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes.read(at))
    }

    fn heap_start(self) -> usize {
        self.read_u16(HDR_HEAP_START)
    }

    /// Live heap bytes as recorded in the header (unclamped).
    fn heap_used_bytes(self) -> usize {
        self.read_u16(HDR_HEAP_USED)
    }

    fn slots_end(self) -> usize {
        NODE_HEADER_END + self.count() * SLOT_BYTES
    }

    /// End of the fences: the page's end in leaves; inner nodes keep their
    /// upper child in the last 8 bytes.
    fn fences_end(self) -> usize {
        PAGE_SIZE - self.child_bytes()
    }

    /// Bytes the upper child takes (inner nodes; any kind but a leaf).
    fn child_bytes(self) -> usize {
        if self.is_leaf() {
            0
        } else {
            CHILD_BYTES
        }
    }

    /// Where slot `index` starts; past the page for any index beyond the
    /// slot array's room (so its fields read as zeros).
    #[inline]
    fn slot_at(index: usize) -> usize {
        NODE_HEADER_END + index.min(SLOT_COUNT_MAX + 1) * SLOT_BYTES
    }

    /// Decoded slot `index`; zeroes if the slot lies outside the page.
    fn slot(self, index: usize) -> Slot {
        let at = Self::slot_at(index);
        Slot::unpack(
            self.read_u32(at + SLOT_PACKED),
            self.read_u32(at + SLOT_HEAD),
        )
    }

    /// The stored key suffix of slot `index` as a range of the page, with
    /// no check of `count` (empty if it passes the page's end).
    #[inline]
    fn entry_key_range(self, index: usize) -> Range<usize> {
        let s = Slot::unpack(self.read_u32(Self::slot_at(index) + SLOT_PACKED), 0);
        page_range(s.offset, s.key_len)
    }

    /// The page kind written by `init_leaf`/`init_inner` (or garbage).
    pub fn page_kind(self) -> u16 {
        self.read_u16(PAGE_KIND_OFFSET) as u16
    }

    /// True for leaves; false for inner nodes (and for garbage kinds).
    pub fn is_leaf(self) -> bool {
        self.page_kind() == PAGE_KIND_LEAF
    }

    /// Number of slots, clamped to what fits in a page.
    pub fn count(self) -> usize {
        self.read_u16(HDR_COUNT).min(SLOT_COUNT_MAX)
    }

    /// Bytes a compacted copy of this node occupies: header, slots, fences and
    /// entries. The fill-factor / merge metric.
    pub fn space_used_bytes(self) -> usize {
        (self.slots_end() + self.heap_used_bytes() + self.child_bytes()).min(PAGE_SIZE)
    }

    /// Bytes free after compaction (`PAGE_SIZE - space_used_bytes`).
    pub fn free_space_bytes(self) -> usize {
        PAGE_SIZE - self.space_used_bytes()
    }

    /// Leaves: whether an insert of a `key_len`-byte key with a
    /// `value_len`-byte value fits without a split, where `found` is
    /// `lower_bound(key)`. A replace reuses the old value's bytes, so
    /// updating a row in a full leaf does not split it.
    pub fn fits(self, found: (usize, bool), key_len: usize, value_len: usize) -> bool {
        match found {
            (slot, true) => {
                let old = self.slot(slot);
                old.value_len == value_len || self.free_space_bytes() + old.value_len >= value_len
            }
            (_, false) => self.has_space_for(key_len, value_len),
        }
    }

    /// True if an entry with a full key of `key_len` bytes and a value of
    /// `value_len` bytes (8 for inner nodes) fits, possibly after compaction.
    pub fn has_space_for(self, key_len: usize, value_len: usize) -> bool {
        let needed = key_len
            .saturating_sub(self.prefix_len())
            .saturating_add(value_len)
            .saturating_add(SLOT_BYTES);
        needed <= self.free_space_bytes()
    }

    /// Where the lower fence (exclusive; empty: minus infinity) lies in the
    /// page.
    pub fn lower_fence_range(self) -> Range<usize> {
        let end = self.fences_end();
        let len = self.read_u16(HDR_LOWER_LEN);
        match end.checked_sub(len) {
            Some(start) => start..end,
            None => 0..0,
        }
    }

    /// Where the upper fence (inclusive; empty: plus infinity) lies in the
    /// page.
    pub fn upper_fence_range(self) -> Range<usize> {
        let end = self
            .fences_end()
            .saturating_sub(self.read_u16(HDR_LOWER_LEN));
        let len = self.read_u16(HDR_UPPER_LEN);
        match end.checked_sub(len) {
            Some(start) => start..end,
            None => 0..0,
        }
    }

    /// Where the common prefix of all keys lies in the page: the start of
    /// the lower fence, `prefix_len` bytes (clamped to the fence).
    pub fn prefix_range(self) -> Range<usize> {
        self.prefix_range_of(self.read_u16(HDR_PREFIX_AND_SKIP))
    }

    /// [`NodeView::prefix_range`] with the header's u16 of prefix length
    /// and head skip already read.
    #[inline]
    fn prefix_range_of(self, prefix_and_skip: usize) -> Range<usize> {
        let lower = self.lower_fence_range();
        let len = (prefix_and_skip & PREFIX_LEN_MASK).min(lower.len());
        lower.start..lower.start + len
    }

    /// Bytes at the start of every stored key suffix that all of them
    /// share, and that heads skip (see the module docs; up to 127).
    pub fn head_skip(self) -> usize {
        self.read_u16(HDR_PREFIX_AND_SKIP) >> PREFIX_LEN_BITS
    }

    /// Bytes stripped from the front of every stored key (clamped to the
    /// lower fence length on garbage).
    pub fn prefix_len(self) -> usize {
        self.prefix_range().len()
    }

    /// Writes the lower fence into `out`, replacing its contents.
    pub fn lower_fence_into(self, out: &mut Vec<u8>) {
        out.clear();
        let range = self.lower_fence_range();
        self.bytes.copy_into(range.start, range.len(), out);
    }

    /// Whether the fences cover `key` (`lower < key <= upper`, an empty
    /// fence unbounded), as [`fences_cover`] says, without copying them.
    pub fn covers(self, key: &[u8]) -> bool {
        let lower = self.lower_fence_range();
        let upper = self.upper_fence_range();
        (lower.is_empty() || self.bytes.compare(lower.start, lower.len(), key) == Ordering::Less)
            && (upper.is_empty()
                || self.bytes.compare(upper.start, upper.len(), key) != Ordering::Less)
    }

    /// Writes the upper fence into `out`, replacing its contents.
    pub fn upper_fence_into(self, out: &mut Vec<u8>) {
        out.clear();
        let range = self.upper_fence_range();
        self.bytes.copy_into(range.start, range.len(), out);
    }

    /// Where the stored key of `slot` (without the prefix) lies in the
    /// page; empty if `slot` is out of range.
    pub fn key_suffix_range(self, slot: usize) -> Range<usize> {
        if slot >= self.count() {
            return 0..0;
        }
        self.entry_key_range(slot)
    }

    /// Where the value of `slot` lies in the page; empty if `slot` is out
    /// of range.
    pub fn value_range(self, slot: usize) -> Range<usize> {
        if slot >= self.count() {
            return 0..0;
        }
        self.entry_value_range(slot)
    }

    /// The value of slot `index` as a range of the page, with no check of
    /// `count` (empty if it passes the page's end).
    #[inline]
    fn entry_value_range(self, index: usize) -> Range<usize> {
        let s = Slot::unpack(self.read_u32(Self::slot_at(index) + SLOT_PACKED), 0);
        page_range(s.offset + s.key_len, s.value_len)
    }

    /// The child page id stored in `range` (a value's); 0 unless it is 8
    /// bytes long.
    #[inline]
    fn child_in(self, range: Range<usize>) -> u64 {
        if range.len() == CHILD_BYTES {
            self.read_u64(range.start)
        } else {
            0
        }
    }

    /// Writes the full key of `slot` (prefix restored) into `out`, replacing
    /// its contents. Empty if `slot` is out of range.
    pub fn key_into(self, slot: usize, out: &mut Vec<u8>) {
        out.clear();
        if slot < self.count() {
            let prefix = self.prefix_range();
            self.bytes.copy_into(prefix.start, prefix.len(), out);
            let suffix = self.entry_key_range(slot);
            self.bytes.copy_into(suffix.start, suffix.len(), out);
        }
    }

    /// Full length of the key in `slot` (prefix included).
    pub fn key_len(self, slot: usize) -> usize {
        self.prefix_len() + self.key_suffix_range(slot).len()
    }

    /// Writes the value of `slot` (leaves) into `out`, replacing its
    /// contents; empty if `slot` is out of range.
    pub fn value_into(self, slot: usize, out: &mut Vec<u8>) {
        out.clear();
        let range = self.value_range(slot);
        self.bytes.copy_into(range.start, range.len(), out);
    }

    /// Child page id of `slot` (inner nodes); 0 if out of range or malformed.
    pub fn child(self, slot: usize) -> u64 {
        self.child_in(self.value_range(slot))
    }

    /// The child covering keys greater than the last separator (inner nodes).
    pub fn upper_child(self) -> u64 {
        if self.is_leaf() {
            0
        } else {
            self.read_u64(UPPER_CHILD_AT)
        }
    }

    /// First slot whose key is `>= key`, and whether it is equal. Returns
    /// `(count, false)` if all keys are smaller. Keys that do not share the
    /// node prefix (outside the fences) give 0 or `count`.
    #[inline]
    pub fn lower_bound(self, key: &[u8]) -> (usize, bool) {
        let count = self.count();
        let prefix_and_skip = self.read_u16(HDR_PREFIX_AND_SKIP);
        let prefix = self.prefix_range_of(prefix_and_skip);
        let prefix_len = prefix.len();
        if prefix_len > 0 {
            let shared_len = key.len().min(prefix_len);
            // The prefix's first bytes against the key's (page vs key):
            // one word when they fit in one (keys of 8 bytes or fewer).
            let order = self.compare_stored(prefix.start, shared_len, key, padded_word(key));
            match order {
                Ordering::Greater => return (0, false),
                Ordering::Less => return (count, false),
                Ordering::Equal if key.len() < prefix_len => return (0, false),
                Ordering::Equal => {}
            }
        }
        let suffix = &key[prefix_len..];
        let word = padded_word_of_tail(key, prefix_len);
        let skip = prefix_and_skip >> PREFIX_LEN_BITS;
        let head_word = if skip == 0 {
            word
        } else {
            // Every stored suffix starts with the `skip` bytes slot 0's
            // does (in an empty node what is read does not matter: the
            // answer is slot 0 anyway); the key's suffix must too.
            let shared_len = suffix.len().min(skip);
            let first = self.entry_key_range(0);
            let order = self.compare_stored(first.start, shared_len, suffix, word);
            match order {
                Ordering::Greater => return (0, false),
                Ordering::Less => return (count, false),
                Ordering::Equal if suffix.len() < skip => return (0, false),
                Ordering::Equal => padded_word_of_tail(key, prefix_len + skip),
            }
        };
        // The head is the first 4 bytes after the skipped ones.
        let head = (head_word >> 32) as u32;
        let (mut low, mut high) = (0, count);
        // Bounded: the interval shrinks every step. (A branchless search
        // over the heads first, then one over the keys of equal heads,
        // took 2,226 instructions per lookup of `bash
        // scripts/lookup-instructions.sh` against this loop's 2,133.)
        while low < high {
            let mid = (low + high) / 2;
            debug_assert!(mid < SLOT_COUNT_MAX);
            // SAFETY: `mid < high <= count <= SLOT_COUNT_MAX` (`count` is
            // clamped), so slot `mid` lies inside the page.
            let slot_head = unsafe { self.slot_head_in_page(mid) };
            if slot_head < head {
                low = mid + 1;
            } else if slot_head > head {
                high = mid;
            } else {
                // SAFETY: as above.
                let stored_len = unsafe { self.slot_key_len_in_page(mid) };
                // Equal heads. Where both suffixes end within the skipped
                // bytes and the head, the slot alone orders them: the key's
                // skipped bytes were checked against slot 0's above, every
                // stored suffix starts with those, and the heads (zero
                // padded) hold the rest, so the shorter is a prefix of the
                // longer, whose extra bytes are zeros. No read of the heap:
                // a lookup's last comparison in a leaf would otherwise wait
                // for the entry's cache line, and then again for the value's
                // lines after it.
                let order = if stored_len.max(suffix.len()) <= skip + HEAD_BYTES {
                    stored_len.cmp(&suffix.len())
                } else {
                    // SAFETY: as above.
                    unsafe { self.compare_in_page(mid, suffix, word) }
                };
                match order {
                    Ordering::Less => low = mid + 1,
                    Ordering::Greater => high = mid,
                    Ordering::Equal => return (mid, true),
                }
            }
        }
        (low, false)
    }

    /// The slot whose key equals `key`, if any: `lower_bound`'s slot when
    /// it finds the key, found without using the order (the hash index's
    /// lookups, which need only equality). Up to [`FIND_LINEAR_MAX`] slots
    /// it scans the key heads from slot 0 and compares the whole key where
    /// a head matches: one load and one well-predicted branch per slot,
    /// where each step of the binary search is a branch that goes either
    /// way at random (a bucket of the lookup benchmark holds about 20
    /// entries). Fuller nodes use [`NodeView::lower_bound`].
    #[inline]
    pub fn find(self, key: &[u8]) -> Option<usize> {
        if self.count() > FIND_LINEAR_MAX {
            return match self.lower_bound(key) {
                (slot, true) => Some(slot),
                _ => None,
            };
        }
        self.scan_heads::<true>(key)
    }

    /// Where in the page the entry (key suffix, then value) lies that
    /// [`NodeView::find`] would compare first: that of the first slot
    /// whose key head is `key`'s, read from the slots alone (the heap is
    /// not read), so that a caller can prefetch it. None when no head
    /// matches, or in a node of more than [`FIND_LINEAR_MAX`] slots.
    #[inline]
    pub fn find_entry_hint(self, key: &[u8]) -> Option<Range<usize>> {
        if self.count() > FIND_LINEAR_MAX {
            return None;
        }
        let slot = self.scan_heads::<false>(key)?;
        let s = self.slot(slot);
        Some(page_range(s.offset, s.key_len + s.value_len))
    }

    /// [`NodeView::find`]'s scan (`COMPARE`), or without comparing whole
    /// keys: the first slot whose head matches. At most
    /// [`FIND_LINEAR_MAX`] slots are read.
    #[inline(always)]
    fn scan_heads<const COMPARE: bool>(self, key: &[u8]) -> Option<usize> {
        let count = self.count().min(FIND_LINEAR_MAX);
        let prefix_and_skip = self.read_u16(HDR_PREFIX_AND_SKIP);
        let prefix = self.prefix_range_of(prefix_and_skip);
        let prefix_len = prefix.len();
        if prefix_len > 0
            && (key.len() < prefix_len
                || self.compare_stored(prefix.start, prefix_len, key, padded_word(key))
                    != Ordering::Equal)
        {
            return None;
        }
        let suffix = &key[prefix_len..];
        let skip = prefix_and_skip >> PREFIX_LEN_BITS;
        // Every stored suffix is at least `skip` bytes long (in an empty
        // node the skip means nothing, and no slot is read).
        if suffix.len() < skip {
            return None;
        }
        let word = padded_word_of_tail(key, prefix_len);
        let head = (padded_word_of_tail(key, prefix_len + skip) >> 32) as u32;
        for index in 0..count {
            debug_assert!(index < SLOT_COUNT_MAX);
            // SAFETY: `index < count <= FIND_LINEAR_MAX < SLOT_COUNT_MAX`,
            // so slot `index` lies inside the page.
            if unsafe { self.slot_head_in_page(index) } == head
                && (!COMPARE
                    // SAFETY: as above.
                    || unsafe { self.compare_in_page(index, suffix, word) } == Ordering::Equal)
            {
                return Some(index);
            }
        }
        None
    }

    /// Key head of slot `index` with no clamp (the binary search's read).
    ///
    /// # Safety
    /// `index < SLOT_COUNT_MAX`.
    #[inline(always)]
    unsafe fn slot_head_in_page(self, index: usize) -> u32 {
        // SAFETY: `index < SLOT_COUNT_MAX`, so the slot's bytes end at or
        // before `NODE_HEADER_END + SLOT_COUNT_MAX * SLOT_BYTES <=
        // PAGE_SIZE` (asserted at the top).
        u32::from_le_bytes(unsafe {
            self.bytes
                .read_in_page(NODE_HEADER_END + index * SLOT_BYTES + SLOT_HEAD)
        })
    }

    /// Stored key suffix length of slot `index`, from the slot alone (no
    /// clamp: the caller compares it, it indexes nothing).
    ///
    /// # Safety
    /// `index < SLOT_COUNT_MAX`.
    #[inline(always)]
    unsafe fn slot_key_len_in_page(self, index: usize) -> usize {
        // SAFETY: as in `slot_head_in_page`.
        let packed = u32::from_le_bytes(unsafe {
            self.bytes
                .read_in_page(NODE_HEADER_END + index * SLOT_BYTES + SLOT_PACKED)
        });
        Slot::unpack(packed, 0).key_len
    }

    /// How the stored key suffix of slot `index` orders against `suffix`,
    /// whose [`padded_word`] is `word`: the first 8 bytes of each as one
    /// word (read by one load), then the lengths, or the bytes from the
    /// ninth on when both are longer. A suffix outside the page reads as
    /// empty, as in [`NodeView::key_suffix_range`].
    ///
    /// # Safety
    /// `index < SLOT_COUNT_MAX`.
    #[inline(always)]
    unsafe fn compare_in_page(self, index: usize, suffix: &[u8], word: u64) -> Ordering {
        // SAFETY: as in `slot_head_in_page`.
        let packed = u32::from_le_bytes(unsafe {
            self.bytes
                .read_in_page(NODE_HEADER_END + index * SLOT_BYTES + SLOT_PACKED)
        });
        let stored = Slot::unpack(packed, 0);
        let (at, len) = if in_page(stored.offset, stored.key_len) {
            (stored.offset, stored.key_len)
        } else {
            (0, 0)
        };
        let stored_word = self.bytes.read_be_padded(at, len);
        if stored_word != word {
            return stored_word.cmp(&word);
        }
        if len.min(suffix.len()) <= 8 {
            return len.cmp(&suffix.len());
        }
        self.bytes.compare(at + 8, len - 8, &suffix[8..])
    }

    /// Inner nodes: index of the child covering `key`; `count()` means the
    /// upper child.
    pub fn child_index_for(self, key: &[u8]) -> usize {
        self.lower_bound(key).0
    }

    /// Inner nodes: page id of the child covering `key`.
    #[inline]
    pub fn child_for(self, key: &[u8]) -> u64 {
        self.child_at(self.child_index_for(key))
    }

    /// Inner nodes: child page id at `index`, where `index == count()` is the
    /// upper child (the indexing of `child_index_for`).
    #[inline]
    pub fn child_at(self, index: usize) -> u64 {
        if index >= self.count() {
            self.upper_child()
        } else {
            // (`count` read once: `child` would read it again.)
            self.child_in(self.entry_value_range(index))
        }
    }

    /// The child covering `key`, or None in a leaf (any kind but a leaf
    /// counts as an inner node here; the caller checks kinds it cares for).
    pub fn child_if_inner(self, key: &[u8]) -> Option<u64> {
        (!self.is_leaf()).then(|| self.child_for(key))
    }
}

impl Node {
    /// Views a page as a node. Any bytes are accepted; read paths tolerate
    /// garbage.
    pub fn from_page(page: &[u8; PAGE_SIZE]) -> &Node {
        // SAFETY: `Node` is `repr(transparent)` over `[u8; PAGE_SIZE]`, so the
        // two types have the same size, alignment (1) and validity (every bit
        // pattern is valid); the returned reference inherits `page`'s lifetime
        // and shared borrow.
        unsafe { &*(page as *const [u8; PAGE_SIZE]).cast::<Node>() }
    }

    /// Views a page as a mutable node. Mutating methods assume the page holds
    /// a valid node (after `init_leaf`/`init_inner`).
    pub fn from_page_mut(page: &mut [u8; PAGE_SIZE]) -> &mut Node {
        // SAFETY: as in `from_page`; the exclusive borrow of `page` moves to
        // the returned reference, so no aliasing is introduced.
        unsafe { &mut *(page as *mut [u8; PAGE_SIZE]).cast::<Node>() }
    }

    /// The underlying page bytes.
    pub fn as_page(&self) -> &[u8; PAGE_SIZE] {
        &self.bytes
    }

    /// The read paths over this page (stable: latched, or not shared):
    /// the same code that optimistic readers run over a [`RacyPage`].
    #[inline]
    pub fn view(&self) -> NodeView<&[u8; PAGE_SIZE]> {
        NodeView::new(&self.bytes)
    }

    /// The bytes of `range` (a range the view checked), or empty.
    #[inline]
    fn bytes_of(&self, range: Range<usize>) -> &[u8] {
        self.bytes.get(range).unwrap_or(&[])
    }

    // ----------------------------------------------------------------------
    // Raw field access. Reads go through the view and return 0 when out of
    // range.

    fn read_u16(&self, at: usize) -> usize {
        self.view().read_u16(at)
    }

    fn write_u16(&mut self, at: usize, value: usize) {
        debug_assert!(value <= usize::from(u16::MAX));
        debug_assert!(
            at >= COMMON_HEADER_END,
            "node must not write the common header"
        );
        self.bytes[at..at + 2].copy_from_slice(&(value as u16).to_le_bytes());
    }

    fn write_u32(&mut self, at: usize, value: u32) {
        self.bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    fn write_u64(&mut self, at: usize, value: u64) {
        self.bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn write_prefix_and_skip(&mut self, prefix_len: usize, skip: usize) {
        debug_assert!(prefix_len <= PREFIX_LEN_MASK && skip <= HEAD_SKIP_MAX);
        self.write_u16(HDR_PREFIX_AND_SKIP, prefix_len | skip << PREFIX_LEN_BITS);
    }

    /// See [`NodeView::head_skip`].
    pub fn head_skip(&self) -> usize {
        self.view().head_skip()
    }

    /// Sets the head skip to `skip` (which every stored suffix must share)
    /// and rewrites every slot's head for it.
    fn set_head_skip(&mut self, skip: usize) {
        self.write_prefix_and_skip(self.prefix_len(), skip);
        for index in 0..self.count() {
            let head = head_of_parts(self.key_suffix(index), &[], skip);
            self.write_u32(NODE_HEADER_END + index * SLOT_BYTES + SLOT_HEAD, head);
        }
    }

    /// The head skip once the key suffix `key_a ++ key_b` is stored too:
    /// the present one, lowered to what the suffix shares with slot 0's
    /// (all others share the present skip with slot 0); in an empty node,
    /// the suffix's length. (An empty node's skip is 127, or what
    /// [`Node::copy_entries_from`] set for the entries it is about to add.)
    fn head_skip_with(&self, key_a: &[u8], key_b: &[u8]) -> usize {
        let shared = if self.count() == 0 {
            key_a.len() + key_b.len()
        } else {
            common_prefix_len_of_parts((key_a, key_b), (self.key_suffix(0), &[]))
        };
        self.head_skip().min(shared)
    }

    fn heap_start(&self) -> usize {
        self.view().heap_start()
    }

    /// Live heap bytes as recorded in the header (unclamped).
    fn heap_used_bytes(&self) -> usize {
        self.view().heap_used_bytes()
    }

    fn slots_end(&self) -> usize {
        self.view().slots_end()
    }

    /// End of the fences (see [`NodeView`]).
    fn fences_end(&self) -> usize {
        self.view().fences_end()
    }

    /// Bytes the upper child takes (inner nodes; any kind but a leaf).
    fn child_bytes(&self) -> usize {
        self.view().child_bytes()
    }

    /// Free bytes between the slot array and the heap, usable without
    /// compaction.
    fn contiguous_free_bytes(&self) -> usize {
        self.heap_start().saturating_sub(self.slots_end())
    }

    /// Reserves `len` heap bytes below `heap_start` and returns their offset.
    fn heap_alloc(&mut self, len: usize) -> usize {
        let start = self.heap_start() - len;
        debug_assert!(start >= self.slots_end(), "heap overlaps slot array");
        self.write_u16(HDR_HEAP_START, start);
        start
    }

    /// Decoded slot `index`; zeroes if the slot lies outside the page.
    fn slot(&self, index: usize) -> Slot {
        self.view().slot(index)
    }

    fn write_slot(&mut self, index: usize, slot: Slot) {
        debug_assert!(slot.offset < 1 << SLOT_OFFSET_BITS);
        debug_assert!(slot.key_len < 1 << SLOT_KEY_LEN_BITS);
        debug_assert!(slot.value_len < 1 << SLOT_VALUE_LEN_BITS);
        let at = NODE_HEADER_END + index * SLOT_BYTES;
        let packed = slot.offset as u32
            | (slot.key_len as u32) << SLOT_OFFSET_BITS
            | (slot.value_len as u32) << (SLOT_OFFSET_BITS + SLOT_KEY_LEN_BITS);
        self.write_u32(at + SLOT_PACKED, packed);
        self.write_u32(at + SLOT_HEAD, slot.head);
    }

    // ----------------------------------------------------------------------
    // Read paths: total on garbage ([`NodeView`] over this page).

    /// The page kind written by `init_leaf`/`init_inner` (or garbage).
    pub fn page_kind(&self) -> u16 {
        self.view().page_kind()
    }

    /// True for leaves; false for inner nodes (and for garbage kinds).
    pub fn is_leaf(&self) -> bool {
        self.view().is_leaf()
    }

    /// Number of slots, clamped to what fits in a page.
    pub fn count(&self) -> usize {
        self.view().count()
    }

    /// See [`NodeView::space_used_bytes`].
    pub fn space_used_bytes(&self) -> usize {
        self.view().space_used_bytes()
    }

    /// Bytes free after compaction (`PAGE_SIZE - space_used_bytes`).
    pub fn free_space_bytes(&self) -> usize {
        self.view().free_space_bytes()
    }

    /// See [`NodeView::fits`].
    pub fn fits(&self, found: (usize, bool), key_len: usize, value_len: usize) -> bool {
        self.view().fits(found, key_len, value_len)
    }

    /// See [`NodeView::has_space_for`].
    pub fn has_space_for(&self, key_len: usize, value_len: usize) -> bool {
        self.view().has_space_for(key_len, value_len)
    }

    /// Lower fence (exclusive); empty means minus infinity.
    pub fn lower_fence(&self) -> &[u8] {
        self.bytes_of(self.view().lower_fence_range())
    }

    /// Upper fence (inclusive); empty means plus infinity.
    pub fn upper_fence(&self) -> &[u8] {
        self.bytes_of(self.view().upper_fence_range())
    }

    /// Bytes stripped from the front of every stored key (clamped to the
    /// lower fence length on garbage).
    pub fn prefix_len(&self) -> usize {
        self.view().prefix_len()
    }

    /// The common prefix of all keys in this node.
    pub fn prefix(&self) -> &[u8] {
        self.bytes_of(self.view().prefix_range())
    }

    /// Stored key of `slot` without the prefix; empty if out of range.
    pub fn key_suffix(&self, slot: usize) -> &[u8] {
        self.bytes_of(self.view().key_suffix_range(slot))
    }

    /// See [`NodeView::key_into`].
    pub fn key_into(&self, slot: usize, out: &mut Vec<u8>) {
        self.view().key_into(slot, out);
    }

    /// Full length of the key in `slot` (prefix included).
    pub fn key_len(&self, slot: usize) -> usize {
        self.view().key_len(slot)
    }

    /// The value of `slot` (leaves); empty if out of range.
    pub fn value(&self, slot: usize) -> &[u8] {
        self.bytes_of(self.view().value_range(slot))
    }

    /// Child page id of `slot` (inner nodes); 0 if out of range or malformed.
    pub fn child(&self, slot: usize) -> u64 {
        self.view().child(slot)
    }

    /// The child covering keys greater than the last separator (inner nodes).
    pub fn upper_child(&self) -> u64 {
        self.view().upper_child()
    }

    /// See [`NodeView::lower_bound`].
    pub fn lower_bound(&self, key: &[u8]) -> (usize, bool) {
        self.view().lower_bound(key)
    }

    /// Inner nodes: index of the child covering `key`; `count()` means the
    /// upper child.
    pub fn child_index_for(&self, key: &[u8]) -> usize {
        self.view().child_index_for(key)
    }

    /// Inner nodes: page id of the child covering `key`.
    pub fn child_for(&self, key: &[u8]) -> u64 {
        self.view().child_for(key)
    }

    /// Inner nodes: child page id at `index`, where `index == count()` is the
    /// upper child (the indexing of `child_index_for`).
    pub fn child_at(&self, index: usize) -> u64 {
        self.view().child_at(index)
    }

    // ----------------------------------------------------------------------
    // Mutating paths: assume a valid node, exclusive latch held.

    /// Sets the upper child (inner nodes).
    pub fn set_upper_child(&mut self, child: u64) {
        debug_assert!(!self.is_leaf());
        self.write_u64(UPPER_CHILD_AT, child);
    }

    /// Replaces the child page id at `index`; `index == count()` sets the
    /// upper child (inner nodes).
    pub fn set_child(&mut self, index: usize, child: u64) {
        debug_assert!(!self.is_leaf());
        debug_assert!(index <= self.count());
        if index == self.count() {
            self.set_upper_child(child);
            return;
        }
        let s = self.slot(index);
        debug_assert_eq!(s.value_len, CHILD_BYTES);
        let at = s.offset + s.key_len;
        self.write_u64(at, child);
    }

    /// Leaves: inserts `key -> value`, replacing the value if `key` exists.
    /// Compacts the page if the free space is fragmented. On `NodeFull` the
    /// node is unchanged.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), NodeFull> {
        let found = self.lower_bound(key);
        self.insert_found(found, key, value)
    }

    /// [`Node::insert`] with `found = lower_bound(key)` already taken on
    /// these bytes (e.g. by an optimistic reader whose version held).
    pub fn insert_found(
        &mut self,
        found: (usize, bool),
        key: &[u8],
        value: &[u8],
    ) -> Result<(), NodeFull> {
        debug_assert!(self.is_leaf());
        debug_assert!(self.key_within_fences(key), "key outside fences");
        debug_assert_eq!(found, self.lower_bound(key));
        if !self.fits(found, key.len(), value.len()) {
            return Err(NodeFull);
        }
        let (slot, exact) = found;
        if exact {
            let old = self.slot(slot);
            if old.value_len == value.len() {
                let start = old.offset + old.key_len;
                self.bytes[start..start + value.len()].copy_from_slice(value);
                return Ok(());
            }
            // Removing frees the old value; the slot and key are re-added.
            self.remove_slot(slot);
        }
        let prefix_len = self.prefix_len();
        self.insert_entry_at(slot, &[], &key[prefix_len..], value);
        Ok(())
    }

    /// Appends `key -> value` after every entry: a bulk load builds nodes
    /// in key order (leaves: values; inner nodes: 8-byte child ids). The
    /// key must sort after the last key and lie within the fences. On
    /// `NodeFull` the node is unchanged.
    pub fn append_sorted(&mut self, key: &[u8], value: &[u8]) -> Result<(), NodeFull> {
        debug_assert!(self.key_within_fences(key), "key outside fences");
        debug_assert!(
            self.count() == 0 || self.lower_bound(key) == (self.count(), false),
            "append out of order"
        );
        if !self.has_space_for(key.len(), value.len()) {
            return Err(NodeFull);
        }
        let prefix_len = self.prefix_len();
        self.push_entry(&[], &key[prefix_len..], value);
        Ok(())
    }

    /// Inner nodes: inserts separator `key` with `child` covering the keys
    /// `<= key` (and above the previous separator). After splitting child `C`
    /// into (`new_left`, `C`), insert `(separator, new_left_pid)`: `C` stays
    /// where it was. `key` must not be present already.
    pub fn insert_separator(&mut self, key: &[u8], child: u64) -> Result<(), NodeFull> {
        debug_assert!(!self.is_leaf());
        debug_assert!(self.key_within_fences(key), "separator outside fences");
        let (slot, exact) = self.lower_bound(key);
        debug_assert!(!exact, "duplicate separator");
        if !self.has_space_for(key.len(), CHILD_BYTES) {
            return Err(NodeFull);
        }
        let prefix_len = self.prefix_len();
        self.insert_entry_at(slot, &[], &key[prefix_len..], &child.to_le_bytes());
        Ok(())
    }

    /// Removes `slot` (key and value, or separator and its child). The heap
    /// bytes become garbage until the next compaction.
    pub fn remove_slot(&mut self, slot: usize) {
        let count = self.count();
        debug_assert!(slot < count);
        let s = self.slot(slot);
        let entry_bytes = s.key_len + s.value_len;
        let start = NODE_HEADER_END + slot * SLOT_BYTES;
        let end = NODE_HEADER_END + count * SLOT_BYTES;
        self.bytes.copy_within(start + SLOT_BYTES..end, start);
        self.write_u16(HDR_COUNT, count - 1);
        if count == 1 {
            // Empty: the next insert sets the skip from its key alone.
            self.write_prefix_and_skip(self.prefix_len(), HEAD_SKIP_MAX);
        }
        self.write_u16(HDR_HEAP_USED, self.heap_used_bytes() - entry_bytes);
        // Cheap partial reclaim: the newest entry sits at the heap start.
        if s.offset == self.heap_start() {
            self.write_u16(HDR_HEAP_START, s.offset + entry_bytes);
        }
    }

    /// Removes `key` if present; returns whether it was.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        let (slot, exact) = self.lower_bound(key);
        if exact {
            self.remove_slot(slot);
        }
        exact
    }

    /// Rewrites the heap without holes, in place (via a stack temp page).
    pub fn compactify(&mut self) {
        let mut temp = [0u8; PAGE_SIZE];
        temp.copy_from_slice(&self.bytes);
        let old = Node::from_page(&temp);
        let space_used_bytes = old.space_used_bytes();
        init_page(
            &mut self.bytes,
            old.page_kind(),
            old.lower_fence(),
            old.upper_fence(),
            old.upper_child(),
        );
        self.copy_entries_from(old, 0..old.count());
        debug_assert_eq!(self.space_used_bytes(), space_used_bytes);
        debug_assert_eq!(self.contiguous_free_bytes(), self.free_space_bytes());
    }

    /// Splits this node: the lower half moves to `new_left` (a fresh page,
    /// fully initialised here), this node keeps the upper half, and the
    /// separator is written to `separator_out`.
    ///
    /// Afterwards `new_left` holds the keys `<= separator` with fences
    /// (old lower, separator) and this node the keys `> separator` with fences
    /// (separator, old upper), so the parent's pointer to this node stays
    /// valid; the caller inserts `(separator, new_left_pid)` into the parent.
    /// Leaves keep every key; inner nodes move the separator up (its child
    /// becomes `new_left`'s upper child). The split point balances bytes, and
    /// both halves have room for one more entry of `MAX_ENTRY_BYTES`. Leaf
    /// separators are truncated to the shortest prefix of the first right key
    /// that still separates. Requires `count() >= 2`.
    pub fn split(&mut self, new_left: &mut [u8; PAGE_SIZE], separator_out: &mut Vec<u8>) {
        let split_slot = self.split_slot();
        self.split_at(split_slot, new_left, separator_out);
    }

    /// Split for ascending inserts: when the key being inserted sorts after
    /// every key here, the left page keeps every entry (a leaf; an inner
    /// node moves its last separator up), so pages filled by appends end up
    /// full instead of half full, and this page is left empty (an inner
    /// node: only its upper child) for the insert. Keeping one entry here
    /// instead cost a table of 600-byte rows 15% of its fill. When the left
    /// page would not hold everything with its new upper fence, one more
    /// entry stays here; if that does not fit either, the balanced split.
    pub fn split_for_append(
        &mut self,
        new_left: &mut [u8; PAGE_SIZE],
        separator_out: &mut Vec<u8>,
    ) {
        let count = self.count();
        debug_assert!(count >= 2, "split needs two entries");
        for split_slot in [count - 1, count - 2] {
            self.separator_into(split_slot, separator_out);
            if self.split_fits(split_slot, separator_out) {
                self.split_at_separator(split_slot, new_left, separator_out);
                return;
            }
        }
        self.split(new_left, separator_out);
    }

    /// Split for ascending inserts that end in front of other keys (e.g.
    /// parallel loaders, each appending to its own key range: the leaf at a
    /// loader's frontier also holds the first keys of the next range). A
    /// leaf's left page keeps slots `[0, insert_slot)`, and this page keeps
    /// the rest. The separator lies just below the first key that stays
    /// here (and at or above `insert_key`), so the insert and the run after
    /// it go to the left page until it is full; the next range's keys stay
    /// here on their own instead of travelling in front of the run, which
    /// would leave every page of the run as empty as they take. (Falls back
    /// to the usual separator when that one does not fit.) An inner node's `insert_slot`
    /// is the loader's frontier child: the left page keeps the children
    /// before it (slot `insert_slot - 1` becomes the left's upper child and
    /// its key moves up), and this page keeps the frontier child and the
    /// rest. Returns false (nothing changed) when it does not apply:
    /// `0 < insert_slot < count` (`1 <` for inner nodes), and the entries
    /// that stay here must be at most half of the node's bytes, so that the
    /// insert fits after the split.
    pub fn split_for_sequential(
        &mut self,
        insert_slot: usize,
        insert_key: &[u8],
        new_left: &mut [u8; PAGE_SIZE],
        separator_out: &mut Vec<u8>,
    ) -> bool {
        let count = self.count();
        let first_allowed = if self.is_leaf() { 1 } else { 2 };
        if insert_slot < first_allowed || insert_slot >= count {
            return false;
        }
        let entry_bytes = |index: usize| {
            let s = self.slot(index);
            SLOT_BYTES + s.key_len + s.value_len
        };
        let total_bytes: usize = (0..count).map(entry_bytes).sum();
        let right_bytes: usize = (insert_slot..count).map(entry_bytes).sum();
        if 2 * right_bytes > total_bytes {
            return false;
        }
        let split = insert_slot - 1;
        // An empty separator cannot be stored (empty upper fence = +infinity).
        if split == 0 && self.prefix_len() == 0 && self.key_suffix(0).is_empty() {
            return false;
        }
        if self.is_leaf()
            && self.separator_below_into(insert_slot, insert_key, separator_out)
            && self.split_fits(split, separator_out)
        {
            self.split_at_separator(split, new_left, separator_out);
            return true;
        }
        self.separator_into(split, separator_out);
        if !self.split_fits(split, separator_out) {
            return false;
        }
        self.split_at_separator(split, new_left, separator_out);
        true
    }

    /// Leaves: a separator just below key `slot` (F) and at or above
    /// `insert_key`, into `out`: F without its last byte if that is 0 (then
    /// every key < F is <= it), else F with its last byte decremented (every
    /// key < F is <= it but longer keys that start with it). False when
    /// there is none above the lower fence (nothing written that counts).
    fn separator_below_into(&self, slot: usize, insert_key: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        out.extend_from_slice(self.prefix());
        out.extend_from_slice(self.key_suffix(slot));
        if insert_key >= out.as_slice() {
            return false;
        }
        let first_right_len = out.len();
        match out.last_mut() {
            Some(0) | None => out.truncate(first_right_len.saturating_sub(1)),
            Some(last) => *last -= 1,
        }
        if out.as_slice() < insert_key {
            out.clear();
            out.extend_from_slice(insert_key);
        }
        !out.is_empty() && out.as_slice() > self.lower_fence()
    }

    /// Whether both pages of a split after `split_slot` (see
    /// [`Node::split_at_separator`]) with `separator` fit in a page, with
    /// their new fences and prefixes.
    fn split_fits(&self, split_slot: usize, separator: &[u8]) -> bool {
        let count = self.count();
        let leaf = self.is_leaf();
        let prefix_len = self.prefix_len();
        let side_bytes = |lower: &[u8], upper: &[u8], slots: Range<usize>| {
            let new_prefix = common_prefix_len(lower, upper);
            let entries: usize = slots
                .map(|index| {
                    let s = self.slot(index);
                    SLOT_BYTES + (prefix_len + s.key_len).saturating_sub(new_prefix) + s.value_len
                })
                .sum();
            NODE_HEADER_END + self.child_bytes() + lower.len() + upper.len() + entries
        };
        let left_end = if leaf { split_slot + 1 } else { split_slot };
        split_slot < count
            && separator.len() <= MAX_KEY_BYTES
            && side_bytes(self.lower_fence(), separator, 0..left_end) <= PAGE_SIZE
            && side_bytes(separator, self.upper_fence(), split_slot + 1..count) <= PAGE_SIZE
    }

    /// True if the full key of `slot` equals `key`.
    pub fn key_equals(&self, slot: usize, key: &[u8]) -> bool {
        let prefix = self.prefix();
        slot < self.count()
            && key.len() == prefix.len() + self.key_suffix(slot).len()
            && key.starts_with(prefix)
            && key[prefix.len()..] == *self.key_suffix(slot)
    }

    fn split_at(
        &mut self,
        split_slot: usize,
        new_left: &mut [u8; PAGE_SIZE],
        separator_out: &mut Vec<u8>,
    ) {
        self.separator_into(split_slot, separator_out);
        self.split_at_separator(split_slot, new_left, separator_out);
    }

    /// Splits after `split_slot` (leaves) or moves it up (inner nodes) with
    /// `separator`, which must lie in `[key(split_slot), key(split_slot + 1))`
    /// (inner nodes: equal `key(split_slot)`), within the fences; the right
    /// half may be empty (`split_for_append`).
    fn split_at_separator(
        &mut self,
        split_slot: usize,
        new_left: &mut [u8; PAGE_SIZE],
        separator: &[u8],
    ) {
        let count = self.count();
        debug_assert!(count >= 2, "split needs two entries");
        // Leaves keep the split slot on the left; inner nodes move it up.
        debug_assert!(split_slot < count, "split slot {split_slot} beyond {count}");
        debug_assert!(self.split_fits(split_slot, separator), "split does not fit");
        let kind = self.page_kind();
        let leaf = self.is_leaf();
        debug_assert!(!separator.is_empty(), "empty separator means +infinity");

        let (left_end, left_upper_child) = if leaf {
            (split_slot + 1, 0)
        } else {
            (split_slot, self.child(split_slot))
        };
        let left = init_page(
            new_left,
            kind,
            self.lower_fence(),
            separator,
            left_upper_child,
        );
        left.copy_entries_from(self, 0..left_end);

        let mut temp = [0u8; PAGE_SIZE];
        let right = init_page(
            &mut temp,
            kind,
            separator,
            self.upper_fence(),
            self.upper_child(),
        );
        right.copy_entries_from(self, split_slot + 1..count);
        debug_assert_eq!(left.count() + right.count() + usize::from(!leaf), count);
        // Keep the buffer layer's header bytes of this page.
        self.bytes[COMMON_HEADER_END..].copy_from_slice(&temp[COMMON_HEADER_END..]);
    }

    /// Bytes the node [`Node::merge_into_right`] would make of this node
    /// and `right`, or None if it would not fit in a page (reads only: a
    /// caller can ask before it takes `right` for writing).
    pub fn merged_bytes(&self, right: &Node, separator: &[u8]) -> Option<usize> {
        debug_assert_eq!(self.page_kind(), right.page_kind());
        debug_assert_eq!(self.upper_fence(), separator);
        debug_assert_eq!(right.lower_fence(), separator);
        let inner = !self.is_leaf();
        let lower = self.lower_fence();
        let upper = right.upper_fence();
        let prefix_len = common_prefix_len(lower, upper);
        let count = self.count() + right.count() + usize::from(inner);
        let mut needed_bytes = NODE_HEADER_END
            + right.child_bytes()
            + count * SLOT_BYTES
            + lower.len()
            + upper.len()
            + self.entry_bytes_with_prefix(prefix_len)
            + right.entry_bytes_with_prefix(prefix_len);
        if inner {
            needed_bytes += separator.len().saturating_sub(prefix_len) + CHILD_BYTES;
        }
        (needed_bytes <= PAGE_SIZE).then_some(needed_bytes)
    }

    /// Merges this node (the left sibling) into `right` if all entries fit:
    /// `right` then holds both nodes' entries with fences (self.lower,
    /// right.upper) and the caller removes the parent's separator for `self`
    /// and frees `self`'s page. `separator` is the parent's separator between
    /// the two (equal to `self`'s upper and `right`'s lower fence); inner
    /// nodes pull it down as the key for `self`'s upper child. Returns false,
    /// and changes nothing, if the merged node would not fit.
    pub fn merge_into_right(&self, right: &mut Node, separator: &[u8]) -> bool {
        let Some(needed_bytes) = self.merged_bytes(right, separator) else {
            return false;
        };
        let inner = !self.is_leaf();
        let lower = self.lower_fence();
        let upper = right.upper_fence();
        let prefix_len = common_prefix_len(lower, upper);

        let mut temp = [0u8; PAGE_SIZE];
        let merged = init_page(
            &mut temp,
            right.page_kind(),
            lower,
            upper,
            right.upper_child(),
        );
        merged.copy_entries_from(self, 0..self.count());
        if inner {
            let separator_suffix = separator.get(prefix_len..).unwrap_or(&[]);
            merged.push_entry(&[], separator_suffix, &self.upper_child().to_le_bytes());
        }
        merged.copy_entries_from(right, 0..right.count());
        debug_assert_eq!(merged.space_used_bytes(), needed_bytes);
        right.bytes[COMMON_HEADER_END..].copy_from_slice(&temp[COMMON_HEADER_END..]);
        true
    }

    /// Leaves: plans moving entries between this leaf and its right sibling
    /// `right` (this leaf's upper fence is `right`'s lower fence) so that a
    /// new entry (`key`, not present in either, and a `value_len`-byte
    /// value) fits on its side, with the two leaves' bytes balanced. Moving
    /// entries to a sibling with room instead of splitting (as B*-trees do)
    /// keeps leaves of randomly inserted large rows fuller. None when the
    /// two leaves cannot hold their entries and the new one with an eighth
    /// of a page to spare between them (so that a pair of nearly full
    /// leaves splits instead of trading entries at every insert).
    pub fn plan_rebalance(&self, right: &Node, key: &[u8], value_len: usize) -> Option<Rebalance> {
        debug_assert!(self.is_leaf() && right.is_leaf());
        debug_assert_eq!(self.upper_fence(), right.lower_fence());
        let (left_count, right_count) = (self.count(), right.count());
        // The new entry's place in the sequence of both leaves' entries.
        let in_left = self.upper_fence().is_empty() || key <= self.upper_fence();
        let insert_at = if in_left {
            self.lower_bound(key).0
        } else {
            left_count + right.lower_bound(key).0
        };
        let total = left_count + right_count + 1;
        // Full key and value lengths of item `i` of the sequence.
        let lengths = |i: usize| -> (usize, usize) {
            let i = match i.cmp(&insert_at) {
                Ordering::Equal => return (key.len(), value_len),
                Ordering::Less => i,
                Ordering::Greater => i - 1,
            };
            if i < left_count {
                (self.key_len(i), self.slot(i).value_len)
            } else {
                (
                    right.key_len(i - left_count),
                    right.slot(i - left_count).value_len,
                )
            }
        };
        let key_of = |i: usize, out: &mut Vec<u8>| match i.cmp(&insert_at) {
            Ordering::Equal => {
                out.clear();
                out.extend_from_slice(key);
            }
            Ordering::Less if i < left_count => self.key_into(i, out),
            Ordering::Less => right.key_into(i - left_count, out),
            Ordering::Greater if i - 1 < left_count => self.key_into(i - 1, out),
            Ordering::Greater => right.key_into(i - 1 - left_count, out),
        };
        let item_bytes = |i: usize| {
            let (key_len, value_len) = lengths(i);
            SLOT_BYTES + key_len + value_len
        };
        let all_bytes: usize = (0..total).map(item_bytes).sum();
        let fence_bytes = self.lower_fence().len() + right.upper_fence().len();
        if all_bytes + fence_bytes + 2 * NODE_HEADER_END > 2 * PAGE_SIZE {
            return None;
        }
        // The split of balanced bytes (ignoring prefixes), then its
        // neighbours, for the best one that fits with the new fences.
        let mut before = 0;
        let mut balanced = total - 1;
        for i in 0..total {
            before += item_bytes(i);
            if 2 * before >= all_bytes {
                balanced = i + 1;
                break;
            }
        }
        let (mut left_last, mut right_first) = (Vec::new(), Vec::new());
        let mut best: Option<(usize, Rebalance)> = None;
        let first = balanced.saturating_sub(2).max(1);
        let last = (balanced + 2).min(total - 1);
        for split in first..=last {
            key_of(split - 1, &mut left_last);
            key_of(split, &mut right_first);
            let separator = shortest_separator(&left_last, &right_first);
            let side_bytes = |lower: &[u8], upper: &[u8], items: Range<usize>| {
                let prefix_len = common_prefix_len(lower, upper);
                let entries: usize = items
                    .map(|i| item_bytes(i).saturating_sub(prefix_len))
                    .sum();
                NODE_HEADER_END + lower.len() + upper.len() + entries
            };
            let left_bytes = side_bytes(self.lower_fence(), &separator, 0..split);
            let right_bytes = side_bytes(&separator, right.upper_fence(), split..total);
            if separator.len() > MAX_KEY_BYTES || left_bytes > PAGE_SIZE || right_bytes > PAGE_SIZE
            {
                continue;
            }
            let imbalance = left_bytes.abs_diff(right_bytes);
            if best.as_ref().is_none_or(|(b, _)| imbalance < *b) {
                // Items before the split, minus the new entry if it is one.
                let left_keeps = split - usize::from(insert_at < split);
                best = Some((
                    imbalance,
                    Rebalance {
                        left_keeps,
                        separator,
                    },
                ));
            }
        }
        best.map(|(_, plan)| plan)
    }

    /// Leaves: how many of `right`'s first entries this leaf, its left
    /// neighbour, can take (a compaction filling leaves): the plan that
    /// leaves this leaf as full as it can be, with `right` keeping at
    /// least one entry (a `right` that fits whole is a merge:
    /// [`Node::merge_into_right`]). None when not one entry moves.
    pub fn plan_fill_left(&self, right: &Node) -> Option<Rebalance> {
        debug_assert!(self.is_leaf() && right.is_leaf());
        debug_assert_eq!(self.upper_fence(), right.lower_fence());
        let (left_count, right_count) = (self.count(), right.count());
        let total = left_count + right_count;
        if right_count < 2 {
            return None;
        }
        // Bytes of item `i` of both leaves' entries in key order (slot,
        // full key, value), and the sums of the items before each.
        let item_bytes = |i: usize| {
            let (key_len, value_len) = if i < left_count {
                (self.key_len(i), self.slot(i).value_len)
            } else {
                let j = i - left_count;
                (right.key_len(j), right.slot(j).value_len)
            };
            SLOT_BYTES + key_len + value_len
        };
        let mut before = Vec::with_capacity(total + 1);
        before.push(0usize);
        for i in 0..total {
            before.push(before[i] + item_bytes(i));
        }
        let key_of = |i: usize, out: &mut Vec<u8>| {
            if i < left_count {
                self.key_into(i, out)
            } else {
                right.key_into(i - left_count, out)
            }
        };
        let side_bytes = |lower: &[u8], upper: &[u8], items: Range<usize>| {
            let prefix_len = common_prefix_len(lower, upper);
            NODE_HEADER_END + lower.len() + upper.len() + before[items.end]
                - before[items.start]
                - items.len() * prefix_len
        };
        let (mut left_last, mut right_first) = (Vec::new(), Vec::new());
        // The most entries the left leaf can keep, down to one more than
        // it has.
        for keeps in (left_count + 1..total).rev() {
            key_of(keeps - 1, &mut left_last);
            key_of(keeps, &mut right_first);
            let separator = shortest_separator(&left_last, &right_first);
            if separator.len() > MAX_KEY_BYTES {
                continue;
            }
            if side_bytes(self.lower_fence(), &separator, 0..keeps) <= PAGE_SIZE
                && side_bytes(&separator, right.upper_fence(), keeps..total) <= PAGE_SIZE
            {
                return Some(Rebalance {
                    left_keeps: keeps,
                    separator,
                });
            }
        }
        None
    }

    /// Carries out [`Node::plan_rebalance`]'s plan (made on these two
    /// leaves, unchanged since): this leaf keeps the first
    /// `plan.left_keeps` of the two leaves' entries, `right` the rest, and
    /// `plan.separator` becomes this leaf's upper and `right`'s lower fence.
    /// The caller then gives this leaf's slot in the parent the new
    /// separator and inserts the new entry.
    pub fn apply_rebalance(&mut self, right: &mut Node, plan: &Rebalance) {
        let mut old_left = [0u8; PAGE_SIZE];
        old_left.copy_from_slice(&self.bytes);
        let mut old_right = [0u8; PAGE_SIZE];
        old_right.copy_from_slice(&right.bytes);
        let (old_left, old_right) = (Node::from_page(&old_left), Node::from_page(&old_right));
        let left_count = old_left.count();
        let keeps = plan.left_keeps;
        let left = init_page(
            &mut self.bytes,
            PAGE_KIND_LEAF,
            old_left.lower_fence(),
            &plan.separator,
            0,
        );
        left.copy_entries_from(old_left, 0..keeps.min(left_count));
        left.copy_entries_from(old_right, 0..keeps.saturating_sub(left_count));
        let right_node = init_page(
            &mut right.bytes,
            PAGE_KIND_LEAF,
            &plan.separator,
            old_right.upper_fence(),
            0,
        );
        right_node.copy_entries_from(old_left, keeps.min(left_count)..left_count);
        right_node.copy_entries_from(
            old_right,
            keeps.saturating_sub(left_count)..old_right.count(),
        );
        debug_assert_eq!(
            self.count() + right.count(),
            old_left.count() + old_right.count()
        );
    }

    /// Checks the structural invariants (see [`check_invariants`]).
    pub fn check_invariants(&self) -> Result<(), String> {
        let kind = self.page_kind();
        if kind != PAGE_KIND_LEAF && kind != PAGE_KIND_INNER {
            return Err(format!("bad page kind {kind}"));
        }
        let raw_count = self.read_u16(HDR_COUNT);
        if raw_count > SLOT_COUNT_MAX {
            return Err(format!("count {raw_count} exceeds {SLOT_COUNT_MAX}"));
        }
        let heap_start = self.heap_start();
        if heap_start < self.slots_end() || heap_start > PAGE_SIZE {
            return Err(format!("heap start {heap_start} out of range"));
        }
        let mut regions: Vec<(usize, usize)> = Vec::with_capacity(raw_count + 2);
        let fences_end = self.fences_end();
        let (lower_len, upper_len) = (self.read_u16(HDR_LOWER_LEN), self.read_u16(HDR_UPPER_LEN));
        if lower_len > MAX_KEY_BYTES || upper_len > MAX_KEY_BYTES {
            return Err(format!(
                "fence lengths {lower_len} and {upper_len} out of range"
            ));
        }
        // The entries lie between the heap start and the fences.
        let entries_end = fences_end - lower_len - upper_len;
        if heap_start > entries_end {
            return Err(format!("heap start {heap_start} inside the fences"));
        }
        regions.push((fences_end - lower_len, lower_len));
        regions.push((entries_end, upper_len));
        let (lower, upper) = (self.lower_fence(), self.upper_fence());
        if !lower.is_empty() && !upper.is_empty() && lower >= upper {
            return Err("lower fence not below upper fence".to_string());
        }
        let raw_prefix_len = self.read_u16(HDR_PREFIX_AND_SKIP) & PREFIX_LEN_MASK;
        if raw_prefix_len != common_prefix_len(lower, upper) {
            return Err(format!(
                "prefix length {raw_prefix_len} does not match fences"
            ));
        }
        let leaf = self.is_leaf();
        let mut previous_key: Option<Vec<u8>> = None;
        let mut key = Vec::new();
        for index in 0..raw_count {
            let s = self.slot(index);
            let end = s.offset + s.key_len + s.value_len;
            if s.offset < heap_start || end > entries_end {
                return Err(format!(
                    "slot {index} entry {}..{end} out of heap",
                    s.offset
                ));
            }
            regions.push((s.offset, s.key_len + s.value_len));
            if !leaf && s.value_len != CHILD_BYTES {
                return Err(format!("inner slot {index} value is {} bytes", s.value_len));
            }
            let (suffix, skip) = (self.key_suffix(index), self.head_skip());
            let first = self.key_suffix(0);
            if suffix.len() < skip || first.len() < skip || suffix[..skip] != first[..skip] {
                return Err(format!(
                    "slot {index} key does not share the {skip} bytes heads skip"
                ));
            }
            if s.head != head_of(&suffix[skip..]) {
                return Err(format!("slot {index} head does not match key"));
            }
            self.key_into(index, &mut key);
            if let Some(previous) = &previous_key {
                if previous >= &key {
                    return Err(format!("slot {index} key not above previous key"));
                }
            }
            if !lower.is_empty() && key.as_slice() <= lower {
                return Err(format!("slot {index} key not above lower fence"));
            }
            if !upper.is_empty() && key.as_slice() > upper {
                return Err(format!("slot {index} key above upper fence"));
            }
            previous_key = Some(key.clone());
        }
        regions.sort_unstable();
        let mut covered_end = heap_start;
        for &(offset, len) in &regions {
            if len > 0 && offset < covered_end {
                return Err(format!("heap region at {offset} overlaps another"));
            }
            covered_end = covered_end.max(offset + len);
        }
        let live_bytes: usize = regions.iter().map(|&(_, len)| len).sum();
        if live_bytes != self.heap_used_bytes() {
            return Err(format!(
                "heap used {} but live regions sum to {live_bytes}",
                self.heap_used_bytes()
            ));
        }
        Ok(())
    }

    // ----------------------------------------------------------------------
    // Internals of the mutating paths.

    /// True if `lower < key <= upper` (infinite fences always pass).
    fn key_within_fences(&self, key: &[u8]) -> bool {
        fences_cover(self.lower_fence(), self.upper_fence(), key)
    }

    /// Heap bytes of this node's entries if they were stored with
    /// `prefix_len` (<= this node's prefix) stripped instead.
    fn entry_bytes_with_prefix(&self, prefix_len: usize) -> usize {
        debug_assert!(prefix_len <= self.prefix_len());
        let fence_bytes = self.lower_fence().len() + self.upper_fence().len();
        let stored_bytes = self.heap_used_bytes().saturating_sub(fence_bytes);
        stored_bytes + self.count() * self.prefix_len().saturating_sub(prefix_len)
    }

    /// Inserts a slot at `slot` for the key suffix `key_a ++ key_b` and
    /// `value`, compacting first if the contiguous free space is too small.
    fn insert_entry_at(&mut self, slot: usize, key_a: &[u8], key_b: &[u8], value: &[u8]) {
        let count = self.count();
        debug_assert!(slot <= count);
        let key_len = key_a.len() + key_b.len();
        let entry_bytes = key_len + value.len();
        if self.contiguous_free_bytes() < SLOT_BYTES + entry_bytes {
            self.compactify();
        }
        debug_assert!(self.contiguous_free_bytes() >= SLOT_BYTES + entry_bytes);
        let skip = self.head_skip_with(key_a, key_b);
        if skip != self.head_skip() {
            self.set_head_skip(skip);
        }
        let start = NODE_HEADER_END + slot * SLOT_BYTES;
        let end = NODE_HEADER_END + count * SLOT_BYTES;
        self.bytes.copy_within(start..end, start + SLOT_BYTES);
        self.write_u16(HDR_COUNT, count + 1);
        let offset = self.heap_alloc(entry_bytes);
        let mut at = offset;
        for part in [key_a, key_b, value] {
            self.bytes[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        self.write_slot(
            slot,
            Slot {
                offset,
                key_len,
                value_len: value.len(),
                head: head_of_parts(key_a, key_b, skip),
            },
        );
        self.write_u16(HDR_HEAP_USED, self.heap_used_bytes() + entry_bytes);
    }

    /// Appends an entry after all existing slots (callers append in order).
    fn push_entry(&mut self, key_a: &[u8], key_b: &[u8], value: &[u8]) {
        self.insert_entry_at(self.count(), key_a, key_b, value);
    }

    /// Appends the entries `range` of `source`, re-encoding keys for this
    /// node's prefix. They must sort after this node's keys and share its
    /// prefix.
    fn copy_entries_from(&mut self, source: &Node, range: Range<usize>) {
        let prefix_len = self.prefix_len();
        let source_prefix = source.prefix();
        // full key = source_prefix ++ suffix; store full_key[prefix_len..].
        let parts = |index: usize| {
            let suffix = source.key_suffix(index);
            if prefix_len <= source_prefix.len() {
                (&source_prefix[prefix_len..], suffix)
            } else {
                let skip = prefix_len - source_prefix.len();
                debug_assert!(skip <= suffix.len());
                (&[][..], suffix.get(skip..).unwrap_or(&[]))
            }
        };
        if range.is_empty() {
            return;
        }
        // The skip the node ends with (what its first key shares with the
        // range's last), set once: each entry then leaves it as it is,
        // rather than lowering it, and rewriting the heads, step by step.
        let (first, longest) = if self.count() == 0 {
            let longest = range.clone().map(|i| {
                let (a, b) = parts(i);
                a.len() + b.len()
            });
            (parts(range.start), longest.max().unwrap_or(0))
        } else {
            // (Not raised here when the node's keys did not need it.)
            ((self.key_suffix(0), &[][..]), usize::MAX)
        };
        let shared = common_prefix_len_of_parts(first, parts(range.end - 1));
        let skip = self.head_skip().min(skip_for(shared, longest));
        if skip != self.head_skip() {
            self.set_head_skip(skip);
        }
        for index in range {
            let (key_a, key_b) = parts(index);
            self.push_entry(key_a, key_b, source.value(index));
        }
    }

    /// Chooses the split slot so both halves get about half of the slot and
    /// entry bytes. Leaves: slots `..=split` go left. Inner: slots `..split`
    /// go left and `split`'s key moves up.
    fn split_slot(&self) -> usize {
        let count = self.count();
        let entry_bytes = |index: usize| {
            let s = self.slot(index);
            SLOT_BYTES + s.key_len + s.value_len
        };
        let total_bytes: usize = (0..count).map(entry_bytes).sum();
        let mut before_bytes = 0;
        let mut straddling = count - 1;
        for index in 0..count {
            let bytes = entry_bytes(index);
            if 2 * (before_bytes + bytes) >= total_bytes {
                straddling = index;
                break;
            }
            before_bytes += bytes;
        }
        if !self.is_leaf() {
            // The straddling separator leaves the node: both halves <= T/2.
            return straddling;
        }
        // Put the straddling entry on the side it mostly lies on, keeping
        // both halves non-empty.
        let straddling_left = 2 * before_bytes + entry_bytes(straddling) <= total_bytes;
        let mut split = if straddling_left {
            straddling
        } else {
            straddling.saturating_sub(1)
        };
        split = split.min(count - 2);
        // An empty separator cannot be stored (empty upper fence = +infinity).
        if split == 0 && self.prefix_len() == 0 && self.key_suffix(0).is_empty() && count > 2 {
            split = 1;
        }
        split
    }

    /// Writes the full separator for a split at `split` into `out`.
    fn separator_into(&self, split: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.prefix());
        let left_key = self.key_suffix(split);
        if self.is_leaf() && split + 1 < self.count() {
            // Shortest prefix of the right key that is > left key and < right
            // key (so right key stays in the right half).
            let right_key = self.key_suffix(split + 1);
            let common = common_prefix_len(left_key, right_key);
            if left_key.len() > common && right_key.len() > common + 1 {
                out.extend_from_slice(&right_key[..common + 1]);
                return;
            }
        }
        out.extend_from_slice(left_key);
    }
}

/// The byte ranges `(offset, length)` of a page that one node change
/// writes: at most three (the node header, a stretch of the slot array,
/// the new entry's heap bytes). A logged step saves only these bytes
/// before the change (to undo it) and logs only them afterwards (the
/// delta), instead of copying and comparing the whole page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    ranges: [(u16, u16); 3],
    len: u8,
}

impl Footprint {
    fn new() -> Footprint {
        Footprint {
            ranges: [(0, 0); 3],
            len: 0,
        }
    }

    fn push(&mut self, start: usize, end: usize) {
        debug_assert!(start <= end && end <= PAGE_SIZE);
        if start < end {
            self.ranges[self.len as usize] = (start as u16, (end - start) as u16);
            self.len += 1;
        }
    }

    /// The ranges, `(offset, length)`, each nonempty.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges[..self.len as usize]
    }
}

impl Node {
    /// Where [`Node::insert_found`] with these arguments writes, or None
    /// when it may rewrite the whole node (it compacts the heap first, or
    /// the key lowers the head skip, which rewrites every head).
    /// Requires that the insert fits (`fits(found, key.len(), value_len)`).
    pub fn insert_footprint(
        &self,
        found: (usize, bool),
        key: &[u8],
        value_len: usize,
    ) -> Option<Footprint> {
        let key_len = key.len();
        debug_assert!(self.fits(found, key_len, value_len));
        let (slot, exact) = found;
        let count = self.count();
        let mut footprint = Footprint::new();
        let old = self.slot(slot);
        if exact && old.value_len == value_len {
            // The value is overwritten in place.
            let start = old.offset + old.key_len;
            footprint.push(start, start + value_len);
            return Some(footprint);
        }
        // (A replace stores the same key again: the skip stays, or, when
        // the node held only that key, only its own head changes.)
        let suffix = key.get(self.prefix_len()..).unwrap_or(&[]);
        if !exact && count > 0 && self.head_skip_with(&[], suffix) != self.head_skip() {
            return None;
        }
        let entry_bytes = key_len.saturating_sub(self.prefix_len()) + value_len;
        // The heap start and the slot count after the removal a replace
        // does first (`remove_slot` reclaims the newest entry's bytes).
        let (count_between, heap_start) = if exact {
            let reclaimed = if old.offset == self.heap_start() {
                old.key_len + old.value_len
            } else {
                0
            };
            (count - 1, self.heap_start() + reclaimed)
        } else {
            (count, self.heap_start())
        };
        let slots_end_between = NODE_HEADER_END + count_between * SLOT_BYTES;
        if heap_start.saturating_sub(slots_end_between) < SLOT_BYTES + entry_bytes {
            return None; // `insert_entry_at` compacts
        }
        footprint.push(COMMON_HEADER_END, NODE_HEADER_END);
        // The slots from `slot` on shift up by one (a replace shifts them
        // down and back: the same bytes).
        let slots_end_after = NODE_HEADER_END + (count_between + 1) * SLOT_BYTES;
        footprint.push(NODE_HEADER_END + slot * SLOT_BYTES, slots_end_after);
        footprint.push(heap_start - entry_bytes, heap_start);
        Some(footprint)
    }

    /// Where [`Node::remove_slot`] of `slot` writes.
    pub fn remove_footprint(&self, slot: usize) -> Footprint {
        debug_assert!(slot < self.count());
        let mut footprint = Footprint::new();
        footprint.push(COMMON_HEADER_END, NODE_HEADER_END);
        footprint.push(
            NODE_HEADER_END + slot * SLOT_BYTES,
            NODE_HEADER_END + self.count() * SLOT_BYTES,
        );
        footprint
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut key = Vec::new();
        let mut list = f.debug_list();
        for slot in 0..self.count() {
            self.key_into(slot, &mut key);
            list.entry(&(key.clone(), self.value(slot).len()));
        }
        list.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    type Model = BTreeMap<Vec<u8>, Vec<u8>>;
    /// An entry that did not fit: (key, value).
    type Pending = Option<(Vec<u8>, Vec<u8>)>;

    /// Fails unless `before` and `after` differ only inside `footprint`.
    fn changed_only_within(
        before: &[u8],
        after: &[u8; PAGE_SIZE],
        footprint: &Footprint,
    ) -> Result<(), TestCaseError> {
        for (at, (x, y)) in before.iter().zip(after).enumerate() {
            let inside = footprint
                .ranges()
                .iter()
                .any(|&(start, len)| (start as usize..start as usize + len as usize).contains(&at));
            prop_assert!(
                x == y || inside,
                "byte {} changed outside {:?}",
                at,
                footprint
            );
        }
        Ok(())
    }

    fn new_page() -> Box<[u8; PAGE_SIZE]> {
        Box::new([0u8; PAGE_SIZE])
    }

    fn contents(node: &Node) -> Model {
        let mut model = Model::new();
        let mut key = Vec::new();
        for slot in 0..node.count() {
            node.key_into(slot, &mut key);
            model.insert(key.clone(), node.value(slot).to_vec());
        }
        model
    }

    fn separators(node: &Node) -> Vec<(Vec<u8>, u64)> {
        let mut key = Vec::new();
        (0..node.count())
            .map(|slot| {
                node.key_into(slot, &mut key);
                (key.clone(), node.child(slot))
            })
            .collect()
    }

    fn value_for(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
    }

    /// Fences sharing `prefix`: keys are prefix ++ [0x20..0x24] ++ tail.
    fn fences(prefix: &[u8], bounded: bool) -> (Vec<u8>, Vec<u8>) {
        if !bounded {
            return (Vec::new(), Vec::new());
        }
        let mut lower = prefix.to_vec();
        lower.push(0x10);
        let mut upper = prefix.to_vec();
        upper.push(0xF0);
        (lower, upper)
    }

    fn make_key(prefix: &[u8], first: u8, tail: &[u8]) -> Vec<u8> {
        let mut key = prefix.to_vec();
        key.push(0x20 + first);
        key.extend_from_slice(tail);
        key
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert {
            first: u8,
            tail: Vec<u8>,
            value_len: usize,
            seed: u8,
        },
        Remove {
            pick: usize,
        },
        Compactify,
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..4, prop::collection::vec(0u8..4, 0..12), 0usize..200, any::<u8>())
                .prop_map(|(first, tail, value_len, seed)| Op::Insert { first, tail, value_len, seed }),
            2 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
            1 => Just(Op::Compactify),
        ]
    }

    /// Fills a leaf with random entries (within its fences) until an insert
    /// fails; returns the model and the entry that did not fit.
    fn fill_leaf(
        node: &mut Node,
        prefix: &[u8],
        key_seeds: &[(u8, Vec<u8>, usize)],
    ) -> (Model, Pending) {
        let mut model = Model::new();
        for (round, (first, tail, value_len)) in key_seeds.iter().cycle().enumerate() {
            let mut tail = tail.clone();
            tail.extend_from_slice(&(round as u32).to_be_bytes());
            let key = make_key(prefix, *first, &tail);
            let value_len = (*value_len).min(MAX_ENTRY_BYTES - key.len());
            let value = value_for(round as u8, value_len);
            if round >= 10_000 {
                return (model, None);
            }
            if !node.key_within_fences(&key) {
                continue;
            }
            match node.insert(&key, &value) {
                Ok(()) => {
                    model.insert(key, value);
                }
                Err(NodeFull) => return (model, Some((key, value))),
            }
        }
        (model, None)
    }

    fn seeds_strategy() -> impl Strategy<Value = Vec<(u8, Vec<u8>, usize)>> {
        prop::collection::vec(
            (
                0u8..4,
                prop::collection::vec(any::<u8>(), 0..40),
                prop_oneof![0usize..64, 0usize..MAX_ENTRY_BYTES],
            ),
            1..20,
        )
    }

    fn prefix_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..20)
    }

    proptest! {

        #[test]
        fn leaf_matches_model(
            prefix in prefix_strategy(),
            bounded in any::<bool>(),
            ops in prop::collection::vec(op_strategy(), 1..400),
            probes in prop::collection::vec((0u8..5, prop::collection::vec(0u8..4, 0..6)), 0..20),
        ) {
            let prefix = if bounded { prefix } else { Vec::new() };
            let (lower, upper) = fences(&prefix, bounded);
            let mut page = new_page();
            let node = init_leaf(&mut page, &lower, &upper);
            prop_assert_eq!(node.prefix_len(), prefix.len());
            let mut model = Model::new();
            for op in ops {
                match op {
                    Op::Insert { first, tail, value_len, seed } => {
                        let key = make_key(&prefix, first, &tail);
                        let value = value_for(seed, value_len);
                        let before = node.as_page().to_vec();
                        let old_len = model.get(&key).map(|v| v.len());
                        let free = node.free_space_bytes();
                        let found = node.lower_bound(&key);
                        let footprint = node
                            .fits(found, key.len(), value.len())
                            .then(|| node.insert_footprint(found, &key, value.len()));
                        match node.insert(&key, &value) {
                            Ok(()) => {
                                if let Some(Some(footprint)) = footprint {
                                    changed_only_within(&before, node.as_page(), &footprint)?;
                                }
                                model.insert(key, value);
                            }
                            Err(NodeFull) => {
                                prop_assert_eq!(before.as_slice(), node.as_page().as_slice());
                                let needed = match old_len {
                                    Some(old) => value.len().saturating_sub(old),
                                    None => SLOT_BYTES + key.len() - prefix.len() + value.len(),
                                };
                                prop_assert!(needed > free);
                            }
                        }
                    }
                    Op::Remove { pick } => {
                        if model.is_empty() {
                            prop_assert!(!node.remove(&make_key(&prefix, 0, &[])));
                        } else {
                            let key = model.keys().nth(pick % model.len()).unwrap().clone();
                            let before = node.as_page().to_vec();
                            let footprint = node.remove_footprint(node.lower_bound(&key).0);
                            prop_assert!(node.remove(&key));
                            changed_only_within(&before, node.as_page(), &footprint)?;
                            prop_assert!(!node.remove(&key));
                            model.remove(&key);
                        }
                    }
                    Op::Compactify => {
                        let used = node.space_used_bytes();
                        node.compactify();
                        prop_assert_eq!(used, node.space_used_bytes());
                    }
                }
                check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
                prop_assert_eq!(node.count(), model.len());
            }
            prop_assert_eq!(&contents(node), &model);
            prop_assert_eq!(node.lower_fence(), lower.as_slice());
            prop_assert_eq!(node.upper_fence(), upper.as_slice());
            for (first, tail) in probes {
                let probe = make_key(&prefix, first, &tail);
                let expected_slot = model.range(..probe.clone()).count();
                let (slot, exact) = node.lower_bound(&probe);
                prop_assert_eq!(slot, expected_slot);
                prop_assert_eq!(exact, model.contains_key(&probe));
                // After removals too (they leave the head skip).
                prop_assert_eq!(NodeView::new(node.as_page()).find(&probe), exact.then_some(slot));
            }
        }

        #[test]
        fn split_preserves_entries(
            prefix in prefix_strategy(),
            bounded in any::<bool>(),
            seeds in seeds_strategy(),
            rounds in 1usize..6,
        ) {
            let (lower, upper) = fences(&prefix, bounded);
            let prefix = if bounded { prefix } else { Vec::new() };
            let mut right_page = new_page();
            init_leaf(&mut right_page, &lower, &upper);
            let mut separator = Vec::new();
            for round in 0..rounds {
                let node = Node::from_page_mut(&mut right_page);
                let mut round_seeds = seeds.clone();
                round_seeds.iter_mut().for_each(|s| s.1.push(round as u8));
                let (mut model, pending) = fill_leaf(node, &prefix, &round_seeds);
                model.extend(contents(node));
                if node.count() < 2 {
                    break; // fences too narrow for the generated keys
                }
                let (old_lower, old_upper) = (node.lower_fence().to_vec(), node.upper_fence().to_vec());
                let mut left_page = new_page();
                node.split(&mut left_page, &mut separator);
                let left = Node::from_page(&left_page);
                check_invariants(left.as_page()).map_err(TestCaseError::fail)?;
                check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
                prop_assert!(left.is_leaf() && node.is_leaf());
                prop_assert!(left.count() >= 1 && node.count() >= 1);
                prop_assert_eq!(left.lower_fence(), old_lower.as_slice());
                prop_assert_eq!(left.upper_fence(), separator.as_slice());
                prop_assert_eq!(node.lower_fence(), separator.as_slice());
                prop_assert_eq!(node.upper_fence(), old_upper.as_slice());
                let (left_model, right_model) = (contents(left), contents(node));
                prop_assert!(left_model.keys().all(|k| k <= &separator));
                prop_assert!(right_model.keys().all(|k| k > &separator));
                let mut union = left_model.clone();
                union.extend(right_model);
                prop_assert_eq!(&union, &model);
                // The guarantee behind MAX_ENTRY_BYTES.
                prop_assert!(left.free_space_bytes() >= SLOT_BYTES + MAX_ENTRY_BYTES);
                prop_assert!(node.free_space_bytes() >= SLOT_BYTES + MAX_ENTRY_BYTES);
                if let Some((key, value)) = pending {
                    if key <= separator {
                        Node::from_page_mut(&mut left_page).insert(&key, &value).unwrap();
                    } else {
                        node.insert(&key, &value).unwrap();
                    }
                }
                // Merge round trip on a copy.
                let mut merged_page = right_page.clone();
                let left = Node::from_page(&left_page);
                let merged = Node::from_page_mut(&mut merged_page);
                let left_count = left.count();
                let merged_ok = left.merge_into_right(merged, &separator);
                if merged_ok {
                    check_invariants(merged.as_page()).map_err(TestCaseError::fail)?;
                    let mut expected = contents(left);
                    expected.extend(contents(Node::from_page(&right_page)));
                    prop_assert_eq!(contents(merged), expected);
                    prop_assert_eq!(merged.lower_fence(), old_lower.as_slice());
                    prop_assert_eq!(merged.upper_fence(), old_upper.as_slice());
                } else {
                    prop_assert!(left_count > 0);
                    prop_assert_eq!(&merged_page[..], &right_page[..]);
                }
            }
        }

        /// Keys over {0, 1, 2} up to 20 bytes long share long runs, end
        /// in zeros and extend each other: the cases where the one-word
        /// comparison of `lower_bound` (first 8 bytes padded with zeros,
        /// then lengths or the rest) must still order like slices. A stem
        /// of `stem_len` bytes that every key (and most probes) starts with
        /// gives the node a head skip, and with keys of up to `tail_most`
        /// bytes after it, suffixes that end within the skip and the head,
        /// which `lower_bound` orders from the slots alone.
        #[test]
        fn lower_bound_orders_like_slices(
            keys in proptest::collection::btree_set(proptest::collection::vec(0u8..3, 0..20), 0..60),
            probes in proptest::collection::vec(proptest::collection::vec(0u8..3, 0..20), 0..40),
            prefix_len in 0usize..6,
            stem_len in 0usize..6,
            tail_most in 1usize..21,
        ) {
            let stem = vec![2u8; stem_len];
            let with_stem = |k: &Vec<u8>| {
                let mut key = stem.clone();
                key.extend_from_slice(&k[..k.len().min(tail_most)]);
                key
            };
            let keys: std::collections::BTreeSet<Vec<u8>> = keys.iter().map(with_stem).collect();
            let probes: Vec<Vec<u8>> = probes
                .iter()
                .enumerate()
                .map(|(i, p)| if i % 4 == 3 { p.clone() } else { with_stem(p) })
                .collect();
            let prefix = vec![1u8; prefix_len];
            let (lower, upper) = if prefix_len == 0 {
                (Vec::new(), Vec::new())
            } else {
                let mut upper = prefix.clone();
                upper.push(3);
                (prefix.clone(), upper)
            };
            let mut page = new_page();
            let node = init_leaf(&mut page, &lower, &upper);
            let mut stored = Vec::new();
            for k in &keys {
                let mut key = prefix.clone();
                key.extend_from_slice(k);
                if key > lower && (upper.is_empty() || key <= upper) && node.insert(&key, b"v").is_ok() {
                    stored.push(key);
                }
            }
            stored.sort();
            let probes = probes.iter().map(|p| {
                let mut key = prefix.clone();
                key.extend_from_slice(p);
                key
            });
            for probe in probes.chain(stored.clone()).chain([Vec::new(), vec![1; 30]]) {
                let at = stored.partition_point(|k| *k < probe);
                let expected = (at, stored.get(at) == Some(&probe));
                let in_range = probe > lower && (upper.is_empty() || probe <= upper);
                if in_range {
                    prop_assert_eq!(node.lower_bound(&probe), expected, "probe {:?}", probe);
                }
                prop_assert_eq!(racy_view(node.as_page()).lower_bound(&probe), node.lower_bound(&probe));
                // `find` (the hash index's scan of the heads) agrees, on
                // any probe, with the sorted list.
                let found = expected.1.then_some(expected.0);
                prop_assert_eq!(NodeView::new(node.as_page()).find(&probe), found, "probe {:?}", probe);
                prop_assert_eq!(racy_view(node.as_page()).find(&probe), found);
                let hint = NodeView::new(node.as_page()).find_entry_hint(&probe);
                if found.is_some() && stored.len() <= FIND_LINEAR_MAX {
                    let hint = hint.clone().expect("a found key's head matches");
                    prop_assert!(hint.end <= PAGE_SIZE && !hint.is_empty());
                }
                prop_assert_eq!(racy_view(node.as_page()).find_entry_hint(&probe), hint);
            }
        }

        #[test]
        fn compare_keys_orders_like_slices(
            a in proptest::collection::vec(0u8..4, 0..24),
            b in proptest::collection::vec(0u8..4, 0..24),
        ) {
            prop_assert_eq!(compare_keys(&a, &b), a.cmp(&b));
            prop_assert_eq!(compare_keys(&a, &a), Ordering::Equal);
            prop_assert_eq!(head_of(&a), head_of_parts(&a, &[], 0));
            prop_assert_eq!(head_of(&a[a.len().min(2)..]), head_of_parts(&a[..a.len().min(1)], &a[a.len().min(1)..], 2));
            for from in 0..=a.len() {
                prop_assert_eq!(padded_word_of_tail(&a, from), padded_word(&a[from..]));
            }
            let mut padded = [0u8; 8];
            let n = a.len().min(8);
            padded[..n].copy_from_slice(&a[..n]);
            prop_assert_eq!(padded_word(&a), u64::from_be_bytes(padded));
        }

        #[test]
        fn rebalance_moves_entries_so_the_refused_one_fits(
            prefix in prefix_strategy(),
            seeds in seeds_strategy(),
            removals in proptest::collection::vec(any::<u16>(), 0..12),
            remove_from_left in any::<bool>(),
        ) {
            let (lower, upper) = fences(&prefix, true);
            let mut page = new_page();
            let node = init_leaf(&mut page, &lower, &upper);
            let (_, pending) = fill_leaf(node, &prefix, &seeds);
            let Some((key, value)) = pending else { return Ok(()); };
            let mut left_page = new_page();
            let mut separator = Vec::new();
            node.split(&mut left_page, &mut separator);
            let left = Node::from_page_mut(&mut left_page);
            // Room on one side: remove some of its entries.
            for r in removals {
                let side: &mut Node = if remove_from_left { &mut *left } else { &mut *node };
                if side.count() > 1 {
                    let slot = usize::from(r) % side.count();
                    side.remove_slot(slot);
                }
            }
            let mut before = contents(left);
            before.extend(contents(node));
            let fits_one_page = left.space_used_bytes() + node.space_used_bytes()
                + SLOT_BYTES + key.len() + value.len() + 2 * MAX_KEY_BYTES
                <= PAGE_SIZE;
            let plan = left.plan_rebalance(node, &key, value.len());
            if fits_one_page {
                prop_assert!(plan.is_some(), "no plan although everything fits one page");
            }
            let Some(plan) = plan else { return Ok(()); };
            left.apply_rebalance(node, &plan);
            check_invariants(left.as_page()).map_err(TestCaseError::fail)?;
            check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
            let mut after = contents(left);
            after.extend(contents(node));
            prop_assert_eq!(after, before.clone());
            prop_assert_eq!(left.lower_fence(), lower.as_slice());
            prop_assert_eq!(node.upper_fence(), upper.as_slice());
            prop_assert_eq!(left.upper_fence(), plan.separator.as_slice());
            prop_assert_eq!(node.lower_fence(), plan.separator.as_slice());
            // The refused entry now fits on its side.
            let side: &mut Node = if key.as_slice() <= plan.separator.as_slice() { left } else { node };
            prop_assert!(side.insert(&key, &value).is_ok(), "the entry does not fit after rebalancing");
            check_invariants(side.as_page()).map_err(TestCaseError::fail)?;
        }

        /// Filling a leaf from its right neighbour keeps every entry and
        /// the outer fences, leaves valid pages, and leaves the left one
        /// full: a second plan moves nothing.
        #[test]
        fn fill_left_takes_what_fits_and_no_more(
            prefix in prefix_strategy(),
            seeds in seeds_strategy(),
            removals in proptest::collection::vec(any::<u16>(), 0..12),
        ) {
            let (lower, upper) = fences(&prefix, true);
            let mut page = new_page();
            let node = init_leaf(&mut page, &lower, &upper);
            let _ = fill_leaf(node, &prefix, &seeds);
            if node.count() < 2 {
                return Ok(());
            }
            let mut left_page = new_page();
            let mut separator = Vec::new();
            node.split(&mut left_page, &mut separator);
            let left = Node::from_page_mut(&mut left_page);
            // Room in the left leaf: remove some of its entries.
            for r in removals {
                if left.count() > 1 {
                    let slot = usize::from(r) % left.count();
                    left.remove_slot(slot);
                }
            }
            let mut before = contents(left);
            before.extend(contents(node));
            let Some(plan) = left.plan_fill_left(node) else {
                // Nothing moves only when the right leaf would empty, or
                // when its first entry cannot join the left one: built
                // here with the separator such a move would have, the
                // two pages do not both fit.
                let right: Vec<_> = contents(node).into_iter().collect();
                if right.len() < 2 {
                    return Ok(());
                }
                let moved = shortest_separator(&right[0].0, &right[1].0);
                let (mut left_probe, mut right_probe) = (new_page(), new_page());
                let l = init_leaf(&mut left_probe, &lower, &moved);
                let left_fits = contents(left)
                    .iter()
                    .chain([(&right[0].0, &right[0].1)])
                    .all(|(k, v)| l.insert(k, v).is_ok());
                let r = init_leaf(&mut right_probe, &moved, &upper);
                let right_fits = right[1..].iter().all(|(k, v)| r.insert(k, v).is_ok());
                prop_assert!(!(left_fits && right_fits), "one entry could move, yet no plan");
                return Ok(());
            };
            prop_assert!(plan.left_keeps > left.count());
            left.apply_rebalance(node, &plan);
            check_invariants(left.as_page()).map_err(TestCaseError::fail)?;
            check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
            prop_assert!(node.count() >= 1);
            let mut after = contents(left);
            after.extend(contents(node));
            prop_assert_eq!(after, before);
            prop_assert_eq!(left.lower_fence(), lower.as_slice());
            prop_assert_eq!(node.upper_fence(), upper.as_slice());
            prop_assert_eq!(left.upper_fence(), plan.separator.as_slice());
            prop_assert_eq!(node.lower_fence(), plan.separator.as_slice());
            prop_assert!(left.plan_fill_left(node).is_none(), "a second fill moved more");
        }

        #[test]
        fn split_then_merge_round_trip(
            prefix in prefix_strategy(),
            seeds in seeds_strategy(),
        ) {
            let (lower, upper) = fences(&prefix, true);
            let mut page = new_page();
            let node = init_leaf(&mut page, &lower, &upper);
            let (_, _) = fill_leaf(node, &prefix, &seeds);
            let original = contents(node);
            let mut left_page = new_page();
            let mut separator = Vec::new();
            node.split(&mut left_page, &mut separator);
            // The halves of a split always fit back together: nothing was
            // added, and the wider merged range only shortens the prefix.
            let left = Node::from_page(&left_page);
            prop_assert!(left.merge_into_right(node, &separator));
            check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
            prop_assert_eq!(contents(node), original);
            prop_assert_eq!(node.lower_fence(), lower.as_slice());
            prop_assert_eq!(node.upper_fence(), upper.as_slice());
        }

        #[test]
        fn inner_child_for_and_split_merge(
            prefix in prefix_strategy(),
            bounded in any::<bool>(),
            keys in prop::collection::btree_set(
                (0u8..4, prop::collection::vec(any::<u8>(), 0..(MAX_KEY_BYTES - 30))),
                2..200,
            ),
            probes in prop::collection::vec((0u8..5, prop::collection::vec(any::<u8>(), 0..8)), 1..50),
        ) {
            let (lower, upper) = fences(&prefix, bounded);
            let prefix = if bounded { prefix } else { Vec::new() };
            let mut page = new_page();
            let node = init_inner(&mut page, &lower, &upper, 999);
            let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for (i, (first, tail)) in keys.iter().enumerate() {
                let key = make_key(&prefix, *first, tail);
                if node.insert_separator(&key, 1000 + i as u64).is_err() {
                    break;
                }
                model.insert(key, 1000 + i as u64);
            }
            check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
            prop_assume!(model.len() >= 2);
            let expected_child = |model: &BTreeMap<Vec<u8>, u64>, upper_child: u64, probe: &Vec<u8>| {
                model.range(probe.clone()..).next().map(|(_, c)| *c).unwrap_or(upper_child)
            };
            let probe_keys: Vec<Vec<u8>> = probes
                .iter()
                .map(|(first, tail)| make_key(&prefix, *first, tail))
                .chain(model.keys().cloned())
                .collect();
            for probe in &probe_keys {
                prop_assert_eq!(node.child_for(probe), expected_child(&model, 999, probe));
                prop_assert_eq!(node.child_at(node.child_index_for(probe)), node.child_for(probe));
            }
            let original = separators(node);

            let mut left_page = new_page();
            let mut separator = Vec::new();
            node.split(&mut left_page, &mut separator);
            let left = Node::from_page(&left_page);
            check_invariants(left.as_page()).map_err(TestCaseError::fail)?;
            check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
            prop_assert!(!left.is_leaf() && !node.is_leaf());
            prop_assert_eq!(left.upper_child(), model[&separator]);
            prop_assert_eq!(node.upper_child(), 999);
            prop_assert_eq!(left.count() + node.count() + 1, model.len());
            prop_assert!(left.free_space_bytes() >= SLOT_BYTES + MAX_ENTRY_BYTES);
            prop_assert!(node.free_space_bytes() >= SLOT_BYTES + MAX_ENTRY_BYTES);
            for probe in &probe_keys {
                let expected = expected_child(&model, 999, probe);
                let got = if probe <= &separator { left.child_for(probe) } else { node.child_for(probe) };
                prop_assert_eq!(got, expected);
            }
            prop_assert!(left.merge_into_right(node, &separator));
            check_invariants(node.as_page()).map_err(TestCaseError::fail)?;
            prop_assert_eq!(separators(node), original);
            prop_assert_eq!(node.upper_child(), 999);
        }

        #[test]
        fn racy_and_plain_views_agree_on_valid_nodes(
            prefix in prefix_strategy(),
            bounded in any::<bool>(),
            inner in any::<bool>(),
            seeds in seeds_strategy(),
            probes in prop::collection::vec((0u8..5, prop::collection::vec(any::<u8>(), 0..24)), 1..20),
        ) {
            let (lower, upper) = fences(&prefix, bounded);
            let prefix = if bounded { prefix } else { Vec::new() };
            let mut page = new_page();
            if inner {
                let node = init_inner(&mut page, &lower, &upper, 999);
                for (i, (first, tail, _)) in seeds.iter().enumerate() {
                    let key = make_key(&prefix, *first, tail);
                    if node.lower_bound(&key).1 {
                        continue; // a duplicate separator
                    }
                    if node.insert_separator(&key, 1000 + i as u64).is_err() {
                        break;
                    }
                }
            } else {
                let node = init_leaf(&mut page, &lower, &upper);
                fill_leaf(node, &prefix, &seeds);
            }
            check_invariants(&page).map_err(TestCaseError::fail)?;
            let (node, racy) = (Node::from_page(&page), racy_view(&page));
            let mut probes: Vec<Vec<u8>> = probes
                .iter()
                .map(|(first, tail)| make_key(&prefix, *first, tail))
                .collect();
            let mut key = Vec::new();
            for slot in 0..node.count() {
                node.key_into(slot, &mut key);
                probes.push(key.clone());
            }
            prop_assert_eq!(
                read_transcript(racy, &probes),
                read_transcript(node.view(), &probes)
            );
            // And with the slices `Node` hands out on a latched page.
            let mut bytes = Vec::new();
            racy.lower_fence_into(&mut bytes);
            prop_assert_eq!(&bytes[..], node.lower_fence());
            racy.upper_fence_into(&mut bytes);
            prop_assert_eq!(&bytes[..], node.upper_fence());
            for slot in 0..node.count() {
                racy.value_into(slot, &mut bytes);
                prop_assert_eq!(&bytes[..], node.value(slot));
                racy.key_into(slot, &mut bytes);
                prop_assert_eq!(racy.lower_bound(&bytes), (slot, true));
                prop_assert_eq!(&bytes[racy.prefix_len()..], node.key_suffix(slot));
            }
        }

        #[test]
        fn garbage_pages_never_panic(
            bytes in prop::collection::vec(any::<u8>(), PAGE_SIZE),
            small_header in any::<bool>(),
            probes in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 1..8),
        ) {
            let mut page = new_page();
            page.copy_from_slice(&bytes);
            if small_header {
                // Plausible counts and offsets reach the deeper read paths.
                for at in (HDR_COUNT..NODE_HEADER_END).step_by(2) {
                    page[at + 1] &= 0x0F;
                }
                page[HDR_COUNT + 1] = 0;
            }
            exercise_read_paths(&page, &probes);
        }

        #[test]
        fn corrupted_valid_pages_never_panic(
            seeds in seeds_strategy(),
            flips in prop::collection::vec((COMMON_HEADER_END..PAGE_SIZE, any::<u8>()), 1..16),
            probes in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 1..8),
        ) {
            let mut page = new_page();
            let node = init_leaf(&mut page, b"k", b"l");
            fill_leaf(node, b"k", &seeds);
            for (at, byte) in flips {
                page[at] ^= byte | 1;
            }
            exercise_read_paths(&page, &probes);
        }
    }

    /// The page as an optimistic reader sees it: read through volatile
    /// loads ([`RacyPage`]), never through a reference.
    fn racy_view(page: &[u8; PAGE_SIZE]) -> RacyNode<'_> {
        // SAFETY: `page` stays borrowed (so allocated and unchanged) for as
        // long as the view lives; its PAGE_SIZE bytes are readable.
        NodeView::new(unsafe { RacyPage::from_raw(page.as_ptr()) })
    }

    /// Numbers and byte strings: what the read paths return.
    type Transcript = (Vec<u64>, Vec<Vec<u8>>);

    /// Everything the read paths of `n` return, in order, checking on the
    /// way the bounds they promise on any bytes (ranges inside the page,
    /// slots within the count).
    fn read_transcript<B: NodeBytes>(n: NodeView<B>, probes: &[Vec<u8>]) -> Transcript {
        let (mut numbers, mut strings) = (Vec::new(), Vec::new());
        let range_numbers = |range: Range<usize>, numbers: &mut Vec<u64>| {
            assert!(
                range.start <= range.end && range.end <= PAGE_SIZE,
                "{range:?}"
            );
            numbers.extend([range.start as u64, range.end as u64]);
        };
        let count = n.count();
        assert!(count <= SLOT_COUNT_MAX);
        range_numbers(n.lower_fence_range(), &mut numbers);
        range_numbers(n.upper_fence_range(), &mut numbers);
        range_numbers(n.prefix_range(), &mut numbers);
        assert!(n.free_space_bytes() <= PAGE_SIZE);
        numbers.extend([
            u64::from(n.page_kind()),
            u64::from(n.is_leaf()),
            count as u64,
            n.space_used_bytes() as u64,
            n.free_space_bytes() as u64,
            n.prefix_len() as u64,
            n.head_skip() as u64,
            u64::from(n.has_space_for(MAX_KEY_BYTES, 100)),
            n.upper_child(),
        ]);
        let mut bytes = Vec::new();
        n.lower_fence_into(&mut bytes);
        strings.push(bytes.clone());
        n.upper_fence_into(&mut bytes);
        strings.push(bytes.clone());
        for slot in 0..count + 2 {
            range_numbers(n.key_suffix_range(slot), &mut numbers);
            range_numbers(n.value_range(slot), &mut numbers);
            n.key_into(slot, &mut bytes);
            assert!(bytes.len() <= 2 * PAGE_SIZE);
            strings.push(bytes.clone());
            n.value_into(slot, &mut bytes);
            assert!(bytes.len() <= PAGE_SIZE);
            strings.push(bytes.clone());
            numbers.extend([
                n.child(slot),
                n.child_at(slot),
                n.key_len(slot) as u64,
                u64::from(n.fits((slot, true), 8, 100)),
                u64::from(n.fits((slot, false), 8, 100)),
            ]);
        }
        for probe in probes {
            let (slot, found) = n.lower_bound(probe);
            assert!(slot <= count);
            numbers.extend([
                slot as u64,
                u64::from(found),
                n.child_index_for(probe) as u64,
                n.child_for(probe),
                n.child_if_inner(probe).unwrap_or(u64::MAX),
            ]);
        }
        (numbers, strings)
    }

    /// Runs every read path on `page` (any bytes): through `Node`'s slices,
    /// and through the plain and the racy view, which must agree.
    fn exercise_read_paths(page: &[u8; PAGE_SIZE], probes: &[Vec<u8>]) {
        let plain = read_transcript(Node::from_page(page).view(), probes);
        let racy = read_transcript(racy_view(page), probes);
        assert_eq!(plain, racy, "the racy view reads another node");
        let node = Node::from_page(page);
        let _ = check_invariants(page);
        let _ = (
            node.is_leaf(),
            node.free_space_bytes(),
            node.space_used_bytes(),
        );
        let _ = (node.lower_fence(), node.upper_fence(), node.prefix());
        let _ = (node.upper_child(), node.has_space_for(MAX_KEY_BYTES, 100));
        let count = node.count();
        assert!(count <= SLOT_COUNT_MAX);
        let mut key = Vec::new();
        for slot in 0..count + 2 {
            node.key_into(slot, &mut key);
            let _ = (node.value(slot), node.child(slot), node.child_at(slot));
            let _ = node.key_len(slot);
        }
        for probe in probes {
            let (slot, _) = node.lower_bound(probe);
            assert!(slot <= count);
            let _ = node.child_for(probe);
            let (plain, racy) = (NodeView::new(page), racy_view(page));
            let found = plain.find(probe);
            assert!(found.is_none_or(|slot| slot < count));
            assert_eq!(found, racy.find(probe));
            let hint = plain.find_entry_hint(probe);
            assert!(hint.as_ref().is_none_or(|r| r.end <= PAGE_SIZE));
            assert_eq!(hint, racy.find_entry_hint(probe));
        }
        let _ = format!("{node:?}");
    }

    #[test]
    fn max_size_entries_split_with_max_fences() {
        // Worst case of the split bound: maximal lower fence, infinite upper
        // fence (prefix 0), maximal entries mixed with tiny ones.
        let lower = vec![0x01u8; MAX_KEY_BYTES];
        for small_every in [0usize, 2, 3, 5] {
            let mut page = new_page();
            let node = init_leaf(&mut page, &lower, &[]);
            let mut i = 0u32;
            loop {
                let mut key = vec![0x02u8; MAX_KEY_BYTES];
                key[MAX_KEY_BYTES - 4..].copy_from_slice(&i.to_be_bytes());
                let value_len = if small_every != 0 && (i as usize).is_multiple_of(small_every) {
                    1
                } else {
                    MAX_ENTRY_BYTES - MAX_KEY_BYTES
                };
                if node.insert(&key, &vec![7u8; value_len]).is_err() {
                    break;
                }
                i += 1;
            }
            let mut left_page = new_page();
            let mut separator = Vec::new();
            node.split(&mut left_page, &mut separator);
            let left = Node::from_page_mut(&mut left_page);
            for half in [&mut *left, &mut *node] {
                check_invariants(half.as_page()).unwrap();
                assert!(half.free_space_bytes() >= SLOT_BYTES + MAX_ENTRY_BYTES);
                let mut key = half.upper_fence().to_vec();
                if key.is_empty() {
                    key = vec![0xFF; MAX_KEY_BYTES];
                }
                half.insert(&key, &vec![1u8; MAX_ENTRY_BYTES - key.len()])
                    .unwrap();
            }
        }
    }

    #[test]
    fn separator_is_truncated() {
        let mut page = new_page();
        let node = init_leaf(&mut page, &[], &[]);
        for key in [&b"apple"[..], b"apricot", b"banana", b"blueberry"] {
            node.insert(key, &[0u8; 900]).unwrap();
        }
        let mut left_page = new_page();
        let mut separator = Vec::new();
        node.split(&mut left_page, &mut separator);
        assert_eq!(separator, b"b");
        assert_eq!(Node::from_page(&left_page).count(), 2);
        assert_eq!(node.lower_fence(), b"b");
        // A key that is a prefix of its successor cannot be truncated.
        let mut page = new_page();
        let node = init_leaf(&mut page, &[], &[]);
        for key in [&b"a"[..], b"ab", b"abc", b"abcd"] {
            node.insert(key, &[0u8; 900]).unwrap();
        }
        node.split(&mut left_page, &mut separator);
        assert_eq!(separator, b"ab");
        check_invariants(&left_page).unwrap();
        check_invariants(node.as_page()).unwrap();
    }

    #[test]
    fn empty_keys_work_inside_a_node() {
        let mut page = new_page();
        let node = init_leaf(&mut page, &[], &[]);
        node.insert(b"", b"empty").unwrap();
        node.insert(b"a", b"x").unwrap();
        node.insert(b"\0", b"nul").unwrap();
        assert_eq!(node.lower_bound(b""), (0, true));
        assert_eq!(node.lower_bound(b"\0"), (1, true));
        assert_eq!(node.value(0), b"empty");
        check_invariants(node.as_page()).unwrap();
        let mut left_page = new_page();
        let mut separator = Vec::new();
        node.split(&mut left_page, &mut separator);
        assert!(!separator.is_empty());
        check_invariants(&left_page).unwrap();
        check_invariants(node.as_page()).unwrap();
    }

    #[test]
    fn common_header_is_untouched() {
        let mut page = new_page();
        page[..COMMON_HEADER_END].copy_from_slice(&[0xAB; COMMON_HEADER_END]);
        let node = init_leaf(&mut page, b"a", b"z");
        for i in 0..200u8 {
            let _ = node.insert(&[b'b', i], &[i; 30]);
        }
        node.compactify();
        let mut left_page = new_page();
        left_page[..COMMON_HEADER_END].copy_from_slice(&[0xCD; COMMON_HEADER_END]);
        let mut separator = Vec::new();
        node.split(&mut left_page, &mut separator);
        let mut expected = [0xABu8; COMMON_HEADER_END];
        expected[PAGE_KIND_OFFSET..PAGE_KIND_OFFSET + 2]
            .copy_from_slice(&PAGE_KIND_LEAF.to_le_bytes());
        assert_eq!(&page[..COMMON_HEADER_END], &expected);
        expected = [0xCDu8; COMMON_HEADER_END];
        expected[PAGE_KIND_OFFSET..PAGE_KIND_OFFSET + 2]
            .copy_from_slice(&PAGE_KIND_LEAF.to_le_bytes());
        assert_eq!(&left_page[..COMMON_HEADER_END], &expected);
    }

    #[test]
    fn checker_rejects_corruption() {
        let mut page = new_page();
        let node = init_leaf(&mut page, b"a", b"z");
        for key in [&b"b"[..], b"c", b"d"] {
            node.insert(key, b"value").unwrap();
        }
        check_invariants(&page).unwrap();
        let corrupt = |edit: &dyn Fn(&mut [u8; PAGE_SIZE])| {
            let mut copy = page.clone();
            edit(&mut copy);
            check_invariants(&copy)
        };
        // Swapped slots: keys unsorted.
        let slot0 = NODE_HEADER_END..NODE_HEADER_END + SLOT_BYTES;
        let err = corrupt(&|p| {
            let first: Vec<u8> = p[slot0.clone()].to_vec();
            p.copy_within(
                NODE_HEADER_END + SLOT_BYTES..NODE_HEADER_END + 2 * SLOT_BYTES,
                NODE_HEADER_END,
            );
            p[NODE_HEADER_END + SLOT_BYTES..NODE_HEADER_END + 2 * SLOT_BYTES]
                .copy_from_slice(&first);
        });
        assert!(err.unwrap_err().contains("previous"));
        // Free-space accounting off by one.
        let err = corrupt(&|p| p[HDR_HEAP_USED] += 1);
        assert!(err.unwrap_err().contains("heap used"));
        // Key bytes changed: head mismatch.
        let offset_of = |p: &[u8; PAGE_SIZE], slot: usize| {
            let at = NODE_HEADER_END + slot * SLOT_BYTES + SLOT_PACKED;
            let packed = u32::from_le_bytes(p[at..at + 4].try_into().unwrap());
            (packed & ((1 << SLOT_OFFSET_BITS) - 1)) as usize
        };
        let err = corrupt(&|p| {
            let offset = offset_of(p, 0);
            p[offset] = b'q';
        });
        assert!(err.unwrap_err().contains("head"));
        // Wrong page kind, bad prefix length, count too large.
        assert!(corrupt(&|p| p[PAGE_KIND_OFFSET] = 9).is_err());
        assert!(corrupt(&|p| p[HDR_PREFIX_AND_SKIP] = 1).is_err());
        // A head skip of 2 where the keys are "b", "c" and "d".
        let err = corrupt(&|p| p[HDR_PREFIX_AND_SKIP + 1] |= 2 << (PREFIX_LEN_BITS - 8));
        assert!(err.unwrap_err().contains("share"));
        assert!(corrupt(&|p| p[HDR_COUNT + 1] = 0xFF).is_err());
        // Key outside the fences (rewrite last key and its head consistently).
        let err = corrupt(&|p| {
            let at = NODE_HEADER_END + 2 * SLOT_BYTES;
            let offset = offset_of(p, 2);
            p[offset] = b'z' + 1;
            p[at + SLOT_HEAD..at + SLOT_HEAD + 4]
                .copy_from_slice(&head_of(&[b'z' + 1]).to_le_bytes());
        });
        assert!(err.unwrap_err().contains("upper fence"));
    }

    /// Keys that share bytes the fences do not (the root's case: empty
    /// fences, 8-byte big-endian numbers below 2^24): the heads skip them;
    /// a key that shares fewer lowers the skip and rewrites every head
    /// (and the insert's footprint is the whole page); removals leave it,
    /// compaction sets it again, an empty node starts over; lookups of
    /// keys that do not share the bytes land before or after every key.
    /// Both views agree with slices throughout.
    #[test]
    fn heads_skip_the_bytes_all_keys_share() {
        for inner in [false, true] {
            let mut page = new_page();
            let node = if inner {
                init_inner(&mut page, &[], &[], 7)
            } else {
                init_leaf(&mut page, &[], &[])
            };
            assert_eq!(node.head_skip(), HEAD_SKIP_MAX);
            let insert = |node: &mut Node, stored: &mut Vec<Vec<u8>>, key: u64| {
                let key = key.to_be_bytes();
                if !inner {
                    let found = node.lower_bound(&key);
                    let lowers = node.count() > 0
                        && common_prefix_len(&key, node.key_suffix(0)) < node.head_skip();
                    assert_eq!(node.insert_footprint(found, &key, 1).is_none(), lowers);
                    node.insert(&key, b"v").unwrap();
                } else {
                    node.insert_separator(&key, 100).unwrap();
                }
                check_invariants(node.as_page()).unwrap();
                stored.push(key.to_vec());
                stored.sort();
            };
            let check = |node: &Node, stored: &[Vec<u8>]| {
                let mut probes: Vec<Vec<u8>> = vec![vec![], vec![0; 3], vec![0; 9], vec![0xFF; 9]];
                for k in stored {
                    let n = u64::from_be_bytes(k[..].try_into().unwrap());
                    for p in [n, n - 1, n + 1] {
                        probes.push(p.to_be_bytes().to_vec());
                    }
                    let mut longer = k.clone();
                    longer.push(0);
                    probes.push(longer);
                    probes.push(k[..6].to_vec());
                }
                for p in [0, 0x0F_FFFF, 0x14_0000, 1 << 40, u64::MAX] {
                    probes.push(u64::to_be_bytes(p).to_vec());
                }
                for probe in &probes {
                    let at = stored.partition_point(|k| k < probe);
                    let expected = (at, stored.get(at) == Some(probe));
                    assert_eq!(
                        node.lower_bound(probe),
                        expected,
                        "probe {probe:?} in {node:?}"
                    );
                    assert_eq!(racy_view(node.as_page()).lower_bound(probe), expected);
                }
            };
            let mut keys = Vec::new();
            insert(node, &mut keys, 0x12_3456);
            assert_eq!(node.head_skip(), 8, "one key: all of it");
            insert(node, &mut keys, 0x12_3400);
            assert_eq!(node.head_skip(), 7);
            for key in (0x10_0001..0x14_0000u64).step_by(0x2345) {
                insert(node, &mut keys, key);
            }
            assert_eq!(node.head_skip(), 5, "00 00 00 00 00 1x: five bytes");
            check(node, &keys);
            let heads: std::collections::BTreeSet<u32> =
                (0..node.count()).map(|i| node.slot(i).head).collect();
            assert_eq!(heads.len(), node.count(), "the heads tell every key apart");
            insert(node, &mut keys, 1 << 32);
            assert_eq!(node.head_skip(), 3, "00 00 00 01: three bytes");
            check(node, &keys);
            assert!(node.remove(&(1u64 << 32).to_be_bytes()));
            keys.pop();
            assert_eq!(node.head_skip(), 3, "a removal leaves the skip");
            check(node, &keys);
            node.compactify();
            assert_eq!(node.head_skip(), 5, "compaction sets it again");
            check_invariants(node.as_page()).unwrap();
            check(node, &keys);
            while node.count() > 0 {
                node.remove_slot(0);
            }
            assert_eq!(node.head_skip(), HEAD_SKIP_MAX);
            check(node, &[]);
            insert(node, &mut Vec::new(), 0x300);
            assert_eq!(node.head_skip(), 8);
        }
        // Suffixes that fit in a head need no skip (and a lookup then
        // reads no key to check the shared bytes).
        let mut page = new_page();
        let node = init_leaf(&mut page, b"k\x00", b"k\xff");
        for (key, skip) in [
            (&b"k\x01\x02\x03"[..], 3),
            (b"k\x01\x02\x04", 2),
            (b"k\x01\x05", 1),
        ] {
            node.insert(key, b"v").unwrap();
            assert_eq!(node.head_skip(), skip, "inserts only lower it");
        }
        node.compactify();
        assert_eq!(node.head_skip(), 0, "suffixes of at most 4 bytes");
        node.insert(b"k\x01\x02\x03\x04\x05", b"v").unwrap();
        assert_eq!(node.head_skip(), 0, "an insert never raises the skip");
        node.compactify();
        assert_eq!(
            node.head_skip(),
            1,
            "a rebuild sets it when a suffix is longer"
        );
        check_invariants(node.as_page()).unwrap();
    }

    #[test]
    fn inner_child_updates_and_removal() {
        let mut page = new_page();
        let node = init_inner(&mut page, b"a", b"m", 10);
        node.insert_separator(b"c", 1).unwrap();
        node.insert_separator(b"g", 2).unwrap();
        node.insert_separator(b"e", 3).unwrap();
        assert_eq!(
            separators(node),
            [(b"c".to_vec(), 1), (b"e".to_vec(), 3), (b"g".to_vec(), 2)]
        );
        assert_eq!(node.prefix_len(), 0);
        assert_eq!((node.child_for(b"b"), node.child_for(b"c")), (1, 1));
        assert_eq!((node.child_for(b"d"), node.child_for(b"h")), (3, 10));
        node.set_child(1, 33);
        node.set_child(node.count(), 11);
        assert_eq!((node.child_for(b"e"), node.upper_child()), (33, 11));
        // After merging child 33 into its right sibling (child 2), the parent
        // drops the slot pointing to 33; "e" now routes to child 2.
        node.remove_slot(node.child_index_for(b"e"));
        assert_eq!(node.child_for(b"e"), 2);
        assert!(node.remove(b"c"));
        assert!(!node.remove(b"c"));
        assert_eq!(node.child_for(b"b"), 2);
        check_invariants(node.as_page()).unwrap();
    }

    #[test]
    fn update_in_place_and_resize() {
        let mut page = new_page();
        let node = init_leaf(&mut page, &[], &[]);
        node.insert(b"key", b"one").unwrap();
        node.insert(b"key", b"two").unwrap();
        assert_eq!(node.value(0), b"two");
        node.insert(b"key", &[5u8; 600]).unwrap();
        assert_eq!(node.value(0), &[5u8; 600][..]);
        assert_eq!(node.count(), 1);
        for (key, len) in [
            (&b"other"[..], 1000),
            (b"x2", 1000),
            (b"x3", 1000),
            (b"x4", 100),
        ] {
            node.insert(key, &vec![6u8; len]).unwrap();
        }
        // Growing the first value beyond the page fails and keeps the node.
        assert_eq!(node.insert(b"key", &[7u8; 1000]), Err(NodeFull));
        assert_eq!(node.value(0), &[5u8; 600][..]);
        // Growing it within the free space works.
        let grown = 600 + node.free_space_bytes();
        node.insert(b"key", &vec![8u8; grown]).unwrap();
        assert_eq!(node.value(0), &vec![8u8; grown][..]);
        assert_eq!(node.free_space_bytes(), 0);
        check_invariants(node.as_page()).unwrap();
    }

    #[test]
    fn append_split_leaves_the_left_page_full() {
        let mut page = [0u8; PAGE_SIZE];
        let node = init_leaf(&mut page, &[], &[]);
        let mut i = 0u64;
        while node.has_space_for(8, 120) {
            node.insert(&i.to_be_bytes(), &[7u8; 120]).unwrap();
            i += 1;
        }
        let count = node.count();
        let mut left_page = [0u8; PAGE_SIZE];
        let mut separator = Vec::new();
        node.split_for_append(&mut left_page, &mut separator);
        let left = Node::from_page(&left_page);
        assert_eq!(left.count(), count, "every entry stays left");
        assert_eq!(node.count(), 0);
        check_invariants(&left_page).unwrap();
        node.check_invariants().unwrap();
        assert!(
            node.has_space_for(8, 120),
            "the insert that caused the split fits"
        );
        assert!(
            left.upper_fence() == separator.as_slice()
                && node.lower_fence() == separator.as_slice()
        );
        assert_eq!(separator, (i - 1).to_be_bytes().to_vec(), "the last key");
        assert_eq!(node.lower_bound(&i.to_be_bytes()), (0, false));
        node.insert(&i.to_be_bytes(), &[7u8; 120]).unwrap();
        node.check_invariants().unwrap();

        // A left page that would not hold everything with its new upper
        // fence (the old one is empty): one entry stays right.
        let mut tight = [0u8; PAGE_SIZE];
        let node = init_leaf(&mut tight, &[], &[]);
        let mut k = 0u64;
        while node.has_space_for(16, 100) {
            let mut key = k.to_be_bytes().to_vec();
            key.extend_from_slice(&[0xAB; 8]);
            node.insert(&key, &[1u8; 100]).unwrap();
            k += 1;
        }
        let filler = node.free_space_bytes() - SLOT_BYTES - 1;
        node.insert(&[0xFF; 1], &vec![2u8; filler]).unwrap();
        let count = node.count();
        node.split_for_append(&mut left_page, &mut separator);
        check_invariants(&left_page).unwrap();
        node.check_invariants().unwrap();
        assert_eq!(Node::from_page(&left_page).count() + node.count(), count);
        assert!(node.count() >= 1, "the last entry moved right");

        // Inner nodes: the last separator moves up, the right keeps only its
        // upper child.
        let mut inner_page = [0u8; PAGE_SIZE];
        let inner = init_inner(&mut inner_page, &[], &[], 9_999);
        let mut k = 0u64;
        while inner.has_space_for(8, CHILD_BYTES) {
            inner.insert_separator(&k.to_be_bytes(), k).unwrap();
            k += 1;
        }
        let inner_count = inner.count();
        inner.split_for_append(&mut left_page, &mut separator);
        let left = Node::from_page(&left_page);
        assert_eq!(left.count(), inner_count - 1);
        assert_eq!(left.upper_child(), k - 1);
        assert_eq!(inner.count(), 0);
        assert_eq!(inner.upper_child(), 9_999);
        assert_eq!(separator, (k - 1).to_be_bytes().to_vec());
        check_invariants(&left_page).unwrap();
        inner.check_invariants().unwrap();
        assert_eq!(inner.child_for(&k.to_be_bytes()), 9_999);
    }

    #[test]
    fn sequential_split_keeps_the_keys_in_front_of_the_insert_on_the_left() {
        let mut page = [0u8; PAGE_SIZE];
        let node = init_leaf(&mut page, &[], &[]);
        // Keys 1000.. of the next range first, then a run 0, 1, 2, .. in front of them.
        for k in 1000u64..1004 {
            node.insert(&k.to_be_bytes(), &[9u8; 120]).unwrap();
        }
        let mut i = 0u64;
        while node.has_space_for(8, 120) {
            node.insert(&i.to_be_bytes(), &[7u8; 120]).unwrap();
            i += 1;
        }
        let count = node.count();
        let insert_slot = node.lower_bound(&i.to_be_bytes()).0;
        assert_eq!(insert_slot, count - 4);
        assert!(node.key_equals(insert_slot - 1, &(i - 1).to_be_bytes()));
        assert!(!node.key_equals(insert_slot - 1, &i.to_be_bytes()));
        let mut left_page = [0u8; PAGE_SIZE];
        let mut separator = Vec::new();
        let insert_key = i.to_be_bytes();
        assert!(node.split_for_sequential(
            insert_slot,
            &insert_key,
            &mut left_page,
            &mut separator
        ));
        let left = Node::from_page_mut(&mut left_page);
        assert_eq!(left.count(), count - 4, "the run stays on the left");
        assert_eq!(node.count(), 4, "the next range's keys stay here");
        // The separator: just below 1000, so that the run goes on into the
        // left page.
        assert_eq!(separator, 999u64.to_be_bytes().to_vec());
        assert!(left.upper_fence() == separator.as_slice());
        assert!(node.lower_fence() == separator.as_slice());
        check_invariants(left.as_page()).unwrap();
        node.check_invariants().unwrap();
        assert!(left.has_space_for(8, 120), "the insert fits on the left");
        assert_eq!(left.lower_bound(&insert_key), (count - 4, false));
        left.insert(&insert_key, &[7u8; 120]).unwrap();
        left.check_invariants().unwrap();
        // The first key that stays ends in a 0 byte: it is dropped.
        let mut again = [0u8; PAGE_SIZE];
        let node2 = init_leaf(&mut again, &[], &[]);
        for k in 1024u64..1028 {
            node2.insert(&k.to_be_bytes(), &[9u8; 120]).unwrap();
        }
        for k in 0u64..i {
            node2.insert(&k.to_be_bytes(), &[7u8; 120]).unwrap();
        }
        let slot = node2.lower_bound(&i.to_be_bytes()).0;
        assert!(node2.split_for_sequential(slot, &i.to_be_bytes(), &mut left_page, &mut separator));
        assert_eq!(
            separator,
            vec![0, 0, 0, 0, 0, 0, 4],
            "1024 = 0x0400 without its 0"
        );
        check_invariants(&left_page).unwrap();
        node2.check_invariants().unwrap();
        // A replace of the first right key itself: the usual separator.
        let mut third = [0u8; PAGE_SIZE];
        let node3 = init_leaf(&mut third, &[], &[]);
        for k in 1000u64..1004 {
            node3.insert(&k.to_be_bytes(), &[9u8; 120]).unwrap();
        }
        for k in 0u64..(i - 1) {
            node3.insert(&k.to_be_bytes(), &[7u8; 120]).unwrap();
        }
        let slot = node3.lower_bound(&1000u64.to_be_bytes()).0;
        assert!(node3.split_for_sequential(
            slot,
            &1000u64.to_be_bytes(),
            &mut left_page,
            &mut separator
        ));
        assert!(separator.as_slice() < &1000u64.to_be_bytes()[..]);
        assert!(separator.as_slice() >= &(i - 2).to_be_bytes()[..]);
        check_invariants(&left_page).unwrap();
        node3.check_invariants().unwrap();
        // Not applicable: the insert at either end, or most bytes staying here.
        let mut other = [0u8; PAGE_SIZE];
        let full = init_leaf(&mut other, &[], &[]);
        for k in 0u64..20 {
            full.insert(&k.to_be_bytes(), &[1u8; 120]).unwrap();
        }
        let before = other;
        let full = Node::from_page_mut(&mut other);
        assert!(!full.split_for_sequential(0, &[], &mut left_page, &mut separator));
        assert!(!full.split_for_sequential(20, &[], &mut left_page, &mut separator));
        assert!(!full.split_for_sequential(5, &[], &mut left_page, &mut separator));
        assert!(other == before, "a refused split changes nothing");
    }

    #[test]
    fn sequential_split_of_an_inner_node_keeps_the_children_before_the_frontier_left() {
        let mut page = [0u8; PAGE_SIZE];
        let node = init_inner(&mut page, &[], &[], 9_999);
        // Separators 1000.. of the next range first, then a run 0, 1, 2, ..
        // in front of them; the frontier child is the one after the run.
        for k in 1000u64..1004 {
            node.insert_separator(&k.to_be_bytes(), 5_000 + k).unwrap();
        }
        let mut i = 0u64;
        while node.has_space_for(8, CHILD_BYTES) {
            node.insert_separator(&i.to_be_bytes(), i).unwrap();
            i += 1;
        }
        let count = node.count();
        let frontier = node.child_index_for(&i.to_be_bytes());
        assert_eq!(frontier, count - 4);
        let frontier_child = node.child_at(frontier);
        let mut left_page = [0u8; PAGE_SIZE];
        let mut separator = Vec::new();
        assert!(node.split_for_sequential(
            frontier,
            &i.to_be_bytes(),
            &mut left_page,
            &mut separator
        ));
        let left = Node::from_page(&left_page);
        assert_eq!(
            left.count(),
            count - 5,
            "the run's children stay left, one moves up"
        );
        assert_eq!(
            left.upper_child(),
            i - 1,
            "the last child of the run is left's upper child"
        );
        assert_eq!(separator, (i - 1).to_be_bytes().to_vec());
        assert_eq!(node.count(), 4, "the next range's separators stay here");
        assert_eq!(node.child_for(&i.to_be_bytes()), frontier_child);
        check_invariants(&left_page).unwrap();
        node.check_invariants().unwrap();
        assert!(node.has_space_for(MAX_KEY_BYTES, CHILD_BYTES));
        // Not applicable: the frontier at slot 1 (the left would be empty).
        let mut other = [0u8; PAGE_SIZE];
        let small = init_inner(&mut other, &[], &[], 7);
        for k in 0u64..20 {
            small.insert_separator(&k.to_be_bytes(), k).unwrap();
        }
        let before = other;
        let small = Node::from_page_mut(&mut other);
        assert!(!small.split_for_sequential(1, &[], &mut left_page, &mut separator));
        assert!(other == before, "a refused split changes nothing");
    }
}
