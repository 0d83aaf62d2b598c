//! flashtree: an embedded key-value storage engine for NVMe SSDs.
//!
//! Layers, each depending only on those below it:
//! `io` (backends, channels, RAID0) → `sched` (per-worker executor) →
//! `buffer` (page table, frames, latches, eviction) → `btree` → `db` (public API).
//! See `docs/ARCHITECTURE.md`.

pub mod btree;
pub mod buffer;
pub mod db;
pub mod error;
pub mod io;
pub mod sched;
pub mod wal;

pub use error::{Error, Result};
