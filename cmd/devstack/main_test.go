package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		errContains string
	}{
		{name: "no command", args: nil, errContains: "missing command"},
		{name: "unknown command", args: []string{"nope"}, errContains: `"nope"`},
		{name: "kafka-ready without brokers", args: []string{"kafka-ready"}, errContains: "-brokers"},
		{name: "registry-ready without url", args: []string{"registry-ready"}, errContains: "-url"},
		{name: "freeport out of range", args: []string{"freeport", "-n", "0"}, errContains: "want 1..100"},
		{name: "bad flag", args: []string{"freeport", "-x"}, errContains: "parsing flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), discard(), io.Discard, tt.args)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.errContains)
		})
	}
}

func TestFreePortsDistinct(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), discard(), &out, []string{"freeport", "-n", "5"}))
	ports := strings.Fields(out.String())
	require.Len(t, ports, 5)
	seen := map[string]bool{}
	for _, p := range ports {
		assert.False(t, seen[p], "port %s twice", p)
		seen[p] = true
	}
}

func TestRegistryServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	addrFile := filepath.Join(t.TempDir(), "addr")
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, discard(), io.Discard, []string{"registry", "-addr", "127.0.0.1:0", "-addr-file", addrFile})
	}()
	var addr string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, run(t.Context(), discard(), io.Discard, []string{"registry-ready", "-url", "http://" + addr}))
	cancel()
	require.NoError(t, <-errc)
	require.Error(t, run(t.Context(), discard(), io.Discard, []string{"registry-ready", "-url", "http://" + addr}),
		"the registry must be gone after its context ends")
}

func TestIntegrationKafkaReady(t *testing.T) {
	for _, b := range testenv.KafkaBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run(t.Context(), discard(), &out, []string{"kafka-ready", "-brokers", b.Addr, "-timeout", "30s"}))
			assert.Contains(t, out.String(), "kafka ready at "+b.Addr)
		})
	}
}

func TestKafkaReadyTimesOut(t *testing.T) {
	port := freeTestPort(t)
	err := run(t.Context(), discard(), io.Discard, []string{"kafka-ready", "-brokers", "127.0.0.1:" + port, "-timeout", "1s"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "waiting for kafka")
}

func freeTestPort(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, freePorts(t.Context(), &out, 1))
	return strings.TrimSpace(out.String())
}
