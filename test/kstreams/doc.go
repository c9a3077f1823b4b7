// Package kstreams checks that a Kafka Streams application reads a data
// topic of amp-kafka-bridge as a changelog: the application a user would
// write (the Maven project in this directory, which the README quotes),
// with processing.guarantee=exactly_once_v2, a Serde for the Confluent wire
// format that fetches writer schemas from the registry's REST API
// (Confluent's kafka-avro-serializer is not on Maven Central), and a
// topology that re-keys the events by tx_hash and materialises a KTable:
// op c/r puts the row in after, op d deletes the row in before, tombstones
// are skipped.
//
// The package has tests only. TestIntegrationKafkaStreamsChangelog builds
// the real bridge binary, publishes the Amp simulator's transactions table
// to the real Kafka broker and schema registry of the local stack while the
// chain reorganises (so the topic holds op=d retractions and tombstones),
// lets the bridge catch up with the head, and then runs the application
// (built by build.sh into .local/kstreams/) until it has processed the
// topic: the KTable it prints must equal a fresh batch query of the
// simulator, row for row and column for column.
//
// Run it after `make services` (which also installs a JDK and Maven and
// builds the application) and sourcing .local/stack.env:
//
//	go test -run IntegrationKafkaStreams -count=1 -v ./test/kstreams/
//
// It needs the real Kafka broker and registry (BRIDGE_TEST_KAFKA_SEEDS,
// BRIDGE_TEST_REGISTRY_URL) and java and mvn on PATH; it skips when one is
// missing, and fails instead when BRIDGE_TEST_REQUIRE names the service
// ("kafka", "registry", "kstreams") or is "all".
package kstreams
