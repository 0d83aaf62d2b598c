//! Placeholder: being written.

/// Arguments (placeholder).
#[derive(clap::Args, Debug)]
pub struct IobenchArgs {}

/// Runs the command (placeholder).
pub fn run(_args: IobenchArgs) -> Result<(), String> {
    Err("not implemented yet".into())
}
