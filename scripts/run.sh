#!/usr/bin/env bash
# The project's run command (README): the word-count job on its built-in input with
# embedded defaults, stopped with a savepoint, then `statekit show` and `statekit verify` of it.
# Extra arguments go to `statekit demo wordcount` (e.g. --input FILE --parallelism 4).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/statekit-target}"
. scripts/rocksdb-env.sh
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
