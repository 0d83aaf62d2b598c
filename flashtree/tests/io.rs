//! The I/O layer through every backend and RAID0 width: data round trips and
//! every error path the issue names.

use flashtree::io::{
    AlignedBuf, BackendKind, IoChannel, IoCompletion, IoConfig, IoErrorKind, IoRequest, Storage,
    StorageConfig,
};
use std::sync::Arc;

const BACKENDS: [BackendKind; 3] = [BackendKind::IoUring, BackendKind::Libaio, BackendKind::Sync];
const PAGE: usize = 4096;

fn config(backend: BackendKind, depth: u32) -> IoConfig {
    IoConfig {
        backend,
        depth,
        ..IoConfig::default()
    }
}

fn storage(dir: &tempfile::TempDir, files: usize, capacity_bytes: u64) -> Arc<Storage> {
    let paths: Vec<_> = (0..files)
        .map(|i| dir.path().join(format!("dev{i}")))
        .collect();
    let mut cfg = StorageConfig::new(paths);
    cfg.chunk_bytes = 8192;
    cfg.min_capacity_bytes = capacity_bytes;
    Arc::new(Storage::open(&cfg).expect("open storage"))
}

/// Fills page `page` with a pattern derived from its number and a seed.
fn pattern(buf: &mut [u8], page: u64, seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (page as u8)
            .wrapping_mul(31)
            .wrapping_add(i as u8)
            .wrapping_add(seed);
    }
}

/// Writes `pages` pages (pattern with `seed`) through `channel`, all in flight at once.
fn write_pages(channel: &mut IoChannel, pages: u64, seed: u8) {
    let mut bufs: Vec<AlignedBuf> = (0..pages).map(|_| AlignedBuf::new(PAGE)).collect();
    let mut done = Vec::new();
    for (page, buf) in bufs.iter_mut().enumerate() {
        pattern(buf, page as u64, seed);
        // SAFETY: bufs lives until all completions are reaped below.
        unsafe {
            channel.push(IoRequest::write(
                page as u64 * PAGE as u64,
                buf.as_ptr(),
                PAGE as u32,
                page as u64,
            ))
        }
        .expect("push write");
    }
    while done.len() < pages as usize {
        channel.wait(1, &mut done).expect("wait");
    }
    for c in &done {
        c.result.as_ref().expect("write completes");
    }
}

/// Pushes a read of page `page` into `buf`, tagged with the page number.
///
/// # Safety
/// `buf` must stay allocated and untouched until the read's completion is
/// reaped.
unsafe fn push_read(channel: &mut IoChannel, page: u64, buf: &mut AlignedBuf) {
    // SAFETY: forwarded to the caller.
    unsafe {
        channel.push(IoRequest::read(
            page * PAGE as u64,
            buf.as_mut_ptr(),
            PAGE as u32,
            page,
        ))
    }
    .expect("push read");
}

/// Reads back all pages and checks them against the pattern.
fn check_pages(channel: &mut IoChannel, pages: u64, seed: u8) {
    let mut bufs: Vec<AlignedBuf> = (0..pages).map(|_| AlignedBuf::new(PAGE)).collect();
    let mut done: Vec<IoCompletion> = Vec::new();
    for (page, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: bufs lives until all completions are reaped below.
        unsafe { push_read(channel, page as u64, buf) };
    }
    while done.len() < pages as usize {
        channel.wait(1, &mut done).expect("wait");
    }
    let mut seen: Vec<u64> = done.iter().map(|c| c.user_data).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..pages).collect::<Vec<_>>(),
        "every request completes exactly once"
    );
    let mut expected = vec![0u8; PAGE];
    for c in &done {
        c.result.as_ref().expect("read completes");
        pattern(&mut expected, c.user_data, seed);
        assert!(
            bufs[c.user_data as usize][..] == expected[..],
            "page {} differs",
            c.user_data
        );
    }
}

#[test]
fn read_your_writes_every_backend_and_raid_width() {
    for backend in BACKENDS {
        for files in 1..=4 {
            let dir = tempfile::tempdir().unwrap();
            let storage = storage(&dir, files, 64 * PAGE as u64);
            let mut channel = IoChannel::new(storage.clone(), &config(backend, 64)).unwrap();
            write_pages(&mut channel, 64, files as u8);
            check_pages(&mut channel, 64, files as u8);
            // Pages really are striped: each file holds its share.
            for i in 0..files {
                let len = std::fs::metadata(storage.device_path(i)).unwrap().len();
                assert!(
                    len >= (64 * PAGE / files) as u64,
                    "{backend} file {i} too small: {len}"
                );
            }
        }
    }
}

#[test]
fn pattern_written_by_one_backend_reads_back_with_every_other() {
    for writer in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 2, 32 * PAGE as u64);
        write_pages(
            &mut IoChannel::new(storage.clone(), &config(writer, 32)).unwrap(),
            32,
            7,
        );
        for reader in BACKENDS {
            check_pages(
                &mut IoChannel::new(storage.clone(), &config(reader, 8))
                    .unwrap_or_else(|e| panic!("{reader}: {e}")),
                8,
                7,
            );
        }
    }
}

#[test]
fn writing_through_a_read_only_store_reports_the_offset() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        drop(storage(&dir, 1, 16 * PAGE as u64));
        let mut cfg = StorageConfig::new([dir.path().join("dev0")]);
        cfg.read_only = true;
        let storage = Arc::new(Storage::open(&cfg).unwrap());
        let mut channel = IoChannel::new(storage, &config(backend, 4)).unwrap();
        let buf = AlignedBuf::new(PAGE);
        // SAFETY: buf outlives the completion.
        unsafe {
            channel.push(IoRequest::write(
                3 * PAGE as u64,
                buf.as_ptr(),
                PAGE as u32,
                99,
            ))
        }
        .unwrap();
        let mut done = Vec::new();
        channel.wait(1, &mut done).unwrap();
        assert_eq!(
            done.len(),
            1,
            "{backend}: the refused write still completes"
        );
        let err = done[0]
            .result
            .as_ref()
            .expect_err("write to read-only file must fail");
        assert_eq!(done[0].user_data, 99);
        assert_eq!(err.kind, IoErrorKind::Os(libc::EBADF), "{backend}");
        let message = err.to_string();
        assert!(
            message.contains("offset 12288") && message.contains("dev0"),
            "{backend}: {message}"
        );
    }
}

#[test]
fn reading_past_the_end_is_reported() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 1, 4 * PAGE as u64);
        let mut channel = IoChannel::new(storage.clone(), &config(backend, 4)).unwrap();
        let mut buf = AlignedBuf::new(PAGE);
        let past_end = storage.capacity_bytes() + 16 * PAGE as u64;
        // SAFETY: buf outlives the completion.
        unsafe { channel.push(IoRequest::read(past_end, buf.as_mut_ptr(), PAGE as u32, 1)) }
            .unwrap();
        let mut done = Vec::new();
        channel.wait(1, &mut done).unwrap();
        let err = done[0]
            .result
            .as_ref()
            .expect_err("read past the end must fail");
        assert_eq!(err.kind, IoErrorKind::Short { done_bytes: 0 }, "{backend}");
        assert!(err.to_string().contains("past the end"), "{err}");
    }
}

#[test]
fn misaligned_buffers_offsets_and_lengths_are_refused() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 1, 4 * PAGE as u64);
        let mut channel = IoChannel::new(storage, &config(backend, 4)).unwrap();
        let mut buf = AlignedBuf::new(2 * PAGE);
        // SAFETY: refused requests are never queued; buf outlives the calls.
        let odd_ptr =
            unsafe { channel.push(IoRequest::read(0, buf.as_mut_ptr().add(1), PAGE as u32, 1)) };
        assert_eq!(odd_ptr.unwrap_err().kind, IoErrorKind::Misaligned);
        // SAFETY: as above.
        let odd_offset =
            unsafe { channel.push(IoRequest::read(100, buf.as_mut_ptr(), PAGE as u32, 1)) };
        assert_eq!(odd_offset.unwrap_err().kind, IoErrorKind::Misaligned);
        // SAFETY: as above.
        let odd_len = unsafe { channel.push(IoRequest::read(0, buf.as_mut_ptr(), 1000, 1)) };
        assert_eq!(odd_len.unwrap_err().kind, IoErrorKind::Misaligned);
        assert_eq!(channel.in_flight(), 0, "refused requests hold no slot");
    }
}

/// A read of several pages may span stripe chunks on one data device
/// (they lie in order there) and reads back what page writes wrote; with
/// several devices it is refused.
#[test]
fn multi_page_reads_span_chunks_only_on_one_device() {
    for backend in BACKENDS {
        for files in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            let storage = storage(&dir, files, 8 * PAGE as u64);
            let mut channel = IoChannel::new(storage, &config(backend, 8)).unwrap();
            write_pages(&mut channel, 6, 9);
            // Pages 1..5: chunks of 2 pages, so the read spans three.
            let mut buf = AlignedBuf::new(4 * PAGE);
            // SAFETY: buf outlives the completion (waited for below), and a
            // refused request is never queued.
            let pushed = unsafe {
                channel.push(IoRequest::read(
                    PAGE as u64,
                    buf.as_mut_ptr(),
                    4 * PAGE as u32,
                    7,
                ))
            };
            if files > 1 {
                assert_eq!(
                    pushed.unwrap_err().kind,
                    IoErrorKind::Misaligned,
                    "{backend}"
                );
                continue;
            }
            pushed.unwrap();
            let mut done = Vec::new();
            channel.wait(1, &mut done).unwrap();
            done[0].result.as_ref().unwrap();
            let mut want = vec![0u8; PAGE];
            for page in 1..5u64 {
                pattern(&mut want, page, 9);
                let at = (page as usize - 1) * PAGE;
                assert!(buf[at..at + PAGE] == want[..], "{backend}: page {page}");
            }
        }
    }
}

#[test]
fn a_full_channel_refuses_and_every_accepted_request_completes_once() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 1, 8 * PAGE as u64);
        let mut bufs: Vec<AlignedBuf> = (0..5).map(|_| AlignedBuf::new(PAGE)).collect();
        let mut channel = IoChannel::new(storage, &config(backend, 4)).unwrap();
        for (i, buf) in bufs.iter_mut().enumerate().take(4) {
            // SAFETY: bufs outlives all completions.
            unsafe {
                channel.push(IoRequest::read(
                    i as u64 * PAGE as u64,
                    buf.as_mut_ptr(),
                    PAGE as u32,
                    i as u64,
                ))
            }
            .unwrap();
        }
        // SAFETY: refused, never queued.
        let fifth =
            unsafe { channel.push(IoRequest::read(0, bufs[4].as_mut_ptr(), PAGE as u32, 4)) };
        assert_eq!(fifth.unwrap_err().kind, IoErrorKind::QueueFull, "{backend}");
        let mut done = Vec::new();
        while channel.in_flight() > 0 {
            channel.wait(1, &mut done).unwrap();
        }
        let mut ids: Vec<u64> = done.iter().map(|c| c.user_data).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1, 2, 3], "{backend}");
    }
}

#[test]
fn a_batch_with_a_refused_request_loses_no_completion() {
    // Reads and writes mixed on a read-only store: the kernel refuses the
    // writes (libaio at io_submit time, io_uring per request); every request
    // still produces exactly one completion with its own user_data.
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        drop(storage(&dir, 1, 64 * 1024));
        let mut cfg = StorageConfig::new([dir.path().join("dev0")]);
        cfg.read_only = true;
        let storage = Arc::new(Storage::open(&cfg).unwrap());
        // Buffers are declared before the channel so that they outlive it
        // even when a failed assertion unwinds (the channel's drop waits).
        let mut bufs: Vec<AlignedBuf> = (0..8).map(|_| AlignedBuf::new(PAGE)).collect();
        let mut channel = IoChannel::new(storage, &config(backend, 8)).unwrap();
        for (i, buf) in bufs.iter_mut().enumerate() {
            let offset = i as u64 * PAGE as u64;
            let req = if i % 2 == 0 {
                IoRequest::read(offset, buf.as_mut_ptr(), PAGE as u32, i as u64)
            } else {
                IoRequest::write(offset, buf.as_ptr(), PAGE as u32, i as u64)
            };
            // SAFETY: bufs outlives all completions.
            unsafe { channel.push(req) }.unwrap();
        }
        let mut done = Vec::new();
        while channel.in_flight() > 0 {
            channel.wait(1, &mut done).unwrap();
        }
        assert_eq!(done.len(), 8, "{backend}");
        for c in &done {
            assert_eq!(
                c.result.is_ok(),
                c.user_data % 2 == 0,
                "{backend}: request {}",
                c.user_data
            );
        }
    }
}

#[test]
fn syncs_go_through_the_channel() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 3, 8 * PAGE as u64);
        let mut channel = IoChannel::new(storage.clone(), &config(backend, 8)).unwrap();
        write_pages(&mut channel, 6, 1);
        for device in 0..storage.device_count() {
            // SAFETY: syncs carry no buffer.
            unsafe { channel.push(IoRequest::sync(device, device % 2 == 0, device as u64)) }
                .unwrap();
        }
        let mut done = Vec::new();
        while channel.in_flight() > 0 {
            channel.wait(1, &mut done).unwrap();
        }
        assert!(done.iter().all(|c| c.result.is_ok()), "{backend}");
        // SAFETY: refused, never queued.
        let bad = unsafe { channel.push(IoRequest::sync(7, false, 0)) };
        assert_eq!(bad.unwrap_err().kind, IoErrorKind::OutOfRange);
    }
}

#[test]
fn registered_buffers_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(&dir, 2, 16 * PAGE as u64);
    let mut channel = IoChannel::new(storage, &config(BackendKind::IoUring, 16)).unwrap();
    let mut region = AlignedBuf::new(16 * PAGE);
    // SAFETY: region outlives the channel (dropped after it below).
    let registered = unsafe { channel.register_buffers(&[(region.as_mut_ptr(), region.len())]) };
    assert!(registered, "notes: {:?}", channel.notes());
    for page in 0..16 {
        pattern(&mut region[page * PAGE..(page + 1) * PAGE], page as u64, 3);
    }
    let base = region.as_mut_ptr();
    let mut done = Vec::new();
    for page in 0..16u64 {
        // SAFETY: region outlives the completions.
        unsafe {
            channel.push(IoRequest::write(
                page * PAGE as u64,
                base.add(page as usize * PAGE),
                PAGE as u32,
                page,
            ))
        }
        .unwrap();
    }
    while channel.in_flight() > 0 {
        channel.wait(1, &mut done).unwrap();
    }
    assert!(done.iter().all(|c| c.result.is_ok()));
    check_pages(&mut channel, 16, 3);
    drop(channel);
    drop(region);
}

#[test]
fn bad_storage_configurations_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StorageConfig::new([dir.path().join("a")]);
    cfg.chunk_bytes = 1000;
    assert!(Storage::open(&cfg)
        .unwrap_err()
        .to_string()
        .contains("chunk size"));
    let cfg = StorageConfig::new([dir.path().join("a"), dir.path().join("a")]);
    assert!(Storage::open(&cfg)
        .unwrap_err()
        .to_string()
        .contains("listed twice"));
    let mut cfg = StorageConfig::new([dir.path().join("missing")]);
    cfg.create = false;
    assert!(Storage::open(&cfg)
        .unwrap_err()
        .to_string()
        .contains("missing"));
    let cfg = StorageConfig::new(Vec::<std::path::PathBuf>::new());
    assert!(Storage::open(&cfg).is_err());
}

#[test]
fn iopoll_on_a_device_without_poll_queues_is_named_or_falls_back() {
    use flashtree::io::Feature;
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(&dir, 1, 4 * PAGE as u64);
    let mut cfg = config(BackendKind::IoUring, 4);
    cfg.iopoll = Feature::Auto;
    let channel = IoChannel::new(storage.clone(), &cfg).expect("auto never fails for IOPOLL");
    let notes = channel.notes().join("; ");
    assert!(notes.contains("IOPOLL"), "auto says what it did: {notes}");
    drop(channel);
    cfg.iopoll = Feature::On;
    match IoChannel::new(storage, &cfg) {
        Ok(channel) => assert!(channel.notes().join(";").contains("IOPOLL enabled")),
        Err(e) => assert!(e.to_string().contains("IORING_SETUP_IOPOLL"), "{e}"),
    }
}

/// `push` submits batches of `submit_batch` by itself until
/// `submit_busy_depth` submitted requests are unfinished; then requests wait
/// for the caller's `submit` (or `wait`), and all of them complete.
#[test]
fn push_defers_submission_while_the_device_is_busy() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 1, 64 * PAGE as u64);
        let cfg = IoConfig {
            submit_batch: 1,
            submit_busy_depth: 3,
            ..config(backend, 16)
        };
        let mut channel = IoChannel::new(storage, &cfg).unwrap();
        let mut bufs: Vec<AlignedBuf> = (0..8).map(|_| AlignedBuf::new(PAGE)).collect();
        for (page, buf) in bufs.iter_mut().enumerate() {
            // SAFETY: bufs outlives every completion, all reaped below.
            unsafe { push_read(&mut channel, page as u64, buf) };
            // Nothing is reaped, so submitted requests stay unfinished.
            let expected_queued = (page + 1).saturating_sub(3);
            assert_eq!(
                channel.queued(),
                expected_queued,
                "{backend:?} after push {page}"
            );
        }
        let mut done = Vec::new();
        while done.len() < 8 {
            channel.wait(1, &mut done).expect("wait");
        }
        assert_eq!(channel.queued(), 0, "{backend:?}");
        let mut seen: Vec<u64> = done.iter().map(|c| c.user_data).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..8).collect::<Vec<u64>>(), "{backend:?}");
        for c in &done {
            c.result.as_ref().expect("read completes");
        }
    }
}

/// With `max_submitted`, at most that many requests are in the kernel at
/// once; the rest wait in the channel, go out as earlier ones are reaped,
/// and all complete with the right data. `wait` for more than can be
/// submitted returns what can complete instead of hanging.
#[test]
fn submissions_stay_within_max_submitted() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(&dir, 2, 64 * PAGE as u64);
        let cfg = IoConfig {
            submit_batch: 1,
            max_submitted: Some(3),
            ..config(backend, 16)
        };
        let mut channel = IoChannel::new(storage, &cfg).unwrap();
        write_pages(&mut channel, 10, 5);
        let mut bufs: Vec<AlignedBuf> = (0..10).map(|_| AlignedBuf::new(PAGE)).collect();
        for (page, buf) in bufs.iter_mut().enumerate() {
            // SAFETY: bufs outlives every completion, all reaped below.
            unsafe { push_read(&mut channel, page as u64, buf) };
            assert!(channel.submitted() <= 3, "{backend:?} after push {page}");
        }
        assert_eq!(channel.submitted(), 3, "{backend:?}");
        assert_eq!(channel.queued(), 7, "{backend:?}");
        let mut done = Vec::new();
        channel.wait(10, &mut done).expect("wait");
        assert!(
            (1..=3).contains(&done.len()),
            "{backend:?}: {} completions",
            done.len()
        );
        while done.len() < 10 {
            channel.submit().expect("submit");
            assert!(channel.submitted() <= 3, "{backend:?}");
            channel.wait(1, &mut done).expect("wait");
        }
        assert_eq!(channel.in_flight(), 0, "{backend:?}");
        for c in &done {
            c.result.as_ref().expect("read completes");
        }
        for (page, buf) in bufs.iter().enumerate() {
            let mut want = vec![0u8; PAGE];
            pattern(&mut want, page as u64, 5);
            // SAFETY: every read completed; nothing else writes the buffer.
            let got = unsafe { std::slice::from_raw_parts(buf.as_ptr(), PAGE) };
            assert!(got == &want[..], "{backend:?}: page {page} differs");
        }
    }
}

#[test]
fn dsync_writes_to_an_extra_file_round_trip_on_every_backend() {
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StorageConfig::new([dir.path().join("dev0")]);
        cfg.min_capacity_bytes = 8 * PAGE as u64;
        cfg.extra_files = vec![dir.path().join("log")];
        let storage = Arc::new(Storage::open(&cfg).expect("open storage"));
        let log = storage.data_device_count();
        storage.preallocate_file(log, 8 * PAGE as u64).unwrap();
        let mut channel = IoChannel::new(storage.clone(), &config(backend, 8)).unwrap();
        let mut bufs: Vec<AlignedBuf> = (0..4).map(|_| AlignedBuf::new(2 * PAGE)).collect();
        for (i, buf) in bufs.iter_mut().enumerate() {
            pattern(buf, i as u64, 9);
            let req = IoRequest::write_file_dsync(
                log,
                (2 * i * PAGE) as u64,
                buf.as_ptr(),
                2 * PAGE as u32,
                i as u64,
            );
            // SAFETY: `bufs` outlives the completions waited for below.
            unsafe { channel.push(req) }.unwrap();
        }
        let mut done: Vec<IoCompletion> = Vec::new();
        while channel.in_flight() > 0 {
            channel.wait(1, &mut done).unwrap();
        }
        assert_eq!(done.len(), 4, "{backend}");
        assert!(done.iter().all(|c| c.result.is_ok()), "{backend}: {done:?}");
        drop(channel);
        let bytes = std::fs::read(dir.path().join("log")).unwrap();
        for (i, buf) in bufs.iter().enumerate() {
            assert_eq!(
                &bytes[2 * i * PAGE..2 * (i + 1) * PAGE],
                &buf[..],
                "{backend}: write {i}"
            );
        }
    }
}

/// Each file carries the write-life hint of what is written to it (the
/// data medium, the extra files, which are the logs, short), and the
/// storage says what applied.
#[test]
fn files_carry_write_life_hints_by_what_they_hold() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log");
    let mut cfg = StorageConfig::new([data.clone()]);
    cfg.extra_files = vec![log.clone()];
    cfg.min_capacity_bytes = 1 << 20;
    let storage = Storage::open(&cfg).unwrap();
    let placement = storage.placement().to_string();
    if placement.starts_with("none (F_SET_RW_HINT refused") {
        eprintln!("skipped: the kernel refuses write-life hints here: {placement}");
        return;
    }
    assert!(
        placement.starts_with("per-file write-life hints"),
        "{placement}"
    );
    // F_GET_RW_HINT = F_LINUX_SPECIFIC_BASE (1024) + 11.
    let hint_of = |path: &std::path::Path| {
        let file = std::fs::File::open(path).unwrap();
        let mut hint: u64 = 0;
        // SAFETY: the fcntl writes one u64 into `hint`, which outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), 1035, &mut hint as *mut u64) };
        assert_eq!(rc, 0, "F_GET_RW_HINT: {}", std::io::Error::last_os_error());
        hint
    };
    // RWH_WRITE_LIFE_MEDIUM and RWH_WRITE_LIFE_SHORT.
    assert_eq!(hint_of(&data), 3);
    assert_eq!(hint_of(&log), 2);
}
