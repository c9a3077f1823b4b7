package main

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
)

var backfillStressRuns = flag.Int("backfill.stress", 0, "runs of TestRunBackfillStress (0 skips it)")

// TestRunBackfillStress backfills, goes live and then mines, reorgs and
// restarts the bridge at random, with an occasional lost checkpoint store;
// verify must find the topic exact. Run with -backfill.stress=N.
func TestRunBackfillStress(t *testing.T) {
	if *backfillStressRuns == 0 {
		t.Skip("run with -backfill.stress=N")
	}
	for run := range *backfillStressRuns {
		seed := uint64(time.Now().UnixNano())
		t.Logf("run %d seed %d", run, seed)
		r := rand.New(rand.NewPCG(seed, 1))
		h := newBackfillHarness(t, fakeServices(t), 120, config.BackfillConfig{Workers: 2, StepBlocks: 10, HandoverMargin: 8})
		stop := h.run()
		for step := range 12 {
			switch r.IntN(4) {
			case 0:
				d := 1 + r.IntN(5)
				require.NoError(t, h.sim.Reorg(d, d+1))
			default:
				h.sim.Mine(1 + r.IntN(3))
			}
			time.Sleep(time.Duration(r.IntN(150)) * time.Millisecond)
			if r.IntN(4) == 0 {
				require.NoError(t, stop(), "step %d", step)
				if r.IntN(3) == 0 {
					h.svc.flush(t)
				}
				stop = h.run()
			}
		}
		h.waitHead()
		require.NoError(t, stop())
		rep := h.verify()
		requireClean(t, rep)
		if t.Failed() {
			t.Fatalf("run %d seed %d failed", run, seed)
		}
	}
}
