package tlsconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// refusalWait bounds how long Refusal waits for the server's alert after
// the handshake when the context has no earlier deadline.
const refusalWait = time.Second

// Refusal finds out whether the TLS server at addr refuses the client of
// tc, the way a connection that failed right after its handshake cannot
// tell. In TLS 1.3 the client's handshake ends before the server has
// checked the client's certificate; a server that refuses it sends an alert
// and closes, and a client that wrote its first request meanwhile may meet
// the reset of the closed connection instead of the alert (OpenSSL, Java
// and others close with the client's bytes unread, which resets the
// connection). Refusal dials a connection of its own, completes the
// handshake and reads without writing, for up to 1 s or until ctx's
// deadline. It returns the server's alert (a *net.OpError whose Op is
// "remote error", as a failed handshake returns it) and nil when the server
// sends none: it accepted the client, or the cause is elsewhere.
func Refusal(ctx context.Context, addr string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, refusalWait)
	defer cancel()
	d := tls.Dialer{Config: tc}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return remoteAlert(err)
	}
	defer func() { _ = conn.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	// A server that accepts the client sends nothing more (or session
	// tickets, which Read consumes), so Read waits until the deadline.
	_, err = conn.Read(make([]byte, 1))
	return remoteAlert(err)
}

// remoteAlert returns err when it is a TLS alert from the server and nil
// otherwise.
func remoteAlert(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return err
	}
	return nil
}

// ExplainDropped asks the server at addr (Refusal, with tc) about err when
// err is a connection that ended without a word (Dropped). It returns the
// server's alert and err with the alert joined ("…; a second connection
// that waited for the server's answer got remote error: tls: …"), or nil
// and err itself when err is not dropped or the server sends no alert.
func ExplainDropped(ctx context.Context, addr string, tc *tls.Config, err error) (alert, joined error) {
	if !Dropped(err) {
		return nil, err
	}
	if alert = Refusal(ctx, addr, tc); alert == nil {
		return nil, err
	}
	return alert, fmt.Errorf("%w; a second connection that waited for the server's answer got %w", err, alert)
}

// Dropped reports whether err is a connection that the server ended without
// a word (a reset, a broken pipe, an end of stream): right after a TLS
// handshake, that is how a refused client certificate can look, and
// Refusal tells.
func Dropped(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
