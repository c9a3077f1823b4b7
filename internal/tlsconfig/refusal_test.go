package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// TestRefusal: a server that requires a client certificate refuses one
// without, or of another CA, after the TLS 1.3 handshake has ended; Refusal
// reads its alert on a connection of its own, and finds none from a server
// that accepts the client.
func TestRefusal(t *testing.T) {
	srv := testenv.StartRefusingTLSServer(t, 0)
	other := testenv.NewPKI(t)
	load := func(certFile, keyFile string) *tls.Config {
		tc, err := tlsconfig.Load("kafka.tls", tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile, CertFile: certFile, KeyFile: keyFile})
		require.NoError(t, err)
		return tc
	}
	for _, tc := range []struct {
		name  string
		tls   *tls.Config
		alert string
	}{
		{"no client certificate", load("", ""), "tls: certificate required"},
		{"client certificate of another CA", load(other.ClientCertFile, other.ClientKeyFile), "tls: unknown certificate authority"},
		{"client certificate", load(srv.PKI.ClientCertFile, srv.PKI.ClientKeyFile), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			err := tlsconfig.Refusal(ctx, srv.Addr, tc.tls)
			if tc.alert == "" {
				assert.NoError(t, err)
				return
			}
			var op *net.OpError
			require.ErrorAs(t, err, &op)
			assert.Equal(t, "remote error", op.Op)
			assert.EqualError(t, op.Err, tc.alert)
		})
	}
	// A port nobody serves is no refusal.
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	assert.NoError(t, tlsconfig.Refusal(t.Context(), addr, load("", "")))
}

func TestDropped(t *testing.T) {
	for _, err := range []error{syscall.ECONNRESET, &net.OpError{Op: "write", Err: syscall.EPIPE}, io.EOF, fmt.Errorf("reading: %w", io.ErrUnexpectedEOF)} {
		assert.True(t, tlsconfig.Dropped(err), "%v", err)
	}
	for _, err := range []error{syscall.ECONNREFUSED, context.DeadlineExceeded, errors.New("reset")} {
		assert.False(t, tlsconfig.Dropped(err), "%v", err)
	}
}

// TestExplainDropped: a dropped connection is asked about (the alert joins
// the error, which still wraps the reset); any other error, or a server
// that sends no alert, leaves the error as it was.
func TestExplainDropped(t *testing.T) {
	srv := testenv.StartRefusingTLSServer(t, 0)
	tc, err := tlsconfig.Load("kafka.tls", tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile})
	require.NoError(t, err)
	reset := &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}

	alert, joined := tlsconfig.ExplainDropped(t.Context(), srv.Addr, tc, reset)
	require.Error(t, alert)
	assert.ErrorIs(t, joined, syscall.ECONNRESET)
	assert.ErrorContains(t, joined, "; a second connection that waited for the server's answer got remote error: tls: certificate required")
	assert.Equal(t, 1, srv.Conns())

	refused := errors.New("dial tcp: connection refused")
	alert, joined = tlsconfig.ExplainDropped(t.Context(), srv.Addr, tc, refused)
	require.NoError(t, alert)
	assert.Same(t, refused, joined)
	assert.Equal(t, 1, srv.Conns(), "an error that is not a dropped connection is not asked about")

	quiet := testenv.StartRefusingTLSServer(t, 1<<30) // resets every connection: no alert
	alert, joined = tlsconfig.ExplainDropped(t.Context(), quiet.Addr, tc, reset)
	require.NoError(t, alert)
	assert.Same(t, error(reset), joined)
}
