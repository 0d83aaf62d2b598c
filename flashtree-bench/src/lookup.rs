//! Placeholder: being written.

/// Arguments (placeholder).
#[derive(clap::Args, Debug)]
pub struct LookupArgs {}

/// Runs the command (placeholder).
pub fn run(_args: LookupArgs) -> Result<(), String> {
    Err("not implemented yet".into())
}
