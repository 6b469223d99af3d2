#!/usr/bin/env bash
# The project's run command (README): the word-count job on its built-in input with
# embedded defaults, stopped with a savepoint, then `statekit show` and `statekit verify` of it.
# Extra arguments go to `statekit demo wordcount` (e.g. --input FILE --parallelism 4).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/statekit-target}"
# RocksDB's bindings (librocksdb-sys) need libclang; install it when missing.
if ! dpkg -s libclang-dev >/dev/null 2>&1 && ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
fi
cargo build --release --locked -q -p statekit
statekit="$CARGO_TARGET_DIR/release/statekit"
savepoint=$("$statekit" demo wordcount --stop-with-savepoint "$@")
run=$(basename "$savepoint" | cut -d- -f2)
echo
echo "== this run's committed output (statekit-data/output/part-*-$run), last lines =="
cat statekit-data/output/part-*-"$run" | tail -n 5
echo
echo "== statekit show $savepoint =="
"$statekit" show "$savepoint"
echo
echo "== statekit verify $savepoint =="
"$statekit" verify "$savepoint"
