package encode

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// TestIntegrationRegistrySecurity runs the registry client against a real
// Apicurio Registry (a private one, testenv.StartRegistryServer) that serves
// only HTTPS and requires basic auth or a bearer token (a JWT it verifies):
// TLS with registry.tls.ca_file, basic auth and the token work, subjects and
// ids included; a wrong password, an expired token, no credentials, an
// untrusted certificate and a wrong server name are named, permanent
// *RegistryAccessErrors naming the key to fix. (Mutual TLS: Apicurio's build
// fixes quarkus.http.ssl.client-auth to NONE, so
// TestIntegrationRegistryMutualTLS puts stunnel in front of it.)
func TestIntegrationRegistrySecurity(t *testing.T) {
	srv := testenv.StartRegistryServer(t, testenv.WithRegistrySecurity())
	tlsOn := tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile}
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	tests := []struct {
		name   string
		cfg    RegistryConfig
		kind   error
		fixHas string
		errHas string
	}{
		{name: "basic auth over TLS", cfg: RegistryConfig{TLS: tlsOn, Username: srv.User, Password: srv.Password}},
		{name: "bearer token over TLS", cfg: RegistryConfig{TLS: tlsOn, Token: srv.Token(5 * time.Minute)}},
		{name: "wrong password", cfg: RegistryConfig{TLS: tlsOn, Username: srv.User, Password: "wrong"},
			kind: ErrRegistryAuth, fixHas: "registry.password_file or BRIDGE_REGISTRY_PASSWORD"},
		{name: "expired token", cfg: RegistryConfig{TLS: tlsOn, Token: srv.Token(-time.Minute)},
			kind: ErrRegistryAuth, fixHas: "registry.token_file or BRIDGE_REGISTRY_TOKEN"},
		{name: "no credentials", cfg: RegistryConfig{TLS: tlsOn},
			kind: ErrRegistryAuth, fixHas: "requires authentication"},
		{name: "untrusted CA", cfg: RegistryConfig{TLS: tlsconfig.Config{Enabled: true, CAFile: testenv.NewPKI(t).CAFile}, Username: srv.User, Password: srv.Password},
			kind: ErrRegistryTLS, fixHas: "not signed by the CA in registry.tls.ca_file"},
		{name: "system roots", cfg: RegistryConfig{Username: srv.User, Password: srv.Password},
			kind: ErrRegistryTLS, fixHas: "set registry.tls.ca_file"},
		{name: "wrong server name", cfg: RegistryConfig{TLS: tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile, ServerName: "other.test"}, Username: srv.User, Password: srv.Password},
			kind: ErrRegistryTLS, fixHas: "registry.tls.server_name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL, tc.cfg.Timeout = srv.URL, 10*time.Second
			cl, err := NewRegistryClient(tc.cfg)
			require.NoError(t, err)
			reg := NewRegistry(cl, WithRegistryConfig(tc.cfg))
			err = reg.Ping(t.Context())
			if tc.kind == nil {
				require.NoError(t, err)
				subject := testenv.UniqueName(t, "sec") + "-value"
				id, err := reg.Register(t.Context(), subject, schema)
				require.NoError(t, err)
				text, err := NewRegistry(cl).SchemaText(t.Context(), id)
				require.NoError(t, err)
				assert.True(t, sameCanonical(schema, text), "schema id %d reads back", id)
				// The registry itself refuses an incompatible version.
				_, err = reg.Register(t.Context(), subject, `{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"string"}]}`)
				require.ErrorIs(t, err, ErrIncompatible)
				assert.Contains(t, err.Error(), "the registry refused the new schema")
				return
			}
			require.ErrorIs(t, err, tc.kind)
			var ae *RegistryAccessError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, ae.Fix, tc.fixHas)
			assert.NotContains(t, err.Error(), srv.Password)
			t.Logf("%v", err)
		})
	}
}

// TestIntegrationRegistryMutualTLS runs the registry client through mutual
// TLS against a real Apicurio Registry behind stunnel, which requires a
// client certificate of its CA (testenv.WithRegistryMutualTLS): with
// registry.tls.cert_file/key_file, subjects and ids work and the registry
// itself refuses an incompatible version; without a client certificate, or
// with one of another CA, the handshake fails as a named ErrRegistryTLS
// naming registry.tls.cert_file.
func TestIntegrationRegistryMutualTLS(t *testing.T) {
	srv := testenv.StartRegistryServer(t, testenv.WithRegistryMutualTLS())
	other := testenv.NewPKI(t)
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	tests := []struct {
		name   string
		tls    tlsconfig.Config
		fixHas string
	}{
		{name: "client certificate", tls: tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile, CertFile: srv.PKI.ClientCertFile, KeyFile: srv.PKI.ClientKeyFile}},
		{name: "no client certificate", tls: tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile},
			fixHas: "it requires a client certificate (mutual TLS): set registry.tls.cert_file/key_file"},
		{name: "client certificate of another CA", tls: tlsconfig.Config{Enabled: true, CAFile: srv.PKI.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile},
			fixHas: "the registry refused the client certificate in registry.tls.cert_file " + other.ClientCertFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := RegistryConfig{URL: srv.URL, Timeout: 10 * time.Second, TLS: tc.tls}
			cl, err := NewRegistryClient(cfg)
			require.NoError(t, err)
			reg := NewRegistry(cl, WithRegistryConfig(cfg))
			err = reg.Ping(t.Context())
			if tc.fixHas == "" {
				require.NoError(t, err)
				subject := testenv.UniqueName(t, "mtls") + "-value"
				id, err := reg.Register(t.Context(), subject, schema)
				require.NoError(t, err)
				text, err := NewRegistry(cl).SchemaText(t.Context(), id)
				require.NoError(t, err)
				assert.True(t, sameCanonical(schema, text), "schema id %d reads back", id)
				_, err = reg.Register(t.Context(), subject, `{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"string"}]}`)
				require.ErrorIs(t, err, ErrIncompatible)
				assert.Contains(t, err.Error(), "the registry refused the new schema")
				return
			}
			require.ErrorIs(t, err, ErrRegistryTLS)
			var ae *RegistryAccessError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, ae.Fix, tc.fixHas)
			assert.NotContains(t, err.Error(), string(srv.PKI.ClientKeyPEM))
			t.Logf("%v", err)
			// The connection that waits for the answer reads the real
			// server's alert, whatever the race of the first one.
			tlsc, err := tlsconfig.Load("registry.tls", tc.tls)
			require.NoError(t, err)
			u, err := url.Parse(srv.URL)
			require.NoError(t, err)
			alert := tlsconfig.Refusal(t.Context(), u.Host, tlsc)
			require.Error(t, alert, "stunnel's alert")
			assert.ErrorContains(t, alert, "remote error: tls: ")
			t.Logf("alert: %v", alert)
		})
	}
}
