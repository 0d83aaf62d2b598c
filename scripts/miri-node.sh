#!/usr/bin/env bash
# The B+-tree node tests (`btree::node`) under Miri, the Rust interpreter
# that reports undefined behaviour (out-of-bounds or unaligned accesses,
# invalid values, use after free) in the code it runs. The node code reads
# pages that optimistic readers may see mid-change, through raw page
# bytes and `unsafe` casts; these tests run its read and write paths on
# valid, corrupted and random pages.
#
# Miri interprets every instruction (about 1,000 times slower than native
# code), so the property tests run few cases: PROPTEST_CASES (default 2).
# Needs the nightly toolchain with the miri component:
#   rustup toolchain install nightly --component miri
# Usage: bash scripts/miri-node.sh [test name filter]
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES=${PROPTEST_CASES:-2}
# Isolation off: proptest reads its failure-persistence files.
export MIRIFLAGS=${MIRIFLAGS:--Zmiri-disable-isolation}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri}
cargo +nightly miri test -p flashtree --lib "btree::node::tests::${1:-}"
