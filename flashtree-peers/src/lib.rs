//! flashtree-peers: side-by-side benchmarks of flashtree and peer engines.
//! (Crate docs: see the module list; the plug-in guide is in [`engine`].)

pub mod adapters;
pub mod cgroup;
pub mod compare;
pub mod driver;
pub mod engine;
pub mod job;
pub mod kv;
pub mod plots;
pub mod report;
pub mod rng;
pub mod sys;
pub mod testing;
pub mod workload;

pub use engine::{Concurrency, Engine, EngineConfig, EngineCounters, HandleSource};
pub use job::{Job, Phase, RunControl, TaskStats};
pub use kv::{block_on, yield_now, Kv, KvError, ScanFn};
pub use workload::Workload;
