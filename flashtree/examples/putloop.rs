use flashtree::db::{Db, Durability, Options};
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let n: usize = std::env::args().nth(2).unwrap().parse().unwrap();
    let mut o = Options::default();
    o.pool_bytes = 16 << 20;
    o.workers = 1;
    o.wal_bytes_per_worker = 64 << 20;
    if std::env::args().nth(3).as_deref() == Some("none") { o.durability = Durability::None; }
    let db = Db::open(&dir, o).unwrap();
    let t = db.tree("t").unwrap();
    let start = std::time::Instant::now();
    for i in 0..n as u64 {
        db.put(t, &i.to_be_bytes(), &[1u8; 100]).unwrap();
    }
    let el = start.elapsed();
    println!("{n} puts in {:?}: {:.1} us/put; stats {:?}", el, el.as_micros() as f64 / n as f64, db.stats());
    db.close().unwrap();
    let start = std::time::Instant::now();
    let db = Db::open(&dir, Options { workers: 1, ..Options::default() }).unwrap();
    let t = db.tree("t").unwrap();
    for i in 0..n as u64 { assert!(db.get(t, &i.to_be_bytes()).unwrap().is_some(), "{i}"); }
    println!("reopen+verify {:?}", start.elapsed());
}
