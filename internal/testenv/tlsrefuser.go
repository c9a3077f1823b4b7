package testenv

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// RefusingTLSServer is a TLS server on 127.0.0.1 that requires a client
// certificate signed by its PKI's CA and refuses every other client the way
// a real server does in TLS 1.3: after the client's handshake has ended.
// Its first connections (StartRefusingTLSServer's resets) show the race
// such a refusal has with a client that writes at once: their handshake ends without the client's
// certificate being checked, and the server then resets the connection
// (SO_LINGER 0) without an alert, which is what the client meets when the
// reset of a server that closed with its request unread overtakes the
// alert. Every later connection gets the alert. A client it accepts is
// answered with nothing and closed when it closes. It stops when the test
// ends.
type RefusingTLSServer struct {
	// Addr is host:port.
	Addr string
	// PKI signed the server's certificate; its client certificate is
	// accepted.
	PKI *PKI

	conns atomic.Int64
}

// Conns returns the number of connections accepted so far.
func (s *RefusingTLSServer) Conns() int { return int(s.conns.Load()) }

// StartRefusingTLSServer starts a RefusingTLSServer whose first resets
// connections are reset after the handshake.
func StartRefusingTLSServer(t testing.TB, resets int) *RefusingTLSServer {
	t.Helper()
	p := NewPKI(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &RefusingTLSServer{Addr: ln.Addr().String(), PKI: p}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			n := int(s.conns.Add(1))
			wg.Go(func() { s.serve(ctx, c, n <= resets) })
		}
	})
	return s
}

func (s *RefusingTLSServer) serve(ctx context.Context, c net.Conn, reset bool) {
	defer func() { _ = c.Close() }()
	tc := s.PKI.ServerTLS()
	tc.MinVersion = tls.VersionTLS13
	tc.ClientCAs = s.PKI.Pool
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	if reset {
		tc.ClientAuth = tls.RequestClientCert
	}
	conn := tls.Server(c, tc)
	tcp, _ := c.(*net.TCPConn)
	if err := conn.HandshakeContext(ctx); err != nil {
		// Handshake sent the alert. Reading what the client wrote before
		// closing keeps the close from resetting the connection, so the
		// client reads the alert.
		if tcp != nil {
			_ = tcp.CloseWrite()
			_ = tcp.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.Copy(io.Discard, tcp)
		}
		return
	}
	if reset {
		if tcp != nil {
			_ = tcp.SetLinger(0)
		}
		return
	}
	_, _ = io.Copy(io.Discard, conn)
}
