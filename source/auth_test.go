package source_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

const simToken = "s3cr3t-amp-token-XYZ"

// startAuthSim starts a simulator that serves TLS with pki's server
// certificate and requires simToken.
func startAuthSim(t *testing.T, pki *testenv.PKI) *ampsim.Server {
	t.Helper()
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3, TxPerBlock: 2},
		TLSCertFile: pki.ServerCertFile, TLSKeyFile: pki.ServerKeyFile, Token: simToken})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// TestTLSWithToken: a stream over TLS with the token publishes, and the
// token reaches both calls.
func TestTLSWithToken(t *testing.T) {
	pki := testenv.NewPKI(t)
	sim := startAuthSim(t, pki)
	c := newClient(t, sim.Addr(), func(c *source.Config) {
		c.TLS = source.TLSConfig{Enabled: true, CAFile: pki.CAFile}
		c.Token = simToken
	}, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT block_num FROM eth_rpc.blocks SETTINGS stream = true", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	var rows int64
	for rows < 3 {
		rows += next(t, s).rows
	}
	reqs := sim.Requests()
	require.Len(t, reqs, 2)
	for _, r := range reqs {
		assert.Equal(t, []string{"Bearer " + simToken}, r.Header.Get("authorization"), r.Method)
	}
}

// TestAuthFailuresArePermanent: a missing token, a refused token and an
// untrusted certificate each end a stream that would retry for ever
// (MaxAttempts 0) at once, with a named error that says what to set, which
// the pipeline treats as permanent. The token is in none of them.
func TestAuthFailuresArePermanent(t *testing.T) {
	pki := testenv.NewPKI(t)
	sim := startAuthSim(t, pki)
	trusted := source.TLSConfig{Enabled: true, CAFile: pki.CAFile}
	tests := []struct {
		name     string
		tls      source.TLSConfig
		token    string
		reason   error
		code     codes.Code
		contains []string
	}{
		{name: "missing token", tls: trusted, reason: source.ErrTokenMissing, code: codes.Unauthenticated,
			contains: []string{"BRIDGE_AMP_TOKEN", "amp.token_file", "none is set"}},
		{name: "wrong token", tls: trusted, token: "wrong-" + simToken, reason: source.ErrTokenRefused, code: codes.Unauthenticated,
			contains: []string{"the token was refused", "UNAUTHENTICATED", "BRIDGE_AMP_TOKEN"}},
		{name: "untrusted certificate", tls: source.TLSConfig{Enabled: true}, token: simToken,
			reason: source.ErrUntrustedCertificate, code: codes.Unavailable,
			contains: []string{"amp.tls.ca_file", "not trusted", "x509:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, sim.Addr(), func(c *source.Config) {
				c.TLS, c.Token = tt.tls, tt.token
				c.Backoff.MaxAttempts = 0 // retry for ever, unless permanent
			}, source.Deps{})
			check := func(err error) {
				t.Helper()
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.reason)
				assert.ErrorIs(t, err, source.ErrPermanent)
				assert.NotErrorIs(t, err, source.ErrRetriesExhausted)
				assert.True(t, pipeline.Permanent(err), "the pipeline must not restart the stream: %v", err)
				assert.False(t, source.IsRetryable(err))
				assert.Equal(t, tt.code, status.Code(err), "%v", err)
				for _, s := range tt.contains {
					assert.ErrorContains(t, err, s)
				}
				assert.NotContains(t, err.Error(), simToken)
			}
			s, err := c.Stream(t.Context(), "SELECT block_num FROM eth_rpc.blocks SETTINGS stream = true", fixedCursor(nil))
			require.NoError(t, err)
			defer s.Close()
			check(nextErr(t, s))
			_, err = c.Schema(t.Context(), "SELECT block_num FROM eth_rpc.blocks")
			check(err)
		})
	}
	assert.Empty(t, sim.Requests(), "no refused call was served")
}

// TestPlaintextTokenWarns: with amp.allow_plaintext_token a token over
// plaintext is accepted, sent, and warned about once at start, without
// the token.
func TestPlaintextTokenWarns(t *testing.T) {
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 1, TxPerBlock: 1}, Token: simToken})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, sim.Addr(), func(c *source.Config) { c.Token = simToken; c.AllowPlaintextToken = true }, source.Deps{Logger: log})
	assert.Contains(t, buf.String(), `"level":"WARN"`)
	assert.Contains(t, buf.String(), "the Amp bearer token is sent in plaintext")
	assert.Contains(t, buf.String(), "amp.allow_plaintext_token")
	assert.NotContains(t, buf.String(), simToken)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = c.Schema(ctx, "SELECT block_num FROM eth_rpc.blocks")
	require.NoError(t, err)

	// Without the opt-in the same configuration is refused.
	cfg := source.DefaultConfig()
	cfg.Addr, cfg.Token = sim.Addr(), simToken
	_, err = source.New(cfg, source.Deps{})
	require.Error(t, err)
	for _, s := range []string{"BRIDGE_AMP_TOKEN or amp.token_file", "amp.tls.enabled", "amp.allow_plaintext_token"} {
		assert.ErrorContains(t, err, s)
	}
	assert.NotContains(t, err.Error(), simToken)

	// TLS on, or no token: no warning.
	buf.Reset()
	newClient(t, sim.Addr(), nil, source.Deps{Logger: log})
	assert.Empty(t, buf.String())
}
