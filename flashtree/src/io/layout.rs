//! The layout of a store on its devices: a superblock at the head of every
//! data device (file or block device), in two copies, with the table of the
//! device's regions.
//!
//! * **Block devices** hold everything: the checkpoint slots (a region of
//!   device 0), the logs (log `w` in the log region of device `w mod N`),
//!   temporary space, and the data pages (striped over the data regions).
//! * **Files** hold the superblock and the data pages; the checkpoint
//!   slots and the logs are files beside the first data file (`d0.ckpt0`,
//!   `d0.wal0`, …), which the file system allocates and which may change
//!   size from one open to the next.
//!
//! A copy of the superblock is valid when its checksum and magic hold; of
//! two valid copies the one with the higher generation wins (LMDB keeps
//! two meta pages the same way), so a torn rewrite of one copy loses
//! nothing. Both copies carry the store id, the device count and the
//! device's index, so devices given in another order, or taken from another
//! store, are refused before anything is read from them.
//!
//! `docs/FORMAT.md` describes the bytes.

use super::{AlignedBuf, Storage, PAGE_SIZE};
use crate::error::{Error, Result};
use std::path::PathBuf;

/// Bytes of one superblock copy.
pub const SUPERBLOCK_BYTES: usize = 4096;
/// Device offsets of the two copies.
pub const SUPERBLOCK_OFFSETS: [u64; 2] = [0, SUPERBLOCK_BYTES as u64];
/// Bytes at the head of a device that the superblock copies take.
pub const HEAD_BYTES: u64 = 2 * SUPERBLOCK_BYTES as u64;
/// Magic of a superblock (bytes 4..12).
pub const SUPERBLOCK_MAGIC: &[u8; 8] = b"FTSUPERB";
/// Version of the superblock layout this build reads and writes.
pub const LAYOUT_VERSION: u32 = 1;
/// Flag: the checkpoint, log and temp regions are on the devices (a store
/// on block devices); clear, they are files beside the first data file.
pub const FLAG_REGIONS_ON_DEVICES: u32 = 1;
/// Bytes read from the head of a device to look for signatures: up to and
/// including btrfs's superblock magic at 64 KiB + 64.
pub const PROBE_BYTES: usize = 17 * PAGE_SIZE;

/// A byte range of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// Device offset of the first byte.
    pub start: u64,
    /// Length in bytes (for the data region of a file: 0, meaning to the
    /// end of the file, which grows).
    pub bytes: u64,
}

impl Region {
    /// The first byte after the region.
    pub fn end(&self) -> u64 {
        self.start + self.bytes
    }
}

/// The regions of one device, in the order they lie on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regions {
    /// The two checkpoint slots (device 0 of a store on block devices).
    pub checkpoint: Region,
    /// The logs this device holds, `log_bytes` each.
    pub log: Region,
    /// Temporary space.
    pub temp: Region,
    /// The data pages.
    pub data: Region,
}

/// One copy of a device's superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Regions on the devices (`FLAG_REGIONS_ON_DEVICES`) or files beside.
    pub flags: u32,
    /// The store's id (as in its metadata page and checkpoints).
    pub store_id: u64,
    /// The copy with the higher generation wins.
    pub generation: u64,
    /// Data devices of the store.
    pub device_count: u32,
    /// This device's place among them (0-based).
    pub device_index: u32,
    /// Stripe unit of the data pages.
    pub chunk_bytes: u64,
    /// The device's length when the store was created (0 for a file).
    pub device_bytes: u64,
    /// Bytes of each log's ring (regions on devices; 0 for files).
    pub log_bytes: u64,
    /// Logs of the store (regions on devices; 0 for files).
    pub log_count: u32,
    /// Bytes of each checkpoint slot (regions on devices; 0 for files).
    pub checkpoint_slot_bytes: u64,
    /// This device's regions.
    pub regions: Regions,
}

/// Why a head of a device holds no valid superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A valid superblock.
    Valid(Superblock),
    /// Neither copy is valid (reason of the first copy).
    Invalid(String),
}

impl Superblock {
    /// Whether the checkpoint, log and temp regions are on the devices.
    pub fn regions_on_devices(&self) -> bool {
        self.flags & FLAG_REGIONS_ON_DEVICES != 0
    }

    /// The 4096 bytes of one copy.
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        b[4..12].copy_from_slice(SUPERBLOCK_MAGIC);
        b[12..16].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        b[16..20].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..32].copy_from_slice(&self.store_id.to_le_bytes());
        b[32..40].copy_from_slice(&self.generation.to_le_bytes());
        b[40..44].copy_from_slice(&self.device_count.to_le_bytes());
        b[44..48].copy_from_slice(&self.device_index.to_le_bytes());
        b[48..56].copy_from_slice(&self.chunk_bytes.to_le_bytes());
        b[56..64].copy_from_slice(&self.device_bytes.to_le_bytes());
        b[64..72].copy_from_slice(&self.log_bytes.to_le_bytes());
        b[72..76].copy_from_slice(&self.log_count.to_le_bytes());
        b[80..88].copy_from_slice(&self.checkpoint_slot_bytes.to_le_bytes());
        let r = &self.regions;
        for (i, region) in [r.checkpoint, r.log, r.temp, r.data].iter().enumerate() {
            let at = 96 + 16 * i;
            b[at..at + 8].copy_from_slice(&region.start.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&region.bytes.to_le_bytes());
        }
        let crc = crc32c(&b[4..]);
        b[0..4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes one copy; Err says why it is not a valid superblock.
    pub fn decode(b: &[u8]) -> std::result::Result<Superblock, String> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(format!("{} bytes, shorter than a superblock", b.len()));
        }
        let b = &b[..SUPERBLOCK_BYTES];
        if &b[4..12] != SUPERBLOCK_MAGIC {
            return Err("no superblock magic".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if u32_at(0) != crc32c(&b[4..]) {
            return Err("checksum mismatch".into());
        }
        if u32_at(12) != LAYOUT_VERSION {
            return Err(format!(
                "superblock layout version {}; this build reads version {LAYOUT_VERSION}",
                u32_at(12)
            ));
        }
        if u32_at(16) != PAGE_SIZE as u32 {
            return Err(format!(
                "page size {}; this build uses {PAGE_SIZE}",
                u32_at(16)
            ));
        }
        let region = |i: usize| Region {
            start: u64_at(96 + 16 * i),
            bytes: u64_at(96 + 16 * i + 8),
        };
        let sb = Superblock {
            flags: u32_at(20),
            store_id: u64_at(24),
            generation: u64_at(32),
            device_count: u32_at(40),
            device_index: u32_at(44),
            chunk_bytes: u64_at(48),
            device_bytes: u64_at(56),
            log_bytes: u64_at(64),
            log_count: u32_at(72),
            checkpoint_slot_bytes: u64_at(80),
            regions: Regions {
                checkpoint: region(0),
                log: region(1),
                temp: region(2),
                data: region(3),
            },
        };
        sb.check()?;
        Ok(sb)
    }

    /// The invariants a decoded superblock must hold (its checksum is
    /// valid, but it may have been written by a broken build).
    fn check(&self) -> std::result::Result<(), String> {
        let page = PAGE_SIZE as u64;
        if self.device_count == 0 || self.device_index >= self.device_count {
            return Err(format!(
                "device {} of {}",
                self.device_index, self.device_count
            ));
        }
        if self.chunk_bytes == 0 || !self.chunk_bytes.is_multiple_of(page) {
            return Err(format!("chunk size {}", self.chunk_bytes));
        }
        let r = &self.regions;
        let ordered = [r.checkpoint, r.log, r.temp, r.data];
        let mut at = HEAD_BYTES;
        for region in ordered {
            if !region.start.is_multiple_of(page)
                || !region.bytes.is_multiple_of(page)
                || region.start < at
            {
                return Err(format!("region table out of order or misaligned: {r:?}"));
            }
            at = region.end();
        }
        if self.regions_on_devices() {
            if self.device_bytes < r.data.end() || r.data.bytes == 0 {
                return Err(format!(
                    "regions end at {} past the device's {} bytes",
                    r.data.end(),
                    self.device_bytes
                ));
            }
            let logs_here = logs_on_device(self.log_count, self.device_count, self.device_index);
            if self.log_bytes < 16 * page || r.log.bytes != u64::from(logs_here) * self.log_bytes {
                return Err(format!(
                    "log region of {} bytes for {logs_here} logs of {}",
                    r.log.bytes, self.log_bytes
                ));
            }
            let slots = if self.device_index == 0 { 2 } else { 0 };
            if r.checkpoint.bytes != slots * self.checkpoint_slot_bytes
                || (slots > 0 && self.checkpoint_slot_bytes < page)
            {
                return Err(format!(
                    "checkpoint region of {} bytes for slots of {}",
                    r.checkpoint.bytes, self.checkpoint_slot_bytes
                ));
            }
        } else if r.data.bytes != 0 {
            return Err("a file's data region has a fixed length".into());
        }
        Ok(())
    }
}

/// Where a store's two checkpoint slots are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotPlace {
    /// Two files beside the first data file (a store on files).
    Files([PathBuf; 2]),
    /// A region of data device 0: slot `k` at `start + k × bytes`.
    Region {
        /// Device offset of slot 0.
        start: u64,
        /// Bytes of each slot.
        bytes: u64,
    },
}

impl SlotPlace {
    /// A name of slot `k`, for messages.
    pub fn name(&self, storage: &Storage, k: usize) -> String {
        match self {
            SlotPlace::Files(paths) => paths[k].display().to_string(),
            SlotPlace::Region { .. } => {
                format!("{} (checkpoint slot {k})", storage.device_path(0).display())
            }
        }
    }

    /// The bytes of slot `k`: for a file, all of it (None when missing);
    /// for a region, as many as the length field of a checkpoint at its
    /// start says (the first 4096 bytes when that field is out of range,
    /// which no valid checkpoint has).
    pub fn read(&self, storage: &Storage, k: usize) -> Result<Option<Vec<u8>>> {
        let length_field = |head: &[u8]| -> u64 {
            head.get(12..16).map_or(0, |b| {
                u64::from(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            })
        };
        match self {
            // A slot file is reserved beyond its checkpoint (`reserve`):
            // only the checkpoint's own bytes are read.
            SlotPlace::Files(paths) => {
                let vfs = storage.vfs();
                let Some(head) = vfs.read_at(&paths[k], 0, PAGE_SIZE)? else {
                    return Ok(None);
                };
                let len = length_field(&head);
                // A length past the file's end is damage that decoding the
                // head reports.
                if len <= PAGE_SIZE as u64 || len > vfs.len(&paths[k])?.unwrap_or(0) {
                    return Ok(Some(head));
                }
                vfs.read_at(&paths[k], 0, len as usize)
            }
            SlotPlace::Region { start, bytes } => {
                let at = start + k as u64 * bytes;
                let mut buf = AlignedBuf::new(PAGE_SIZE);
                storage.read_at(0, at, &mut buf)?;
                let len = length_field(&buf);
                if len <= PAGE_SIZE as u64 || len > *bytes {
                    return Ok(Some(buf.to_vec()));
                }
                let mut all = AlignedBuf::new(round_up(len, PAGE_SIZE as u64) as usize);
                storage.read_at(0, at, &mut all)?;
                Ok(Some(all[..len as usize].to_vec()))
            }
        }
    }

    /// Makes both slots hold checkpoints of up to `bytes` bytes without
    /// asking the file system for space: slot files get their blocks
    /// allocated now (`Error::Full` when there is no room); regions were
    /// sized for the whole device when the store was created.
    pub fn reserve(&self, storage: &Storage, bytes: u64) -> Result<()> {
        match self {
            SlotPlace::Files(paths) => {
                for path in paths {
                    storage.vfs().allocate(path, bytes)?;
                }
                Ok(())
            }
            SlotPlace::Region { .. } => Ok(()),
        }
    }

    /// Writes `checkpoint` (encoded) into slot `k` and makes it durable.
    /// An error is final: what the slot holds afterwards is unknown.
    pub fn write(&self, storage: &Storage, k: usize, checkpoint: &[u8]) -> Result<()> {
        match self {
            SlotPlace::Files(paths) => storage.vfs().write_synced(&paths[k], checkpoint),
            SlotPlace::Region { start, bytes } => {
                let padded = round_up(checkpoint.len() as u64, PAGE_SIZE as u64);
                if padded > *bytes {
                    return Err(Error::Full(format!(
                        "a checkpoint of {} bytes does not fit its slot of {bytes} bytes on {}",
                        checkpoint.len(),
                        storage.device_path(0).display()
                    )));
                }
                let mut buf = AlignedBuf::new(padded as usize);
                buf[..checkpoint.len()].copy_from_slice(checkpoint);
                storage.write_at_synced(0, start + k as u64 * bytes, &buf)
            }
        }
    }
}

/// Logs of `log_count` on device `index` of `devices` (log `w` is on
/// device `w mod devices`).
pub fn logs_on_device(log_count: u32, devices: u32, index: u32) -> u32 {
    log_count / devices + u32::from(index < log_count % devices)
}

/// Where log `w` lies: (device, region offset of its ring).
pub fn log_place(w: u32, devices: u32, log_bytes: u64) -> (u32, u64) {
    (w % devices, u64::from(w / devices) * log_bytes)
}

/// The better of the two copies at the head of a device (`head` holds at
/// least the first [`HEAD_BYTES`], or what the device has).
pub fn decode_head(head: &[u8]) -> Decoded {
    let copies: Vec<std::result::Result<Superblock, String>> = SUPERBLOCK_OFFSETS
        .iter()
        .map(|&at| {
            let at = at as usize;
            head.get(at..at + SUPERBLOCK_BYTES)
                .ok_or_else(|| "the device ends before it".to_string())
                .and_then(Superblock::decode)
        })
        .collect();
    let best = copies
        .iter()
        .filter_map(|c| c.as_ref().ok())
        .max_by_key(|sb| sb.generation);
    match best {
        Some(sb) => Decoded::Valid(*sb),
        None => Decoded::Invalid(copies[0].clone().err().unwrap_or_default()),
    }
}

/// What the head of a device says it holds, from well-known magic
/// numbers (as libblkid reads them), for refusing to overwrite it. None
/// when nothing is recognized (all zeros, or unknown bytes).
pub fn signature(head: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, magic: &[u8]| head.get(offset..offset + magic.len()) == Some(magic);
    if at(4, SUPERBLOCK_MAGIC) || at(SUPERBLOCK_BYTES + 4, SUPERBLOCK_MAGIC) {
        return Some("a flashtree store");
    }
    if at(24, b"FLASHTRE") {
        return Some("a flashtree store of format version 4 or older");
    }
    if at(512, b"EFI PART") {
        return Some("a GPT partition table");
    }
    if at(1080, &[0x53, 0xEF]) {
        return Some("an ext2/3/4 file system");
    }
    if at(0, b"XFSB") {
        return Some("an XFS file system");
    }
    if at(65536 + 64, b"_BHRfS_M") {
        return Some("a btrfs file system");
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume");
    }
    if at(PAGE_SIZE - 10, b"SWAPSPACE2") || at(PAGE_SIZE - 10, b"SWAP-SPACE") {
        return Some("a swap area");
    }
    if at(0x3, b"NTFS    ") {
        return Some("an NTFS file system");
    }
    if at(0x52, b"FAT32   ") || at(0x36, b"FAT16   ") || at(0x36, b"FAT12   ") {
        return Some("a FAT file system");
    }
    if at(510, &[0x55, 0xAA]) {
        return Some("an MBR partition table or boot sector");
    }
    None
}

/// Sizes of the regions of a new store on block devices.
#[derive(Clone, Copy, Debug)]
pub struct DevicePlan {
    /// Logs to make room for.
    pub log_count: u32,
    /// Bytes of each log's ring.
    pub log_bytes: u64,
    /// Temporary space over all devices (split evenly).
    pub temp_bytes: u64,
    /// Stripe unit.
    pub chunk_bytes: u64,
}

/// Bytes a checkpoint needs besides its free list: its fixed fields, the
/// log start blocks and the catalog of named trees (at most
/// [`MAX_CATALOG_BYTES`]).
pub const CHECKPOINT_FIXED_BYTES: u64 = 64 * 1024;
/// Most bytes the catalog of named trees may take in a checkpoint of a
/// store on block devices (names and roots: about 3,800 trees with names
/// of 60 bytes).
pub const MAX_CATALOG_BYTES: u64 = 256 * 1024;
/// The most bytes a checkpoint of a store of `pages` data pages and
/// `log_count` logs takes, rounded up to a page: it lists every free page
/// id, at most every page. A checkpoint slot this large never needs more
/// space (see [`SlotPlace::reserve`]).
pub fn checkpoint_bytes_most(pages: u64, log_count: u32) -> u64 {
    round_up(
        CHECKPOINT_FIXED_BYTES + MAX_CATALOG_BYTES + 8 * pages + 8 * u64::from(log_count),
        PAGE_SIZE as u64,
    )
}
/// Data regions start at a multiple of this (1 MiB, a common erase-block
/// and RAID alignment).
pub const DATA_ALIGN_BYTES: u64 = 1 << 20;

/// CRC-32C (Castagnoli), as every checksum of the store.
fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// The superblocks of a new store on block devices of `device_bytes`
/// each: device 0 holds the checkpoint slots, each device its share of
/// the logs and of the temp space, and the rest is data. Err when a
/// device is too small, naming what does not fit.
pub fn plan_devices(
    store_id: u64,
    device_bytes: &[u64],
    plan: &DevicePlan,
) -> std::result::Result<Vec<Superblock>, String> {
    let page = PAGE_SIZE as u64;
    let n = device_bytes.len() as u32;
    assert!(n > 0, "at least one device");
    let total_pages: u64 = device_bytes.iter().map(|b| b / page).sum();
    let slot_bytes = checkpoint_bytes_most(total_pages, plan.log_count);
    let temp_each = round_up(plan.temp_bytes / u64::from(n), page);
    let mut out = Vec::with_capacity(n as usize);
    for (i, &bytes) in device_bytes.iter().enumerate() {
        let i = i as u32;
        let checkpoint = Region {
            start: HEAD_BYTES,
            bytes: if i == 0 { 2 * slot_bytes } else { 0 },
        };
        let log = Region {
            start: checkpoint.end(),
            bytes: u64::from(logs_on_device(plan.log_count, n, i)) * plan.log_bytes,
        };
        let temp = Region {
            start: log.end(),
            bytes: temp_each,
        };
        let data_start = round_up(temp.end(), DATA_ALIGN_BYTES);
        let usable = bytes.saturating_sub(data_start) / plan.chunk_bytes * plan.chunk_bytes;
        if usable < 4 * plan.chunk_bytes {
            return Err(format!(
                "device {i} has {bytes} bytes; its superblocks, checkpoint slots ({} bytes), logs ({} bytes) and temp space ({} bytes) leave {usable} bytes for data, under 4 chunks of {}",
                checkpoint.bytes, log.bytes, temp.bytes, plan.chunk_bytes
            ));
        }
        let sb = Superblock {
            flags: FLAG_REGIONS_ON_DEVICES,
            store_id,
            generation: 1,
            device_count: n,
            device_index: i,
            chunk_bytes: plan.chunk_bytes,
            device_bytes: bytes,
            log_bytes: plan.log_bytes,
            log_count: plan.log_count,
            checkpoint_slot_bytes: slot_bytes,
            regions: Regions {
                checkpoint,
                log,
                temp,
                data: Region {
                    start: data_start,
                    bytes: usable,
                },
            },
        };
        sb.check()?;
        out.push(sb);
    }
    Ok(out)
}

/// The superblocks of a new store on files: the head, then the data.
pub fn plan_files(store_id: u64, files: u32, chunk_bytes: u64) -> Vec<Superblock> {
    (0..files)
        .map(|i| {
            let empty = Region {
                start: HEAD_BYTES,
                bytes: 0,
            };
            Superblock {
                flags: 0,
                store_id,
                generation: 1,
                device_count: files,
                device_index: i,
                chunk_bytes,
                device_bytes: 0,
                log_bytes: 0,
                log_count: 0,
                checkpoint_slot_bytes: 0,
                regions: Regions {
                    checkpoint: empty,
                    log: empty,
                    temp: empty,
                    data: Region {
                        start: HEAD_BYTES,
                        bytes: 0,
                    },
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> DevicePlan {
        DevicePlan {
            log_count: 3,
            log_bytes: 1 << 20,
            temp_bytes: 4 << 20,
            chunk_bytes: 64 << 10,
        }
    }

    #[test]
    fn a_superblock_survives_encoding_and_checks_its_bytes() {
        let sbs = plan_devices(0xabc, &[256 << 20, 256 << 20], &plan()).unwrap();
        for sb in &sbs {
            let bytes = sb.encode();
            assert_eq!(Superblock::decode(&bytes).unwrap(), *sb);
            for at in [0, 5, 40, 100, 4095] {
                let mut bad = bytes;
                bad[at] ^= 1;
                assert!(Superblock::decode(&bad).is_err(), "flip at {at} accepted");
            }
        }
        // Logs 0 and 2 on device 0, log 1 on device 1.
        assert_eq!(sbs[0].regions.log.bytes, 2 << 20);
        assert_eq!(sbs[1].regions.log.bytes, 1 << 20);
        assert_eq!(sbs[1].regions.checkpoint.bytes, 0);
        assert_eq!(log_place(2, 2, 1 << 20), (0, 1 << 20));
        for sb in &sbs {
            assert!(sb.regions.data.start.is_multiple_of(DATA_ALIGN_BYTES));
            assert!(sb.regions.data.end() <= 256 << 20);
        }
        let files = plan_files(7, 3, 64 << 10);
        for sb in &files {
            assert_eq!(Superblock::decode(&sb.encode()).unwrap(), *sb);
            assert_eq!(sb.regions.data.start, HEAD_BYTES);
        }
    }

    #[test]
    fn the_newer_valid_copy_wins_and_a_torn_copy_is_ignored() {
        let mut sb = plan_files(9, 1, 64 << 10)[0];
        let mut head = vec![0u8; HEAD_BYTES as usize];
        head[..4096].copy_from_slice(&sb.encode());
        sb.generation = 2;
        head[4096..].copy_from_slice(&sb.encode());
        assert_eq!(decode_head(&head), Decoded::Valid(sb));
        // The newer copy torn: the older wins.
        head[4096 + 2000..].fill(0xaa);
        let Decoded::Valid(found) = decode_head(&head) else {
            panic!("the older copy is valid");
        };
        assert_eq!(found.generation, 1);
        head[..4096].fill(0xff);
        assert!(matches!(decode_head(&head), Decoded::Invalid(_)));
        assert!(matches!(decode_head(&[]), Decoded::Invalid(_)));
    }

    #[test]
    fn signatures_of_file_systems_and_partition_tables_are_recognized() {
        let blank = vec![0u8; PROBE_BYTES];
        assert_eq!(signature(&blank), None);
        let with = |offset: usize, magic: &[u8]| {
            let mut head = blank.clone();
            head[offset..offset + magic.len()].copy_from_slice(magic);
            signature(&head)
        };
        assert_eq!(with(1080, &[0x53, 0xEF]), Some("an ext2/3/4 file system"));
        assert_eq!(with(512, b"EFI PART"), Some("a GPT partition table"));
        assert_eq!(with(0, b"XFSB"), Some("an XFS file system"));
        assert_eq!(with(65600, b"_BHRfS_M"), Some("a btrfs file system"));
        assert_eq!(
            with(510, &[0x55, 0xAA]),
            Some("an MBR partition table or boot sector")
        );
        assert_eq!(with(4086, b"SWAPSPACE2"), Some("a swap area"));
        let sb = plan_files(1, 1, 4096)[0].encode();
        assert_eq!(with(0, &sb), Some("a flashtree store"));
        // A head shorter than an offset is not read past its end.
        assert_eq!(signature(&[0u8; 100]), None);
    }

    #[test]
    fn devices_too_small_for_their_regions_are_refused_with_the_sizes() {
        let err = plan_devices(1, &[4 << 20], &plan()).unwrap_err();
        assert!(err.contains("device 0 has 4194304 bytes"), "{err}");
    }
}
