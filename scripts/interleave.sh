#!/usr/bin/env bash
# Interleaved `bench lookup --reuse` runs of several variants (binaries or
# flags) on one freshly loaded store, so that the shared machine's drift
# hits every variant alike; prints each run and the mean per variant.
# Usage: [STORE=dir] [SECONDS_PER_RUN=8] [SEPARATE_STORES=1] bash scripts/interleave.sh ROUNDS 'label|binary|flags' ...
#   binary empty: ./target/release/flashtree. Example (submission limit):
#   bash scripts/interleave.sh 4 'limit||' 'no-limit||--max-submitted 0'
# The store is loaded fresh first: on this VM's disk an old file can read
# far slower than a new one (see README, "Measured results").
# SEPARATE_STORES=1 gives each variant its own store, loaded fresh by its
# own binary (for binaries whose store formats differ).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/interleave.sh ROUNDS 'label|binary|flags' ..." >&2
  exit 2
fi
rounds=$1; shift
store=${STORE:-./bench-data/interleave}
seconds=${SECONDS_PER_RUN:-8}
default_bin=./target/release/flashtree
common=(bench lookup --records 10000000 --pool 128MiB --tasks 512)
rm -rf "$store"
mkdir -p "$store"
store_of() { # label -> the store its runs use
  if [ "${SEPARATE_STORES:-0}" = 1 ]; then echo "$store/$1"; else echo "$store"; fi
}
if [ "${SEPARATE_STORES:-0}" = 1 ]; then
  for spec in "$@"; do
    IFS='|' read -r label bin _ <<<"$spec"
    "${bin:-$default_bin}" "${common[@]}" --seconds 1 --path "$(store_of "$label")" --json >/dev/null
  done
else
  IFS='|' read -r _ first_bin _ <<<"$1"
  "${first_bin:-$default_bin}" "${common[@]}" --seconds 1 --path "$store" --json >/dev/null
fi
for round in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    IFS='|' read -r label bin flags <<<"$spec"
    # shellcheck disable=SC2086  # flags are meant to split
    json=$(taskset -c 0 "${bin:-$default_bin}" "${common[@]}" --seconds "$seconds" \
             --path "$(store_of "$label")" --reuse --json $flags 2>/dev/null | tail -1)
    ops=$(grep -o '"ops_per_sec":[0-9.]*' <<<"$json" | cut -d: -f2)
    cpu=$(grep -o '"cpu_us_per_op":[0-9.]*' <<<"$json" | cut -d: -f2)
    printf 'round %s %-12s %8.0f lookups/s %6.2f CPU us/lookup\n' "$round" "$label" "$ops" "$cpu"
  done
done | tee /dev/stderr | awk '{n[$3]++; o[$3]+=$4; c[$3]+=$6}
  END {for (k in n) printf "mean %-12s %8.0f lookups/s %6.2f CPU us/lookup (%d runs)\n", k, o[k]/n[k], c[k]/n[k], n[k]}'
