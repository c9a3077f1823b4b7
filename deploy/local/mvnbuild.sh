#!/usr/bin/env bash
# Builds the Maven project of a Java program that a test under test/<name>/ runs
# (test/flink, test/kstreams) into .local/<name>/<version>-<hash>/lib/ (its jar
# and every runtime dependency, resolved from Maven Central by mvn) and prints
# that directory. <version> is the pom's property VERSION_PROPERTY; the hash
# covers the pom and the Java sources, so an edit rebuilds; a complete build is
# reused without running mvn. Older builds are removed. The pom takes its build
# directory from the property <name>.build.dir and makes JAR there.
#
#   deploy/local/mvnbuild.sh NAME VERSION_PROPERTY JAR
#   deploy/local/mvnbuild.sh flink flink.version flink-changelog.jar
#
# test/<name>/build.sh calls it. It needs mvn and a JDK (javac);
# deploy/local/stack.sh start <name> installs them when missing.
# BRIDGE_LOCAL_DIR overrides .local/ as in stack.sh.
set -euo pipefail

(($# == 3)) || { echo "usage: $0 NAME VERSION_PROPERTY JAR" >&2; exit 2; }
NAME=$1 VERSION_PROPERTY=$2 JAR=$3
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PROJECT="$ROOT/test/$NAME"
LOCAL="${BRIDGE_LOCAL_DIR:-$ROOT/.local}"
CACHE="$LOCAL/$NAME"

die() { printf '[%s-build] error: %s\n' "$NAME" "$*" >&2; exit 1; }

[[ -f "$PROJECT/pom.xml" ]] || die "no Maven project test/$NAME/pom.xml"
version=$(sed -n "s/.*<${VERSION_PROPERTY//./\\.}>\(.*\)<\/${VERSION_PROPERTY//./\\.}>.*/\1/p" "$PROJECT/pom.xml" | head -n1)
[[ -n "$version" ]] || die "no <$VERSION_PROPERTY> in test/$NAME/pom.xml"
sum=$(cd "$PROJECT" && {
  printf '%s\n' pom.xml && cat pom.xml
  find src -type f | LC_ALL=C sort | while read -r f; do printf '%s\n' "$f" && cat "$f"; done
} | sha256sum | cut -c1-12)
build="$version-$sum"
dir="$CACHE/$build"

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [[ -f "$dir/.complete" ]]; then
  echo "$dir"
  exit 0
fi
command -v mvn >/dev/null || die "mvn not found (deploy/local/stack.sh start $NAME installs Maven)"
command -v javac >/dev/null || die "javac not found (deploy/local/stack.sh start $NAME installs a JDK)"

t0=$(date +%s%3N)
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
if ! mvn -B -q -Dstyle.color=never -f "$PROJECT/pom.xml" -D"$NAME.build.dir=$dir.tmp/build" \
  package dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dir.tmp/lib" \
  >"$dir.tmp/mvn.log" 2>&1; then
  tail -30 "$dir.tmp/mvn.log" >&2
  die "mvn could not build test/$NAME (log: $dir.tmp/mvn.log)"
fi
cp "$dir.tmp/build/$JAR" "$dir.tmp/lib/"
rm -rf "$dir.tmp/build"
find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$build" ! -name "$build.tmp" -exec rm -rf {} +
rm -rf "$dir" # a build interrupted before .complete
mv "$dir.tmp" "$dir"
touch "$dir/.complete"
printf '[%s-build] built %s in %sms (%s)\n' "$NAME" "$dir" "$(($(date +%s%3N) - t0))" "$(du -sh "$dir" | cut -f1)" >&2
echo "$dir"
