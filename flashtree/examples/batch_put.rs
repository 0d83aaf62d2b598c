//! Random puts in write batches through `Db::write`: records per second and
//! log bytes per record (from `Db::stats`).
//!
//!     cargo run --release -p flashtree --example batch_put -- [RECORDS] [BATCH] [sync|buffered|none] [POOL_MIB]
//!
//! Defaults: 200000 records of a 16-byte key and a 100-byte value, batches
//! of 250, `Sync`, a 64 MiB pool; the store goes to a temporary directory.

use flashtree::db::{Db, Durability, Options, WriteBatch, WriteOptions};
use rand::{Rng, SeedableRng};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    match args.get(i) {
        None => default,
        Some(text) => text.parse().unwrap_or_else(|_| {
            eprintln!("batch_put: bad argument {i}: {text:?}");
            std::process::exit(2)
        }),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let records: usize = arg(&args, 1, 200_000);
    let batch: usize = arg(&args, 2, 250);
    let durability = match args.get(3).map_or("sync", String::as_str) {
        "sync" => Durability::Sync,
        "buffered" => Durability::Buffered { max_delay_ms: 10 },
        "none" => Durability::None,
        other => {
            return Err(format!("durability must be sync, buffered or none, got {other:?}").into())
        }
    };
    let pool_mib: u64 = arg(&args, 4, 64);
    let dir = tempfile::tempdir()?;
    let db = Db::open(
        dir.path().join("store"),
        Options {
            pool_bytes: pool_mib << 20,
            durability,
            ..Options::default()
        },
    )?;
    let tree = db.tree("puts")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let data: Vec<([u8; 16], [u8; 100])> =
        (0..records).map(|_| (rng.random(), rng.random())).collect();
    let before = db.stats();
    let start = std::time::Instant::now();
    for chunk in data.chunks(batch.max(1)) {
        let mut b = WriteBatch::new();
        for (key, value) in chunk {
            b.put(tree, key, value)?;
        }
        db.write(&b, WriteOptions::default())?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = db.stats();
    let per_record = |bytes: u64| bytes as f64 / records.max(1) as f64;
    println!("records/s            {:.0}", records as f64 / seconds);
    println!(
        "log record bytes     {:.0} per record",
        per_record(after.log_record_bytes - before.log_record_bytes)
    );
    println!(
        "log bytes written    {:.0} per record",
        per_record(after.log_bytes - before.log_bytes)
    );
    println!(
        "log syncs            {}",
        after.log_syncs - before.log_syncs
    );
    db.close()?;
    Ok(())
}
