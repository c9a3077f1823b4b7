// Package flink checks that Apache Flink reads a data topic of
// amp-kafka-bridge as a changelog, with the Flink SQL table definition the
// README shows (transactions.sql in this directory, which the README quotes
// verbatim).
//
// The package has tests only. TestIntegrationFlinkChangelog builds the real
// bridge binary, publishes the Amp simulator's transactions table to the
// real Kafka broker and schema registry of the local stack while the chain
// reorganises (so the topic holds op=d retractions and tombstones), lets the
// bridge catch up with the head, and then runs Flink SQL in an embedded
// MiniCluster (the Maven project in this directory, built by build.sh into
// .local/flink/) over the topic: the table Flink materialises from the
// changelog (+I/-D) must equal a fresh batch query of the same columns at
// the simulator, row for row.
//
// Run it after `make services` (which also installs a JDK and Maven) and
// sourcing .local/stack.env:
//
//	go test -run IntegrationFlink -count=1 -v ./test/flink/
//
// It needs the real Kafka broker and registry (BRIDGE_TEST_KAFKA_SEEDS,
// BRIDGE_TEST_REGISTRY_URL) and java and mvn on PATH; it skips when one is
// missing, and fails instead when BRIDGE_TEST_REQUIRE names the service
// ("kafka", "registry", "flink") or is "all".
package flink
