//! Filling a store until it is full: for tests of a full data region or
//! file system.

use flashtree::db::{Db, Tree};
use flashtree::Error;

/// Puts 1000-byte records under keys 0, 1, … until a put fails; checks
/// that it failed with `Error::Full` after more than 1000 records, and
/// that a sample of them reads back. Returns how many were written.
pub fn fill_until_full(db: &Db, t: Tree) -> u32 {
    let mut written = 0u32;
    let full = loop {
        match db.put(t, &written.to_be_bytes(), &[written as u8; 1000]) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 1_000_000, "the store never filled");
    };
    assert!(matches!(full, Error::Full(_)), "expected Full, got {full}");
    assert!(written > 1000, "only {written} records fit");
    for i in (0..written).step_by(31) {
        assert_eq!(
            db.get(t, &i.to_be_bytes()).unwrap(),
            Some(vec![i as u8; 1000])
        );
    }
    written
}
