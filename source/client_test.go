package source_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// collect reads n envelopes (failing on any error) and releases their batches
// after recording what the test needs.
type got struct {
	kind     source.Kind
	rows     int64
	ranges   []reorg.BlockRange
	complete bool
	cause    error
}

func next(t *testing.T, s *source.Stream) got {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	env, err := s.Next(ctx)
	require.NoError(t, err)
	defer env.Release()
	g := got{kind: env.Kind, ranges: env.Ranges, complete: env.Complete, cause: env.Cause}
	if env.Batch != nil {
		g.rows = env.Batch.NumRows()
	}
	return g
}

func nextErr(t *testing.T, s *source.Stream) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	env, err := s.Next(ctx)
	env.Release()
	require.Error(t, err, "want an error, got an envelope of kind %v", env.Kind)
	return err
}

func fixedCursor(c reorg.Cursor) func() reorg.Cursor { return func() reorg.Cursor { return c } }

func TestHeaders(t *testing.T) {
	srv := newScriptServer(attemptScript{msgs: []msg{W(t, R(0, 0, 0))}, hang: true})
	addr := serve(t, srv)
	c := newClient(t, addr, func(c *source.Config) { c.Token = "tok-123"; c.AllowPlaintextToken = true }, source.Deps{})
	cur := reorg.Cursor{"eth": {Number: 1, Hash: H("eth", 0, 1)}}
	s, err := c.Stream(t.Context(), "SELECT * FROM eth.blocks", fixedCursor(cur))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)

	calls := srv.Calls()
	require.Len(t, calls, 2)
	info, get := calls[0], calls[1]
	require.Equal(t, "GetFlightInfo", info.method)
	assert.Equal(t, "SELECT * FROM eth.blocks", info.sql)
	assert.Equal(t, []string{"true"}, info.md.Get("amp-stream"))
	want, err := cur.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{want}, info.md.Get("amp-resume"))
	assert.Equal(t, []string{"Bearer tok-123"}, info.md.Get("authorization"))

	require.Equal(t, "DoGet", get.method)
	assert.Empty(t, get.md.Get("amp-stream"), "amp-stream must be sent on GetFlightInfo only")
	assert.Empty(t, get.md.Get("amp-resume"), "amp-resume must be sent on GetFlightInfo only")
	assert.Equal(t, []string{"Bearer tok-123"}, get.md.Get("authorization"))
	assert.Equal(t, []byte{0x00, 0xff, 0x10, 0, 'a', 'm', 'p'}, get.ticket, "the ticket is returned unchanged")
}

func TestHeaders_BatchQueryNoTokenNoCursor(t *testing.T) {
	srv := newScriptServer(attemptScript{msgs: []msg{D(t, R(0, 5, 0)), W(t, R(0, 5, 0))}})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	s, err := c.Query(t.Context(), "SELECT 1 SETTINGS stream = true")
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, int64(1), next(t, s).rows)
	assert.True(t, next(t, s).complete)
	assert.ErrorIs(t, nextErr(t, s), io.EOF)
	calls := srv.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, []string{"false"}, calls[0].md.Get("amp-stream"), "a batch query forces amp-stream: false")
	for _, cl := range calls {
		assert.Empty(t, cl.md.Get("amp-resume"), cl.method)
		assert.Empty(t, cl.md.Get("authorization"), cl.method)
	}
}

func TestStream_EmptyCursorSendsNoResumeHeader(t *testing.T) {
	srv := newScriptServer(attemptScript{msgs: []msg{W(t, R(0, 0, 0))}, hang: true})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)
	assert.Empty(t, srv.Calls()[0].md.Get("amp-resume"))
}

func TestStream_InvalidCursorFailsBeforeSending(t *testing.T) {
	srv := newScriptServer(attemptScript{hang: true})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	_, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(reorg.Cursor{"": {Number: 1}}))
	assert.ErrorIs(t, err, source.ErrPermanent)
	assert.ErrorContains(t, err, "empty network id")

	// A later invalid cursor (after a reconnect) ends the stream.
	srv2 := newScriptServer(attemptScript{msgs: []msg{W(t, R(0, 0, 0))}})
	c2 := newClient(t, serve(t, srv2), nil, source.Deps{})
	var calls int
	s, err := c2.Stream(t.Context(), "SELECT 1", func() reorg.Cursor {
		calls++
		if calls == 1 {
			return nil
		}
		return reorg.Cursor{"": {Number: 1}}
	})
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, next(t, s).complete)
	assert.Equal(t, source.KindReconnect, next(t, s).kind)
	err = nextErr(t, s)
	assert.ErrorIs(t, err, source.ErrPermanent)
	assert.ErrorContains(t, err, "empty network id")
	assert.Empty(t, srv.Calls(), "an invalid cursor must never reach the server")
	assert.Len(t, srv2.Calls(), 2, "only the first attempt reached the server")
}

func TestOpen_BadArguments(t *testing.T) {
	c := newClient(t, "127.0.0.1:1", nil, source.Deps{})
	_, err := c.Stream(t.Context(), "", fixedCursor(nil))
	assert.ErrorIs(t, err, source.ErrPermanent)
	_, err = c.Stream(t.Context(), "SELECT 1", nil)
	assert.ErrorContains(t, err, "cursor function")
	_, err = c.Query(t.Context(), "")
	assert.ErrorContains(t, err, "empty")
}

func TestQuery_IncompleteAndErrors(t *testing.T) {
	tests := []struct {
		name    string
		script  attemptScript
		wantErr error
		calls   int
	}{
		{"eof without completion", attemptScript{msgs: []msg{D(t, R(0, 5, 0))}}, source.ErrIncomplete, 2},
		{"internal after data is not retried", attemptScript{msgs: []msg{D(t, R(0, 5, 0))}, end: status.Error(codes.Internal, "boom")}, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScriptServer(tt.script)
			c := newClient(t, serve(t, srv), nil, source.Deps{})
			s, err := c.Query(t.Context(), "SELECT 1")
			require.NoError(t, err)
			defer s.Close()
			next(t, s)
			err = nextErr(t, s)
			if tt.wantErr != nil {
				assert.ErrorIs(t, err, tt.wantErr)
			} else {
				var se *source.StatusError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, codes.Internal, se.Code)
				assert.True(t, source.IsRetryable(err))
			}
			assert.Len(t, srv.Calls(), tt.calls)
		})
	}
}

func TestQuery_RetriesBeforeData(t *testing.T) {
	srv := newScriptServer(
		attemptScript{infoErr: status.Error(codes.Unavailable, "starting")},
		attemptScript{getErr: status.Error(codes.Internal, "transient")},
		attemptScript{msgs: []msg{W(t, R(0, 5, 0))}},
	)
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	s, err := c.Query(t.Context(), "SELECT 1")
	require.NoError(t, err)
	defer s.Close()
	g := next(t, s)
	assert.Equal(t, source.KindBatch, g.kind, "a batch query never yields a reconnect marker")
	assert.True(t, g.complete)
	assert.ErrorIs(t, nextErr(t, s), io.EOF)
}

func TestPermanentErrorsFailFast(t *testing.T) {
	permanent := []codes.Code{codes.InvalidArgument, codes.NotFound, codes.Unimplemented, codes.Unauthenticated, codes.PermissionDenied}
	for _, code := range permanent {
		for _, where := range []string{"GetFlightInfo", "DoGet"} {
			t.Run(code.String()+"/"+where, func(t *testing.T) {
				sc := attemptScript{}
				st := status.Error(code, "invalid query: non-incremental queries are not supported for streaming | Caused by: x")
				if where == "GetFlightInfo" {
					sc.infoErr = st
				} else {
					sc.getErr = st
				}
				srv := newScriptServer(sc)
				c := newClient(t, serve(t, srv), nil, source.Deps{})
				s, err := c.Stream(t.Context(), "SELECT count(*) FROM t", fixedCursor(nil))
				require.NoError(t, err)
				defer s.Close()
				err = nextErr(t, s)
				assert.ErrorIs(t, err, source.ErrPermanent)
				assert.False(t, source.IsRetryable(err))
				var se *source.StatusError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, code, se.Code)
				assert.Equal(t, where, se.Op)
				assert.Equal(t, "invalid query: non-incremental queries are not supported for streaming | Caused by: x", se.Message)
				assert.Equal(t, code, status.Code(err))
				// Next keeps returning the same error; nothing was retried.
				assert.Equal(t, err, nextErr(t, s))
				assert.Len(t, srv.Calls(), map[string]int{"GetFlightInfo": 1, "DoGet": 2}[where])
			})
		}
	}
}

// TestReconnect_InternalMidStream is scenario A21/F7 from the client side:
// INTERNAL after some batches → the buffered batches, a reconnect marker,
// then a new GetFlightInfo carrying the cursor the caller supplies after the
// marker.
func TestReconnect_InternalMidStream(t *testing.T) {
	srv := newScriptServer(
		attemptScript{msgs: []msg{D(t, R(0, 10, 0)), W(t, R(0, 10, 0)), D(t, R(11, 20, 0))}, end: status.Error(codes.Internal, "streaming query execution error | Caused by: io")},
		attemptScript{msgs: []msg{D(t, R(11, 20, 0)), W(t, R(11, 20, 0))}, hang: true},
	)
	clock := &fakeClock{}
	c := newClient(t, serve(t, srv), nil, source.Deps{Clock: clock, Rand: func() float64 { return 0 }})
	var mu sync.Mutex
	var committed reorg.Cursor
	var cursorCalls int
	cursor := func() reorg.Cursor {
		mu.Lock()
		defer mu.Unlock()
		cursorCalls++
		return committed
	}
	s, err := c.Stream(t.Context(), "SELECT * FROM eth.blocks", cursor)
	require.NoError(t, err)
	defer s.Close()

	assert.Equal(t, int64(1), next(t, s).rows)
	w := next(t, s)
	require.True(t, w.complete)
	d := next(t, s)
	assert.Equal(t, uint64(11), d.ranges[0].Start)
	m := next(t, s)
	require.Equal(t, source.KindReconnect, m.kind)
	assert.Equal(t, codes.Internal, status.Code(m.cause))
	mu.Lock()
	assert.Equal(t, 1, cursorCalls, "the cursor for the reconnect is read only after the marker was consumed")
	committed = reorg.CursorFromRanges(w.ranges) // the consumer's rollback target
	mu.Unlock()

	d2 := next(t, s)
	assert.Equal(t, source.KindBatch, d2.kind)
	assert.Equal(t, []reorg.BlockRange{R(11, 20, 0)}, d2.ranges)
	assert.True(t, next(t, s).complete)

	calls := srv.Calls()
	require.Len(t, calls, 4)
	want, err := committed.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{want}, calls[2].md.Get("amp-resume"))
	assert.Equal(t, []time.Duration{250 * time.Millisecond}, clock.Delays())
}

func TestReconnect_RetryableKindsAndBackoff(t *testing.T) {
	srv := newScriptServer(
		attemptScript{infoErr: status.Error(codes.Unavailable, "down")},
		attemptScript{infoErr: status.Error(codes.ResourceExhausted, "mem")},
		attemptScript{getErr: status.Error(codes.Internal, "x")},
		attemptScript{getErr: status.Error(codes.Unknown, "reset")},
		attemptScript{msgs: []msg{W(t, R(0, 0, 0))}}, // EOF on a streaming query
		attemptScript{msgs: []msg{W(t, R(1, 1, 0))}, hang: true},
	)
	clock := &fakeClock{}
	c := newClient(t, serve(t, srv), func(c *source.Config) {
		c.Backoff.Initial = 100 * time.Millisecond
		c.Backoff.Max = 500 * time.Millisecond
		c.Backoff.Jitter = 0.5
	}, source.Deps{Clock: clock, Rand: func() float64 { return 0.5 }})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	g := next(t, s)
	assert.Equal(t, source.KindBatch, g.kind, "no marker before the first delivered envelope")
	m := next(t, s)
	assert.Equal(t, source.KindReconnect, m.kind)
	assert.ErrorIs(t, m.cause, io.EOF)
	assert.Equal(t, []reorg.BlockRange{R(1, 1, 0)}, next(t, s).ranges)
	// 100, 200, 400, 500 (capped), then reset by progress: 100; each × (1 - 0.5·0.5).
	assert.Equal(t, []time.Duration{75 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond,
		375 * time.Millisecond, 75 * time.Millisecond}, clock.Delays())
}

func TestReconnect_MaxAttempts(t *testing.T) {
	srv := newScriptServer(attemptScript{infoErr: status.Error(codes.Unavailable, "down")})
	c := newClient(t, serve(t, srv), func(c *source.Config) { c.Backoff.MaxAttempts = 3 }, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	err = nextErr(t, s)
	assert.ErrorIs(t, err, source.ErrRetriesExhausted)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Len(t, srv.Calls(), 3)
}

func TestCancel_StopsAtOnce(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	// The server never sends the schema (Amp sends nothing before the first
	// microbatch), so the reader is blocked constructing the IPC reader.
	srv := newScriptServer(attemptScript{msgs: []msg{{wait: block}}})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	ctx, cancel := context.WithCancel(t.Context())
	s, err := c.Stream(ctx, "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	<-srv.doGets
	start := time.Now()
	cancel()
	err = nextErr(t, s)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 2*time.Second)
	// Next's own ctx only bounds the wait.
	s2, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s2.Close()
	nctx, ncancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer ncancel()
	_, err = s2.Next(nctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, s2.Close())
	_, err = s2.Next(t.Context())
	assert.ErrorIs(t, err, source.ErrClosed)
	require.NoError(t, s2.Close(), "Close is idempotent")
}

// TestGoroutines_TenReconnects checks that every goroutine is owned: the
// count is back to the baseline after 10 forced reconnects and Close.
func TestGoroutines_TenReconnects(t *testing.T) {
	var scripts []attemptScript
	for i := range 10 {
		r := R(uint64(i), uint64(i), 0)
		scripts = append(scripts, attemptScript{msgs: []msg{D(t, r), W(t, r)}, end: status.Error(codes.Internal, "forced")})
	}
	scripts = append(scripts, attemptScript{msgs: []msg{W(t, R(10, 10, 0))}, hang: true})
	srv := newScriptServer(scripts...)
	addr := serve(t, srv)
	c := newClient(t, addr, nil, source.Deps{})
	// Warm the connection so its goroutines are in the baseline.
	sch, err := c.Schema(t.Context(), "SELECT 1")
	require.NoError(t, err)
	require.Equal(t, 2, sch.NumFields())
	srv.mu.Lock()
	srv.infos = 0
	srv.mu.Unlock()
	// The baseline once the warm-up call's goroutines have settled: the
	// same count twice in a row, 10 ms apart.
	base, baseStack := goroutines()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		n, st := goroutines()
		if n == base {
			break
		}
		base, baseStack = n, st
	}

	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	markers := 0
	for markers < 10 {
		if next(t, s).kind == source.KindReconnect {
			markers++
		}
	}
	for {
		g := next(t, s)
		if g.kind == source.KindBatch && g.complete && g.ranges[0].Start == 10 {
			break
		}
	}
	require.NoError(t, s.Close())
	// Polled here, not with assert.Eventually, which runs its condition in
	// a goroutine of its own.
	now, nowStack := goroutines()
	for deadline := time.Now().Add(5 * time.Second); now > base && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		now, nowStack = goroutines()
	}
	if !assert.LessOrEqual(t, now, base, "goroutines leaked") {
		t.Logf("BASE:\n%s\nNOW:\n%s", baseStack, nowStack)
	}
}

// goroutines counts the goroutines in a full stack dump (runtime.NumGoroutine
// may also count the runtime's cleanup goroutine while it runs user code).
func goroutines() (int, string) {
	buf := make([]byte, 4<<20)
	st := string(buf[:runtime.Stack(buf, true)])
	return strings.Count(st, "\ngoroutine ") + 1, st
}

// TestBackpressure checks that the reader does not run ahead of a consumer
// that stops reading by more than its window (plus gRPC's small transport
// window), and, as a control, that it does read ahead when allowed to.
func TestBackpressure(t *testing.T) {
	const total = 32 // batches of ~512 KiB
	for _, tt := range []struct {
		name     string
		cfg      func(*source.Config)
		min, max int64 // bounds on batches sent while the consumer holds one
	}{
		{"envelopes", func(c *source.Config) { c.ReadAhead = 2; c.ReadAheadBytes = 0 }, 1, 10},
		{"bytes", func(c *source.Config) { c.ReadAhead = 64; c.ReadAheadBytes = 1 << 20 }, 1, 10},
		{"unbounded control", func(c *source.Config) { c.ReadAhead = 64; c.ReadAheadBytes = 0 }, total, total},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sentWhileHeld(t, total, 512<<10, tt.cfg, tt.min, tt.max)
		})
	}
}

// sentWhileHeld streams total batches of about size bytes each from a
// server that counts what it sends, through a client configured by cfg. The
// consumer takes one batch and stops; the test checks that the server sent
// between min and max batches meanwhile (waiting for all of them when min is
// total), then reads the rest and checks that every batch arrived.
func sentWhileHeld(t *testing.T, total, size int, cfg func(*source.Config), minSent, maxSent int64) {
	t.Helper()
	rec := makeRecord(memory.NewGoAllocator(), 0, 1, size)
	defer rec.Release()
	msgs := make([]msg, 0, total)
	for i := range total {
		msgs = append(msgs, msg{rec: rec, md: md(t, false, R(uint64(i), uint64(i), 0))})
	}
	srv := newScriptServer(attemptScript{msgs: msgs, hang: true})
	c := newClient(t, serve(t, srv), cfg, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)
	if minSent == int64(total) {
		require.Eventually(t, func() bool { return srv.sent.Load() == int64(total) }, 10*time.Second, 10*time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	sent := srv.sent.Load()
	t.Logf("sent %d of %d while the consumer held 1", sent, total)
	assert.GreaterOrEqual(t, sent, minSent)
	assert.LessOrEqual(t, sent, maxSent, "the reader ran ahead of the consumer")
	for range total - 1 {
		next(t, s)
	}
	assert.Equal(t, int64(total), srv.sent.Load())
}

func TestCompleteWithRowsYieldsDataThenWatermark(t *testing.T) {
	srv := newScriptServer(attemptScript{msgs: []msg{{rows: 3, md: md(t, true, R(0, 5, 0))}}, hang: true})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	d := next(t, s)
	assert.Equal(t, int64(3), d.rows)
	assert.False(t, d.complete)
	w := next(t, s)
	assert.Equal(t, int64(0), w.rows)
	assert.True(t, w.complete)
	assert.Equal(t, d.ranges, w.ranges)
}

func TestMetadataErrorNamesBatchAndField(t *testing.T) {
	srv := newScriptServer(attemptScript{msgs: []msg{
		D(t, R(0, 5, 0)), W(t, R(0, 5, 0)),
		{rows: 1, md: `{"ranges":[{"numbers":{"start":6,"end":7},"network":"eth","hash":"0x12"}],"ranges_complete":false}`},
	}, hang: true})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)
	next(t, s)
	err = nextErr(t, s)
	var me *source.MetadataError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, 2, me.Index)
	assert.Equal(t, "ranges[0].hash", me.Field)
	assert.ErrorIs(t, err, source.ErrPermanent)
	assert.ErrorContains(t, err, "batch 2")
	assert.Len(t, srv.Calls(), 2, "a protocol error is not retried")
}

func TestDictionaryBatchesAndNoLeak(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	srvMem := memory.NewGoAllocator()
	rec := makeDictRecord(t, srvMem, []string{"a", "b", "a", "c"})
	defer rec.Release()
	srv := newScriptServer(attemptScript{msgs: []msg{
		{rec: rec, md: md(t, false, R(0, 0, 0))},
		{rec: rec, md: md(t, false, R(0, 0, 0))},
		{rec: rec.NewSlice(0, 0), md: md(t, true, R(0, 0, 0))},
	}})
	srv.schema = rec.Schema()
	c := newClient(t, serve(t, srv), nil, source.Deps{Allocator: mem})
	s, err := c.Query(t.Context(), "SELECT 1")
	require.NoError(t, err)
	defer s.Close()
	for range 2 {
		env, err := s.Next(t.Context())
		require.NoError(t, err)
		col, ok := env.Batch.Column(0).(*array.Dictionary)
		require.True(t, ok, "column 0 is %T", env.Batch.Column(0))
		dict := col.Dictionary().(*array.String)
		var vals []string
		for i := range col.Len() {
			vals = append(vals, dict.Value(col.GetValueIndex(i)))
		}
		assert.Equal(t, []string{"a", "b", "a", "c"}, vals)
		env.Release()
	}
	env, err := s.Next(t.Context())
	require.NoError(t, err)
	assert.True(t, env.Complete)
	env.Release()
	_, err = s.Next(t.Context())
	assert.ErrorIs(t, err, io.EOF)
	require.NoError(t, s.Close())
}

func TestCloseReleasesQueuedEnvelopes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rec := makeDictRecord(t, memory.NewGoAllocator(), []string{"x"})
	defer rec.Release()
	msgs := []msg{}
	for range 5 {
		msgs = append(msgs, msg{rec: rec, md: md(t, false, R(0, 0, 0))})
	}
	srv := newScriptServer(attemptScript{msgs: msgs, hang: true})
	srv.schema = rec.Schema()
	c := newClient(t, serve(t, srv), nil, source.Deps{Allocator: mem})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	env, err := s.Next(t.Context())
	require.NoError(t, err)
	env.Release()
	require.Eventually(t, func() bool { return srv.sent.Load() == 5 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // let the reader fill its window
	require.NoError(t, s.Close())
}

// TestF05_KeepAliveDuringLongMicrobatch: 0-row complete=false batches during
// a long microbatch are yielded as keep-alives and never end the stream.
func TestF05_KeepAliveDuringLongMicrobatch(t *testing.T) {
	r := R(0, 999, 0)
	tick := func() <-chan struct{} {
		ch := make(chan struct{})
		time.AfterFunc(30*time.Millisecond, func() { close(ch) })
		return ch
	}
	srv := newScriptServer(attemptScript{msgs: []msg{
		K(t, r), // immediate first tick
		{md: md(t, false, r), wait: tick()},
		{md: md(t, false, r), wait: tick()},
		{rows: 1, md: md(t, false, r), wait: tick()},
		{md: md(t, true, r)},
	}, hang: true})
	c := newClient(t, serve(t, srv), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	for range 3 {
		env, err := s.Next(t.Context())
		require.NoError(t, err)
		assert.True(t, env.KeepAlive())
		assert.Equal(t, []reorg.BlockRange{r}, env.Ranges)
		env.Release()
	}
	assert.Equal(t, int64(1), next(t, s).rows)
	assert.True(t, next(t, s).complete)
	assert.Len(t, srv.Calls(), 2, "keep-alives caused no reconnect")
}

// TestF06_LongSilence: no watchdog; after a silence far longer than every
// configured timeout the next microbatch arrives on the same DoGet.
func TestF06_LongSilence(t *testing.T) {
	silence := make(chan struct{})
	srv := newScriptServer(attemptScript{msgs: []msg{
		D(t, R(0, 0, 0)), W(t, R(0, 0, 0)),
		{rows: 1, md: md(t, false, R(1, 1, 0)), wait: silence},
		W(t, R(1, 1, 0)),
	}, hang: true})
	c := newClient(t, serve(t, srv), func(c *source.Config) { c.RequestTimeout = 100 * time.Millisecond }, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)
	next(t, s)
	time.AfterFunc(time.Second, func() { close(silence) }) // 10× RequestTimeout
	d := next(t, s)
	assert.Equal(t, source.KindBatch, d.kind)
	assert.Equal(t, uint64(1), d.ranges[0].Start)
	assert.True(t, next(t, s).complete)
	// One DoGet: the client stayed on the same stream. (A GetFlightInfo
	// past the 100 ms RequestTimeout on a loaded machine is retried before
	// the stream opens, and is not what this checks.)
	var doGets int
	for _, c := range srv.Calls() {
		if c.method == "DoGet" {
			doGets++
		}
	}
	assert.Equal(t, 1, doGets, "the client stayed on the same stream: %v", srv.Calls())
}

func TestTokenNeverLogged(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := newScriptServer(
		attemptScript{msgs: []msg{W(t, R(0, 0, 0))}, end: status.Error(codes.Unavailable, "x")},
		attemptScript{msgs: []msg{W(t, R(1, 1, 0))}, hang: true},
	)
	c := newClient(t, serve(t, srv), func(c *source.Config) { c.Token = "s3cr3t-token"; c.AllowPlaintextToken = true }, source.Deps{Logger: logger})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)
	next(t, s)
	next(t, s)
	cfg := source.DefaultConfig()
	cfg.Token = "s3cr3t-token"
	logger.Info("config", "source", cfg)
	assert.Contains(t, buf.String(), "reconnecting")
	assert.NotContains(t, buf.String(), "s3cr3t-token")
	assert.NotContains(t, cfg.String(), "s3cr3t-token")
}

// TestLargeMessage: a FlightData above grpc-go's 4 MiB default receive limit
// is received with the client's default 64 MiB limit, even when it is larger
// than the whole read-ahead byte budget.
func TestLargeMessage(t *testing.T) {
	big := makeRecord(memory.NewGoAllocator(), 0, 1, 6<<20)
	defer big.Release()
	srv := newScriptServer(attemptScript{msgs: []msg{{rec: big, md: md(t, false, R(0, 0, 0))}, W(t, R(0, 0, 0))}})
	c := newClient(t, serve(t, srv), func(c *source.Config) { c.ReadAheadBytes = 1 << 10 }, source.Deps{})
	s, err := c.Query(t.Context(), "SELECT 1")
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, int64(1), next(t, s).rows)
	assert.True(t, next(t, s).complete)
}

// TestWithLogger: a stream opened with WithLogger logs its reconnects to
// that logger, not the shared client's, so each line names its stream.
func TestWithLogger(t *testing.T) {
	var clientBuf, streamBuf bytes.Buffer
	srv := newScriptServer(
		attemptScript{msgs: []msg{W(t, R(0, 0, 0))}, end: status.Error(codes.Unavailable, "x")},
		attemptScript{msgs: []msg{W(t, R(1, 1, 0))}, hang: true},
	)
	c := newClient(t, serve(t, srv), nil, source.Deps{Logger: slog.New(slog.NewTextHandler(&clientBuf, nil))})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil),
		source.WithLogger(slog.New(slog.NewTextHandler(&streamBuf, nil)).With("stream", "s1")))
	require.NoError(t, err)
	defer s.Close()
	next(t, s)
	next(t, s)
	next(t, s)
	assert.Contains(t, streamBuf.String(), "reconnecting")
	assert.Contains(t, streamBuf.String(), "stream=s1")
	assert.Empty(t, clientBuf.String())
}

// TestRetryHookWithoutMarker: an Amp that does not answer a reconnect's
// GetFlightInfo queues no envelope, so no KindReconnect marker tells the
// consumer; the retry hook does, on every failed attempt.
func TestRetryHookWithoutMarker(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: every attempt fails
	c := newClient(t, addr, nil, source.Deps{})
	var mu sync.Mutex
	var attempts []int
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil), source.WithRetryHook(func(err error, attempt int) {
		mu.Lock()
		defer mu.Unlock()
		assert.Error(t, err)
		attempts = append(attempts, attempt)
	}))
	require.NoError(t, err)
	defer s.Close()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) >= 3
	}, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 2, 3}, attempts[:3], "each failed attempt, counted")
}

// TestReceiveWindow checks that Config.ReceiveWindow fixes what Amp may
// send a stream ahead of its reader: with a one-envelope read-ahead and a
// consumer that stops, a 64 KiB window lets only a few 64 KiB batches past
// the reader, and a 4 MiB one lets about 4 MiB more.
func TestReceiveWindow(t *testing.T) {
	const total = 100 // batches of ~64 KiB
	for _, tt := range []struct {
		name     string
		window   int32
		min, max int64 // bounds on batches sent while the consumer holds one
	}{
		{"64 KiB", 64 << 10, 1, 8},
		{"4 MiB", 4 << 20, 48, 80},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sentWhileHeld(t, total, 64<<10, func(c *source.Config) {
				c.ReadAhead, c.ReadAheadBytes, c.ReceiveWindow, c.ReceiveWindowStreams = 1, 0, tt.window, 1
			}, tt.min, tt.max)
		})
	}
}
