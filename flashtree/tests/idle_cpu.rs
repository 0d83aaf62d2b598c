//! An open store with nothing to do uses no CPU: its workers sleep until a
//! job or a wake arrives (issue 15). The one test of this binary, so that no
//! other test's threads run meanwhile.
//!
//! It measures CPU time, not speed: a worker that polls (a busy loop, or a
//! timer that wakes it every few microseconds) fails it on any machine.

use flashtree::db::{Db, Options};
use std::path::Path;
use std::time::Duration;

/// How long the store is left idle while its threads' CPU time is measured.
const IDLE: Duration = Duration::from_secs(2);
/// The most CPU the store's threads may use while idle: 1 % of one core.
const MAX_SHARE_OF_A_CORE: f64 = 0.01;

/// CPU nanoseconds of thread `tid` of this process: the scheduler's run
/// time (`/proc/self/task/<tid>/schedstat`, in ns); where the kernel has no
/// schedstat, user + system time from `stat` (in clock ticks). None if the
/// thread is gone.
fn thread_cpu_ns(task: &Path) -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string(task.join("schedstat")) {
        return text.split_whitespace().next()?.parse().ok();
    }
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    // The name (field 2) may hold spaces: fields after its ')' are
    // state (3), ..., utime (14), stime (15).
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks_per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks_per_sec = u64::try_from(ticks_per_sec).ok().filter(|&t| t > 0)?;
    Some(ticks * 1_000_000_000 / ticks_per_sec)
}

/// (name, CPU ns) of every thread of this process but the calling one:
/// the store's workers, the kernel's io_uring helpers if any, the test
/// harness's (idle) main thread.
fn other_threads_cpu_ns() -> Vec<(String, u64)> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() }.to_string();
    let mut threads = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let Ok(entry) = entry else { continue };
        if entry.file_name().to_string_lossy() == me {
            continue;
        }
        let task = entry.path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if let Some(cpu_ns) = thread_cpu_ns(&task) {
            threads.push((
                format!("{} {}", entry.file_name().to_string_lossy(), name.trim()),
                cpu_ns,
            ));
        }
    }
    threads
}

fn total_ns(threads: &[(String, u64)]) -> u64 {
    threads.iter().map(|(_, ns)| ns).sum()
}

#[test]
fn idle_store_uses_no_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let workers = 2;
    let db = Db::open(
        dir.path(),
        Options {
            pool_bytes: 64 * 4096,
            workers,
            wal_bytes_per_worker: 4 << 20,
            checkpoint_log_bytes: 1 << 20,
            ..Options::default()
        },
    )
    .unwrap();
    // Some durable writes first (a log on each worker, evictions from the
    // 64-page pool, checkpoints), so that the idle store is one that
    // has worked, not only a fresh one.
    let tree = db.tree("main").unwrap();
    for round in 0u64..30 {
        let replies: Vec<_> = (round * 100..round * 100 + 100)
            .map(|i| {
                db.put_async(tree, &(i * 7919 % 3_000).to_be_bytes(), &[i as u8; 200])
                    .unwrap()
            })
            .collect();
        for reply in replies {
            reply.wait().unwrap();
        }
    }
    let stats = db.stats();
    eprintln!("{stats:?}");
    assert!(stats.page_writes > 0, "the writes must exceed the pool");
    // What the writes left to finish (a checkpoint, a log flush, on a busy
    // machine slowly) finishes: wait until a 100 ms window passes in which
    // the threads use no CPU, at most 5 s (a store that polls never
    // settles, and then fails below).
    let mut before = other_threads_cpu_ns();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = other_threads_cpu_ns();
        let settled = total_ns(&now) == total_ns(&before);
        before = now;
        if settled {
            break;
        }
    }
    let worker_threads = before
        .iter()
        .filter(|(name, _)| name.contains("flashtree-w"))
        .count();
    assert_eq!(worker_threads, workers, "threads: {before:?}");
    std::thread::sleep(IDLE);
    let after = other_threads_cpu_ns();

    // Threads that came or went meanwhile count with all their time.
    let used: Vec<(String, u64)> = after
        .iter()
        .map(|(name, cpu_ns)| {
            let earlier = before.iter().find(|(n, _)| n == name).map_or(0, |b| b.1);
            (name.clone(), cpu_ns.saturating_sub(earlier))
        })
        .collect();
    let used_ns = total_ns(&used);
    let limit_ns = (IDLE.as_nanos() as f64 * MAX_SHARE_OF_A_CORE) as u64;
    assert!(
        used_ns < limit_ns,
        "an idle store's threads used {:.2} ms of CPU in {} ms (limit {:.2} ms, 1 % of a core): {used:?}",
        used_ns as f64 / 1e6,
        IDLE.as_millis(),
        limit_ns as f64 / 1e6,
    );
    eprintln!(
        "idle {} ms: the store's threads used {:.3} ms of CPU: {used:?}",
        IDLE.as_millis(),
        used_ns as f64 / 1e6
    );
    db.close().unwrap();
}
