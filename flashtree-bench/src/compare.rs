//! Placeholder: being written.

/// Arguments (placeholder).
#[derive(clap::Args, Debug)]
pub struct CompareArgs {}

/// Runs the command (placeholder).
pub fn run(_args: CompareArgs) -> Result<(), String> {
    Err("not implemented yet".into())
}
