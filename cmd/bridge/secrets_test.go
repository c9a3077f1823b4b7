package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// The secrets of TestSecretsNeverShown: distinctive, so that a match is
// never a coincidence.
const (
	secretAmpToken      = "s3cr3t-amp-token-XYZ"
	secretKafkaPassword = "s3cr3t-sasl-password-XYZ"
	secretRedisPassword = "s3cr3t-redis-password-XYZ"
	secretRegistryPass  = "s3cr3t-registry-password-XYZ"
	secretRegistryToken = "s3cr3t-registry-token-XYZ"
	// The wrong ones of the failing runs are secrets too.
	wrongAmpToken     = "wr0ng-amp-token-XYZ"
	wrongRegistryPass = "wr0ng-registry-password-XYZ"
	wrongRegistryTok  = "wr0ng-registry-token-XYZ"
	wrongRedisPass    = "wr0ng-redis-password-XYZ"
	wrongKafkaPass    = "wr0ng-sasl-password-XYZ"
)

// freeAddr returns a 127.0.0.1 address nothing listens on (for http.addr,
// which `bridge run` and `bridge status` must agree on).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestSecretsNeverShown runs the bridge command line at debug level with
// every secret set and really used (the Amp token on a TLS simulator that
// requires it, the SASL/SCRAM password and a client key file on a kfake
// cluster that requires both, the Redis password on a miniredis that
// requires it, the registry password and then its bearer token, with a client
// certificate, on an srfake behind mutual TLS that requires them), then
// `bridge status`, then failing runs (a refused Amp token, a wrong
// registry, Redis or SASL password), and checks that none of its
// output (logs, errors, /metrics, /readyz, /livez, status) holds a secret
// or the client key's PEM.
func TestSecretsNeverShown(t *testing.T) {
	pki := testenv.NewPKI(t)
	dir := t.TempDir()

	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 5, TxPerBlock: 3, LogsPerTx: -1},
		TLSCertFile: pki.ServerCertFile, TLSKeyFile: pki.ServerKeyFile, Token: secretAmpToken})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })

	ktls := pki.ServerTLS()
	ktls.ClientAuth, ktls.ClientCAs = tls.RequireAndVerifyClientCert, pki.Pool
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.TLS(ktls),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "bridge", secretKafkaPassword))
	require.NoError(t, err)
	t.Cleanup(kc.Close)

	mr := miniredis.RunT(t)
	mr.RequireAuth(secretRedisPassword)

	// The registry: srfake behind mutual TLS, taking the basic-auth password
	// or the bearer token.
	reg := srfake.NewRegistry()
	basic, bearer := "Basic "+base64.StdEncoding.EncodeToString([]byte("registry-user:"+secretRegistryPass)), "Bearer "+secretRegistryToken
	regSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != basic && a != bearer {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error_code":401,"message":"Unauthorized"}`)
			return
		}
		reg.Handler().ServeHTTP(w, r)
	}))
	rtls := pki.ServerTLS()
	rtls.ClientAuth, rtls.ClientCAs = tls.RequireAndVerifyClientCert, pki.Pool
	regSrv.TLS = rtls
	regSrv.StartTLS()
	t.Cleanup(regSrv.Close)

	tokenFile := filepath.Join(dir, "amp-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(secretAmpToken+"\n"), 0o600))
	httpAddr := freeAddr(t)
	path := filepath.Join(dir, "bridge.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, `
amp:
  addr: %s
  tls: {enabled: true, ca_file: %s}
  token_file: %s
  reconnect_min: 20ms
  reconnect_max: 200ms
kafka:
  brokers: [%s]
  replication_factor: 1
  control_topic: secrets.control
  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}
  sasl: {mechanism: SCRAM-SHA-512, username: bridge}
registry:
  url: %s
  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}
  username: registry-user
checkpoint:
  redis: {addr: %s, key_prefix: secrets}
http:
  addr: %s
  probe_interval: 50ms
log: {level: debug, format: json}
startup_timeout: 1s
streams:
  - id: secrets
    sql: SELECT * FROM eth_rpc.transactions SETTINGS stream = true
    topic: secrets.txs
    head_poll_interval: 50ms
    transaction: {max_age: 20ms}
`, sim.Addr(), pki.CAFile, tokenFile, strings.Join(kc.ListenAddrs(), ", "), pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile,
		regSrv.URL, pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile, mr.Addr(), httpAddr), 0o600))
	t.Setenv("BRIDGE_KAFKA_SASL_PASSWORD", secretKafkaPassword)
	t.Setenv("BRIDGE_REGISTRY_PASSWORD", secretRegistryPass)
	t.Setenv("BRIDGE_CHECKPOINT_REDIS_PASSWORD", secretRedisPassword)

	var shown []string // every text the bridge showed, with what it was
	show := func(what, text string) { shown = append(shown, "--- "+what+"\n"+text) }
	// tryGet is httpGet that tolerates a server not yet listening.
	tryGet := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+httpAddr+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	get := func(path string) string {
		code, body := tryGet(path)
		return fmt.Sprintf("%s: %d\n%s", path, code, body)
	}
	endpoints := func(what string) {
		for _, p := range []string{"/metrics", "/readyz", "/livez"} {
			show(what+" "+p, get(p))
		}
	}

	// A run that publishes the chain.
	runCLI := func(ctx context.Context, args ...string) (int, *logBuffer, *logBuffer) {
		stdout, stderr := &logBuffer{}, &logBuffer{}
		return run(ctx, args, stdout, stderr), stdout, stderr
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	runOut := &logBuffer{}
	go func() { done <- run(ctx, []string{"run", "-c", path}, runOut, runOut) }()
	head, _ := sim.Head()
	want := fmt.Sprintf(`amp_bridge_committed_block{network="mainnet",stream="secrets"} %d`, head)
	if !assert.Eventually(t, func() bool {
		code, body := tryGet("/metrics")
		return code == http.StatusOK && strings.Contains(body, want)
	}, 60*time.Second, 20*time.Millisecond, "the bridge did not publish the chain") {
		t.Fatalf("%s", runOut)
	}
	require.Eventually(t, func() bool {
		code, _ := tryGet("/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	endpoints("run")

	// bridge status, beside the running bridge (it reads its /readyz).
	code, stdout, stderr := runCLI(t.Context(), "status", "-c", path)
	require.Equal(t, 0, code, "status: %s%s", stdout, stderr)
	assert.Contains(t, stdout.String(), "head lag mainnet: 0 block(s)")
	show("status stdout", stdout.String())
	show("status stderr", stderr.String())

	cancel()
	require.Equal(t, 0, <-done, runOut.String())
	logs := runOut.String()
	show("run output", logs)
	assert.Contains(t, logs, `"level":"DEBUG"`, "the run logged at debug level")
	assert.Contains(t, logs, `"component":"grpc"`, "the library adapters' lines are in the output")

	// A refused Amp token: the one stream stops on a permanent error, and
	// with it the run; status reports the refusal too.
	require.NoError(t, os.WriteFile(tokenFile, []byte(wrongAmpToken+"\n"), 0o600))
	code, stdout, stderr = runCLI(t.Context(), "run", "-c", path)
	assert.Equal(t, 1, code, stderr.String())
	assert.Contains(t, stderr.String(), "bridge: planning the stream's SQL at Amp: source: GetFlightInfo: Unauthenticated")
	assert.Contains(t, stderr.String(), "the token was refused")
	show("refused token run", stdout.String()+stderr.String())
	code, stdout, stderr = runCLI(t.Context(), "status", "-c", path)
	assert.Contains(t, stdout.String()+stderr.String(), "the token was refused")
	show("refused token status", fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr))
	require.NoError(t, os.WriteFile(tokenFile, []byte(secretAmpToken+"\n"), 0o600))

	// The registry's bearer token instead of basic auth: bridge verify
	// reads the schemas with it; a wrong one stops the start.
	yml, err := os.ReadFile(path)
	require.NoError(t, err)
	regTokenFile := filepath.Join(dir, "registry-token")
	require.NoError(t, os.WriteFile(regTokenFile, []byte(secretRegistryToken+"\n"), 0o600))
	tokenPath := filepath.Join(dir, "bridge-token.yaml")
	require.NoError(t, os.WriteFile(tokenPath, []byte(strings.Replace(string(yml), "username: registry-user", "token_file: "+regTokenFile, 1)), 0o600))
	t.Setenv("BRIDGE_REGISTRY_PASSWORD", "") // a password without registry.username is refused
	code, stdout, stderr = runCLI(t.Context(), "verify", "-c", tokenPath)
	assert.Equal(t, 0, code, "verify with the registry token: %s%s", stdout, stderr)
	show("verify with the registry token", stdout.String()+stderr.String())
	require.NoError(t, os.WriteFile(regTokenFile, []byte(wrongRegistryTok+"\n"), 0o600))
	code, stdout, stderr = runCLI(t.Context(), "run", "-c", tokenPath)
	assert.Equal(t, 1, code, stderr.String())
	assert.Contains(t, stderr.String(), "the token was refused", "a refused registry token is named")
	show("refused registry token run", stdout.String()+stderr.String())
	t.Setenv("BRIDGE_REGISTRY_PASSWORD", secretRegistryPass)

	// The start fails on a wrong registry password and on a wrong Redis
	// password (startup_timeout ends the wait); the error is printed.
	for _, tc := range []struct{ name, env, value, wantErr string }{
		{"wrong registry password", "BRIDGE_REGISTRY_PASSWORD", wrongRegistryPass, "registry"},
		{"wrong redis password", "BRIDGE_CHECKPOINT_REDIS_PASSWORD", wrongRedisPass, "redis"},
		{"wrong sasl password", "BRIDGE_KAFKA_SASL_PASSWORD", wrongKafkaPass, "kafka"},
	} {
		good := os.Getenv(tc.env)
		t.Setenv(tc.env, tc.value)
		code, stdout, stderr := runCLI(t.Context(), "run", "-c", path)
		assert.Equal(t, 1, code, "%s: %s", tc.name, stderr)
		assert.Contains(t, stderr.String(), "bridge: ", tc.name)
		assert.Contains(t, strings.ToLower(stderr.String()), tc.wantErr, tc.name)
		show(tc.name, stdout.String()+stderr.String())
		code, stdout, stderr = runCLI(t.Context(), "status", "-c", path)
		show(tc.name+" status", fmt.Sprintf("exit %d\n%s%s", code, stdout, stderr))
		t.Setenv(tc.env, good)
	}

	// No secret anywhere, nor any line of the client key's PEM body.
	secrets := []string{secretAmpToken, secretKafkaPassword, secretRedisPassword, secretRegistryPass, secretRegistryToken,
		wrongAmpToken, wrongRegistryPass, wrongRegistryTok, wrongRedisPass, wrongKafkaPass}
	blk, _ := pem.Decode(pki.ClientKeyPEM)
	require.NotNil(t, blk)
	body := base64.StdEncoding.EncodeToString(blk.Bytes)
	secrets = append(secrets, body)
	for line := range strings.Lines(string(pki.ClientKeyPEM)) {
		if line = strings.TrimSpace(line); !strings.HasPrefix(line, "-----") {
			secrets = append(secrets, line)
		}
	}
	for _, text := range shown {
		what, _, _ := strings.Cut(text, "\n")
		for _, s := range secrets {
			if !assert.NotContains(t, text, s, "%s shows a secret", what) {
				t.Logf("%s", text)
			}
		}
	}
	if os.Getenv("SECRETS_DUMP") != "" {
		for _, text := range shown {
			t.Log(text)
		}
	}
	t.Logf("checked %d texts (%d bytes) for %d secrets", len(shown), len(strings.Join(shown, "")), len(secrets))
}

// String returns everything written so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
