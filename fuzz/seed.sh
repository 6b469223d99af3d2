#!/usr/bin/env bash
# Regenerates the checked-in corpora fuzz/corpus/<target>/ from the fixtures:
#
#   fuzz/seed.sh [--keep] [TARGET...]
#
# 1. `examples/gen_seeds.rs` (plain cargo build, no instrumentation) writes seed inputs from
#    fixtures/ (Flink's `_metadata` files of fixtures/flink; v1's golden and corrupted files, the entries inside them with their schemas,
#    change records, RocksDB keys/values/lists/operands, configuration text);
# 2. the fuzz targets are built (scripts/fuzz.sh --build-only);
# 3. each target's seeds are minimized into fuzz/corpus/<target>/ with libFuzzer's
#    `-merge=1` (what `cargo fuzz cmin` does): only inputs that add coverage are kept. With
#    `-use_counters=0` coverage means edges, not hit counts, which keeps the corpus small.
#
# With --keep the current corpus is merged in too (to keep what fuzzing runs found);
# otherwise the corpus is rebuilt from the seeds alone. Same environment as scripts/fuzz.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
if [ $# -gt 0 ] && [ "$1" = --keep ]; then
  keep=1
  shift
fi
all_targets=(decode_metadata keyed_file operator_file changelog_log_file changelog_record
  decode_value state_descriptor changelog_config rocksdb_layout flink_metadata flink_serializer flink_state)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi

export CARGO_TARGET_DIR="${STATEKIT_FUZZ_TARGET_DIR:-/var/tmp/statekit-fuzz-target}"
nice_n="${STATEKIT_FUZZ_NICE:-10}"

echo "==> generating seeds (fuzz/examples/gen_seeds.rs)"
(cd fuzz && nice -n "$nice_n" cargo build --release --quiet --example gen_seeds)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/statekit-seeds-XXXX")
trap 'rm -rf -- "$tmp"' EXIT
"$CARGO_TARGET_DIR/release/examples/gen_seeds" fixtures "$tmp/seeds"

scripts/fuzz.sh --build-only "${targets[@]}" >/dev/null
bin_dir="$CARGO_TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release"

for t in "${targets[@]}"; do
  mkdir -p "$tmp/seeds/$t" "$tmp/new/$t"
  old=()
  if [ "$keep" = 1 ] && [ -d "fuzz/corpus/$t" ]; then old=("fuzz/corpus/$t"); fi
  nice -n "$nice_n" "$bin_dir/$t" -merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=2048 \
    "$tmp/new/$t" "${old[@]}" "$tmp/seeds/$t" >"$tmp/$t.merge.log" 2>&1 || {
    echo "error: merging $t failed:" >&2
    tail -n 20 "$tmp/$t.merge.log" >&2
    exit 1
  }
  rm -rf -- "fuzz/corpus/$t"
  mkdir -p fuzz/corpus
  mv "$tmp/new/$t" "fuzz/corpus/$t"
  echo "    $t: $(find "$tmp/seeds/$t" -type f | wc -l) seeds -> $(find "fuzz/corpus/$t" -type f | wc -l) inputs ($(du -sk --apparent-size "fuzz/corpus/$t" | cut -f1) KB)"
done
