package source

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// Defaults used by DefaultConfig.
const (
	// DefaultMaxRecvMsgSize is the gRPC receive limit: 64 MiB, twice the
	// official Rust client's 32 MiB decode limit. Amp targets ~2 MiB per
	// message but its split is approximate (amp-protocol.md §2.4), and
	// grpc-go's own default of 4 MiB is too small.
	DefaultMaxRecvMsgSize = 64 << 20
	// MinMaxRecvMsgSize is the smallest accepted MaxRecvMsgSize.
	MinMaxRecvMsgSize = 32 << 20
)

// Config configures a Client. Start from DefaultConfig and override fields;
// the zero value is not valid. bridge.yaml reaches every field under amp.
// (internal/config maps it), and the errors of Validate name those keys.
type Config struct {
	// Addr is the Flight server as host:port, e.g. "localhost:1602" (ampd's
	// default Flight port). Required.
	Addr string
	// TLS configures transport security. Disabled by default: ampd itself
	// serves plaintext gRPC (h2c); hosted gateways need TLS.
	TLS TLSConfig
	// Token, when not empty, is sent as "authorization: Bearer <Token>" on
	// both GetFlightInfo and DoGet (hosted gateways require it; ampd ignores
	// it). It is never logged. Default: empty.
	Token string
	// AllowPlaintextToken lets a Token be sent without TLS, where anyone on
	// the network path can read it; New then logs a warning. Validate
	// refuses a Token with TLS disabled unless it is set. Default false.
	AllowPlaintextToken bool
	// MaxRecvMsgSize is the largest gRPC message accepted, in bytes. Default
	// 64 MiB; at least 32 MiB.
	MaxRecvMsgSize int
	// RequestTimeout bounds each GetFlightInfo call (planning only). It does
	// not bound DoGet: a streaming query may be silent for a long time and
	// the client has no idle watchdog. Default 30s.
	RequestTimeout time.Duration
	// ReadAhead is how many envelopes the reader may decode ahead of the
	// consumer. Default 4; at least 1.
	ReadAhead int
	// ReadAheadBytes is the Client's read budget: it bounds the memory
	// that Amp's messages take in all the Client's streams and queries
	// together (each message's buffer), from before a message is received
	// until the consumer releases the envelope made of it (see the
	// package doc, Backpressure); 0 means only ReadAhead bounds each stream. A single
	// message larger than the budget is still received, alone. Default
	// 32 MiB.
	ReadAheadBytes int64
	// ReceiveWindow is the HTTP/2 flow-control window of each DoGet stream
	// and the connection's window over ReceiveWindowStreams of them: what
	// Amp may send a stream before its reader reads it, held in gRPC's
	// buffers while it waits. 0 (the default) leaves gRPC's own window,
	// grown to the bandwidth-delay product it measures (up to 16 MiB per
	// stream); a value of at least 64 KiB fixes it (one stream's
	// throughput is then at most the window per round trip).
	ReceiveWindow int32
	// ReceiveWindowStreams is how many streams ReceiveWindow is sized for:
	// the connection's window is ReceiveWindow times it. Default 1.
	ReceiveWindowStreams int
	// Backoff controls reconnecting after a transient failure.
	Backoff BackoffConfig
	// KeepaliveTime, when positive, makes gRPC ping the server after this
	// much transport inactivity, to detect a dead TCP connection during a
	// long silence. Default 0 (off): grpc-go servers reject pings more often
	// than every 5 minutes by default. This is not an application watchdog;
	// a silent but healthy connection stays open.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long to wait for a ping ack before closing the
	// connection (then the stream reconnects). Default 20s.
	KeepaliveTimeout time.Duration
}

// TLSConfig configures TLS to the Flight server: the bridge's one TLS
// setting, loaded by tlsconfig.Load. Disabled by default (plaintext).
type TLSConfig = tlsconfig.Config

// BackoffConfig is a capped exponential backoff with jitter: the n-th
// consecutive retry waits min(Max, Initial·Multiplier^(n-1)) reduced by a
// random fraction of up to Jitter.
type BackoffConfig struct {
	// Initial is the first delay. Default 250ms.
	Initial time.Duration
	// Max caps the delay. Default 30s.
	Max time.Duration
	// Multiplier grows the delay after each failed attempt. Default 2; at
	// least 1.
	Multiplier float64
	// Jitter is the largest fraction taken off a delay at random, in [0,1].
	// Default 0.2.
	Jitter float64
	// MaxAttempts is how many consecutive failed attempts end the stream
	// with ErrRetriesExhausted; 0 retries forever. An attempt that delivered
	// a block range resets the count. Default 0.
	MaxAttempts int
}

// MinReceiveWindow is the least fixed ReceiveWindow: HTTP/2's initial
// window, 64 KiB.
const MinReceiveWindow = 64 << 10

// DefaultConfig returns the documented defaults; Addr must still be set.
func DefaultConfig() Config {
	return Config{
		MaxRecvMsgSize:       DefaultMaxRecvMsgSize,
		RequestTimeout:       30 * time.Second,
		ReadAhead:            4,
		ReadAheadBytes:       32 << 20,
		ReceiveWindowStreams: 1,
		Backoff: BackoffConfig{
			Initial:    250 * time.Millisecond,
			Max:        30 * time.Second,
			Multiplier: 2,
			Jitter:     0.2,
		},
		KeepaliveTimeout: 20 * time.Second,
	}
}

// Validate checks every field and returns all problems at once, each naming
// the YAML field and how to fix it. It does not read files or connect.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Addr == "" {
		add("amp.addr is empty; set it to the Flight server's host:port, e.g. localhost:1602")
	} else if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" || strings.Contains(c.Addr, "/") {
		add("amp.addr %q is not host:port (no scheme); e.g. localhost:1602", c.Addr)
	}
	if err := c.TLS.Validate("amp.tls"); err != nil {
		errs = append(errs, err)
	}
	for i := 0; i < len(c.Token); i++ {
		if b := c.Token[i]; b < 0x21 || b > 0x7e {
			add("the Amp token (BRIDGE_AMP_TOKEN or amp.token_file) contains a space, control or non-ASCII character at byte %d (a trailing newline from a token file?); remove it", i)
			break
		}
	}
	if c.Token != "" && !c.TLS.Enabled && !c.AllowPlaintextToken {
		add("an Amp token is set (BRIDGE_AMP_TOKEN or amp.token_file) but amp.tls.enabled is false: the token would be sent in plaintext; " +
			"set amp.tls.enabled: true, or amp.allow_plaintext_token: true to send it unencrypted on purpose (a trusted local network only)")
	}
	if c.MaxRecvMsgSize < MinMaxRecvMsgSize {
		add("amp.max_recv_bytes %d is below %d (32 MiB), Amp's message limit; raise it", c.MaxRecvMsgSize, MinMaxRecvMsgSize)
	}
	if c.RequestTimeout <= 0 {
		add("amp.request_timeout must be positive (default 30s)")
	}
	if c.ReadAhead < 1 {
		add("amp.read_ahead must be at least 1 (default 4)")
	}
	if c.ReadAheadBytes < 0 {
		add("amp.read_ahead_bytes must not be negative (0 = no byte bound; default 32 MiB)")
	}
	if c.ReceiveWindow != 0 && c.ReceiveWindow < MinReceiveWindow {
		add("amp.receive_window_bytes gives each stream %d bytes, below HTTP/2's 64 KiB; raise it or set 0 for gRPC's own window", c.ReceiveWindow)
	}
	b := c.Backoff
	if b.Initial <= 0 {
		add("amp.reconnect_min must be positive (default 250ms)")
	}
	if b.Max < b.Initial {
		add("amp.reconnect_max %v is below amp.reconnect_min %v; raise max or lower initial", b.Max, b.Initial)
	}
	if b.Multiplier < 1 || math.IsInf(b.Multiplier, 0) || math.IsNaN(b.Multiplier) {
		add("amp.reconnect_multiplier %v must be a finite number >= 1 (default 2)", b.Multiplier)
	}
	if !(b.Jitter >= 0 && b.Jitter <= 1) {
		add("amp.reconnect_jitter %v must be within [0, 1] (default 0.2)", b.Jitter)
	}
	if b.MaxAttempts < 0 {
		add("amp.reconnect_max_attempts must not be negative (0 = retry forever)")
	}
	if c.KeepaliveTime < 0 {
		add("amp.keepalive_time must not be negative (0 = off)")
	}
	if c.KeepaliveTime > 0 && c.KeepaliveTimeout <= 0 {
		add("amp.keepalive_timeout must be positive when amp.keepalive_time is set (default 20s)")
	}
	return errors.Join(errs...)
}

// LogValue implements slog.LogValuer without the token.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.Bool("tls", c.TLS.Enabled),
		slog.Bool("token_set", c.Token != ""),
		slog.Bool("allow_plaintext_token", c.AllowPlaintextToken),
		slog.Int("max_recv_msg_size", c.MaxRecvMsgSize),
		slog.Int("read_ahead", c.ReadAhead),
		slog.Int64("read_ahead_bytes", c.ReadAheadBytes),
		slog.Int("receive_window", int(c.ReceiveWindow)),
	)
}

// String returns the configuration without the token, so that printing a
// Config with %v or %+v cannot leak it.
func (c Config) String() string {
	return fmt.Sprintf("source.Config{addr=%s tls=%t token_set=%t max_recv_msg_size=%d request_timeout=%s read_ahead=%d read_ahead_bytes=%d}",
		c.Addr, c.TLS.Enabled, c.Token != "", c.MaxRecvMsgSize, c.RequestTimeout, c.ReadAhead, c.ReadAheadBytes)
}
