package source_test

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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

type tlsClientAuth struct{ pool *x509.CertPool }

// testPKI is a CA with a server and a client certificate, written as PEM
// files.
type testPKI struct {
	caFile, clientCert, clientKey string
	server                        tls.Certificate
	pool                          *x509.CertPool
}

func newPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, server bool) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"amp.test"}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), clientCert: filepath.Join(dir, "client.pem"), clientKey: filepath.Join(dir, "client.key")}
	require.NoError(t, os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	scert, skey := issue(2, true)
	p.server, err = tls.X509KeyPair(scert, skey)
	require.NoError(t, err)
	ccert, ckey := issue(3, false)
	require.NoError(t, os.WriteFile(p.clientCert, ccert, 0o600))
	require.NoError(t, os.WriteFile(p.clientKey, ckey, 0o600))
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	return p
}

func TestTLS(t *testing.T) {
	pki := newPKI(t)
	tests := []struct {
		name     string
		mtls     bool
		tls      source.TLSConfig
		wantCode codes.Code // codes.OK: the stream works
		// permanent: the certificate did not verify, which ends the
		// stream at once (ErrUntrustedCertificate); otherwise the one
		// attempt is retried and exhausted.
		permanent bool
	}{
		{name: "ca file", tls: source.TLSConfig{Enabled: true, CAFile: pki.caFile}},
		{name: "ca file with server name", tls: source.TLSConfig{Enabled: true, CAFile: pki.caFile, ServerName: "amp.test"}},
		{name: "system roots reject a private CA", tls: source.TLSConfig{Enabled: true}, wantCode: codes.Unavailable, permanent: true},
		{name: "a name the certificate lacks", tls: source.TLSConfig{Enabled: true, CAFile: pki.caFile, ServerName: "other.test"}, wantCode: codes.Unavailable, permanent: true},
		{name: "client certificate", mtls: true, tls: source.TLSConfig{Enabled: true, CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}},
		{name: "missing client certificate", mtls: true, tls: source.TLSConfig{Enabled: true, CAFile: pki.caFile}, wantCode: codes.Unavailable},
		{name: "plaintext client to a TLS server", tls: source.TLSConfig{}, wantCode: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScriptServer(attemptScript{msgs: []msg{W(t, R(0, 0, 0))}})
			var auth *tlsClientAuth
			if tt.mtls {
				auth = &tlsClientAuth{pool: pki.pool}
			}
			addr := serveTLS(t, srv, pki.server, auth)
			c := newClient(t, addr, func(c *source.Config) { c.TLS = tt.tls; c.Backoff.MaxAttempts = 1 }, source.Deps{})
			s, err := c.Query(t.Context(), "SELECT 1")
			require.NoError(t, err)
			defer s.Close()
			if tt.wantCode == codes.OK {
				assert.True(t, next(t, s).complete)
				assert.Zero(t, c.ReadBudgetStats().Unsized, "a message whose length was not known before it was received over TLS")
				return
			}
			err = nextErr(t, s)
			assert.Equal(t, tt.wantCode, status.Code(err), "%v", err)
			if tt.permanent {
				assert.ErrorIs(t, err, source.ErrUntrustedCertificate)
				assert.ErrorIs(t, err, source.ErrPermanent)
				assert.ErrorContains(t, err, "amp.tls.ca_file")
				assert.ErrorContains(t, err, "x509:", "the verification error is kept")
				return
			}
			assert.ErrorIs(t, err, source.ErrRetriesExhausted)
			assert.NotErrorIs(t, err, source.ErrUntrustedCertificate)
		})
	}
}

func TestTLS_BadFiles(t *testing.T) {
	pki := newPKI(t)
	bad := filepath.Join(t.TempDir(), "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not pem"), 0o600))
	tests := []struct {
		name        string
		tls         source.TLSConfig
		errContains string
	}{
		{"missing ca", source.TLSConfig{Enabled: true, CAFile: "/nonexistent/ca.pem"}, "reading amp.tls.ca_file"},
		{"not pem", source.TLSConfig{Enabled: true, CAFile: bad}, "no PEM certificate"},
		{"bad key pair", source.TLSConfig{Enabled: true, CertFile: pki.clientCert, KeyFile: bad}, "loading amp.tls.cert_file/key_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := source.DefaultConfig()
			cfg.Addr = "127.0.0.1:1"
			cfg.TLS = tt.tls
			_, err := source.New(cfg, source.Deps{})
			assert.ErrorContains(t, err, tt.errContains)
		})
	}
}
