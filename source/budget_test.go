package source_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// budgetMsg is what each batch of the read budget tests holds in memory:
// a message of a little over 252 KiB, in a buffer of the Client's size
// class of 256 KiB.
const budgetMsg = 256 << 10

// budgetServer serves scripts of n batches of about budgetMsg bytes each,
// then hangs, to every query in turn.
func budgetServer(t *testing.T, scripts ...int) *scriptServer {
	t.Helper()
	rec := makeRecord(memory.NewGoAllocator(), 0, 1, budgetMsg-4<<10)
	t.Cleanup(rec.Release)
	var as []attemptScript
	for _, n := range scripts {
		a := attemptScript{hang: true}
		for i := range n {
			a.msgs = append(a.msgs, msg{rec: rec, md: md(t, false, R(uint64(i), uint64(i), 0))})
		}
		as = append(as, a)
	}
	return newScriptServer(as...)
}

// budgetClient is a client of srv whose read budget holds about msgs
// batches of budgetServer, with no bound on the envelopes read ahead and
// HTTP/2 windows of 64 KiB, so that what Amp sent is what the readers
// took, give or take a batch per stream in flight.
func budgetClient(t *testing.T, srv *scriptServer, msgs int) *source.Client {
	t.Helper()
	return newClient(t, serve(t, srv), func(c *source.Config) {
		c.ReadAhead = 64
		c.ReadAheadBytes = int64(msgs) * budgetMsg
		c.ReceiveWindow = source.MinReceiveWindow
	}, source.Deps{})
}

// openInTurn opens n streams of c one after the other, each once the
// server has started the previous one's DoGet, so that stream i gets
// script i.
func openInTurn(t *testing.T, c *source.Client, srv *scriptServer, n int) []*source.Stream {
	t.Helper()
	var out []*source.Stream
	for range n {
		s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		select {
		case <-srv.doGets:
		case <-time.After(10 * time.Second):
			t.Fatal("the server saw no DoGet")
		}
		out = append(out, s)
	}
	return out
}

// settled returns the server's count of sent batches once it has not
// changed for 300 ms.
func settled(srv *scriptServer) int64 {
	last := srv.sent.Load()
	for {
		time.Sleep(300 * time.Millisecond)
		n := srv.sent.Load()
		if n == last {
			return n
		}
		last = n
	}
}

// take returns the next envelope of s, which the caller must release.
func take(t *testing.T, s *source.Stream) source.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	env, err := s.Next(ctx)
	require.NoError(t, err)
	return env
}

// drain takes and releases n envelopes of each stream, the streams side by
// side, as the bridge's streams consume theirs.
func drain(t *testing.T, ss []*source.Stream, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(ss))
	for _, s := range ss {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for range n {
				env, err := s.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				env.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestReadBudgetIsTheClients: amp.read_ahead_bytes bounds what all the
// streams of a Client hold together, not what each holds.
func TestReadBudgetIsTheClients(t *testing.T) {
	const streams, budget = 3, 8
	srv := budgetServer(t, 16, 16, 16)
	c := budgetClient(t, srv, budget)
	ss := openInTurn(t, c, srv, streams)

	// Nothing consumed: the readers together hold the budget; each
	// stream may have one more batch in flight in gRPC and one written
	// by the server into its window. A budget of each stream's own would
	// let 3 × 8 through.
	sent := settled(srv)
	t.Logf("sent %d batches to %d streams with a budget of %d", sent, streams, budget)
	assert.GreaterOrEqual(t, sent, int64(streams), "the readers did not read ahead")
	assert.LessOrEqual(t, sent, int64(budget+2*streams), "the streams read ahead by more than the Client's budget")

	drain(t, ss, 16)
	assert.Equal(t, int64(streams*16), srv.sent.Load())
}

// TestReadBudgetUntilRelease: an envelope counts against the budget until
// it is released, not until Next returns it.
func TestReadBudgetUntilRelease(t *testing.T) {
	const budget = 8
	srv := budgetServer(t, 32)
	c := budgetClient(t, srv, budget)
	s := openInTurn(t, c, srv, 1)[0]
	sent := settled(srv)
	assert.LessOrEqual(t, sent, int64(budget+2), "the stream read ahead by more than the budget")

	held := []source.Envelope{take(t, s), take(t, s), take(t, s)}
	assert.Equal(t, sent, settled(srv), "batches taken but not released made room")
	for i := range held {
		held[i].Release()
	}
	assert.Greater(t, settled(srv), sent, "released batches made no room")
	drain(t, []*source.Stream{s}, 32-len(held))
}

// TestReadBudgetClose: the envelopes that a consumer never released stop
// counting when their stream is closed, so that the others go on, and
// releasing them afterwards (or a copy of them twice) does not count them
// back twice.
func TestReadBudgetClose(t *testing.T) {
	// A budget of 3 batches: 2 held, and a stream reserves twice the
	// size of its next batch before it receives it.
	srv := budgetServer(t, 2, 8, 2)
	c := budgetClient(t, srv, 3)
	a := openInTurn(t, c, srv, 1)[0]
	held := []source.Envelope{take(t, a), take(t, a)}
	b := openInTurn(t, c, srv, 1)[0]

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	_, err := b.Next(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "stream b received with the budget held by a's consumer")

	require.NoError(t, a.Close())
	drain(t, []*source.Stream{b}, 8)
	require.NoError(t, b.Close())
	dup := held[0]
	for _, e := range append(held, dup) {
		e.Release() // after Close: counted back once, not again
	}
	// The budget is whole again: a new stream gets as much.
	s := openInTurn(t, c, srv, 1)[0]
	held = []source.Envelope{take(t, s), take(t, s)}
	for i := range held {
		held[i].Release()
	}
}

// TestReadBudgetIdleStream: a stream waiting for Amp to send anything (at
// the head of its chain) holds no part of the budget, so that a busy
// stream of the same Client still gets every batch through a budget of one.
func TestReadBudgetIdleStream(t *testing.T) {
	srv := budgetServer(t, 0, 16)
	c := budgetClient(t, srv, 1)
	ss := openInTurn(t, c, srv, 2)
	drain(t, ss[1:], 16)
	assert.Equal(t, int64(16), srv.sent.Load())
}

// TestReadBudgetKnowsEachSize: every message is counted before it is
// received, at its own length, however much larger than the ones before
// it is (a microbatch's small last messages, then the next one's large
// first), so that what the streams hold never exceeds the budget.
func TestReadBudgetKnowsEachSize(t *testing.T) {
	const streams, batches = 4, 25
	mem := memory.NewGoAllocator()
	var a attemptScript
	for i := range batches {
		pad := 100 // a large batch after every four small ones
		if i%5 == 4 {
			pad = 400 << 10
		}
		rec := makeRecord(mem, uint64(i), 1, pad)
		t.Cleanup(rec.Release)
		a.msgs = append(a.msgs, msg{rec: rec, md: md(t, false, R(uint64(i), uint64(i), 0))})
	}
	a.hang = true
	srv := newScriptServer(a, a, a, a)
	c := budgetClient(t, srv, 3)
	ss := openInTurn(t, c, srv, streams)

	var maxHeld atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := c.ReadBudgetStats().Held; h > maxHeld.Load() {
				maxHeld.Store(h)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	drain(t, ss, batches)
	close(stop)
	<-sampled
	st := c.ReadBudgetStats()
	assert.Zero(t, st.Unsized, "messages counted only once they were in")
	assert.LessOrEqual(t, maxHeld.Load(), st.Limit, "held beyond the budget")
	assert.Positive(t, maxHeld.Load())
}

// TestReadBudgetTagsItsCalls: with a read budget, each DoGet carries the
// tag that binds its HTTP/2 stream to the call whose message sizes the
// Client reads (one tag per call); without one, no call is tagged, and
// nothing keeps sizes that no one would take.
func TestReadBudgetTagsItsCalls(t *testing.T) {
	for _, budget := range []int64{0, 1 << 20} {
		srv := newScriptServer(attemptScript{msgs: []msg{W(t, R(0, 0, 0))}})
		c := newClient(t, serve(t, srv), func(c *source.Config) { c.ReadAheadBytes = budget }, source.Deps{})
		for range 2 {
			s, err := c.Query(t.Context(), "SELECT 1")
			require.NoError(t, err)
			assert.True(t, next(t, s).complete)
			require.NoError(t, s.Close())
		}
		var tags []string
		for _, call := range srv.Calls() {
			if call.method == "DoGet" {
				tags = append(tags, call.md.Get("amp-bridge-call")...)
			}
		}
		if budget == 0 {
			assert.Empty(t, tags, "a call tagged without a budget")
			continue
		}
		require.Len(t, tags, 2)
		assert.NotEqual(t, tags[0], tags[1], "two calls, one tag")
	}
}
