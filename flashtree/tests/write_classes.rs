//! Every write carries its class (`WriteClass`): the simulated disk
//! records each write the storage makes, and each must match where it
//! lands: log blocks in the logs, hot or cold data pages in the data
//! region, superblocks at the head of the data file.

use flashtree::db::{Db, Options};
use flashtree::io::layout::HEAD_BYTES;
use flashtree::io::sim::{SimConfig, SimDisk};
use flashtree::io::{Vfs, WriteClass};
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn every_write_carries_the_class_of_where_it_lands() {
    let disk = SimDisk::new(SimConfig::new(3));
    disk.record_write_classes();
    let options = Options {
        pool_bytes: 48 * 4096,
        workers: 1,
        wal_bytes_per_worker: 4 << 20,
        checkpoint_log_bytes: 1 << 20,
        vfs: Vfs::Sim(disk.clone()),
        ..Options::default()
    };
    let db = Db::open(Path::new("/sim/store"), options).unwrap();
    let t = db.tree("t").unwrap();
    // Many keys in random order once (cold pages, evicted), a few keys
    // again and again (hot ones).
    for i in 0..20_000u32 {
        let key = i.wrapping_mul(2_654_435_761).to_be_bytes();
        db.put(t, &key, &[i as u8; 200]).unwrap();
        if i % 4 == 0 {
            let hot = [0, 0, 0, (i % 16) as u8];
            db.put(t, &hot, &[i as u8; 200]).unwrap();
        }
    }
    let stats = db.stats();
    db.close().unwrap();
    assert!(stats.page_writes_hot > 0, "{stats:?}");
    assert!(stats.page_writes_hot < stats.page_writes, "{stats:?}");
    let mut bytes: BTreeMap<&'static str, u64> = BTreeMap::new();
    for (path, offset, len, class) in disk.write_classes() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let expected: &[WriteClass] = if name.starts_with("data.ft.wal") {
            &[WriteClass::Log]
        } else if name == "data.ft" && offset < HEAD_BYTES {
            &[WriteClass::Meta]
        } else if name == "data.ft" {
            &[WriteClass::DataHot, WriteClass::DataCold]
        } else {
            panic!(
                "a write to {} at {offset} ({class:?}): no such part of a store",
                path.display()
            );
        };
        assert!(
            expected.contains(&class),
            "{len} bytes at {offset} of {} carry {class:?}, expected one of {expected:?}",
            path.display()
        );
        *bytes.entry(class.name()).or_default() += len;
    }
    for class in ["log", "hot data", "cold data", "meta"] {
        assert!(
            bytes.get(class).copied().unwrap_or(0) > 0,
            "no {class} writes: {bytes:?}"
        );
    }
}
