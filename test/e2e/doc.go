// Package e2e holds the end-to-end tests of amp-kafka-bridge: they build the
// real bridge binary, run it against the Amp simulator and a real Kafka
// broker, redis-server and schema registry (or their in-process stand-ins),
// inject faults (SIGKILL of the bridge at random moments, reorgs while it is
// down, a broker restart, a Redis restart and a FLUSHALL), and then check the
// data topic twice: with `bridge verify` and with an independent consumer
// written against Confluent's own Python client (testdata/consume_check.py).
//
// TestIntegrationCluster runs cluster mode the same way: members sharing
// streams through kill -9, a SIGSTOP past the session timeout, a rolling
// restart and members joining and leaving (-e2e.cluster-kills=10 for the
// long schedule).
//
// The package has tests only. Run the fault harness with
//
//	go test -run IntegrationFault -count=1 ./test/e2e/ -e2e.trials=50
//
// after `make services` and sourcing .local/stack.env.
package e2e
