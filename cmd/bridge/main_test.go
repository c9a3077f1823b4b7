package main

import (
	"os"
	"testing"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/liblog"
)

// TestMain installs the go-redis and gRPC log adapters as main does, so
// that the commands a test runs log the libraries' lines through their own
// logger (TestSecretsNeverShown reads them).
func TestMain(m *testing.M) {
	liblog.Install()
	os.Exit(m.Run())
}
