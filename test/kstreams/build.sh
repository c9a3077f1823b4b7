#!/usr/bin/env bash
# Builds kstreams-table (test/kstreams/pom.xml: a Kafka Streams application)
# into .local/kstreams/<kafka.version>-<hash>/lib/ (its jar and every runtime
# dependency, resolved from Maven Central by mvn) and prints that directory.
# The hash covers the pom and the Java sources, so an edit rebuilds; a complete
# build is reused without running mvn. Older builds are removed. The build is
# deploy/local/mvnbuild.sh's, which test/flink and test/kstreams share.
#
#   test/kstreams/build.sh       -> /work/main/.local/kstreams/4.4.0-0123456789ab
#
# Run it: java -cp "<dir>/lib/*" local.kstreams.TransactionsTable --bootstrap ... --topic ...
# It needs mvn and a JDK (javac); deploy/local/stack.sh start kstreams installs
# them when missing. BRIDGE_LOCAL_DIR overrides .local/ as in stack.sh.
set -euo pipefail

exec "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/mvnbuild.sh" kstreams kafka.version kstreams-table.jar
