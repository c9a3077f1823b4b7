package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Environment variables read by this package.
const (
	EnvKafkaSeeds     = "BRIDGE_TEST_KAFKA_SEEDS"
	EnvRedisAddr      = "BRIDGE_TEST_REDIS_ADDR"
	EnvRegistryURL    = "BRIDGE_TEST_REGISTRY_URL"
	EnvPython         = "BRIDGE_TEST_PYTHON"
	EnvRedisServerBin = "BRIDGE_TEST_REDIS_SERVER_BIN"
	EnvKafkaHome      = "BRIDGE_TEST_KAFKA_HOME"
	EnvRequire        = "BRIDGE_TEST_REQUIRE"
	// EnvBenchSmoke set to 1 asks benchmarks for a seconds-long smoke run
	// (make test runs every benchmark once with it: see BenchSmoke).
	EnvBenchSmoke = "BRIDGE_TEST_BENCH_SMOKE"
)

// BenchSmoke reports whether BRIDGE_TEST_BENCH_SMOKE=1: make test runs every
// benchmark once (-benchtime 1x) so that none can rot, and a benchmark
// whose setup takes long (a large simulated chain, a long control topic)
// shrinks it under this switch; the figures of such a run mean nothing.
func BenchSmoke() bool { return os.Getenv(EnvBenchSmoke) == "1" }

// Service names accepted in BRIDGE_TEST_REQUIRE.
const (
	ServiceKafka    = "kafka"
	ServiceRedis    = "redis"
	ServiceRegistry = "registry"
	ServicePython   = "python"
)

// Backend is one service a test case runs against.
type Backend struct {
	// Name is short and fit for a subtest name: "kfake", "real-kafka", ...
	Name string
	// Addr is the address to connect to: comma-separated seed brokers for
	// Kafka, host:port for Redis, the base URL for a registry.
	Addr string
	// Real is true for a real service started outside the test process.
	Real bool
}

// Required reports whether BRIDGE_TEST_REQUIRE names service (or is "all").
func Required(service string) bool {
	for f := range strings.SplitSeq(os.Getenv(EnvRequire), ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		if f == "all" || f == service {
			return true
		}
	}
	return false
}

// RequireReal returns the value of the environment variable env that names
// the real service. When it is unset, it fails the test if
// BRIDGE_TEST_REQUIRE names service, and skips it otherwise; both messages
// name the variable and how to set it.
func RequireReal(t testing.TB, service, env string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(env))
	if v != "" {
		return v
	}
	if Required(service) {
		t.Fatalf("%s is unset but %s=%q requires the real %s: run `make services` and source .local/stack.env",
			env, EnvRequire, os.Getenv(EnvRequire), service)
	}
	t.Skipf("real %s not configured: set %s (run `make services` and source .local/stack.env)", service, env)
	return ""
}

// realBackend returns the real backend for service, or reports a missing one:
// fatal when required, and otherwise a visible skipped subtest (for
// *testing.T) or a log line (benchmarks), so the fake cases still run.
func realBackend(t testing.TB, service, env, name string) (Backend, bool) {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(env))
	if v != "" {
		return Backend{Name: name, Addr: v, Real: true}, true
	}
	if Required(service) {
		t.Fatalf("%s is unset but %s=%q requires the real %s: run `make services` and source .local/stack.env",
			env, EnvRequire, os.Getenv(EnvRequire), service)
	}
	msg := "real " + service + " not configured: set " + env + " (run `make services` and source .local/stack.env)"
	if r, ok := t.(interface {
		Run(string, func(*testing.T)) bool
	}); ok {
		r.Run(name, func(t *testing.T) { t.Skip(msg) })
	} else {
		t.Log(msg)
	}
	return Backend{}, false
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// UniqueName returns prefix plus the test's name and a random suffix, made of
// characters that are valid in Kafka topic names, Redis keys and registry
// subjects. Use it for everything a test creates on a shared real service.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("reading random bytes: %v", err)
	}
	name := unsafeChars.ReplaceAllString(t.Name(), "_")
	const maxName = 120
	if len(name) > maxName {
		name = name[len(name)-maxName:]
	}
	parts := slices.DeleteFunc([]string{prefix, name, hex.EncodeToString(b[:])}, func(s string) bool { return s == "" })
	return strings.Join(parts, "-")
}
