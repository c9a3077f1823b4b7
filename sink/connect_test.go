package sink

import (
	"crypto/x509"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kerr"
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
