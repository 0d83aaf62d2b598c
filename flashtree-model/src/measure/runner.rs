//! Runs one trial: k streams for a fixed time, on one io_uring channel (k
//! requests in flight, one thread) or on k OS threads with blocking I/O.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use flashtree::io::{
    AlignedBuf, BackendKind, IoChannel, IoCompletion, IoConfig, IoRequest, Storage, PAGE_SIZE,
};

use super::measure_error;
use super::stream::{Request, Stream};
use crate::error::{ModelError, Result};
use crate::grid::{GridPoint, Op};

/// How the k streams are driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One thread, k requests in flight on one io_uring channel.
    IoUring,
    /// k OS threads, each with one blocking request at a time.
    Threads,
}

impl Backend {
    /// The name recorded in the grid.
    pub fn name(self) -> &'static str {
        match self {
            Backend::IoUring => "io_uring",
            Backend::Threads => "threads",
        }
    }
}

/// One cell of the grid.
#[derive(Clone, Debug)]
pub struct TrialSpec {
    /// Reads or writes.
    pub op: Op,
    /// Concurrent streams.
    pub k: u32,
    /// Share of page accesses that start a random run.
    pub random_fraction: f64,
    /// Streams stop issuing requests after this time.
    pub trial_time: Duration,
    /// Largest request (and the I/O layer's chunk).
    pub request_bytes_max: u32,
    /// Seed of the streams' offsets.
    pub seed: u64,
}

impl TrialSpec {
    fn streams(&self, storage: &Storage) -> Vec<Stream> {
        let page_bytes = PAGE_SIZE as u64;
        let file_pages = storage.capacity_bytes() / page_bytes;
        let run_pages = (1.0 / self.random_fraction).round().max(1.0) as u64;
        let request_pages_max = u64::from(self.request_bytes_max) / page_bytes;
        (0..self.k)
            .map(|i| {
                Stream::new(
                    i,
                    self.k,
                    file_pages,
                    run_pages,
                    request_pages_max,
                    page_bytes,
                    self.seed,
                )
            })
            .collect()
    }
}

/// Runs one trial and returns its grid point.
pub fn run_trial(storage: &Arc<Storage>, spec: &TrialSpec, backend: Backend) -> Result<GridPoint> {
    let (elapsed, streams) = match backend {
        Backend::IoUring => run_async(storage, spec)?,
        Backend::Threads => run_threads(storage, spec)?,
    };
    let pages_total: u64 = streams.iter().map(|s| s.pages_requested).sum();
    let runs_total: u64 = streams.iter().map(|s| s.runs_started).sum();
    Ok(GridPoint {
        op: spec.op,
        k: spec.k,
        pages_total,
        runs_total,
        elapsed_s: elapsed.as_secs_f64(),
        random_fraction_target: Some(spec.random_fraction),
    })
}

/// A buffer per stream, filled with a non-zero pattern so that writes are
/// not compressible zeros.
fn stream_buffers(count: u32, len_bytes: u32) -> Vec<AlignedBuf> {
    (0..count)
        .map(|i| {
            let mut buf = AlignedBuf::new(len_bytes as usize);
            for (j, byte) in buf.iter_mut().enumerate() {
                *byte = (j as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(i)
                    .to_le_bytes()[3];
            }
            buf
        })
        .collect()
}

fn request_of(op: Op, request: Request, buf: &mut AlignedBuf, user_data: u64) -> IoRequest {
    match op {
        Op::Read => IoRequest::read(
            request.offset_bytes,
            buf.as_mut_ptr(),
            request.len_bytes,
            user_data,
        ),
        Op::Write => IoRequest::write(
            request.offset_bytes,
            buf.as_ptr(),
            request.len_bytes,
            user_data,
        ),
    }
}

/// Pushes the next request of stream `index`.
fn push_next(
    channel: &mut IoChannel,
    op: Op,
    stream: &mut Stream,
    buf: &mut AlignedBuf,
    index: usize,
) -> Result<()> {
    let request = request_of(op, stream.next_request(), buf, index as u64);
    // SAFETY: `buf` is owned by the trial, outlives the channel's use of it
    // (every accepted request is reaped before the buffers are dropped), and
    // is used by exactly one request at a time: the stream pushes its next
    // request only after the previous one completed.
    unsafe { channel.push(request) }.map_err(|e| ModelError::Measure(e.to_string()))
}

fn check(completion: &IoCompletion) -> Result<()> {
    completion
        .result
        .as_ref()
        .map(|_| ())
        .map_err(|e| ModelError::Measure(e.to_string()))
}

/// k requests in flight on one io_uring channel, one thread.
fn run_async(storage: &Arc<Storage>, spec: &TrialSpec) -> Result<(Duration, Vec<Stream>)> {
    let config = IoConfig {
        backend: BackendKind::IoUring,
        depth: spec.k,
        register_buffers: false,
        // The model is of the device at k requests in flight.
        max_submitted: Some(0),
        ..IoConfig::default()
    };
    let mut channel = IoChannel::new(Arc::clone(storage), &config).map_err(measure_error)?;
    let mut streams = spec.streams(storage);
    let mut buffers = stream_buffers(spec.k, spec.request_bytes_max);
    let mut completions: Vec<IoCompletion> = Vec::with_capacity(spec.k as usize);
    let start = Instant::now();
    let deadline = start + spec.trial_time;
    for (index, (stream, buf)) in streams.iter_mut().zip(&mut buffers).enumerate() {
        push_next(&mut channel, spec.op, stream, buf, index)?;
    }
    channel.submit().map_err(measure_error)?;
    let mut failure = None;
    while channel.in_flight() > 0 {
        completions.clear();
        channel.wait(1, &mut completions).map_err(measure_error)?;
        let issuing = failure.is_none() && Instant::now() < deadline;
        for completion in &completions {
            if let Err(error) = check(completion) {
                failure.get_or_insert(error);
                continue;
            }
            if issuing {
                let index = completion.user_data as usize;
                if let Err(error) = push_next(
                    &mut channel,
                    spec.op,
                    &mut streams[index],
                    &mut buffers[index],
                    index,
                ) {
                    failure.get_or_insert(error);
                }
            }
        }
        channel.submit().map_err(measure_error)?;
    }
    let elapsed = start.elapsed();
    drop(channel);
    match failure {
        Some(error) => Err(error),
        None => Ok((elapsed, streams)),
    }
}

/// k OS threads, each with its own synchronous channel and one request at a
/// time.
fn run_threads(storage: &Arc<Storage>, spec: &TrialSpec) -> Result<(Duration, Vec<Stream>)> {
    let streams = spec.streams(storage);
    let buffers = stream_buffers(spec.k, spec.request_bytes_max);
    let barrier = Barrier::new(spec.k as usize + 1);
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .into_iter()
            .zip(buffers)
            .enumerate()
            .map(|(index, (stream, buf))| {
                let barrier = &barrier;
                scope.spawn(move || thread_stream(storage, spec, stream, buf, index, barrier))
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ModelError::Measure("a stream thread panicked".into())))
            })
            .collect();
        (start.elapsed(), results)
    });
    let (elapsed, results) = results;
    let streams = results.into_iter().collect::<Result<Vec<_>>>()?;
    Ok((elapsed, streams))
}

fn thread_stream(
    storage: &Arc<Storage>,
    spec: &TrialSpec,
    mut stream: Stream,
    mut buf: AlignedBuf,
    index: usize,
    barrier: &Barrier,
) -> Result<Stream> {
    let config = IoConfig {
        backend: BackendKind::Sync,
        depth: 1,
        ..IoConfig::default()
    };
    let channel = IoChannel::new(Arc::clone(storage), &config);
    barrier.wait();
    let mut channel = channel.map_err(measure_error)?;
    let deadline = Instant::now() + spec.trial_time;
    let mut completions = Vec::with_capacity(1);
    while Instant::now() < deadline {
        push_next(&mut channel, spec.op, &mut stream, &mut buf, index)?;
        completions.clear();
        channel.wait(1, &mut completions).map_err(measure_error)?;
        completions.iter().try_for_each(check)?;
    }
    Ok(stream)
}
