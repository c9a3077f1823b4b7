package sink

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestConnectError: the first connection's failures are classified and name
// the keys to fix (against a real broker: TestIntegrationSecurity).
func TestConnectError(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"b:9093"}
	cfg.SASL = SASLConfig{Mechanism: SASLScramSHA512, Username: "bridge", Password: "pw-secret"}
	cfg.TLS = TLSConfig{Enabled: true, CAFile: "/etc/ca.pem"}

	err := connectError(t.Context(), cfg, fmt.Errorf("%w: Authentication failed", kerr.SaslAuthenticationFailed))
	assert.ErrorIs(t, err, ErrAuthentication)
	assert.ErrorIs(t, err, kerr.SaslAuthenticationFailed)
	for _, want := range []string{"authentication failed", "kafka.sasl.password_file", "BRIDGE_KAFKA_SASL_PASSWORD", `"bridge"`, "SCRAM-SHA-512"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "pw-secret")

	err = connectError(t.Context(), cfg, fmt.Errorf("unable to dial: %w", x509.UnknownAuthorityError{}))
	assert.ErrorIs(t, err, ErrUntrustedCertificate)
	assert.Contains(t, err.Error(), "kafka.tls.ca_file /etc/ca.pem")
	cfg.TLS.CAFile = ""
	assert.Contains(t, connectError(t.Context(), cfg, x509.UnknownAuthorityError{}).Error(), "a CA of the system: set kafka.tls.ca_file")

	err = connectError(t.Context(), cfg, errors.New("dial tcp: connection refused"))
	assert.NotErrorIs(t, err, ErrAuthentication)
	assert.NotErrorIs(t, err, ErrUntrustedCertificate)
	assert.Contains(t, err.Error(), "check kafka.brokers")
}

// TestConnectErrorMechanismAndClientCertificate: the broker's answers
// that name no fix by themselves (UNSUPPORTED_SASL_MECHANISM,
// ILLEGAL_SASL_STATE, a TLS alert about the client certificate) are
// classified, and the client certificate is looked at to say why it was
// refused.
func TestConnectErrorMechanismAndClientCertificate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"127.0.0.1:1"} // no broker: the mechanism probe finds nothing
	cfg.DialTimeout = 200 * time.Millisecond
	cfg.SASL = SASLConfig{Mechanism: SASLPlain, Username: "bridge", Password: "pw"}

	err := connectError(t.Context(), cfg, kerr.UnsupportedSaslMechanism)
	require.ErrorIs(t, err, ErrSASLMechanism)
	assert.ErrorContains(t, err, "does not enable kafka.sasl.mechanism PLAIN; set kafka.sasl.mechanism to one it enables")
	err = connectError(t.Context(), cfg, kerr.IllegalSaslState)
	require.ErrorIs(t, err, ErrSASLMechanism)
	assert.ErrorContains(t, err, "does not take SASL")
	assert.NotErrorIs(t, connectError(t.Context(), cfg, io.EOF), ErrSASLMechanism, "an EOF says nothing about the mechanism")

	p := testenv.NewPKI(t)
	now := time.Now()
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: unknown certificate")}
	cfg.SASL = SASLConfig{}
	cfg.TLS = TLSConfig{Enabled: true, CAFile: p.CAFile}
	for _, tc := range []struct {
		name string
		cert func() (string, string)
		want string
	}{
		{"none", func() (string, string) { return "", "" }, "requires a client certificate (ssl.client.auth=required) and none is configured"},
		{"expired", func() (string, string) { return p.IssueClient(t, "bridge", now.Add(-2*time.Hour), now.Add(-time.Hour)) }, "(subject CN=bridge) expired at "},
		{"not yet valid", func() (string, string) { return p.IssueClient(t, "bridge", now.Add(time.Hour), now.Add(2*time.Hour)) }, "is not valid before "},
		{"untrusted", func() (string, string) { return p.ClientCertFile, p.ClientKeyFile }, "does not trust the client certificate in kafka.tls.cert_file " + p.ClientCertFile + " (subject CN=bridge, issuer CN=amp-kafka-bridge test CA)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.TLS.CertFile, c.TLS.KeyFile = tc.cert()
			err := connectError(t.Context(), c, fmt.Errorf("dialing: %w", alert))
			require.ErrorIs(t, err, ErrClientCertificate)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	other := &net.OpError{Op: "remote error", Err: errors.New("tls: protocol version not supported")}
	assert.NotErrorIs(t, connectError(t.Context(), cfg, other), ErrClientCertificate, "other alerts are not about the certificate")
}

// TestConnectRefusalOvertakenByReset: a first connection that a broker
// with TLS reset is, when a connection that waits for the broker's answer
// gets an alert about the client certificate, a named ErrClientCertificate
// (in TLS 1.3 the reset of a refusing broker can overtake its alert); a
// reset that no alert explains is not. franz-go retries a reset connection
// a varying number of times, so the reset is given to connectError.
func TestConnectRefusalOvertakenByReset(t *testing.T) {
	reset := fmt.Errorf("write tcp: %w", &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET})
	for _, tc := range []struct {
		name   string
		resets int
		alert  bool
	}{{"alert on the probe's connection", 0, true}, {"no alert at all", 1 << 30, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.StartRefusingTLSServer(t, tc.resets)
			cfg := DefaultConfig()
			cfg.Brokers = []string{srv.Addr}
			cfg.TLS = TLSConfig{Enabled: true, CAFile: srv.PKI.CAFile}
			err := connectError(t.Context(), cfg, reset)
			assert.Equal(t, 1, srv.Conns(), "one connection asked")
			require.ErrorIs(t, err, syscall.ECONNRESET)
			if !tc.alert {
				assert.NotErrorIs(t, err, ErrClientCertificate, "a reset alone is not a refused certificate: %v", err)
				return
			}
			require.ErrorIs(t, err, ErrClientCertificate)
			assert.ErrorContains(t, err, "requires a client certificate (ssl.client.auth=required) and none is configured")
			assert.ErrorContains(t, err, "tls: certificate required")
			t.Logf("%v", err)
		})
	}
}
