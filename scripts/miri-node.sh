#!/usr/bin/env bash
# The B+-tree node tests (`btree::node`) under Miri, the Rust interpreter
# that reports undefined behaviour (out-of-bounds or unaligned accesses,
# invalid values, use after free) in the code it runs. The node code reads
# pages that optimistic readers may see mid-change (through `RacyPage`'s
# volatile loads) and casts page bytes to nodes; these tests run its read
# paths through both views and its write paths on valid, corrupted and
# random pages. One thread only: a reader racing a writer is not tested
# (Miri's race detector would flag volatile reads racing plain writes).
#
# Miri interprets every instruction (about 1,000 times slower than native
# code), so the property tests run few cases: PROPTEST_CASES (default 2).
# Even so `garbage_pages_never_panic` (a random page, every slot's key and
# value, a debug print of the node) ran for more than 40 minutes at one
# case on this machine without finishing; `--skip garbage` leaves it out:
#   bash scripts/miri-node.sh -- --skip garbage
# Needs the nightly toolchain with the miri component:
#   rustup toolchain install nightly --component miri
# Usage: bash scripts/miri-node.sh [test name filter] [-- test harness arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES=${PROPTEST_CASES:-2}
# Isolation off: proptest reads its failure-persistence files.
export MIRIFLAGS=${MIRIFLAGS:--Zmiri-disable-isolation}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri}
filter="btree::node::tests::"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  filter+="$1"
  shift
fi
[ "${1:-}" = "--" ] && shift
cargo +nightly miri test -p flashtree --lib "$filter" -- "$@"
