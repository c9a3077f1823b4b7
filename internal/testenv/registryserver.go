package testenv

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Environment variables of a private registry (written by deploy/local
// into .local/stack.env).
const (
	// EnvRegistryHome is the unpacked Apicurio Registry (quarkus-run.jar).
	EnvRegistryHome = "BRIDGE_TEST_REGISTRY_HOME"
	// EnvRegistryJava is a java binary of version 21 or newer.
	EnvRegistryJava = "BRIDGE_TEST_REGISTRY_JAVA"
	// EnvStunnel is the stunnel4 binary (Debian's stunnel4) that
	// WithRegistryMutualTLS puts in front of the registry.
	EnvStunnel = "BRIDGE_TEST_STUNNEL"
)

// RegistryServer is a private Apicurio Registry process for one test (in
// memory), serving the Confluent API at URL. With WithRegistrySecurity it
// serves only HTTPS, with a certificate of a throwaway CA, and requires
// either basic auth (User, Password) or a bearer token it verifies as a
// JWT signed by a key of its own (Token). It is stopped when the test ends.
type RegistryServer struct {
	// URL is the base URL of the Confluent API (…/apis/ccompat/v7).
	URL string
	// PKI holds the CA that signed the server's certificate (CAFile) and a
	// client certificate; nil without security.
	PKI *PKI
	// User and Password are the basic-auth credentials it accepts.
	User, Password string

	t      testing.TB
	jwtKey *rsa.PrivateKey
	p      *Process
	log    string
	mtls   bool
}

// RegistryOption configures a server of StartRegistryServer.
type RegistryOption func(*registryOptions)

type registryOptions struct {
	secure, mtls bool
}

// WithRegistrySecurity serves HTTPS only and requires authentication:
// basic auth or a bearer token (see RegistryServer).
func WithRegistrySecurity() RegistryOption {
	return func(o *registryOptions) { o.secure = true }
}

// WithRegistryMutualTLS serves HTTPS only through stunnel (BRIDGE_TEST_STUNNEL,
// Debian's stunnel4, which deploy/local installs), which requires a client
// certificate signed by the server's CA (PKI.ClientCertFile) and passes the
// connection on to the registry on a private plaintext port: Apicurio's build
// fixes its own client authentication to none, and a TLS-terminating proxy
// in front of the registry is how such a deployment requires client
// certificates. No password or token is needed.
func WithRegistryMutualTLS() RegistryOption {
	return func(o *registryOptions) { o.mtls = true }
}

// StartRegistryServer starts a private Apicurio Registry on free ports of
// 127.0.0.1 from BRIDGE_TEST_REGISTRY_HOME with BRIDGE_TEST_REGISTRY_JAVA
// (deploy/local installs both), with global compatibility BACKWARD, and
// waits until it answers (its JVM takes 10–30 s on a busy machine). When
// they are unset, the test fails if BRIDGE_TEST_REQUIRE names registry, and
// is skipped otherwise.
func StartRegistryServer(t testing.TB, opts ...RegistryOption) *RegistryServer {
	t.Helper()
	home := RequireReal(t, ServiceRegistry, EnvRegistryHome)
	java := RequireReal(t, ServiceRegistry, EnvRegistryJava)
	var o registryOptions
	for _, opt := range opts {
		opt(&o)
	}
	stunnel := ""
	if o.mtls {
		stunnel = RequireReal(t, ServiceRegistry, EnvStunnel)
	}
	dir := t.TempDir()
	s := &RegistryServer{t: t, log: filepath.Join(dir, "registry.log"), mtls: o.mtls}
	// The client, management and (under mTLS) inner ports in one call, so
	// that no two are the same.
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	port, mport, inner := ports[0], ports[1], ports[2]
	props := []string{
		"quarkus.http.host=127.0.0.1",
		fmt.Sprintf("quarkus.management.host=127.0.0.1\nquarkus.management.port=%d", mport),
		"quarkus.http.access-log.enabled=false",
		"quarkus.log.level=WARN",
		`quarkus.log.category."io.quarkus.bootstrap".level=INFO`,
		"apicurio.rules.global.compatibility=BACKWARD",
	}
	scheme := "http"
	if o.secure {
		scheme = "https"
		tlsDir := filepath.Join(dir, "tls")
		if err := os.MkdirAll(tlsDir, 0o700); err != nil {
			t.Fatalf("starting the registry: %v", err)
		}
		p, err := newPKI(tlsDir)
		if err != nil {
			t.Fatalf("starting the registry: %v", err)
		}
		s.PKI = p
		s.User, s.Password = "bridge", "s3cr3t-apicurio-"+randomHex(t)
		s.jwtKey, err = rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatalf("starting the registry: %v", err)
		}
		pub, err := x509.MarshalPKIXPublicKey(&s.jwtKey.PublicKey)
		if err != nil {
			t.Fatalf("starting the registry: %v", err)
		}
		props = append(props,
			"quarkus.http.port=0",
			fmt.Sprintf("quarkus.http.ssl-port=%d", port),
			"quarkus.http.insecure-requests=disabled",
			"quarkus.tls.key-store.pem.0.cert="+p.ServerCertFile,
			"quarkus.tls.key-store.pem.0.key="+p.ServerKeyFile,
			// Basic auth against users of the configuration.
			"quarkus.http.auth.basic=true",
			"quarkus.security.users.embedded.enabled=true",
			"quarkus.security.users.embedded.plain-text=true",
			"quarkus.security.users.embedded.users."+s.User+"="+s.Password,
			// Bearer tokens: JWTs verified with this public key, no OIDC server.
			"quarkus.oidc.tenant-enabled=true",
			"quarkus.oidc.public-key="+base64.StdEncoding.EncodeToString(pub),
		)
	} else if o.mtls {
		scheme = "https"
		tlsDir := filepath.Join(dir, "tls")
		if err := os.MkdirAll(tlsDir, 0o700); err != nil {
			t.Fatalf("starting the registry: %v", err)
		}
		p, err := newPKI(tlsDir)
		if err != nil {
			t.Fatalf("starting the registry: %v", err)
		}
		s.PKI = p
		props = append(props, fmt.Sprintf("quarkus.http.port=%d", inner))
		startStunnel(t, stunnel, dir, p, port, inner)
	} else {
		props = append(props, fmt.Sprintf("quarkus.http.port=%d", port))
	}
	s.URL = fmt.Sprintf("%s://127.0.0.1:%d/apis/ccompat/v7", scheme, port)
	propsFile := filepath.Join(dir, "application.properties")
	if err := os.WriteFile(propsFile, []byte(strings.Join(props, "\n")+"\n"), 0o600); err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	cmd := exec.CommandContext(context.Background(), java, "-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-Djava.io.tmpdir="+dir, "-Dquarkus.config.locations="+propsFile, "-jar", filepath.Join(home, "quarkus-run.jar"))
	cmd.Dir = home
	s.p, err = StartProcess(cmd, s.log)
	if err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	t.Cleanup(func() { s.p.Term(10 * time.Second) })
	if err := s.wait(); err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	return s
}

// wait polls the API until it answers (401 counts, for a secured one).
func (s *RegistryServer) wait() error {
	cl := &http.Client{Timeout: 2 * time.Second}
	if s.PKI != nil {
		tc := &tls.Config{RootCAs: s.PKI.Pool, MinVersion: tls.VersionTLS12}
		if s.mtls {
			cert, err := tls.LoadX509KeyPair(s.PKI.ClientCertFile, s.PKI.ClientKeyFile)
			if err != nil {
				return err
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cl.Transport = &http.Transport{TLSClientConfig: tc}
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		if s.p.Exited() {
			return fmt.Errorf("%w: %w; log:\n%s", errExited, s.p.Err(), Tail(s.log, 30))
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL+"/subjects", nil)
		if err != nil {
			return err
		}
		if resp, err := cl.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("registry at %s did not answer in 120s; log:\n%s", s.URL, Tail(s.log, 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startStunnel runs stunnel in the foreground on 127.0.0.1:port with the
// server certificate of p, requiring and verifying a client certificate of
// p's CA, and forwarding to 127.0.0.1:inner; it is stopped when t ends.
func startStunnel(t testing.TB, bin, dir string, p *PKI, port, inner int) {
	t.Helper()
	conf := filepath.Join(dir, "stunnel.conf")
	text := strings.Join([]string{
		"foreground = yes",
		"pid =",
		"debug = notice",
		"[registry]",
		fmt.Sprintf("accept = 127.0.0.1:%d", port),
		fmt.Sprintf("connect = 127.0.0.1:%d", inner),
		"cert = " + p.ServerCertFile,
		"key = " + p.ServerKeyFile,
		"CAfile = " + p.CAFile,
		"requireCert = yes",
		"verifyChain = yes",
		"sslVersionMin = TLSv1.2",
	}, "\n") + "\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatalf("starting stunnel: %v", err)
	}
	logPath := filepath.Join(dir, "stunnel.log")
	sp, err := StartProcess(exec.CommandContext(context.Background(), bin, conf), logPath)
	if err != nil {
		t.Fatalf("starting stunnel: %v", err)
	}
	t.Cleanup(func() {
		sp.Term(5 * time.Second)
		if t.Failed() {
			t.Logf("stunnel log:\n%s", Tail(logPath, 20))
		}
	})
}

// Token returns a bearer token the server accepts: a JWT (RS256) for
// subject "bridge", valid for ttl (negative: already expired).
func (s *RegistryServer) Token(ttl time.Duration) string {
	s.t.Helper()
	if s.jwtKey == nil {
		s.t.Fatal("Token needs a registry started WithRegistrySecurity")
	}
	enc := base64.RawURLEncoding
	now := time.Now()
	claims, err := json.Marshal(map[string]any{"sub": "bridge", "iss": "testenv", "iat": now.Unix(), "exp": now.Add(ttl).Unix()})
	if err != nil {
		s.t.Fatal(err)
	}
	signed := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.jwtKey, crypto.SHA256, sum[:])
	if err != nil {
		s.t.Fatal(err)
	}
	return signed + "." + enc.EncodeToString(sig)
}

// randomHex returns 8 random hex digits.
func randomHex(t testing.TB) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("reading random bytes: %v", err)
	}
	return fmt.Sprintf("%x", b)
}
