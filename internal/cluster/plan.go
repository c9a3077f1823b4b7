package cluster

import (
	"cmp"
	"maps"
	"slices"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// Plan decides who owns what (the group leader's sink.GroupPlanner): it
// keeps every stream with the member that owns it, gives each unowned
// stream to the least loaded member that can run it, then moves streams
// from the most to the least loaded member only while a move lowers the
// larger of the two loads. A member's load is the sum of its streams'
// weights; a stream's weight is its owner's report, else one a member
// knows (sink.GroupItem.Known), else the largest any member reports (its
// owner reports the backfill's extra weight). A stream goes only to a member
// whose configuration has it. Moves are what cost a hand-over, so the plan
// is sticky first and balanced second: a joining member takes streams from
// the busiest ones, a leaving member's streams go to the least busy.
func Plan(members []sink.GroupMember) map[string][]string {
	weight := map[string]int{}
	can := map[string][]int{} // stream → indexes of the members that have it
	for i, m := range members {
		for _, it := range m.Items {
			weight[it.ID] = max(weight[it.ID], it.Weight)
			can[it.ID] = append(can[it.ID], i)
		}
	}
	// A member that knows an item's weight beats those that assume one (a
	// backfill worker of a stream that has gone live weighs 0 at a member
	// that saw it go live, and the busy weight elsewhere); the owner knows
	// best, its report wins.
	for _, m := range members {
		for _, it := range m.Items {
			if it.Known {
				weight[it.ID] = it.Weight
			}
		}
	}
	for _, m := range members {
		for _, it := range m.Items {
			if slices.Contains(m.Owned, it.ID) {
				weight[it.ID] = it.Weight
			}
		}
	}
	owner := map[string]int{}
	load := make([]int, len(members))
	count := make([]int, len(members))
	give := func(id string, i int) {
		owner[id] = i
		load[i] += weight[id]
		count[i]++
	}
	take := func(id string) {
		i := owner[id]
		delete(owner, id)
		load[i] -= weight[id]
		count[i]--
	}
	for i, m := range members {
		for _, id := range m.Owned {
			if _, dup := owner[id]; !dup && slices.Contains(can[id], i) {
				give(id, i)
			}
		}
	}
	// The heaviest first, so that the light ones even the loads out.
	ids := slices.SortedFunc(maps.Keys(weight), func(a, b string) int {
		return cmp.Or(cmp.Compare(weight[b], weight[a]), cmp.Compare(a, b))
	})
	lighter := func(a, b int) bool {
		if load[a] != load[b] {
			return load[a] < load[b]
		}
		if count[a] != count[b] {
			return count[a] < count[b]
		}
		return members[a].ID < members[b].ID
	}
	for _, id := range ids {
		if _, ok := owner[id]; ok {
			continue
		}
		best := -1
		for _, i := range can[id] {
			if best < 0 || lighter(i, best) {
				best = i
			}
		}
		give(id, best)
	}
	// Even out: each move strictly lowers the sum of squared loads, so
	// this ends; the bound only guards against a bug.
	for range len(ids) * len(members) {
		moved := false
		for _, id := range ids {
			from := owner[id]
			w := weight[id]
			for _, to := range can[id] {
				if w > 0 && to != from && load[from]-load[to] > w {
					take(id)
					give(id, to)
					moved = true
					break
				}
			}
		}
		if !moved {
			break
		}
	}
	out := make(map[string][]string, len(members))
	for _, m := range members {
		out[m.ID] = []string{}
	}
	for _, id := range ids {
		m := members[owner[id]].ID
		out[m] = append(out[m], id)
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}
