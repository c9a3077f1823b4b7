package testenv

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// RedisBackends returns an in-process miniredis (closed when the test ends)
// and, when BRIDGE_TEST_REDIS_ADDR is set, the real redis-server. Addr is
// host:port. The real server is shared: use UniqueName for keys.
func RedisBackends(t testing.TB) []Backend {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatalf("starting miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	out := []Backend{{Name: "miniredis", Addr: m.Addr(), Real: false}}
	if b, ok := realBackend(t, ServiceRedis, EnvRedisAddr, "real-redis"); ok {
		out = append(out, b)
	}
	return out
}
