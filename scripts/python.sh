#!/usr/bin/env bash
# Builds the Python package `flashtree` (flashtree-py/, pyo3 + maturin, an
# abi3 wheel) and installs it into the virtual environment ./.venv, with
# pytest and the `lmdb` package (for `python -m flashtree.bench`).
# With --test, then runs its pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade "maturin>=1.5,<2" pytest lmdb
(cd flashtree-py && VIRTUAL_ENV="$PWD/../.venv" PATH="$PWD/../.venv/bin:$PATH" maturin develop --release -q)
echo "python: flashtree installed into .venv (.venv/bin/python -c 'import flashtree')"
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pytest -q flashtree-py/tests
fi
