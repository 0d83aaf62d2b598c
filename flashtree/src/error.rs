//! The crate's error type. Errors are values: every fallible call returns
//! [`Result`], and the message says what went wrong and what to do about it.

use crate::io::IoError;

/// Everything that can go wrong in flashtree.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O request failed; the error names the operation, file and offset.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The caller passed a value the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The environment refuses something the configuration asks for
    /// (a kernel feature, a file system without O_DIRECT, a device too small).
    #[error("unsupported environment: {0}")]
    Unsupported(String),
    /// The on-disk data is not what flashtree wrote.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// Another open [`crate::Db`] (in this process or another) holds the
    /// store's lock.
    #[error("store in use: {0}")]
    InUse(String),
    /// The store was open without a log (`Durability::None`) when its
    /// process ended (a crash or a kill): its pages may not be consistent
    /// with each other.
    #[error("store not closed cleanly: {0}")]
    NotClosedCleanly(String),
    /// The store has no room left (page ids exhausted or device full).
    #[error("store full: {0}")]
    Full(String),
    /// A write or sync failed earlier: the store stopped accepting changes
    /// (a failed write is never retried and trusted). Close it and reopen
    /// it: the reopen recovers from what is on disk.
    #[error("the store stopped after an I/O error: {0}; reopen it to recover")]
    Failed(String),
    /// The engine was shut down while the request was pending.
    #[error("the database is closed")]
    Closed,
    /// The task running the request panicked (a bug in the task's code or
    /// in flashtree). The panic message went to stderr; the other tasks go on.
    #[error("the task running this request panicked (its message is on stderr)")]
    TaskPanicked,
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
