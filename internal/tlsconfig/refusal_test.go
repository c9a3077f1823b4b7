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
