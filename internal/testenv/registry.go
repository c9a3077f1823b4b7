package testenv

import (
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// RegistryBackends returns an in-process srfake registry (closed when the
// test ends) and, when BRIDGE_TEST_REGISTRY_URL is set, the registry started
// by deploy/local. Addr is the base URL. The real registry is shared: use
// UniqueName for subjects.
func RegistryBackends(t testing.TB) []Backend {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	out := []Backend{{Name: "srfake", Addr: reg.URL(), Real: false}}
	if b, ok := realBackend(t, ServiceRegistry, EnvRegistryURL, "real-registry"); ok {
		out = append(out, b)
	}
	return out
}
