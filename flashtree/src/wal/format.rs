//! Byte layouts of the write-ahead log and of the checkpoint slots (the one
//! owner of these formats; `docs/FORMAT.md` describes them for readers).
//!
//! # Log blocks
//! A log file is a ring of 4 KiB blocks. Block number `b` (counted from 0
//! in each log epoch) lives at file offset `(b % log_blocks) × 4096`, with
//! `log_blocks` from the checkpoint slot ([`Checkpoint::log_blocks`]).
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | CRC-32C of bytes 4..4096 |
//! | 4..8 | magic `FTLG` |
//! | 8..16 | log epoch (changes at every open: stale blocks never match) |
//! | 16..24 | block number |
//! | 24..32 | synced-through: every block below this number was durable when this one was written |
//! | 32..34 | payload bytes used (≤ 4056) |
//! | 34..36 | worker (the log's index) |
//! | 36..40 | reserved, 0 |
//! | 40..4096 | payload |
//!
//! The payloads of consecutive blocks form one byte stream of records; a
//! record may span blocks. A block is written once: a flush seals the last
//! block it writes, and later records start in the next block.
//!
//! # Records
//! `length u32 | crc32c u32 | body[length]`; the CRC covers the body. The
//! body of a *group* (the only record kind, 1) is:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind = 1 |
//! | 1..4 | reserved, 0 |
//! | 4..8 | page image count `n` |
//! | 8..16 | sequence number (dense over all logs of the store) |
//! | 16..20 | freed page count `f` |
//! | 20..24 | catalog entry length `c` (0: none) |
//! | 24.. | catalog entry (`root u64`, then the tree name, `c - 8` bytes) |
//! | then | `f` freed page ids, u64 each |
//! | then | `n` page changes |
//!
//! A page change is `page id u64 | form u16 | 0 u16 | payload bytes u32 |
//! payload`. Form 0 is the full 4096-byte image; form 1 a *delta*: runs of
//! `offset u16 | length u16 | bytes`, which set those bytes of the page as
//! the group left it. A delta is logged only when a full image of the page
//! lies after the start of every checkpoint recovery may begin from
//! (`WalShared::image_floor`), so recovery always finds its base in the
//! replayed log, and never reads the (possibly torn) disk copy.
//!
//! A group is atomic: recovery applies all of it or none of it.

use crate::buffer::page::crc32c;
use crate::buffer::PageId;
use crate::error::{Error, Result};
use crate::io::PAGE_SIZE;

/// Bytes of a log block.
pub const BLOCK_BYTES: usize = 4096;
/// Bytes of a log block header.
pub const BLOCK_HEADER_BYTES: usize = 40;
/// Payload bytes per log block.
pub const BLOCK_PAYLOAD_BYTES: usize = BLOCK_BYTES - BLOCK_HEADER_BYTES;
/// Magic of log blocks.
pub const BLOCK_MAGIC: &[u8; 4] = b"FTLG";
/// Bytes of a record header (length, a reserved word).
pub const RECORD_HEADER_BYTES: usize = 8;
/// Bytes of a group body before its variable parts.
pub const GROUP_FIXED_BYTES: usize = 24;
/// Record kind of a group.
pub const KIND_GROUP: u8 = 1;
/// Record kind of a group that also takes ranges of page ids into use
/// (a bulk load's commit): 8 more fixed bytes (range count u32, 0 u32)
/// and the ranges (first page u64, pages u64) after the freed ids.
pub const KIND_GROUP_ALLOCATING: u8 = 2;
/// Bytes a kind-2 group adds to the fixed part.
pub const GROUP_ALLOCATING_EXTRA_BYTES: usize = 8;
/// Bytes of a page change's header (page id, form, payload length).
pub const PAGE_CHANGE_HEADER_BYTES: usize = 16;
/// Most bytes one page change adds to a group (a full image).
pub const GROUP_PAGE_BYTES: usize = PAGE_CHANGE_HEADER_BYTES + PAGE_SIZE;
/// Page change form: the full image.
pub const FORM_FULL: u16 = 0;
/// Page change form: runs of changed bytes.
pub const FORM_DELTA: u16 = 1;
/// Page change form: delta runs applied to a page of zeros (a new image of
/// a page that is mostly empty, such as either half of a split).
pub const FORM_FRESH: u16 = 2;
/// Bytes of a delta run's header (offset, length).
pub const RUN_HEADER_BYTES: usize = 4;
/// Largest record body accepted when reading (a bound against garbage).
pub const MAX_RECORD_BYTES: usize = 64 << 20;

const _: () = assert!(BLOCK_BYTES == PAGE_SIZE);

/// The header of one log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHeader {
    /// The log epoch.
    pub epoch: u64,
    /// The block number.
    pub block_no: u64,
    /// Blocks below this were durable when this one was written.
    pub synced_through: u64,
    /// Payload bytes used.
    pub used: u16,
    /// The log's worker index.
    pub worker: u16,
}

/// Writes `header` into `block` and seals it with its checksum.
pub fn seal_block(block: &mut [u8], header: &BlockHeader) {
    debug_assert_eq!(block.len(), BLOCK_BYTES);
    debug_assert!(header.used as usize <= BLOCK_PAYLOAD_BYTES);
    block[4..8].copy_from_slice(BLOCK_MAGIC);
    block[8..16].copy_from_slice(&header.epoch.to_le_bytes());
    block[16..24].copy_from_slice(&header.block_no.to_le_bytes());
    block[24..32].copy_from_slice(&header.synced_through.to_le_bytes());
    block[32..34].copy_from_slice(&header.used.to_le_bytes());
    block[34..36].copy_from_slice(&header.worker.to_le_bytes());
    block[36..40].fill(0);
    let crc = crc32c(&block[4..]);
    block[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Parses a block's header if the block is intact (checksum and magic).
pub fn open_block(block: &[u8]) -> Option<BlockHeader> {
    debug_assert_eq!(block.len(), BLOCK_BYTES);
    let stored = u32::from_le_bytes(block[0..4].try_into().ok()?);
    if &block[4..8] != BLOCK_MAGIC || stored != crc32c(&block[4..]) {
        return None;
    }
    let header = BlockHeader {
        epoch: u64_at(block, 8),
        block_no: u64_at(block, 16),
        synced_through: u64_at(block, 24),
        used: u16::from_le_bytes([block[32], block[33]]),
        worker: u16::from_le_bytes([block[34], block[35]]),
    };
    (header.used as usize <= BLOCK_PAYLOAD_BYTES).then_some(header)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// What a group changes, to be encoded into a record.
pub struct GroupParts<'a> {
    /// The group's sequence number.
    pub seq: u64,
    /// A new named tree: (root page, name).
    pub catalog: Option<(PageId, &'a str)>,
    /// Pages freed by the group.
    pub freed: &'a [PageId],
    /// Ranges of page ids (first, count) the group takes into use whose
    /// pages are already durable on the device and not in the group (a
    /// bulk load's new tree): recovery takes them off the free list.
    /// Empty for every group but a bulk load's commit (kind 1 then).
    pub allocated: &'a [(PageId, u64)],
    /// Pages after the group, by page id.
    pub pages: &'a [(PageId, PageChange<'a>)],
}

/// How a group records one page.
#[derive(Clone, Copy, Debug)]
pub enum PageChange<'a> {
    /// The full image.
    Full(&'a [u8; PAGE_SIZE]),
    /// The byte ranges `runs` (offset, length) of `page` changed.
    Delta {
        /// The page as the group left it.
        page: &'a [u8; PAGE_SIZE],
        /// Changed ranges, ascending and disjoint.
        runs: &'a [(u16, u16)],
    },
    /// A new image of the page: its bytes outside `runs` are zero. Like a
    /// full image, recovery needs no earlier version of the page.
    Fresh {
        /// The page as the group left it.
        page: &'a [u8; PAGE_SIZE],
        /// Its nonzero ranges (at least), ascending and disjoint.
        runs: &'a [(u16, u16)],
    },
}

impl PageChange<'_> {
    /// Bytes of the change's payload.
    pub fn payload_bytes(&self) -> usize {
        match self {
            PageChange::Full(_) => PAGE_SIZE,
            PageChange::Delta { runs, .. } | PageChange::Fresh { runs, .. } => runs
                .iter()
                .map(|&(_, len)| RUN_HEADER_BYTES + len as usize)
                .sum(),
        }
    }
}

/// How a step logs one page it changed: the change's runs, owned, chosen
/// by [`PageRuns::plan`]; [`PageRuns::change`] borrows them for a group.
#[derive(Debug)]
pub enum PageRuns {
    /// The ranges that differ from the page's previous version.
    Delta(RunList),
    /// The page's nonzero ranges: a new image.
    Fresh(RunList),
    /// The full image.
    Full,
}

/// Most payload bytes of a fresh image; a page with more nonzero bytes is
/// logged in full (as cheap to log, cheaper to apply).
pub const FRESH_MOST_BYTES: usize = PAGE_SIZE * 3 / 4;

/// A page of zeros, the base of fresh images.
static ZERO_PAGE: [u8; PAGE_SIZE] = [0; PAGE_SIZE];

impl PageRuns {
    /// A delta from `before` when there is a previous version that
    /// recovery will have (`before`) and the delta is under half a page;
    /// otherwise a new image: fresh when the page is mostly zeros (a
    /// half-full node after a split), else full.
    pub fn plan(before: Option<&[u8; PAGE_SIZE]>, page: &[u8; PAGE_SIZE]) -> PageRuns {
        if let Some(runs) = before.and_then(|before| runs_within(before, page, PAGE_SIZE / 2)) {
            return PageRuns::Delta(runs);
        }
        match runs_within(&ZERO_PAGE, page, FRESH_MOST_BYTES) {
            Some(runs) => PageRuns::Fresh(runs),
            None => PageRuns::Full,
        }
    }

    /// True for a new image (fresh or full), which repairs a torn page by
    /// itself.
    pub fn is_image(&self) -> bool {
        !matches!(self, PageRuns::Delta(_))
    }

    /// The change to log, for `page` as the step left it.
    pub fn change<'a>(&'a self, page: &'a [u8; PAGE_SIZE]) -> PageChange<'a> {
        match self {
            PageRuns::Delta(runs) => PageChange::Delta { page, runs },
            PageRuns::Fresh(runs) => PageChange::Fresh { page, runs },
            PageRuns::Full => PageChange::Full(page),
        }
    }
}

/// [`runs_within`] half a page, as a vector (the tests' view of a delta).
#[cfg(test)]
fn delta_runs(before: &[u8; PAGE_SIZE], after: &[u8; PAGE_SIZE]) -> Option<Vec<(u16, u16)>> {
    runs_within(before, after, PAGE_SIZE / 2).map(|runs| runs.to_vec())
}

/// Runs of a page change, held inline up to [`RunList::INLINE`] (a
/// typical delta has two to four: the header, a shifted slot array, a
/// record), else in a vector: no allocation per logged page.
#[derive(Clone, Debug)]
pub enum RunList {
    /// The first `len` of `runs`.
    Inline {
        /// Runs in use.
        len: u8,
        /// The runs.
        runs: [(u16, u16); RunList::INLINE],
    },
    /// More than [`RunList::INLINE`] runs.
    Heap(Vec<(u16, u16)>),
}

impl RunList {
    /// Runs held without an allocation.
    pub const INLINE: usize = 8;

    /// No runs.
    pub fn new() -> RunList {
        RunList::Inline {
            len: 0,
            runs: [(0, 0); RunList::INLINE],
        }
    }

    /// Appends a run.
    #[inline]
    pub fn push(&mut self, run: (u16, u16)) {
        match self {
            RunList::Inline { len, runs } if (*len as usize) < RunList::INLINE => {
                runs[*len as usize] = run;
                *len += 1;
            }
            RunList::Inline { runs, .. } => {
                let mut all = Vec::with_capacity(2 * RunList::INLINE);
                all.extend_from_slice(&runs[..]);
                all.push(run);
                *self = RunList::Heap(all);
            }
            RunList::Heap(all) => all.push(run),
        }
    }
}

impl Default for RunList {
    fn default() -> RunList {
        RunList::new()
    }
}

impl std::ops::Deref for RunList {
    type Target = [(u16, u16)];

    fn deref(&self) -> &[(u16, u16)] {
        match self {
            RunList::Inline { len, runs } => &runs[..*len as usize],
            RunList::Heap(all) => all,
        }
    }
}

/// The ranges where `before` and `after` differ, compared 8 bytes at a
/// time; ranges closer than 16 bytes are joined (a run header costs 4).
/// None when the runs reach `most_bytes` of payload (a delta of half a
/// page or more is logged as the full image instead).
///
/// The pages are compared in groups of 256 bytes: a mask of the group's
/// differing words comes from eight 32-byte compares with AVX2 where the
/// CPU has it (a group that is equal, the common case of a small change,
/// costs one branch), else from word compares. A group's differing words
/// are then taken a stretch of consecutive words at a time, which gives the
/// same runs and the same give-up point as going word by word (the payload
/// count only grows, so checking it after a stretch instead of after each
/// word cannot change the outcome).
fn runs_within(
    before: &[u8; PAGE_SIZE],
    after: &[u8; PAGE_SIZE],
    most_bytes: usize,
) -> Option<RunList> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above), the one condition
        // of calling a function compiled with `target_feature(enable = "avx2")`.
        return unsafe { runs_within_avx2(before, after, most_bytes) };
    }
    runs_within_by(before, after, most_bytes, differing_words_portable)
}

/// Bytes of a word, the unit of delta runs.
const WORD: usize = 8;
/// Bytes compared at once: 32 words, one bit each in a `u32` mask.
const COMPARE_GROUP: usize = 256;
const _: () = assert!(COMPARE_GROUP / WORD == 32 && PAGE_SIZE.is_multiple_of(COMPARE_GROUP));

/// [`runs_within`] with `differing_words(before, after)`: bit `w` set when
/// word `w` of the two groups differs.
#[inline(always)]
fn runs_within_by(
    before: &[u8; PAGE_SIZE],
    after: &[u8; PAGE_SIZE],
    most_bytes: usize,
    differing_words: impl Fn(&[u8; COMPARE_GROUP], &[u8; COMPARE_GROUP]) -> u32,
) -> Option<RunList> {
    const JOIN_GAP_BYTES: usize = 16;
    let (before_groups, _) = before.as_chunks::<COMPARE_GROUP>();
    let (after_groups, _) = after.as_chunks::<COMPARE_GROUP>();
    let mut runs = RunList::new();
    let mut bytes = 0usize;
    // The open run is [start, end); end == 0: none yet.
    let mut start = 0usize;
    let mut end = 0usize;
    for (i, (b, a)) in before_groups.iter().zip(after_groups).enumerate() {
        let mut mask = differing_words(b, a);
        if mask == 0 {
            continue;
        }
        let group = i * COMPARE_GROUP;
        if mask == u32::MAX && end == group && end != 0 {
            // Differs throughout and continues the open run (the dense
            // payload of a fresh image).
            end += COMPARE_GROUP;
            bytes += COMPARE_GROUP;
            if bytes >= most_bytes {
                return None;
            }
            continue;
        }
        while mask != 0 {
            let first = mask.trailing_zeros();
            let words = (mask >> first).trailing_ones();
            // Clear the stretch (and the zeros below it): bits from
            // first + words up stay (none when that is 32).
            mask &= (u64::MAX << (first + words)) as u32;
            let at = group + first as usize * WORD;
            let to = at + words as usize * WORD;
            if end != 0 && at - end < JOIN_GAP_BYTES {
                bytes += to - end;
            } else {
                if end != 0 {
                    runs.push((start as u16, (end - start) as u16));
                }
                start = at;
                bytes += RUN_HEADER_BYTES + (to - at);
            }
            end = to;
            if bytes >= most_bytes {
                return None;
            }
        }
    }
    if end != 0 {
        runs.push((start as u16, (end - start) as u16));
    }
    Some(runs)
}

/// The differing words of two groups, compared a word at a time.
#[inline(always)]
fn differing_words_portable(b: &[u8; COMPARE_GROUP], a: &[u8; COMPARE_GROUP]) -> u32 {
    let (b_words, _) = b.as_chunks::<WORD>();
    let (a_words, _) = a.as_chunks::<WORD>();
    let mut mask = 0u32;
    for (w, (x, y)) in b_words.iter().zip(a_words).enumerate() {
        mask |= u32::from(u64::from_ne_bytes(*x) != u64::from_ne_bytes(*y)) << w;
    }
    mask
}

/// [`runs_within`] with AVX2 compares (8 × 32 bytes per group).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn runs_within_avx2(
    before: &[u8; PAGE_SIZE],
    after: &[u8; PAGE_SIZE],
    most_bytes: usize,
) -> Option<RunList> {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_castsi256_pd, _mm256_cmpeq_epi64, _mm256_loadu_si256,
        _mm256_movemask_epi8, _mm256_movemask_pd,
    };
    runs_within_by(before, after, most_bytes, |b, a| {
        let (p, q) = (b.as_ptr() as *const __m256i, a.as_ptr() as *const __m256i);
        // SAFETY: unaligned loads of 32 bytes at offsets 0, 32, .., 224 of
        // two 256-byte arrays that the references keep alive: in bounds.
        let load =
            |i: usize| unsafe { (_mm256_loadu_si256(p.add(i)), _mm256_loadu_si256(q.add(i))) };
        let mut equal = [_mm256_cmpeq_epi64(load(0).0, load(0).1); COMPARE_GROUP / 32];
        for (i, e) in equal.iter_mut().enumerate().skip(1) {
            let (x, y) = load(i);
            *e = _mm256_cmpeq_epi64(x, y);
        }
        let all = _mm256_and_si256(
            _mm256_and_si256(
                _mm256_and_si256(equal[0], equal[1]),
                _mm256_and_si256(equal[2], equal[3]),
            ),
            _mm256_and_si256(
                _mm256_and_si256(equal[4], equal[5]),
                _mm256_and_si256(equal[6], equal[7]),
            ),
        );
        if _mm256_movemask_epi8(all) == -1 {
            return 0;
        }
        let mut equal_words = 0u32;
        for (i, e) in equal.iter().enumerate() {
            equal_words |= (_mm256_movemask_pd(_mm256_castsi256_pd(*e)) as u32) << (4 * i);
        }
        !equal_words
    })
}

/// Applies the delta payload `runs` (validated by [`decode_group`])
/// to `page`.
pub fn apply_delta(page: &mut [u8; PAGE_SIZE], runs: &[u8]) {
    for run in delta_runs_of(runs) {
        let (offset, bytes) = run.expect("delta runs validated when decoded");
        page[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

/// The runs of a delta payload as (offset in the page, bytes); `None` for
/// a run that overruns the payload or the page (the iteration ends there).
fn delta_runs_of(payload: &[u8]) -> impl Iterator<Item = Option<(usize, &[u8])>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= payload.len() {
            return None;
        }
        let run = payload.get(at..at + RUN_HEADER_BYTES).and_then(|header| {
            let offset = u16::from_le_bytes([header[0], header[1]]) as usize;
            let len = u16::from_le_bytes([header[2], header[3]]) as usize;
            let bytes = payload.get(at + RUN_HEADER_BYTES..at + RUN_HEADER_BYTES + len)?;
            (offset + len <= PAGE_SIZE).then_some((offset, bytes))
        });
        at = match run {
            Some((_, bytes)) => at + RUN_HEADER_BYTES + bytes.len(),
            None => payload.len(),
        };
        Some(run)
    })
}

impl GroupParts<'_> {
    /// Bytes of the record (header included).
    pub fn record_bytes(&self) -> usize {
        RECORD_HEADER_BYTES + self.body_bytes()
    }

    /// Bytes of the record's body (the record less its header).
    pub fn body_bytes(&self) -> usize {
        GROUP_FIXED_BYTES
            + self.catalog.map_or(0, |(_, name)| 8 + name.len())
            + 8 * self.freed.len()
            + if self.allocated.is_empty() {
                0
            } else {
                GROUP_ALLOCATING_EXTRA_BYTES + 16 * self.allocated.len()
            }
            + self
                .pages
                .iter()
                .map(|(_, c)| PAGE_CHANGE_HEADER_BYTES + c.payload_bytes())
                .sum::<usize>()
    }

    /// Payload bytes of the group's page images (full or fresh forms).
    pub fn image_bytes(&self) -> usize {
        self.pages
            .iter()
            .filter(|(_, c)| !matches!(c, PageChange::Delta { .. }))
            .map(|(_, c)| c.payload_bytes())
            .sum()
    }

    /// Encodes the record's body, [`GroupParts::body_bytes`] bytes; `put`
    /// receives them in order, in pieces, straight from the page images
    /// (no copy is made). The record is [`record_header`] of the body, then
    /// the body.
    #[inline]
    pub fn encode_body(&self, mut put: impl FnMut(&[u8])) {
        let mut fixed = [0u8; GROUP_FIXED_BYTES + GROUP_ALLOCATING_EXTRA_BYTES];
        let fixed_bytes = if self.allocated.is_empty() {
            fixed[0] = KIND_GROUP;
            GROUP_FIXED_BYTES
        } else {
            fixed[0] = KIND_GROUP_ALLOCATING;
            fixed[24..28].copy_from_slice(&(self.allocated.len() as u32).to_le_bytes());
            GROUP_FIXED_BYTES + GROUP_ALLOCATING_EXTRA_BYTES
        };
        fixed[4..8].copy_from_slice(&(self.pages.len() as u32).to_le_bytes());
        fixed[8..16].copy_from_slice(&self.seq.to_le_bytes());
        fixed[16..20].copy_from_slice(&(self.freed.len() as u32).to_le_bytes());
        let catalog_bytes = self.catalog.map_or(0, |(_, name)| 8 + name.len());
        fixed[20..24].copy_from_slice(&(catalog_bytes as u32).to_le_bytes());
        put(&fixed[..fixed_bytes]);
        if let Some((root, name)) = self.catalog {
            put(&root.to_le_bytes());
            put(name.as_bytes());
        }
        for pid in self.freed {
            put(&pid.to_le_bytes());
        }
        for &(first, count) in self.allocated {
            put(&first.to_le_bytes());
            put(&count.to_le_bytes());
        }
        for (pid, change) in self.pages {
            let mut h = [0u8; PAGE_CHANGE_HEADER_BYTES];
            h[0..8].copy_from_slice(&pid.to_le_bytes());
            let form = match change {
                PageChange::Full(_) => FORM_FULL,
                PageChange::Delta { .. } => FORM_DELTA,
                PageChange::Fresh { .. } => FORM_FRESH,
            };
            h[8..10].copy_from_slice(&form.to_le_bytes());
            h[12..16].copy_from_slice(&(change.payload_bytes() as u32).to_le_bytes());
            put(&h);
            match change {
                PageChange::Full(image) => put(&image[..]),
                PageChange::Delta { page, runs } | PageChange::Fresh { page, runs } => {
                    for &(offset, len) in runs.iter() {
                        let mut run = [0u8; RUN_HEADER_BYTES];
                        run[0..2].copy_from_slice(&offset.to_le_bytes());
                        run[2..4].copy_from_slice(&len.to_le_bytes());
                        put(&run);
                        put(&page[offset as usize..offset as usize + len as usize]);
                    }
                }
            }
        }
    }

    /// Encodes the whole record (header and body) into `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
        self.encode_body(|piece| out.extend_from_slice(piece));
        let body_bytes = out.len() - at - RECORD_HEADER_BYTES;
        out[at..at + RECORD_HEADER_BYTES].copy_from_slice(&record_header(body_bytes));
    }
}

/// The header of a record whose body has `body_bytes` bytes (the second
/// word is reserved, 0).
pub fn record_header(body_bytes: usize) -> [u8; RECORD_HEADER_BYTES] {
    let mut header = [0u8; RECORD_HEADER_BYTES];
    header[0..4].copy_from_slice(&(body_bytes as u32).to_le_bytes());
    header
}

/// A decoded group, borrowing its body.
#[derive(Debug)]
pub struct Group<'a> {
    /// Sequence number.
    pub seq: u64,
    /// New named tree, if any.
    pub catalog: Option<(PageId, String)>,
    /// Freed page ids.
    pub freed: Vec<PageId>,
    /// Ranges of page ids (first, count) taken into use without images.
    pub allocated: Vec<(PageId, u64)>,
    /// Page ids and where their changes lie in the body.
    pub pages: Vec<(PageId, PageForm)>,
    /// The body.
    pub body: &'a [u8],
}

/// Where a decoded page change lies in its group's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageForm {
    /// The full image at this offset.
    Full(usize),
    /// Delta runs at (offset, bytes).
    Delta(usize, usize),
    /// Runs at (offset, bytes) to apply to a page of zeros.
    Fresh(usize, usize),
}

impl PageForm {
    /// Offset of the payload in the body.
    pub fn offset(&self) -> usize {
        match *self {
            PageForm::Full(at) | PageForm::Delta(at, _) | PageForm::Fresh(at, _) => at,
        }
    }
}

/// Decodes a record body read from intact log blocks (their CRCs cover
/// it). Every length and count is checked against the body, so an error
/// means the bytes are not a record flashtree wrote; it never panics.
pub fn decode_group(body: &[u8]) -> Result<Group<'_>> {
    let bad = |what: &str| Error::Corrupt(format!("log record: {what}"));
    let (fixed_bytes, range_count) = match body.first() {
        Some(&KIND_GROUP) if body.len() >= GROUP_FIXED_BYTES => (GROUP_FIXED_BYTES, 0),
        Some(&KIND_GROUP_ALLOCATING)
            if body.len() >= GROUP_FIXED_BYTES + GROUP_ALLOCATING_EXTRA_BYTES =>
        {
            let n = u32_at(body, 24) as usize;
            if n == 0 {
                return Err(bad("an allocating group without ranges"));
            }
            (GROUP_FIXED_BYTES + GROUP_ALLOCATING_EXTRA_BYTES, n)
        }
        _ => return Err(bad("unknown kind")),
    };
    let page_count = u32_at(body, 4) as usize;
    let seq = u64_at(body, 8);
    let freed_count = u32_at(body, 16) as usize;
    let catalog_bytes = u32_at(body, 20) as usize;
    let fixed_end = fixed_bytes
        .checked_add(catalog_bytes)
        .and_then(|n| n.checked_add(freed_count.checked_mul(8)?))
        .and_then(|n| n.checked_add(range_count.checked_mul(16)?));
    if fixed_end.is_none_or(|n| n > body.len()) || (catalog_bytes != 0 && catalog_bytes < 9) {
        return Err(bad("lengths disagree"));
    }
    let mut at = fixed_bytes;
    let catalog = if catalog_bytes > 0 {
        let root = u64_at(body, at);
        let name = std::str::from_utf8(&body[at + 8..at + catalog_bytes])
            .map_err(|_| bad("tree name is not UTF-8"))?
            .to_string();
        at += catalog_bytes;
        Some((root, name))
    } else {
        None
    };
    let freed = (0..freed_count).map(|i| u64_at(body, at + 8 * i)).collect();
    at += 8 * freed_count;
    let allocated: Vec<(PageId, u64)> = (0..range_count)
        .map(|i| (u64_at(body, at + 16 * i), u64_at(body, at + 16 * i + 8)))
        .collect();
    if allocated
        .iter()
        .any(|&(first, count)| count == 0 || first.checked_add(count).is_none())
    {
        return Err(bad("bad allocated range"));
    }
    at += 16 * range_count;
    if page_count > (body.len() - at) / PAGE_CHANGE_HEADER_BYTES {
        return Err(bad("lengths disagree"));
    }
    let mut pages = Vec::with_capacity(page_count);
    for _ in 0..page_count {
        if body.len() - at < PAGE_CHANGE_HEADER_BYTES {
            return Err(bad("lengths disagree"));
        }
        let pid = u64_at(body, at);
        let form = u16::from_le_bytes([body[at + 8], body[at + 9]]);
        let payload = u32_at(body, at + 12) as usize;
        at += PAGE_CHANGE_HEADER_BYTES;
        if body.len() - at < payload {
            return Err(bad("lengths disagree"));
        }
        match form {
            FORM_FULL if payload == PAGE_SIZE => pages.push((pid, PageForm::Full(at))),
            FORM_DELTA | FORM_FRESH => {
                if !delta_runs_of(&body[at..at + payload]).all(|run| run.is_some()) {
                    return Err(bad("bad delta runs"));
                }
                pages.push((
                    pid,
                    if form == FORM_DELTA {
                        PageForm::Delta(at, payload)
                    } else {
                        PageForm::Fresh(at, payload)
                    },
                ));
            }
            _ => return Err(bad("unknown page change")),
        }
        at += payload;
    }
    if at != body.len() {
        return Err(bad("lengths disagree"));
    }
    Ok(Group {
        seq,
        catalog,
        freed,
        allocated,
        pages,
        body,
    })
}

/// Magic of checkpoint slots.
pub const CHECKPOINT_MAGIC: &[u8; 4] = b"FTCK";
/// Format version of checkpoint slots.
pub const CHECKPOINT_VERSION: u32 = 3;
/// Oldest slot version this build reads: version 2 differs only in that
/// its log records kept a CRC of their own, which the reader ignores.
pub const CHECKPOINT_VERSION_OLDEST_READ: u32 = 2;

/// True for a slot version this build reads.
pub fn checkpoint_version_is_read(version: u32) -> bool {
    (CHECKPOINT_VERSION_OLDEST_READ..=CHECKPOINT_VERSION).contains(&version)
}
/// Flag: a session without a log (`Durability::None`) had the store open.
pub const FLAG_UNLOGGED_OPEN: u32 = 1;

/// What a checkpoint records: where recovery starts and the allocation
/// state and catalog as of then.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Increases by one per checkpoint; slot `number % 2` holds it.
    pub number: u64,
    /// The store's id (from the metadata page).
    pub store_id: u64,
    /// The log epoch that the start blocks refer to.
    pub log_epoch: u64,
    /// Groups with this sequence number and above must be dense in the
    /// replayed logs (a missing one ends the replay).
    pub seq_start: u64,
    /// Page ids below this have been allocated.
    pub next_pid: PageId,
    /// Per log: the block recovery starts reading at.
    pub log_starts: Vec<u64>,
    /// Blocks in each log's ring in this epoch (block `b` lives at
    /// `(b % log_blocks) × 4096`): recovery must not take it from the
    /// file's length, which the options or damage may have changed.
    pub log_blocks: u64,
    /// Named trees.
    pub trees: Vec<(String, PageId)>,
    /// Free page ids.
    pub free: Vec<PageId>,
    /// [`FLAG_UNLOGGED_OPEN`].
    pub flags: u32,
}

const CHECKPOINT_FIXED_BYTES: usize = 80;

impl Checkpoint {
    /// Encodes the slot, padded to a multiple of 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; CHECKPOINT_FIXED_BYTES];
        out[4..8].copy_from_slice(CHECKPOINT_MAGIC);
        out[8..12].copy_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.number.to_le_bytes());
        out[24..32].copy_from_slice(&self.store_id.to_le_bytes());
        out[32..40].copy_from_slice(&self.log_epoch.to_le_bytes());
        out[40..48].copy_from_slice(&self.seq_start.to_le_bytes());
        out[48..56].copy_from_slice(&self.next_pid.to_le_bytes());
        out[56..60].copy_from_slice(&(self.log_starts.len() as u32).to_le_bytes());
        out[60..64].copy_from_slice(&(self.trees.len() as u32).to_le_bytes());
        out[64..68].copy_from_slice(&(self.free.len() as u32).to_le_bytes());
        out[68..72].copy_from_slice(&self.flags.to_le_bytes());
        out[72..80].copy_from_slice(&self.log_blocks.to_le_bytes());
        for start in &self.log_starts {
            out.extend_from_slice(&start.to_le_bytes());
        }
        for (name, root) in &self.trees {
            assert!(name.len() <= u8::MAX as usize);
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&root.to_le_bytes());
        }
        for pid in &self.free {
            out.extend_from_slice(&pid.to_le_bytes());
        }
        let len = out.len() as u32;
        out[12..16].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c(&out[4..]);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
        out.resize(out.len().div_ceil(PAGE_SIZE) * PAGE_SIZE, 0);
        out
    }

    /// The format version of an intact slot of any version (magic and
    /// checksum hold): tells a slot of another version from damage.
    pub fn checked_version(bytes: &[u8]) -> Option<u32> {
        if bytes.len() < 16 || &bytes[4..8] != CHECKPOINT_MAGIC {
            return None;
        }
        let len = u32_at(bytes, 12) as usize;
        (len >= 16 && len <= bytes.len() && u32_at(bytes, 0) == crc32c(&bytes[4..len]))
            .then(|| u32_at(bytes, 8))
    }

    /// Decodes a slot; None when it is empty, torn or not a slot.
    pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
        if bytes.len() < CHECKPOINT_FIXED_BYTES || &bytes[4..8] != CHECKPOINT_MAGIC {
            return None;
        }
        let len = u32_at(bytes, 12) as usize;
        if len < CHECKPOINT_FIXED_BYTES || len > bytes.len() {
            return None;
        }
        if u32_at(bytes, 0) != crc32c(&bytes[4..len])
            || !checkpoint_version_is_read(u32_at(bytes, 8))
        {
            return None;
        }
        let mut checkpoint = Checkpoint {
            number: u64_at(bytes, 16),
            store_id: u64_at(bytes, 24),
            log_epoch: u64_at(bytes, 32),
            seq_start: u64_at(bytes, 40),
            next_pid: u64_at(bytes, 48),
            flags: u32_at(bytes, 68),
            log_blocks: u64_at(bytes, 72),
            ..Checkpoint::default()
        };
        let (logs, trees, free) = (
            u32_at(bytes, 56) as usize,
            u32_at(bytes, 60) as usize,
            u32_at(bytes, 64) as usize,
        );
        let mut at = CHECKPOINT_FIXED_BYTES;
        let take = |at: &mut usize, n: usize| -> Option<std::ops::Range<usize>> {
            let end = at.checked_add(n).filter(|&end| end <= len)?;
            let range = *at..end;
            *at = end;
            Some(range)
        };
        for _ in 0..logs {
            let r = take(&mut at, 8)?;
            checkpoint.log_starts.push(u64_at(bytes, r.start));
        }
        for _ in 0..trees {
            let name_len = bytes[take(&mut at, 1)?.start] as usize;
            let name = std::str::from_utf8(&bytes[take(&mut at, name_len)?]).ok()?;
            let r = take(&mut at, 8)?;
            checkpoint
                .trees
                .push((name.to_string(), u64_at(bytes, r.start)));
        }
        for _ in 0..free {
            let r = take(&mut at, 8)?;
            checkpoint.free.push(u64_at(bytes, r.start));
        }
        (at == len).then_some(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The plain word-by-word comparison `delta_runs` must agree with.
    fn delta_runs_reference(
        before: &[u8; PAGE_SIZE],
        after: &[u8; PAGE_SIZE],
    ) -> Option<Vec<(u16, u16)>> {
        runs_within_reference(before, after, PAGE_SIZE / 2)
    }

    /// The plain word-by-word comparison `runs_within` must agree with.
    fn runs_within_reference(
        before: &[u8; PAGE_SIZE],
        after: &[u8; PAGE_SIZE],
        most_bytes: usize,
    ) -> Option<Vec<(u16, u16)>> {
        let mut runs: Vec<(u16, u16)> = Vec::new();
        let mut bytes = 0usize;
        for at in (0..PAGE_SIZE).step_by(8) {
            if before[at..at + 8] == after[at..at + 8] {
                continue;
            }
            match runs.last_mut() {
                Some((start, len)) if at - (*start as usize + *len as usize) < 16 => {
                    bytes += at + 8 - (*start as usize + *len as usize);
                    *len = (at + 8 - *start as usize) as u16;
                }
                _ => {
                    runs.push((at as u16, 8));
                    bytes += RUN_HEADER_BYTES + 8;
                }
            }
            if bytes >= most_bytes {
                return None;
            }
        }
        Some(runs)
    }

    proptest! {
        #[test]
        fn delta_runs_match_the_reference_and_rebuild_the_page(
            seed in any::<u8>(),
            edits in proptest::collection::vec((0usize..PAGE_SIZE, 1usize..300, any::<u8>()), 0..40),
        ) {
            let before = Box::new([seed; PAGE_SIZE]);
            let mut after = before.clone();
            for (at, len, byte) in edits {
                let end = (at + len).min(PAGE_SIZE);
                after[at..end].fill(byte);
            }
            let runs = delta_runs(&before, &after);
            prop_assert_eq!(&runs, &delta_runs_reference(&before, &after));
            if let Some(runs) = runs {
                let mut rebuilt = before.clone();
                for (offset, len) in runs {
                    let range = offset as usize..offset as usize + len as usize;
                    rebuilt[range.clone()].copy_from_slice(&after[range]);
                }
                prop_assert_eq!(&rebuilt[..], &after[..]);
            }
        }
    }

    proptest! {
        #[test]
        fn runs_within_matches_the_reference_on_any_pages(
            base in proptest::collection::vec(any::<u8>(), PAGE_SIZE),
            zeros in any::<bool>(),
            edits in proptest::collection::vec((0usize..PAGE_SIZE, 1usize..600, any::<u8>()), 0..40),
            most_bytes in prop_oneof![Just(PAGE_SIZE / 2), Just(FRESH_MOST_BYTES), 1usize..PAGE_SIZE * 2],
        ) {
            let mut before = Box::new([0u8; PAGE_SIZE]);
            if !zeros {
                before.copy_from_slice(&base);
            }
            let mut after = before.clone();
            for (at, len, byte) in edits {
                let end = (at + len).min(PAGE_SIZE);
                after[at..end].fill(byte);
            }
            let expected = runs_within_reference(&before, &after, most_bytes);
            let to_vec = |runs: Option<RunList>| runs.map(|r| r.to_vec());
            prop_assert_eq!(&to_vec(runs_within(&before, &after, most_bytes)), &expected);
            prop_assert_eq!(
                &to_vec(runs_within_by(&before, &after, most_bytes, differing_words_portable)),
                &expected
            );
        }
    }

    #[test]
    fn run_lists_spill_to_the_heap_in_order() {
        let mut list = RunList::new();
        for i in 0..3 * RunList::INLINE as u16 {
            list.push((i * 16, 8));
            assert_eq!(list.len(), i as usize + 1);
            assert!(list
                .iter()
                .enumerate()
                .all(|(j, &r)| r == (j as u16 * 16, 8)));
        }
        assert!(matches!(list, RunList::Heap(_)));
    }

    #[test]
    fn runs_within_finds_every_single_byte_change() {
        let before = Box::new([0x33u8; PAGE_SIZE]);
        for at in 0..PAGE_SIZE {
            let mut after = before.clone();
            after[at] ^= 0x80;
            let word = at / 8 * 8;
            assert_eq!(
                runs_within(&before, &after, PAGE_SIZE).as_deref(),
                Some(&[(word as u16, 8)][..]),
                "byte {at}"
            );
            assert_eq!(
                runs_within_by(&before, &after, PAGE_SIZE, differing_words_portable).as_deref(),
                Some(&[(word as u16, 8)][..]),
                "byte {at}"
            );
        }
        assert_eq!(
            runs_within(&before, &before.clone(), 1).as_deref(),
            Some(&[][..])
        );
    }

    #[test]
    fn blocks_round_trip_and_reject_damage() {
        let mut block = vec![7u8; BLOCK_BYTES];
        let header = BlockHeader {
            epoch: 9,
            block_no: 12,
            synced_through: 10,
            used: 100,
            worker: 1,
        };
        seal_block(&mut block, &header);
        assert_eq!(open_block(&block), Some(header));
        for at in [0, 5, 20, 2000, 4095] {
            let mut damaged = block.clone();
            damaged[at] ^= 0x10;
            assert_eq!(open_block(&damaged), None, "flip at {at}");
        }
    }

    #[test]
    fn groups_round_trip_and_reject_damage() {
        let image = Box::new([3u8; PAGE_SIZE]);
        let mut after = image.clone();
        after[100..103].copy_from_slice(&[7, 8, 9]);
        after[4000] = 1;
        let runs = delta_runs(&image, &after).unwrap();
        assert_eq!(runs, vec![(96, 8), (4000, 8)]);
        let pages = [
            (5u64, PageChange::Full(&image)),
            (
                9u64,
                PageChange::Delta {
                    page: &after,
                    runs: &runs,
                },
            ),
        ];
        let parts = GroupParts {
            seq: 77,
            catalog: Some((5, "users")),
            freed: &[11, 12],
            allocated: &[],
            pages: &pages,
        };
        let mut bytes = Vec::new();
        parts.encode_into(&mut bytes);
        assert_eq!(bytes.len(), parts.record_bytes());
        let len = u32_at(&bytes, 0) as usize;
        assert_eq!(u32_at(&bytes, 4), 0, "the reserved word");
        let group = decode_group(&bytes[8..8 + len]).unwrap();
        assert_eq!(group.seq, 77);
        assert_eq!(group.catalog, Some((5, "users".to_string())));
        assert_eq!(group.freed, vec![11, 12]);
        assert_eq!(group.pages.len(), 2);
        assert_eq!(
            group.pages[0],
            (5, PageForm::Full(group.pages[0].1.offset()))
        );
        let PageForm::Delta(at, delta_bytes) = group.pages[1].1 else {
            panic!("a delta")
        };
        assert_eq!(delta_bytes, 2 * (RUN_HEADER_BYTES + 8));
        let mut replayed = image.clone();
        apply_delta(&mut replayed, &group.body[at..at + delta_bytes]);
        assert_eq!(replayed, after);
        assert!(delta_runs(&image, &Box::new([4u8; PAGE_SIZE])).is_none());
        // Runs past the page or the payload are refused.
        let past_page = [0xFC, 0x0F, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        assert!(delta_runs_of(&past_page).any(|run| run.is_none()));
        let past_payload = [0, 0, 8, 0, 1, 2];
        assert!(delta_runs_of(&past_payload).any(|run| run.is_none()));
        let short_header = [0, 0, 1];
        assert!(delta_runs_of(&short_header).any(|run| run.is_none()));
        let fine = [0, 0, 2, 0, 9, 9, 16, 0, 1, 0, 7];
        let runs: Vec<_> = delta_runs_of(&fine).collect();
        assert_eq!(runs, vec![Some((0, &[9u8, 9][..])), Some((16, &[7u8][..]))]);
        // A body whose counts or forms do not fit it is refused (bytes
        // damaged on disk are caught by the blocks' CRCs before this).
        let body = &bytes[8..8 + len];
        let mut many_pages = body.to_vec();
        many_pages[4] = 0xFF;
        assert!(decode_group(&many_pages).is_err());
        assert!(decode_group(&body[..len - 1]).is_err());
        let mut bad_form = body.to_vec();
        let first_change = GROUP_FIXED_BYTES + 8 + "users".len() + 16;
        bad_form[first_change + 8] = 9;
        assert!(decode_group(&bad_form).is_err());
    }

    #[test]
    fn an_allocating_group_round_trips_its_ranges() {
        let image = Box::new([3u8; PAGE_SIZE]);
        let pages = [(7u64, PageChange::Full(&image))];
        let parts = GroupParts {
            seq: 12,
            catalog: None,
            freed: &[4],
            allocated: &[(100, 50), (300, 2)],
            pages: &pages,
        };
        let mut bytes = Vec::new();
        parts.encode_into(&mut bytes);
        assert_eq!(bytes.len(), parts.record_bytes());
        let len = u32_at(&bytes, 0) as usize;
        let body = &bytes[8..8 + len];
        assert_eq!(body[0], KIND_GROUP_ALLOCATING);
        let group = decode_group(body).unwrap();
        assert_eq!(group.seq, 12);
        assert_eq!(group.freed, vec![4]);
        assert_eq!(group.allocated, vec![(100, 50), (300, 2)]);
        assert_eq!(
            group.pages,
            vec![(7, PageForm::Full(group.pages[0].1.offset()))]
        );
        // A range count that runs past the body, or an empty range, is refused.
        let mut bad = body.to_vec();
        bad[24] = 200;
        assert!(decode_group(&bad).is_err());
        let mut empty = body.to_vec();
        let ranges_at = GROUP_FIXED_BYTES + GROUP_ALLOCATING_EXTRA_BYTES + 8;
        empty[ranges_at + 8..ranges_at + 16].fill(0);
        assert!(decode_group(&empty).is_err());
    }

    #[test]
    fn fresh_images_rebuild_half_empty_pages_from_zeros() {
        // A node after a split: header and slots at the front, records at
        // the back, zeros between.
        let mut page = Box::new([0u8; PAGE_SIZE]);
        page[..700].fill(0x5A);
        page[700] = 0; // a zero inside a run stays covered
        page[2900..].fill(0xA5);
        let runs = PageRuns::plan(None, &page);
        let PageRuns::Fresh(ref fresh) = runs else {
            panic!("a mostly empty page is logged fresh: {runs:?}")
        };
        assert!(runs.is_image());
        let pages = [(8u64, runs.change(&page))];
        let parts = GroupParts {
            seq: 3,
            catalog: None,
            freed: &[],
            allocated: &[],
            pages: &pages,
        };
        let mut bytes = Vec::new();
        parts.encode_into(&mut bytes);
        assert!(bytes.len() < PAGE_SIZE, "{} bytes", bytes.len());
        let len = u32_at(&bytes, 0) as usize;
        let group = decode_group(&bytes[8..8 + len]).unwrap();
        let PageForm::Fresh(at, payload) = group.pages[0].1 else {
            panic!("fresh form decoded as {:?}", group.pages[0].1)
        };
        assert_eq!(payload, pages[0].1.payload_bytes());
        assert_eq!(fresh.len(), 2);
        let mut rebuilt = Box::new([0xEEu8; PAGE_SIZE]);
        rebuilt.fill(0);
        apply_delta(&mut rebuilt, &group.body[at..at + payload]);
        assert_eq!(rebuilt, page);
        // A full page is logged whole; a small change as a delta.
        let full = Box::new([1u8; PAGE_SIZE]);
        assert!(matches!(PageRuns::plan(None, &full), PageRuns::Full));
        let mut changed = page.clone();
        changed[1000] = 9;
        let delta = PageRuns::plan(Some(&page), &changed);
        assert!(matches!(delta, PageRuns::Delta(ref r) if r.len() == 1));
        assert!(!delta.is_image());
    }

    #[test]
    fn checkpoints_round_trip_and_reject_damage() {
        let checkpoint = Checkpoint {
            number: 3,
            store_id: 42,
            log_epoch: 8,
            seq_start: 1000,
            next_pid: 77,
            log_starts: vec![4, 9],
            log_blocks: 256,
            trees: vec![("a".into(), 1), ("orders".into(), 30)],
            free: (40..60).collect(),
            flags: 0,
        };
        let bytes = checkpoint.encode();
        assert_eq!(bytes.len() % PAGE_SIZE, 0);
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint.clone()));
        let mut damaged = bytes.clone();
        damaged[70] ^= 1;
        assert_eq!(Checkpoint::decode(&damaged), None);
        assert_eq!(Checkpoint::decode(&vec![0u8; PAGE_SIZE]), None);
        // Version 2 (records with a CRC of their own, otherwise the same)
        // is read; versions 1 and 4 are not, though intact.
        let as_version = |version: u32| {
            let mut other = bytes.clone();
            other[8..12].copy_from_slice(&version.to_le_bytes());
            let len = u32_at(&other, 12) as usize;
            let crc = crc32c(&other[4..len]);
            other[0..4].copy_from_slice(&crc.to_le_bytes());
            other
        };
        assert_eq!(Checkpoint::decode(&as_version(2)), Some(checkpoint));
        for version in [1, 4] {
            assert_eq!(Checkpoint::decode(&as_version(version)), None);
            assert_eq!(
                Checkpoint::checked_version(&as_version(version)),
                Some(version)
            );
        }
    }
}
