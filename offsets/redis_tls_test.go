package offsets

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

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selfSigned writes a self-signed CA/server certificate for 127.0.0.1 and
// name "redis.test" and returns the PEM file of the certificate and the
// server's tls.Config.
func selfSigned(t *testing.T) (string, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redis.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"redis.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, certPEM, 0o600))
	return path, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

func TestRedisStoreTLSAndACL(t *testing.T) {
	caFile, serverTLS := selfSigned(t)
	m := miniredis.NewMiniRedis()
	require.NoError(t, m.StartTLS(serverTLS))
	t.Cleanup(m.Close)
	m.RequireUserAuth("bridge", "s3cret")
	log := testLogger(t)

	s, err := NewRedisStore(t.Context(), RedisConfig{Addr: m.Addr(), Username: "bridge", Password: "s3cret",
		TLS: RedisTLS{Enabled: true, CAFile: caFile, ServerName: "redis.test"}}, log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Commit(t.Context(), testCheckpoint("tls", 1, 2)))
	got, err := s.Load(t.Context(), "tls")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), got.Version)

	tests := []struct {
		name        string
		cfg         RedisConfig
		errContains string
	}{
		{name: "wrong password", cfg: RedisConfig{Username: "bridge", Password: "nope",
			TLS: RedisTLS{Enabled: true, CAFile: caFile, ServerName: "redis.test"}}, errContains: "check the redis username and password"},
		{name: "untrusted server", cfg: RedisConfig{Username: "bridge", Password: "s3cret", TLS: RedisTLS{Enabled: true, ServerName: "redis.test"}},
			errContains: "certificate"},
		{name: "plain text to a TLS server", cfg: RedisConfig{Username: "bridge", Password: "s3cret", DialTimeout: time.Second,
			ReadTimeout: 300 * time.Millisecond, MaxRetries: -1}, errContains: "connecting to redis"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Addr = m.Addr()
			_, err := NewRedisStore(t.Context(), tt.cfg, log)
			assert.ErrorContains(t, err, tt.errContains)
		})
	}
}
