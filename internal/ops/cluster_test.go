package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// TestClusterStatusCrossChecks: a stream's owner is the live member the
// group assigned it to, with its claim's generation and since; a claim
// of a member that left, or of a live member that no longer owns the
// stream, is stale; a stream nobody owns says why.
func TestClusterStatusCrossChecks(t *testing.T) {
	gc := sink.GroupConfig{Group: "g", Topic: "g.cluster"}
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a := sink.ClusterMember{ID: "a", InstanceID: "pod-a", ClientID: "amp-kafka-bridge", Host: "/10.0.0.1",
		Items: []sink.GroupItem{{ID: "s1", Weight: 4}, {ID: "s1#backfill.0", Weight: 0}, {ID: "s1#backfill.1", Weight: 4}, {ID: "s2", Weight: 1}, {ID: "s3", Weight: 2}},
		Owns:  []string{"s1", "s1#backfill.1"}}
	b := sink.ClusterMember{ID: "b", ClientID: "amp-kafka-bridge", Host: "/10.0.0.2",
		Items: []sink.GroupItem{{ID: "s1", Weight: 1}, {ID: "s1#backfill.0", Weight: 0}, {ID: "s1#backfill.1", Weight: 0}, {ID: "s2", Weight: 1}, {ID: "s3", Weight: 2}},
		Owns:  []string{"s1#backfill.0", "s2"}}
	claims := map[string]sink.Claim{
		"s1":            {Item: "s1", Member: "a", Instance: "pod-a", Host: "host-a", Generation: 7, Since: since},
		"s2":            {Item: "s2", Member: "a", Generation: 5, Since: since}, // s2 moved to b, which has not claimed it yet
		"s3":            {Item: "s3", Member: "gone", Host: "host-gone", Generation: 4, Since: since},
		"s1#backfill.0": {Item: "s1#backfill.0", Member: "b", Generation: 7, Since: since},
	}
	streams := []config.StreamConfig{{ID: "s1", Weight: 1}, {ID: "s2"}, {ID: "s3", Weight: 2}, {ID: "s4", Weight: 3}}
	for _, tc := range []struct {
		name  string
		state sink.ClusterState
		check func(t *testing.T, st ClusterStatus)
	}{
		{"stable", sink.ClusterState{State: "Stable", Protocol: "amp-bridge-weighted-v1", Members: []sink.ClusterMember{a, b}, Claims: claims},
			func(t *testing.T, st ClusterStatus) {
				s1, _ := st.Owner("s1")
				require.NotNil(t, s1.Owner)
				assert.Equal(t, "a", s1.Owner.ID)
				assert.Equal(t, "pod-a", s1.Owner.InstanceID)
				assert.Equal(t, int32(7), s1.Generation)
				assert.Equal(t, since, s1.Since)
				assert.Equal(t, "host-a", s1.Hostname)
				assert.Equal(t, 4, s1.Weight, "its owner's reported weight (backfilling there)")
				assert.Nil(t, s1.Stale)
				require.Len(t, s1.Workers, 2, "its backfill workers, items of their own")
				assert.Equal(t, "s1#backfill.0", s1.Workers[0].Stream)
				require.NotNil(t, s1.Workers[0].Owner)
				assert.Equal(t, "b", s1.Workers[0].Owner.ID)
				assert.Equal(t, int32(7), s1.Workers[0].Generation)
				assert.Zero(t, s1.Workers[0].Weight, "an idle worker weighs 0")
				assert.Equal(t, "a", s1.Workers[1].Owner.ID)
				assert.Equal(t, 4, s1.Workers[1].Weight, "its owner's report wins")
				s2w, _ := st.Owner("s2")
				assert.Empty(t, s2w.Workers)

				s2, _ := st.Owner("s2")
				require.NotNil(t, s2.Owner)
				assert.Equal(t, "b", s2.Owner.ID)
				assert.Zero(t, s2.Generation, "b has not claimed it yet")
				require.NotNil(t, s2.Stale)
				assert.Equal(t, "a", s2.Stale.Member)
				assert.Contains(t, s2.StaleWhy, "no longer owns")

				s3, _ := st.Owner("s3")
				assert.Nil(t, s3.Owner)
				require.NotNil(t, s3.Stale)
				assert.Equal(t, "gone", s3.Stale.Member)
				assert.Equal(t, "its member is no longer in the group", s3.StaleWhy)
				assert.Contains(t, s3.NoOwner, "was assigned it")

				s4, _ := st.Owner("s4")
				assert.Nil(t, s4.Owner)
				assert.Equal(t, 3, s4.Weight, "no member reported it: the configured weight")
				assert.Contains(t, s4.NoOwner, "no member of cluster group \"g\" has the stream in its configuration")

				var out strings.Builder
				st.WriteText(&out)
				for _, so := range st.Streams {
					so.WriteText(&out)
				}
				t.Log(out.String())
				assert.Contains(t, out.String(), "s3: no owner: ")
				assert.Contains(t, out.String(), "  backfill worker s1#backfill.0: owner member b ")
				assert.Contains(t, out.String(), "member b (instance none, host /10.0.0.2, client amp-kafka-bridge): owns s1#backfill.0, s2")
			}},
		{"rebalancing", sink.ClusterState{State: "PreparingRebalance", Members: []sink.ClusterMember{b}, Claims: claims},
			func(t *testing.T, st ClusterStatus) {
				s1, _ := st.Owner("s1")
				assert.Nil(t, s1.Owner)
				assert.Contains(t, s1.NoOwner, "rebalancing")
				require.NotNil(t, s1.Stale)
			}},
		{"empty", sink.ClusterState{State: "Empty", Claims: claims},
			func(t *testing.T, st ClusterStatus) {
				for _, so := range st.Streams {
					assert.Nil(t, so.Owner)
					assert.Contains(t, so.NoOwner, "no member of cluster group \"g\" is running (group state Empty)")
				}
			}},
		{"never ran", sink.ClusterState{State: "Dead", NoTopic: true},
			func(t *testing.T, st ClusterStatus) {
				for _, so := range st.Streams {
					assert.Contains(t, so.NoOwner, "has run yet")
					assert.Nil(t, so.Stale)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := clusterStatus(tc.state, gc, streams)
			require.Len(t, st.Streams, len(streams))
			tc.check(t, st)
		})
	}
}
