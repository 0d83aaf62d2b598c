#!/usr/bin/env bash
# The test command: formatting, lints, the whole Rust test suite (with the
# CLI's tests) and the Python package's pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
# The Python package (its own cargo workspace): lints, then build it into
# .venv and run its pytest suite.
(cd flashtree-py && cargo fmt --check && cargo clippy -- -D warnings)
bash scripts/python.sh --test
bash scripts/c.sh --test
