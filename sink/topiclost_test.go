package sink

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestEnsureTopicsDataTopicLost: EnsureTopics reports the topic's id, and a
// data topic the stream has committed to is never created again: missing,
// recreated (another id) or shorter than the committed offsets, it is a
// *DataTopicLostError; without MustExist a missing topic is still created.
func TestEnsureTopicsDataTopicLost(t *testing.T) {
	_, cfg := newCluster(t)
	ctx := testCtx(t)
	a := newAdmin(t, cfg)
	spec := TopicSpec{Name: "data", Kind: TopicData, Partitions: 2, ReplicationFactor: 1}

	states, err := a.EnsureTopics(ctx, spec)
	require.NoError(t, err)
	require.True(t, states[0].Created)
	id := states[0].ID
	require.NotEmpty(t, id, "kfake has topic ids")
	got, err := a.TopicID(ctx, "data")
	require.NoError(t, err)
	assert.Equal(t, id, got)

	// Three committed records on partition 1.
	p := newProducer(t, cfg, "s1", Deps{})
	require.NoError(t, p.Begin())
	for i := range 3 {
		rec := dataRecord("data", "b1", i)
		require.NoError(t, p.Produce(ctx, rec))
	}
	c, err := p.Commit(ctx)
	require.NoError(t, err)
	g, ok := c.Group("b1")
	require.True(t, ok)
	sp := g.Spans[0]
	committed := map[int32]int64{sp.Partition: sp.Last + 1}

	kept := spec
	kept.MustExist, kept.ExpectedID, kept.CommittedEnd = true, id, committed
	states, err = a.EnsureTopics(ctx, kept)
	require.NoError(t, err, "the topic the stream committed to")
	assert.False(t, states[0].Created)
	assert.Equal(t, id, states[0].ID)

	short := kept
	short.CommittedEnd = map[int32]int64{sp.Partition: sp.Last + 100}
	_, err = a.EnsureTopics(ctx, short)
	var lost *DataTopicLostError
	require.ErrorAs(t, err, &lost)
	assert.Equal(t, sp.Partition, lost.Partition)
	assert.Contains(t, err.Error(), "below committed offset")

	// Deleted: refused, not created.
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, err = adm.DeleteTopic(ctx, "data")
	require.NoError(t, err)
	_, err = a.EnsureTopics(ctx, kept)
	require.ErrorIs(t, err, ErrDataTopicLost)
	require.ErrorAs(t, err, &lost)
	assert.True(t, lost.Missing)
	t.Logf("deleted: %v", err)
	_, err = a.TopicID(ctx, "data")
	require.ErrorIs(t, err, ErrDataTopicLost)

	// Recreated: another id.
	_, err = adm.CreateTopic(ctx, 2, 1, nil, "data")
	require.NoError(t, err)
	noSpans := kept
	noSpans.CommittedEnd = nil
	_, err = a.EnsureTopics(ctx, noSpans)
	require.ErrorAs(t, err, &lost)
	assert.Equal(t, id, lost.RecordedID)
	assert.NotEqual(t, id, lost.ID)
	assert.Contains(t, err.Error(), "was deleted or recreated (id "+id+", now ")
	// Without a recorded id, the end offsets tell.
	noID := kept
	noID.ExpectedID = ""
	_, err = a.EnsureTopics(ctx, noID)
	require.ErrorIs(t, err, ErrDataTopicLost)
	t.Logf("recreated: %v", err)

	// A fresh stream's topic is still created.
	states, err = a.EnsureTopics(ctx, TopicSpec{Name: "fresh", Kind: TopicData, Partitions: 1, ReplicationFactor: 1})
	require.NoError(t, err)
	assert.True(t, states[0].Created)
}
