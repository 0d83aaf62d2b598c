//! The `flashtree` command: benchmarks and tools on top of the library.
//! Bad arguments exit with code 2 (clap's convention); failures at run time
//! print the error and exit with code 1, except errors about the arguments'
//! values (prefixed `invalid argument:`), which exit with 2.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "flashtree",
    version,
    about = "flashtree storage engine: benchmarks and tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure the I/O stack: IOPS, bandwidth, latency and CPU per I/O.
    Iobench(flashtree_bench::iobench::IobenchArgs),
    /// Engine benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The MQSSD device cost model (seed 002).
    #[command(subcommand)]
    Model(flashtree_model::cli::ModelCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Load N records, then run random lookups on flashtree.
    Lookup(flashtree_bench::lookup::LookupArgs),
    /// Run one workload on several engines with equal resources and compare.
    Compare(flashtree_bench::compare::CompareArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Iobench(args) => flashtree_bench::iobench::run(args),
        Command::Bench(BenchCommand::Lookup(args)) => flashtree_bench::lookup::run(args),
        Command::Bench(BenchCommand::Compare(args)) => flashtree_bench::compare::run(args),
        Command::Model(cmd) => flashtree_model::cli::run(cmd),
    };
    if let Err(message) = result {
        eprintln!("flashtree: error: {message}");
        // Bad input is the user's to fix: exit 2 like clap's own errors.
        let usage = message.starts_with(flashtree_bench::util::USAGE_ERROR_PREFIX);
        std::process::exit(if usage { 2 } else { 1 });
    }
}
