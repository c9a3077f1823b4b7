package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

func items(ws map[string]int) []sink.GroupItem {
	var out []sink.GroupItem
	for id, w := range ws {
		out = append(out, sink.GroupItem{ID: id, Weight: w})
	}
	return out
}

func loads(plan map[string][]string, w map[string]int) map[string]int {
	out := map[string]int{}
	for m, ids := range plan {
		for _, id := range ids {
			out[m] += w[id]
		}
	}
	return out
}

// Every stream is given to exactly one member that has it.
func requireOneOwner(t *testing.T, plan map[string][]string, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, ids := range plan {
		for _, id := range ids {
			seen[id]++
		}
	}
	for _, id := range want {
		require.Equal(t, 1, seen[id], "stream %s has one owner in %v", id, plan)
	}
	require.Len(t, seen, len(want))
}

func TestPlanSpreadsByWeight(t *testing.T) {
	w := map[string]int{"a": 4, "b": 1, "c": 1, "d": 1, "e": 1}
	ms := []sink.GroupMember{{ID: "m1", Items: items(w)}, {ID: "m2", Items: items(w)}}
	plan := Plan(ms)
	requireOneOwner(t, plan, []string{"a", "b", "c", "d", "e"})
	l := loads(plan, w)
	assert.Equal(t, map[string]int{"m1": 4, "m2": 4}, l, "a weighs as much as the four others: %v", plan)
}

func TestPlanIsSticky(t *testing.T) {
	w := map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}
	ms := []sink.GroupMember{
		{ID: "m1", Items: items(w), Owned: []string{"a", "b"}},
		{ID: "m2", Items: items(w), Owned: []string{"c", "d"}},
	}
	plan := Plan(ms)
	assert.Equal(t, []string{"a", "b"}, plan["m1"])
	assert.Equal(t, []string{"c", "d"}, plan["m2"])

	// A third member joins: it takes one stream from one of them, and
	// nothing else moves.
	ms = append(ms, sink.GroupMember{ID: "m3", Items: items(w)})
	plan = Plan(ms)
	requireOneOwner(t, plan, []string{"a", "b", "c", "d"})
	require.Len(t, plan["m3"], 1)
	moved := 0
	for _, id := range plan["m1"] {
		if id != "a" && id != "b" {
			moved++
		}
	}
	for _, id := range plan["m2"] {
		if id != "c" && id != "d" {
			moved++
		}
	}
	assert.Zero(t, moved, "the streams that stay keep their owner: %v", plan)
	assert.Equal(t, 3, len(plan["m1"])+len(plan["m2"]))
}

func TestPlanOnlyGivesAStreamToAMemberThatHasIt(t *testing.T) {
	ms := []sink.GroupMember{
		{ID: "m1", Items: items(map[string]int{"a": 1, "b": 1, "new": 1})},
		{ID: "m2", Items: items(map[string]int{"a": 1, "b": 1})},
	}
	plan := Plan(ms)
	requireOneOwner(t, plan, []string{"a", "b", "new"})
	assert.Contains(t, plan["m1"], "new", "only m1's configuration has the new stream")
	// A member that no longer has a stream it owns loses it.
	ms = []sink.GroupMember{
		{ID: "m1", Items: items(map[string]int{"a": 1})},
		{ID: "m2", Items: items(map[string]int{"a": 1, "b": 1}), Owned: nil},
	}
	ms[0].Owned = []string{"a", "b"}
	plan = Plan(ms)
	assert.Equal(t, []string{"b"}, plan["m2"])
}

// An idle backfill worker weighs 0 at its owner, whatever the others
// assume, and 0-weight items are never moved for balance.
func TestPlanOwnersReportWins(t *testing.T) {
	ms := []sink.GroupMember{
		{ID: "m1", Items: items(map[string]int{"s": 1, "s#backfill.0": 0, "s#backfill.1": 0}), Owned: []string{"s", "s#backfill.0", "s#backfill.1"}},
		{ID: "m2", Items: items(map[string]int{"s": 1, "s#backfill.0": 4, "s#backfill.1": 4})},
	}
	plan := Plan(ms)
	assert.Equal(t, []string{"s", "s#backfill.0", "s#backfill.1"}, plan["m1"], "nothing worth moving: %v", plan)
	// Busy at its owner: the workers spread.
	ms[0].Items = items(map[string]int{"s": 1, "s#backfill.0": 4, "s#backfill.1": 4})
	plan = Plan(ms)
	l := loads(plan, map[string]int{"s": 1, "s#backfill.0": 4, "s#backfill.1": 4})
	assert.LessOrEqual(t, max(l["m1"], l["m2"])-min(l["m1"], l["m2"]), 4, "%v", plan)
	assert.NotEmpty(t, plan["m2"])
}

func TestPlanManyMembersManyStreams(t *testing.T) {
	w := map[string]int{}
	for i := range 40 {
		w[fmt.Sprintf("s%02d", i)] = 1 + i%3
	}
	var ms []sink.GroupMember
	for i := range 7 {
		ms = append(ms, sink.GroupMember{ID: fmt.Sprintf("m%d", i), Items: items(w)})
	}
	plan := Plan(ms)
	var ids []string
	for id := range w {
		ids = append(ids, id)
	}
	requireOneOwner(t, plan, ids)
	l := loads(plan, w)
	lo, hi := 1<<30, 0
	for _, v := range l {
		lo, hi = min(lo, v), max(hi, v)
	}
	assert.LessOrEqual(t, hi-lo, 3, "loads %v", l)
}

// A backfill worker of a live stream that nobody owns (its owner left,
// with stream c): m1 knows it is idle, m2 assumes it busy. The known weight
// wins, so the plan spreads the streams evenly; assumed busy, it would
// take m1's share of them, and once its run there reported 0 the next
// plan would move a stream to m1: a hand-over for nothing.
func TestPlanKnownWeightBeatsAssumed(t *testing.T) {
	streams := map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}
	m1 := append(items(streams), sink.GroupItem{ID: "c#backfill.0", Weight: 0, Known: true})
	m2 := append(items(streams), sink.GroupItem{ID: "c#backfill.0", Weight: 4})
	ms := []sink.GroupMember{
		{ID: "m1", Items: m1, Owned: []string{"a"}},
		{ID: "m2", Items: m2, Owned: []string{"b"}},
	}
	plan := Plan(ms)
	requireOneOwner(t, plan, []string{"a", "b", "c", "d", "c#backfill.0"})
	l := loads(plan, streams)
	assert.Equal(t, l["m1"], l["m2"], "%v", plan)

	// Once the worker runs at its new owner and weighs 0 there, the plan
	// stays: no stream moves.
	for i := range ms {
		ms[i].Owned = plan[ms[i].ID]
		for j, it := range ms[i].Items {
			if isWorker(it.ID) && slices.Contains(ms[i].Owned, it.ID) {
				ms[i].Items[j].Weight = 0
			}
		}
	}
	assert.Equal(t, plan, Plan(ms))
}

func isWorker(id string) bool { return strings.Contains(id, "#backfill.") }
