//! Writes the whole file once before measuring: reads of preallocated but
//! never-written extents are answered by the file system without touching
//! the device, and would make reads look free.

use std::sync::Arc;
use std::time::Duration;

use flashtree::io::{
    AlignedBuf, BackendKind, IoChannel, IoCompletion, IoConfig, IoRequest, Storage,
};
use indicatif::{ProgressBar, ProgressStyle};

use super::measure_error;
use crate::error::{ModelError, Result};

/// Requests in flight while filling.
const FILL_DEPTH: u32 = 16;

/// Writes every byte of the storage sequentially, `request_bytes` at a time.
pub fn fill(storage: &Arc<Storage>, request_bytes: u32) -> Result<()> {
    let capacity_bytes = storage.capacity_bytes();
    let config = IoConfig {
        backend: BackendKind::IoUring,
        depth: FILL_DEPTH,
        register_buffers: false,
        ..IoConfig::default()
    };
    let mut channel = IoChannel::new(Arc::clone(storage), &config).map_err(measure_error)?;
    let mut buf = AlignedBuf::new(request_bytes as usize);
    buf.iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i % 251) as u8 + 1);
    let progress = ProgressBar::new(capacity_bytes);
    progress.set_style(
        ProgressStyle::with_template("filling {bar:40} {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    progress.enable_steady_tick(Duration::from_millis(200));
    let mut next_offset = 0u64;
    let mut completions: Vec<IoCompletion> = Vec::new();
    let mut failure = None;
    loop {
        while failure.is_none() && next_offset < capacity_bytes && channel.free() > 0 {
            // SAFETY: every request only reads `buf`, which outlives the
            // channel (dropped below before `buf`); concurrent reads of the
            // same bytes are fine.
            let pushed = unsafe {
                channel.push(IoRequest::write(
                    next_offset,
                    buf.as_ptr(),
                    request_bytes,
                    0,
                ))
            };
            if let Err(error) = pushed {
                failure = Some(ModelError::Measure(error.to_string()));
                break;
            }
            next_offset += u64::from(request_bytes);
        }
        if channel.in_flight() == 0 {
            break;
        }
        completions.clear();
        channel.wait(1, &mut completions).map_err(measure_error)?;
        for completion in &completions {
            match &completion.result {
                Ok(()) => progress.inc(u64::from(request_bytes)),
                Err(error) => {
                    failure.get_or_insert(ModelError::Measure(error.to_string()));
                }
            }
        }
    }
    drop(channel);
    progress.finish();
    failure.map_or(Ok(()), Err)
}
