#!/usr/bin/env bash
# Prints the folder holding real Apache Flink's jars (flink-dist-*.jar, log4j-*.jar), fetching
# them once into a cache outside the clone: the PyPI package `apache-flink-libraries` ships
# Flink's lib/ (a wheel for 2.x, an sdist for 1.x). Used by the benchmark report's `--flink`,
# which runs the oracle in ../shared/flink-oracle/ beside statekit.
#
#   scripts/flink-lib.sh [VERSION]       # default 2.3.0 (STATEKIT_FLINK_VERSION)
#
# Cache: $STATEKIT_FLINK_CACHE (default /var/tmp/statekit-flink)/<version>/lib.
set -euo pipefail
version="${1:-${STATEKIT_FLINK_VERSION:-2.3.0}}"
cache="${STATEKIT_FLINK_CACHE:-/var/tmp/statekit-flink}/$version"
if ! ls "$cache"/lib/flink-dist*.jar >/dev/null 2>&1; then
  echo "==> fetching Flink $version's jars (PyPI apache-flink-libraries) into $cache" >&2
  rm -rf "$cache.tmp"
  mkdir -p "$cache.tmp/dl" "$cache.tmp/lib"
  python3 -m pip download --no-deps -q -d "$cache.tmp/dl" "apache-flink-libraries==$version" >&2
  pkg=$(ls "$cache.tmp"/dl/apache_flink_libraries-* | head -n 1)
  case "$pkg" in
    *.whl) python3 -m zipfile -e "$pkg" "$cache.tmp/x" && src="$cache.tmp/x/pyflink/lib" ;;
    *.tar.gz) tar -xzf "$pkg" -C "$cache.tmp" && src=$(ls -d "$cache.tmp"/apache_flink_libraries-*/deps/lib) ;;
    *) echo "error: unexpected package $pkg" >&2; exit 1 ;;
  esac
  cp "$src"/*.jar "$cache.tmp/lib/"
  rm -rf "$cache"
  mkdir -p "$cache"
  mv "$cache.tmp/lib" "$cache/lib"
  rm -rf "$cache.tmp"
fi
echo "$cache/lib"
