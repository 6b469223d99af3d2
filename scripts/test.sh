#!/usr/bin/env bash
# The project's test command (README, CI). Works on a fresh Debian machine with cargo:
# it installs what the build needs, then runs formatting, lints and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds are cached outside the clone so CI and repeated runs build once.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/statekit-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# RocksDB's bindings (librocksdb-sys) need libclang; install it when missing.
if ! dpkg -s libclang-dev >/dev/null 2>&1 && ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing libclang-dev (for RocksDB's bindings)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
  else
    echo "warning: libclang not found; install libclang-dev (RocksDB's bindings need it)" >&2
  fi
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy (all targets, -D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "==> cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

echo "==> cargo test"
cargo test --workspace --locked "$@"
