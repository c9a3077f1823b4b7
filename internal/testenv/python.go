package testenv

import (
	"os"
	"testing"
)

// Python returns the project's venv python (pyarrow, fastavro and
// confluent-kafka pinned in deploy/local/requirements.txt), from
// BRIDGE_TEST_PYTHON. When it is unset the test fails if BRIDGE_TEST_REQUIRE
// names python, and is skipped otherwise.
func Python(t testing.TB) string {
	t.Helper()
	p := RequireReal(t, ServicePython, EnvPython)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s=%q: %v (run `make pydeps`)", EnvPython, p, err)
	}
	return p
}
