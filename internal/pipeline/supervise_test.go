package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// TestSupervisorBackoff runs the restart loop on virtual time: the pauses
// double from min up to max, start over after a run longer than 10×max, a
// permanent error ends the loop with it, and cancellation ends it with nil.
func TestSupervisorBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const minPause, maxPause = 100 * time.Millisecond, time.Second
		var pauses []time.Duration
		sup := supervisor{min: minPause, max: maxPause, now: time.Now,
			restarted: func(_ error, p time.Duration) { pauses = append(pauses, p) }}
		runs := 0
		var starts []time.Time
		err := sup.run(t.Context(), func(context.Context) error {
			runs++
			starts = append(starts, time.Now())
			switch runs {
			case 6:
				time.Sleep(11 * maxPause) // a long, good run
				return errors.New("broker gone")
			case 8:
				return fmt.Errorf("stream s: %w", reorg.ErrUnrecoverable)
			}
			return errors.New("transient")
		})
		require.ErrorIs(t, err, reorg.ErrUnrecoverable)
		assert.Equal(t, 8, runs)
		want := []time.Duration{minPause, 2 * minPause, 4 * minPause, 8 * minPause, maxPause, minPause, 2 * minPause}
		assert.Equal(t, want, pauses)
		for i := 1; i < len(starts); i++ {
			gap := starts[i].Sub(starts[i-1])
			if i == 6 {
				gap -= 11 * maxPause
			}
			assert.Equal(t, want[i-1], gap, "pause before run %d", i+1)
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- sup.run(ctx, func(context.Context) error { return errors.New("transient") })
		}()
		synctest.Wait() // the loop sleeps in its pause
		cancel()
		require.NoError(t, <-done, "cancellation ends the loop without an error")

		assert.ErrorIs(t, sup.run(t.Context(), func(context.Context) error { return fmt.Errorf("x: %w", config.ErrInvalid) }),
			config.ErrInvalid, "a configuration error is permanent")
	})
}

// TestPollHead runs the head poller on virtual time: it asks Amp at start
// and then every head_poll_interval, and sets behind_head_blocks from the
// committed cursor, which the run loop publishes after each commit.
func TestPollHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		var calls atomic.Int64
		var head atomic.Uint64
		head.Store(100)
		s := New(config.StreamConfig{ID: "s", SQL: "SELECT 1", HeadPollInterval: 30 * time.Second},
			Deps{Metrics: NewMetrics(reg), Heads: func(context.Context, string, ...source.StreamOption) (map[string]uint64, error) {
				calls.Add(1)
				return map[string]uint64{"mainnet": head.Load()}, nil
			}})
		s.committedCursor.Store(reorg.Cursor{"mainnet": {Number: 90}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); s.pollHead(ctx) }()
		synctest.Wait()
		assert.Equal(t, int64(1), calls.Load(), "asked at start")
		assert.InDelta(t, 10, testutil.ToFloat64(s.deps.Metrics.behindHead.WithLabelValues("s", "mainnet")), 0)

		s.committedCursor.Store(reorg.Cursor{"mainnet": {Number: 99}})
		head.Store(120)
		time.Sleep(29 * time.Second)
		synctest.Wait()
		assert.Equal(t, int64(1), calls.Load(), "not before the interval")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, int64(2), calls.Load())
		assert.InDelta(t, 21, testutil.ToFloat64(s.deps.Metrics.behindHead.WithLabelValues("s", "mainnet")), 0)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		assert.Equal(t, int64(4), calls.Load())
		cancel()
		<-done
	})
}
