package sink

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// TestProduceInterleavedGroupsAndOwners checks the bookkeeping that runs
// of records share (the delivery callback of one group and owner, the
// group and op of the previous record): records of groups, owners and ops
// interleaved over 3 partitions get each group's own spans and count, each
// owner its own releases, and each op its own records_written_total.
func TestProduceInterleavedGroupsAndOwners(t *testing.T) {
	_, cfg := newCluster(t)
	a := newAdmin(t, cfg)
	_, err := a.EnsureTopics(testCtx(t), TopicSpec{Name: "mix", Kind: TopicData, Partitions: 3, ReplicationFactor: 1})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	p := newProducer(t, cfg, "mix", Deps{Registerer: reg})
	ctx := testCtx(t)

	var o1, o2 countingOwner
	type run struct {
		group, op string
		owner     *countingOwner
		n         int
	}
	runs := []run{
		{"A", "c", &o1, 7}, {"B", "c", &o1, 5}, {"A", "r", &o2, 6}, {"", "r", &o2, 3},
		{"B", "c", nil, 4}, {"A", "c", &o1, 2}, {"C", "d", &o2, 1},
	}
	wantRecords := map[string]int{}
	wantReleased := map[*countingOwner]int64{}
	wantOps := map[string]float64{}
	require.NoError(t, p.Begin())
	i := 0
	for _, r := range runs {
		for range r.n {
			rec := Record{Topic: "mix", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s/%d", r.group, i),
				Group: r.group, Op: r.op}
			if r.owner != nil {
				rec.Owner = r.owner
				wantReleased[r.owner]++
			}
			require.NoError(t, p.Produce(ctx, rec))
			wantRecords[r.group]++
			wantOps[r.op]++
			i++
		}
	}
	c, err := p.Commit(ctx)
	require.NoError(t, err)
	assert.Equal(t, i, c.Records)
	assert.Equal(t, wantReleased[&o1], o1.n.Load(), "owner 1's releases")
	assert.Equal(t, wantReleased[&o2], o2.n.Load(), "owner 2's releases")
	require.Len(t, c.Groups, 3, "groups A, B and C; the untracked records have none")

	// Each group's spans are exactly the offsets of its records.
	want := map[string]map[int32][2]int64{}
	for _, r := range consumeCommitted(t, cfg, "mix") {
		g, _, _ := strings.Cut(string(r.Value), "/")
		if g == "" {
			continue
		}
		if want[g] == nil {
			want[g] = map[int32][2]int64{}
		}
		s, ok := want[g][r.Partition]
		if !ok {
			s = [2]int64{r.Offset, r.Offset}
		}
		want[g][r.Partition] = [2]int64{min(s[0], r.Offset), max(s[1], r.Offset)}
	}
	for _, g := range c.Groups {
		assert.Equal(t, wantRecords[g.Group], g.Records, "group %s records", g.Group)
		got := map[int32][2]int64{}
		for _, s := range g.Spans {
			got[s.Partition] = [2]int64{s.First, s.Last}
		}
		assert.Equal(t, want[g.Group], got, "group %s spans", g.Group)
	}
	for op, n := range wantOps {
		assert.InDelta(t, n, testutil.ToFloat64(p.m.recordsWritten.WithLabelValues("mix", op)), 0, "records_written_total{op=%q}", op)
	}
}
