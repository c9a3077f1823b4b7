// Package tlsconfig is the one TLS loader of the bridge: the sink (Kafka),
// the source (Amp Flight) and the Redis checkpoint store all describe their
// client TLS with Config and turn it into a *tls.Config with Load, so the
// three connections accept the same settings and report the same errors,
// each naming the bridge.yaml key it came from (the schema registry's
// client too). Refusal, used by each of them when a first connection ends
// in a reset, tells a TLS 1.3 server's refusal of the client certificate
// from a connection lost for another reason.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Config is a client TLS setting; the yaml keys are bridge.yaml's
// (amp.tls, kafka.tls, checkpoint.redis.tls).
type Config struct {
	// Enabled turns TLS on. The other fields need it. Default false.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of CAs to trust instead of the system roots.
	// Default empty (system roots).
	CAFile string `yaml:"ca_file"`
	// CertFile is the PEM client certificate for mutual TLS; set it with
	// KeyFile or not at all.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
	// ServerName overrides the name verified in the server certificate
	// (default: the host dialled).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify disables certificate verification. Tests only: no
	// configuration key reaches it.
	InsecureSkipVerify bool `yaml:"-"`
}

// Validate checks the combination of fields without reading files; key is
// the YAML path of the setting (e.g. "kafka.tls") and every error names a
// key under it. All problems are returned together.
func (c Config) Validate(key string) error {
	var errs []error
	if !c.Enabled {
		for _, f := range []struct{ name, v string }{{"ca_file", c.CAFile}, {"cert_file", c.CertFile},
			{"key_file", c.KeyFile}, {"server_name", c.ServerName}} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("%s.%s is set but %s.enabled is false; set %s.enabled: true or remove %s.%s",
					key, f.name, key, key, key, f.name))
			}
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s.cert_file and %s.key_file must be set together for a client certificate", key, key))
	}
	return errors.Join(errs...)
}

// Load validates c and reads its files into a *tls.Config (TLS 1.2 or
// newer). It returns nil, nil when TLS is disabled. key is the YAML path of
// the setting, named in every error.
func Load(key string, c Config) (*tls.Config, error) {
	if err := c.Validate(key); err != nil {
		return nil, err
	}
	if !c.Enabled {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // opt-in for tests, no configuration key reaches it
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading %s.ca_file: %w", key, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading %s.ca_file %s: no PEM certificate found", key, c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading %s.cert_file/key_file: %w", key, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
