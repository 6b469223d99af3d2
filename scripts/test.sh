#!/usr/bin/env bash
# The project's test command (README, CI). Works on a fresh Debian machine with cargo:
# it installs what the build needs, then runs formatting, lints and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds are cached outside the clone so CI and repeated runs build once.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/statekit-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# libclang for RocksDB's bindings, and RocksDB's C++ library built once and linked from a
# cache outside the clone (scripts/rocksdb-env.sh).
. scripts/rocksdb-env.sh

# tmux for the inspector's end-to-end test (it skips, saying so, where tmux cannot be had).
if ! command -v tmux >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing tmux (for the inspector's end-to-end test)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; } ||
      echo "warning: could not install tmux; tui_tmux will skip" >&2
  else
    echo "warning: tmux not found; tui_tmux will skip" >&2
  fi
fi

# Real Parquet readers (PyPI duckdb and pyarrow) for the table tests and a real S3 API server
# (PyPI moto[server]) for the object-store tests, in a venv outside the clone, made once; the
# tests find them through STATEKIT_PYTHON and STATEKIT_MOTO (each test starts its own server
# on a random loopback port and stops it).
STATEKIT_VENV="${STATEKIT_VENV:-/var/tmp/statekit-venv}"
if ! "$STATEKIT_VENV/bin/python" -c 'import duckdb, pyarrow, moto, flask' >/dev/null 2>&1 ||
  [ ! -x "$STATEKIT_VENV/bin/moto_server" ]; then
  echo "==> making $STATEKIT_VENV with duckdb, pyarrow and moto[server] (for the table and S3 tests)"
  if ! python3 -m venv "$STATEKIT_VENV" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf "$STATEKIT_VENV"
    python3 -m venv "$STATEKIT_VENV"
  fi
  "$STATEKIT_VENV/bin/pip" install --quiet --disable-pip-version-check duckdb pyarrow 'moto[server]'
fi
export STATEKIT_PYTHON="$STATEKIT_VENV/bin/python"
export STATEKIT_MOTO="$STATEKIT_VENV/bin/moto_server"

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy (all targets, -D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "==> cargo clippy: the statekit binary without the rocksdb feature"
cargo clippy -p statekit --no-default-features --locked --quiet -- -D warnings

echo "==> cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

echo "==> cargo test"
cargo test --workspace --locked "$@"
