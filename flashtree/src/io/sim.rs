//! A deterministic simulated disk for crash tests: an in-memory file system
//! that knows which writes are durable, fails chosen operations and crashes.
//!
//! # Contract
//! * A [`SimDisk`] is a namespace of files (by path), shared as
//!   `Arc<SimDisk>`; one `Mutex` guards everything, so every call is atomic.
//!   Each file gets a [`SimFileId`] when first created, kept for the life of
//!   the disk (also across crashes). A removed file keeps working through its
//!   id, invisible, like an unlinked open file; a re-created path gets a new id.
//! * Each file has a *durable* image and a *volatile* image (what reads see).
//!   A write or `set_len` changes the volatile image at once (writes past EOF
//!   zero-fill the gap) and is remembered as a *pending* operation, in order,
//!   until [`SimDisk::sync`] of that file makes the volatile image durable
//!   ([`SimDisk::sync_range`]: only a range of it, as `RWF_DSYNC` does).
//! * [`SimDisk::crash`] resolves each file's pending operations with the
//!   seeded RNG: each write is kept (probability `keep_probability`), else
//!   torn (`tear_probability` of the rest: a random non-empty proper subset of
//!   its pieces split at 512-byte file offsets lands), else dropped. A
//!   `set_len` is kept with probability `keep_probability`. Surviving writes
//!   land in a random order, but never across a pending `set_len` (a
//!   barrier: writes issued before it land before it, those after, after it).
//!   Then volatile = durable, and every lock is released (the process died).
//! * Not modelled: metadata journaling beyond the above. Creation and removal
//!   of files are durable at once; no directories, permissions or sizes of
//!   devices. Sectors are atomic (a tear never splits a 512-byte sector).
//! * Every read, write, sync and set_len is an *operation* with an index
//!   (0-based, across all files, from creation of the disk; failed and
//!   refused ones count too). [`SimDisk::fail_op`] / [`SimDisk::fail_all_from`]
//!   make chosen operations fail with `EIO`. A failed operation changes
//!   nothing: a failed write leaves the volatile image as it was, a failed
//!   sync leaves the pending operations pending. `set_len` counts as a
//!   [`FaultKind::Write`]. Crashes reset neither the counter nor the faults.
//! * Errors are errno values (`i32`). Files are limited to
//!   [`MAX_FILE_BYTES`]: writes and `set_len` beyond fail with `EFBIG`.
//!   Reads past EOF are short (0 bytes at or past the end). An id not made
//!   by this disk is a programming error and panics.
//! * Deterministic: the same seed and the same calls in the same order
//!   give the same images (with several threads calling, their order is the
//!   scheduler's).

use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The atomic unit of the simulated device: a torn write lands whole
/// sectors (pieces between multiples of this file offset) or nothing.
pub const SECTOR_BYTES: u64 = 512;

/// The largest file the simulated disk holds (16 GiB); beyond, `EFBIG`.
pub const MAX_FILE_BYTES: u64 = 1 << 34;

/// How a [`SimDisk`] resolves crashes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimConfig {
    /// Seed of the RNG that decides every crash.
    pub seed: u64,
    /// Probability that a pending write (or set_len) survives a crash whole.
    pub keep_probability: f64,
    /// Of the writes not kept, the probability that they are torn rather
    /// than dropped.
    pub tear_probability: f64,
    /// The log is written the way it is through io_uring: plain writes,
    /// then an `fdatasync` of the log file once they completed (see
    /// [`super::IoChannel::log_writes_then_sync`]), instead of writes that
    /// are durable when they complete (`RWF_DSYNC`).
    pub log_writes_then_sync: bool,
    /// Bytes all files may hold together (the volatile lengths); a write
    /// or `set_len` past it fails with `ENOSPC`, as on a full file system.
    pub space_bytes: u64,
}

impl SimConfig {
    /// Defaults for `seed`: keep 0.5, tear 0.25 of the rest.
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            keep_probability: 0.5,
            tear_probability: 0.25,
            log_writes_then_sync: false,
            space_bytes: u64::MAX,
        }
    }
}

/// A file of a [`SimDisk`], stable for the life of the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SimFileId(pub u32);

/// Which operations an injected fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Reads.
    Read,
    /// Writes and `set_len`.
    Write,
    /// Syncs.
    Sync,
    /// Every operation.
    Any,
}

impl FaultKind {
    fn matches(self, op: FaultKind) -> bool {
        self == FaultKind::Any || self == op
    }
}

/// An unsynced operation of a file.
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

struct SimFile {
    path: PathBuf,
    durable: Vec<u8>,
    volatile: Vec<u8>,
    pending: Vec<Pending>,
}

/// How [`State::crash`] resolves pending operations.
#[derive(Clone, Copy)]
enum CrashMode {
    Random,
    KeepAll,
    DropAll,
}

struct State {
    config: SimConfig,
    rng: StdRng,
    files: Vec<SimFile>,
    names: BTreeMap<PathBuf, SimFileId>,
    locks: BTreeSet<PathBuf>,
    ops: u64,
    /// Injected faults: operations with an index in `start..end` of a kind.
    faults: Vec<(u64, u64, FaultKind)>,
    injected: u64,
    crashes: u64,
    /// With `Some`, the class of every write the storage makes through
    /// a channel or its raw writes: (file, offset, length, class).
    classes: Option<Vec<(SimFileId, u64, u64, super::WriteClass)>>,
}

/// The simulated disk: see the module documentation.
pub struct SimDisk {
    state: Mutex<State>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("SimDisk")
            .field("config", &s.config)
            .field("files", &s.names.len())
            .field("ops", &s.ops)
            .field("crashes", &s.crashes)
            .finish_non_exhaustive()
    }
}

/// `offset + len` as a file position in memory, or `EFBIG`.
fn end_of(offset: u64, len: usize) -> Result<usize, i32> {
    offset
        .checked_add(len as u64)
        .filter(|&end| end <= MAX_FILE_BYTES)
        .and_then(|end| usize::try_from(end).ok())
        .ok_or(libc::EFBIG)
}

/// Writes `data` at `offset` of `image`, zero-extending it (range checked).
fn write_at(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = end_of(offset, data.len()).expect("range checked when the write was issued");
    let start = end - data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

fn apply(image: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data } => write_at(image, *offset, data),
        Pending::SetLen(len) => image.resize(*len as usize, 0),
    }
}

/// What lands of a torn write: a random non-empty proper subset of its
/// pieces split at sector boundaries of the file offset (when it has two).
fn tear(rng: &mut StdRng, offset: u64, data: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut pieces = Vec::new();
    let (mut pos, mut rest) = (offset, data);
    while !rest.is_empty() {
        let room = (SECTOR_BYTES - pos % SECTOR_BYTES) as usize;
        let (piece, tail) = rest.split_at(room.min(rest.len()));
        pieces.push((pos, piece.to_vec(), rng.random_bool(0.5)));
        pos += piece.len() as u64;
        rest = tail;
    }
    if pieces.len() > 1 && pieces.iter().all(|p| p.2 == pieces[0].2) {
        let flip = rng.random_range(0..pieces.len()); // some new, some old
        pieces[flip].2 = !pieces[flip].2;
    }
    pieces
        .into_iter()
        .filter(|p| p.2)
        .map(|(o, d, _)| (o, d))
        .collect()
}

/// Lands the surviving writes of one segment (between set_len barriers) in
/// a random order.
fn land(image: &mut Vec<u8>, segment: &mut Vec<(u64, Vec<u8>)>, rng: &mut StdRng) {
    for i in (1..segment.len()).rev() {
        segment.swap(i, rng.random_range(0..=i));
    }
    for (offset, data) in segment.drain(..) {
        write_at(image, offset, &data);
    }
}

impl State {
    /// `ENOSPC` when `file` growing to `end` bytes would take the files
    /// past `SimConfig::space_bytes`.
    fn check_space(&self, file: SimFileId, end: u64) -> Result<(), i32> {
        let len = self.files[file.0 as usize].volatile.len() as u64;
        if end <= len || self.config.space_bytes == u64::MAX {
            return Ok(());
        }
        let used: u64 = self.files.iter().map(|f| f.volatile.len() as u64).sum();
        if used - len + end > self.config.space_bytes {
            return Err(libc::ENOSPC);
        }
        Ok(())
    }

    /// Counts an operation of `kind` and decides whether a fault hits it.
    fn begin(&mut self, kind: FaultKind) -> Result<(), i32> {
        let index = self.ops;
        self.ops += 1;
        let hit = (self.faults.iter()).any(|&(a, b, k)| (a..b).contains(&index) && k.matches(kind));
        if hit {
            self.injected += 1;
            return Err(libc::EIO);
        }
        Ok(())
    }

    fn file(&mut self, id: SimFileId) -> &mut SimFile {
        assert!(
            (id.0 as usize) < self.files.len(),
            "{id:?} is not a file of this SimDisk"
        );
        &mut self.files[id.0 as usize]
    }

    fn crash(&mut self, mode: CrashMode) {
        let (keep, tear_p) = (self.config.keep_probability, self.config.tear_probability);
        let rng = &mut self.rng;
        for (index, file) in self.files.iter_mut().enumerate() {
            let pending = std::mem::take(&mut file.pending);
            let linked = self.names.get(&file.path) == Some(&SimFileId(index as u32));
            if !linked {
                // Unlinked and no longer open by anyone: gone for good.
                (file.durable, file.volatile) = (Vec::new(), Vec::new());
                continue;
            }
            match mode {
                CrashMode::KeepAll => pending.iter().for_each(|op| apply(&mut file.durable, op)),
                CrashMode::DropAll => {}
                CrashMode::Random => {
                    let mut segment: Vec<(u64, Vec<u8>)> = Vec::new();
                    for op in pending {
                        match op {
                            Pending::Write { offset, data } => {
                                if rng.random_bool(keep) {
                                    segment.push((offset, data));
                                } else if rng.random_bool(tear_p) {
                                    segment.extend(tear(rng, offset, &data));
                                }
                            }
                            Pending::SetLen(len) => {
                                land(&mut file.durable, &mut segment, rng);
                                if rng.random_bool(keep) {
                                    apply(&mut file.durable, &Pending::SetLen(len));
                                }
                            }
                        }
                    }
                    land(&mut file.durable, &mut segment, rng);
                }
            }
            file.volatile = file.durable.clone();
        }
        self.locks.clear();
        self.crashes += 1;
        debug_assert!(self
            .files
            .iter()
            .all(|f| f.pending.is_empty() && f.volatile == f.durable));
    }
}

impl SimDisk {
    /// A new, empty disk. Panics if a probability is outside `[0, 1]`.
    pub fn new(config: SimConfig) -> Arc<SimDisk> {
        for p in [config.keep_probability, config.tear_probability] {
            assert!(
                (0.0..=1.0).contains(&p),
                "SimConfig probability {p} outside [0, 1]"
            );
        }
        Arc::new(SimDisk {
            state: Mutex::new(State {
                config,
                rng: StdRng::seed_from_u64(config.seed),
                files: Vec::new(),
                names: BTreeMap::new(),
                locks: BTreeSet::new(),
                ops: 0,
                faults: Vec::new(),
                injected: 0,
                crashes: 0,
                classes: None,
            }),
        })
    }

    /// See [`SimConfig::log_writes_then_sync`].
    pub fn log_writes_then_sync(&self) -> bool {
        self.lock().config.log_writes_then_sync
    }

    /// Starts recording the class of every write the storage makes (see
    /// [`SimDisk::write_classes`]).
    pub fn record_write_classes(&self) {
        self.lock().classes.get_or_insert_with(Vec::new);
    }

    /// Notes the class of a write about to be made to `file`.
    pub(crate) fn note_write_class(
        &self,
        file: SimFileId,
        offset: u64,
        len: u64,
        class: super::WriteClass,
    ) {
        if let Some(classes) = &mut self.lock().classes {
            classes.push((file, offset, len, class));
        }
    }

    /// The writes recorded since [`SimDisk::record_write_classes`]:
    /// (path, offset, length, class).
    pub fn write_classes(&self) -> Vec<(PathBuf, u64, u64, super::WriteClass)> {
        let s = self.lock();
        s.classes
            .iter()
            .flatten()
            .map(|&(f, offset, len, class)| {
                (s.files[f.0 as usize].path.clone(), offset, len, class)
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock is one of our assertions; the state stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id of the file at `path`, created empty (durably) when missing and
    /// `create`; `ENOENT` when missing and not `create`.
    pub fn open(&self, path: &Path, create: bool) -> Result<SimFileId, i32> {
        let mut s = self.lock();
        if let Some(&id) = s.names.get(path) {
            return Ok(id);
        }
        if !create {
            return Err(libc::ENOENT);
        }
        let id = SimFileId(u32::try_from(s.files.len()).map_err(|_| libc::ENFILE)?);
        let file = SimFile {
            path: path.to_path_buf(),
            durable: Vec::new(),
            volatile: Vec::new(),
            pending: Vec::new(),
        };
        s.files.push(file);
        s.names.insert(path.to_path_buf(), id);
        Ok(id)
    }

    /// True when a file exists at `path`.
    pub fn exists(&self, path: &Path) -> bool {
        self.lock().names.contains_key(path)
    }

    /// The path `file` was created at (also after its removal).
    pub fn path_of(&self, file: SimFileId) -> PathBuf {
        self.lock().file(file).path.clone()
    }

    /// The volatile length of `file` (what reads see).
    pub fn len(&self, file: SimFileId) -> u64 {
        self.lock().file(file).volatile.len() as u64
    }

    /// Truncates or zero-extends `file` to `len`; durable at the next sync.
    pub fn set_len(&self, file: SimFileId, len: u64) -> Result<(), i32> {
        let mut s = self.lock();
        s.begin(FaultKind::Write)?;
        end_of(len, 0)?;
        s.check_space(file, len)?;
        let f = s.file(file);
        let op = Pending::SetLen(len);
        apply(&mut f.volatile, &op);
        f.pending.push(op);
        Ok(())
    }

    /// Reads at `offset` into `buf` from the volatile image: the bytes read,
    /// short at the end of the file.
    pub fn read(&self, file: SimFileId, offset: u64, buf: &mut [u8]) -> Result<usize, i32> {
        let mut s = self.lock();
        s.begin(FaultKind::Read)?;
        let image = &s.file(file).volatile;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(image.len());
        let n = buf.len().min(image.len() - start);
        buf[..n].copy_from_slice(&image[start..start + n]);
        Ok(n)
    }

    /// Writes `data` at `offset` (zero-filling any gap past the end): visible
    /// at once, durable at the next sync. Returns `data.len()`.
    pub fn write(&self, file: SimFileId, offset: u64, data: &[u8]) -> Result<usize, i32> {
        let mut s = self.lock();
        s.begin(FaultKind::Write)?;
        end_of(offset, data.len())?;
        if data.is_empty() {
            return Ok(0);
        }
        s.check_space(file, offset + data.len() as u64)?;
        let f = s.file(file);
        write_at(&mut f.volatile, offset, data);
        f.pending.push(Pending::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(data.len())
    }

    /// Makes `file`'s volatile image (contents and length) durable.
    pub fn sync(&self, file: SimFileId) -> Result<(), i32> {
        let mut s = self.lock();
        s.begin(FaultKind::Sync)?;
        let f = s.file(file);
        for op in std::mem::take(&mut f.pending) {
            apply(&mut f.durable, &op);
        }
        debug_assert_eq!(f.durable.len(), f.volatile.len());
        Ok(())
    }

    /// Makes bytes `offset..offset + len` of `file`'s volatile image
    /// durable, and nothing else: the second half of a write with
    /// `RWF_DSYNC` (the first is [`SimDisk::write`]). It counts as a sync
    /// for faults. Other pending writes stay pending; where they overlap
    /// the range they now carry its bytes, so that landing them in a crash
    /// cannot bring older bytes back.
    pub fn sync_range(&self, file: SimFileId, offset: u64, len: u64) -> Result<(), i32> {
        let mut s = self.lock();
        s.begin(FaultKind::Sync)?;
        let f = s.file(file);
        let start = (offset as usize).min(f.volatile.len());
        let end = (offset.saturating_add(len) as usize).min(f.volatile.len());
        let bytes = f.volatile[start..end].to_vec();
        write_at(&mut f.durable, start as u64, &bytes);
        for op in &mut f.pending {
            if let Pending::Write { offset, data } = op {
                let (at, stop) = (*offset as usize, *offset as usize + data.len());
                let (from, to) = (at.max(start), stop.min(end));
                if from < to {
                    data[from - at..to - at].copy_from_slice(&bytes[from - start..to - start]);
                }
            }
        }
        Ok(())
    }

    /// Crashes: resolves pending operations at random (see the module
    /// documentation), then volatile = durable; releases every lock.
    pub fn crash(&self) {
        self.lock().crash(CrashMode::Random);
    }

    /// A crash in which every pending operation lands, in order.
    pub fn crash_keep_all(&self) {
        self.lock().crash(CrashMode::KeepAll);
    }

    /// A crash in which every pending operation is lost.
    pub fn crash_drop_all(&self) {
        self.lock().crash(CrashMode::DropAll);
    }

    /// Makes operation `index` fail with `EIO` if it is of kind `kind`.
    pub fn fail_op(&self, index: u64, kind: FaultKind) {
        self.lock().faults.push((index, index + 1, kind));
    }

    /// Makes every operation of kind `kind` from `index` on fail with `EIO`
    /// (a dead disk).
    pub fn fail_all_from(&self, index: u64, kind: FaultKind) {
        self.lock().faults.push((index, u64::MAX, kind));
    }

    /// Removes every fault set by `fail_op` and `fail_all_from`.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The number of operations so far (the index of the next one).
    pub fn op_count(&self) -> u64 {
        self.lock().ops
    }

    /// The number of operations failed by injected faults so far.
    pub fn injected_faults(&self) -> u64 {
        self.lock().injected
    }

    /// Takes the exclusive advisory lock on `path` (which need not exist);
    /// false when it is held. Like `flock(LOCK_EX | LOCK_NB)`.
    pub fn try_lock(&self, path: &Path) -> bool {
        self.lock().locks.insert(path.to_path_buf())
    }

    /// Releases the lock on `path` (nothing if not held).
    pub fn unlock(&self, path: &Path) {
        self.lock().locks.remove(path);
    }

    /// Removes the file at `path` (durably); `ENOENT` when missing.
    pub fn remove(&self, path: &Path) -> Result<(), i32> {
        self.lock()
            .names
            .remove(path)
            .map(|_| ())
            .ok_or(libc::ENOENT)
    }

    /// The paths of every file, sorted.
    pub fn list(&self) -> Vec<PathBuf> {
        self.lock().names.keys().cloned().collect()
    }

    /// The durable image of the file at `path`.
    pub fn durable_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let mut s = self.lock();
        let id = *s.names.get(path)?;
        Some(s.file(id).durable.clone())
    }

    /// Sets both images of the file at `path` (created when missing) to
    /// `bytes`, forgetting its pending operations.
    pub fn replace_durable(&self, path: &Path, bytes: Vec<u8>) {
        let id = self.open(path, true).expect("creation cannot fail");
        let mut s = self.lock();
        let f = s.file(id);
        f.volatile = bytes.clone();
        f.durable = bytes;
        f.pending.clear();
    }

    /// Overwrites both images of the file at `path` with `bytes` at `offset`
    /// (zero-extending), leaving pending operations pending: damage.
    pub fn corrupt(&self, path: &Path, offset: u64, bytes: &[u8]) -> Result<(), i32> {
        let mut s = self.lock();
        let id = *s.names.get(path).ok_or(libc::ENOENT)?;
        end_of(offset, bytes.len())?;
        let f = s.file(id);
        write_at(&mut f.durable, offset, bytes);
        write_at(&mut f.volatile, offset, bytes);
        Ok(())
    }

    /// The number of pending (unsynced) writes over all files.
    pub fn pending_writes(&self) -> usize {
        let s = self.lock();
        let writes = s.files.iter().flat_map(|f| &f.pending);
        writes
            .filter(|op| matches!(op, Pending::Write { .. }))
            .count()
    }

    /// The number of crashes so far.
    pub fn crashes(&self) -> u64 {
        self.lock().crashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> PathBuf {
        PathBuf::from(format!("/sim/{name}"))
    }

    #[test]
    fn synced_data_survives_every_crash() {
        for seed in 0..64 {
            let disk = SimDisk::new(SimConfig::new(seed));
            let f = disk.open(&p("a"), true).unwrap();
            disk.write(f, 0, &[7; 4096]).unwrap();
            disk.sync(f).unwrap();
            disk.write(f, 4096, &[8; 4096]).unwrap();
            disk.write(f, 8192 + 100, &[9; 1000]).unwrap();
            assert_eq!(disk.pending_writes(), 2);
            match seed % 3 {
                0 => disk.crash(),
                1 => disk.crash_keep_all(),
                _ => disk.crash_drop_all(),
            }
            assert_eq!(disk.pending_writes(), 0);
            assert_eq!(disk.crashes(), 1);
            let durable = disk.durable_bytes(&p("a")).unwrap();
            assert_eq!(&durable[..4096], &[7; 4096][..]);
            let mut buf = vec![0; 4096];
            assert_eq!(disk.read(f, 0, &mut buf), Ok(4096));
            assert_eq!(buf, durable[..4096]);
            assert_eq!(disk.len(f), durable.len() as u64);
        }
    }

    #[test]
    fn a_synced_range_survives_and_older_overlapping_writes_cannot_undo_it() {
        for seed in 0..64 {
            let disk = SimDisk::new(SimConfig::new(seed));
            let f = disk.open(&p("a"), true).unwrap();
            disk.write(f, 0, &[1; 8192]).unwrap(); // pending, overlaps
            disk.write(f, 4096, &[2; 4096]).unwrap();
            disk.sync_range(f, 4096, 4096).unwrap();
            disk.write(f, 8192, &[3; 4096]).unwrap(); // pending, after
            match seed % 3 {
                0 => disk.crash(),
                1 => disk.crash_keep_all(),
                _ => disk.crash_drop_all(),
            }
            let durable = disk.durable_bytes(&p("a")).unwrap();
            assert_eq!(&durable[4096..8192], &[2; 4096][..], "seed {seed}");
            // The rest is whatever the crash kept: old (zeros) or new.
            assert!(durable[..4096].iter().all(|&b| b == 0 || b == 1));
            if seed % 3 == 2 {
                assert_eq!(&durable[..4096], &[0; 4096][..]);
                assert_eq!(durable.len(), 8192);
            }
        }
    }

    #[test]
    fn keep_all_lands_everything_drop_all_nothing() {
        let disk = SimDisk::new(SimConfig::new(1));
        let f = disk.open(&p("a"), true).unwrap();
        disk.write(f, 0, &[1; 1024]).unwrap();
        disk.sync(f).unwrap();
        disk.write(f, 512, &[2; 1024]).unwrap();
        disk.write(f, 1024, &[3; 512]).unwrap();
        let mut expected = vec![1; 512];
        expected.extend([2; 512]);
        expected.extend([3; 512]);
        disk.crash_keep_all();
        assert_eq!(disk.durable_bytes(&p("a")).unwrap(), expected);
        disk.write(f, 0, &[4; 4096]).unwrap();
        disk.set_len(f, 8192).unwrap();
        disk.crash_drop_all();
        assert_eq!(disk.durable_bytes(&p("a")).unwrap(), expected);
        assert_eq!(disk.len(f), 1536);
    }

    #[test]
    fn crashes_keep_drop_and_tear() {
        let (mut kept, mut dropped, mut torn) = (0, 0, 0);
        for seed in 0..200 {
            let disk = SimDisk::new(SimConfig::new(seed));
            let f = disk.open(&p("a"), true).unwrap();
            disk.write(f, 0, &[0xAA; 2048]).unwrap();
            disk.sync(f).unwrap();
            disk.write(f, 0, &[0xBB; 2048]).unwrap();
            disk.crash();
            let image = disk.durable_bytes(&p("a")).unwrap();
            let new: Vec<bool> = image.chunks(512).map(|s| s == [0xBB; 512]).collect();
            for sector in image.chunks(512) {
                assert!(
                    sector == [0xAA; 512] || sector == [0xBB; 512],
                    "a sector was split"
                );
            }
            match new.iter().filter(|&&n| n).count() {
                4 => kept += 1,
                0 => dropped += 1,
                _ => torn += 1,
            }
        }
        assert!(
            kept > 0 && dropped > 0 && torn > 0,
            "{kept} {dropped} {torn}"
        );
    }

    #[test]
    fn tears_split_at_sector_boundaries_of_the_file() {
        let config = SimConfig {
            seed: 5,
            keep_probability: 0.0,
            tear_probability: 1.0,
            log_writes_then_sync: false,
            space_bytes: u64::MAX,
        };
        let disk = SimDisk::new(config);
        let f = disk.open(&p("a"), true).unwrap();
        disk.write(f, 0, &[1; 2048]).unwrap();
        disk.sync(f).unwrap();
        disk.write(f, 300, &[2; 1000]).unwrap(); // pieces 300..512, 512..1024, 1024..1300
        disk.crash();
        let image = disk.durable_bytes(&p("a")).unwrap();
        let pieces = [300..512, 512..1024, 1024..1300];
        let new: Vec<bool> = pieces
            .iter()
            .map(|r| image[r.clone()].iter().all(|&b| b == 2))
            .collect();
        for (r, &n) in pieces.iter().zip(&new) {
            assert!(image[r.clone()].iter().all(|&b| b == if n { 2 } else { 1 }));
        }
        assert!(new.contains(&true) && new.contains(&false), "{new:?}");
        assert!(image[..300].iter().chain(&image[1300..]).all(|&b| b == 1));
    }

    /// A scenario with overlapping writes, set_len and two files: the
    /// durable images after two crashes.
    fn scenario(seed: u64) -> Vec<Vec<u8>> {
        let disk = SimDisk::new(SimConfig::new(seed));
        let (a, b) = (
            disk.open(&p("a"), true).unwrap(),
            disk.open(&p("b"), true).unwrap(),
        );
        for round in 0..2u8 {
            for i in 0..16u64 {
                let file = if i % 3 == 0 { b } else { a };
                disk.write(file, (i % 5) * 512, &[round * 16 + i as u8 + 1; 1536])
                    .unwrap();
                if i == 7 {
                    disk.set_len(a, 1024 * (round as u64 + 1)).unwrap();
                }
                if i == 11 {
                    disk.sync(b).unwrap();
                }
            }
            disk.crash();
        }
        vec![
            disk.durable_bytes(&p("a")).unwrap(),
            disk.durable_bytes(&p("b")).unwrap(),
        ]
    }

    #[test]
    fn same_seed_same_images() {
        for seed in 0..8 {
            assert_eq!(scenario(seed), scenario(seed));
        }
        assert!((1..8).any(|seed| scenario(seed) != scenario(0)));
    }

    #[test]
    fn faults_hit_exactly_the_chosen_op() {
        let disk = SimDisk::new(SimConfig::new(0));
        let f = disk.open(&p("a"), true).unwrap();
        disk.fail_op(1, FaultKind::Write);
        disk.fail_op(2, FaultKind::Read); // op 2 is a sync: not hit
        disk.fail_op(4, FaultKind::Sync);
        disk.write(f, 0, &[1; 512]).unwrap(); // 0
        assert_eq!(disk.write(f, 512, &[2; 512]), Err(libc::EIO)); // 1
        assert_eq!(disk.len(f), 512, "a failed write changes nothing");
        disk.sync(f).unwrap(); // 2
        disk.write(f, 0, &[3; 512]).unwrap(); // 3
        assert_eq!(disk.sync(f), Err(libc::EIO)); // 4
        assert_eq!(
            disk.pending_writes(),
            1,
            "a failed sync leaves writes pending"
        );
        assert_eq!((disk.op_count(), disk.injected_faults()), (5, 2));
        disk.crash_drop_all();
        assert_eq!(disk.durable_bytes(&p("a")).unwrap(), vec![1; 512]);

        disk.fail_all_from(7, FaultKind::Any);
        let mut buf = [0; 512];
        assert_eq!(disk.read(f, 0, &mut buf), Ok(512)); // 5
        disk.set_len(f, 1024).unwrap(); // 6
        assert_eq!(disk.read(f, 0, &mut buf), Err(libc::EIO)); // 7
        assert_eq!(disk.set_len(f, 0), Err(libc::EIO)); // 8
        assert_eq!(disk.sync(f), Err(libc::EIO)); // 9
        disk.clear_faults();
        disk.sync(f).unwrap(); // 10
        assert_eq!(disk.durable_bytes(&p("a")).unwrap().len(), 1024);
        assert_eq!(disk.op_count(), 11);
    }

    #[test]
    fn unsynced_set_len_may_be_dropped() {
        let (mut kept, mut dropped) = (0, 0);
        for seed in 0..64 {
            let disk = SimDisk::new(SimConfig::new(seed));
            let f = disk.open(&p("a"), true).unwrap();
            disk.set_len(f, 4096).unwrap();
            disk.sync(f).unwrap();
            disk.set_len(f, 1 << 20).unwrap();
            assert_eq!(disk.len(f), 1 << 20);
            disk.crash();
            match disk.len(f) {
                4096 => dropped += 1,
                len => {
                    assert_eq!(len, 1 << 20);
                    kept += 1;
                }
            }
        }
        assert!(kept > 0 && dropped > 0);
    }

    #[test]
    fn io_past_the_end_behaves_like_a_file() {
        let disk = SimDisk::new(SimConfig::new(0));
        let f = disk.open(&p("a"), true).unwrap();
        let mut buf = [9u8; 100];
        assert_eq!(disk.read(f, 0, &mut buf), Ok(0));
        assert_eq!(disk.write(f, 1000, &[5; 10]), Ok(10));
        assert_eq!(disk.len(f), 1010);
        assert_eq!(disk.read(f, 950, &mut buf), Ok(60));
        assert!(buf[..50].iter().all(|&b| b == 0) && buf[50..60].iter().all(|&b| b == 5));
        assert_eq!(disk.read(f, u64::MAX, &mut buf), Ok(0));
        assert_eq!(disk.write(f, u64::MAX, &[1]), Err(libc::EFBIG));
        assert_eq!(disk.set_len(f, MAX_FILE_BYTES + 1), Err(libc::EFBIG));
        disk.set_len(f, 4).unwrap();
        assert_eq!(disk.read(f, 0, &mut buf), Ok(4));
        assert_eq!(disk.len(f), 4);
    }

    #[test]
    fn namespace_ids_and_damage_helpers() {
        let disk = SimDisk::new(SimConfig::new(0));
        assert_eq!(disk.open(&p("a"), false), Err(libc::ENOENT));
        let a = disk.open(&p("a"), true).unwrap();
        let b = disk.open(&p("b"), true).unwrap();
        assert_ne!(a, b);
        disk.crash();
        assert!(disk.exists(&p("a")), "creation is durable");
        assert_eq!(disk.open(&p("a"), false), Ok(a), "ids survive crashes");
        assert_eq!(disk.path_of(b), p("b"));
        assert_eq!(disk.list(), vec![p("a"), p("b")]);
        disk.remove(&p("b")).unwrap();
        assert_eq!(disk.remove(&p("b")), Err(libc::ENOENT));
        assert_eq!(disk.list(), vec![p("a")]);
        assert_eq!(disk.durable_bytes(&p("b")), None);
        assert_ne!(
            disk.open(&p("b"), true).unwrap(),
            b,
            "a re-created path is a new file"
        );

        disk.write(a, 0, &[1; 8]).unwrap();
        disk.replace_durable(&p("a"), vec![2; 4]);
        assert_eq!(disk.pending_writes(), 0);
        disk.corrupt(&p("a"), 2, &[3; 4]).unwrap();
        assert_eq!(disk.corrupt(&p("zz"), 0, &[1]), Err(libc::ENOENT));
        disk.crash();
        assert_eq!(disk.durable_bytes(&p("a")).unwrap(), vec![2, 2, 3, 3, 3, 3]);
        let mut buf = [0; 6];
        assert_eq!(disk.read(a, 0, &mut buf), Ok(6));
        assert_eq!(buf, [2, 2, 3, 3, 3, 3]);
    }

    #[test]
    fn locks_are_exclusive_and_released_by_crash() {
        let disk = SimDisk::new(SimConfig::new(0));
        assert!(disk.try_lock(&p("a")));
        assert!(!disk.try_lock(&p("a")));
        assert!(disk.try_lock(&p("b")));
        disk.unlock(&p("b"));
        assert!(disk.try_lock(&p("b")));
        disk.crash();
        assert!(disk.try_lock(&p("a")) && disk.try_lock(&p("b")));
    }

    #[test]
    fn shared_between_threads() {
        let disk = SimDisk::new(SimConfig::new(0));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let disk = disk.clone();
                std::thread::spawn(move || {
                    let f = disk.open(&p(&format!("t{t}")), true).unwrap();
                    for i in 0..32u64 {
                        disk.write(f, i * 512, &[t; 512]).unwrap();
                    }
                    disk.sync(f).unwrap();
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        disk.crash();
        for t in 0..4u8 {
            assert_eq!(
                disk.durable_bytes(&p(&format!("t{t}"))).unwrap(),
                vec![t; 32 * 512]
            );
        }
    }
}
