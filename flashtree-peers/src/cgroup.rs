//! A memory cgroup for engines that read through mmap / the page cache
//! (LMDB): the whole process moves into a child cgroup whose limit is the
//! memory budget plus the process's resident memory at entry, and moves back
//! afterwards. Memory cgroups charge pages per process, not per thread, so
//! the process (not just the engine's threads) moves. cgroup v2 and v1.

use std::path::{Path, PathBuf};

/// A created cgroup the process is in; [`MemoryCgroup::leave`] undoes it.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
    parent_procs: PathBuf,
    limit_bytes: u64,
    version: u8,
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

impl MemoryCgroup {
    /// Creates `flashtree-<name>-<pid>` under the current cgroup with limit
    /// `budget_bytes + resident memory now` and moves the process into it.
    pub fn enter(name: &str, budget_bytes: u64) -> Result<Self, String> {
        let (parent, version) = current_cgroup()?;
        let path = parent.join(format!("flashtree-{name}-{}", std::process::id()));
        if !path.exists() {
            std::fs::create_dir(&path)
                .map_err(|e| format!("cannot create cgroup {}: {e}", path.display()))?;
        }
        let limit_bytes = budget_bytes + crate::sys::rss_bytes();
        let limit_file = if version == 2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        let group = MemoryCgroup {
            parent_procs: parent.join("cgroup.procs"),
            path,
            limit_bytes,
            version,
        };
        if version == 2 {
            let _ = write(&group.path.join("memory.swap.max"), "0");
        }
        write(&group.path.join(limit_file), &limit_bytes.to_string())?;
        write(
            &group.path.join("cgroup.procs"),
            &std::process::id().to_string(),
        )?;
        Ok(group)
    }
    /// The limit set, in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }
    /// One line for the report.
    pub fn describe(&self) -> String {
        format!(
            "memory cgroup v{} {} limit {} B (budget + process RSS at entry)",
            self.version,
            self.path.display(),
            self.limit_bytes
        )
    }
    /// Moves the process back to the parent cgroup and removes this one.
    pub fn leave(self) -> Result<(), String> {
        write(&self.parent_procs, &std::process::id().to_string())?;
        if self.version == 1 {
            let _ = write(&self.path.join("memory.force_empty"), "0");
        }
        std::fs::remove_dir(&self.path)
            .map_err(|e| format!("remove cgroup {}: {e}", self.path.display()))
    }
}
