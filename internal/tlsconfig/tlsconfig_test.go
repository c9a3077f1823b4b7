package tlsconfig

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoad(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	tests := []struct {
		name        string
		cfg         Config
		errContains string
	}{
		{name: "disabled"},
		{name: "system roots", cfg: Config{Enabled: true, ServerName: "x"}},
		{name: "files without tls", cfg: Config{CAFile: "ca.pem"}, errContains: "kafka.tls.ca_file is set but kafka.tls.enabled is false"},
		{name: "cert without key", cfg: Config{Enabled: true, CertFile: "c.pem"}, errContains: "kafka.tls.cert_file and kafka.tls.key_file must be set together"},
		{name: "missing ca", cfg: Config{Enabled: true, CAFile: "/nonexistent/ca.pem"}, errContains: "reading kafka.tls.ca_file"},
		{name: "ca not pem", cfg: Config{Enabled: true, CAFile: notPEM}, errContains: "no PEM certificate"},
		{name: "bad key pair", cfg: Config{Enabled: true, CertFile: notPEM, KeyFile: notPEM}, errContains: "loading kafka.tls.cert_file/key_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc, err := Load("kafka.tls", tt.cfg)
			if tt.errContains != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.errContains)
				return
			}
			require.NoError(t, err)
			if !tt.cfg.Enabled {
				assert.Nil(t, tc)
				return
			}
			require.NotNil(t, tc)
			assert.Equal(t, tt.cfg.ServerName, tc.ServerName)
		})
	}
}
