package sink

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestIntegrationSecurity runs the sink against real brokers whose client
// listener needs TLS, mutual TLS, or SASL (SCRAM-SHA-512, PLAIN) over TLS:
// topics are created, a transaction committed and read back read_committed
// through the package's own clients. Each broker also refuses one wrong
// setting with a named error: a wrong SASL password (ErrAuthentication,
// naming the password's keys) or a CA that did not sign the broker's
// certificate (ErrUntrustedCertificate, naming kafka.tls.ca_file). The
// brokers start in parallel (a few seconds each).
func TestIntegrationSecurity(t *testing.T) {
	const user, password = "bridge", "s3cret-Pw"
	for _, tc := range []struct {
		name       string
		sec        testenv.SecurityConfig
		clientCert bool
		mechanism  SASLMechanism
	}{
		{name: "tls", sec: testenv.SecurityConfig{TLS: true}},
		{name: "mtls", sec: testenv.SecurityConfig{TLS: true, ClientAuth: true}, clientCert: true},
		{name: "scram-sha-512", sec: testenv.SecurityConfig{TLS: true, SASL: "SCRAM-SHA-512",
			Users: map[string]string{user: password}}, mechanism: SASLScramSHA512},
		{name: "plain", sec: testenv.SecurityConfig{TLS: true, SASL: "PLAIN",
			Users: map[string]string{user: password}}, mechanism: SASLPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := testenv.StartKafkaBroker(t, testenv.WithSecurity(tc.sec))
			cfg := testConfig(k.Addr())
			cfg.TransactionalIDPrefix = testenv.UniqueName(t, "sinksec")
			cfg.TLS = k.ClientTLS(tc.clientCert)
			if tc.mechanism != "" {
				cfg.SASL = SASLConfig{Mechanism: tc.mechanism, Username: user, Password: password}
			}
			require.NoError(t, cfg.Validate())

			// Plaintext is refused: the client listener really is secured.
			plainCfg := testConfig(k.Addr())
			_, err := NewAdmin(testCtx(t), plainCfg, Deps{Logger: testLogger(t)})
			require.Error(t, err, "a plaintext client must not reach the secured listener")

			data, control := "sec-data-"+tc.name, "sec-control-"+tc.name
			_, err = newAdmin(t, cfg).EnsureTopics(testCtx(t),
				TopicSpec{Name: data, Kind: TopicData, Partitions: 2, ReplicationFactor: -1},
				TopicSpec{Name: control, Kind: TopicControl, Partitions: 1, ReplicationFactor: -1})
			require.NoError(t, err)
			p := newProducer(t, cfg, "s", Deps{})
			c := produceBatches(t, p, data, 3, "b1", "b2")
			var spans []Span
			for _, g := range c.Groups {
				spans = append(spans, g.Spans...)
			}
			got, err := newReader(t, cfg).ReadSpans(testCtx(t), spans)
			require.NoError(t, err)
			var n int
			for _, rs := range got {
				n += len(rs)
			}
			assert.Equal(t, 6, n, "the committed transaction reads back read_committed")

			if tc.mechanism != "" {
				wrong := cfg
				wrong.SASL.Password = "not-the-password"
				_, err := NewAdmin(testCtx(t), wrong, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrAuthentication)
				for _, want := range []string{"authentication failed", "kafka.sasl.password_file", "BRIDGE_KAFKA_SASL_PASSWORD", user} {
					assert.Contains(t, err.Error(), want)
				}
				assert.NotContains(t, err.Error(), "not-the-password", "the password is not echoed")
				_, err = NewProducer(testCtx(t), wrong, "s", Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrAuthentication, "the producer's connection check classifies it too")
			}
			if tc.name == "tls" {
				untrusted := cfg
				untrusted.TLS.CAFile = testenv.NewPKI(t).CAFile // another CA
				_, err := NewReader(testCtx(t), untrusted, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrUntrustedCertificate)
				assert.Contains(t, err.Error(), "kafka.tls.ca_file")
				assert.Contains(t, err.Error(), untrusted.TLS.CAFile)
			}
			if tc.name == "mtls" {
				noCert := cfg
				noCert.TLS = k.ClientTLS(false)
				_, err := NewAdmin(testCtx(t), noCert, Deps{Logger: testLogger(t)})
				require.Error(t, err, "the broker requires a client certificate")
			}
		})
	}
}
