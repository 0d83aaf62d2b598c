#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build, test and benchmark
# flashtree. Idempotent: installs only missing packages.
set -euo pipefail

packages=(build-essential pkg-config clang libclang-dev
          librocksdb-dev rocksdb-tools libwiredtiger-dev liblmdb-dev
          libfontconfig1-dev fonts-dejavu-core fio linux-perf
          python3 python3-venv python3-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no cargo found; installing Debian's cargo (flashtree needs Rust >= 1.90)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo >/dev/null
fi
# The newest rust-version among the dependencies (redb, fjall) is 1.90.
rustc_version=$(rustc --version 2>/dev/null | awk '{print $2}')
if ! printf '%s\n%s\n' 1.90.0 "${rustc_version:-0}" | sort -V -C; then
  echo "setup: rustc ${rustc_version:-(none)} is too old: flashtree needs Rust >= 1.90 (rustup, or a newer Debian)" >&2
  exit 1
fi
