#!/usr/bin/env bash
# Builds flink-changelog (test/flink/pom.xml: Flink SQL in an embedded MiniCluster)
# into .local/flink/<flink.version>-<hash>/lib/ (its jar and every runtime
# dependency, resolved from Maven Central by mvn) and prints that directory.
# The hash covers the pom and the Java sources, so an edit rebuilds; a complete
# build is reused without running mvn. Older builds are removed. The build is
# deploy/local/mvnbuild.sh's, which test/flink and test/kstreams share.
#
#   test/flink/build.sh          -> /work/main/.local/flink/2.2.0-0123456789ab
#
# Run it: java -cp "<dir>/lib/*" local.flinkcheck.FlinkChangelog --ddl FILE ...
# It needs mvn and a JDK (javac); deploy/local/stack.sh start flink installs
# them when missing. BRIDGE_LOCAL_DIR overrides .local/ as in stack.sh.
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/mvnbuild.sh" flink flink.version flink-changelog.jar
