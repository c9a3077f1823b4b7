package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func TestProgressMath(t *testing.T) {
	tests := []struct {
		name    string
		p       Progress
		frac    float64
		rate    float64
		rateOK  bool
		eta     time.Duration
		etaOK   bool
		display string
	}{
		{name: "not started", p: Progress{BlocksTotal: 1000}, etaOK: false,
			display: "0/1000 blocks (0.0%), ETA unknown"},
		{name: "a quarter in 10s", p: Progress{BlocksTotal: 1000, BlocksDone: 250, Rows: 5000, Elapsed: 10 * time.Second},
			frac: 0.25, rate: 500, rateOK: true, eta: 30 * time.Second, etaOK: true,
			display: "250/1000 blocks (25.0%), 500 rows/s, ETA 30s"},
		{name: "resumed: only this run's blocks set the rate",
			p:    Progress{BlocksTotal: 1000, BlocksDone: 600, BlocksAtStart: 500, Rows: 100, Elapsed: 20 * time.Second},
			frac: 0.6, rate: 5, rateOK: true, eta: 80 * time.Second, etaOK: true,
			display: "600/1000 blocks (60.0%), 5 rows/s, ETA 1m20s"},
		{name: "resumed, nothing run yet", p: Progress{BlocksTotal: 1000, BlocksDone: 500, BlocksAtStart: 500, Elapsed: time.Second},
			frac: 0.5, rateOK: true, display: "500/1000 blocks (50.0%), 0 rows/s, ETA unknown"},
		{name: "done", p: Progress{BlocksTotal: 10, BlocksDone: 10, Rows: 30, Elapsed: 3 * time.Second},
			frac: 1, rate: 10, rateOK: true, etaOK: true, display: "10/10 blocks (100.0%), 10 rows/s"},
		{name: "empty span", p: Progress{}, frac: 1, etaOK: true, display: "0/0 blocks (100.0%)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.frac, tt.p.Fraction(), 1e-9)
			rate, ok := tt.p.RowsPerSec()
			assert.Equal(t, tt.rateOK, ok)
			assert.InDelta(t, tt.rate, rate, 1e-9)
			eta, ok := tt.p.ETA()
			assert.Equal(t, tt.etaOK, ok)
			assert.Equal(t, tt.eta, eta)
			assert.Equal(t, tt.display, tt.p.String())
		})
	}
}

func TestProgressBar(t *testing.T) {
	p := Progress{BlocksTotal: 100, BlocksDone: 50, Rows: 10, Elapsed: time.Second}
	assert.Equal(t, "\rbackfill s [=====     ] 50/100 blocks (50.0%), 10 rows/s, ETA 1s\x1b[K", p.bar("s", 10))
}

func TestPartitionProgress(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	recs := []offsets.Partition{
		// Done, all of it by this run (from block 0), in 40s.
		{From: 0, To: 100, Done: true, UpdatedAt: t0.Add(40 * time.Second), RunStartedAt: t0, RunFrom: 0, Rows: 400},
		// Up to block 149 of [100, 200); this run started at block 120.
		{From: 100, To: 200, Last: &reorg.Point{Number: 149}, UpdatedAt: t0.Add(50 * time.Second), RunStartedAt: t0, RunFrom: 120, Rows: 100},
		// A record of an older version: counted as done before this run.
		{From: 200, To: 300, Last: &reorg.Point{Number: 209}, UpdatedAt: t0},
		// Not started.
		{From: 300, To: 400},
	}
	p := PartitionProgress(recs)
	assert.Equal(t, Progress{BlocksTotal: 400, BlocksDone: 160, BlocksAtStart: 20 + 10, Rows: 500, Elapsed: 50 * time.Second}, p)
	eta, ok := p.ETA()
	require.True(t, ok)
	assert.InDelta(t, float64(50*time.Second)*240/130, float64(eta), float64(time.Microsecond), "240 blocks left at 130 blocks per 50s")
	assert.Equal(t, Progress{}, PartitionProgress(nil))
}

// TestReportProgressOnVirtualTime: the reporter reports every interval,
// and stops (its goroutine returns) when its context ends.
func TestReportProgressOnVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var done atomic.Uint64
		start := time.Now()
		snap := func() Progress {
			return Progress{BlocksTotal: 100, BlocksDone: done.Load(), Elapsed: time.Since(start)}
		}
		var got []Progress
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			reportProgress(ctx, 10*time.Second, snap, func(p Progress) { got = append(got, p) })
		}()
		for range 3 {
			time.Sleep(5 * time.Second)
			done.Add(10)
			time.Sleep(5 * time.Second)
			synctest.Wait()
		}
		cancel()
		<-stopped
		require.Len(t, got, 3)
		for i, p := range got {
			assert.Equal(t, uint64(10*(i+1)), p.BlocksDone)
			assert.Equal(t, time.Duration(i+1)*10*time.Second, p.Elapsed)
		}
		eta, ok := got[2].ETA()
		require.True(t, ok)
		assert.Equal(t, 70*time.Second, eta, "70 blocks left at 1 block/s")
	})
}

// TestProgressReporter: lines carry the figures as attributes; with a
// ProgressBar the reports are redrawn bar lines and no log line.
func TestProgressReporter(t *testing.T) {
	var logs, bar bytes.Buffer
	p := Progress{BlocksTotal: 100, BlocksDone: 25, Rows: 250, Elapsed: 10 * time.Second}
	r := New(config.StreamConfig{ID: "s"}, Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	report, finish := r.progressReporter()
	report(p)
	finish()
	assert.Contains(t, logs.String(), `msg="backfill progress" stream=s blocks_done=25 blocks_total=100 percent=25.0 rows=250 elapsed=10s rows_per_s=25 eta=30s`)

	logs.Reset()
	r = New(config.StreamConfig{ID: "s"}, Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil)), ProgressBar: &bar})
	report, finish = r.progressReporter()
	report(p)
	report(p)
	finish()
	assert.Empty(t, logs.String())
	assert.Equal(t, 2, strings.Count(bar.String(), "\rbackfill s ["))
	assert.True(t, strings.HasSuffix(bar.String(), "\n"))
}
