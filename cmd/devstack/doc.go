// Command devstack is the small helper deploy/local/stack.sh uses to run the
// local test stack:
//
//	devstack kafka-ready -brokers 127.0.0.1:9092 -timeout 90s
//	    waits until a real round trip works (Metadata, CreateTopics, a
//	    committed transaction, a group coordinator, DeleteTopics) and prints
//	    the broker's version as guessed from ApiVersions.
//	    With -sasl-user and -sasl-password-file it authenticates with SASL
//	    PLAIN (the secured broker's plaintext inter-broker listener, as its
//	    super user).
//	devstack kafka-acls -brokers 127.0.0.1:9094 -principal User:bridge -topic-prefix amp -txn-prefix amp-kafka-bridge. -sasl-user admin -sasl-password-file F
//	    grants the principals the bridge's ACLs (sink.TopicOps on the
//	    topics of the prefix, Write on the transactional ids of the prefix)
//	    and prints them as kafka-acls.sh commands.
//	devstack pki -dir DIR
//	    writes a throwaway CA, a server certificate for 127.0.0.1 and
//	    localhost and a client certificate (CN=bridge), valid for a day
//	    (internal/testenv's test PKI), as PEM files.
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
