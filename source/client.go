package source

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	flightpb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Request header names (amp-protocol.md §1.2, §9.1).
const (
	headerStream = "amp-stream"
	headerResume = "amp-resume"
	headerAuth   = "authorization"
)

// readBufferSize is how much of the socket the connection reads at a time.
// gRPC's 32 KiB meant a read syscall and a poller wake-up for every two
// 16 KiB frames of a 2 MiB message; with 256 KiB, BenchmarkDecodeStream/star
// on one core took 17 ms per query instead of 21 (server and client). It
// is one buffer per connection.
const readBufferSize = 256 << 10

// Deps are the injected collaborators of a Client. Every field is optional.
type Deps struct {
	// Logger receives the reconnect warnings of streams opened without
	// WithLogger; nil discards logs.
	Logger *slog.Logger
	// Allocator is used by the IPC reader (dictionaries, alignment fixes);
	// record bodies themselves are not copied. nil means
	// memory.DefaultAllocator.
	Allocator memory.Allocator
	// Clock times the reconnect backoff; nil means the real clock.
	Clock Clock
	// Rand returns numbers in [0,1) for the backoff jitter; nil means
	// math/rand/v2.Float64.
	Rand func() float64
	// DialOptions are appended to the client's gRPC dial options (test
	// seam, e.g. a bufconn dialer).
	DialOptions []grpc.DialOption
}

// Client is an Amp Arrow Flight client. It holds one gRPC connection that
// every Stream and Query of the client shares and reuses across reconnects.
// It is safe for concurrent use.
type Client struct {
	cfg    Config
	conn   *grpc.ClientConn
	svc    flightpb.FlightServiceClient
	verify *verifyWatch // nil without TLS
	budget *readBudget  // nil when ReadAheadBytes is 0
	sizes  *sizeWatch   // the sizes of DoGet messages before they are received
	bodies *framePool   // the buffers of received messages (flightDataCodec)
	log    *slog.Logger
	mem    memory.Allocator
	clock  Clock
	rand   func() float64
}

// New validates cfg, loads the TLS files and creates the gRPC client. It
// does not connect: gRPC connects lazily, so an unreachable server shows up
// as a retried UNAVAILABLE on the first stream.
func New(cfg Config, deps Deps) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating source config: %w", err)
	}
	creds := insecure.NewCredentials()
	var watch *verifyWatch
	if cfg.TLS.Enabled {
		tc, err := tlsconfig.Load("amp.tls", cfg.TLS)
		if err != nil {
			return nil, err
		}
		watch = &verifyWatch{TransportCredentials: credentials.NewTLS(tc), last: new(atomic.Pointer[tls.CertificateVerificationError])}
		creds = watch
	}
	sizes := newSizeWatch()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(&sizedCreds{TransportCredentials: creds, w: sizes}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxRecvMsgSize)),
	}
	if w := cfg.ReceiveWindow; w > 0 {
		// Fixed windows: gRPC then stops growing them (BDP estimation).
		// The connection's is the streams' together, so that it does not
		// hold any of them back.
		conn := int64(w) * int64(max(cfg.ReceiveWindowStreams, 1))
		opts = append(opts, grpc.WithInitialWindowSize(w), grpc.WithInitialConnWindowSize(int32(min(conn, math.MaxInt32))))
	}
	if cfg.KeepaliveTime > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout,
		}))
	}
	// The received frames are kept for reuse up to a bound (framePool),
	// not by gRPC's default pool. The connection reads the socket in
	// readBufferSize chunks, not gRPC's 32 KiB.
	opts = append(opts, experimental.WithBufferPool(newFramePool(maxIdleFrames)), grpc.WithReadBufferSize(readBufferSize))
	opts = append(opts, deps.DialOptions...)
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client for %s: %w", cfg.Addr, err)
	}
	c := &Client{
		cfg: cfg, conn: conn, svc: flightpb.NewFlightServiceClient(conn), verify: watch,
		budget: newReadBudget(cfg.ReadAheadBytes), sizes: sizes, bodies: newFramePool(maxIdleMessages), log: deps.Logger, mem: deps.Allocator, clock: deps.Clock, rand: deps.Rand,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Token != "" && !cfg.TLS.Enabled {
		c.log.LogAttrs(context.Background(), slog.LevelWarn,
			"the Amp bearer token is sent in plaintext (amp.allow_plaintext_token: true, amp.tls.enabled: false): "+
				"anyone who can see the traffic to the Amp server can read and reuse the token; enable amp.tls",
			slog.String("addr", cfg.Addr))
	}
	if c.mem == nil {
		c.mem = memory.DefaultAllocator
	}
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.rand == nil {
		c.rand = rand.Float64
	}
	return c, nil
}

// ReadBudgetStats is what a Client's read budget counts
// (Client.ReadBudgetStats).
type ReadBudgetStats struct {
	// Held is the bytes of Amp's messages that the Client's streams hold
	// now, and Limit the budget that bounds them (Config.ReadAheadBytes;
	// 0: no bound, and nothing is counted).
	Held, Limit int64
	// Unsized is the bytes of messages counted only once they were in,
	// since the Client was made, because their length was not known
	// before: the stream had ended (a message that arrived before its
	// connection failed), or the Client could not follow the HTTP/2
	// frames of its connection. Held exceeds Limit by such bytes, and by
	// a message larger than the whole budget.
	Unsized int64
}

// ReadBudgetStats returns what the Client's read budget counts now.
func (c *Client) ReadBudgetStats() ReadBudgetStats {
	b := c.budget
	if b == nil {
		return ReadBudgetStats{}
	}
	return ReadBudgetStats{
		Held: b.Held(), Limit: b.total,
		Unsized: b.unsized.Load(),
	}
}

// Addr returns the Amp server's address (Config.Addr), for messages.
func (c *Client) Addr() string { return c.cfg.Addr }

// Close closes the gRPC connection. Close the client's streams first; a
// stream still open fails with a transport error.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("closing gRPC connection: %w", err)
	}
	return nil
}

// Schema plans sql with GetFlightInfo (which does not execute it) and
// returns its output schema.
func (c *Client) Schema(ctx context.Context, sql string) (*arrow.Schema, error) {
	info, err := c.flightInfo(ctx, sql, false, nil)
	if err != nil {
		return nil, err
	}
	s, err := flight.DeserializeSchema(info.GetSchema(), c.mem)
	if err != nil {
		return nil, &permanentError{fmt.Errorf("source: decoding FlightInfo schema: %w", err)}
	}
	return s, nil
}

// callError converts the error of a call to the server (statusError) and
// gives the statuses that mean the configuration is wrong their Reason:
// UNAUTHENTICATED without a token (ErrTokenMissing) or with one
// (ErrTokenRefused), and an UNAVAILABLE whose last TLS handshake failed to
// verify the server's certificate (ErrUntrustedCertificate).
func (c *Client) callError(op string, err error) error {
	err = statusError(op, err)
	var se *StatusError
	if !errors.As(err, &se) || se.Reason != nil {
		return err
	}
	switch {
	case se.Code == codes.Unauthenticated && c.cfg.Token == "":
		se.Reason = ErrTokenMissing
	case se.Code == codes.Unauthenticated:
		se.Reason = ErrTokenRefused
	case se.Code == codes.Unavailable && c.verify != nil && strings.Contains(se.Message, "authentication handshake failed"):
		if verr := c.verify.last.Load(); verr != nil {
			se.Reason = ErrUntrustedCertificate
			if !strings.Contains(se.Message, "x509") {
				se.Message += ": " + verr.Error()
			}
		}
	}
	return err
}

// verifyWatch is the client's TLS credentials, which remember whether the
// newest handshake failed to verify the server's certificate, so that the
// UNAVAILABLE that gRPC makes of it can be told from a server that is down.
type verifyWatch struct {
	credentials.TransportCredentials
	last *atomic.Pointer[tls.CertificateVerificationError] // shared with clones
}

// ClientHandshake runs the TLS handshake and records its verification
// error, or clears it after a handshake that succeeded.
func (w *verifyWatch) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := w.TransportCredentials.ClientHandshake(ctx, authority, raw)
	var verr *tls.CertificateVerificationError
	switch {
	case err == nil:
		w.last.Store(nil)
	case errors.As(err, &verr):
		w.last.Store(verr)
	}
	return conn, info, err
}

// Clone returns a copy that shares the record.
func (w *verifyWatch) Clone() credentials.TransportCredentials {
	return &verifyWatch{TransportCredentials: w.TransportCredentials.Clone(), last: w.last}
}

// withAuth adds the bearer token, when configured, to a call's metadata.
func (c *Client) withAuth(ctx context.Context, kv ...string) context.Context {
	if c.cfg.Token != "" {
		kv = append(kv, headerAuth, "Bearer "+c.cfg.Token)
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// flightInfo calls GetFlightInfo with a CMD descriptor holding
// Any(CommandStatementQuery{sql}), amp-stream set to streaming and, when cur
// is not empty, amp-resume set to the validated cursor.
func (c *Client) flightInfo(ctx context.Context, sql string, streaming bool, cur reorg.Cursor) (*flightpb.FlightInfo, error) {
	desc, err := descriptor(sql)
	if err != nil {
		return nil, err
	}
	kv := []string{headerStream, strconv.FormatBool(streaming)}
	if len(cur) > 0 {
		h, err := cur.Header()
		if err != nil {
			return nil, &permanentError{fmt.Errorf("source: encoding resume cursor: %w", err)}
		}
		kv = append(kv, headerResume, h)
	}
	tctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	info, err := c.svc.GetFlightInfo(c.withAuth(tctx, kv...), desc)
	if err != nil {
		return nil, c.callError("GetFlightInfo", err)
	}
	return info, nil
}

// ticket returns the opaque ticket of the FlightInfo's single endpoint. Amp
// returns exactly one endpoint without locations: redeem it on this server.
func ticket(info *flightpb.FlightInfo) (*flightpb.Ticket, error) {
	eps := info.GetEndpoint()
	if len(eps) != 1 || eps[0].GetTicket() == nil {
		return nil, &permanentError{fmt.Errorf("source: GetFlightInfo returned %d endpoints; Amp returns exactly one with a ticket", len(eps))}
	}
	return eps[0].GetTicket(), nil
}

func descriptor(sql string) (*flightpb.FlightDescriptor, error) {
	if sql == "" {
		return nil, &permanentError{errors.New("source: the SQL query is empty")}
	}
	anyCmd, err := anypb.New(&flightpb.CommandStatementQuery{Query: sql})
	if err != nil {
		return nil, fmt.Errorf("source: packing CommandStatementQuery: %w", err)
	}
	cmd, err := proto.Marshal(anyCmd)
	if err != nil {
		return nil, fmt.Errorf("source: encoding CommandStatementQuery: %w", err)
	}
	return &flightpb.FlightDescriptor{Type: flightpb.FlightDescriptor_CMD, Cmd: cmd}, nil
}
