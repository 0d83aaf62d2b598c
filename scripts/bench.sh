#!/usr/bin/env bash
# The main job: the headline benchmark on a default file-backed store
# (random lookups, 8-byte keys and 120-byte values, dataset 10x the pool).
# Extra arguments go to `flashtree bench lookup` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -p flashtree-cli
exec ./target/release/flashtree bench lookup "$@"
