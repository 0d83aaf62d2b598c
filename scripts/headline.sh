#!/usr/bin/env bash
# Runs every headline measurement of the closing notes, one after another,
# on files under $DIR (default ./bench-data), and logs to results/.
# Usage: bash scripts/headline.sh [io|lookup|model|compare|ycsb|durable|all]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -p flashtree-cli
FT=./target/release/flashtree
DIR=${DIR:-./bench-data}
mkdir -p "$DIR" results
what=${1:-all}
log=results/headline-$(date +%Y%m%d-%H%M%S)-$what.txt
exec > >(tee "$log") 2>&1
echo "# flashtree headline run, $(date -u), $(nproc) cores, $(uname -r)"

if [[ $what == io || $what == all ]]; then
  echo "## issue 2: iobench vs fio on the same file (one run each, interleaved)"
  $FT iobench --path "$DIR/io.dat" --size 8GiB --seconds 10 --depth 128 --backend io_uring --vs-fio
  $FT iobench --path "$DIR/io.dat" --size 8GiB --seconds 10 --depth 128 --backend libaio --vs-fio
  $FT iobench --path "$DIR/io.dat" --size 8GiB --seconds 10 --depth 1 --backend sync --vs-fio
  echo "## issue 2: depth sweep (plot in results/iobench-depth.png)"
  $FT iobench --path "$DIR/io.dat" --size 8GiB --seconds 5 --depth 1,2,4,8,16,32,64,128,256 --backend io_uring
fi

if [[ $what == lookup || $what == all ]]; then
  echo "## issue 3: 10M records, 128 MiB pool (~11x out of memory), 1 worker, device measured before and after"
  $FT bench lookup --records 10000000 --pool 128MiB --workers 1 --seconds 20 --path "$DIR/oom" --vs-iobench
  echo "## issue 3: 10M records in memory (pool 2 GiB), 1 worker"
  $FT bench lookup --records 10000000 --pool 2GiB --workers 1 --tasks 16 --seconds 10 --path "$DIR/mem"
fi

if [[ $what == model || $what == all ]]; then
  echo "## issue 5: measure, fit, then bench lookup with the chosen tasks vs a manual sweep"
  $FT model measure --quick --path "$DIR/model.dat" --size 4GiB --out "$DIR/grid.json"
  $FT model fit --input "$DIR/grid.json" --out "$DIR/model.json"
  $FT bench lookup --records 10000000 --pool 128MiB --workers 1 --seconds 10 --path "$DIR/oom" --reuse \
      --model "$DIR/model.json" --tasks-sweep 1,4,16,64,256
fi

if [[ $what == compare || $what == all ]]; then
  # --profile: each engine's best run is sampled with perf (cpu-clock), and
  # report.md says where the time goes; without perf the section says why.
  echo "## issue 4: random lookups 10x out of memory on core 0"
  $FT bench compare --workload lookup --engines flashtree,rocksdb,wiredtiger,lmdb \
      --memory 128MiB --data-factor 10 --cores 0 --seconds 10 --threads 16,64,256,1024 --tasks 256,512 \
      --dir "$DIR/compare" --profile
  echo "## issue 4: TPC-C 10x out of memory on core 0"
  $FT bench compare --workload tpcc --engines flashtree,rocksdb,wiredtiger,lmdb \
      --memory 128MiB --data-factor 10 --cores 0 --seconds 10 --threads 4,16,64,256 --tasks 256,512 \
      --dir "$DIR/compare" --profile
fi

if [[ $what == ycsb || $what == all ]]; then
  echo "## issue 4: YCSB A-F in memory (0.25: every engine's data fits) and 10x out of memory, core 0"
  $FT bench compare --workload ycsb --data-factor 0.25,10 --engines flashtree,rocksdb,wiredtiger,lmdb \
      --memory 128MiB --cores 0 --seconds 5 --threads 16,64 --tasks 32,256 --dir "$DIR/compare"
  echo "## issue 16: YCSB-E 10x out of memory, every engine compacted after its load (RocksDB CompactRange, flashtree Db::compact), 3 rounds"
  $FT bench compare --workload ycsb-e --data-factor 10 --engines flashtree,rocksdb,lmdb \
      --memory 128MiB --cores 0 --seconds 15 --rounds 3 --compact-after-load --dir "$DIR/compare-e"
fi
if [[ $what == durable || $what == all ]]; then
  # Every engine commits to disk (--durability sync). flashtree gets a 2 GiB
  # log per worker and a checkpoint per 1 GiB of log (see README).
  wal=(--wal-per-worker 2GiB --checkpoint-log 1GiB)
  echo "## issue 15: TPC-C in sync, 3 interleaved rounds of 30 s, 10x out of memory on core 0"
  # 30 s runs: TPC-C measures a steady state, and 10 s runs catch both
  # engines right after their open (the figures: docs/ARCHITECTURE, "How
  # long a durable TPC-C run lasts").
  $FT bench compare --workload tpcc --durability sync --engines flashtree,rocksdb,wiredtiger \
      --memory 128MiB --data-factor 10 --cores 0 --seconds 30 --threads 16,64,256 --rounds 3 \
      "${wal[@]}" --dir "$DIR/durable" --keep-data
  echo "## issue 15: flashtree TPC-C sync vs none, 3 rounds of none, sync, none, ... on one store"
  # 30 s runs: in none, a run starts with a pool of clean pages and slows as
  # dirty ones pile up (10.1k txn/s in its first second, about 8k from the
  # tenth on), so 10 s runs compare sync with none's best moments; in 30 s,
  # sync also runs through its checkpoints (two, with a 1 GiB interval).
  # Each sync run is divided by the mean of the none runs on either side
  # (scripts/durability-cost.sh), so the host's drift and the store's growth
  # from run to run weigh on both sides of each ratio.
  FT=$FT DIR="$DIR/durability-cost" ROUNDS=3 bash scripts/durability-cost.sh
  echo "## issue 15: YCSB-A in sync, 3 interleaved rounds"
  # With the default log, as README's YCSB-A figures were measured.
  $FT bench compare --workload ycsb-a --durability sync --engines flashtree,rocksdb \
      --memory 128MiB --data-factor 10 --cores 0 --seconds 10 --threads 16,64,256 --rounds 3 \
      --dir "$DIR/durable"
  echo "## issue 15: SIGKILL of every engine in sync, then reopen and check every acknowledged commit"
  for workload in puts ycsb-a tpcc; do
    $FT bench recover --engines flashtree,rocksdb,wiredtiger,lmdb,redb,fjall --workload $workload \
        --seconds 5 --threads 8 --path "$DIR/recover-$workload"
  done
fi
echo "# log: $log"
