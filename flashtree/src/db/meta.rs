//! The metadata page (page 0): what makes a file a flashtree store.
//!
//! Little-endian, after the 16-byte common page header (kind 3; its
//! checksum is seeded with page id 0) and 8 zero bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 24..32 | magic `FLASHTRE` |
//! | 32..36 | format version (5) |
//! | 36..40 | page size (4096) |
//! | 40..48 | store id (random; the checkpoint slots and logs carry it) |
//!
//! It is written once, when the store is created. Everything that changes
//! (the catalog of named trees, the allocation state) lives in the
//! checkpoint slots and the log (`wal::format`).

use crate::buffer::page::PAGE_KIND_META;
use crate::buffer::{seal_page, verify_page};
use crate::error::{Error, Result};
use crate::io::PAGE_SIZE;

pub(crate) const MAGIC: &[u8; 8] = b"FLASHTRE";
const FORMAT_VERSION: u32 = 5;

/// Why a store of an older format version cannot be opened.
fn old_version_reason(version: u32) -> Option<&'static str> {
    match version {
        1 => Some("version 1 has no log"),
        2 => Some("version 2 stores the page id in every page header and 10-byte slots in nodes"),
        3 => {
            Some("version 3 takes the key heads of nodes from the first bytes of the key suffixes")
        }
        4 => {
            Some("version 4 has no superblock: its pages start at the first byte of the data files")
        }
        _ => None,
    }
}

/// Longest tree name, in bytes.
pub const MAX_TREE_NAME_BYTES: usize = 64;
/// Most named trees in one store.
pub const MAX_TREES: usize = 1024;

/// Serializes page 0 of a store with id `store_id`.
pub fn encode_meta(store_id: u64, page: &mut [u8; PAGE_SIZE]) {
    page.fill(0);
    page[4..6].copy_from_slice(&PAGE_KIND_META.to_le_bytes());
    page[24..32].copy_from_slice(MAGIC);
    page[32..36].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    page[36..40].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
    page[40..48].copy_from_slice(&store_id.to_le_bytes());
    seal_page(page, 0);
}

/// Parses page 0 and returns the store id, with errors that say what is
/// wrong with the store.
pub fn decode_meta(page: &[u8; PAGE_SIZE]) -> Result<u64> {
    if &page[24..32] != MAGIC {
        return Err(Error::Corrupt(
            "not a flashtree store (no FLASHTRE magic in the metadata page)".into(),
        ));
    }
    let version = u32::from_le_bytes(page[32..36].try_into().expect("4 bytes"));
    if let Some(reason) = old_version_reason(version) {
        // Checked before the checksum, which older versions computed
        // differently.
        return Err(Error::Unsupported(format!(
            "store format version {version}; this build reads version {FORMAT_VERSION} ({reason}): recreate the store, e.g. `flashtree dump` with the build that wrote it, then `flashtree load`"
        )));
    }
    verify_page(page, 0).map_err(|e| Error::Corrupt(format!("metadata page: {e}")))?;
    let page_size = u32::from_le_bytes(page[36..40].try_into().expect("4 bytes"));
    if page_size != PAGE_SIZE as u32 {
        return Err(Error::Unsupported(format!(
            "the store uses {page_size}-byte pages; this build uses {PAGE_SIZE}"
        )));
    }
    if version != FORMAT_VERSION {
        return Err(Error::Unsupported(format!(
            "store format version {version}; this build reads version {FORMAT_VERSION}"
        )));
    }
    Ok(u64::from_le_bytes(
        page[40..48].try_into().expect("8 bytes"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_damage() {
        let mut page = [0u8; PAGE_SIZE];
        encode_meta(0xABCD, &mut page);
        assert_eq!(decode_meta(&page).unwrap(), 0xABCD);
        let mut flipped = page;
        flipped[41] ^= 1;
        assert!(decode_meta(&flipped)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        let mut other_size = page;
        other_size[36..40].copy_from_slice(&8192u32.to_le_bytes());
        seal_page(&mut other_size, 0);
        assert!(decode_meta(&other_size)
            .unwrap_err()
            .to_string()
            .contains("8192-byte pages"));
        let mut old = page;
        old[32..36].copy_from_slice(&1u32.to_le_bytes());
        seal_page(&mut old, 0);
        assert!(decode_meta(&old)
            .unwrap_err()
            .to_string()
            .contains("version 1"));
        // A version 2 page, whose checksum did not cover the page id: the
        // version is named, not a checksum.
        let mut v2 = page;
        v2[32..36].copy_from_slice(&2u32.to_le_bytes());
        let err = decode_meta(&v2).unwrap_err().to_string();
        assert!(
            err.contains("version 2") && err.contains("recreate"),
            "{err}"
        );
        assert!(decode_meta(&[0u8; PAGE_SIZE])
            .unwrap_err()
            .to_string()
            .contains("not a flashtree store"));
    }
}
