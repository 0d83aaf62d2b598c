//! Where the store's files live: the operating system's file systems and
//! block devices, or a simulated disk ([`SimDisk`]) that tests crash, tear
//! and fail deterministically.
//!
//! # Contract
//! * Every file operation of the engine goes through a [`Vfs`]: the
//!   existence and length checks of `Db::open`, locking, creation (through
//!   [`super::Storage::open`]), and through the storage's channels every
//!   read, write and sync. Nothing in `db` or `buffer` touches `std::fs` for
//!   the store's files.
//! * A [`StoreLock`] holds an exclusive advisory lock on every data file of
//!   a store until it is dropped: a second `Db` on the same files, in this
//!   process or another, is refused.

use super::sim::SimDisk;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file system of a store.
#[derive(Clone, Debug, Default)]
pub enum Vfs {
    /// The operating system's files and block devices.
    #[default]
    Os,
    /// An in-memory simulated disk (tests).
    Sim(Arc<SimDisk>),
}

/// How long [`Vfs::lock`] retries a store that another Db holds.
const LOCK_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

impl Vfs {
    /// True for the simulated disk.
    pub fn is_simulated(&self) -> bool {
        matches!(self, Vfs::Sim(_))
    }

    /// True when `path` exists.
    pub fn exists(&self, path: &Path) -> bool {
        match self {
            Vfs::Os => path.exists(),
            Vfs::Sim(sim) => sim.exists(path),
        }
    }

    /// The length of the file at `path` (None: no such file). A block
    /// device reports its size.
    pub fn len(&self, path: &Path) -> Result<Option<u64>> {
        match self {
            Vfs::Os => match std::fs::metadata(path) {
                Ok(meta) if meta.file_type().is_file() => Ok(Some(meta.len())),
                Ok(_) => {
                    let file = std::fs::File::open(path)
                        .map_err(|e| Error::Unsupported(format!("open {}: {e}", path.display())))?;
                    use std::io::Seek;
                    let mut file = file;
                    let end = file
                        .seek(std::io::SeekFrom::End(0))
                        .map_err(|e| Error::Unsupported(format!("seek {}: {e}", path.display())))?;
                    Ok(Some(end))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(Error::Unsupported(format!("stat {}: {e}", path.display()))),
            },
            Vfs::Sim(sim) => Ok(sim.exists(path).then(|| {
                let id = sim
                    .open(path, false)
                    .expect("an existing simulated file opens");
                sim.len(id)
            })),
        }
    }

    /// The whole contents of the (small) file at `path`; None when missing.
    pub fn read_all(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        match self {
            Vfs::Os => match std::fs::read(path) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(Error::Unsupported(format!("read {}: {e}", path.display()))),
            },
            Vfs::Sim(_) => match self.len(path)? {
                Some(len) => self.read_at(path, 0, len as usize),
                None => Ok(None),
            },
        }
    }

    /// Up to `len` bytes of the file at `path` from `offset` (fewer at its
    /// end); None when the file is missing.
    pub fn read_at(&self, path: &Path, offset: u64, len: usize) -> Result<Option<Vec<u8>>> {
        match self {
            Vfs::Os => {
                use std::os::unix::fs::FileExt;
                let file = match std::fs::File::open(path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => {
                        return Err(Error::Unsupported(format!("open {}: {e}", path.display())))
                    }
                };
                let mut bytes = vec![0u8; len];
                let mut done = 0;
                while done < len {
                    match file.read_at(&mut bytes[done..], offset + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Err(Error::Unsupported(format!("read {}: {e}", path.display())))
                        }
                    }
                }
                bytes.truncate(done);
                Ok(Some(bytes))
            }
            Vfs::Sim(sim) => {
                if !sim.exists(path) {
                    return Ok(None);
                }
                let id = sim
                    .open(path, false)
                    .map_err(|e| sim_error(path, "open", e))?;
                let mut bytes = vec![0u8; len];
                let n = sim
                    .read(id, offset, &mut bytes)
                    .map_err(|e| sim_error(path, "read", e))?;
                bytes.truncate(n);
                Ok(Some(bytes))
            }
        }
    }

    /// Makes the file at `path` (created when missing) at least `bytes`
    /// long, with its blocks allocated, so that later writes below `bytes`
    /// need no space from the file system. `Error::Full` when it has none.
    pub fn allocate(&self, path: &Path, bytes: u64) -> Result<()> {
        match self {
            Vfs::Os => {
                let file = open_for_writing(path)?;
                let len = file
                    .metadata()
                    .map_err(|e| Error::Unsupported(format!("stat {}: {e}", path.display())))?
                    .len();
                // Allocated over the whole range: a file another version
                // extended with holes gets its blocks too.
                super::storage::fallocate(&file, path, 0, bytes.max(len))
            }
            Vfs::Sim(sim) => {
                let id = sim
                    .open(path, true)
                    .map_err(|e| sim_error(path, "open", e))?;
                if sim.len(id) >= bytes {
                    return Ok(());
                }
                sim.set_len(id, bytes).map_err(|e| {
                    if e == libc::ENOSPC {
                        Error::Full(format!(
                            "no space left to grow {} to {bytes} bytes",
                            path.display()
                        ))
                    } else {
                        sim_error(path, "extend", e)
                    }
                })
            }
        }
    }

    /// Writes `bytes` at the start of the file at `path` (created when
    /// missing) and syncs it. An error is final for the caller's purpose:
    /// what the file holds afterwards is unknown.
    pub fn write_synced(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        match self {
            Vfs::Os => {
                use std::os::unix::fs::FileExt;
                let file = open_for_writing(path)?;
                file.write_all_at(bytes, 0)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| Error::Failed(format!("write {}: {e}", path.display())))
            }
            Vfs::Sim(sim) => {
                let id = sim
                    .open(path, true)
                    .map_err(|e| sim_error(path, "open", e))?;
                sim.write(id, 0, bytes)
                    .map_err(|e| Error::Failed(format!("write {}: errno {e}", path.display())))?;
                sim.sync(id)
                    .map_err(|e| Error::Failed(format!("sync {}: errno {e}", path.display())))
            }
        }
    }

    /// Removes the file at `path` if it exists.
    pub fn remove(&self, path: &Path) -> Result<()> {
        match self {
            Vfs::Os => match std::fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::Unsupported(format!(
                    "remove {}: {e}",
                    path.display()
                ))),
            },
            Vfs::Sim(sim) => {
                if sim.exists(path) {
                    let _ = sim.remove(path);
                }
                Ok(())
            }
        }
    }

    /// Takes an exclusive lock on every path (each must exist, or is created
    /// empty when `create`), waiting at most one second for another holder.
    /// The lock is advisory: it keeps out other flashtree Dbs, in this
    /// process or another, not other programs.
    pub fn lock(&self, paths: &[PathBuf], create: bool) -> Result<StoreLock> {
        match self {
            Vfs::Os => lock_os(paths, create).map(StoreLock::Os),
            Vfs::Sim(sim) => {
                let mut held: Vec<PathBuf> = Vec::new();
                for path in paths {
                    if held.contains(path) {
                        sim_unlock(sim, &held);
                        return Err(Error::InvalidArgument(format!(
                            "{} is listed twice among the store's files",
                            path.display()
                        )));
                    }
                    if !sim.exists(path) && !create {
                        sim_unlock(sim, &held);
                        return Err(Error::InvalidArgument(format!(
                            "{} does not exist",
                            path.display()
                        )));
                    }
                    if !sim.try_lock(path) {
                        sim_unlock(sim, &held);
                        return Err(in_use(path));
                    }
                    held.push(path.clone());
                    if let Err(e) = sim.open(path, create) {
                        sim_unlock(sim, &held);
                        return Err(Error::Unsupported(format!(
                            "open {}: {}",
                            path.display(),
                            std::io::Error::from_raw_os_error(e)
                        )));
                    }
                }
                Ok(StoreLock::Sim(sim.clone(), held))
            }
        }
    }
}

/// Opens the file at `path` for writing, created when missing, as it is.
fn open_for_writing(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::Unsupported(format!("open {}: {e}", path.display())))
}

fn sim_error(path: &Path, what: &str, errno: i32) -> Error {
    Error::Unsupported(format!(
        "{what} {}: {}",
        path.display(),
        std::io::Error::from_raw_os_error(errno)
    ))
}

fn sim_unlock(sim: &SimDisk, paths: &[PathBuf]) {
    for path in paths {
        sim.unlock(path);
    }
}

fn in_use(path: &Path) -> Error {
    Error::InUse(format!(
        "{} is open in another flashtree Db (in this process or another); close that one first",
        path.display()
    ))
}

/// Exclusive locks on a store's data files, held until dropped.
#[derive(Debug)]
pub enum StoreLock {
    /// `flock`ed descriptors: the locks go with them.
    Os(Vec<std::fs::File>),
    /// Locks in a simulated disk.
    Sim(Arc<SimDisk>, Vec<PathBuf>),
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if let StoreLock::Sim(sim, paths) = self {
            sim_unlock(sim, paths);
        }
    }
}

fn lock_os(paths: &[PathBuf], create: bool) -> Result<Vec<std::fs::File>> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let mut files: Vec<std::fs::File> = Vec::with_capacity(paths.len());
    let mut identities: Vec<(u64, u64)> = Vec::with_capacity(paths.len());
    for path in paths {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound && !create {
                    Error::InvalidArgument(format!(
                        "no store at {}: the file does not exist (set Options::create_if_missing to create one)",
                        path.display()
                    ))
                } else {
                    Error::Unsupported(format!("open {}: {e}", path.display()))
                }
            })?;
        let stat = file
            .metadata()
            .map_err(|e| Error::Unsupported(format!("stat {}: {e}", path.display())))?;
        let identity = (stat.dev(), stat.ino());
        if identities.contains(&identity) {
            return Err(Error::InvalidArgument(format!(
                "{} is listed twice among the store's files",
                path.display()
            )));
        }
        identities.push(identity);
        // A child process between fork and exec holds copies of the
        // parent's descriptors, locks included, for a moment after the
        // parent closed a Db: a conflict is retried for a while before it
        // is reported.
        let deadline = std::time::Instant::now() + LOCK_WAIT_MAX;
        let locked = loop {
            // SAFETY: flock on a descriptor this function owns; no memory involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            let error = std::io::Error::last_os_error();
            let busy = rc != 0 && error.raw_os_error() == Some(libc::EWOULDBLOCK);
            if !busy || std::time::Instant::now() >= deadline {
                break if rc == 0 { Ok(()) } else { Err(error) };
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        if let Err(e) = locked {
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                in_use(path)
            } else {
                Error::Unsupported(format!("flock {}: {e}", path.display()))
            });
        }
        files.push(file);
    }
    Ok(files)
}
