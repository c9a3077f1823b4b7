package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a private redis-server process for one test, with an
// append-only file fsynced on every write (appendfsync always) in a
// directory of the test's own. It is stopped when the test ends.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	log  string
	p    *Process
	opts redisOptions
	tls  *RedisTLSFiles
}

// RedisOption configures a server of StartRedisServer.
type RedisOption func(*redisOptions)

type redisOptions struct {
	tls         bool
	authClients bool
	users       []string
}

// WithRedisTLS serves TLS only (the plain port is off) with a server
// certificate for 127.0.0.1 and localhost signed by a throwaway CA (see
// RedisServer.TLS). With authClients the server requires a client
// certificate signed by that CA (mutual TLS, tls-auth-clients yes);
// without, it asks for none (tls-auth-clients no).
func WithRedisTLS(authClients bool) RedisOption {
	return func(o *redisOptions) { o.tls, o.authClients = true, authClients }
}

// WithRedisUser adds an ACL user, as a redis.conf user line without the
// leading "user": name followed by its rules, e.g.
// "bridge on >s3cret ~ampbridge:* +ping +hmget". The default user stays
// enabled without a password, so the test itself can administer the server.
func WithRedisUser(rules string) RedisOption {
	return func(o *redisOptions) { o.users = append(o.users, rules) }
}

// RedisServerBin returns the redis-server binary StartRedisServer runs:
// BRIDGE_TEST_REDIS_SERVER_BIN, or redis-server on PATH. The error says how
// to get one.
func RedisServerBin() (string, error) {
	if bin := os.Getenv(EnvRedisServerBin); bin != "" {
		return bin, nil
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return bin, nil
	}
	return "", fmt.Errorf("no redis-server binary: set %s or install it (apt-get install -y redis-server; `make services` does)", EnvRedisServerBin)
}

// StartRedisServer starts a private redis-server on a free port of 127.0.0.1
// and waits until it answers PING. The binary is BRIDGE_TEST_REDIS_SERVER_BIN
// or redis-server on PATH. When there is none, the test fails if
// BRIDGE_TEST_REQUIRE names redis, and is skipped otherwise. The options
// add TLS (WithRedisTLS) and ACL users (WithRedisUser).
func StartRedisServer(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	bin, err := RedisServerBin()
	if err != nil {
		if Required(ServiceRedis) {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	dir := t.TempDir()
	s := &RedisServer{t: t, bin: bin, dir: dir, port: port, log: filepath.Join(dir, "redis.log")}
	for _, o := range opts {
		o(&s.opts)
	}
	if s.opts.tls {
		files, err := WriteTestPKI(filepath.Join(dir, "tls"))
		if err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		s.tls = &files
	}
	if err := s.start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	t.Cleanup(func() {
		if s.p != nil {
			s.p.Term(5 * time.Second)
		}
	})
	return s
}

// Addr returns the server's host:port; it stays the same across Restart.
func (s *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir returns the server's data directory (the AOF is in appendonlydir/).
func (s *RedisServer) Dir() string { return s.dir }

// Kill9 kills the server with SIGKILL and waits for it to exit. Writes that
// were acknowledged are in the append-only file.
func (s *RedisServer) Kill9() {
	s.t.Helper()
	if s.p != nil {
		s.p.Kill9()
	}
}

// Pause stops the server with SIGSTOP until the returned resume is called
// (or the test ends): its connections stay open and commands get no answer,
// as from a server stalled on a slow disk.
func (s *RedisServer) Pause() (resume func()) {
	s.t.Helper()
	if s.p == nil {
		s.t.Fatal("pausing redis-server: it is not running")
	}
	pid := s.p.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pausing redis-server: %v", err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	s.t.Cleanup(resume)
	return resume
}

// Restart starts the server again on the same port and data directory (after
// Kill9, or killing a running one first) and waits until it has loaded its
// data and answers PING.
func (s *RedisServer) Restart() {
	s.t.Helper()
	if s.p != nil {
		s.p.Kill9()
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server: %v", err)
	}
}

// TLS returns the certificate files of a server started WithRedisTLS, nil
// otherwise.
func (s *RedisServer) TLS() *RedisTLSFiles { return s.tls }

// ClientTLS returns a client tls.Config trusting the server's CA and
// presenting the client certificate (for administering the server), nil
// without TLS.
func (s *RedisServer) ClientTLS() *tls.Config {
	if s.tls == nil {
		return nil
	}
	tc, err := s.tls.clientConfig()
	if err != nil {
		s.t.Fatalf("redis-server client TLS: %v", err)
	}
	return tc
}

func (s *RedisServer) args() []string {
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
		"--daemonize", "no",
		"--protected-mode", "no",
	}
	if s.tls == nil {
		args = append(args, "--port", strconv.Itoa(s.port))
	} else {
		auth := "no"
		if s.opts.authClients {
			auth = "yes"
		}
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.tls.ServerCertFile, "--tls-key-file", s.tls.ServerKeyFile,
			"--tls-ca-cert-file", s.tls.CAFile, "--tls-auth-clients", auth)
	}
	for _, u := range s.opts.users {
		// redis-server joins the words after --user into one config line.
		args = append(args, "--user")
		args = append(args, strings.Fields(u)...)
	}
	return args
}

func (s *RedisServer) start() error {
	cmd := exec.CommandContext(context.Background(), s.bin, s.args()...)
	p, err := StartProcess(cmd, s.log)
	if err != nil {
		return err
	}
	s.p = p
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p.Exited() {
			return fmt.Errorf("%w: %w; log:\n%s", errExited, p.Err(), Tail(s.log, 20))
		}
		if err := s.ping(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			p.Kill9()
			return fmt.Errorf("waiting for PONG on %s: %w; log:\n%s", s.Addr(), err, Tail(s.log, 20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *RedisServer) ping() error {
	var tc *tls.Config
	if s.tls != nil {
		var err error
		if tc, err = s.tls.clientConfig(); err != nil {
			return err
		}
	}
	return redisPing(s.Addr(), tc)
}

// redisPing sends a RESP PING, over TLS when tc is set, and expects +PONG
// (a loading server answers -LOADING, which counts as not ready).
func redisPing(addr string, tc *tls.Config) error {
	d := net.Dialer{Timeout: time.Second}
	var c net.Conn
	var err error
	if tc != nil {
		c, err = (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(context.Background(), "tcp", addr)
	} else {
		c, err = d.DialContext(context.Background(), "tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("dialing: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return fmt.Errorf("writing PING: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading reply: %w", err)
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}
