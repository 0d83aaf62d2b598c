#!/usr/bin/env bash
# The RocksDB adapter against RocksDB's own benchmark tool, db_bench
# (Debian package rocksdb-tools, the same librocksdb 7.8 the adapter links),
# on the same data, cache and core, in one run.
#
# `bench compare` loads the lookup dataset once (--keep-data); then each
# pair runs `db_bench readrandom` and the adapter's lookup run on those same
# SST files (db_bench reads the adapter's 4-byte table prefix + 8-byte key:
# --key_size=12 --prefix_size=4 --keys_per_prefix=RECORDS), one after the
# other (A B A B ...), both pinned to CORE, both started with a cold cache,
# each for SECONDS, at each thread count. db_bench gets the adapter's table
# options (block cache = MEMORY, LRU with the high-priority pool at 0.5 as
# RocksDB's default NewLRUCache the adapter uses, index and filter blocks
# charged to it, L0 ones pinned, 4 KiB blocks, 10 bits/key bloom, data-block
# hash index, no compression, direct reads). db_bench checks its clock after
# every operation (by default each thread checks it only every 1000
# operations, so that a run with many threads on one core outlasts
# SECONDS_PER_RUN, each thread stopping at a multiple of 1000). As root both run at nice -15,
# so that other processes on the core disturb them less. Prints one row per
# pair and thread count, the ratio adapter / db_bench, and the median ratio
# per thread count; --json prints JSON lines instead.
#
# Usage: bash scripts/peers-vs-own-tools.sh [--json]
# Environment: RECORDS (10000000), MEMORY (128MiB), CORE (0), THREADS
# (8,64,256), SECONDS_PER_RUN (10), PAIRS (3), DIR (bench-data/own-tools: reused
# while it holds the same load), DB_BENCH_FLAGS (extra db_bench flags, e.g.
# --cache_index_and_filter_blocks=0 for db_bench's default of keeping index
# and filter blocks outside the cache, i.e. more memory than MEMORY).
set -euo pipefail
cd "$(dirname "$0")/.."
json=0
[ "${1:-}" = "--json" ] && json=1
records=${RECORDS:-10000000}
memory=${MEMORY:-128MiB}
core=${CORE:-0}
threads=${THREADS:-8,64,256}
seconds=${SECONDS_PER_RUN:-10}
pairs=${PAIRS:-3}
dir=${DIR:-bench-data/own-tools}
flashtree=./target/release/flashtree
db_bench=$(command -v db_bench || command -v rocksdb_db_bench || true)
if [ -z "$db_bench" ]; then
  echo "no db_bench: apt-get install rocksdb-tools (scripts/setup.sh does)" >&2
  exit 1
fi
[ -x "$flashtree" ] || cargo build --release -q
nice_cmd=()
[ "$(id -u)" = 0 ] && nice_cmd=(nice -n -15)
cache_bytes=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)\s*(|B|KiB|MiB|GiB)', sys.argv[1])
if not m: sys.exit('MEMORY: use e.g. 128MiB')
print(int(m[1]) * {'':1,'B':1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[m[2]])" "$memory")
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
compare=("${nice_cmd[@]}" "$flashtree" bench compare --engines rocksdb --workload lookup --records "$records"
         --memory "$memory" --cores "$core" --dir "$dir" --results "$log/results"
         --keep-data --reuse-data --warmup 0 --json)
# Load (skipped while DIR holds this load).
"${compare[@]}" --threads 1 --seconds 1 >"$log/load.out" 2>&1 || { cat "$log/load.out" >&2; exit 1; }
db_dir="$dir/rocksdb/rocksdb"
db_bench_flags=(--benchmarks=readrandom --use_existing_db=1 --db="$db_dir"
  --num="$records" --key_size=12 --prefix_size=4 --keys_per_prefix="$records"
  --value_size=120 --cache_size="$cache_bytes" --cache_index_and_filter_blocks=1
  --pin_l0_filter_and_index_blocks_in_cache=1 --cache_high_pri_pool_ratio=0.5 --bloom_bits=10 --block_size=4096
  --compression_type=none --use_direct_reads=1 --use_direct_io_for_flush_and_compaction=1
  --use_data_block_hash_index=1 --level_compaction_dynamic_level_bytes=1
  --max_background_jobs=2 --open_files=-1 --duration="$seconds"
  --ops_between_duration_checks=1)
# shellcheck disable=SC2206  # extra flags are meant to split
db_bench_flags+=(${DB_BENCH_FLAGS:-})
if [ $json = 0 ]; then
  echo "# db_bench ($db_bench) readrandom vs the rocksdb adapter (bench compare --workload lookup)"
  echo "# $records records, cache $memory, core $core, $seconds s per run, same SST files ($db_dir)"
  [ -n "${DB_BENCH_FLAGS:-}" ] && echo "# extra db_bench flags: $DB_BENCH_FLAGS"
  printf '%-5s %-8s %14s %14s %8s\n' pair threads db_bench_ops/s adapter_ops/s ratio
fi
IFS=',' read -r -a thread_list <<<"$threads"
for pair in $(seq 1 "$pairs"); do
  for t in "${thread_list[@]}"; do
    "${nice_cmd[@]}" taskset -c "$core" "$db_bench" "${db_bench_flags[@]}" --threads="$t" --seed="$pair" \
      >"$log/db_bench.out" 2>&1 || { cat "$log/db_bench.out" >&2; exit 1; }
    db_ops=$(awk '/^readrandom +:/ { for (i = 1; i < NF; i++) if ($(i + 1) == "ops/sec") print $i }' "$log/db_bench.out")
    "${compare[@]}" --threads "$t" --seconds "$seconds" --seed "$pair" >"$log/adapter.out" 2>&1 \
      || { cat "$log/adapter.out" >&2; exit 1; }
    adapter_ops=$(python3 -c "
import json,sys
for line in open(sys.argv[1]):
    if line.startswith('{'):
        print(round(json.loads(line)['ops_per_sec']))" "$log/adapter.out")
    ratio=$(python3 -c "import sys; print(f'{int(sys.argv[2]) / int(sys.argv[1]):.3f}')" "$db_ops" "$adapter_ops")
    echo "$t $ratio" >>"$log/ratios"
    if [ $json = 1 ]; then
      printf '{"pair":%d,"threads":%d,"records":%d,"cache_bytes":%d,"core":"%s","seconds":%s,"db_bench_ops_per_sec":%d,"adapter_ops_per_sec":%d,"ratio":%s,"db_bench_extra_flags":"%s"}\n' \
        "$pair" "$t" "$records" "$cache_bytes" "$core" "$seconds" "$db_ops" "$adapter_ops" "$ratio" "${DB_BENCH_FLAGS:-}"
    else
      printf '%-5s %-8s %14s %14s %8s\n' "$pair" "$t" "$db_ops" "$adapter_ops" "$ratio"
    fi
  done
done
if [ $json = 0 ]; then
  for t in "${thread_list[@]}"; do
    awk -v t="$t" '$1 == t { print $2 }' "$log/ratios" | sort -n \
      | awk -v t="$t" '{ r[NR] = $1 } END { m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2;
          printf "median ratio at %s threads: %.3f over %d pairs (min %.3f, max %.3f)\n", t, m, NR, r[1], r[NR] }'
  done
fi
