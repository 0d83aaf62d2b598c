//! `measure`: the k × r grid of seed 002 §3.3 (being written).

use std::path::PathBuf;

use crate::error::{ModelError, Result};

/// Arguments of `measure`.
#[derive(clap::Args, Debug)]
pub struct MeasureArgs {
    /// File to measure on (created and filled if missing or too small).
    #[arg(long)]
    pub path: PathBuf,
}

/// Runs `measure`.
pub fn run(_args: &MeasureArgs) -> Result<()> {
    Err(ModelError::Measure("not implemented yet".into()))
}
