#!/usr/bin/env bash
# A/B of two commits on flashtree alone, runs interleaved (A B A B …) in one
# session so that the shared machine's drift hits both sides alike. Each
# commit is built in its own worktree under $DIR; the summary lines are the
# flashtree rows of each run's report.md.
# Usage: [TASKS=512] [DATA_FACTOR=10] [SECONDS_PER_RUN=10] bash scripts/ab.sh REV_A REV_B [lookup|tpcc|ycsb-a..f] [rounds]
#   e.g. bash scripts/ab.sh 33038a5~1 33038a5 lookup 2
#        TASKS=256 bash scripts/ab.sh 8da0ecb~2 8da0ecb tpcc 2
#        TASKS=256 DATA_FACTOR=0.5 SECONDS_PER_RUN=5 bash scripts/ab.sh 8cf12f8 27c6526 ycsb-e 2
# Reads (writes) per operation = the row's read (write) IOPS ÷ ops/s.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/ab.sh REV_A REV_B [workload] [rounds]" >&2
  exit 2
fi
rev_a=$1 rev_b=$2 workload=${3:-tpcc} rounds=${4:-2} tasks=${TASKS:-512}
data_factor=${DATA_FACTOR:-10} seconds=${SECONDS_PER_RUN:-10}
export PATH="$HOME/.cargo/bin:$PATH"
DIR=$(realpath -m "${DIR:-./bench-data}")
mkdir -p "$DIR"

build() { # rev -> path of its flashtree binary
  local sha tree
  sha=$(git rev-parse --short "$1")
  tree="$DIR/ab-$sha"
  [ -d "$tree" ] || git worktree add --detach -q "$tree" "$sha"
  (cd "$tree" && CARGO_TARGET_DIR="$tree/target" cargo build -q --release -p flashtree-cli >&2)
  echo "$tree/target/release/flashtree"
}
bin_a=$(build "$rev_a")
bin_b=$(build "$rev_b")

for round in $(seq 1 "$rounds"); do
  for side in a b; do
    if [ $side = a ]; then bin=$bin_a rev=$rev_a; else bin=$bin_b rev=$rev_b; fi
    out=$("$bin" bench compare --workload "$workload" --engines flashtree --memory 128MiB \
           --data-factor "$data_factor" --cores 0 --seconds "$seconds" --tasks "$tasks" \
           --dir "$DIR/ab-data" --results "$DIR/ab-results" 2>&1)
    report=$(echo "$out" | sed -n 's/^results in //p' | tail -1)/report.md
    [ $round = 1 ] && [ $side = a ] && grep -m1 '^| engine' "$report"
    echo "round $round $rev: $(grep -m1 '^| flashtree' "$report")"
  done
done
