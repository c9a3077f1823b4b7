#!/usr/bin/env bash
# Builds flink-changelog (test/flink/pom.xml: Flink SQL in an embedded MiniCluster)
# into .local/flink/<flink.version>-<hash>/lib/ (its jar and every runtime
# dependency, resolved from Maven Central by mvn) and prints that directory.
# The hash covers the pom and the Java sources, so an edit rebuilds; a complete
# build is reused without running mvn. Older builds are removed.
#
#   test/flink/build.sh          -> /work/main/.local/flink/2.2.0-0123456789ab
#
# Run it: java -cp "<dir>/lib/*" local.flinkcheck.FlinkChangelog --ddl FILE ...
# It needs mvn and a JDK (javac); deploy/local/stack.sh start flink installs
# them when missing. BRIDGE_LOCAL_DIR overrides .local/ as in stack.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
LOCAL="${BRIDGE_LOCAL_DIR:-$ROOT/.local}"

die() { printf '[flink-build] error: %s\n' "$*" >&2; exit 1; }

version=$(sed -n 's/.*<flink.version>\(.*\)<\/flink.version>.*/\1/p' "$HERE/pom.xml")
sum=$(cd "$HERE" && {
  printf '%s\n' pom.xml && cat pom.xml
  find src -type f | LC_ALL=C sort | while read -r f; do printf '%s\n' "$f" && cat "$f"; done
} | sha256sum | cut -c1-12)
name="$version-$sum"
dir="$LOCAL/flink/$name"

mkdir -p "$LOCAL/flink"
exec 9>"$LOCAL/flink/.lock"
flock 9
if [[ -f "$dir/.complete" ]]; then
  echo "$dir"
  exit 0
fi
command -v mvn >/dev/null || die "mvn not found (deploy/local/stack.sh start flink installs Maven)"
command -v javac >/dev/null || die "javac not found (deploy/local/stack.sh start flink installs a JDK)"

t0=$(date +%s%3N)
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
if ! mvn -B -q -Dstyle.color=never -f "$HERE/pom.xml" -Dflink.build.dir="$dir.tmp/build" \
  package dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dir.tmp/lib" \
  >"$dir.tmp/mvn.log" 2>&1; then
  tail -30 "$dir.tmp/mvn.log" >&2
  die "mvn could not build test/flink (log: $dir.tmp/mvn.log)"
fi
cp "$dir.tmp/build/flink-changelog.jar" "$dir.tmp/lib/"
rm -rf "$dir.tmp/build"
find "$LOCAL/flink" -mindepth 1 -maxdepth 1 -type d ! -name "$name" ! -name "$name.tmp" -exec rm -rf {} +
mv "$dir.tmp" "$dir"
touch "$dir/.complete"
printf '[flink-build] built %s in %sms (%s)\n' "$dir" "$(($(date +%s%3N) - t0))" "$(du -sh "$dir" | cut -f1)" >&2
echo "$dir"
