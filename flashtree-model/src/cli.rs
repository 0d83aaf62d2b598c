//! `flashtree model …` subcommands (placeholder, being written).

/// The model subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Measure the k × r grid (placeholder).
    Measure,
}

/// Runs a model subcommand.
pub fn run(_cmd: ModelCommand) -> Result<(), String> {
    Err("not implemented yet".into())
}
