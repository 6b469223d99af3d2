#!/usr/bin/env bash
# Java heap bytes per entry of ValueState<Long> (Long keys) in real Apache Flink's heap keyed
# state backend (HashMapStateBackend), for N keys: compiles and runs HeapFootprint.java.
#
#   benches/flink/footprint.sh [N]        # default 1000000
#
# Env: FLINK_LIB (default: $(scripts/flink-lib.sh)), HEAP (default 4g), BUILD_DIR (default
# ${TMPDIR:-/tmp}/statekit-footprint-build), JAVA, JAVAC, FOOTPRINT_TIMEOUT (seconds, 900).
# Prints one line `flink_heap_bytes_per_entry <float> keys=<N> flink=<v> java=<v>` plus `#` lines.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
N="${1:-1000000}"
FLINK_LIB="${FLINK_LIB:-$("$ROOT/scripts/flink-lib.sh")}"
JAVA="${JAVA:-java}"
JAVAC="${JAVAC:-javac}"
BUILD="${BUILD_DIR:-${TMPDIR:-/tmp}/statekit-footprint-build}"

if ! ls "$FLINK_LIB"/flink-dist*.jar >/dev/null 2>&1; then
  echo "error: FLINK_LIB=$FLINK_LIB does not contain flink-dist-*.jar" >&2
  exit 2
fi
# flink-dist + logging is all it needs
CP="$(ls "$FLINK_LIB"/flink-dist*.jar "$FLINK_LIB"/log4j-*.jar | tr '\n' ':')"

rm -rf "$BUILD"
mkdir -p "$BUILD"
"$JAVAC" -nowarn -Xlint:none -encoding UTF-8 -cp "$CP" -d "$BUILD" "$HERE/HeapFootprint.java"
cat > "$BUILD/log4j2.properties" <<'EOF'
# errors only, to stderr (stdout carries the result)
rootLogger.level = ERROR
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %-5p %c{1} - %m%n
EOF

# G1 is Flink's default collector; the figure is the used heap after a full GC (System.gc()).
# The --add-opens are those Flink's own launcher passes on Java 17.
JOPTS=(
  -Xmx"${HEAP:-4g}" -XX:+UseG1GC
  --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
  -Dlog4j2.configurationFile="$BUILD/log4j2.properties"
  -Dfootprint.timeout="${FOOTPRINT_TIMEOUT:-900}"
  -Dfile.encoding=UTF-8
)
exec "$JAVA" "${JOPTS[@]}" -cp "$BUILD:$CP" HeapFootprint "$N"
