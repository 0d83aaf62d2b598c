//! Space amplification: the bytes an engine's store directory takes on
//! disk, walked file by file, against the raw bytes (keys + values) of the
//! user data in it.
//!
//! A file counts as the space the file system allocated to it
//! (`st_blocks × 512`), not its length: a sparse file (LMDB's map, a
//! file extended with `set_len`) counts only its written blocks, and a
//! file preallocated with `fallocate` or zero-filled (flashtree's logs and
//! the growth of its data file) counts whole, since that space is taken
//! from the device. Regular files only: directories' own blocks and
//! symbolic links are not counted, and a file with several hard links in
//! the directory counts once. A file that disappears while the directory
//! is walked (an engine deleting it, e.g. after a compaction) is skipped.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

/// Bytes of one `st_blocks` unit (POSIX: 512, whatever the block size).
pub const ST_BLOCK_BYTES: u64 = 512;

/// Deepest directory nesting walked (a guard against a runaway tree).
const DEPTH_MAX: usize = 64;

/// What a directory takes on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DiskUsage {
    /// Space allocated to its regular files: sum of `st_blocks × 512`.
    pub allocated_bytes: u64,
    /// Sum of the files' lengths (`st_size`), for comparison.
    pub apparent_bytes: u64,
    /// Regular files counted.
    pub files_count: u64,
    /// Allocated bytes by kind of file ([`file_kind`]), largest first.
    pub allocated_bytes_by_kind: Vec<(String, u64)>,
}

/// The kind of a file, for [`DiskUsage::allocated_bytes_by_kind`]: its
/// name with every run of digits replaced by `N` (`000123.sst` →
/// `N.sst`, `data.ft.wal3` → `data.ft.walN`), so that numbered files of
/// one kind add up.
pub fn file_kind(name: &str) -> String {
    let mut kind = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                kind.push('N');
            }
            in_digits = true;
        } else {
            kind.push(c);
            in_digits = false;
        }
    }
    kind
}

/// Walks `dir` (recursively, not following symbolic links) and adds up
/// its regular files (see the module docs for what counts). Errors: `dir`
/// is missing or not a directory, or a file or directory cannot be read.
pub fn disk_usage(dir: &Path) -> Result<DiskUsage, String> {
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot measure {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("cannot measure {}: not a directory", dir.display()));
    }
    let mut usage = DiskUsage::default();
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen_inodes: HashSet<(u64, u64)> = HashSet::new();
    walk(dir, 0, &mut usage, &mut by_kind, &mut seen_inodes)?;
    let mut kinds: Vec<(String, u64)> = by_kind.into_iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    usage.allocated_bytes_by_kind = kinds;
    Ok(usage)
}

fn walk(
    dir: &Path,
    depth: usize,
    usage: &mut DiskUsage,
    by_kind: &mut BTreeMap<String, u64>,
    seen_inodes: &mut HashSet<(u64, u64)>,
) -> Result<(), String> {
    if depth > DEPTH_MAX {
        return Err(format!(
            "cannot measure {}: nested deeper than {DEPTH_MAX} directories",
            dir.display()
        ));
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // A subdirectory removed while walking holds nothing any more.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && depth > 0 => return Ok(()),
        Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let path = entry.path();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot stat {}: {e}", path.display())),
        };
        if meta.is_dir() {
            walk(&path, depth + 1, usage, by_kind, seen_inodes)?;
        } else if meta.is_file() && seen_inodes.insert((meta.dev(), meta.ino())) {
            let allocated = meta.blocks().saturating_mul(ST_BLOCK_BYTES);
            usage.allocated_bytes = usage.allocated_bytes.saturating_add(allocated);
            usage.apparent_bytes = usage.apparent_bytes.saturating_add(meta.len());
            usage.files_count += 1;
            let kind = file_kind(&entry.file_name().to_string_lossy());
            *by_kind.entry(kind).or_insert(0) += allocated;
        }
    }
    Ok(())
}

/// `disk_bytes / raw_bytes` (None: either unknown, or no raw bytes).
pub fn space_amp(disk_bytes: Option<u64>, raw_bytes: Option<u64>) -> Option<f64> {
    match (disk_bytes, raw_bytes) {
        (Some(disk), Some(raw)) if raw > 0 => Some(disk as f64 / raw as f64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    /// Allocated bytes of one file as the file system reports them.
    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().blocks() * ST_BLOCK_BYTES
    }

    #[test]
    fn the_walk_counts_allocated_blocks_of_every_file_below() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("000001.sst"), vec![7u8; 100_000]).unwrap();
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("sub/000002.sst"), vec![1u8; 50_000]).unwrap();
        std::fs::write(root.join("sub/deeper/LOG"), b"hello").unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        // Sparse: 64 MiB long, one 4 KiB block written at its end.
        let sparse_path = root.join("sparse.mdb");
        {
            let mut sparse = std::fs::File::create(&sparse_path).unwrap();
            sparse.set_len(64 << 20).unwrap();
            sparse.seek(SeekFrom::Start((64 << 20) - 4096)).unwrap();
            sparse.write_all(&[9u8; 4096]).unwrap();
            sparse.sync_all().unwrap();
        }
        // A hard link counts once; a symbolic link (to a big file outside)
        // not at all.
        std::fs::hard_link(root.join("000001.sst"), root.join("sub/link.sst")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![3u8; 200_000]).unwrap();
        std::os::unix::fs::symlink(outside.path().join("big"), root.join("big-link")).unwrap();

        let usage = disk_usage(root).unwrap();
        let files = [
            "000001.sst",
            "sub/000002.sst",
            "sub/deeper/LOG",
            "empty",
            "sparse.mdb",
        ];
        let expected: u64 = files.iter().map(|f| allocated(&root.join(f))).sum();
        assert_eq!(usage.allocated_bytes, expected);
        assert_eq!(usage.files_count, 5);
        assert_eq!(
            usage.apparent_bytes,
            100_000 + 50_000 + 5 + (64 << 20) as u64
        );
        // Whole blocks: at least the bytes written, far below the sparse
        // file's length.
        assert!(usage.allocated_bytes >= 100_000 + 50_000 + 4096);
        assert!(
            usage.allocated_bytes < 8 << 20,
            "a sparse file counted whole: {usage:?}"
        );
        let sst = usage
            .allocated_bytes_by_kind
            .iter()
            .find(|(kind, _)| kind == "N.sst")
            .unwrap();
        assert_eq!(
            sst.1,
            allocated(&root.join("000001.sst")) + allocated(&root.join("sub/000002.sst"))
        );
        assert_eq!(usage.allocated_bytes_by_kind[0].0, "N.sst");
    }

    #[test]
    fn a_preallocated_file_counts_whole() {
        let dir = tempfile::tempdir().unwrap();
        // Zero-filled, as flashtree fills its logs: every block allocated.
        std::fs::write(dir.path().join("data.ft.wal0"), vec![0u8; 1 << 20]).unwrap();
        let usage = disk_usage(dir.path()).unwrap();
        assert!(usage.allocated_bytes >= 1 << 20, "{usage:?}");
        assert_eq!(usage.allocated_bytes_by_kind[0].0, "data.ft.walN");
    }

    #[test]
    fn a_missing_or_plain_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(disk_usage(&dir.path().join("nothing")).is_err());
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(disk_usage(&file).is_err());
        assert_eq!(disk_usage(dir.path()).unwrap().files_count, 1);
    }

    #[test]
    fn kinds_and_ratios() {
        assert_eq!(file_kind("MANIFEST-000005"), "MANIFEST-N");
        assert_eq!(file_kind("WiredTigerLog.0000000001"), "WiredTigerLog.N");
        assert_eq!(file_kind("data.mdb"), "data.mdb");
        assert_eq!(space_amp(Some(300), Some(100)), Some(3.0));
        assert_eq!(space_amp(Some(300), Some(0)), None);
        assert_eq!(space_amp(None, Some(100)), None);
        assert_eq!(space_amp(Some(1), None), None);
    }
}
