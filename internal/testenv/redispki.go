package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
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

// WriteTestPKI writes the files of a new test PKI (newPKI) to dir (created
// if missing), for a server that reads them, such as redis-server.
// Every call makes a new CA, so the files of two calls do not trust each
// other: a test of an untrusted server certificate uses the CAFile of a
// second call.
func WriteTestPKI(dir string) (RedisTLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	p, err := newPKI(dir)
	if err != nil {
		return RedisTLSFiles{}, fmt.Errorf("writing test PKI: %w", err)
	}
	return RedisTLSFiles{CAFile: p.CAFile, ServerCertFile: p.ServerCertFile, ServerKeyFile: p.ServerKeyFile,
		ClientCertFile: p.ClientCertFile, ClientKeyFile: p.ClientKeyFile}, nil
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
