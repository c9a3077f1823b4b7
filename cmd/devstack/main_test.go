package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		errContains string
	}{
		{name: "no command", args: nil, errContains: "missing command"},
		{name: "unknown command", args: []string{"nope"}, errContains: `"nope"`},
		{name: "kafka-ready without brokers", args: []string{"kafka-ready"}, errContains: "-brokers"},
		{name: "registry-ready without url", args: []string{"registry-ready"}, errContains: "-url"},
		{name: "kafka-acls without brokers", args: []string{"kafka-acls"}, errContains: "-brokers"},
		{name: "kafka-acls without principal", args: []string{"kafka-acls", "-brokers", "127.0.0.1:1"}, errContains: "-principal"},
		{name: "kafka-ready without the password file", args: []string{"kafka-ready", "-brokers", "127.0.0.1:1", "-sasl-user", "admin",
			"-sasl-password-file", "/nonexistent"}, errContains: "reading the SASL password"},
		{name: "pki without dir", args: []string{"pki"}, errContains: "-dir"},
		{name: "freeport out of range", args: []string{"freeport", "-n", "0"}, errContains: "want 1..100"},
		{name: "bad flag", args: []string{"freeport", "-x"}, errContains: "parsing flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), discard(), io.Discard, tt.args)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.errContains)
		})
	}
}

func TestFreePortsDistinct(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), discard(), &out, []string{"freeport", "-n", "5"}))
	ports := strings.Fields(out.String())
	require.Len(t, ports, 5)
	seen := map[string]bool{}
	for _, p := range ports {
		assert.False(t, seen[p], "port %s twice", p)
		seen[p] = true
	}
}

func TestRegistryServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	addrFile := filepath.Join(t.TempDir(), "addr")
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, discard(), io.Discard, []string{"registry", "-addr", "127.0.0.1:0", "-addr-file", addrFile})
	}()
	var addr string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, run(t.Context(), discard(), io.Discard, []string{"registry-ready", "-url", "http://" + addr}))
	cancel()
	require.NoError(t, <-errc)
	require.Error(t, run(t.Context(), discard(), io.Discard, []string{"registry-ready", "-url", "http://" + addr}),
		"the registry must be gone after its context ends")
}

func TestIntegrationKafkaReady(t *testing.T) {
	for _, b := range testenv.KafkaBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run(t.Context(), discard(), &out, []string{"kafka-ready", "-brokers", b.Addr, "-timeout", "30s"}))
			assert.Contains(t, out.String(), "kafka ready at "+b.Addr)
		})
	}
}

func TestKafkaReadyTimesOut(t *testing.T) {
	port := freeTestPort(t)
	err := run(t.Context(), discard(), io.Discard, []string{"kafka-ready", "-brokers", "127.0.0.1:" + port, "-timeout", "1s"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "waiting for kafka")
}

func freeTestPort(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, freePorts(t.Context(), &out, 1))
	return strings.TrimSpace(out.String())
}

// TestPKIWritesTrustedFiles: devstack pki writes a CA and the two
// certificates it signed, as the secured local broker reads them.
func TestPKIWritesTrustedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), discard(), &out, []string{"pki", "-dir", dir}))
	for _, f := range []string{"ca.pem", "server.pem", "server.key", "client.pem", "client.key"} {
		assert.FileExists(t, filepath.Join(dir, f))
		assert.Contains(t, out.String(), filepath.Join(dir, f))
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	for _, f := range []string{"server.pem", "client.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		blk, _ := pem.Decode(b)
		require.NotNil(t, blk)
		cert, err := x509.ParseCertificate(blk.Bytes)
		require.NoError(t, err)
		_, err = cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		assert.NoError(t, err, "%s is signed by the CA", f)
	}
}

// TestGrantACLsCluster: kafka-acls grants, besides the topics' and the
// transactional ids' ACLs, Read on the groups prefixed -txn-prefix (cluster
// mode's default group is "{prefix}.cluster"), and prints its command.
func TestGrantACLsCluster(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer kc.Close()
	brokers := kc.ListenAddrs()[0]
	var out bytes.Buffer
	require.NoError(t, grantACLs(t.Context(), &out, brokers, adminAuth{},
		aclGrant{principals: []string{"User:bridge"}, topicPrefix: "amp", txnPrefix: "amp-kafka-bridge."}))
	assert.Contains(t, out.String(), "--operation Read --group amp-kafka-bridge. --resource-pattern-type prefixed")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	require.NoError(t, err)
	defer cl.Close()
	res, err := kadm.NewClient(cl).DescribeACLs(t.Context(), kadm.NewACLs().Allow("User:bridge").AllowHosts().
		Groups("amp-kafka-bridge.").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpRead))
	require.NoError(t, err)
	n := 0
	for _, r := range res {
		require.NoError(t, r.Err)
		n += len(r.Described)
	}
	assert.Equal(t, 1, n, "Read on the groups prefixed amp-kafka-bridge.")
}
