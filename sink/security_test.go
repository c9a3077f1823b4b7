package sink

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

func TestSASLMechanisms(t *testing.T) {
	for _, mech := range []SASLMechanism{SASLPlain, SASLScramSHA256, SASLScramSHA512} {
		t.Run(string(mech), func(t *testing.T) {
			_, cfg := newCluster(t, kfake.EnableSASL(), kfake.Superuser(string(mech), "bridge", "s3cret-pw"))
			cfg.SASL = SASLConfig{Mechanism: mech, Username: "bridge", Password: "s3cret-pw"}
			createTopic(t, cfg, "data", 1)
			p := newProducer(t, cfg, "s", Deps{})
			_ = produceBatches(t, p, "data", 2, "b")
			assert.Len(t, consumeCommittedWith(t, cfg, "data"), 2)

			cfg.SASL.Password = "wrong"
			_, err := NewProducer(testCtx(t), cfg, "s", Deps{})
			require.Error(t, err, "a wrong password is refused")
			assert.NotContains(t, err.Error(), "wrong", "the password is not echoed")
		})
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	serverCert := newLeaf(t, ca, caKey, "kafka", false)
	clientCert := newLeaf(t, ca, caKey, "bridge", true)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	_, cfg := newCluster(t, kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}))
	caFile := writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	certFile := writePEM(t, dir, "client.pem", "CERTIFICATE", clientCert.Certificate[0])
	keyDER, err := x509.MarshalECPrivateKey(clientCert.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	keyFile := writePEM(t, dir, "client.key", "EC PRIVATE KEY", keyDER)

	cfg.TLS = TLSConfig{Enabled: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "127.0.0.1"}
	require.NoError(t, cfg.Validate())
	createTopic(t, cfg, "data", 1)
	p := newProducer(t, cfg, "s", Deps{})
	c := produceBatches(t, p, "data", 3, "b")
	r := newReader(t, cfg)
	got, err := r.ReadSpans(testCtx(t), c.Groups[0].Spans)
	require.NoError(t, err)
	assert.Len(t, got[0], 3)

	// Without the client certificate the broker refuses the handshake.
	noCert := cfg
	noCert.TLS.CertFile, noCert.TLS.KeyFile = "", ""
	noCert.DialTimeout = time.Second
	_, err = NewAdmin(testCtx(t), noCert, Deps{})
	require.Error(t, err)
}

// consumeCommittedWith reads back through the package's Reader, which
// carries the TLS/SASL settings of cfg (consumeCommitted dials plainly).
func consumeCommittedWith(t *testing.T, cfg Config, topic string) []ReadRecord {
	t.Helper()
	r := newReader(t, cfg)
	cr, err := r.ReadControl(testCtx(t), topic, -1)
	require.NoError(t, err)
	return cr.Records
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sinktest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, client bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}
