#!/usr/bin/env bash
# Reading a real Apache Flink savepoint: `statekit show`, `dump` and `verify` beside `cat` of
# the savepoint's files, all measured in this run (best of 3, warm page cache), as ratios.
#
#   benches/flink_read.sh STATEKIT_BINARY SAVEPOINT_DIR UID STATE
#
# Make the savepoint with the oracle's ckbench (1M keys × 1000 B of ValueState<byte[]>,
# about 1 GB; `ckbench.keep=true` keeps it):
#
#   FLINK_LIB=… CKBENCH_DIR=/var/tmp/ckbench HEAP=6g \
#     BENCH_OPTS="-Dckbench.keep=true -Dckbench.savepoints=canonical,native -Dckbench.checkpoints=1" \
#     ../shared/flink-oracle/run.sh ckbench 1000000 1000 hashmap
#   benches/flink_read.sh target/release/statekit /var/tmp/ckbench/hashmap/savepoints/savepoint-… kv-state payload
#
# Also prints the files `show` opens (with strace, when installed): `_metadata` only.
set -euo pipefail
bin=$1 dir=$2 uid=$3 state=$4

best() { # best wall time in seconds of 3 runs of "$@" (stdout discarded)
  local b=
  for _ in 1 2 3; do
    local s e
    s=$(date +%s.%N)
    "$@" > /dev/null
    e=$(date +%s.%N)
    b=$(python3 -c "import sys; t=$e-$s; b='$b'; print(t if not b or t<float(b) else b)")
  done
  echo "$b"
}

bytes=$(du -sb --apparent-size "$dir" | cut -f1)
files=$(find "$dir" -type f | wc -l)
cat_s=$(best sh -c "cat '$dir'/* > /dev/null")
show_s=$(best "$bin" show "$dir")
dump_s=$(best "$bin" dump "$dir" --uid "$uid" --state "$state" --json)
verify_s=$(best "$bin" verify "$dir")
entries=$("$bin" dump "$dir" --uid "$uid" --state "$state" 2>&1 >/dev/null | tail -n 1)
rss() { # peak resident set of "$@" in MB (GNU time), or "?"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f %M -o /tmp/flink_read_rss.$$ "$@" > /dev/null 2>&1 || true
    echo $(( $(cat /tmp/flink_read_rss.$$) / 1024 ))
    rm -f /tmp/flink_read_rss.$$
  else
    echo "?"
  fi
}
show_rss=$(rss "$bin" show "$dir")
dump_rss=$(rss "$bin" dump "$dir" --uid "$uid" --state "$state" --json)
verify_rss=$(rss "$bin" verify "$dir")
python3 - "$bytes" "$files" "$cat_s" "$show_s" "$dump_s" "$verify_s" "$entries" "$show_rss" "$dump_rss" "$verify_rss" <<'PY'
import sys
b, f = int(sys.argv[1]), int(sys.argv[2])
cat, show, dump, verify = map(float, sys.argv[3:7])
rss = sys.argv[8:11]
mb = b / 1e6
print(f"savepoint: {mb:.0f} MB in {f} files; dump wrote {sys.argv[7]}")
print(f"{'what':28} {'time':>9} {'MB/s':>8} {'vs cat':>8} {'peak RSS':>9}")
print(f"{'cat of its files (anchor)':28} {cat:8.3f}s {mb/cat:8.0f} {1.0:7.2f}x")
for (name, t), m in zip([("statekit show", show), ("statekit dump --json", dump), ("statekit verify", verify)], rss):
    print(f"{name:28} {t:8.3f}s {mb/t:8.0f} {cat/t:7.2f}x {m:>6} MB")
PY
if command -v strace > /dev/null; then
  echo "files statekit show opens:"
  strace -f -e trace=openat -o /tmp/flink_read_strace.$$ "$bin" show "$dir" > /dev/null 2>&1 || true
  grep -v ENOENT /tmp/flink_read_strace.$$ | grep -o "\"${dir%/}[^\"]*\"" | sort | uniq -c | sed 's/^/  /'
  rm -f /tmp/flink_read_strace.$$
fi
