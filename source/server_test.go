package source_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	flightpb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// testSchema is the schema of the scripted server's records.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "_block_num", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "value", Type: arrow.BinaryTypes.String},
}, nil)

// msg is one FlightData the scripted server sends.
type msg struct {
	rows int               // rows of the record (testSchema), or
	pad  int               // bytes of padding per row value
	rec  arrow.RecordBatch // a prepared record (not released by the server)
	md   string            // app_metadata, verbatim
	wait <-chan struct{}   // if set, block until closed (or the call ends) before sending
}

// attemptScript is what the server does for one GetFlightInfo+DoGet pair.
type attemptScript struct {
	infoErr error // GetFlightInfo fails with this
	getErr  error // DoGet fails with this before sending anything
	msgs    []msg
	end     error // after msgs: the final status (nil = EOF unless hang)
	hang    bool  // after msgs, block until the client cancels
}

// call records one RPC as the server saw it.
type call struct {
	method string
	md     metadata.MD
	sql    string
	ticket []byte
}

// scriptServer is a minimal Flight server speaking Amp's wire protocol from
// per-attempt scripts (the last script repeats).
type scriptServer struct {
	flight.BaseFlightServer
	schema *arrow.Schema
	mem    memory.Allocator

	mu      sync.Mutex
	scripts []attemptScript
	infos   int
	calls   []call
	// doGets is signalled at the start of each DoGet.
	doGets chan int
	// sent counts the record batches written, over all calls.
	sent atomic.Int64
}

func newScriptServer(scripts ...attemptScript) *scriptServer {
	return &scriptServer{schema: testSchema, mem: memory.NewGoAllocator(), scripts: scripts, doGets: make(chan int, 100)}
}

func (s *scriptServer) script(i int) attemptScript {
	if i >= len(s.scripts) {
		i = len(s.scripts) - 1
	}
	return s.scripts[i]
}

func (s *scriptServer) record(c call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func (s *scriptServer) Calls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

func (s *scriptServer) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if desc.GetType() != flightpb.FlightDescriptor_CMD {
		return nil, status.Error(codes.InvalidArgument, "unsupported flight descriptor type")
	}
	var a anypb.Any
	if err := proto.Unmarshal(desc.GetCmd(), &a); err != nil {
		return nil, status.Error(codes.InvalidArgument, "pb decode error")
	}
	var q flightpb.CommandStatementQuery
	if err := a.UnmarshalTo(&q); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported flight descriptor command: %s", a.GetTypeUrl())
	}
	s.mu.Lock()
	n := s.infos
	s.infos++
	s.mu.Unlock()
	s.record(call{method: "GetFlightInfo", md: md, sql: q.GetQuery()})
	if err := s.script(n).infoErr; err != nil {
		return nil, err
	}
	// An opaque binary ticket: the client must hand it back unchanged.
	tk := []byte{0x00, 0xff, 0x10, byte(n), 'a', 'm', 'p'}
	return &flight.FlightInfo{
		Schema:           flight.SerializeSchema(s.schema, s.mem),
		FlightDescriptor: desc,
		Endpoint:         []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: tk}}},
		TotalRecords:     -1,
		TotalBytes:       -1,
	}, nil
}

func (s *scriptServer) DoGet(tk *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	s.record(call{method: "DoGet", md: md, ticket: tk.GetTicket()})
	b := tk.GetTicket()
	if len(b) != 7 || b[0] != 0x00 || b[1] != 0xff || string(b[4:]) != "amp" {
		return status.Error(codes.InvalidArgument, "ticket decoding error")
	}
	n := int(b[3])
	s.doGets <- n
	sc := s.script(n)
	if sc.getErr != nil {
		return sc.getErr
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(s.schema), ipc.WithAllocator(s.mem))
	defer w.Close()
	for i, m := range sc.msgs {
		if m.wait != nil {
			select {
			case <-m.wait:
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		rec := m.rec
		if rec == nil {
			rec = makeRecord(s.mem, uint64(i), m.rows, m.pad)
			defer rec.Release()
		}
		if err := w.WriteWithAppMetadata(rec, []byte(m.md)); err != nil {
			return err
		}
		s.sent.Add(1)
	}
	if sc.hang {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return sc.end
}

// makeRecord builds a testSchema record with rows rows.
func makeRecord(mem memory.Allocator, block uint64, rows, pad int) arrow.RecordBatch {
	b := array.NewRecordBuilder(mem, testSchema)
	defer b.Release()
	for r := 0; r < rows; r++ {
		b.Field(0).(*array.Uint64Builder).Append(block)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d-%d", block, r) + strings.Repeat("x", pad))
	}
	return b.NewRecordBatch()
}

// serve starts srv on 127.0.0.1:0 and returns its address; the server stops
// with the test.
func serve(t testing.TB, srv flight.FlightServer, opts ...grpc.ServerOption) string {
	t.Helper()
	s := flight.NewServerWithMiddleware(nil, opts...)
	s.RegisterFlightService(srv)
	require.NoError(t, s.Init("127.0.0.1:0"))
	go func() { _ = s.Serve() }()
	t.Cleanup(s.Shutdown)
	return s.Addr().String()
}

// serveTLS is serve with a server certificate.
func serveTLS(t testing.TB, srv flight.FlightServer, cert tls.Certificate, clientCAs *tlsClientAuth) string {
	t.Helper()
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAs != nil {
		tc.ClientCAs = clientCAs.pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return serve(t, srv, grpc.Creds(credentials.NewTLS(tc)))
}

// newClient builds a client for addr with a fast fake clock.
func newClient(t testing.TB, addr string, mutate func(*source.Config), deps source.Deps) *source.Client {
	t.Helper()
	cfg := source.DefaultConfig()
	cfg.Addr = addr
	cfg.RequestTimeout = 5 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	if deps.Clock == nil {
		deps.Clock = &fakeClock{}
	}
	c, err := source.New(cfg, deps)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// fakeClock fires at once and records the requested delays.
type fakeClock struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (f *fakeClock) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	f.delays = append(f.delays, d)
	f.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func (f *fakeClock) Delays() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.delays...)
}

// ensure the fake satisfies the interface.
var _ source.Clock = (*fakeClock)(nil)

// makeDictRecord builds a record with one dictionary<int32, utf8> column.
func makeDictRecord(t testing.TB, mem memory.Allocator, vals []string) arrow.RecordBatch {
	t.Helper()
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	schema := arrow.NewSchema([]arrow.Field{{Name: "label", Type: dt}}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	db := b.Field(0).(*array.BinaryDictionaryBuilder)
	for _, v := range vals {
		require.NoError(t, db.AppendString(v))
	}
	return b.NewRecordBatch()
}
