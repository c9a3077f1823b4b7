package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// TestTxnDueAtRetractions checks that a transaction carrying a reorg's
// retractions commits at its first complete watermark, however much of
// its budget is left, and that nothing else skips the budget.
func TestTxnDueAtRetractions(t *testing.T) {
	now := time.Now()
	b := sink.Budget{MaxRows: 1000, MaxAge: time.Hour}
	wm := []pendingBatch{{wm: reorg.Event{BatchID: "b", Seq: 1}, rows: 10}}
	undo := []offsets.Undo{{Stream: "s", Sequence: 1, Cause: "reorg"}}
	for _, tc := range []struct {
		name string
		log  txnLog
		want bool
	}{
		{"a watermark with budget left waits", txnLog{began: now, rows: 10, pending: wm}, false},
		{"retractions at a watermark commit at once", txnLog{began: now, rows: 10, pending: wm, undo: undo}, true},
		{"retractions before the replacement's watermark wait for it", txnLog{began: now, rows: 10, undo: undo}, false},
		{"retractions with data after the watermark wait for the next", txnLog{began: now, rows: 10, pending: wm, undo: undo, dirty: true}, false},
		{"a used-up budget commits", txnLog{began: now.Add(-2 * time.Hour), rows: 10, pending: wm}, true},
		{"max_rows commits", txnLog{began: now, rows: 1000, pending: wm}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.log.due(b, now))
		})
	}
}

// TestNextDoesNotWaitWithRetractions checks that the run loop does not wait
// for Amp, for the rest of the budget, when the open transaction carries
// retractions and ends at a watermark: next says the commit is due at once.
func TestNextDoesNotWaitWithRetractions(t *testing.T) {
	r := New(config.StreamConfig{ID: "s", Transaction: config.TxnBudget{MaxRows: 1000, MaxAge: time.Hour}}, Deps{Metrics: NewMetrics(nil)})
	r.txn.reset()
	r.txn.began = time.Now()
	r.txn.pending = []pendingBatch{{wm: reorg.Event{BatchID: "b", Seq: 1}, rows: 10}}
	r.txn.undo = []offsets.Undo{{Stream: "s", Sequence: 1, Cause: "reorg"}}
	// r.stream is nil: reading Amp here would fail the test.
	_, err := r.next(t.Context())
	require.ErrorIs(t, err, errCommitDue)
}
