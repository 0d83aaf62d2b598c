#!/usr/bin/env bash
# Instructions per in-memory lookup (hardware counters are not available
# on this machine; valgrind's callgrind counts instructions instead).
#
# Runs `flashtree bench lookup` under callgrind twice on the same loaded
# store, for a short and a long time, and divides the difference of the
# program's instruction totals by the difference of the lookups done, so
# that start-up, the load and shutdown cancel out. Everything a lookup
# costs in the benchmark counts: key generation, the task, the executor,
# the descent, the latency histogram.
#
# Usage: bash scripts/lookup-instructions.sh
# Environment: RECORDS (200000), POOL (512MiB, so that the store is in
# memory), SHORT_S (4), LONG_S (12), DIR (bench-data/lookup-instructions),
# BIN (./target/release/flashtree).
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-200000}
pool=${POOL:-512MiB}
short_s=${SHORT_S:-4}
long_s=${LONG_S:-12}
dir=${DIR:-bench-data/lookup-instructions}
bin=${BIN:-./target/release/flashtree}
command -v valgrind >/dev/null || { echo "no valgrind: apt-get install valgrind" >&2; exit 1; }
command -v callgrind_annotate >/dev/null || { echo "no callgrind_annotate (valgrind package)" >&2; exit 1; }
[ -x "$bin" ] || cargo build --release -q -p flashtree-cli
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Load once (outside valgrind), then both measured runs reuse the store.
"$bin" bench lookup --records "$records" --pool "$pool" --seconds 1 --path "$dir" --json >/dev/null
measure() {
  local seconds=$1
  local json
  json=$(valgrind --tool=callgrind --callgrind-out-file="$out/cg-$seconds" \
    "$bin" bench lookup --records "$records" --pool "$pool" --seconds "$seconds" \
    --path "$dir" --reuse --json 2>/dev/null | tail -n 1)
  local instructions
  instructions=$(callgrind_annotate "$out/cg-$seconds" 2>/dev/null |
    awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  python3 -c "
import json, sys
s = json.loads(sys.argv[1])
# Each run starts with a cold pool and reads every page once; the two runs
# read the same pages, so the difference cancels them. The store must fit.
if s['dataset_bytes'] > s['pool_bytes'] // 2:
    sys.exit('the store (%d B) is not well inside the pool (%d B): raise POOL' % (s['dataset_bytes'], s['pool_bytes']))
print(int(sys.argv[2]), s['ops_per_sec'] * s['seconds'])" "$json" "$instructions"
}
read -r short_i short_n < <(measure "$short_s")
read -r long_i long_n < <(measure "$long_s")
python3 -c "
import sys
si, sn, li, ln = map(float, sys.argv[1:])
print('runs: %.0f lookups in %.0f instructions, %.0f in %.0f' % (sn, si, ln, li))
# The runs are timed, and under valgrind their speed varies: the difference
# means something only if the long run did clearly more lookups.
if ln < 1.5 * sn:
    sys.exit('the long run did not do 1.5x the short run\'s lookups: run again (or raise LONG_S)')
print('instructions per in-memory lookup: %.0f' % ((li - si) / (ln - sn)))" \
  "$short_i" "$short_n" "$long_i" "$long_n"
