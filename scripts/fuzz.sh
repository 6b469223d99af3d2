#!/usr/bin/env bash
# Coverage-guided fuzzing of statekit's decoders on the stable toolchain (fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --build-only [TARGET...]     (what fuzz/seed.sh uses)
#
# Builds every fuzz target once (cargo fuzz build --sanitizer none, debug assertions on), then
# runs each TARGET (default: all) for SECONDS (default 60) from a scratch copy of its
# checked-in corpus (fuzz/corpus/<target>/ is never modified), and prints executions, exec/s,
# coverage and corpus size per target. Exits non-zero if any target crashed, panicked, hung
# (-timeout=10 per input), went past the RSS limit (-rss_limit_mb=2048) or hit the
# allocation cap; prints the artifact and how to reproduce it. Before fuzzing, each target
# replays its fuzz/regressions/<target>/ inputs (minimized findings): one that still fails
# is reported (column "regr") and also makes the exit status non-zero.
#
# Works on a fresh Debian machine with cargo: installs cargo-fuzz (and g++, which compiles
# libFuzzer, when root) if missing. The RocksDB target links RocksDB built once by
# scripts/rocksdb-env.sh.
#
# Environment: STATEKIT_FUZZ_TARGET_DIR (build dir, default /var/tmp/statekit-fuzz-target),
# STATEKIT_FUZZ_WORK (run directories, default /var/tmp/statekit-fuzz-work),
# STATEKIT_FUZZ_NICE (niceness of builds and runs, default 10), STATEKIT_FUZZ_ARGS (extra
# libFuzzer flags, e.g. "-jobs=1 -use_value_profile=1").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

all_targets=(decode_metadata keyed_file operator_file changelog_log_file changelog_record
  decode_value state_descriptor changelog_config rocksdb_layout flink_metadata flink_serializer flink_state
  rocksdb_files flink_file_handles import_rows)

seconds=60
build_only=0
if [ $# -gt 0 ] && [ "$1" = --build-only ]; then
  build_only=1
  shift
elif [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
if [ $# -gt 0 ]; then
  targets=("$@")
  for t in "${targets[@]}"; do
    if [[ " ${all_targets[*]} " != *" $t "* ]]; then
      echo "error: unknown fuzz target '$t' (targets: ${all_targets[*]})" >&2
      exit 2
    fi
  done
else
  targets=("${all_targets[@]}")
fi

export CARGO_TARGET_DIR="${STATEKIT_FUZZ_TARGET_DIR:-/var/tmp/statekit-fuzz-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
work_root="${STATEKIT_FUZZ_WORK:-/var/tmp/statekit-fuzz-work}"
nice_n="${STATEKIT_FUZZ_NICE:-10}"
read -r -a extra_args <<<"${STATEKIT_FUZZ_ARGS:-}"
libfuzzer_flags=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -dict="$root/fuzz/fuzz.dict")

# ---- tools --------------------------------------------------------------------------------
if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing g++ (libfuzzer-sys compiles libFuzzer with it)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  else
    echo "error: no C++ compiler; install g++ (libfuzzer-sys compiles libFuzzer with it)" >&2
    exit 1
  fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# ---- build --------------------------------------------------------------------------------
features=()
if [[ " ${targets[*]} " == *" rocksdb_layout "* ]]; then
  want=$(awk '/^name = "librocksdb-sys"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  have=$(awk '/^name = "librocksdb-sys"$/ { getline; gsub(/"/, "", $3); print $3; exit }' fuzz/Cargo.lock)
  if [ "$want" != "$have" ]; then
    echo "error: fuzz/Cargo.lock has librocksdb-sys $have, Cargo.lock $want; run" >&2
    echo "  (cd fuzz && cargo update -p librocksdb-sys --precise $want)" >&2
    exit 1
  fi
  # libclang, and RocksDB's C++ library built once into a cache (the fuzz build links it).
  . scripts/rocksdb-env.sh
  features=(--features rocksdb)
fi
echo "==> building fuzz targets (cargo fuzz build -s none -a, into $CARGO_TARGET_DIR)"
(cd fuzz && nice -n "$nice_n" cargo fuzz build --sanitizer none --debug-assertions \
  --target-dir "$CARGO_TARGET_DIR" "${features[@]}")
host=$(rustc -vV | sed -n 's/^host: //p')
bin_dir="$CARGO_TARGET_DIR/$host/release"
if [ "$build_only" = 1 ]; then
  echo "$bin_dir"
  exit 0
fi
if [ "$seconds" -lt 1 ]; then
  echo "error: SECONDS must be at least 1 (libFuzzer reads 0 as no limit)" >&2
  exit 2
fi

# ---- run ----------------------------------------------------------------------------------
mkdir -p "$work_root"
run_dir=$(mktemp -d "$work_root/run-$(date +%Y%m%d-%H%M%S)-XXXX")
# Keep the five most recent runs.
ls -1dt "$work_root"/run-* 2>/dev/null | tail -n +6 | while read -r old; do rm -rf -- "$old"; done

declare -A status execs rate cov ft corpus_files corpus_kb artifact regr
failed=0
found=0
still_failing=()
for t in "${targets[@]}"; do
  bin="$bin_dir/$t"
  # Known findings: each minimized input, run once.
  total=0 passed=0
  for r in fuzz/regressions/"$t"/*; do
    [ -f "$r" ] || continue
    total=$((total + 1))
    if timeout 60 nice -n "$nice_n" "$bin" -timeout=10 -rss_limit_mb=2048 "$r" >"$run_dir/regression.log" 2>&1; then
      passed=$((passed + 1))
    else
      still_failing+=("$t/$(basename "$r")")
      failed=1
    fi
  done
  regr[$t]="$passed/$total"
  corpus="$run_dir/corpus/$t"
  artifacts="$run_dir/artifacts/$t"
  log="$run_dir/$t.log"
  mkdir -p "$corpus" "$artifacts"
  if [ -d "fuzz/corpus/$t" ]; then
    find "fuzz/corpus/$t" -maxdepth 1 -type f -exec cp -t "$corpus" {} +
  fi
  echo "==> $t: ${seconds}s ($(find "$corpus" -type f | wc -l) corpus inputs)"
  rc=0
  # The outer timeout only guards against a fuzzer that does not stop by itself.
  timeout --kill-after=30 $((seconds + 300)) \
    nice -n "$nice_n" "$bin" "${libfuzzer_flags[@]}" -max_total_time="$seconds" \
    -artifact_prefix="$artifacts/" "${extra_args[@]}" "$corpus" >"$log" 2>&1 || rc=$?

  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  cov[$t]=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft[$t]=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  execs[$t]=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  rate[$t]=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  corpus_files[$t]=$(find "$corpus" -type f | wc -l)
  corpus_kb[$t]=$(find "$corpus" -type f -printf "%s\n" | awk "{ s += \$1 } END { printf \"%d\", (s + 1023) / 1024 }")
  artifact[$t]=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -n 1)

  if grep -q '==statekit-fuzz== allocation cap exceeded' "$log"; then
    status[$t]="ALLOC-CAP"
  elif grep -q 'ERROR: libFuzzer: timeout' "$log"; then
    status[$t]="TIMEOUT"
  elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then
    status[$t]="RSS-LIMIT"
  elif grep -q "panicked at" "$log"; then
    status[$t]="PANIC"
  elif grep -q 'ERROR: libFuzzer:' "$log" || [ "$rc" -ne 0 ]; then
    status[$t]="CRASH(rc=$rc)"
  else
    status[$t]="ok"
  fi
  if [ "${status[$t]}" != ok ]; then
    failed=1
    found=1
    echo "    ${status[$t]}: $(grep -m1 -E 'panicked at|==statekit-fuzz==|ERROR: libFuzzer' "$log" || true)"
    grep -m1 -A1 'panicked at' "$log" | tail -n 1 | sed 's/^/    /' || true
  fi
done

# ---- report -------------------------------------------------------------------------------
echo
echo "fuzzing report (${seconds}s per target; logs, corpora and artifacts in $run_dir)"
printf '%-20s %-12s %12s %8s %7s %7s %14s %6s\n' target result execs exec/s cov ft corpus regr
for t in "${targets[@]}"; do
  printf '%-20s %-12s %12s %8s %7s %7s %14s %6s\n' "$t" "${status[$t]}" "${execs[$t]:--}" "${rate[$t]:--}" \
    "${cov[$t]:--}" "${ft[$t]:--}" "${corpus_files[$t]}/${corpus_kb[$t]}K" "${regr[$t]}"
done
if [ ${#still_failing[@]} -gt 0 ]; then
  echo
  echo "regressions that still fail (fuzz/regressions/; reproduce: RUST_BACKTRACE=1 $bin_dir/<target> fuzz/regressions/<target>/<name>):"
  printf '  %s\n' "${still_failing[@]}"
fi
if [ "$found" = 1 ]; then
  echo
  echo "findings:"
  for t in "${targets[@]}"; do
    [ "${status[$t]}" = ok ] && continue
    a="${artifact[$t]:-}"
    echo "  $t: ${status[$t]}  artifact: ${a:-none written} (log: $run_dir/$t.log)"
    if [ -n "$a" ]; then
      echo "    reproduce: RUST_BACKTRACE=1 $bin_dir/$t $a"
      echo "    minimize:  (cd fuzz && cargo fuzz tmin -s none -a ${features[*]} --target-dir $CARGO_TARGET_DIR $t $a)"
      echo "    keep it:   cp <minimized> fuzz/regressions/$t/<short-name>"
    fi
  done
fi
echo
echo "to add this run's new coverage to the checked-in corpus (minimizing it):"
echo "  for t in ${targets[*]}; do mkdir -p fuzz/corpus/\$t.new &&"
echo "    $bin_dir/\$t -merge=1 -use_counters=0 fuzz/corpus/\$t.new fuzz/corpus/\$t $run_dir/corpus/\$t &&"
echo "    rm -r fuzz/corpus/\$t && mv fuzz/corpus/\$t.new fuzz/corpus/\$t; done"
exit "$failed"
