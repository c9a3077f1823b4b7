package bridgetest

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
)

// PublishAcrossSchemaChange publishes a stream whose query's schema gains a
// column: the simulator hides column (a table.column of
// ampsim.Config.HiddenColumns) while name's first run publishes, then shows
// it, and a second run of the same config (a restart) goes on with it; a
// reorg of 4 blocks then retracts batches from both sides of the change.
// After bridge verify passed with retractions, it returns the run, the head
// committed last and the blocks whose live rows were written with the first
// schema (without column; a reorg inside a batch of the first run
// re-publishes its unchanged blocks with the new one).
func PublishAcrossSchemaChange(ctx context.Context, t testing.TB, c *Changelog, name, column string) (s *Stack, upTo uint64, old map[uint64]bool) {
	t.Helper()
	require.NoError(t, c.Sim.SetHiddenColumns([]string{column}))
	s, p := c.StartRun(t, name)
	// One block at a time, each committed before the next: the reorg
	// below replaces the last one only, not the batch of the history.
	s.RequireCaughtUp(ctx, t, p)
	for range 3 {
		c.Sim.Mine(1)
		s.RequireCaughtUp(ctx, t, p)
	}
	require.Equal(t, 0, p.Term(30*time.Second), "bridge exit code; log tail:\n%s", p.Tail(30))

	require.NoError(t, c.Sim.SetHiddenColumns(nil))
	log := filepath.Join(s.Dir, "bridge-after.log")
	KeepLogOnFailure(t, log, name+"-after")
	p = Start(t, s.Bin, s.CfgPath, log)
	for range 3 {
		c.Sim.Mine(1)
		s.RequireCaughtUp(ctx, t, p)
	}
	require.NoError(t, c.Sim.Reorg(4, 5)) // 3 blocks after the change, 1 before
	upTo = s.RequireCaughtUp(ctx, t, p)
	require.Equal(t, 0, p.Term(30*time.Second), "bridge exit code; log tail:\n%s", p.Tail(30))

	v := s.Verify(t)
	require.Equal(t, 0, v.Exit, "bridge verify:\n%s", v.Out)
	require.Positive(t, v.Retracted, "the reorg retracted nothing; bridge verify:\n%s", v.Out)

	ids := s.liveSchemaIDs(ctx, t)
	rc, err := sr.NewClient(sr.URLs(s.Registry))
	require.NoError(t, err)
	versions, err := rc.Schemas(ctx, encode.ValueSubject(s.Topic))
	require.NoError(t, err)
	require.Len(t, versions, 2, "the value subject's versions: before and after the change")
	first := versions[0].ID
	old = map[uint64]bool{}
	for b, id := range ids {
		if id == first {
			old[b] = true
		}
	}
	require.NotEmpty(t, old, "no live rows of the first schema")
	require.Less(t, len(old), len(ids), "no live rows of the second schema")
	return s, upTo, old
}

// liveSchemaIDs reads the run's data topic (read_committed) and returns,
// per block of a live batch (one with inserts and neither retractions nor a
// tombstone), the registry id of the schema its rows were written with.
func (s *Stack) liveSchemaIDs(ctx context.Context, t testing.TB) map[uint64]int {
	t.Helper()
	type batch struct {
		lo, hi uint64
		id     int
		dead   bool
	}
	batches := map[string]*batch{}
	s.EachCommitted(ctx, t, func(r *kgo.Record) {
		var id, op, rng string
		for _, h := range r.Headers {
			switch h.Key {
			case encode.HeaderBatchID:
				id = string(h.Value)
			case encode.HeaderOp:
				op = string(h.Value)
			case encode.HeaderRange:
				rng = string(h.Value)
			}
		}
		b := batches[id]
		if b == nil {
			b = &batch{}
			batches[id] = b
		}
		if r.Value == nil || op == "d" {
			b.dead = true
			return
		}
		a, z, _ := strings.Cut(rng, "-")
		b.lo, _ = strconv.ParseUint(a, 10, 64)
		b.hi, _ = strconv.ParseUint(z, 10, 64)
		f, _, err := encode.ParseHeader(r.Value)
		require.NoError(t, err)
		b.id, _ = f.ID()
	})
	out := map[uint64]int{}
	for _, b := range batches {
		if b.dead || b.id == 0 {
			continue
		}
		for n := b.lo; n <= b.hi; n++ {
			out[n] = b.id
		}
	}
	return out
}

// EachCommitted calls fn with each record of the run's data topic
// (read_committed), reading every partition to its end offset: not until
// the fetches go quiet, since on a loaded machine the first fetch can
// take longer than any quiet period. With the control records kept, a
// partition is read once the record at end-1 (its last commit marker) has
// come; fn sees no control record.
func (s *Stack) EachCommitted(ctx context.Context, t testing.TB, fn func(*kgo.Record)) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	require.NoError(t, err)
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, s.Topic)
	require.NoError(t, err)
	require.NoError(t, ends.Error())
	offsets := map[string]map[int32]kgo.Offset{s.Topic: {}}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		offsets[s.Topic][o.Partition] = kgo.NewOffset().AtStart()
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(offsets))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: partitions %v not read to their end", s.Topic, left)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
}
