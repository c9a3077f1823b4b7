package sink

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// countingOwner counts Release calls.
type countingOwner struct{ n atomic.Int64 }

func (o *countingOwner) Release() { o.n.Add(1) }

// TestRecordOwnerReleased checks that a record's Owner is released exactly
// once per Produce call: once the record is acknowledged (before Flush
// returns), when an abort drops it, and at once when Produce refuses it;
// and that a record's Timestamp reaches Kafka as given.
func TestRecordOwnerReleased(t *testing.T) {
	c, cfg := newCluster(t)
	a := newAdmin(t, cfg)
	_, err := a.EnsureTopics(testCtx(t), TopicSpec{Name: "own", Kind: TopicData, Partitions: 1, ReplicationFactor: 1})
	require.NoError(t, err)
	p := newProducer(t, cfg, "own", Deps{})
	ctx := testCtx(t)
	ts := time.Now().Truncate(time.Millisecond).Add(-time.Second)

	var acked countingOwner
	require.NoError(t, p.Begin())
	for i := range 20 {
		require.NoError(t, p.Produce(ctx, Record{Topic: "own", Key: []byte("k"), Value: fmt.Appendf(nil, "%d", i),
			Timestamp: ts, Owner: &acked}))
	}
	_, err = p.Flush(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(20), acked.n.Load(), "every acknowledged record is released by the time Flush returns")
	_, err = p.Commit(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(20), acked.n.Load(), "released once, not again at the commit")
	recs := consumeCommitted(t, cfg, "own")
	require.Len(t, recs, 20)
	for _, r := range recs {
		assert.True(t, r.Timestamp.Equal(ts), "timestamp %s, want %s", r.Timestamp, ts)
	}

	// Refused: no open transaction.
	var refused countingOwner
	require.Error(t, p.Produce(ctx, Record{Topic: "own", Key: []byte("k"), Owner: &refused}))
	require.Error(t, p.Produce(ctx, Record{Topic: "own", Key: nil, Owner: &refused}))
	assert.Equal(t, int64(2), refused.n.Load(), "a refused record is released at once")

	// Dropped by an abort: the broker holds the produce requests back.
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(50 * time.Millisecond)
		return nil, nil, false
	})
	var aborted countingOwner
	require.NoError(t, p.Begin())
	for i := range 10 {
		require.NoError(t, p.Produce(ctx, Record{Topic: "own", Key: []byte("k"), Value: fmt.Appendf(nil, "%d", i), Owner: &aborted}))
	}
	require.NoError(t, p.Abort(ctx))
	assert.Equal(t, int64(10), aborted.n.Load(), "records dropped or failed by the abort are released")
}
