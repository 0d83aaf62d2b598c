//! The MQSSD device cost model of seed 002: measure a device on a k × r grid,
//! fit setup and transfer costs, predict throughput.

pub mod cli;
