package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// fakeHealth is a stream's health that reports fixed calls in flight.
type fakeHealth struct{ calls []string }

func (fakeHealth) Standby(string)    {}
func (fakeHealth) Starting(string)   {}
func (h fakeHealth) Calls() []string { return h.calls }

// TestReleaseNamesWhatAStuckStreamDoes: a lost stream that outlives the
// release bound is named in the warning with its calls in flight; one that
// stops in time is not, and no warning is logged when all stop.
func TestReleaseNamesWhatAStuckStreamDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		health := map[string]fakeHealth{"quick": {}, "stuck": {calls: []string{"kafka: flushing for 2.1s"}}}
		m := New(Config{ReleaseTimeout: 5 * time.Second}, Deps{
			Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
			Health: func(id string) Health { return health[id] },
		})
		unblock := make(chan struct{})
		m.streamCtx = func() (context.Context, context.CancelCauseFunc) { return context.WithCancelCause(t.Context()) }
		m.d.Run = func(ctx context.Context, id string) error {
			if id == "stuck" {
				<-unblock
			}
			<-ctx.Done()
			return nil
		}
		m.mu.Lock()
		m.startLocked("quick")
		m.startLocked("stuck")
		m.mu.Unlock()
		m.lost(t.Context(), []string{"quick", "stuck"})

		var warn struct {
			Msg      string
			Streams  []string
			InFlight map[string][]string `json:"in_flight"`
			Stacks   map[string][]string
		}
		for l := range strings.Lines(buf.String()) {
			if strings.Contains(l, "did not stop within the bound") {
				require.NoError(t, json.Unmarshal([]byte(l), &warn))
			}
		}
		assert.Equal(t, []string{"stuck"}, warn.Streams, buf.String())
		assert.Equal(t, map[string][]string{"stuck": {"kafka: flushing for 2.1s"}}, warn.InFlight)
		// Where it waits: the stack of the stuck stream's goroutine, which
		// carries its pprof label, and no other stream's.
		assert.Equal(t, []string{"stuck"}, slices.Collect(maps.Keys(warn.Stacks)))
		require.Len(t, warn.Stacks["stuck"], 1, warn.Stacks)
		assert.Regexp(t, `^1 goroutine: .*TestReleaseNamesWhatAStuckStreamDoes.*\(member_test\.go:\d+\) < .*runStream \(member\.go:\d+\)`,
			warn.Stacks["stuck"][0])
		close(unblock)
		synctest.Wait()

		// Every stream stops in time: no warning.
		buf.Reset()
		m.mu.Lock()
		m.startLocked("quick")
		m.mu.Unlock()
		m.lost(t.Context(), []string{"quick"})
		assert.NotContains(t, buf.String(), "did not stop within the bound")
		assert.Contains(t, buf.String(), "released streams to the cluster")
	})
}

// TestReleaseCause: the streams of a member whose session ended are
// canceled with ErrLost (a sink.ErrFenced: they stop without committing),
// those revoked in a rebalance or stopped on leaving with a plain cancel
// (they commit at a watermark or abort).
func TestReleaseCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(Config{ReleaseTimeout: 5 * time.Second}, Deps{
			Logger: slog.New(slog.DiscardHandler),
			Health: func(string) Health { return fakeHealth{} },
		})
		m.streamCtx = func() (context.Context, context.CancelCauseFunc) { return context.WithCancelCause(t.Context()) }
		var mu sync.Mutex
		causes := map[string]error{}
		m.d.Run = func(ctx context.Context, id string) error {
			<-ctx.Done()
			mu.Lock()
			causes[id] = context.Cause(ctx)
			mu.Unlock()
			return nil
		}
		m.mu.Lock()
		for _, id := range []string{"lost", "revoked", "left"} {
			m.startLocked(id)
		}
		m.mu.Unlock()
		m.lost(t.Context(), []string{"lost"})
		m.revoked(t.Context(), []string{"revoked"})
		m.stopAll(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		assert.ErrorIs(t, causes["lost"], ErrLost)
		assert.ErrorIs(t, causes["lost"], sink.ErrFenced)
		for _, id := range []string{"revoked", "left"} {
			assert.ErrorIs(t, causes[id], context.Canceled, id)
			assert.NotErrorIs(t, causes[id], sink.ErrFenced, id)
		}
	})
}

// A backfill worker this member knows to be idle (its stream has gone live)
// weighs 0, known, whoever owns it; one it does not know about is assumed
// busy; one backfilling here weighs its busy weight.
func TestWeightsOfBackfillWorkers(t *testing.T) {
	idle := map[string]bool{"s#backfill.0": true}
	backfilling := map[string]bool{"u#backfill.0": true}
	m := New(Config{BackfillWeight: 3, Streams: []Stream{
		{ID: "s", Weight: 2}, {ID: "s#backfill.0", Busy: 2}, {ID: "t#backfill.0", Busy: 2}, {ID: "u#backfill.0", Busy: 2},
	}}, Deps{
		Idle:        func(id string) bool { return idle[id] },
		Backfilling: func(id string) bool { return backfilling[id] },
	})
	assert.Equal(t, []sink.GroupItem{
		{ID: "s", Weight: 2},
		{ID: "s#backfill.0", Weight: 0, Known: true},
		{ID: "t#backfill.0", Weight: 6},
		{ID: "u#backfill.0", Weight: 6},
	}, m.weights())
}
