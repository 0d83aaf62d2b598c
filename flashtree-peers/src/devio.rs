//! The I/O counters of the block device under a directory: operations
//! completed and bytes moved, as the kernel's block layer counts them
//! (`/sys/dev/block/MAJOR:MINOR/stat`, else the device's line of
//! `/proc/diskstats`; Linux `Documentation/block/stat.rst` and
//! `Documentation/admin-guide/iostats.rst`).
//!
//! # Contract
//!
//! - [`BlockDevice::of_path`] finds the device holding a path's file
//!   system: the path's `st_dev`, or, where that is an anonymous device
//!   (major 0: btrfs, some network and union file systems), the `/dev/...`
//!   source of its mount in `/proc/self/mountinfo`. Err names why there is
//!   none (tmpfs, overlay, a source that is no block device).
//! - The counters are those of that device itself: a partition's own (not
//!   the whole disk's), a device-mapper or loop device's own (not those of
//!   the disks beneath, which also carry other volumes' and files' I/O).
//!   [`BlockDevice::kind`] says which it is and what lies beneath.
//! - The counters are the device's, not one process's: every process's
//!   I/O to the device in the interval counts. Callers that attribute them
//!   to one run must say so.
//! - Reading the counters is one small file read (two on the fallback);
//!   nothing here holds state between calls.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Bytes per sector in the block layer's statistics: always 512, whatever
/// the device's own sector size (`Documentation/block/stat.rst`).
pub const STAT_SECTOR_BYTES: u64 = 512;

/// Fields of a sysfs `stat` line that the counters need: reads completed
/// (1), sectors read (3), writes completed (5), sectors written (7).
const STAT_FIELDS_MIN: usize = 7;

/// I/O a block device completed: since boot, or (after [`IoCounters::since`])
/// in an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct IoCounters {
    /// Read requests completed (after the block layer merged adjacent ones).
    pub reads: u64,
    pub read_bytes: u64,
    /// Write requests completed (flushes are not counted here).
    pub writes: u64,
    pub write_bytes: u64,
}

impl IoCounters {
    /// What was completed between `before` and `self` (0 where a counter
    /// went back, e.g. a device removed and added again).
    pub fn since(&self, before: &IoCounters) -> IoCounters {
        IoCounters {
            reads: self.reads.saturating_sub(before.reads),
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            writes: self.writes.saturating_sub(before.writes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
        }
    }
}

/// Parses a block device's `stat` file (`/sys/block/<dev>/stat`,
/// `/sys/dev/block/M:m/stat`): whitespace-separated decimal fields, of
/// which the 1st is reads completed, the 3rd sectors read, the 5th writes
/// completed and the 7th sectors written (kernels have 11, 15 or 17).
pub fn parse_stat(text: &str) -> Result<IoCounters, String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    counters_of_fields(&fields).map_err(|e| format!("block device stat {text:?}: {e}"))
}

/// The counters of the device `major:minor` in the text of
/// `/proc/diskstats` (each line: major, minor, name, then the `stat`
/// fields), with the device's name.
pub fn parse_diskstats(text: &str, major: u32, minor: u32) -> Result<(String, IoCounters), String> {
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [line_major, line_minor, name, rest @ ..] = fields.as_slice() else {
            continue;
        };
        if line_major.parse() != Ok(major) || line_minor.parse() != Ok(minor) {
            continue;
        }
        let counters =
            counters_of_fields(rest).map_err(|e| format!("/proc/diskstats line {line:?}: {e}"))?;
        return Ok((name.to_string(), counters));
    }
    Err(format!("no device {major}:{minor} in /proc/diskstats"))
}

/// Counters from the `stat` fields (first field: reads completed).
fn counters_of_fields(fields: &[&str]) -> Result<IoCounters, String> {
    if fields.len() < STAT_FIELDS_MIN {
        return Err(format!(
            "{} fields, at least {STAT_FIELDS_MIN} expected",
            fields.len()
        ));
    }
    let field = |number: usize| -> Result<u64, String> {
        let text = fields[number - 1];
        text.parse()
            .map_err(|_| format!("field {number} is {text:?}, not a count"))
    };
    let sectors_to_bytes = |sectors: u64| {
        sectors
            .checked_mul(STAT_SECTOR_BYTES)
            .ok_or_else(|| format!("{sectors} sectors overflow a byte count"))
    };
    Ok(IoCounters {
        reads: field(1)?,
        read_bytes: sectors_to_bytes(field(3)?)?,
        writes: field(5)?,
        write_bytes: sectors_to_bytes(field(7)?)?,
    })
}

/// A mount from `/proc/self/mountinfo`: where, which device number its
/// superblock has, and its source (e.g. `/dev/sda2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: PathBuf,
    pub major: u32,
    pub minor: u32,
    pub fs_type: String,
    pub source: String,
}

/// The mount that holds `path` (absolute, without `..` or symbolic links):
/// the last mounted of those whose mount point is `path` or one of its
/// ancestors, the longest first (a later mount over the same point hides an
/// earlier one). None: no line of `mountinfo` parses or matches.
pub fn mount_of(mountinfo: &str, path: &Path) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for line in mountinfo.lines() {
        let Some(mount) = parse_mountinfo_line(line) else {
            continue;
        };
        if !path.starts_with(&mount.mount_point) {
            continue;
        }
        let longer_or_later = best.as_ref().is_none_or(|b| {
            mount.mount_point.components().count() >= b.mount_point.components().count()
        });
        if longer_or_later {
            best = Some(mount);
        }
    }
    best
}

/// One line of `/proc/self/mountinfo`: `id parent major:minor root
/// mount_point options [optional fields...] - fs_type source super_options`
/// (`proc(5)`); octal escapes (`\040` for a space) in the mount point and
/// source are undone.
fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let mount_point = unescape_octal(fields.get(4)?);
    let mut after = after.split(' ');
    let fs_type = after.next()?.to_string();
    let source = unescape_octal(after.next()?);
    Some(Mount {
        mount_point: PathBuf::from(mount_point),
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        fs_type,
        source,
    })
}

/// Undoes the kernel's `\ooo` escapes of mountinfo fields.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes
            .get(at + 1..at + 4)
            .filter(|d| bytes[at] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| {
                d.iter()
                    .fold(0u32, |value, c| value * 8 + u32::from(c - b'0'))
            });
        match octal.and_then(|value| u8::try_from(value).ok()) {
            Some(byte) => {
                out.push(byte);
                at += 4;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The block device holding a file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockDevice {
    /// The kernel's name (`vda`, `nvme0n1p2`, `dm-0`, `loop3`).
    pub name: String,
    pub major: u32,
    pub minor: u32,
    /// What it is and what lies beneath: "whole device", "partition of
    /// nvme0n1", "device-mapper vg-data over nvme0n1p2", "loop device over
    /// file /x.img", for the report.
    pub kind: String,
}

impl BlockDevice {
    /// The device holding the file system of `path` (which must exist).
    pub fn of_path(path: &Path) -> Result<BlockDevice, String> {
        let metadata =
            std::fs::metadata(path).map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
        let device = metadata.dev();
        let (mut major, mut minor) = (libc::major(device), libc::minor(device));
        if major == 0 {
            (major, minor) = Self::mount_source_numbers(path)?;
        }
        let sys = Self::sys_dir(major, minor);
        let name = std::fs::canonicalize(&sys)
            .ok()
            .and_then(|real| real.file_name().map(|n| n.to_string_lossy().into_owned()))
            .or_else(|| {
                let text = std::fs::read_to_string("/proc/diskstats").ok()?;
                parse_diskstats(&text, major, minor).ok().map(|(name, _)| name)
            })
            .ok_or_else(|| {
                format!(
                    "{} is on device {major}:{minor}, which neither /sys/dev/block nor /proc/diskstats lists",
                    path.display()
                )
            })?;
        Ok(BlockDevice {
            kind: Self::kind_of(&sys),
            name,
            major,
            minor,
        })
    }

    /// For a file system on an anonymous device (major 0): the device
    /// number of its mount's source, if that is a block device node.
    fn mount_source_numbers(path: &Path) -> Result<(u32, u32), String> {
        let real = std::fs::canonicalize(path)
            .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mount = mount_of(&mountinfo, &real)
            .ok_or_else(|| format!("no mount holds {} in mountinfo", real.display()))?;
        let not_block = || {
            format!(
                "{} is on a {} file system from {:?}, not on a block device",
                path.display(),
                mount.fs_type,
                mount.source
            )
        };
        if !mount.source.starts_with("/dev/") {
            return Err(not_block());
        }
        let node = std::fs::metadata(&mount.source).map_err(|_| not_block())?;
        if !node.file_type().is_block_device() {
            return Err(not_block());
        }
        Ok((libc::major(node.rdev()), libc::minor(node.rdev())))
    }

    fn sys_dir(major: u32, minor: u32) -> PathBuf {
        PathBuf::from(format!("/sys/dev/block/{major}:{minor}"))
    }

    /// "partition of X", "device-mapper NAME over A, B", "loop device over
    /// file F", "md/other over A, B" or "whole device", from sysfs.
    fn kind_of(sys: &Path) -> String {
        let read = |name: &str| {
            std::fs::read_to_string(sys.join(name))
                .ok()
                .map(|text| text.trim().to_string())
                .filter(|text| !text.is_empty())
        };
        let slaves: Vec<String> = std::fs::read_dir(sys.join("slaves"))
            .map(|entries| {
                let mut names: Vec<String> = entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                names
            })
            .unwrap_or_default();
        let over = if slaves.is_empty() {
            String::new()
        } else {
            format!(" over {}", slaves.join(", "))
        };
        if sys.join("partition").exists() {
            let parent = std::fs::canonicalize(sys)
                .ok()
                .and_then(|real| {
                    real.parent()
                        .and_then(|p| p.file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| "?".into());
            format!("partition of {parent}")
        } else if let Some(name) = read("dm/name") {
            format!("device-mapper {name}{over}")
        } else if let Some(file) = read("loop/backing_file") {
            format!("loop device over file {file}")
        } else if over.is_empty() {
            "whole device".into()
        } else {
            format!("virtual device{over}")
        }
    }

    /// "vda (254:0, whole device)".
    pub fn describe(&self) -> String {
        format!(
            "{} ({}:{}, {})",
            self.name, self.major, self.minor, self.kind
        )
    }

    /// The device's counters now: its sysfs `stat`, else its line of
    /// `/proc/diskstats`.
    pub fn counters(&self) -> Result<IoCounters, String> {
        let stat = Self::sys_dir(self.major, self.minor).join("stat");
        match std::fs::read_to_string(&stat) {
            Ok(text) => parse_stat(&text),
            Err(sys_error) => {
                let text = std::fs::read_to_string("/proc/diskstats").map_err(|e| {
                    format!(
                        "cannot read {} ({sys_error}) nor /proc/diskstats ({e})",
                        stat.display()
                    )
                })?;
                parse_diskstats(&text, self.major, self.minor).map(|(_, counters)| counters)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/sys/block/vda/stat` of this project's test machine (17 fields,
    /// Linux 5.5 and later).
    const VDA_STAT: &str =
        "   28017     5582  2339594     8060    10432    27415  2908064    12432        0     5124    20999     3777       74   146080      443      874       63\n";

    #[test]
    fn sysfs_stat_lines_parse() {
        let c = parse_stat(VDA_STAT).unwrap();
        assert_eq!(
            c,
            IoCounters {
                reads: 28_017,
                read_bytes: 2_339_594 * 512,
                writes: 10_432,
                write_bytes: 2_908_064 * 512,
            }
        );
        // 11 fields (kernels before 4.18) are enough.
        let old = "4 0 8 0 2 0 16 0 0 0 0";
        assert_eq!(
            parse_stat(old).unwrap(),
            IoCounters {
                reads: 4,
                read_bytes: 4096,
                writes: 2,
                write_bytes: 8192,
            }
        );
        for (bad, expected) in [
            ("", "0 fields"),
            ("1 2 3 4 5 6", "6 fields"),
            ("1 2 x 4 5 6 7 8 9 10 11", "field 3 is \"x\""),
            ("1 2 3 4 -5 6 7 8 9 10 11", "field 5"),
            (
                "1 2 36028797018963968 4 5 6 7 8 9 10 11",
                "overflow a byte count",
            ),
        ] {
            let error = parse_stat(bad).unwrap_err();
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
        }
    }

    #[test]
    fn diskstats_lines_parse_by_device_number() {
        let text = "\
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 28017 5582 2339594 8060 10432 27415 2908064 12432 0 5124 20999 3777 74 146080 443 874 63
 254       1 vda1 100 0 800 0 50 0 400 0 0 0 0 0 0 0 0 0 0
 253       0 dm-0 9 0 72 0 3 0 24 0 0 0 0
 253      10 dm-10 1 0 8 0 1 0
";
        let (name, c) = parse_diskstats(text, 254, 0).unwrap();
        assert_eq!(name, "vda");
        assert_eq!(c, parse_stat(VDA_STAT).unwrap());
        // A partition is its own line, not its disk's.
        let (name, c) = parse_diskstats(text, 254, 1).unwrap();
        assert_eq!(name, "vda1");
        assert_eq!(
            (c.reads, c.read_bytes, c.writes, c.write_bytes),
            (100, 409_600, 50, 204_800)
        );
        let (name, c) = parse_diskstats(text, 253, 0).unwrap();
        assert_eq!(name, "dm-0");
        assert_eq!(c.reads, 9);
        // 253:1 must not match 253:10 (nor 25:30 "253 0").
        assert!(parse_diskstats(text, 253, 1)
            .unwrap_err()
            .contains("no device 253:1"));
        assert!(parse_diskstats(text, 25, 30).is_err());
        // A short line of the asked device is an error, not a zero.
        assert!(parse_diskstats(text, 253, 10)
            .unwrap_err()
            .contains("6 fields"));
    }

    #[test]
    fn counters_since_subtract_and_never_go_below_zero() {
        let before = IoCounters {
            reads: 10,
            read_bytes: 4096,
            writes: 7,
            write_bytes: 100,
        };
        let after = IoCounters {
            reads: 15,
            read_bytes: 8192,
            writes: 5,
            write_bytes: 612,
        };
        assert_eq!(
            after.since(&before),
            IoCounters {
                reads: 5,
                read_bytes: 4096,
                writes: 0,
                write_bytes: 512,
            }
        );
    }

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
40 27 0:40 / /work/btrfs rw,relatime shared:5 - btrfs /dev/nvme0n1p2 rw,ssd
41 40 0:41 / /work/btrfs/tmp rw,relatime - tmpfs tmpfs rw
42 27 0:42 / /mnt/my\\040disk rw,relatime - xfs /dev/mapper/vg-my\\040lv rw
43 27 0:43 / /work/btrfs2 rw,relatime - overlay overlay rw
";

    #[test]
    fn the_mount_holding_a_path_is_the_deepest() {
        let at = |path: &str| mount_of(MOUNTINFO, Path::new(path)).unwrap();
        assert_eq!(at("/work/cost-run").source, "/dev/vda");
        assert_eq!((at("/").major, at("/").minor), (254, 0));
        let btrfs = at("/work/btrfs/a/b");
        assert_eq!(btrfs.source, "/dev/nvme0n1p2");
        assert_eq!(btrfs.fs_type, "btrfs");
        assert_eq!((btrfs.major, btrfs.minor), (0, 40));
        assert_eq!(at("/work/btrfs/tmp/x").fs_type, "tmpfs");
        // Components, not string prefixes: /work/btrfs2 is not under /work/btrfs.
        assert_eq!(at("/work/btrfs2/x").fs_type, "overlay");
        // Escaped spaces.
        let spaced = at("/mnt/my disk/data");
        assert_eq!(spaced.mount_point, Path::new("/mnt/my disk"));
        assert_eq!(spaced.source, "/dev/mapper/vg-my lv");
        assert_eq!(mount_of("garbage\n", Path::new("/")), None);
    }

    #[test]
    fn a_later_mount_on_the_same_point_hides_the_earlier() {
        let text = "\
27 1 254:0 / / rw - ext4 /dev/vda rw
50 27 0:50 / /data rw - ext4 /dev/sdb1 rw
51 27 0:51 / /data rw - xfs /dev/sdc rw
";
        assert_eq!(
            mount_of(text, Path::new("/data/x")).unwrap().source,
            "/dev/sdc"
        );
    }

    #[test]
    fn this_machines_root_device_is_found_and_counts() {
        // Not an assertion on the machine: containers may hide the device.
        match BlockDevice::of_path(Path::new("/")) {
            Ok(device) => {
                assert!(!device.name.is_empty());
                assert!(device.describe().contains(&device.name));
                match device.counters() {
                    Ok(first) => {
                        let second = device.counters().unwrap();
                        assert!(second.reads >= first.reads && second.writes >= first.writes);
                    }
                    Err(error) => eprintln!("counters not readable here: {error}"),
                }
            }
            Err(error) => eprintln!("skipped: {error}"),
        }
    }
}
