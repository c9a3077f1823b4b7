package source

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name        string
		mutate      func(*Config)
		errContains string
	}{
		{name: "defaults with addr", mutate: func(*Config) {}},
		{name: "tls with all files", mutate: func(c *Config) {
			c.TLS = TLSConfig{Enabled: true, CAFile: "ca", CertFile: "c", KeyFile: "k", ServerName: "x"}
		}},
		{name: "missing addr", mutate: func(c *Config) { c.Addr = "" }, errContains: "amp.addr is empty"},
		{name: "addr with scheme", mutate: func(c *Config) { c.Addr = "http://x" }, errContains: "not host:port"},
		{name: "ca without tls", mutate: func(c *Config) { c.TLS.CAFile = "ca.pem" }, errContains: "amp.tls.ca_file is set but amp.tls.enabled is false"},
		{name: "cert without key", mutate: func(c *Config) { c.TLS = TLSConfig{Enabled: true, CertFile: "c"} }, errContains: "must be set together"},
		{name: "token with newline", mutate: func(c *Config) { c.Token = "abc\n"; c.TLS.Enabled = true }, errContains: "trailing newline"},
		{name: "token over tls", mutate: func(c *Config) { c.Token = "abc"; c.TLS.Enabled = true }},
		{name: "token over plaintext", mutate: func(c *Config) { c.Token = "abc" },
			errContains: "an Amp token is set (BRIDGE_AMP_TOKEN or amp.token_file) but amp.tls.enabled is false"},
		{name: "token over plaintext allowed", mutate: func(c *Config) { c.Token = "abc"; c.AllowPlaintextToken = true }},
		{name: "small recv size", mutate: func(c *Config) { c.MaxRecvMsgSize = 4 << 20 }, errContains: "amp.max_recv_bytes"},
		{name: "zero request timeout", mutate: func(c *Config) { c.RequestTimeout = 0 }, errContains: "request_timeout"},
		{name: "zero read ahead", mutate: func(c *Config) { c.ReadAhead = 0 }, errContains: "read_ahead must be at least 1"},
		{name: "negative read ahead bytes", mutate: func(c *Config) { c.ReadAheadBytes = -1 }, errContains: "read_ahead_bytes"},
		{name: "zero initial", mutate: func(c *Config) { c.Backoff.Initial = 0 }, errContains: "amp.reconnect_min"},
		{name: "max below initial", mutate: func(c *Config) { c.Backoff.Max = time.Millisecond }, errContains: "below amp.reconnect_min"},
		{name: "multiplier below 1", mutate: func(c *Config) { c.Backoff.Multiplier = 0.5 }, errContains: "multiplier"},
		{name: "multiplier NaN", mutate: func(c *Config) { c.Backoff.Multiplier = math.NaN() }, errContains: "multiplier"},
		{name: "jitter above 1", mutate: func(c *Config) { c.Backoff.Jitter = 1.5 }, errContains: "jitter"},
		{name: "negative attempts", mutate: func(c *Config) { c.Backoff.MaxAttempts = -1 }, errContains: "max_attempts"},
		{name: "negative keepalive", mutate: func(c *Config) { c.KeepaliveTime = -time.Second }, errContains: "keepalive_time"},
		{name: "keepalive without timeout", mutate: func(c *Config) { c.KeepaliveTime = time.Minute; c.KeepaliveTimeout = 0 }, errContains: "keepalive_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Addr = "localhost:1602"
			tt.mutate(&c)
			err := c.Validate()
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.errContains)
		})
	}
	// Every problem is reported at once.
	err := Config{}.Validate()
	require.Error(t, err)
	for _, s := range []string{"addr", "amp.max_recv_bytes", "read_ahead", "amp.reconnect_min", "multiplier"} {
		assert.ErrorContains(t, err, s)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := BackoffConfig{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 3, Jitter: 0.5}
	tests := []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{0, 0, 100 * time.Millisecond},
		{1, 0, 100 * time.Millisecond},
		{2, 0, 300 * time.Millisecond},
		{3, 0, 900 * time.Millisecond},
		{4, 0, time.Second},
		{1000, 0, time.Second},
		{1, 1, 50 * time.Millisecond},
		{4, 0.5, 750 * time.Millisecond},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, b.delay(tt.n, tt.r), "n=%d r=%v", tt.n, tt.r)
	}
}
