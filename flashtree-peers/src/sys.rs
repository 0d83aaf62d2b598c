//! Small OS helpers: CPU time (getrusage), CPU affinity (sched_setaffinity),
//! device I/O counts (/sys/dev/block/M:m/stat), resident memory, sizes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// CPU time (user + system) of the whole process so far, in seconds.
pub fn process_cpu_s() -> f64 {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Parses a core list: "0", "0,2", "0-3", "0-1,4".
pub fn parse_cores(text: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("bad core list {text:?}: use e.g. 0 or 0,2 or 0-3");
        match part.split_once('-') {
            Some((low, high)) => {
                let (low, high): (usize, usize) = (
                    low.parse().map_err(|_| bad())?,
                    high.parse().map_err(|_| bad())?,
                );
                if low > high || high >= libc::CPU_SETSIZE as usize {
                    return Err(bad());
                }
                cores.extend(low..=high);
            }
            None => cores.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cores.iter().any(|&core| core >= libc::CPU_SETSIZE as usize) {
        return Err(format!("core number too large in {text:?}"));
    }
    Ok(cores)
}

/// Pins every existing thread of the process (and so every thread they
/// create later) to `cores`. Empty: no change.
pub fn pin_process_to(cores: &[usize]) -> Result<(), String> {
    if cores.is_empty() {
        return Ok(());
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it (cores < CPU_SETSIZE).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &core in cores {
        // SAFETY: core < CPU_SETSIZE, checked by parse_cores.
        unsafe { libc::CPU_SET(core, &mut set) };
    }
    let tasks =
        std::fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))?;
    for entry in tasks.flatten() {
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        // SAFETY: set is a valid cpu_set_t of the given size.
        let code =
            unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if code != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::ESRCH) {
                return Err(format!("sched_setaffinity({cores:?}): {error}"));
            }
        }
    }
    Ok(())
}

/// Completed (reads, writes) of the block device holding `path`, if the
/// kernel exposes it (not for overlay or tmpfs).
pub fn device_io_counts(path: &Path) -> Option<(u64, u64)> {
    let device = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(device), libc::minor(device));
    let text = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    let fields: Vec<u64> = text
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    Some((*fields.first()?, *fields.get(4)?))
}

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Parses "128MiB", "1GiB", "4096", "64KiB", "1.5GiB" (also KB/MB/GB = binary, K/M/G).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("bad size {text:?}: use e.g. 128MiB"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "bad size unit {other:?} in {text:?}: use KiB, MiB, GiB or TiB"
            ))
        }
    };
    let bytes = number * multiplier as f64;
    if !(1.0..1e18).contains(&bytes) {
        return Err(format!("size {text:?} out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("128MiB").unwrap(), 128 << 20);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("1.5GiB").unwrap(), 3 << 29);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn cores_parse() {
        assert_eq!(parse_cores("0").unwrap(), vec![0]);
        assert_eq!(parse_cores("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("x").is_err());
    }
}
