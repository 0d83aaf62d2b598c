//! `flashtree iobench`: the engine's own I/O benchmark (Haas & Leis (VLDB 2023) §2.5).
//!
//! Each thread owns one [`IoChannel`] on a shared RAID0 [`Storage`] and keeps
//! `depth` requests in flight: fill free slots, submit the batch with one
//! syscall, reap. Latency is split as in Xu et al. (SYSTOR 2015): *submission* is from the
//! moment a request is queued until the batch's submit call returns;
//! *completion* is from then until the completion is reaped. CPU time is
//! the process's user+system time from getrusage.

use crate::plot::{line_panels, Panel, Series};
use crate::util::{parse_list, parse_size_bytes, progress_bar, usage_error};
use flashtree::io::{
    AlignedBuf, BackendKind, IoChannel, IoConfig, IoRequest, Storage, StorageConfig,
    DIRECT_IO_ALIGN,
};
use flashtree_peers::sys::process_cpu_s;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `flashtree iobench`. A comma-separated list sweeps a value.
#[derive(clap::Args, Debug)]
pub struct IobenchArgs {
    /// File(s) or block device(s), comma-separated (RAID0 over several).
    #[arg(long, default_value = "flashtree-iobench.dat")]
    pub path: String,
    /// Total bytes to address; files are created and fully written first.
    #[arg(long, default_value = "8GiB")]
    pub size: String,
    /// randread, randwrite, read, write or mixed.
    #[arg(long, default_value = "randread")]
    pub pattern: String,
    /// For `mixed`: percent of reads.
    #[arg(long, default_value = "90")]
    pub read_pct: String,
    /// Block size(s) in bytes (multiples of 512), e.g. 4096 or 512,4096,65536.
    #[arg(long, default_value = "4096")]
    pub block: String,
    /// Requests in flight per thread, e.g. 128 or 1,4,16,64,256.
    #[arg(long, default_value = "128")]
    pub depth: String,
    /// Requests per submit syscall at most (0: one submit per loop), e.g.
    /// 4 or 1,4,16,1000.
    #[arg(long, default_value = "4")]
    pub batch: String,
    /// Threads, each with its own channel.
    #[arg(long, default_value = "1")]
    pub threads: String,
    /// io_uring, libaio or sync (a list compares them).
    #[arg(long, default_value = "io_uring")]
    pub backend: String,
    /// Seconds per point.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// RAID0 stripe unit.
    #[arg(long, default_value = "64KiB")]
    pub chunk: String,
    /// io_uring completion polling: off, on, auto.
    #[arg(long, default_value = "off")]
    pub iopoll: String,
    /// io_uring submission polling thread: off, on, auto.
    #[arg(long, default_value = "off")]
    pub sqpoll: String,
    /// Use the page cache instead of O_DIRECT.
    #[arg(long)]
    pub buffered: bool,
    /// Where the sweep plot goes.
    #[arg(long, default_value = "results")]
    pub out_dir: PathBuf,
    /// One JSON object per point on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also run fio with the same settings on the same file right after each
    /// point (io_uring→io_uring, libaio→libaio, sync→psync) and print the ratio.
    #[arg(long)]
    pub vs_fio: bool,
}

/// The kind of access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Uniform random reads.
    RandRead,
    /// Uniform random writes.
    RandWrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniform random, `read_pct` percent reads.
    Mixed,
}

impl Pattern {
    fn parse(s: &str) -> Result<Pattern, String> {
        Ok(match s {
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "mixed" | "randrw" => Pattern::Mixed,
            _ => {
                return Err(format!(
                    "unknown pattern '{s}' (randread, randwrite, read, write, mixed)"
                ))
            }
        })
    }

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::Mixed => "mixed",
        }
    }

    fn random(self) -> bool {
        matches!(
            self,
            Pattern::RandRead | Pattern::RandWrite | Pattern::Mixed
        )
    }
}

/// One measured configuration.
#[derive(Clone, Debug)]
pub struct PointSpec {
    /// Kernel interface.
    pub backend: BackendKind,
    /// Access pattern.
    pub pattern: Pattern,
    /// Percent reads (mixed only).
    pub read_pct: u32,
    /// Bytes per request.
    pub block_bytes: u32,
    /// In flight per thread.
    pub depth: u32,
    /// Requests per submit at most.
    pub batch: u32,
    /// Threads.
    pub threads: u32,
    /// Duration.
    pub seconds: f64,
}

/// What one point measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PointResult {
    /// Backend name.
    pub backend: String,
    /// Pattern name.
    pub pattern: String,
    /// Percent reads.
    pub read_pct: u32,
    /// Bytes per request.
    pub block: u32,
    /// In flight per thread.
    pub depth: u32,
    /// Requests per submit at most.
    pub batch: u32,
    /// Threads.
    pub threads: u32,
    /// Completed requests per second.
    pub iops: f64,
    /// MiB per second.
    pub mib_s: f64,
    /// Total latency percentiles (µs).
    pub lat_us_p50: f64,
    /// 99th percentile (µs).
    pub lat_us_p99: f64,
    /// 99.9th percentile (µs).
    pub lat_us_p999: f64,
    /// Submission latency: queued until the submit call returned (µs).
    pub submit_lat_us_p50: f64,
    /// Submission latency p99 (µs).
    pub submit_lat_us_p99: f64,
    /// Completion latency: submitted until reaped (µs).
    pub complete_lat_us_p50: f64,
    /// Completion latency p99 (µs).
    pub complete_lat_us_p99: f64,
    /// User+system CPU seconds of the process during the point.
    pub cpu_s: f64,
    /// CPU µs per completed request.
    pub cpu_us_per_io: f64,
    /// Measured seconds.
    pub seconds: f64,
    /// Completed requests.
    pub ios: u64,
    /// Notes from the I/O layer (fallbacks, probes).
    pub notes: Vec<String>,
}

struct Sweep {
    paths: Vec<PathBuf>,
    size_bytes: u64,
    chunk_bytes: u64,
    direct: bool,
    io_config: IoConfig,
    points: Vec<PointSpec>,
    swept: Option<&'static str>,
}

/// Runs `flashtree iobench`.
pub fn run(args: IobenchArgs) -> Result<(), String> {
    let sweep = parse_args(&args)?;
    prepare_files(
        &sweep.paths,
        sweep.size_bytes,
        sweep.chunk_bytes,
        !args.json,
    )?;
    let mut storage_config = StorageConfig::new(sweep.paths.clone());
    storage_config.chunk_bytes = sweep.chunk_bytes;
    storage_config.direct = sweep.direct;
    storage_config.min_capacity_bytes = sweep.size_bytes;
    let storage = Arc::new(Storage::open(&storage_config).map_err(|e| e.to_string())?);
    let mut results = Vec::new();
    if !args.json {
        print_header();
    }
    for spec in &sweep.points {
        let mut io_config = sweep.io_config.clone();
        io_config.backend = spec.backend;
        io_config.depth = spec.depth;
        io_config.submit_batch = spec.batch;
        // `--batch` and `--depth` are exact here: no busy-device deferral
        // and no submission limit (as fio).
        io_config.submit_busy_depth = 0;
        io_config.max_submitted = Some(0);
        let result = run_point(&storage, sweep.size_bytes, &io_config, spec)?;
        emit(&result, args.json)?;
        if args.vs_fio {
            let fio = crate::fio::run_fio(&sweep.paths, sweep.size_bytes, spec, sweep.direct)?;
            emit(&fio, args.json)?;
            let ratio = result.iops / fio.iops.max(1e-9);
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"compare": "flashtree/fio", "backend": result.backend, "depth": spec.depth, "block": spec.block_bytes, "iops_ratio": ratio, "cpu_us_per_io_flashtree": result.cpu_us_per_io, "cpu_us_per_io_fio": fio.cpu_us_per_io})
                );
            } else {
                println!("  flashtree/fio IOPS ratio: {ratio:.3}   CPU µs/io: flashtree {:.2}, fio {:.2}", result.cpu_us_per_io, fio.cpu_us_per_io);
            }
        }
        results.push(result);
    }
    if let Some(param) = sweep.swept {
        let path = plot_sweep(&args.out_dir, param, &results)?;
        if !args.json {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}

fn parse_args(args: &IobenchArgs) -> Result<Sweep, String> {
    let bad = |e: String| usage_error(e);
    let paths: Vec<PathBuf> = parse_list(&args.path, |s| Ok(PathBuf::from(s))).map_err(bad)?;
    let size_bytes = parse_size_bytes(&args.size).map_err(bad)?;
    let chunk_bytes = parse_size_bytes(&args.chunk).map_err(bad)?;
    let patterns = parse_list(&args.pattern, Pattern::parse).map_err(bad)?;
    let read_pcts =
        parse_list(&args.read_pct, |s| parse_bounded(s, 0, 100, "read-pct")).map_err(bad)?;
    let blocks = parse_list(&args.block, |s| {
        let b = parse_size_bytes(s)?;
        if b == 0 || b % DIRECT_IO_ALIGN as u64 != 0 || b > 16 << 20 {
            return Err(format!(
                "block size {b} must be a positive multiple of 512 up to 16 MiB"
            ));
        }
        Ok(b as u32)
    })
    .map_err(bad)?;
    let depths = parse_list(&args.depth, |s| parse_bounded(s, 1, 4096, "depth")).map_err(bad)?;
    let batches = parse_list(&args.batch, |s| parse_bounded(s, 0, 65536, "batch")).map_err(bad)?;
    let threads =
        parse_list(&args.threads, |s| parse_bounded(s, 1, 1024, "threads")).map_err(bad)?;
    let backends = parse_list(&args.backend, |s| s.parse::<BackendKind>()).map_err(bad)?;
    if !(args.seconds > 0.0 && args.seconds <= 86400.0) {
        return Err(bad("--seconds must be in (0, 86400]".into()));
    }
    if size_bytes < chunk_bytes * paths.len() as u64 {
        return Err(bad(format!(
            "--size {size_bytes} is smaller than one stripe ({} × {chunk_bytes} bytes)",
            paths.len()
        )));
    }
    if let Some(b) = blocks
        .iter()
        .find(|&&b| u64::from(b) > chunk_bytes || chunk_bytes % u64::from(b) != 0)
    {
        return Err(bad(format!(
            "block {b} must divide the RAID0 chunk {chunk_bytes} (raise --chunk)"
        )));
    }
    let lists = [
        ("pattern", patterns.len()),
        ("read-pct", read_pcts.len()),
        ("block", blocks.len()),
        ("depth", depths.len()),
        ("batch", batches.len()),
        ("threads", threads.len()),
    ];
    let swept: Vec<&'static str> = lists
        .iter()
        .filter(|(_, n)| *n > 1)
        .map(|(name, _)| *name)
        .collect();
    if swept.len() > 1 {
        return Err(bad(format!(
            "sweep one value at a time (lists given for {}); a backend list may be combined",
            swept.join(", ")
        )));
    }
    let mut points = Vec::new();
    for &backend in &backends {
        for &pattern in &patterns {
            for &read_pct in &read_pcts {
                for &block_bytes in &blocks {
                    for &depth in &depths {
                        for &batch in &batches {
                            for &t in &threads {
                                points.push(PointSpec {
                                    backend,
                                    pattern,
                                    read_pct,
                                    block_bytes,
                                    depth,
                                    batch,
                                    threads: t,
                                    seconds: args.seconds,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    let io_config = IoConfig {
        iopoll: args
            .iopoll
            .parse()
            .map_err(|e| bad(format!("--iopoll: {e}")))?,
        sqpoll: args
            .sqpoll
            .parse()
            .map_err(|e| bad(format!("--sqpoll: {e}")))?,
        ..IoConfig::default()
    };
    let swept = swept.first().copied().or(if backends.len() > 1 {
        Some("backend")
    } else {
        None
    });
    Ok(Sweep {
        paths,
        size_bytes,
        chunk_bytes,
        direct: !args.buffered,
        io_config,
        points,
        swept,
    })
}

fn parse_bounded(s: &str, lo: u32, hi: u32, name: &str) -> Result<u32, String> {
    let v: u32 = s
        .parse()
        .map_err(|_| format!("{name} '{s}' is not a whole number"))?;
    if v < lo || v > hi {
        return Err(format!("{name} {v} out of range {lo}..={hi}"));
    }
    Ok(v)
}

/// Creates missing files and writes every byte of the addressed range that
/// the file does not have yet, so that reads reach the device (ext4 answers
/// reads of fallocated-but-unwritten extents without I/O).
pub fn prepare_files(
    paths: &[PathBuf],
    size_bytes: u64,
    chunk_bytes: u64,
    show_progress: bool,
) -> Result<(), String> {
    let stripe = chunk_bytes * paths.len() as u64;
    let per_device_bytes = size_bytes.div_ceil(stripe) * chunk_bytes;
    let mut missing = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).ok();
        if meta.as_ref().is_some_and(|m| !m.is_file()) {
            continue; // block devices are used as they are
        }
        let have = meta.map_or(0, |m| m.len());
        if have < per_device_bytes {
            missing.push((path.clone(), have / chunk_bytes * chunk_bytes));
        }
    }
    let total: u64 = missing
        .iter()
        .map(|(_, have)| per_device_bytes - have)
        .sum();
    if total == 0 {
        return Ok(());
    }
    let bar = if show_progress {
        progress_bar(total, "writing file")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut buf = AlignedBuf::new(1 << 20);
    rand::rngs::SmallRng::seed_from_u64(7).fill(&mut buf[..]);
    for (path, have) in missing {
        write_range(&path, have, per_device_bytes, &buf, &bar)?;
    }
    bar.finish_and_clear();
    Ok(())
}

fn write_range(
    path: &Path,
    from: u64,
    to: u64,
    buf: &AlignedBuf,
    bar: &indicatif::ProgressBar,
) -> Result<(), String> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut offset = from;
    while offset < to {
        let len = (to - offset).min(buf.len() as u64) as usize;
        file.write_all_at(&buf[..len], offset)
            .map_err(|e| format!("writing {} at offset {offset}: {e}", path.display()))?;
        offset += len as u64;
        bar.inc(len as u64);
    }
    file.sync_all()
        .map_err(|e| format!("syncing {}: {e}", path.display()))
}

/// Per-thread tallies.
struct ThreadStats {
    ios: u64,
    total: Histogram<u64>,
    submit: Histogram<u64>,
    complete: Histogram<u64>,
    notes: Vec<String>,
}

/// Runs one point on all threads and gathers the result.
pub fn run_point(
    storage: &Arc<Storage>,
    size_bytes: u64,
    io_config: &IoConfig,
    spec: &PointSpec,
) -> Result<PointResult, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let cpu_before = process_cpu_s();
    let start = Instant::now();
    let handles: Vec<_> = (0..spec.threads)
        .map(|thread| {
            let (storage, io_config, spec) = (storage.clone(), io_config.clone(), spec.clone());
            let (stop, completed) = (stop.clone(), completed.clone());
            std::thread::spawn(move || {
                run_thread(
                    &storage, size_bytes, &io_config, &spec, thread, &stop, &completed,
                )
            })
        })
        .collect();
    show_progress_until(spec, start, &stop, &completed);
    stop.store(true, Ordering::Release);
    let mut stats = Vec::new();
    for handle in handles {
        stats.push(
            handle
                .join()
                .map_err(|_| "benchmark thread panicked".to_string())??,
        );
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu_before;
    Ok(summarize(spec, stats, seconds, cpu_s))
}

fn show_progress_until(spec: &PointSpec, start: Instant, stop: &AtomicBool, completed: &AtomicU64) {
    let bar = progress_bar(
        (spec.seconds * 10.0) as u64,
        &format!("{} qd{}", spec.backend, spec.depth),
    );
    let deadline = start + Duration::from_secs_f64(spec.seconds);
    while Instant::now() < deadline && !stop.load(Ordering::Acquire) {
        std::thread::sleep(
            Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())),
        );
        let elapsed = start.elapsed().as_secs_f64();
        bar.set_position((elapsed * 10.0) as u64);
        bar.set_message(format!(
            "{:.0} IOPS",
            completed.load(Ordering::Relaxed) as f64 / elapsed
        ));
    }
    bar.finish_and_clear();
}

fn run_thread(
    storage: &Arc<Storage>,
    size_bytes: u64,
    io_config: &IoConfig,
    spec: &PointSpec,
    thread: u32,
    stop: &AtomicBool,
    completed: &AtomicU64,
) -> Result<ThreadStats, String> {
    let depth = spec.depth as usize;
    let block = spec.block_bytes as usize;
    // The region is declared before the channel so it outlives it.
    let mut region = AlignedBuf::new(depth * block);
    let mut channel = IoChannel::new(storage.clone(), io_config).map_err(|e| e.to_string())?;
    // SAFETY: `region` is dropped after `channel` (declared earlier).
    unsafe { channel.register_buffers(&[(region.as_mut_ptr(), region.len())]) };
    let base = region.as_mut_ptr();
    let mut gen = OffsetGen::new(spec, size_bytes, thread);
    let mut queued_at = vec![Instant::now(); depth];
    let mut submitted_at = vec![Instant::now(); depth];
    let mut free: Vec<usize> = (0..depth).collect();
    let mut done = Vec::with_capacity(depth);
    let new_hist =
        || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let mut stats = ThreadStats {
        ios: 0,
        total: new_hist(),
        submit: new_hist(),
        complete: new_hist(),
        notes: channel.notes().to_vec(),
    };
    let mut batch: Vec<usize> = Vec::with_capacity(depth);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while let Some(slot) = free.pop() {
            let (offset, is_read) = gen.next();
            // SAFETY: slot `slot` of `region` is used by this request only
            // until its completion (it returns to `free` after reaping).
            let buf = unsafe { base.add(slot * block) };
            let req = if is_read {
                IoRequest::read(offset, buf, block as u32, slot as u64)
            } else {
                IoRequest::write(offset, buf, block as u32, slot as u64)
            };
            // SAFETY: region outlives the channel; the slot is exclusive.
            unsafe { channel.push(req) }.map_err(|e| e.to_string())?;
            queued_at[slot] = now;
            batch.push(slot);
        }
        channel.submit().map_err(|e| e.to_string())?;
        let after_submit = Instant::now();
        for slot in batch.drain(..) {
            submitted_at[slot] = after_submit;
            let _ = stats.submit.record(nanos(after_submit - queued_at[slot]));
        }
        done.clear();
        channel.wait(1, &mut done).map_err(|e| e.to_string())?;
        let reaped = Instant::now();
        for c in &done {
            c.result.as_ref().map_err(|e| e.to_string())?;
            let slot = c.user_data as usize;
            let _ = stats.complete.record(nanos(reaped - submitted_at[slot]));
            let _ = stats.total.record(nanos(reaped - queued_at[slot]));
            free.push(slot);
        }
        stats.ios += done.len() as u64;
        completed.fetch_add(done.len() as u64, Ordering::Relaxed);
    }
    drop(channel);
    drop(region);
    Ok(stats)
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().max(1) as u64
}

/// Offsets of one thread: uniform random over the whole range, or sequential
/// over the thread's own share.
struct OffsetGen {
    rng: rand::rngs::SmallRng,
    random: bool,
    read_pct: u32,
    pattern: crate::iobench::Pattern,
    blocks: u64,
    block_bytes: u64,
    seq_first: u64,
    seq_count: u64,
    seq_next: u64,
}

impl OffsetGen {
    fn new(spec: &PointSpec, size_bytes: u64, thread: u32) -> OffsetGen {
        let block_bytes = u64::from(spec.block_bytes);
        let blocks = (size_bytes / block_bytes).max(1);
        let share = (blocks / u64::from(spec.threads)).max(1);
        OffsetGen {
            rng: rand::rngs::SmallRng::seed_from_u64(0x5eed + u64::from(thread)),
            random: spec.pattern.random(),
            read_pct: spec.read_pct,
            pattern: spec.pattern,
            blocks,
            block_bytes,
            seq_first: (share * u64::from(thread)).min(blocks - 1),
            seq_count: share,
            seq_next: 0,
        }
    }

    /// The next (offset, is_read).
    fn next(&mut self) -> (u64, bool) {
        let block = if self.random {
            self.rng.random_range(0..self.blocks)
        } else {
            let b = self.seq_first + self.seq_next;
            self.seq_next = (self.seq_next + 1) % self.seq_count;
            b.min(self.blocks - 1)
        };
        let is_read = match self.pattern {
            Pattern::RandRead | Pattern::Read => true,
            Pattern::RandWrite | Pattern::Write => false,
            Pattern::Mixed => self.rng.random_range(0..100) < self.read_pct,
        };
        (block * self.block_bytes, is_read)
    }
}

fn summarize(spec: &PointSpec, stats: Vec<ThreadStats>, seconds: f64, cpu_s: f64) -> PointResult {
    let mut merged = stats.into_iter();
    let mut first = merged.next().expect("at least one thread");
    for s in merged {
        first.ios += s.ios;
        let _ = first.total.add(&s.total);
        let _ = first.submit.add(&s.submit);
        let _ = first.complete.add(&s.complete);
    }
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let iops = first.ios as f64 / seconds;
    PointResult {
        backend: spec.backend.name().to_string(),
        pattern: spec.pattern.name().to_string(),
        read_pct: if spec.pattern == Pattern::Mixed {
            spec.read_pct
        } else if matches!(spec.pattern, Pattern::RandRead | Pattern::Read) {
            100
        } else {
            0
        },
        block: spec.block_bytes,
        depth: spec.depth,
        batch: spec.batch,
        threads: spec.threads,
        iops,
        mib_s: iops * f64::from(spec.block_bytes) / (1 << 20) as f64,
        lat_us_p50: us(&first.total, 0.5),
        lat_us_p99: us(&first.total, 0.99),
        lat_us_p999: us(&first.total, 0.999),
        submit_lat_us_p50: us(&first.submit, 0.5),
        submit_lat_us_p99: us(&first.submit, 0.99),
        complete_lat_us_p50: us(&first.complete, 0.5),
        complete_lat_us_p99: us(&first.complete, 0.99),
        cpu_s,
        cpu_us_per_io: if first.ios > 0 {
            cpu_s * 1e6 / first.ios as f64
        } else {
            0.0
        },
        seconds,
        ios: first.ios,
        notes: first.notes,
    }
}

fn emit(result: &PointResult, json: bool) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string(result).map_err(|e| e.to_string())?
        );
    } else {
        print_row(result);
    }
    Ok(())
}

fn print_header() {
    println!(
        "{:<9} {:<9} {:>6} {:>5} {:>3} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
        "backend",
        "pattern",
        "block",
        "depth",
        "thr",
        "IOPS",
        "MiB/s",
        "lat p50",
        "lat p99",
        "p99.9",
        "submit50",
        "cmplt50",
        "cpu s",
        "cpu µs/io"
    );
    let _ = std::io::stdout().flush();
}

fn print_row(r: &PointResult) {
    println!(
        "{:<9} {:<9} {:>6} {:>5} {:>3} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7.2} {:>8.2}",
        r.backend, r.pattern, r.block, r.depth, r.threads, r.iops, r.mib_s, r.lat_us_p50, r.lat_us_p99, r.lat_us_p999, r.submit_lat_us_p50, r.complete_lat_us_p50, r.cpu_s, r.cpu_us_per_io
    );
    for note in &r.notes {
        println!("  note: {note}");
    }
    let _ = std::io::stdout().flush();
}

fn plot_sweep(out_dir: &Path, param: &str, results: &[PointResult]) -> Result<PathBuf, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let path = out_dir.join(format!("iobench-{param}.png"));
    let x_of = |r: &PointResult| -> f64 {
        match param {
            "block" => f64::from(r.block),
            "threads" => f64::from(r.threads),
            "batch" => f64::from(r.batch),
            "read-pct" => f64::from(r.read_pct),
            _ => f64::from(r.depth),
        }
    };
    let mut backends: Vec<&str> = results.iter().map(|r| r.backend.as_str()).collect();
    backends.dedup();
    let series = |value: &dyn Fn(&PointResult) -> f64, suffix: &str| -> Vec<Series> {
        backends
            .iter()
            .map(|b| Series {
                label: format!("{b}{suffix}"),
                points: results
                    .iter()
                    .filter(|r| r.backend == *b)
                    .map(|r| (x_of(r), value(r)))
                    .collect(),
            })
            .collect()
    };
    let mut latency = series(&|r| r.lat_us_p50, " p50");
    latency.extend(series(&|r| r.lat_us_p99, " p99"));
    let panels = [
        Panel {
            title: "Throughput".into(),
            y_label: "IOPS".into(),
            series: series(&|r| r.iops, ""),
        },
        Panel {
            title: "Latency".into(),
            y_label: "µs".into(),
            series: latency,
        },
    ];
    let log2 = matches!(param, "block" | "depth" | "threads");
    let x = if param == "backend" { "depth" } else { param };
    line_panels(&path, x, log2, &panels)?;
    Ok(path)
}
