package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startEcho starts a TCP echo server for the test.
func startEcho(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads its echo within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return errors.New("echo differs: " + string(buf))
	}
	return nil
}

// readErr reads what comes within timeout and returns the error that ends
// it (a deadline error when nothing ends it).
func readErr(c net.Conn, timeout time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		return io.EOF
	}
	return err
}

func TestProxy(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, p *Proxy)
	}{
		{"forwards", func(t *testing.T, p *Proxy) {
			c := dialProxy(t, p)
			require.NoError(t, roundTrip(c, "ping", time.Second))
			assert.Equal(t, 1, p.Accepted())
		}},
		{"latency", func(t *testing.T, p *Proxy) {
			c := dialProxy(t, p)
			p.SetLatency(100 * time.Millisecond)
			t0 := time.Now()
			require.NoError(t, roundTrip(c, "slow", 2*time.Second))
			assert.GreaterOrEqual(t, time.Since(t0), 200*time.Millisecond, "100ms each way")
			p.SetLatency(0)
			t0 = time.Now()
			require.NoError(t, roundTrip(c, "fast", time.Second))
			assert.Less(t, time.Since(t0), 150*time.Millisecond)
		}},
		{"blackhole", func(t *testing.T, p *Proxy) {
			c := dialProxy(t, p)
			require.NoError(t, roundTrip(c, "before", time.Second))
			p.Blackhole(true)
			err := roundTrip(c, "lost", 300*time.Millisecond)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded, "silence, not a close")
			fresh := dialProxy(t, p)
			require.ErrorIs(t, roundTrip(fresh, "lost too", 300*time.Millisecond), os.ErrDeadlineExceeded)
			p.Blackhole(false)
			// Both lost bytes: they are reset.
			assert.ErrorIs(t, readErr(c, time.Second), syscall.ECONNRESET)
			assert.ErrorIs(t, readErr(fresh, time.Second), syscall.ECONNRESET)
			require.NoError(t, roundTrip(dialProxy(t, p), "after", time.Second))
		}},
		{"reset", func(t *testing.T, p *Proxy) {
			c := dialProxy(t, p)
			require.NoError(t, roundTrip(c, "before", time.Second))
			p.Reset()
			assert.ErrorIs(t, readErr(c, time.Second), syscall.ECONNRESET)
			require.NoError(t, roundTrip(dialProxy(t, p), "after", time.Second))
		}},
		{"partition-heals", func(t *testing.T, p *Proxy) {
			c := dialProxy(t, p)
			require.NoError(t, roundTrip(c, "before", time.Second))
			p.Partition()
			_, err := c.Write([]byte("held"))
			require.NoError(t, err)
			assert.ErrorIs(t, readErr(c, 300*time.Millisecond), os.ErrDeadlineExceeded)
			fresh := dialProxy(t, p)
			_, err = fresh.Write([]byte("held too"))
			require.NoError(t, err)
			p.Heal()
			// Nothing was lost on either connection.
			for conn, want := range map[net.Conn]string{c: "held", fresh: "held too"} {
				buf := make([]byte, len(want))
				_ = conn.SetReadDeadline(time.Now().Add(time.Second))
				_, err := io.ReadFull(conn, buf)
				require.NoError(t, err)
				assert.Equal(t, want, string(buf))
			}
		}},
		{"close-propagates", func(t *testing.T, p *Proxy) {
			c := dialProxy(t, p)
			require.NoError(t, roundTrip(c, "x", time.Second))
			require.NoError(t, c.Close())
			assert.Eventually(t, func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.conns) == 0
			}, 2*time.Second, 10*time.Millisecond, "the proxy drops a connection its client closed")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := StartProxy(t, startEcho(t))
			tc.run(t, p)
		})
	}
}

// TestProxyCloseWhilePartitioned checks that Close ends every goroutine
// even while connections are held.
func TestProxyCloseWhilePartitioned(t *testing.T) {
	p, err := NewProxy(startEcho(t))
	require.NoError(t, err)
	p.Partition()
	var d net.Dialer
	c, err := d.DialContext(context.Background(), "tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
}
