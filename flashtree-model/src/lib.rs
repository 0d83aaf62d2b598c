//! The MQSSD device cost model of Ransom, Lim & Mitzenmacher, "Multi-Queue SSD
//! I/O Modeling & Its Implications for Data Structure Design":
//! measure a device on a k × r grid, fit setup and transfer costs as rational
//! functions of the concurrency k, predict throughput, choose a concurrency.
//!
//! # The model
//!
//! At concurrency k (requests in flight on the device) the wall-clock cost
//! per page, over all k streams together, of an access pattern whose share of
//! random page accesses is f (random runs started / pages transferred) is
//!
//! ```text
//! reads:  y(k, f) = α(k) + f · t(k)      writes: y(k, f) = β(k) + f · s(k)      [µs / page]
//! throughput(k, f) = page_bytes / y(k, f)
//! ```
//!
//! t, α, s are ratios of quadratics in k (Ransom, Lim & Mitzenmacher eq. 5), β a ratio of cubics
//! (eq. 6). This is eq. 7 and 8 of Ransom, Lim & Mitzenmacher written per page: a stream of N
//! bytes in r runs has f = r·B/N. See [`model`] and [`rational`].
//!
//! # `grid.json` (version 1), written by `measure`, read by `fit`
//!
//! ```json
//! {
//!   "version": 1,
//!   "page_bytes": 4096,
//!   "device": { "path": "/data/grid.dat", "file_bytes": 4294967296,
//!               "backend": "io_uring", "request_bytes_max": 262144,
//!               "trial_time_max_s": 0.5 },
//!   "points": [
//!     { "op": "read", "k": 8, "pages_total": 120000, "runs_total": 1200,
//!       "elapsed_s": 0.41, "random_fraction_target": 0.01 }
//!   ]
//! }
//! ```
//!
//! - `op`: `"read"` or `"write"`; `k`: concurrent streams, 1..=65536.
//! - `pages_total`: pages (of `page_bytes`) moved by all streams together, ≥ 1.
//! - `runs_total`: sequential runs started at random offsets (random
//!   accesses), 1..=`pages_total`. The random fraction is
//!   `runs_total / pages_total`.
//! - `elapsed_s`: wall-clock seconds of the trial, finite and > 0.
//! - `device` and `random_fraction_target` are informational and optional.
//!
//! # `model.json` (version 1), written by `fit`
//!
//! ```json
//! {
//!   "version": 1, "page_bytes": 4096, "k_measured_min": 1, "k_measured_max": 128,
//!   "read":  { "setup_us":    { "num": [c0, c1, c2], "den": [d0, d1, 1.0] },
//!              "transfer_us": { "num": [...], "den": [...] },
//!              "per_k": [ { "k": 1, "setup_us": 95.1, "transfer_us": 2.1, "r2": 0.998, "points": 8 } ] },
//!   "write": { ... same, transfer_us of degree 3 ... },
//!   "quality": { "heldout_median_rel_error": 0.06, "heldout_max_rel_error": 0.3,
//!                "heldout_points": 64, "insample_median_rel_error": 0.05 }
//! }
//! ```
//!
//! Coefficients are in ascending powers of k; costs in µs. `read` or `write`
//! may be `null` when that op was not measured; `quality` is optional.
//! Predictions for k above `k_measured_max` use `k_measured_max`.
//! [`DeviceModel::load`] rejects bad JSON, missing fields, a wrong version,
//! non-finite or negative costs, with an error that names the field.

pub mod cli;
pub mod error;
pub mod fit;
pub mod grid;
pub mod linear;
pub mod measure;
pub mod model;
pub mod plot;
pub mod rational;

pub use error::{ModelError, Result};
pub use grid::{Grid, GridPoint, Op};
pub use model::{choose_concurrency, DeviceModel, Prediction};
