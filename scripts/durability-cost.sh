#!/usr/bin/env bash
# What durability costs flashtree: TPC-C at 10x out of memory on one core in
# `sync` against `none`, run as a sandwich on one store loaded once:
#   none, sync, none, sync, ..., none      (ROUNDS sync runs, ROUNDS+1 none)
# Each sync run is divided by the mean of the none runs on either side of it,
# so a drift of the shared machine's speed, and the store's growth from run
# to run (TPC-C inserts: a later run reads a larger store through the same
# pool), weigh on both sides of each ratio alike. Pairs of `none` then
# `sync` put sync always second, on the larger store.
# Prints each run, each ratio and their min, median and max; with --json, one
# JSON object per run and one for the ratios.
# Usage: [FT=flashtree] [DIR=./bench-data/durability-cost] [ROUNDS=3] [SECONDS_PER_RUN=30]
#        [TASKS=128] [CORE=0] [REUSE=1] bash scripts/durability-cost.sh [--json]
#   REUSE=1 keeps a store a run of this script loaded (DIR/flashtree.loaded);
#   by default the store is loaded afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
ft=${FT:-./target/release/flashtree}
dir=$(realpath -m "${DIR:-./bench-data/durability-cost}")
rounds=${ROUNDS:-3} seconds=${SECONDS_PER_RUN:-30} tasks=${TASKS:-128} core=${CORE:-0}
json=0
[ "${1:-}" = --json ] && json=1
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "ROUNDS must be a positive integer, not '$rounds'" >&2
  exit 2
fi
[ -x "$ft" ] || { echo "no flashtree binary at $ft (cargo build --release -p flashtree-cli, or set FT)" >&2; exit 2; }
mkdir -p "$dir"
reuse=()
[ "${REUSE:-0}" = 1 ] && reuse=(--reuse-data)
if [ "${REUSE:-0}" != 1 ]; then rm -rf "$dir/flashtree" "$dir/flashtree.loaded"; fi

errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
run() { # mode -> prints the run's JSON summary line (nothing if it failed)
  taskset -c "$core" "$ft" bench compare --workload tpcc --engines flashtree --memory 128MiB \
    --data-factor 10 --cores "$core" --seconds "$seconds" --tasks "$tasks" \
    --wal-per-worker 2GiB --checkpoint-log 1GiB --durability "$1" \
    --dir "$dir" --results "$dir/results" --keep-data "${reuse[@]}" --json 2>"$errors" \
    | { grep '"engine":"flashtree"' || true; } | tail -1
}

# A top-level field of a JSON summary line (null as 0), parsed as JSON:
# the first match of a pattern could be a nested field of the same name.
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[2]).get(sys.argv[1]) or 0)' "$1" "$2"; }

modes=(none)
for _ in $(seq 1 "$rounds"); do modes+=(sync none); done
ops=()
n=0
for mode in "${modes[@]}"; do
  line=$(run "$mode") || true
  if [ -z "$line" ]; then
    echo "run $n ($mode) printed no result; its last lines:" >&2
    tail -5 "$errors" >&2
    exit 1
  fi
  reuse=(--reuse-data)
  o=$(field ops_per_sec "$line")
  c=$(field cpu_us_per_op "$line")
  ops+=("$o")
  if [ $json = 1 ]; then
    printf '{"run":%d,"durability":"%s","txn_per_sec":%s,"cpu_us_per_txn":%s}\n' "$n" "$mode" "$o" "$c"
  else
    printf 'run %2d %-5s %9.0f txn/s %7.1f CPU us/txn\n' "$n" "$mode" "$o" "$c" >&2
  fi
  n=$((n + 1))
done
python3 - "$json" "${ops[@]}" <<'EOF'
import json, statistics, sys
as_json = sys.argv[1] == "1"
ops = [float(x) for x in sys.argv[2:]]
ratios = []
for i in range(1, len(ops), 2):
    ratios.append(ops[i] / ((ops[i - 1] + ops[i + 1]) / 2))
spread = (min(ratios), statistics.median(ratios), max(ratios))
if as_json:
    print(json.dumps({"sync_over_none": ratios, "min": spread[0], "median": spread[1], "max": spread[2]}))
else:
    for k, r in enumerate(ratios):
        print(f"round {k + 1}: sync {ops[2 * k + 1]:.0f} / mean of none {ops[2 * k]:.0f} and {ops[2 * k + 2]:.0f} = {r:.3f}")
    print(f"sync / none: min {spread[0]:.3f}, median {spread[1]:.3f}, max {spread[2]:.3f} over {len(ratios)} rounds")
EOF
