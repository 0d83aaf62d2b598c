//! Small OS helpers: CPU time (getrusage), CPU affinity (sched_setaffinity),
//! the process's I/O bytes (/proc/self/io), resident memory, sizes, and
//! CPU profiles of this process sampled by Linux `perf`.

use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// CPU time of the whole process so far, in seconds: (user, system).
pub fn process_cpu_user_sys_s() -> (f64, f64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// CPU time (user + system) of the whole process so far, in seconds.
pub fn process_cpu_s() -> f64 {
    let (user_s, sys_s) = process_cpu_user_sys_s();
    user_s + sys_s
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

/// Bytes this process (all its threads, also ended ones) has caused to be
/// sent to storage: `write_bytes` of `/proc/self/io` (direct writes when
/// submitted, page-cache writes when dirtied). None where the kernel has
/// no task I/O accounting.
pub fn process_write_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|value| value.trim().parse().ok())
}

/// Bytes this process (all its threads, also ended ones) has caused to be
/// read from storage: `read_bytes` of `/proc/self/io` (direct reads and
/// page-cache misses alike, not page-cache hits). None where the kernel
/// has no task I/O accounting.
pub fn process_read_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("read_bytes:"))
        .and_then(|value| value.trim().parse().ok())
}

/// Resets the process's peak resident set size (`VmHWM`) to its current
/// one (`echo 5 > /proc/self/clear_refs`, Linux 4.0 and later); false
/// where that fails.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident set size of this process since it started or since the
/// last [`reset_peak_rss`] (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// Gives the memory the allocator holds free back to the kernel
/// (`malloc_trim(0)`, glibc), so that resident memory measured next is the
/// memory in use.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A `kB` field of `/proc/self/status`.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
}

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:").map_or(0, |kib| kib * 1024)
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

/// Sampling frequency of `perf record`, per thread (not a round number, so
/// that sampling does not run in lockstep with periodic work).
pub const PERF_FREQUENCY_HZ: u32 = 999;
/// Symbols kept in a [`Profile`].
pub const PROFILE_TOP: usize = 25;
/// How long `perf record` may take to start sampling (it reads every
/// thread's mappings first).
const PERF_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `perf record` may take to finish its file after SIGINT.
const PERF_STOP_TIMEOUT: Duration = Duration::from_secs(120);
/// Poll period while waiting for `perf record`.
const PERF_POLL_PERIOD: Duration = Duration::from_millis(10);
/// Most characters of perf's stderr quoted in an error.
const PERF_STDERR_CHARS_MAX: usize = 600;
/// Why there is no profile when the `perf` binary is missing.
const PERF_MISSING: &str =
    "perf not found: install linux-perf (Debian; linux-tools-$(uname -r) on Ubuntu)";

/// Where a process's CPU time went, from `perf record -e cpu-clock` samples.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// Samples taken (all threads of the process).
    pub samples: u64,
    /// Fraction of the samples in the kernel (`[k]` symbols), 0..1.
    pub kernel_share: f64,
    /// Fraction of the samples in user space (`[.]` symbols), 0..1.
    pub user_share: f64,
    /// The most sampled (shared object, symbol, fraction of the samples
    /// 0..1), largest first, at most [`PROFILE_TOP`].
    pub top: Vec<(String, String, f64)>,
}

/// A `perf record` sampling this process; [`PerfRecording::stop`] ends it.
pub struct PerfRecording {
    /// The perf process.
    child: Child,
    /// Collects perf's stderr (a thread, so that a full pipe never blocks perf).
    stderr: std::thread::JoinHandle<String>,
    /// The perf.data file.
    path: PathBuf,
}

impl PerfRecording {
    /// Starts `perf record -e cpu-clock -F 999` (no call graph) writing
    /// `path`, on the cores this process is pinned to (`-a -C`, when it is
    /// pinned to some of the cores and perf may sample whole CPUs) or else
    /// on this process (`-p`), and returns once perf samples: perf starts
    /// with its events disabled and enables them when told through a
    /// control FIFO, after it has read this process's threads and mappings,
    /// and acknowledges (perf ≥ 5.10). perf samples every thread, also those
    /// created later; it runs on the cores this process is not pinned to, if
    /// there are any. Err: why perf cannot sample (not installed, not
    /// permitted, failed or too slow to start).
    pub fn start(path: &Path) -> Result<Self, String> {
        check_perf_permitted()?;
        let _ = std::fs::remove_file(path);
        let fifos = ControlFifos::create()?;
        let mut command = Command::new("perf");
        command
            .args(["record", "-e", "cpu-clock", "-F"])
            .arg(PERF_FREQUENCY_HZ.to_string());
        match pinned_cores_to_sample() {
            // Per-CPU events on the cores the process is pinned to: unlike
            // per-thread events (`-p`), they add no work to every context
            // switch, which would slow thread-per-request engines more than
            // flashtree. `perf_report` keeps this process's samples.
            Some(cores) => command.arg("-a").arg("-C").arg(cores),
            None => command.arg("-p").arg(std::process::id().to_string()),
        };
        command
            .arg("-o")
            .arg(path)
            .args(["--quiet", "--no-buildid-cache", "--delay=-1"])
            .arg(format!(
                "--control=fifo:{},{}",
                fifos.ctl_path.display(),
                fifos.ack_path.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(others) = cores_outside_own_affinity() {
            // SAFETY: the closure runs in the forked child before exec; it only
            // calls sched_setaffinity (a plain, async-signal-safe system call)
            // on a cpu_set_t copied into the closure, and allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &others);
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PERF_MISSING.to_string(),
            _ => format!("cannot start perf: {e}"),
        })?;
        let pipe = child.stderr.take();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        });
        let mut recording = PerfRecording {
            child,
            stderr,
            path: path.to_path_buf(),
        };
        match fifos.enable(&mut recording.child) {
            Ok(()) => Ok(recording),
            Err(error) => {
                let _ = recording.child.kill();
                let status = recording.child.wait();
                let stderr = recording.stderr.join().unwrap_or_default();
                Err(match (error, status) {
                    (Some(error), _) => error,
                    (None, Ok(status)) => perf_failure("perf record", status, &stderr),
                    (None, Err(error)) => format!("waiting for perf record: {error}"),
                })
            }
        }
    }

    /// Stops sampling (SIGINT, as perf expects) and waits until perf has
    /// finished the file. Err: perf's exit status and stderr.
    pub fn stop(mut self) -> Result<(), String> {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill touches no memory; pid is our child, not yet waited
        // for (start returns Err if it exited), so it cannot have been reused.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + PERF_STOP_TIMEOUT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(PERF_POLL_PERIOD),
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break Err(format!(
                        "perf record did not stop within {} s of SIGINT",
                        PERF_STOP_TIMEOUT.as_secs()
                    ));
                }
                Err(error) => break Err(format!("waiting for perf record: {error}")),
            }
        };
        let stderr = self.stderr.join().unwrap_or_default();
        let status = status?;
        // perf record ends itself with the SIGINT it got, once the file is written.
        let stopped = status.success() || status.signal() == Some(libc::SIGINT);
        let written = std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0);
        if stopped && written {
            Ok(())
        } else {
            Err(perf_failure("perf record", status, &stderr))
        }
    }
}

/// The FIFOs through which `perf record --control` is told to enable its
/// events and acknowledges; removed on drop (perf keeps its descriptors).
struct ControlFifos {
    /// Commands to perf.
    ctl_path: PathBuf,
    /// perf's acknowledgements.
    ack_path: PathBuf,
}

impl ControlFifos {
    /// Makes two new FIFOs in the temporary directory.
    fn create() -> Result<Self, String> {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("flashtree-perf-{}-{n}", std::process::id()));
        let fifos = ControlFifos {
            ctl_path: base.with_extension("ctl"),
            ack_path: base.with_extension("ack"),
        };
        for path in [&fifos.ctl_path, &fifos.ack_path] {
            let _ = std::fs::remove_file(path);
            let name = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| format!("bad FIFO path {}", path.display()))?;
            // SAFETY: name is a valid NUL-terminated string that outlives the call.
            if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
                let error = std::io::Error::last_os_error();
                return Err(format!("cannot make FIFO {}: {error}", path.display()));
            }
        }
        Ok(fifos)
    }

    /// Tells perf (the `child`) to enable its events and waits for its
    /// acknowledgement. Err(None): perf exited (its status says why).
    fn enable(&self, child: &mut Child) -> Result<(), Option<String>> {
        // Read and write, so that opening a FIFO never waits for perf.
        let open = |path: &Path, flags: i32| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(path)
                .map_err(|e| Some(format!("cannot open {}: {e}", path.display())))
        };
        let mut ctl = open(&self.ctl_path, 0)?;
        let mut ack = open(&self.ack_path, libc::O_NONBLOCK)?;
        // Waits in the FIFO until perf, ready, reads its commands.
        ctl.write_all(b"enable\n")
            .map_err(|e| Some(format!("cannot write to perf's control FIFO: {e}")))?;
        let deadline = Instant::now() + PERF_START_TIMEOUT;
        let mut reply = Vec::new();
        loop {
            let mut buffer = [0u8; 64];
            match ack.read(&mut buffer) {
                Ok(length) => reply.extend_from_slice(&buffer[..length]),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(Some(format!("reading perf's acknowledgement: {error}"))),
            }
            if reply.windows(3).any(|w| w == b"ack") {
                return Ok(());
            }
            match child.try_wait() {
                Ok(Some(_)) => return Err(None),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(PERF_POLL_PERIOD),
                Ok(None) => {
                    return Err(Some(format!(
                        "perf record did not start sampling within {} s",
                        PERF_START_TIMEOUT.as_secs()
                    )))
                }
                Err(error) => return Err(Some(format!("waiting for perf record: {error}"))),
            }
        }
    }
}

impl Drop for ControlFifos {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ctl_path);
        let _ = std::fs::remove_file(&self.ack_path);
    }
}

/// Err when perf may not sample this process with kernel symbols: not root
/// and kernel.perf_event_paranoid > 1.
fn check_perf_permitted() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let file = "/proc/sys/kernel/perf_event_paranoid";
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let level: i32 = text
        .trim()
        .parse()
        .map_err(|_| format!("unexpected {file}: {text:?}"))?;
    if level > 1 {
        return Err(format!(
            "not profiled: kernel.perf_event_paranoid is {level} and we are not root; \
             run as root or `sysctl kernel.perf_event_paranoid=1`"
        ));
    }
    Ok(())
}

/// The CPUs this thread is not pinned to (None: it may run on all of them,
/// or they are unknown).
/// The cores this process is pinned to, as a perf CPU list ("0,1"), when
/// they are fewer than all cores and perf may sample whole CPUs (root, or
/// perf_event_paranoid <= 0); None otherwise.
fn pinned_cores_to_sample() -> Option<String> {
    cores_outside_own_affinity()?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok());
    if !root && paranoid.is_none_or(|level| level > 0) {
        return None;
    }
    let own = own_affinity()?;
    let cores: Vec<String> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu < CPU_SETSIZE; own is a valid cpu_set_t.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &own) })
        .map(|cpu| cpu.to_string())
        .collect();
    (!cores.is_empty()).then(|| cores.join(","))
}

/// The cores this thread may run on (None if the kernel does not say).
fn own_affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data.
    let mut own: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a cpu_set_t of the given size.
    let code =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut own) };
    (code == 0).then_some(own)
}

/// The cores this thread may not run on (None: it may run on all).
fn cores_outside_own_affinity() -> Option<libc::cpu_set_t> {
    let own = own_affinity()?;
    // SAFETY: sysconf has no preconditions.
    let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let configured = configured.clamp(1, libc::CPU_SETSIZE as libc::c_long) as usize;
    // SAFETY: cpu_set_t is plain data.
    let mut others: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut count = 0;
    for cpu in 0..configured {
        // SAFETY: cpu < CPU_SETSIZE; both sets are valid cpu_set_t.
        unsafe {
            if !libc::CPU_ISSET(cpu, &own) {
                libc::CPU_SET(cpu, &mut others);
                count += 1;
            }
        }
    }
    (count > 0).then_some(others)
}

/// "`what` failed (status): the end of stderr".
fn perf_failure(what: &str, status: std::process::ExitStatus, stderr: &str) -> String {
    let stderr = stderr.trim();
    let skip = stderr.chars().count().saturating_sub(PERF_STDERR_CHARS_MAX);
    let tail: String = stderr.chars().skip(skip).collect();
    let message = if tail.is_empty() { "no message" } else { &tail };
    format!("{what} failed ({status}): {}", message.replace('\n', " / "))
}

/// Runs `perf report --stdio --no-children --sort dso,sym --show-nr-samples`
/// on a file written by [`PerfRecording`] and parses it (every line, no
/// percent limit, so that the kernel and user shares cover all samples).
pub fn perf_report(path: &Path) -> Result<Profile, String> {
    let output = Command::new("perf")
        .arg("report")
        .arg("-i")
        .arg(path)
        .args([
            "--stdio",
            "--no-children",
            "--sort",
            "dso,sym",
            "--show-nr-samples",
            "--percentage",
            "relative",
        ])
        .arg(format!("--pid={}", std::process::id()))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => PERF_MISSING.to_string(),
            _ => format!("cannot start perf report: {e}"),
        })?;
    if !output.status.success() {
        return Err(perf_failure(
            "perf report",
            output.status,
            &String::from_utf8_lossy(&output.stderr),
        ));
    }
    parse_perf_report(&String::from_utf8_lossy(&output.stdout))
        .map_err(|e| format!("{e} (perf report -i {})", path.display()))
}

/// Parses the output of `perf report --stdio --no-children --sort dso,sym
/// --show-nr-samples`: lines `  10.31%  53  [kernel.kallsyms]  [k] symbol`
/// (`[k]` kernel, `[.]` user space); lines starting with '#' are headers.
/// Lines with the same shared object and symbol are added up.
pub fn parse_perf_report(text: &str) -> Result<Profile, String> {
    let mut entries: Vec<(String, String, u64)> = Vec::new();
    let (mut kernel_samples, mut user_samples, mut samples) = (0u64, 0u64, 0u64);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((dso, kind, symbol, count)) = parse_perf_line(line) else {
            continue;
        };
        samples += count;
        match kind {
            "[k]" => kernel_samples += count,
            "[.]" => user_samples += count,
            _ => {}
        }
        // Same name twice (e.g. two instances of a generic function): one entry.
        match entries.iter_mut().find(|e| e.0 == dso && e.1 == symbol) {
            Some(entry) => entry.2 += count,
            None => entries.push((dso.to_string(), symbol.to_string(), count)),
        }
    }
    if samples == 0 {
        return Err("no samples in perf report's output".into());
    }
    // Stable: ties keep perf's order.
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.2));
    let share = |count: u64| count as f64 / samples as f64;
    Ok(Profile {
        samples,
        kernel_share: share(kernel_samples),
        user_share: share(user_samples),
        top: entries
            .into_iter()
            .take(PROFILE_TOP)
            .map(|(dso, symbol, count)| (dso, symbol, share(count)))
            .collect(),
    })
}

/// One report line: (dso, `[k]`/`[.]`/..., symbol, samples); None: not one.
fn parse_perf_line(line: &str) -> Option<(&str, &str, &str, u64)> {
    let (percent, rest) = split_token(line);
    percent.strip_suffix('%')?.parse::<f64>().ok()?;
    let (count, rest) = split_token(rest);
    let count: u64 = count.parse().ok()?;
    let (dso, rest) = split_token(rest);
    let (kind, symbol) = split_token(rest);
    let is_kind = kind.len() == 3 && kind.starts_with('[') && kind.ends_with(']');
    (is_kind && !dso.is_empty()).then(|| (dso, kind, symbol.trim(), count))
}

/// The first whitespace-separated token of `text` and the rest after it.
fn split_token(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    text.split_at(text.find(char::is_whitespace).unwrap_or(text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_resident_memory_resets_to_the_current_one() {
        if !reset_peak_rss() {
            eprintln!("skipped: /proc/self/clear_refs cannot reset the peak here");
            return;
        }
        let grown = 64usize << 20;
        let block = vec![1u8; grown];
        std::hint::black_box(&block);
        let peak = peak_rss_bytes().unwrap();
        assert!(peak >= grown as u64, "{peak}");
        drop(block);
        release_free_memory();
        assert!(reset_peak_rss());
        let after = peak_rss_bytes().unwrap();
        assert!(
            after + (grown as u64) / 2 <= peak,
            "peak {after} after the reset, {peak} before"
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("128MiB").unwrap(), 128 << 20);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("1.5GiB").unwrap(), 3 << 29);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
    }

    /// Captured from `perf record -e cpu-clock -F 999 -- flashtree iobench
    /// --size 256MiB --seconds 2` and `perf report --stdio --no-children
    /// --sort dso,sym --show-nr-samples` (a selection of its lines; the
    /// header's column padding and the C++ symbol are shortened).
    const PERF_REPORT_SAMPLE: &str = "\
# To display the perf.data header info, please use --header/--header-only options.
#
#
# Total Lost Samples: 0
#
# Samples: 514  of event 'cpu-clock'
# Event count (approx.): 514514514
#
# Overhead       Samples  Shared Object         Symbol
# ........  ............  ....................  ..............................
#
    10.31%            53  [kernel.kallsyms]     [k] _raw_spin_unlock_irqrestore
     4.28%            22  [kernel.kallsyms]     [k] finish_task_switch.isra.0
     3.31%            17  [kernel.kallsyms]     [k] blk_mq_submit_bio
     0.97%             5  flashtree             [.] hdrhistogram::Histogram<T>::record_n_inner
     0.97%             5  libc.so.6             [.] syscall
     0.78%             4  flashtree             [.] flashtree::io::channel::IoChannel::push
     0.58%             3  [kernel.kallsyms]     [k] __pv_queued_spin_lock_slowpath
     0.19%             1  flashtree             [.] <std::sys::pal::unix::time::Timespec>::sub_timespec
     0.19%             1  ld-linux-x86-64.so.2  [.] do_lookup_x
     0.19%             1  librocksdb.so.7.8.3   [.] std::_Hashtable<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >::clear


#
# (Tip: To show IPC for sampling periods use perf record -e '{cycles,instructions}:S' and then browse context)
#
";

    #[test]
    fn perf_report_parses() {
        let profile = parse_perf_report(PERF_REPORT_SAMPLE).unwrap();
        // Kernel 53 + 22 + 17 + 3, user 5 + 5 + 4 + 1 + 1 + 1.
        assert_eq!(profile.samples, 112);
        assert!((profile.kernel_share - 95.0 / 112.0).abs() < 1e-12);
        assert!((profile.user_share - 17.0 / 112.0).abs() < 1e-12);
        assert_eq!(profile.top.len(), 10);
        let (dso, symbol, share) = &profile.top[0];
        assert_eq!(
            (dso.as_str(), symbol.as_str()),
            ("[kernel.kallsyms]", "_raw_spin_unlock_irqrestore")
        );
        assert!((share - 53.0 / 112.0).abs() < 1e-12);
        let order: Vec<&str> = profile.top.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(
            &order[..7],
            [
                "_raw_spin_unlock_irqrestore",
                "finish_task_switch.isra.0",
                "blk_mq_submit_bio",
                "hdrhistogram::Histogram<T>::record_n_inner",
                "syscall",
                "flashtree::io::channel::IoChannel::push",
                "__pv_queued_spin_lock_slowpath",
            ]
        );
        assert!(profile.top.windows(2).all(|w| w[0].2 >= w[1].2));
        let (dso, symbol, _) = &profile.top[9];
        assert_eq!(dso, "librocksdb.so.7.8.3");
        assert!(symbol.starts_with("std::_Hashtable<std::__cxx11::basic_string<char, std::"));
        assert!(symbol.ends_with("> >::clear"));
    }

    #[test]
    fn perf_report_adds_up_names_keeps_the_largest_and_rejects_nothing_sampled() {
        let mut text = String::from("# Overhead  Samples  Shared Object  Symbol\n");
        for i in 0..40u64 {
            // Ascending, so that the parser must sort.
            text += &format!("  1.00%  {}  app  [.] f{i}\n", i + 1);
        }
        text += "  0.50%  100  app  [.] f0\n";
        let profile = parse_perf_report(&text).unwrap();
        assert_eq!(profile.top.len(), PROFILE_TOP);
        assert_eq!(profile.top[0].1, "f0");
        assert!((profile.top[0].2 - 101.0 / 920.0).abs() < 1e-12);
        assert_eq!(profile.top[1].1, "f39");
        assert_eq!(profile.kernel_share, 0.0);
        assert!((profile.user_share - 1.0).abs() < 1e-12);
        assert!(parse_perf_report("# Samples: 0\n#\n").is_err());
    }

    /// Needs perf and root (or kernel.perf_event_paranoid <= 1):
    /// `cargo test -p flashtree-peers -- --ignored perf_samples`.
    #[test]
    #[ignore]
    fn perf_samples_threads_started_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("test.perf.data");
        let recording = PerfRecording::start(&path).unwrap();
        let started = Instant::now();
        let spinner = std::thread::spawn(move || {
            let mut x = 1u64;
            while started.elapsed() < Duration::from_secs(1) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            x
        });
        spinner.join().unwrap();
        recording.stop().unwrap();
        let profile = perf_report(&path).unwrap();
        // 1 s of CPU at 999 Hz; most of it in user space.
        assert!(profile.samples > 800, "{profile:?}");
        assert!(profile.user_share > 0.8, "{profile:?}");
    }

    #[test]
    fn cores_parse() {
        assert_eq!(parse_cores("0").unwrap(), vec![0]);
        assert_eq!(parse_cores("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("x").is_err());
    }
}
