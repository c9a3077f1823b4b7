package encode

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// TestRegistryAccessErrors: against a registry (srfake) behind a Go TLS
// server that requires a client certificate, the client certificate works;
// none, or one of another CA, is a named ErrRegistryTLS; a 403 is
// ErrRegistryPermission.
func TestRegistryAccessErrors(t *testing.T) {
	pki := testenv.NewPKI(t)
	reg := srfake.NewRegistry()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer read-only" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		reg.Handler().ServeHTTP(w, r)
	}))
	stls := pki.ServerTLS()
	stls.ClientAuth, stls.ClientCAs = tls.RequireAndVerifyClientCert, pki.Pool
	srv.TLS = stls
	srv.StartTLS()
	t.Cleanup(srv.Close)
	other := testenv.NewPKI(t)
	mtls := tlsconfig.Config{Enabled: true, CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}
	tests := []struct {
		name   string
		cfg    RegistryConfig
		kind   error
		fixHas string
	}{
		{name: "client certificate", cfg: RegistryConfig{TLS: mtls}},
		{name: "no client certificate", cfg: RegistryConfig{TLS: tlsconfig.Config{Enabled: true, CAFile: pki.CAFile}},
			kind: ErrRegistryTLS, fixHas: "requires a client certificate (mutual TLS): set registry.tls.cert_file/key_file"},
		{name: "client certificate of another CA", cfg: RegistryConfig{TLS: tlsconfig.Config{Enabled: true, CAFile: pki.CAFile,
			CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}},
			kind: ErrRegistryTLS, fixHas: "refused the client certificate in registry.tls.cert_file"},
		{name: "forbidden", cfg: RegistryConfig{TLS: mtls, Token: "read-only"}, kind: ErrRegistryPermission, fixHas: "may not read and register"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL, tc.cfg.Timeout = srv.URL, 10*time.Second
			cl, err := NewRegistryClient(tc.cfg)
			require.NoError(t, err)
			err = NewRegistry(cl, WithRegistryConfig(tc.cfg)).Ping(t.Context())
			if tc.kind == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.kind)
			var ae *RegistryAccessError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, ae.Fix, tc.fixHas)
		})
	}
}

// TestRegistryRefusalOvertakenByReset: when a registry that requires a
// client certificate resets the connection before its alert reaches the
// client (the race a TLS 1.3 refusal has with the client's first request,
// seen against stunnel in CI), the failure is still the named
// ErrRegistryTLS asking for a client certificate, learnt from the alert a
// second connection gets; a reset that no alert explains stays what it is.
func TestRegistryRefusalOvertakenByReset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resets int
		alert  bool
	}{{"alert on the second connection", 1, true}, {"no alert at all", 1 << 30, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.StartRefusingTLSServer(t, tc.resets)
			cfg := RegistryConfig{URL: "https://" + srv.Addr, Timeout: 10 * time.Second,
				TLS: tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile}}
			cl, err := NewRegistryClient(cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			err = NewRegistry(cl, WithRegistryConfig(cfg)).Ping(ctx)
			require.Error(t, err)
			assert.True(t, tlsconfig.Dropped(err), "the first connection was reset: %v", err)
			assert.GreaterOrEqual(t, srv.Conns(), 2, "a second connection asked")
			if !tc.alert {
				assert.NotErrorIs(t, err, ErrRegistryTLS, "a reset alone is not a TLS refusal: %v", err)
				return
			}
			require.ErrorIs(t, err, ErrRegistryTLS)
			var ae *RegistryAccessError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, ae.Fix, "requires a client certificate (mutual TLS): set registry.tls.cert_file/key_file")
			assert.ErrorContains(t, err, "tls: certificate required")
			t.Logf("%v", err)
		})
	}
}
