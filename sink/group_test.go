package sink

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// memberJoin is member id's JoinGroup of the coordination topic "coord",
// owning slots (slot → item) in generation gen.
func memberJoin(id string, gen int32, owned map[int32]string, items ...string) kmsg.JoinGroupResponseMember {
	b := &groupBalancer{topic: "coord", cur: owned, next: map[int32]string{}, log: slog.New(slog.DiscardHandler),
		items: func() []GroupItem {
			var out []GroupItem
			for _, it := range items {
				out = append(out, GroupItem{ID: it, Weight: 1})
			}
			return out
		}}
	var slots []int32
	for s := range owned {
		slots = append(slots, s)
	}
	cur := map[string][]int32{}
	if len(slots) > 0 {
		cur["coord"] = slots
	}
	return kmsg.JoinGroupResponseMember{MemberID: id, ProtocolMetadata: b.JoinGroupMetadata([]string{"coord"}, cur, gen)}
}

// balance runs a round with plan as the planner and returns, per member,
// slot → item of its assignment.
func balance(t *testing.T, plan GroupPlanner, members ...kmsg.JoinGroupResponseMember) (map[string]map[int32]string, []GroupMember) {
	t.Helper()
	var seen []GroupMember
	b := &groupBalancer{topic: "coord", log: slog.New(slog.DiscardHandler), plan: func(ms []GroupMember) map[string][]string {
		seen = ms
		return plan(ms)
	}}
	cb, err := kgo.NewConsumerBalancer(b, members)
	require.NoError(t, err)
	out := map[string]map[int32]string{}
	for _, a := range b.Balance(cb, map[string]int32{"coord": 4}).IntoSyncAssignment() {
		parse := &groupBalancer{topic: "coord"}
		tps, err := parse.ParseSyncAssignment(a.MemberAssignment)
		require.NoError(t, err)
		out[a.MemberID] = map[int32]string{}
		for _, s := range tps["coord"] {
			id, ok := parse.next[s]
			require.True(t, ok, "slot %d of %s is named in the assignment", s, a.MemberID)
			out[a.MemberID][s] = id
		}
		require.Len(t, parse.next, len(tps["coord"]), "every named slot is assigned")
	}
	return out, seen
}

// A stream planned away from its owner is given to nobody in that round:
// its owner loses it and releases it first (cooperative), and the next
// round gives it to the new member on a free slot. The streams that stay
// keep their slots.
func TestGroupBalancerHoldsAMovingStreamBackOneRound(t *testing.T) {
	moveB := func([]GroupMember) map[string][]string { return map[string][]string{"m1": {"a"}, "m2": {"b"}} }
	got, seen := balance(t, moveB,
		memberJoin("m1", 5, map[int32]string{0: "a", 1: "b"}, "a", "b"),
		memberJoin("m2", -1, nil, "a", "b"))
	assert.Equal(t, map[int32]string{0: "a"}, got["m1"], "m1 keeps a on its slot and loses b")
	assert.Empty(t, got["m2"], "b is not given to m2 while m1 holds it")
	require.Len(t, seen, 2)
	assert.Equal(t, []string{"a", "b"}, seen[0].Owned, "the planner sees what m1 owns")

	got, _ = balance(t, moveB,
		memberJoin("m1", 6, map[int32]string{0: "a"}, "a", "b"),
		memberJoin("m2", 6, nil, "a", "b"))
	assert.Equal(t, map[int32]string{0: "a"}, got["m1"])
	require.Len(t, got["m2"], 1)
	for s, id := range got["m2"] {
		assert.Equal(t, "b", id)
		assert.NotEqual(t, int32(0), s, "b gets a slot nobody holds")
	}
}

// A member that missed rounds may still claim a stream another member owns
// now: the newer generation's claim wins, and the stale one is revoked.
func TestGroupBalancerNewestClaimWins(t *testing.T) {
	keep := func(ms []GroupMember) map[string][]string {
		out := map[string][]string{}
		for _, m := range ms {
			out[m.ID] = m.Owned
		}
		return out
	}
	got, seen := balance(t, keep,
		memberJoin("stale", 3, map[int32]string{2: "a"}, "a"),
		memberJoin("fresh", 7, map[int32]string{1: "a"}, "a"))
	owners := 0
	for _, m := range seen {
		if len(m.Owned) > 0 {
			owners++
			assert.Equal(t, "fresh", m.ID)
		}
	}
	assert.Equal(t, 1, owners)
	assert.Equal(t, map[int32]string{1: "a"}, got["fresh"])
	assert.Empty(t, got["stale"])
}

func TestGroupMetadataRoundTrip(t *testing.T) {
	m := memberJoin("m1", 2, map[int32]string{3: "x"}, "x", "y")
	var meta kmsg.ConsumerMemberMetadata
	require.NoError(t, meta.ReadFrom(m.ProtocolMetadata))
	var um memberMeta
	require.NoError(t, json.Unmarshal(meta.UserData, &um))
	assert.Equal(t, map[string]string{"3": "x"}, um.Owned)
	assert.Len(t, um.Items, 2)
}
