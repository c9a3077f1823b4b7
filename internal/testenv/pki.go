package testenv

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

	"github.com/stretchr/testify/require"
)

// PKI is a throwaway certificate authority made for one test (crypto/x509,
// no openssl), with a server certificate for 127.0.0.1, ::1, localhost and
// amp.test and a client certificate, every part also written as a PEM file
// in a temporary directory.
type PKI struct {
	// CAFile is the CA certificate (PEM), for a client's ca_file.
	CAFile string
	// Pool holds the CA, for a server verifying client certificates.
	Pool *x509.CertPool
	// Server is the server certificate and key.
	Server tls.Certificate
	// ServerCertFile and ServerKeyFile are Server as PEM files.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are the client certificate and its
	// key as PEM files, for a client's cert_file and key_file.
	ClientCertFile, ClientKeyFile string
	// ClientKeyPEM is the content of ClientKeyFile.
	ClientKeyPEM []byte
}

// NewPKI makes a CA and its two leaf certificates, valid for an hour.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testenv CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	issue := func(serial int64, server bool) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "testenv leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
			tmpl.DNSNames = []string{"localhost", "amp.test"}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	p := &PKI{Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	p.CAFile = write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	scert, skey := issue(2, true)
	p.Server, err = tls.X509KeyPair(scert, skey)
	require.NoError(t, err)
	p.ServerCertFile, p.ServerKeyFile = write("server.pem", scert), write("server.key", skey)
	ccert, ckey := issue(3, false)
	p.ClientCertFile, p.ClientKeyFile, p.ClientKeyPEM = write("client.pem", ccert), write("client.key", ckey), ckey
	return p
}

// ServerTLS returns a server configuration presenting p.Server.
func (p *PKI) ServerTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{p.Server}}
}
