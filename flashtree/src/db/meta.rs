//! The metadata page (page 0) and the free-page list.
//!
//! Metadata page, little-endian, after the 24-byte common page header
//! (checksum, kind = 3, page id 0):
//!
//! | bytes | field |
//! |---|---|
//! | 24..32 | magic `FLASHTRE` |
//! | 32..36 | format version (1) |
//! | 36..40 | page size (4096) |
//! | 40..48 | next page id never allocated |
//! | 48..56 | first free-list page (u64::MAX: none) |
//! | 56..60 | number of named trees |
//! | 60..64 | 1 while a process has the store open, 0 once it closed cleanly |
//! | 64.. | per tree: name length (u8), name, root page id (u64) |
//!
//! Free-list pages (kind = 4): 24..32 next free-list page, 32..36 count,
//! 40.. page ids (u64 each). The free-list pages are themselves free pages,
//! so reading the list back frees them again.

use crate::buffer::{seal_page, verify_page, PageId};
use crate::error::{Error, Result};
use crate::io::PAGE_SIZE;

const MAGIC: &[u8; 8] = b"FLASHTRE";
const FORMAT_VERSION: u32 = 1;
const KIND_META: u16 = 3;
const KIND_FREE_LIST: u16 = 4;
const NONE: u64 = u64::MAX;
const IN_USE_OFFSET: usize = 60;
const TREES_OFFSET: usize = 64;
const FREE_IDS_OFFSET: usize = 40;
/// Page ids one free-list page holds.
const FREE_IDS_PER_PAGE: usize = (PAGE_SIZE - FREE_IDS_OFFSET) / 8;

/// Longest tree name, in bytes.
pub const MAX_TREE_NAME_BYTES: usize = 64;
/// Most named trees in one store (they must fit in the metadata page).
pub const MAX_TREES: usize = (PAGE_SIZE - TREES_OFFSET) / (1 + MAX_TREE_NAME_BYTES + 8);

/// What the metadata page records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Page ids below this have been allocated.
    pub next_pid: PageId,
    /// First free-list page, if any.
    pub free_list_head: Option<PageId>,
    /// (name, root page id) of each named tree.
    pub trees: Vec<(String, PageId)>,
    /// Written as true when a process opens the store and as false when it
    /// closes it. Found true at open, it means the last process to open the
    /// store crashed or was killed before closing it.
    pub in_use: bool,
}

fn put_u16(page: &mut [u8], at: usize, v: u16) {
    page[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(page: &mut [u8], at: usize, v: u32) {
    page[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(page: &mut [u8], at: usize, v: u64) {
    page[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(page: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(page: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"))
}

/// Serializes `meta` into a sealed page 0.
pub fn encode_meta(meta: &Meta, page: &mut [u8; PAGE_SIZE]) {
    assert!(meta.trees.len() <= MAX_TREES);
    page.fill(0);
    put_u16(page, 4, KIND_META);
    page[24..32].copy_from_slice(MAGIC);
    put_u32(page, 32, FORMAT_VERSION);
    put_u32(page, 36, PAGE_SIZE as u32);
    put_u64(page, 40, meta.next_pid);
    put_u64(page, 48, meta.free_list_head.unwrap_or(NONE));
    put_u32(page, 56, meta.trees.len() as u32);
    put_u32(page, IN_USE_OFFSET, u32::from(meta.in_use));
    let mut at = TREES_OFFSET;
    for (name, root) in &meta.trees {
        assert!(name.len() <= MAX_TREE_NAME_BYTES);
        page[at] = name.len() as u8;
        page[at + 1..at + 1 + name.len()].copy_from_slice(name.as_bytes());
        at += 1 + name.len();
        put_u64(page, at, *root);
        at += 8;
    }
    seal_page(page, 0);
}

/// Parses page 0, with errors that say what is wrong with the store.
pub fn decode_meta(page: &[u8; PAGE_SIZE]) -> Result<Meta> {
    if &page[24..32] != MAGIC {
        return Err(Error::Corrupt(
            "not a flashtree store (no FLASHTRE magic in the metadata page)".into(),
        ));
    }
    verify_page(page, 0).map_err(|e| Error::Corrupt(format!("metadata page: {e}")))?;
    let page_size = get_u32(page, 36);
    if page_size != PAGE_SIZE as u32 {
        return Err(Error::Unsupported(format!(
            "the store uses {page_size}-byte pages; this build uses {PAGE_SIZE}"
        )));
    }
    let version = get_u32(page, 32);
    if version != FORMAT_VERSION {
        return Err(Error::Unsupported(format!(
            "store format version {version}; this build reads version {FORMAT_VERSION}"
        )));
    }
    let tree_count = get_u32(page, 56) as usize;
    if tree_count > MAX_TREES {
        return Err(Error::Corrupt(format!(
            "metadata page lists {tree_count} trees"
        )));
    }
    let mut trees = Vec::with_capacity(tree_count);
    let mut at = TREES_OFFSET;
    for _ in 0..tree_count {
        let len = page[at] as usize;
        if len > MAX_TREE_NAME_BYTES || at + 1 + len + 8 > PAGE_SIZE {
            return Err(Error::Corrupt("metadata page: bad tree entry".into()));
        }
        let name = std::str::from_utf8(&page[at + 1..at + 1 + len])
            .map_err(|_| Error::Corrupt("metadata page: tree name is not UTF-8".into()))?;
        at += 1 + len;
        trees.push((name.to_string(), get_u64(page, at)));
        at += 8;
    }
    let in_use = match get_u32(page, IN_USE_OFFSET) {
        0 => false,
        1 => true,
        other => {
            return Err(Error::Corrupt(format!(
                "metadata page: in-use flag is {other}"
            )))
        }
    };
    let head = get_u64(page, 48);
    Ok(Meta {
        next_pid: get_u64(page, 40),
        free_list_head: (head != NONE).then_some(head),
        trees,
        in_use,
    })
}

/// A free-list page to write: its page id and contents.
pub type FreeListPage = (PageId, Box<[u8; PAGE_SIZE]>);

/// Lays out `free` page ids into free-list pages taken from `free` itself.
/// Returns (head, pages to write as (pid, contents)).
pub fn encode_free_list(free: &[PageId]) -> (Option<PageId>, Vec<FreeListPage>) {
    let mut remaining: Vec<PageId> = free.to_vec();
    let mut pages: Vec<FreeListPage> = Vec::new();
    // Each list page stores up to FREE_IDS_PER_PAGE ids and is one of them.
    while let Some(list_pid) = remaining.pop() {
        let take = remaining.len().min(FREE_IDS_PER_PAGE);
        let ids: Vec<PageId> = remaining.split_off(remaining.len() - take);
        let mut page = Box::new([0u8; PAGE_SIZE]);
        put_u16(&mut page[..], 4, KIND_FREE_LIST);
        put_u64(
            &mut page[..],
            24,
            pages.last().map_or(NONE, |(pid, _)| *pid),
        );
        put_u32(&mut page[..], 32, ids.len() as u32);
        for (i, id) in ids.iter().enumerate() {
            put_u64(&mut page[..], FREE_IDS_OFFSET + 8 * i, *id);
        }
        seal_page(&mut page, list_pid);
        pages.push((list_pid, page));
    }
    (pages.last().map(|(pid, _)| *pid), pages)
}

/// Parses one free-list page: (next page, ids it lists).
pub fn decode_free_list_page(
    page: &[u8; PAGE_SIZE],
    pid: PageId,
) -> Result<(Option<PageId>, Vec<PageId>)> {
    verify_page(page, pid).map_err(|e| Error::Corrupt(format!("free-list page: {e}")))?;
    let count = get_u32(page, 32) as usize;
    if count > FREE_IDS_PER_PAGE {
        return Err(Error::Corrupt(format!(
            "free-list page {pid} claims {count} entries"
        )));
    }
    let ids = (0..count)
        .map(|i| get_u64(page, FREE_IDS_OFFSET + 8 * i))
        .collect();
    let next = get_u64(page, 24);
    Ok(((next != NONE).then_some(next), ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_damage() {
        let meta = Meta {
            next_pid: 1234,
            free_list_head: Some(77),
            trees: vec![("a".into(), 1), ("orders".into(), 900)],
            in_use: true,
        };
        let mut page = [0u8; PAGE_SIZE];
        encode_meta(&meta, &mut page);
        assert_eq!(decode_meta(&page).unwrap(), meta);
        let mut flipped = page;
        flipped[41] ^= 1;
        assert!(decode_meta(&flipped)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let mut other_size = page;
        put_u32(&mut other_size, 36, 8192);
        seal_page(&mut other_size, 0);
        assert!(decode_meta(&other_size)
            .unwrap_err()
            .to_string()
            .contains("8192-byte pages"));
        let closed = Meta {
            in_use: false,
            ..meta.clone()
        };
        encode_meta(&closed, &mut page);
        assert_eq!(decode_meta(&page).unwrap(), closed);
        let mut bad_flag = page;
        put_u32(&mut bad_flag, IN_USE_OFFSET, 7);
        seal_page(&mut bad_flag, 0);
        assert!(decode_meta(&bad_flag)
            .unwrap_err()
            .to_string()
            .contains("in-use flag is 7"));
        assert!(decode_meta(&[0u8; PAGE_SIZE])
            .unwrap_err()
            .to_string()
            .contains("not a flashtree store"));
    }

    #[test]
    fn free_list_round_trips() {
        let free: Vec<PageId> = (10..2000).collect();
        let (head, pages) = encode_free_list(&free);
        let mut seen: Vec<PageId> = pages.iter().map(|(pid, _)| *pid).collect();
        let mut next = head;
        while let Some(pid) = next {
            let (_, page) = pages.iter().find(|(p, _)| *p == pid).unwrap();
            let (n, ids) = decode_free_list_page(page, pid).unwrap();
            seen.extend(ids);
            next = n;
        }
        seen.sort_unstable();
        assert_eq!(seen, free);
        assert_eq!(encode_free_list(&[]).0, None);
    }
}
