package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PKI is a throwaway certificate authority made for one test or server (crypto/x509,
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

	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewPKI makes a CA and its two leaf certificates in a temporary
// directory of t (newPKI).
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p, err := newPKI(t.TempDir())
	require.NoError(t, err)
	return p
}

// newPKI makes a CA, a server certificate (127.0.0.1, ::1, localhost,
// amp.test) and a client certificate ("bridge"), valid for a day, and
// writes them as PEM files into dir. Every call makes a new CA, so the
// files of two calls do not trust each other. It is the one test PKI of
// the project: NewPKI and WriteTestPKI are built on it.
func newPKI(dir string) (*PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "amp-kafka-bridge test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	var werr error
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil && werr == nil {
			werr = err
		}
		return path
	}
	p := &PKI{Pool: x509.NewCertPool(), dir: dir, ca: ca, caKey: caKey, serial: 1}
	p.Pool.AddCert(ca)
	p.CAFile = write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	scert, skey, err := p.issue("localhost", true, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	if p.Server, err = tls.X509KeyPair(scert, skey); err != nil {
		return nil, err
	}
	p.ServerCertFile, p.ServerKeyFile = write("server.pem", scert), write("server.key", skey)
	ccert, ckey, err := p.issue("bridge", false, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	p.ClientCertFile, p.ClientKeyFile, p.ClientKeyPEM = write("client.pem", ccert), write("client.key", ckey), ckey
	return p, werr
}

// issue makes a certificate and key signed by p's CA: a server
// certificate for 127.0.0.1, ::1, localhost and amp.test, or a client
// certificate, with subject CN=cn, valid from notBefore to notAfter.
func (p *PKI) issue(cn string, server bool, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost", "amp.test"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// IssueClient writes a further client certificate of p's CA, with subject
// CN=cn and valid from notBefore to notAfter (in the past for an expired
// one), and its key, as PEM files in p's directory; it returns their paths.
// It is not safe for concurrent use with itself.
func (p *PKI) IssueClient(t testing.TB, cn string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	cert, key, err := p.issue(cn, false, notBefore, notAfter)
	require.NoError(t, err)
	name := fmt.Sprintf("client-%d", p.serial)
	certFile, keyFile = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+".key")
	require.NoError(t, os.WriteFile(certFile, cert, 0o600))
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	return certFile, keyFile
}

// ServerTLS returns a server configuration presenting p.Server.
func (p *PKI) ServerTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{p.Server}}
}
