package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
)

const minimalYAML = `
kafka:
  brokers: [127.0.0.1:9092]
streams:
  - id: txs
    sql: SELECT * FROM eth.transactions
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// TestExampleConfigIsValid keeps deploy/bridge.example.yaml loadable.
func TestExampleConfigIsValid(t *testing.T) {
	var out, errOut logBuffer
	code := run(t.Context(), []string{"validate", "-c", "../../deploy/bridge.example.yaml"}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	assert.Contains(t, out.String(), "valid, 1 stream(s)")
	code = run(t.Context(), []string{"validate", "-c", "does-not-exist.yaml"}, &out, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "does-not-exist.yaml")
}

func TestSetFlags(t *testing.T) {
	path := writeConfig(t, minimalYAML)
	var out, errOut logBuffer
	code := run(t.Context(), []string{"validate", "-c", path, "-set", "streams.0.topic=custom.{stream}", "-set", "kafka.brokers=x:1,y:2"}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())

	sets := config.SetFlags{}
	require.NoError(t, sets.Set("kafka.brokers=x:1,y:2"))
	require.NoError(t, sets.Set("streams.0.transaction.max_age=5s"))
	c, err := config.LoadConfig(path, sets.Lookup(envMap(map[string]string{"BRIDGE_KAFKA_BROKERS": "env:1"})))
	require.NoError(t, err)
	assert.Equal(t, []string{"x:1", "y:2"}, c.Kafka.Brokers, "flags win over the environment")
	assert.Equal(t, 5*time.Second, c.Streams[0].Transaction.MaxAge)

	err = sets.Set("kafka.sasl.password=hunter2")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "BRIDGE_KAFKA_SASL_PASSWORD")
	require.Error(t, sets.Set("novalue"))

	code = run(t.Context(), []string{"validate", "-c", path, "-set", "kafka.delivery=sometimes"}, &out, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "kafka.delivery")
}

// TestValidateCommand: `bridge validate` reports the checks `bridge run`
// makes before connecting, and unknown -set paths with the closest key.
func TestValidateCommand(t *testing.T) {
	path := writeConfig(t, minimalYAML)
	tests := []struct {
		name        string
		args        []string
		code        int
		errContains string
	}{
		{name: "valid", args: []string{"-set", "kafka.linger=0s"}, code: 0},
		{name: "unknown -set path", args: []string{"-set", "kafka.broker=x"}, code: 1, errContains: "unknown key kafka.broker; did you mean kafka.brokers?"},
		{name: "stream -set typo", args: []string{"-set", "streams.0.partitons=6"}, code: 1, errContains: "did you mean streams.0.partitions?"},
		{name: "amp addr with a scheme", args: []string{"-set", "amp.addr=grpc://amp:1602"}, code: 1, errContains: "amp.addr"},
		{name: "stage limit", args: []string{"-set", "kafka.transaction_timeout=1h"}, code: 1, errContains: "kafka.transaction_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut logBuffer
			code := run(t.Context(), append([]string{"validate", "-c", path}, tt.args...), &out, &errOut)
			assert.Equal(t, tt.code, code, errOut.String())
			if tt.errContains != "" {
				assert.Contains(t, errOut.String(), tt.errContains)
			}
		})
	}
}

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
