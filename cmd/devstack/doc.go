// Command devstack is the small helper deploy/local/stack.sh uses to run the
// local test stack:
//
//	devstack kafka-ready -brokers 127.0.0.1:9092 -timeout 90s
//	    waits until a real round trip works (Metadata, CreateTopics, a
//	    committed transaction, a group coordinator, DeleteTopics) and prints
//	    the broker's version as guessed from ApiVersions.
//	devstack registry -addr 127.0.0.1:8081
//	    serves franz-go's srfake (an in-memory Confluent-compatible schema
//	    registry) until SIGTERM or SIGINT.
//	devstack registry-ready -url http://127.0.0.1:8081
//	    one GET /subjects; exits 0 when it answers 200.
//	devstack kfake -port 0 -addr-file FILE [-blackhole]
//	    serves franz-go's kfake (an in-memory Kafka broker with
//	    transactions) in its own process, for throughput runs against
//	    kfake as a separate process (test/perf); -blackhole discards
//	    produced records but still advances offsets.
//	devstack freeport -n 2
//	    prints n free TCP ports of 127.0.0.1, one per line.
//
// It is a development tool, not part of the bridge.
package main
