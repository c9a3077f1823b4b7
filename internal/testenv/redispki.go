package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// RedisTLSFiles are the PEM files of a throwaway PKI (WriteTestPKI): a CA,
// a server certificate for 127.0.0.1 and localhost, and a client
// certificate, all signed by the CA and valid for a day.
type RedisTLSFiles struct {
	// CAFile is the CA certificate; trust it to verify both certificates.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate and key.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate ("bridge")
	// and its key, for mutual TLS.
	ClientCertFile, ClientKeyFile string
}

// WriteTestPKI generates a CA, a server and a client certificate with
// crypto/x509 (no openssl) and writes them to dir (created if missing).
// Every call makes a new CA, so the files of two calls do not trust each
// other: a test of an untrusted server certificate uses the CAFile of a
// second call.
func WriteTestPKI(dir string) (RedisTLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	f := RedisTLSFiles{
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"), ServerKeyFile: filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"), ClientKeyFile: filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "amp-kafka-bridge test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certFile, keyFile string, dns []string, ips []net.IP) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: dns, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		return writeCertAndKey(certFile, keyFile, der, key)
	}
	err = errors.Join(
		writePEM(f.CAFile, "CERTIFICATE", caDER),
		leaf(2, "localhost", x509.ExtKeyUsageServerAuth, f.ServerCertFile, f.ServerKeyFile,
			[]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}),
		leaf(3, "bridge", x509.ExtKeyUsageClientAuth, f.ClientCertFile, f.ClientKeyFile, nil, nil),
	)
	if err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	return f, nil
}

func writeCertAndKey(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return errors.Join(writePEM(certFile, "CERTIFICATE", der), writePEM(keyFile, "PRIVATE KEY", keyDER))
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// clientConfig trusts the CA and presents the client certificate.
func (f RedisTLSFiles) clientConfig() (*tls.Config, error) {
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no PEM certificate", f.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
