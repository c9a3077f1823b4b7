package sink

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestIntegrationSecurity runs the sink against one real broker whose
// client listeners need TLS, mutual TLS, or SASL (SCRAM-SHA-512, PLAIN)
// over TLS: topics are created, a transaction committed and read back
// read_committed through the package's own clients. Each listener also
// refuses wrong settings with a named error: a wrong SASL password
// (ErrAuthentication, naming the password's keys), a mechanism the
// listener does not enable or SASL on a listener without it
// (ErrSASLMechanism, naming what it enables), a CA that did not sign the
// broker's certificate (ErrUntrustedCertificate, naming kafka.tls.ca_file),
// and on the mutual-TLS listener no, an expired, or a foreign client
// certificate (ErrClientCertificate, naming which).
func TestIntegrationSecurity(t *testing.T) {
	const user, password = "bridge", "s3cret-Pw"
	users := map[string]string{user: password}
	k := testenv.StartKafkaBroker(t,
		testenv.WithSecurity(testenv.SecurityConfig{TLS: true}),
		testenv.WithListener("MTLS", testenv.SecurityConfig{TLS: true, ClientAuth: true}),
		testenv.WithListener("SCRAM", testenv.SecurityConfig{TLS: true, SASL: "SCRAM-SHA-512", Users: users}),
		testenv.WithListener("PLAIN", testenv.SecurityConfig{TLS: true, SASL: "PLAIN", Users: users}))
	for _, tc := range []struct {
		name       string
		listener   string
		clientCert bool
		mechanism  SASLMechanism
	}{
		{name: "tls"},
		{name: "mtls", listener: "MTLS", clientCert: true},
		{name: "scram-sha-512", listener: "SCRAM", mechanism: SASLScramSHA512},
		{name: "plain", listener: "PLAIN", mechanism: SASLPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := k.Addr()
			if tc.listener != "" {
				addr = k.ListenerAddr(tc.listener)
			}
			cfg := testConfig(addr)
			cfg.TransactionalIDPrefix = testenv.UniqueName(t, "sinksec")
			cfg.TLS = k.ClientTLS(tc.clientCert)
			if tc.mechanism != "" {
				cfg.SASL = SASLConfig{Mechanism: tc.mechanism, Username: user, Password: password}
			}
			require.NoError(t, cfg.Validate())

			// Plaintext is refused: the client listener really is secured.
			plainCfg := testConfig(addr)
			_, err := NewAdmin(testCtx(t), plainCfg, Deps{Logger: testLogger(t)})
			require.Error(t, err, "a plaintext client must not reach the secured listener")

			data, control := testenv.UniqueName(t, "sec-data"), testenv.UniqueName(t, "sec-control")
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

				// The other listener's mechanism: the listener enables only its own.
				other, enabled := SASLPlain, "SCRAM-SHA-512"
				if tc.mechanism == SASLPlain {
					other, enabled = SASLScramSHA512, "PLAIN"
				}
				mech := cfg
				mech.SASL.Mechanism = other
				_, err = NewAdmin(testCtx(t), mech, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrSASLMechanism)
				assert.ErrorContains(t, err, "does not enable kafka.sasl.mechanism "+string(other)+" (it enables "+enabled+")")
				assert.NotContains(t, err.Error(), "EOF")
			}
			switch tc.name {
			case "tls":
				untrusted := cfg
				untrusted.TLS.CAFile = testenv.NewPKI(t).CAFile // another CA
				_, err := NewReader(testCtx(t), untrusted, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrUntrustedCertificate)
				assert.Contains(t, err.Error(), "kafka.tls.ca_file")
				assert.Contains(t, err.Error(), untrusted.TLS.CAFile)

				sasl := cfg
				sasl.SASL = SASLConfig{Mechanism: SASLScramSHA512, Username: user, Password: password}
				_, err = NewAdmin(testCtx(t), sasl, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrSASLMechanism, "SASL against a listener without SASL")
				assert.ErrorContains(t, err, "does not take SASL")
			case "mtls":
				noCert := cfg
				noCert.TLS = k.ClientTLS(false)
				_, err := NewAdmin(testCtx(t), noCert, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrClientCertificate, "the broker requires a client certificate")
				assert.ErrorContains(t, err, "requires a client certificate (ssl.client.auth=required) and none is configured: set kafka.tls.cert_file and kafka.tls.key_file")

				expired := cfg
				now := time.Now()
				expired.TLS.CertFile, expired.TLS.KeyFile = k.PKI().IssueClient(t, "bridge", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
				_, err = NewProducer(testCtx(t), expired, "s", Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrClientCertificate)
				assert.ErrorContains(t, err, "the client certificate in kafka.tls.cert_file "+expired.TLS.CertFile+" (subject CN=bridge) expired at ")

				foreign := cfg
				other := testenv.NewPKI(t)
				foreign.TLS.CertFile, foreign.TLS.KeyFile = other.ClientCertFile, other.ClientKeyFile
				_, err = NewReader(testCtx(t), foreign, Deps{Logger: testLogger(t)})
				require.ErrorIs(t, err, ErrClientCertificate)
				assert.ErrorContains(t, err, "the broker does not trust the client certificate in kafka.tls.cert_file "+other.ClientCertFile+
					" (subject CN=bridge, issuer CN=amp-kafka-bridge test CA): use a certificate signed by a CA in the broker's ssl.truststore")
			}
		})
	}
}
