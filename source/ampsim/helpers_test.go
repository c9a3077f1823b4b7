package ampsim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	pb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// small is a test network density: few rows per block.
func smallConfig(blocks int) Config {
	return Config{
		NetworkConfig:     NetworkConfig{InitialBlocks: blocks, TxPerBlock: 4, LogsPerTx: 1},
		KeepAliveInterval: 20 * time.Millisecond,
	}
}

// startServer starts a simulator with a checked allocator that must be
// empty once the server is closed.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	if cfg.Allocator == nil {
		cfg.Allocator = mem
	}
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		mem.AssertSize(t, 0)
	})
	return s
}

type testClient struct {
	t   testing.TB
	c   flight.Client
	mem *memory.CheckedAllocator
}

func dial(t *testing.T, s *Server) *testClient { return dialB(t, s) }

func dialB(t testing.TB, s *Server) *testClient {
	t.Helper()
	c, err := flight.NewClientWithMiddleware(s.Addr(), nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	require.NoError(t, err)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	t.Cleanup(func() {
		_ = c.Close()
		mem.AssertSize(t, 0)
	})
	return &testClient{t: t, c: c, mem: mem}
}

func cmdDescriptor(t testing.TB, sql string) *flight.FlightDescriptor {
	t.Helper()
	a, err := anypb.New(&pb.CommandStatementQuery{Query: sql})
	require.NoError(t, err)
	b, err := proto.Marshal(a)
	require.NoError(t, err)
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: b}
}

// info calls GetFlightInfo with headers given as key, value pairs.
func (c *testClient) info(ctx context.Context, sql string, kv ...string) (*flight.FlightInfo, error) {
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	return c.c.GetFlightInfo(ctx, cmdDescriptor(c.t, sql))
}

// wireMsg is one FlightData message as received.
type wireMsg struct {
	typ      ipc.MessageType
	meta     []byte
	bodySize int
}

type tapReader struct {
	s    flight.FlightService_DoGetClient
	msgs []wireMsg
}

func (r *tapReader) Recv() (*flight.FlightData, error) {
	fd, err := r.s.Recv()
	if err != nil {
		return nil, err
	}
	typ := ipc.MessageType(0)
	if len(fd.DataHeader) > 0 {
		m := ipc.NewMessage(memory.NewBufferBytes(fd.DataHeader), memory.NewBufferBytes(nil))
		typ = m.Type()
		m.Release()
	}
	r.msgs = append(r.msgs, wireMsg{typ: typ, meta: fd.AppMetadata, bodySize: len(fd.DataBody)})
	return fd, nil
}

// batch is one record batch as read by the client.
type batch struct {
	rows     int
	raw      []byte
	ranges   []reorg.BlockRange
	complete bool
	rec      arrow.RecordBatch // retained only when keep is set
}

type appMeta struct {
	Ranges   []reorg.BlockRange `json:"ranges"`
	Complete *bool              `json:"ranges_complete"`
}

// stream is a DoGet in progress.
type stream struct {
	t      testing.TB
	cancel context.CancelFunc
	tap    *tapReader
	rdr    *flight.Reader
	err    error
	keep   bool
	kept   []arrow.RecordBatch
	mem    memory.Allocator
}

// doGet starts a DoGet on the info's first ticket; the reader is created
// lazily because it blocks until the schema arrives.
func (c *testClient) doGet(ctx context.Context, info *flight.FlightInfo) (*stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := c.c.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		cancel()
		return nil, err
	}
	st := &stream{t: c.t, cancel: cancel, tap: &tapReader{s: s}, mem: c.mem}
	c.t.Cleanup(st.close)
	return st, nil
}

func (s *stream) close() {
	s.cancel()
	if s.rdr != nil {
		s.rdr.Release()
		s.rdr = nil
	}
	for _, r := range s.kept {
		r.Release()
	}
	s.kept = nil
}

// next reads the next batch; io.EOF at the end of the stream.
func (s *stream) next() (batch, error) {
	if s.err != nil {
		return batch{}, s.err
	}
	if s.rdr == nil {
		r, err := flight.NewRecordReader(s.tap, ipc.WithAllocator(s.mem))
		if err != nil {
			s.err = err
			return batch{}, err
		}
		s.rdr = r
	}
	if !s.rdr.Next() {
		s.err = s.rdr.Err()
		if s.err == nil {
			s.err = io.EOF
		}
		return batch{}, s.err
	}
	rec := s.rdr.RecordBatch()
	b := batch{rows: int(rec.NumRows()), raw: append([]byte(nil), s.rdr.LatestAppMetadata()...)}
	var m appMeta
	require.NoError(s.t, json.Unmarshal(b.raw, &m), "app_metadata %q", b.raw)
	require.NotNil(s.t, m.Ranges, "ranges missing in %q", b.raw)
	require.NotNil(s.t, m.Complete, "ranges_complete missing in %q", b.raw)
	b.ranges, b.complete = m.Ranges, *m.Complete
	if s.keep {
		rec.Retain()
		s.kept = append(s.kept, rec)
		b.rec = rec
	}
	return b, nil
}

// readAll reads until EOF or error.
func (s *stream) readAll() ([]batch, error) {
	var out []batch
	for {
		b, err := s.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
}

// microbatch is the batches of one streaming microbatch.
type microbatch struct {
	r       reorg.BlockRange
	batches []batch // data and keep-alives, then the completion last
	rows    int
}

// readMicrobatches reads n complete microbatches, checking the §2.2 rules:
// identical ranges within a microbatch, exactly one 0-row completion.
func (s *stream) readMicrobatches(n int) []microbatch {
	s.t.Helper()
	var out []microbatch
	var cur *microbatch
	for len(out) < n {
		b, err := s.next()
		require.NoError(s.t, err)
		require.Len(s.t, b.ranges, 1, "streaming ranges have exactly one element: %s", b.raw)
		if cur == nil {
			cur = &microbatch{r: b.ranges[0]}
		}
		require.Equal(s.t, cur.r, b.ranges[0], "all batches of a microbatch carry the same range")
		cur.batches = append(cur.batches, b)
		cur.rows += b.rows
		if b.complete {
			require.Zero(s.t, b.rows, "the completion batch has 0 rows")
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// expectSilence asserts that nothing arrives within d (the stream stays
// open). It consumes the stream: call it last.
func (s *stream) expectSilence(d time.Duration) {
	s.t.Helper()
	got := make(chan error, 1)
	go func() {
		_, err := s.next()
		got <- err
	}()
	select {
	case err := <-got:
		s.t.Fatalf("expected no message for %v, got one (err=%v)", d, err)
	case <-time.After(d):
	}
	s.cancel()
	<-got //nolint:errcheck // only waits for the reader goroutine; its error is the cancellation above
}

func hashOf(t *testing.T, s *Server, n uint64) reorg.Hash {
	t.Helper()
	h, ok := s.BlockHash(n)
	require.True(t, ok, "block %d exists", n)
	return h
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
