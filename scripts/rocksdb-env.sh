# Sourced by scripts/test.sh and scripts/run.sh (bash). Makes RocksDB's C++ library a
# one-time build shared by every cargo invocation:
#
# * installs libclang-dev when missing (librocksdb-sys generates its bindings with it);
# * builds RocksDB once (librocksdb-sys's own build script, -O3) into a cache directory
#   outside the clone, keyed by the librocksdb-sys version in Cargo.lock, unless it is there;
# * exports ROCKSDB_LIB_DIR / ROCKSDB_STATIC so librocksdb-sys links that archive instead of
#   compiling RocksDB again. Without this, every change in the crate graph's features (check vs
#   test vs doc builds select different dependency sets) recompiles RocksDB: 15–30 minutes on
#   2 cores each time.
#
# Override the cache with STATEKIT_ROCKSDB_CACHE; set STATEKIT_ROCKSDB_FROM_SOURCE=1 to skip
# all this and let librocksdb-sys compile RocksDB as usual.

if ! dpkg -s libclang-dev >/dev/null 2>&1 && ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing libclang-dev (for RocksDB's bindings)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null
  else
    echo "warning: libclang not found; install libclang-dev (RocksDB's bindings need it)" >&2
  fi
fi

if [ "${STATEKIT_ROCKSDB_FROM_SOURCE:-0}" != 1 ]; then
  rocksdb_version=$(awk '/^name = "librocksdb-sys"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  # The archive depends on the compression features the crates ask of the rocksdb crate.
  rocksdb_features=$(grep -ho '^rocksdb = .*features = \[[^]]*\]' crates/*/Cargo.toml | grep -o '"[a-z0-9-]*"' | sort -u | tr -d '"' | grep -v bindgen | tr '\n' '-' | sed 's/-$//')
  rocksdb_cache="${STATEKIT_ROCKSDB_CACHE:-/var/tmp/statekit-rocksdb}/$rocksdb_version${rocksdb_features:+-$rocksdb_features}"
  if [ ! -s "$rocksdb_cache/librocksdb.a" ]; then
    echo "==> building RocksDB $rocksdb_version once into $rocksdb_cache (15-30 min on 2 cores)"
    mkdir -p "$rocksdb_cache"
    (
      unset ROCKSDB_LIB_DIR ROCKSDB_STATIC
      CARGO_TARGET_DIR="$rocksdb_cache/build" cargo build --locked -q -p librocksdb-sys
    ) || { echo "error: building RocksDB failed" >&2; return 1 2>/dev/null || exit 1; }
    archive=$(ls -t "$rocksdb_cache"/build/debug/build/librocksdb-sys-*/out/librocksdb.a | head -n 1)
    cp "$archive" "$rocksdb_cache/librocksdb.a.tmp"
    mv "$rocksdb_cache/librocksdb.a.tmp" "$rocksdb_cache/librocksdb.a"
    rm -rf "$rocksdb_cache/build"
  fi
  export ROCKSDB_LIB_DIR="$rocksdb_cache" ROCKSDB_STATIC=1
fi
