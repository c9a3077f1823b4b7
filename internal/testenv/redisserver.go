package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
}

// StartRedisServer starts a private redis-server on a free port of 127.0.0.1
// and waits until it answers PING. The binary is BRIDGE_TEST_REDIS_SERVER_BIN
// or redis-server on PATH. When there is none, the test fails if
// BRIDGE_TEST_REQUIRE names redis, and is skipped otherwise.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	bin := os.Getenv(EnvRedisServerBin)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			bin = ""
		}
	}
	if bin == "" {
		msg := fmt.Sprintf("no redis-server binary: set %s or install it (apt-get install -y redis-server; `make services` does)", EnvRedisServerBin)
		if Required(ServiceRedis) {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	dir := t.TempDir()
	s := &RedisServer{t: t, bin: bin, dir: dir, port: port, log: filepath.Join(dir, "redis.log")}
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

func (s *RedisServer) start() error {
	cmd := exec.CommandContext(context.Background(), s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
		"--daemonize", "no",
		"--protected-mode", "no",
	)
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
		if err := redisPing(s.Addr()); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			p.Kill9()
			return fmt.Errorf("waiting for PONG on %s: %w; log:\n%s", s.Addr(), err, Tail(s.log, 20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redisPing sends a RESP PING and expects +PONG (a loading server answers
// -LOADING, which counts as not ready).
func redisPing(addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(context.Background(), "tcp", addr)
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
