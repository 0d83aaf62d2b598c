//! The `flashtree` command: benchmarks and tools on top of the library.
//! Bad arguments exit with code 2 (clap's convention); failures at run time
//! print the error and exit with code 1, except errors about the arguments'
//! values (prefixed `invalid argument:`), which exit with 2.

use clap::{Parser, Subcommand};

mod data;

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
    /// Open a store (recovering it from its log if it crashed) and check it:
    /// every tree's structure, every page's checksum, the page accounting.
    Check(CheckArgs),
    /// Print the value of KEY in tree T (a missing key exits with 1).
    /// Example: flashtree get ./store --tree users alice
    Get(data::GetArgs),
    /// Set KEY to VALUE in tree T, durably (the tree is created if missing;
    /// the store too with --create). Example: flashtree put ./store --tree users alice 42
    Put(data::PutArgs),
    /// Delete KEY from tree T (a missing key exits with 1).
    /// Example: flashtree delete ./store --tree users alice
    Delete(data::DeleteArgs),
    /// Print the records of tree T with keys in [--from, --to), one
    /// `key<TAB>value` line each. Example: flashtree scan ./store --tree users --from a --limit 10
    Scan(data::ScanArgs),
    /// Write every record (or those of --tree) as JSON lines:
    /// {"tree":…,"key":…,"value":…}, B+-trees in key order; a hash tree's
    /// records, in hash order, also carry "kind":"hash". Example: flashtree dump ./store > store.jsonl
    Dump(data::DumpArgs),
    /// Read JSON lines (as `dump` writes them) into a store, creating it and
    /// its trees as needed (a record with "kind":"hash" makes its tree a hash
    /// tree), in atomic durable batches, or with --bulk into empty B+-trees
    /// built bottom-up. Example: flashtree load ./copy --bulk < store.jsonl
    Load(data::LoadArgs),
    /// Move the leaves of every B+-tree (or of --tree) to consecutive page
    /// ids in key order, so that scans read neighbouring leaves in one
    /// request each; the store stays open to nothing else meanwhile (a
    /// running program compacts with `Db::compact`). Example: flashtree compact ./store
    Compact(data::CompactArgs),
    /// Check a store and report its trees, records, pages by kind, leaf fill
    /// and file sizes. Example: flashtree stats ./store --json
    Stats(data::StatsArgs),
    /// The MQSSD device cost model of Ransom, Lim & Mitzenmacher, "Multi-Queue
    /// SSD I/O Modeling & Its Implications for Data Structure Design".
    #[command(subcommand)]
    Model(flashtree_model::cli::ModelCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Load N records, then run random lookups on flashtree.
    Lookup(flashtree_bench::lookup::LookupArgs),
    /// Run one workload on several engines with equal resources and compare.
    Compare(Box<flashtree_bench::compare::CompareArgs>),
    /// Durable commits (Durability::Sync): group commit and latency beside the device's write+fdatasync.
    Commit(flashtree_bench::durable::CommitArgs),
    /// N records in random order: `Db::bulk_load` against batched inserts,
    /// then the bulk-loaded store checked (full scan, random lookups).
    Bulk(flashtree_bench::bulk::BulkArgs),
    /// Recovery after SIGKILL with a large log, beside the device's sequential reads;
    /// with --engines, SIGKILL of a synced workload (puts, ycsb-a, tpcc) on every engine.
    Recover(flashtree_bench::durable::RecoverArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    store: data::StoreArgs,
}

/// `flashtree check DIR`.
fn check(args: CheckArgs) -> Result<(), String> {
    use flashtree::db::Options;
    let options = Options {
        pool_bytes: args.store.pool_mib << 20,
        workers: 1,
        create_if_missing: false,
        ..Options::default()
    };
    let dir = &args.store.dir;
    let db = data::open_with(&args.store, options, false)?;
    let recovery = db.stats().recovery;
    let report = db.check().map_err(|e| format!("{}: {e}", dir.display()))?;
    db.close().map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "{}: ok; recovery replayed {} log groups ({} log bytes read)",
        dir.display(),
        recovery.groups,
        recovery.log_bytes
    );
    println!(
        "{:<24} {:>12} {:>12} {:>14}",
        "tree", "inner nodes", "leaves", "entries"
    );
    for (name, shape) in &report.trees {
        println!(
            "{:<24} {:>12} {:>12} {:>14}",
            name, shape.inner_nodes, shape.leaves, shape.entries
        );
    }
    println!(
        "pages: {} allocated, {} in trees, {} free, {} leaked (space only; a crash during a split or merge can leave some)",
        report.pages_allocated, report.pages_in_trees, report.pages_free, report.pages_leaked
    );
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Iobench(args) => flashtree_bench::iobench::run(args),
        Command::Bench(BenchCommand::Lookup(args)) => flashtree_bench::lookup::run(args),
        Command::Bench(BenchCommand::Compare(args)) => flashtree_bench::compare::run(*args),
        Command::Bench(BenchCommand::Commit(args)) => flashtree_bench::durable::run_commit(args),
        Command::Bench(BenchCommand::Bulk(args)) => flashtree_bench::bulk::run(args),
        Command::Bench(BenchCommand::Recover(args)) => flashtree_bench::durable::run_recover(args),
        Command::Check(args) => check(args),
        Command::Get(args) => data::get(args),
        Command::Put(args) => data::put(args),
        Command::Delete(args) => data::delete(args),
        Command::Compact(args) => data::compact(args),
        Command::Scan(args) => data::scan(args),
        Command::Dump(args) => data::dump(args),
        Command::Load(args) => data::load(args),
        Command::Stats(args) => data::stats(args),
        Command::Model(cmd) => flashtree_model::cli::run(cmd),
    };
    if let Err(message) = result {
        eprintln!("flashtree: error: {message}");
        // Bad input is the user's to fix: exit 2 like clap's own errors.
        let usage = message.starts_with(flashtree_bench::util::USAGE_ERROR_PREFIX);
        std::process::exit(if usage { 2 } else { 1 });
    }
}
