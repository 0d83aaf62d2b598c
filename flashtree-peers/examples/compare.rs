//! `cargo run -p flashtree-peers --release --example compare -- --engines rocksdb,lmdb ...`
//! runs `bench compare` on the peer engines only (no flashtree hook).

use clap::Parser;
use flashtree_peers::compare::{run_compare, CompareArgs, Hooks};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CompareArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(message) = run_compare(&cli.args, &Hooks::default()) {
        eprintln!("compare: error: {message}");
        std::process::exit(1);
    }
}
