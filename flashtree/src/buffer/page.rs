//! The common page header: the one owner of its layout (see
//! `docs/FORMAT.md`, "Pages").
//!
//! Every 4 KiB page of the data file starts with these 16 bytes,
//! little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | CRC-32C (Castagnoli) of the page id (8 bytes, little-endian) followed by bytes 4..4096 |
//! | 4..6 | page kind (1 leaf, 2 inner node, 3 metadata) |
//! | 6..8 | reserved, 0 |
//! | 8..16 | LSN: the log sequence number of the last logged change |
//!
//! The page id is not stored: it seeds the checksum, so a page written at
//! the wrong place (or read from one) fails its checksum like a damaged
//! one, and the 8 bytes it took go to the node's rows (format version 3;
//! version 2 stored it at 8..16).
//!
//! # Contract
//! * [`seal_page`] stamps the checksum (over the page id and the page) just
//!   before a page is written; [`verify_page`] checks it after every read (a
//!   pair assertion on the two paths). The LSN is set by the log under the
//!   page's exclusive latch when a change is logged ([`set_page_lsn`]), and
//!   read under the same latch before a write-back (the write-ahead rule).
//! * The node layout of `btree::node` begins at [`PAGE_HEADER_BYTES`]; a
//!   const assertion there ties it to this header.

use super::PageId;
use crate::error::{Error, Result};
use crate::io::PAGE_SIZE;

/// Bytes of the common page header.
pub const PAGE_HEADER_BYTES: usize = 16;
/// Offset of the page kind (u16).
pub const PAGE_KIND_OFFSET: usize = 4;
/// Offset of the LSN (u64).
pub const PAGE_LSN_OFFSET: usize = 8;

/// Page kind of B+-tree leaves.
pub const PAGE_KIND_LEAF: u16 = 1;
/// Page kind of B+-tree inner nodes; eviction spares them while it can.
pub const PAGE_KIND_INNER: u16 = 2;
/// Page kind of the metadata page (page 0).
pub const PAGE_KIND_META: u16 = 3;
/// Page kind of hash directory pages (`btree::hash`); eviction spares them
/// as it spares inner nodes.
pub const PAGE_KIND_HASH_DIR: u16 = 4;

const _: () = assert!(PAGE_LSN_OFFSET + 8 == PAGE_HEADER_BYTES);

/// CRC-32C (Castagnoli) of page `pid`: of its id (8 bytes, little-endian)
/// followed by everything after the checksum field. `crc-fast` folds with
/// carry-less multiplies: 0.12 µs per lookup in the profiled lookup
/// comparison, against 0.40 µs for the `crc32c` crate's crc32-instruction
/// loop (`docs/results/lookup/report-profiled.md`).
#[inline]
pub fn page_checksum(page: &[u8; PAGE_SIZE], pid: PageId) -> u32 {
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    digest.update(&pid.to_le_bytes());
    digest.update(&page[4..]);
    digest.finalize() as u32
}

/// CRC-32C of `bytes` (the checksum of pages, log blocks, log records and
/// checkpoint slots).
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// Stamps the checksum of page `pid` into the common header.
pub fn seal_page(page: &mut [u8; PAGE_SIZE], pid: PageId) {
    let crc = page_checksum(page, pid);
    page[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the checksum of page `pid` read from disk: it fails for a damaged
/// or torn page and for another page's contents alike.
pub fn verify_page(page: &[u8; PAGE_SIZE], pid: PageId) -> Result<()> {
    let stored = u32::from_le_bytes(page[0..4].try_into().expect("4 bytes"));
    let computed = page_checksum(page, pid);
    if stored != computed {
        return Err(Error::Corrupt(format!(
            "page {pid}: checksum {stored:#010x} does not match contents ({computed:#010x}): damaged, torn, or written to the wrong place"
        )));
    }
    Ok(())
}

/// The page's LSN (0: never changed under the log).
pub fn page_lsn(page: &[u8; PAGE_SIZE]) -> u64 {
    u64::from_le_bytes(
        page[PAGE_LSN_OFFSET..PAGE_LSN_OFFSET + 8]
            .try_into()
            .expect("8 bytes"),
    )
}

/// Sets the page's LSN.
pub fn set_page_lsn(page: &mut [u8; PAGE_SIZE], lsn: u64) {
    page[PAGE_LSN_OFFSET..PAGE_LSN_OFFSET + 8].copy_from_slice(&lsn.to_le_bytes());
}

/// The page kind.
pub fn page_kind_of(page: &[u8; PAGE_SIZE]) -> u16 {
    u16::from_le_bytes([page[PAGE_KIND_OFFSET], page[PAGE_KIND_OFFSET + 1]])
}
