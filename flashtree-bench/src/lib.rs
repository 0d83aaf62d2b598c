//! Benchmarks for flashtree: `iobench` (the I/O stack), `lookup` (the engine)
//! and `compare` (flashtree against peer engines on the same workload).

pub mod adapter;
pub mod bulk;
pub mod compare;
pub mod durable;
mod fio;
pub mod iobench;
pub mod kill;
pub mod lookup;
pub mod plot;
pub mod util;
