//! A memory cgroup for engines that read through mmap / the page cache
//! (LMDB, redb, fjall). The whole process moves into a child cgroup (memory
//! cgroups charge pages per process, not per thread) and moves back
//! afterwards. cgroup v2 and v1.
//!
//! The group bounds the engine's page cache to an allowance: for LMDB, whose
//! only cache is the page cache of its file, the budget; for engines with a
//! cache of their own sized to the budget (redb, fjall), a small allowance
//! (see `adapters::page_cache_bytes`). The process also allocates anonymous
//! memory while it is in the group (harness and engine threads' stacks,
//! histograms, heap, and those engines' own caches), and that is charged to
//! the group too. So the limit follows it: a tracker thread sets
//! `limit = allowance + the group's anonymous memory + slack` every
//! [`TRACK_PERIOD`], which leaves the page cache about the allowance. Pages
//! charged before the process entered stay with the parent group (neither
//! v1 nor v2 moves charges by default), so they do not count.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the tracker adjusts the limit.
pub const TRACK_PERIOD: Duration = Duration::from_millis(50);
/// Room above page cache allowance + anonymous memory: kernel memory the
/// group is charged for (page tables, slab), and anonymous growth between
/// two checks.
pub const SLACK_BYTES: u64 = 8 << 20;
/// Smallest change of the limit that is written (fewer writes, same effect).
const LIMIT_STEP_BYTES: u64 = 1 << 20;

/// Peak usage of the group while the process was in it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CgroupPeaks {
    /// Largest page cache (file pages) charged to the group.
    pub file_bytes_max: u64,
    /// Largest anonymous memory charged to the group.
    pub anon_bytes_max: u64,
}

/// A created cgroup the process is in; [`MemoryCgroup::leave`] undoes it.
#[derive(Debug)]
pub struct MemoryCgroup {
    name: String,
    path: PathBuf,
    parent_procs: PathBuf,
    page_cache_bytes: u64,
    version: u8,
    stop: Arc<AtomicBool>,
    tracker: Option<JoinHandle<Result<CgroupPeaks, String>>>,
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("write {text:?} to {}: {e}", path.display()))
}

/// The memory cgroup directory this process is in, and the hierarchy version.
fn current_cgroup() -> Result<(PathBuf, u8), String> {
    let membership = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let relative = membership
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("/");
        return Ok((
            Path::new("/sys/fs/cgroup").join(relative.trim_start_matches('/')),
            2,
        ));
    }
    let root = Path::new("/sys/fs/cgroup/memory");
    if !root.exists() {
        return Err("no memory cgroup controller mounted (neither v2 nor v1 memory)".into());
    }
    let relative = membership
        .lines()
        .find_map(|line| line.split_once(":memory:").map(|(_, path)| path))
        .unwrap_or("/");
    let current = root.join(relative.trim_start_matches('/'));
    Ok((
        if current.exists() {
            current
        } else {
            root.to_path_buf()
        },
        1,
    ))
}

/// (anonymous, file) bytes charged to the group, from its memory.stat text.
/// v1 names them `rss` (including transparent huge pages) and `cache`, v2
/// `anon` and `file`.
pub fn parse_memory_stat(text: &str, version: u8) -> Option<(u64, u64)> {
    let (anon_key, file_key) = if version == 2 {
        ("anon", "file")
    } else {
        ("rss", "cache")
    };
    let field = |key: &str| {
        text.lines().find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then(|| value.trim().parse::<u64>().ok())?
        })
    };
    Some((field(anon_key)?, field(file_key)?))
}

/// The limit for `anon_bytes` of anonymous memory.
fn limit_for(page_cache_bytes: u64, anon_bytes: u64) -> u64 {
    page_cache_bytes + anon_bytes + SLACK_BYTES
}

fn limit_file(version: u8) -> &'static str {
    if version == 2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    }
}

/// Keeps the limit at page cache allowance + anonymous memory until `stop`;
/// returns the peaks.
fn track(
    path: PathBuf,
    version: u8,
    page_cache_bytes: u64,
    mut limit_bytes: u64,
    stop: Arc<AtomicBool>,
) -> Result<CgroupPeaks, String> {
    let stat_path = path.join("memory.stat");
    let limit_path = path.join(limit_file(version));
    let mut peaks = CgroupPeaks::default();
    loop {
        let text = std::fs::read_to_string(&stat_path)
            .map_err(|e| format!("{}: {e}", stat_path.display()))?;
        let (anon_bytes, file_bytes) = parse_memory_stat(&text, version)
            .ok_or_else(|| format!("{}: no anon/file fields", stat_path.display()))?;
        peaks.anon_bytes_max = peaks.anon_bytes_max.max(anon_bytes);
        peaks.file_bytes_max = peaks.file_bytes_max.max(file_bytes);
        let wanted = limit_for(page_cache_bytes, anon_bytes);
        if wanted.abs_diff(limit_bytes) >= LIMIT_STEP_BYTES {
            write(&limit_path, &wanted.to_string())?;
            limit_bytes = wanted;
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(peaks);
        }
        std::thread::sleep(TRACK_PERIOD);
    }
}

impl MemoryCgroup {
    /// Creates `flashtree-<name>-<pid>` under the current cgroup, moves the
    /// process into it and starts tracking its limit so that engine `name`'s
    /// page cache gets about `page_cache_bytes` (see the module docs).
    pub fn enter(name: &str, page_cache_bytes: u64) -> Result<Self, String> {
        // The group holds the whole process: a second one at once (another
        // comparison in this process) would move it away from the first.
        if IN_USE.swap(true, Ordering::AcqRel) {
            return Err(format!(
                "{name}: another engine run of this process is in a memory cgroup; page-cache engines run one at a time per process"
            ));
        }
        let entered = Self::enter_unique(name, page_cache_bytes);
        if entered.is_err() {
            IN_USE.store(false, Ordering::Release);
        }
        entered
    }

    fn enter_unique(name: &str, page_cache_bytes: u64) -> Result<Self, String> {
        let (parent, version) = current_cgroup()?;
        let path = parent.join(format!("flashtree-{name}-{}", std::process::id()));
        if !path.exists() {
            std::fs::create_dir(&path)
                .map_err(|e| format!("cannot create cgroup {}: {e}", path.display()))?;
        }
        if version == 2 {
            let _ = write(&path.join("memory.swap.max"), "0");
        }
        // Until the first check the process's whole resident memory may come
        // along (it does not, by default): start loose, the tracker tightens.
        let first_limit_bytes = limit_for(page_cache_bytes, crate::sys::rss_bytes());
        write(
            &path.join(limit_file(version)),
            &first_limit_bytes.to_string(),
        )?;
        write(&path.join("cgroup.procs"), &std::process::id().to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let tracker = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::Builder::new()
                .name("cgroup-limit".into())
                .spawn(move || track(path, version, page_cache_bytes, first_limit_bytes, stop))
                .map_err(|e| format!("cannot start the cgroup limit tracker: {e}"))?
        };
        Ok(MemoryCgroup {
            name: name.to_string(),
            parent_procs: parent.join("cgroup.procs"),
            path,
            page_cache_bytes,
            version,
            stop,
            tracker: Some(tracker),
        })
    }
    /// One line for the report.
    pub fn describe(&self) -> String {
        format!(
            "memory cgroup v{} {}: limit = page cache allowance {} B + the group's anonymous \
             memory + {} MiB, reset every {} ms, so {}'s page cache gets about {} B",
            self.version,
            self.path.display(),
            self.page_cache_bytes,
            SLACK_BYTES >> 20,
            TRACK_PERIOD.as_millis(),
            self.name,
            self.page_cache_bytes,
        )
    }
    /// Stops tracking, moves the process back to the parent cgroup and
    /// removes this one. Returns the peak usage seen.
    pub fn leave(mut self) -> Result<CgroupPeaks, String> {
        self.stop.store(true, Ordering::Relaxed);
        let peaks = match self.tracker.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err("the cgroup limit tracker panicked".into()),
            None => Ok(CgroupPeaks::default()),
        };
        write(&self.parent_procs, &std::process::id().to_string())?;
        if self.version == 1 {
            let _ = write(&self.path.join("memory.force_empty"), "0");
        }
        std::fs::remove_dir(&self.path)
            .map_err(|e| format!("remove cgroup {}: {e}", self.path.display()))?;
        peaks
    }
}

/// A [`MemoryCgroup`] of this process exists.
static IN_USE: AtomicBool = AtomicBool::new(false);

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        IN_USE.store(false, Ordering::Release);
        // `leave` was not called (an error path): at least stop the tracker.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(tracker) = self.tracker.take() {
            let _ = tracker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stat_fields_by_version() {
        let v1 = "cache 1048576\nrss 2097152\nrss_huge 0\nshmem 0\n\
                  total_cache 9\ntotal_rss 9\n";
        assert_eq!(parse_memory_stat(v1, 1), Some((2_097_152, 1_048_576)));
        let v2 = "anon 4096\nfile 8192\nkernel 100\nanon_thp 0\n";
        assert_eq!(parse_memory_stat(v2, 2), Some((4096, 8192)));
        assert_eq!(parse_memory_stat("anon 1\n", 2), None, "file missing");
        assert_eq!(parse_memory_stat(v2, 1), None, "v1 names absent");
    }

    #[test]
    fn limit_leaves_the_budget_to_the_page_cache() {
        assert_eq!(limit_for(128 << 20, 0), (128 << 20) + SLACK_BYTES);
        assert_eq!(
            limit_for(128 << 20, 300 << 20) - (300 << 20),
            (128 << 20) + SLACK_BYTES
        );
    }
}
