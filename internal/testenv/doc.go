// Package testenv gives tests the services they run against: an in-process
// stand-in that is always there (franz-go's kfake, miniredis, srfake) and,
// when the environment names one, the real service started by deploy/local
// (Apache Kafka, redis-server, Apicurio Registry).
//
// The real services are read from these variables, which `make services`
// writes to .local/stack.env:
//
//	BRIDGE_TEST_KAFKA_SEEDS       comma-separated host:port list of a real broker
//	BRIDGE_TEST_REDIS_ADDR        host:port of a real redis-server
//	BRIDGE_TEST_REGISTRY_URL      base URL of a Confluent-compatible registry (Apicurio's …/apis/ccompat/v7)
//	BRIDGE_TEST_REGISTRY_HOME     unpacked Apicurio Registry, for private registries (StartRegistryServer)
//	BRIDGE_TEST_REGISTRY_JAVA     a java 21+ binary that runs it
//	BRIDGE_TEST_PYTHON            python of the project's venv
//	BRIDGE_TEST_REDIS_SERVER_BIN  redis-server binary for private servers
//	BRIDGE_TEST_KAFKA_HOME        directory of the broker's jars, for private brokers
//	BRIDGE_TEST_REQUIRE           comma list of kafka,redis,registry,python or "all"
//
// A real-service case whose variable is unset is skipped with a message that
// names the variable, unless BRIDGE_TEST_REQUIRE names the service: then the
// test fails, so `make test` cannot pass without the real services.
//
// The real services are shared by every test binary that runs at the same
// time: tests must use their own topic, key and subject names (UniqueName).
package testenv
